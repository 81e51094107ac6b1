"""rcclx's reduction ops as torchcomms spells them (ReduceOp.SUM, ReduceOp.PREMUL_SUM(factor), .type),
and their translation into the operators' arguments (op name, factor, factor tensor)."""
import enum
import numbers

import torch

__all__ = ["RedOpType", "ReduceOp", "op_arguments"]

# The op names the operators take.
OP_NAMES = ("sum", "min", "max", "product", "avg", "premul_sum")


class RedOpType(enum.Enum):
    """The kind of a ReduceOp (torchcomms.RedOpType)."""
    SUM = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4
    BAND = 5
    BOR = 6
    BXOR = 7
    PREMUL_SUM = 8
    AVG = 9


_NAME_OF = {RedOpType.SUM: "sum", RedOpType.PRODUCT: "product", RedOpType.MIN: "min", RedOpType.MAX: "max",
            RedOpType.AVG: "avg", RedOpType.PREMUL_SUM: "premul_sum"}


class ReduceOp:
    """A reduction: ReduceOp.SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR (the bitwise ones are not
    implemented by rcclx), or ReduceOp.PREMUL_SUM(factor) with a number or a one-element tensor
    (read when the collective runs). `.type` is its RedOpType."""

    __slots__ = ("_type", "_factor")

    def __init__(self, type, factor=None):  # noqa: A002 (torchcomms' name)
        if not isinstance(type, RedOpType):
            raise TypeError(f"rcclx.ReduceOp: type must be a RedOpType (got {type!r})")
        if (factor is None) != (type is not RedOpType.PREMUL_SUM):
            raise ValueError("rcclx.ReduceOp: a factor is given with PREMUL_SUM and only with it")
        self._type = type
        self._factor = factor

    @property
    def type(self):
        return self._type

    @property
    def factor(self):
        """PREMUL_SUM's factor (a number or a one-element tensor); None for the other ops."""
        return self._factor

    @staticmethod
    def PREMUL_SUM(factor):  # noqa: N802 (torchcomms' name)
        if isinstance(factor, torch.Tensor):
            if factor.numel() != 1:
                raise ValueError(f"rcclx.ReduceOp.PREMUL_SUM: the factor tensor must have one element "
                                 f"(got {factor.numel()})")
        elif not isinstance(factor, numbers.Real) or isinstance(factor, bool):
            raise TypeError(f"rcclx.ReduceOp.PREMUL_SUM: the factor must be a number or a one-element tensor "
                            f"(got {type(factor).__name__})")
        return ReduceOp(RedOpType.PREMUL_SUM, factor)

    def __eq__(self, other):
        if not isinstance(other, ReduceOp):
            return NotImplemented
        if self._type is not other._type:
            return False
        return self._factor is other._factor or (
            not isinstance(self._factor, torch.Tensor) and self._factor == other._factor)

    def __hash__(self):
        return hash((self._type, None if isinstance(self._factor, torch.Tensor) else self._factor))

    def __repr__(self):
        if self._type is RedOpType.PREMUL_SUM:
            return f"ReduceOp.PREMUL_SUM({self._factor!r})"
        return f"ReduceOp.{self._type.name}"


for _t in RedOpType:
    if _t is not RedOpType.PREMUL_SUM:
        setattr(ReduceOp, _t.name, ReduceOp(_t))
del _t


def _from_dist(op):
    """torch.distributed.ReduceOp (or its RedOpType) -> ReduceOp, or None."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return None
    names = {"SUM": "SUM", "PRODUCT": "PRODUCT", "MIN": "MIN", "MAX": "MAX", "AVG": "AVG", "BAND": "BAND",
             "BOR": "BOR", "BXOR": "BXOR"}
    for name in names:
        if hasattr(dist.ReduceOp, name) and op == getattr(dist.ReduceOp, name):
            return getattr(ReduceOp, name)
    return None


def op_arguments(op, where):
    """(name, factor, factor_tensor) for the operators, from a ReduceOp, a torch.distributed.ReduceOp
    or a name ("sum", "min", "max", "product", "avg"; "premul_sum" has no factor by name: use
    ReduceOp.PREMUL_SUM(factor))."""
    if isinstance(op, str):
        if op in OP_NAMES and op != "premul_sum":
            return op, 1.0, None
        raise ValueError(f"{where}: op must be one of {OP_NAMES[:-1]}, an rcclx.ReduceOp or "
                         f"rcclx.ReduceOp.PREMUL_SUM(factor) (got {op!r})")
    if not isinstance(op, ReduceOp):
        converted = _from_dist(op)
        if converted is None:
            raise ValueError(f"{where}: op must be one of {OP_NAMES[:-1]}, an rcclx.ReduceOp or "
                             f"rcclx.ReduceOp.PREMUL_SUM(factor) (got {op!r})")
        op = converted
    name = _NAME_OF.get(op.type)
    if name is None:
        raise NotImplementedError(f"{where}: ReduceOp.{op.type.name} is not implemented by rcclx "
                                  f"(it takes SUM, PRODUCT, MIN, MAX, AVG and PREMUL_SUM)")
    if op.type is RedOpType.PREMUL_SUM:
        if isinstance(op.factor, torch.Tensor):
            return name, 1.0, op.factor
        return name, float(op.factor), None
    return name, 1.0, None

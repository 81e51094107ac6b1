"""rcclx as a backend of the real torchcomms (meta-pytorch/torchcomms), loaded through its entry-point
group "torchcomms.backends" (setup.py declares rcclx = rcclx._torchcomms_backend): importing this module
registers the class below with torchcomms.register_backend under the name "rcclx_shm" (torchcomms
ships a backend of its own named "rcclx", AMD's RCCLX library), then
torchcomms.new_comm("rcclx_shm", device, name=...) runs on rcclx.torchcomms.

This path is untested here (torchcomms is not installed on the machines rcclx is tested on): the
methods follow torchcomms' documented Python backend interface (TorchCommBackendPy.cpp: init,
finalize, get_rank, get_size, get_backend_name, get_comm_name and the collectives, each returning
None when complete). rcclx.torchcomms itself (import rcclx.torchcomms as torchcomms) is the tested way.
"""
import torchcomms as _tc  # the real torchcomms; ImportError when it is not installed

from . import torchcomms as _ours
from ._ops import RedOpType, ReduceOp

NAME = "rcclx_shm"


def _op(op):
    """torchcomms.ReduceOp -> rcclx.ReduceOp (by its type's name; PREMUL_SUM's factor where exposed)."""
    kind = RedOpType[op.type.name]
    if kind is RedOpType.PREMUL_SUM:
        factor = getattr(op, "factor", None)
        if factor is None:
            raise NotImplementedError("rcclx (torchcomms backend): PREMUL_SUM's factor is not readable from "
                                      "torchcomms' ReduceOp here; use rcclx.torchcomms directly")
        return ReduceOp.PREMUL_SUM(factor)
    return ReduceOp(kind)


class RcclxBackend(_tc.TorchCommBackend):
    def __init__(self):
        super().__init__()
        self._comm = None

    def init(self, device, name, options):
        self._comm = _ours.new_comm("rcclx", device, name=name, timeout=getattr(options, "timeout", None),
                                    store=getattr(options, "store", None), hints=dict(getattr(options, "hints", {})))

    def finalize(self):
        if self._comm is not None:
            self._comm.finalize()

    def get_rank(self):
        return self._comm.get_rank()

    def get_size(self):
        return self._comm.get_size()

    def get_backend_name(self):
        return NAME

    def get_comm_name(self):
        return self._comm.get_name()

    def all_reduce(self, tensor, op, async_op, *rest):
        self._comm.all_reduce(tensor, _op(op), async_op)

    def reduce(self, tensor, root, op, async_op, *rest):
        self._comm.reduce(tensor, root, _op(op), async_op)

    def broadcast(self, tensor, root, async_op, *rest):
        self._comm.broadcast(tensor, root, async_op)

    def barrier(self, async_op, *rest):
        self._comm.barrier(async_op)

    def all_gather(self, tensor_list, tensor, async_op, *rest):
        self._comm.all_gather(tensor_list, tensor, async_op)

    def all_gather_single(self, output, input, async_op, *rest):  # noqa: A002
        self._comm.all_gather_single(output, input, async_op)

    def reduce_scatter(self, output, input_list, op, async_op, *rest):
        self._comm.reduce_scatter(output, input_list, _op(op), async_op)

    def reduce_scatter_single(self, output, input, op, async_op, *rest):  # noqa: A002
        self._comm.reduce_scatter_single(output, input, _op(op), async_op)

    def all_to_all_single(self, output, input, async_op, *rest):  # noqa: A002
        self._comm.all_to_all_single(output, input, async_op)

    def all_to_all_v_single(self, output, input, output_split_sizes, input_split_sizes, async_op, *rest):  # noqa: A002
        self._comm.all_to_all_v_single(output, input, output_split_sizes, input_split_sizes, async_op)

    def all_to_all(self, output_tensor_list, input_tensor_list, async_op, *rest):
        self._comm.all_to_all(output_tensor_list, input_tensor_list, async_op)


if not getattr(_tc, "_is_backend_registered", lambda name: False)(NAME):
    _tc.register_backend(NAME, RcclxBackend)

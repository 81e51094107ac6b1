"""rcclx for PyTorch: collectives over a torch.distributed group, as torch operators.

    import torch.distributed as dist, rcclx
    dist.init_process_group("gloo")                # or "nccl"; any group works
    comm = rcclx.Communicator()                    # collective over the default group
    comm.all_reduce(t)                             # in place, as dist.all_reduce; returns t
    torch.ops.rcclx.all_reduce(t, comm.id, "sum", "automatic")   # the registered operator

The set-up exchange travels over the group (torch.distributed.all_gather_object): rcclx opens no
socket of its own. docs/pytorch.md.
"""
import contextlib
import enum
import os

import torch
import torch.distributed as dist

from . import _C  # registers torch.ops.rcclx.*

__all__ = ["Communicator", "ReduceOp", "new_comm", "backend", "max_ranks", "include_dir"]

backend = _C.backend      # "host" (CPU tensors, ranks as processes) or "cuda"
max_ranks = _C.max_ranks



def include_dir():
    """The rcclx headers (include/rcclx/...) for your own extension's include_dirs: the copy installed
    with this package, or the source tree's."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "include"), os.path.join(here, "..", "..", "include")):
        if os.path.isfile(os.path.join(d, "rcclx", "pytorch", "kernel_handles.hpp")):
            return os.path.abspath(d)
    raise RuntimeError("rcclx.include_dir: the rcclx headers are not installed with this package")


_OPS = ("sum", "min", "max")
_ALGORITHMS = ("flat", "tree", "low_precision", "automatic")


class ReduceOp(enum.Enum):
    """The torchcomms spelling (rcclx.ReduceOp.SUM)."""
    SUM = "sum"
    MIN = "min"
    MAX = "max"


def _op_name(op):
    if isinstance(op, ReduceOp):
        return op.value
    if isinstance(op, str) and op in _OPS:
        return op
    raise ValueError(f"rcclx: op must be one of {_OPS} or an rcclx.ReduceOp (got {op!r})")


def _algorithm_name(a):
    if a not in _ALGORITHMS:
        raise ValueError(f"rcclx: algorithm must be one of {_ALGORITHMS} (got {a!r})")
    return a


def _out_format(out_dtype):
    if out_dtype is None:
        return "same"
    if isinstance(out_dtype, str) and out_dtype in ("e4m3", "e5m2"):
        return out_dtype
    names = {getattr(torch, "float8_e4m3fn", None): "e4m3", getattr(torch, "float8_e5m2", None): "e5m2"}
    names.pop(None, None)
    if out_dtype in names:
        return names[out_dtype]
    raise ValueError(f"rcclx.all_reduce_rmsnorm: out_dtype must be None, torch.float8_e4m3fn, torch.float8_e5m2, "
                     f"\"e4m3\" or \"e5m2\" (got {out_dtype!r})")


class _Done:
    """The work object of an async_op=True call (the call has completed on return)."""

    def __init__(self, result):
        self._result = result

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def result(self):
        return self._result


class Communicator:
    """Every rank of `group` (None: the default group) constructs one, in the same order.

    buffer_bytes: the workspace each rank shares with its peers (default 8 MiB);
    timeout: seconds a rank waits for a peer before the call fails with an error naming it;
    check_calls: compare every call's arguments across ranks over the group before it runs (one
    all_gather_object per call: clear errors for mismatched calls, at the cost of a round trip over
    the group; default on);
    symmetric_bytes: the pool of symmetric_empty (default 64 MiB, allocated on first use);
    max_tiles: signal-pad slots kept for tile-protocol kernels (all_reduce_rmsnorm's tokens, your
    own kernels' tiles; default 2048, at most 3967).
    """

    def __init__(self, group=None, device=None, buffer_bytes=0, timeout=0.0, check_calls=True,
                 symmetric_bytes=0, max_tiles=0):
        if not dist.is_initialized():
            raise RuntimeError("rcclx.Communicator: torch.distributed is not initialized "
                               "(call torch.distributed.init_process_group first)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.num_ranks = dist.get_world_size(group)
        if not 2 <= self.num_ranks <= max_ranks:
            raise ValueError(f"rcclx.Communicator: the group has {self.num_ranks} ranks; rcclx takes 2..{max_ranks}")
        if backend == "host":
            self.device = torch.device("cpu")
            if device is not None and torch.device(device).type != "cpu":
                raise ValueError(f"rcclx.Communicator: this build of rcclx (host backend) takes CPU tensors, "
                                 f"not device {device}")
        else:
            d = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
            if d.type not in ("cuda", "hip"):
                raise ValueError(f"rcclx.Communicator: this build of rcclx takes GPU tensors, not device {d}")
            self.device = torch.device("cuda", d.index if d.index is not None else torch.cuda.current_device())
            torch.cuda.set_device(self.device)
        n = self.num_ranks

        def allgather(data: bytes) -> bytes:
            out = [None] * n
            dist.all_gather_object(out, data, group=group)
            return b"".join(out)

        self._allgather = allgather
        self.id = _C.create(self.rank, n, allgather, int(buffer_bytes), float(timeout),
                            1 if check_calls else 0, int(symmetric_bytes), int(max_tiles))

    def destroy(self):
        """Frees this rank's buffers (collective: every rank calls it)."""
        if getattr(self, "id", None) is not None:
            _C.destroy(self.id)
            self.id = None

    # ---- the torch.distributed spelling ----
    def all_reduce(self, t, op="sum", algorithm="automatic"):
        """In place, as torch.distributed.all_reduce; returns t. The same bits on every rank."""
        torch.ops.rcclx.all_reduce(t, self.id, _op_name(op), _algorithm_name(algorithm))
        return t

    def all_gather(self, out, t, algorithm="automatic"):
        """out: num_ranks x t.numel() elements, as torch.distributed.all_gather_into_tensor."""
        torch.ops.rcclx.all_gather(out, t, self.id, _algorithm_name(algorithm))
        return out

    def reduce_scatter(self, out, t, op="sum", algorithm="automatic"):
        """t: num_ranks x out.numel() elements, as torch.distributed.reduce_scatter_tensor."""
        torch.ops.rcclx.reduce_scatter(out, t, self.id, _op_name(op), _algorithm_name(algorithm))
        return out

    def all_to_all(self, out, t, algorithm="automatic"):
        """Equal splits, as torch.distributed.all_to_all_single."""
        torch.ops.rcclx.all_to_all(out, t, self.id, _algorithm_name(algorithm))
        return out

    def all_reduce_rmsnorm(self, x, residual, weight, eps=1e-6, out_dtype=None, scale=None, out=None,
                           algorithm="automatic"):
        """The decode epilogue in one kernel: residual += allreduce(x) (in place), then
        out = rmsnorm(residual) * weight; returns (out, residual). x, residual: [..., hidden] of one
        dtype (float32, bfloat16, float16), weight: [hidden]; residual and weight the same on every
        rank. out_dtype None: x's dtype; an FP8 dtype (torch.float8_e4m3fn / float8_e5m2, or the
        strings "e4m3" / "e5m2" with a uint8 output) writes FP8 codes of out / scale (scale: a
        float32 tensor of one element, default 1). The same bits on every rank; FP32 arithmetic."""
        fmt = _out_format(out_dtype)
        if out is None:
            if fmt == "same":
                out = torch.empty_like(x)
            else:
                dt = out_dtype if isinstance(out_dtype, torch.dtype) else torch.uint8
                out = torch.empty(x.shape, dtype=dt, device=x.device)
        if fmt != "same" and scale is None:
            scale = torch.ones(1, dtype=torch.float32, device=x.device)
        torch.ops.rcclx.all_reduce_rmsnorm(x, residual, weight, out, float(eps), self.id,
                                           _algorithm_name(algorithm), fmt, scale)
        return out, residual

    # ---- your own kernels ----
    def kernel_handles(self, t):
        """The device handles of the symmetric tensor t (a symmetric_empty tensor) for your own
        extension's kernels: a CPU uint8 tensor holding an rcclx::pytorch::kernel_handles record
        (include/rcclx/pytorch/kernel_handles.hpp): every rank's copy of t, the signal pads and the
        pad slots kept for tile-protocol kernels. Local (no exchange)."""
        return _C.kernel_handles(self.id, t)

    @property
    def tile_slots(self):
        """(first, max_tiles): the signal-pad slots kept for tile-protocol kernels."""
        return _C.tile_slots(self.id)

    # ---- symmetric tensors, graphs, errors ----
    def symmetric_empty(self, shape, dtype=torch.float32):
        """Collective (every rank, same order, same shape and dtype): an uninitialised tensor in this
        communicator's registered pool. Collectives on it read the peers' copies directly (no copy
        into the workspace). The pool is reused once none of its tensors is alive."""
        if isinstance(shape, int):
            shape = (shape,)
        return _C.symmetric_empty(self.id, [int(d) for d in shape], torch.empty(0, dtype=dtype))

    def is_symmetric(self, t):
        """Does t lie in this communicator's registered memory (symmetric_empty)?"""
        return _C.is_symmetric(self.id, t)

    @contextlib.contextmanager
    def graph_capture(self):
        """Wrap a CUDA graph capture that calls this communicator's collectives:

            g = torch.cuda.CUDAGraph()
            with comm.graph_capture(), torch.cuda.graph(g):
                comm.all_reduce(t)
            g.replay()

        The captured collectives read the peers' copies of their inputs directly; on leaving,
        every rank exchanges the handles of those buffers (collective)."""
        yield self
        _C.register_graph_buffers(self.id)

    def synchronize(self):
        """Waits for the current stream, then raises an error a kernel recorded (GPU builds: a peer
        that never arrived within the timeout). The host backend raises at the call itself."""
        _C.synchronize(self.id)

    # ---- the torchcomms spelling ----
    def allreduce(self, t, op=ReduceOp.SUM, async_op=False):
        self.all_reduce(t, op)
        return _Done(t) if async_op else None


def new_comm(device, name=None, group=None, **kwargs):
    """torchcomms' constructor: a Communicator over `group` (default: the torchrun job's default
    group, initialised here from the environment if needed)."""
    if not dist.is_initialized():
        dist.init_process_group("gloo" if backend == "host" else "nccl")
    c = Communicator(group=group, device=device, **kwargs)
    c.name = name
    return c

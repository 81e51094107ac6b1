"""rcclx as a torch.distributed backend: importing this module registers "rcclx" with
torch.distributed.Backend.register_backend, then

    import rcclx.distributed
    dist.init_process_group("rcclx", init_method=..., rank=r, world_size=n)   # or new_group(backend="rcclx")
    model = torch.nn.parallel.DistributedDataParallel(model)                # DDP over rcclx

ProcessGroupRcclx is a Python subclass of torch.distributed.ProcessGroup whose collectives run on an
rcclx.Communicator set up over the group's store. What reaches it:
 - torch >= 2 (the GPU machine): the creator returns a C++ c10d Backend (csrc/dist_backend.cpp) that
   calls the group's methods; torch builds its ProcessGroup around it for "cpu" and "cuda", so every
   caller goes through torch's dispatcher: DDP, functional collectives (DTensor), FSDP, dist.*.
 - torch 1.13 (Debian's python3-torch, CI): the creator returns the group itself. The trampoline of
   ProcessGroup lets C++ callers (DDP's reducer, its parameter broadcast and shape check) reach
   allreduce, allgather, broadcast, reduce_scatter, barrier, send and recv; the Python API
   (dist.reduce, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, ...) calls the
   group object's methods, so the others are reached from Python only.
Works have completed (host) or are ordered on the stream current at the call (GPU; wait() orders the
then-current stream after them); their future holds the result (DDP's comm hook reads it).
send / recv raise (rcclx has no point-to-point). docs/pytorch.md, section torch.distributed.
"""
import collections
import datetime
import itertools

import torch
import torch.distributed as dist

import rcclx as _rcclx
from ._ops import ReduceOp as _ReduceOp

__all__ = ["ProcessGroupRcclx", "BACKEND"]

BACKEND = "rcclx"

_Work = getattr(dist, "_Work", None) or getattr(dist, "Work")
_groups = itertools.count()


class _DoneWork(_Work):
    """A call that has completed (host) or is ordered on the stream that was current when it was
    made (GPU): wait() orders the then-current stream after it (a CUDA event), as NCCL's works do,
    so a caller that made the call on a side stream may consume the result on another."""

    def __init__(self, result=None):
        super().__init__()
        self._result = result if result is not None else []
        self._future = torch.futures.Future()
        self._future.set_result(self._result)
        self._event = None
        if any(isinstance(t, torch.Tensor) and t.is_cuda for t in _flat(self._result)):
            self._event = torch.cuda.Event()
            self._event.record()

    def is_completed(self):
        return self._event is None or self._event.query()

    def is_success(self):
        return True

    def wait(self, timeout=None):
        if self._event is not None:
            torch.cuda.current_stream().wait_event(self._event)
        return True

    def result(self):
        return self._result

    def get_future(self):
        return self._future


def _flat(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flat(y)
    else:
        yield x


_DIST_OPS = {}
for _name in ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR"):
    if hasattr(dist.ReduceOp, _name):
        _DIST_OPS[_name] = getattr(dist.ReduceOp, _name)


def _op(opts):
    """The rcclx op of a torch.distributed options object (its reduceOp; SUM without options)."""
    op = getattr(opts, "reduceOp", dist.ReduceOp.SUM) if opts is not None else dist.ReduceOp.SUM
    premul = getattr(dist.ReduceOp, "PREMUL_SUM", None)
    if premul is not None and _same_op(op, premul):
        # torch >= 2 pickles a PREMUL_SUM op as (type, factor); torch 1.13 keeps the factor out of reach.
        state = op.__getstate__() if hasattr(op, "__getstate__") else None
        if not isinstance(state, tuple) or len(state) != 2 or state[1] is None:
            raise NotImplementedError("rcclx (torch.distributed backend): this torch does not expose a "
                                      "PREMUL_SUM op's factor (torch >= 2 does); use rcclx.Communicator with "
                                      "rcclx.ReduceOp.PREMUL_SUM(factor)")
        return _ReduceOp.PREMUL_SUM(state[1])
    for name, value in _DIST_OPS.items():
        if _same_op(op, value):
            return getattr(_ReduceOp, name)
    raise NotImplementedError(f"rcclx (torch.distributed backend): reduce op {op!r} is not implemented "
                              f"(SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM)")


def _same_op(op, value):
    try:
        return bool(op == value)
    except (TypeError, RuntimeError):
        return False


def _one(tensors, what):
    if len(tensors) != 1:
        raise NotImplementedError(f"rcclx (torch.distributed backend): {what} takes one tensor per process "
                                  f"(got {len(tensors)})")
    return tensors[0]


def _no_grad_methods(cls):
    # torch.distributed's collectives are not recorded by autograd (dist.broadcast(param) is usual):
    # the communicator's refusal of tensors that require grad does not apply here.
    for name in ("allreduce", "allreduce_coalesced", "broadcast", "reduce", "allgather", "_allgather_base",
                 "all_gather_single", "allgather_into_tensor_coalesced", "all_gather_single_coalesced",
                 "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_single",
                 "reduce_scatter_tensor_coalesced", "reduce_scatter_single_coalesced", "alltoall_base",
                 "all_to_all_single", "alltoall", "scatter", "gather"):
        setattr(cls, name, torch.no_grad()(getattr(cls, name)))
    return cls


@_no_grad_methods
class ProcessGroupRcclx(dist.ProcessGroup):
    """A torch.distributed process group on an rcclx.Communicator (see the module's docstring)."""

    def __init__(self, store, rank, size, timeout=datetime.timedelta(seconds=300), communicator=None,
                 **communicator_options):
        super().__init__(rank, size)
        self._group_name, self._group_desc = "", ""
        # The last works handed out, kept alive: a C++ caller (DDP) holds only the C++ half of a Python
        # work, and once its Python object is gone, wait() would reach torch's base Work::wait, which
        # blocks until a completion this class never signals (torch 1.13's trampoline).
        self._recent = collections.deque(maxlen=64)
        self._forwarded = False  # called by the C++ backend of torch >= 2 (_create), which ignores our works
        if communicator is not None:  # a group over an existing rcclx.Communicator
            self._comm = communicator
            return
        k = next(_groups)
        self._comm = _rcclx.Communicator(store=dist.PrefixStore(f"rcclx.pg/{k}/", store), rank=rank,
                                         world_size=size, exchange_timeout=timeout.total_seconds(),
                                         **communicator_options)

    def _done(self, result):
        if self._forwarded:  # the C++ backend makes the work torch's callers get
            return None
        work = _DoneWork(result)
        self._recent.append(work)
        return work

    @classmethod
    def from_communicator(cls, comm):
        """A process group whose collectives run on `comm` (an rcclx.Communicator; not registered
        with torch.distributed: pass it as `group=` where torch takes a group object)."""
        return cls(None, comm.rank, comm.num_ranks, communicator=comm)

    @property
    def communicator(self):
        return self._comm

    # The group's name and description: torch >= 2 keeps them in the group's C++ backends, which a
    # Python group has none of (torch sets them after the creator returns; functional collectives
    # find the group by its name).
    def getGroupName(self):  # noqa: N802 (the C++ names)
        return self._group_name

    def setGroupName(self, name):  # noqa: N802
        self._group_name = name

    def getGroupDesc(self):  # noqa: N802
        return self._group_desc

    def setGroupDesc(self, desc):  # noqa: N802
        self._group_desc = desc

    def getBackendName(self):  # noqa: N802 (the C++ name)
        return BACKEND

    def _get_backend_name(self):
        return BACKEND

    def name(self):
        return BACKEND

    # ---- collectives (torch.distributed's ProcessGroup signatures) ----
    def allreduce(self, tensors, opts=None):
        op = _op(opts)
        for t in tensors:
            self._comm.all_reduce(_dense(t, "allreduce"), op)
        return self._done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=None):
        root = getattr(opts, "rootRank", 0)
        for t in tensors:
            self._comm.broadcast(_dense(t, "broadcast"), root)
        return self._done(tensors)

    def reduce(self, tensors, opts=None):
        root = getattr(opts, "rootRank", 0)
        op = _op(opts)
        for t in tensors:
            self._comm.reduce(_dense(t, "reduce"), root, op)
        return self._done(tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        for outs, t in zip(output_tensors, input_tensors):
            t = _dense(t, "allgather").contiguous()
            flat = torch.empty(self._comm.num_ranks * t.numel(), dtype=t.dtype, device=t.device)
            self._comm.all_gather(flat, t)
            for p, o in enumerate(outs):
                o.copy_(flat[p * t.numel():(p + 1) * t.numel()].reshape(o.shape))
        return self._done(output_tensors)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002
        return self.allgather_into_tensor_coalesced([output], [input], opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = _op(opts)
        for o, ins in zip(output_tensors, input_tensors):
            flat = torch.cat([i.reshape(-1) for i in ins])
            self._comm.reduce_scatter(o, flat, op)
        return self._done(output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002
        return self.reduce_scatter_tensor_coalesced([output], [input], opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._comm.all_gather(o, _apart(i, o))
        return self._done(outputs)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        op = _op(opts)
        for o, i in zip(outputs, inputs):
            self._comm.reduce_scatter(o, _apart(i, o), op)
        return self._done(outputs)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        self._comm.all_to_all_single(output, input.contiguous(), list(output_split_sizes) or None,
                                     list(input_split_sizes) or None)
        return self._done([output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        src = torch.cat([t.reshape(-1) for t in input_tensors])
        out = torch.empty(sum(t.numel() for t in output_tensors), dtype=src.dtype, device=src.device)
        self._comm.all_to_all_single(out, src, [t.numel() for t in output_tensors], [t.numel() for t in input_tensors])
        at = 0
        for t in output_tensors:
            t.copy_(out[at:at + t.numel()].reshape(t.shape))
            at += t.numel()
        return self._done(output_tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):
        """Rank root's i-th input to rank i: a broadcast of the root's inputs, each rank keeping its part."""
        root = getattr(opts, "rootRank", 0)
        out = _dense(_one(output_tensors, "scatter"), "scatter")
        n, k = self._comm.num_ranks, out.numel()
        if self._comm.rank == root:
            ins = _one(input_tensors, "scatter")
            if len(ins) != n or any(t.numel() != k for t in ins):
                raise ValueError(f"rcclx (torch.distributed backend): scatter: the root gives one tensor of "
                                 f"{k} elements per rank ({n}); got {[t.numel() for t in ins]}")
            flat = torch.cat([t.reshape(-1) for t in ins]).to(out.dtype)
        else:
            flat = torch.empty(n * k, dtype=out.dtype, device=out.device)
        self._comm.broadcast(flat, root)
        out.copy_(flat[self._comm.rank * k:(self._comm.rank + 1) * k].reshape(out.shape))
        return self._done(output_tensors)

    def gather(self, output_tensors, input_tensors, opts=None):
        """Every rank's input to rank root's outputs: an all_gather whose result the root keeps."""
        root = getattr(opts, "rootRank", 0)
        t = _dense(_one(input_tensors, "gather"), "gather").contiguous()
        flat = torch.empty(self._comm.num_ranks * t.numel(), dtype=t.dtype, device=t.device)
        self._comm.all_gather(flat, t)
        if self._comm.rank == root:
            outs = _one(output_tensors, "gather")
            for p, o in enumerate(outs):
                o.copy_(flat[p * t.numel():(p + 1) * t.numel()].reshape(o.shape))
        return self._done(output_tensors)

    # Coalescing (dist._coalescing_manager): every call runs when it is made, so the group's calls
    # between start and end are already done at the end.
    def start_coalescing(self, device=None):
        pass

    def end_coalescing(self, device=None):
        return self._done([])

    _start_coalescing = start_coalescing
    _end_coalescing = end_coalescing

    def barrier(self, opts=None):
        self._comm.barrier()
        return self._done([])

    # torch's newer names for the same collectives (the C++ caller reaches whichever this torch uses).
    all_gather_single = _allgather_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single = _reduce_scatter_base
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced
    all_to_all_single = alltoall_base

    def send(self, tensors, dst, tag=0):
        raise NotImplementedError("rcclx (torch.distributed backend): send is not implemented (no point-to-point)")

    def recv(self, tensors, src, tag=0):
        raise NotImplementedError("rcclx (torch.distributed backend): recv is not implemented (no point-to-point)")

    def recv_anysource(self, tensors, tag=0):
        raise NotImplementedError("rcclx (torch.distributed backend): recv is not implemented (no point-to-point)")

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """A barrier whose wait is bounded by `timeout` (a timedelta; None: the group's), naming the
        ranks that did not arrive."""
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        with self._comm.call_timeout(seconds, "rcclx.distributed.ProcessGroupRcclx.monitored_barrier"):
            return self.barrier()


def _apart(t, out):
    """t, contiguous and in memory apart from `out`: the in-place forms torch's callers use (FSDP's
    all_gather_into_tensor from this rank's slice of the output) get a copy of the input."""
    t = t.contiguous()
    a, b = t.data_ptr(), out.data_ptr()
    if a < b + out.numel() * out.element_size() and b < a + t.numel() * t.element_size():
        return t.clone()
    return t


def _dense(t, what):
    if not t.is_contiguous():
        raise RuntimeError(f"rcclx (torch.distributed backend): {what}: the tensor must be contiguous")
    return t


def _create(store, rank, size, timeout):
    group = ProcessGroupRcclx(store, rank, size, timeout)
    if _BACKENDS:
        # torch >= 2: a C++ c10d Backend calling the group's methods (csrc/dist_backend.cpp), inside
        # the ProcessGroup torch builds: every caller reaches it through torch's dispatcher.
        group._forwarded = True
        return _rcclx._C.make_dist_backend(group, rank, size)
    return group


# Does this torch build its groups from c10d Backends (torch >= 2)? Then the creator returns one.
_BACKENDS = hasattr(dist.ProcessGroup, "_register_backend") and hasattr(_rcclx._C, "make_dist_backend")


def _register():
    if hasattr(dist.Backend, BACKEND.upper()):
        return
    try:
        dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])  # torch >= 2.0
    except TypeError:
        dist.Backend.register_backend(BACKEND, _create)  # torch 1.13


_register()

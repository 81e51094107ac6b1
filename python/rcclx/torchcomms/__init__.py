"""torchcomms' Python API over rcclx: a torchcomms program runs unchanged with

    import rcclx.torchcomms as torchcomms
    comm = torchcomms.new_comm("rcclx", torch.device("cpu"), name="main")
    work = comm.all_reduce(t, torchcomms.ReduceOp.SUM, async_op=False)   # a TorchWork, also here
    work.wait()
    comm.finalize()

The names, signatures and defaults are meta-pytorch/torchcomms' (its _comms.pyi and TorchCommPy.cpp);
what rcclx cannot do raises NotImplementedError naming it (send/recv, windows, hooks, ...).
Rank and world size come from the launcher's environment as torchcomms reads them (RANK and
WORLD_SIZE, TORCHCOMM_RANK / TORCHCOMM_SIZE, OMPI_COMM_WORLD_*, PMI_*, SLURM_*), or from
torch.distributed when it is initialised. The exchange (set-up and per-call checks) travels over
`store` if given, else the default process group's store, else one TCPStore per process on
MASTER_ADDR:MASTER_PORT (rank 0 serves it). Every collective runs to completion before it returns
(host backend) or is enqueued on the current stream (GPU), so a TorchWork is complete at once.
docs/pytorch.md, section torchcomms.
"""
import datetime
import enum
import functools
import inspect
import itertools
import os
import threading

import torch
import torch.distributed as dist

import rcclx as _rcclx
from .._ops import RedOpType, ReduceOp

__all__ = ["new_comm", "TorchComm", "ReduceOp", "RedOpType", "TorchWork", "WorkStatus", "CommOptions",
           "Timeout", "BatchP2POptions", "BatchSendRecv", "P2POp", "P2POpType", "register_backend",
           "TorchCommBackend", "is_backend_built", "built_backends"]

BACKEND = "rcclx"


class Timeout(datetime.timedelta):
    """torchcomms.Timeout (a timedelta)."""


class WorkStatus(enum.Enum):
    NOT_STARTED = 1
    INPROGRESS = 2
    COMPLETED = 3
    TIMEDOUT = 4
    ERROR = 5


class TorchWork:
    """The work of a call: rcclx's calls have completed (host) or are ordered on the current stream
    (GPU) when they return, so wait() returns at once and is_completed() is True."""

    def __init__(self, tensors=()):
        self._tensors = tensors  # kept alive as long as the work, as torchcomms does
        self._status = WorkStatus.COMPLETED

    def is_completed(self):
        return self._status is WorkStatus.COMPLETED

    def wait(self):
        return None

    def wait_blocking(self):
        return None

    def _set_status(self, status):
        self._status = status


class _Options:
    def __init__(self):
        self.timeout = datetime.timedelta(seconds=600)
        self.hints = {}


class CommOptions:
    def __init__(self):
        self.abort_process_on_timeout_or_error = True
        self.timeout = datetime.timedelta(seconds=600)
        self.store = None
        self.name = ""
        self.enable_reconfigure = False
        self.hints = {}

    def __repr__(self):
        return (f"CommOptions(abort_process_on_timeout_or_error={self.abort_process_on_timeout_or_error}, "
                f"timeout={self.timeout}, name={self.name!r}, hints={self.hints})")


class BatchP2POptions(_Options):
    pass


class P2POpType(enum.Enum):
    SEND = 1
    RECV = 2


class P2POp:
    def __init__(self, type, tensor, peer):  # noqa: A002 (torchcomms' name)
        self.type, self.tensor, self.peer = type, tensor, peer


class BatchSendRecv:
    def __init__(self):
        raise NotImplementedError("rcclx.torchcomms: BatchSendRecv (point-to-point) is not implemented by rcclx")


class TorchCommBackend:
    """torchcomms' base class of Python backends; rcclx.torchcomms has one backend, its own."""


def register_backend(name, backend_class):
    raise NotImplementedError("rcclx.torchcomms: register_backend: this module implements the backend "
                              "\"rcclx\" only; install torchcomms for other backends")


def is_backend_built(backend):
    return backend == BACKEND


def built_backends():
    return [BACKEND]


def _env_int(*names):
    for n in names:
        v = os.environ.get(n)
        if v is not None:
            return int(v)
    return None


def _rank_and_size():
    """As torchcomms' launchers set them (the first pair found)."""
    for r, s in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("TORCHCOMM_RANK", "TORCHCOMM_SIZE"),
                 ("SLURM_PROCID", "SLURM_NTASKS"), ("PMI_RANK", "PMI_SIZE"), ("RANK", "WORLD_SIZE")):
        rank, size = _env_int(r), _env_int(s)
        if rank is not None and size is not None:
            return rank, size
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    raise RuntimeError("rcclx.torchcomms.new_comm: the rank and world size are not in the environment (RANK and "
                       "WORLD_SIZE, TORCHCOMM_RANK and TORCHCOMM_SIZE, ...) and torch.distributed is not initialised")


_root_store = None
_root_lock = threading.Lock()
_comm_ids = itertools.count()


def _default_store(rank, size, timeout):
    """The default group's store, or this process's TCPStore on MASTER_ADDR:MASTER_PORT."""
    global _root_store
    if dist.is_initialized():
        return dist.distributed_c10d._get_default_store()
    with _root_lock:
        if _root_store is None:
            host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
            if host is None or port is None:
                raise RuntimeError("rcclx.torchcomms.new_comm: no store given, torch.distributed is not initialised "
                                   "and MASTER_ADDR / MASTER_PORT are not set")
            _root_store = dist.TCPStore(host, int(port), size, rank == 0, timeout, wait_for_workers=False)
        return _root_store


def _seconds(t):
    if t is None:
        return None
    return t.total_seconds() if isinstance(t, datetime.timedelta) else float(t)


_HINTS = {"buffer_bytes": int, "check_calls": lambda v: str(v).lower() not in ("0", "false", "no", "off"),
          "symmetric_bytes": int, "max_tiles": int, "algorithm": str}


def new_comm(backend, device, name=None, abort_process_on_timeout_or_error=None, timeout=None,
             is_high_priority_stream=None, store=None, enable_reconfigure=False, hints=None):
    """torchcomms.new_comm: collective over every rank of the job (every rank calls it, in the same
    order). backend: "rcclx". timeout bounds every wait of the communicator (its exchanges and its
    kernels' waits for a peer; default: 600 s for the exchanges, the library's 10 s in a kernel).
    hints: "rcclx::buffer_bytes", "rcclx::check_calls", "rcclx::symmetric_bytes", "rcclx::max_tiles",
    "rcclx::algorithm" (the prefix may be left out); other hints are ignored, as torchcomms' backends do."""
    if backend != BACKEND:
        raise ValueError(f"rcclx.torchcomms.new_comm: this module implements the backend \"rcclx\" only "
                         f"(got {backend!r}); use torchcomms itself for other backends")
    if enable_reconfigure:
        raise NotImplementedError("rcclx.torchcomms.new_comm: enable_reconfigure (fault tolerance) is not "
                                  "implemented by rcclx")
    rank, size = _rank_and_size()
    wait_s = _seconds(timeout)
    options = CommOptions()
    if abort_process_on_timeout_or_error is not None:
        options.abort_process_on_timeout_or_error = bool(abort_process_on_timeout_or_error)
    if timeout is not None:
        options.timeout = datetime.timedelta(seconds=wait_s)
    options.hints = dict(hints or {})
    k = next(_comm_ids)
    options.name = name if name is not None else f"rcclx_comm_{k}"
    kwargs = {}
    for key, value in options.hints.items():
        short = key[len("rcclx::"):] if key.startswith("rcclx::") else key
        if short in _HINTS:
            kwargs[short] = _HINTS[short](value)
    algorithm = kwargs.pop("algorithm", "automatic")
    base = store if store is not None else _default_store(rank, size, options.timeout)
    options.store = store
    prefix = dist.PrefixStore(f"rcclx.torchcomms/{k}/{options.name}/", base)
    comm = _rcclx.Communicator(device=device, timeout=wait_s or 0.0, store=prefix, rank=rank, world_size=size,
                               exchange_timeout=options.timeout.total_seconds(), **kwargs)
    return TorchComm(comm, options, algorithm, prefix)


def _flat(t):
    return t.reshape(-1)


def _per_call_timeout(cls):
    """The collectives' `timeout` (a timedelta or seconds; None: the communicator's) bounds the waits
    of the call's exchanges (Communicator.call_timeout), and their errors name the call as torchcomms
    spells it."""
    def wrap(name, f):
        at = list(inspect.signature(f).parameters).index("timeout") - 1  # its place after self

        @functools.wraps(f)
        def call(self, *args, **kwargs):
            t = kwargs.get("timeout") if "timeout" in kwargs else args[at] if len(args) > at else None
            with self._comm.call_timeout(_seconds(t), f"rcclx.torchcomms.TorchComm.{name}"):
                return f(self, *args, **kwargs)
        return call

    for name in _COLLECTIVES:
        setattr(cls, name, wrap(name, getattr(cls, name)))
    return cls


_COLLECTIVES = ("all_reduce", "reduce", "broadcast", "barrier", "all_gather_single", "all_gather", "all_gather_v",
                "reduce_scatter_single", "reduce_scatter", "reduce_scatter_v", "all_to_all_single",
                "all_to_all_v_single", "all_to_all", "scatter", "gather", "gather_single")


@_per_call_timeout
class TorchComm:
    """torchcomms.TorchComm over an rcclx.Communicator. Every collective takes torchcomms' arguments
    (async_op positional, hints and timeout optional) and returns a TorchWork. A call's `timeout`
    bounds its exchanges (the call check, the split sizes); a kernel's wait for a peer stays bounded
    by the communicator's timeout (new_comm's)."""

    def __init__(self, comm, options, algorithm="automatic", store=None):
        self._comm = comm
        self._options = options
        self._algorithm = algorithm
        self._store = store
        self._finalized = False
        self._splits = itertools.count()

    # ---- the communicator ----
    def _c(self, what):
        if self._finalized:
            raise RuntimeError(f"rcclx.torchcomms.TorchComm.{what}: the communicator {self._options.name!r} was "
                               f"finalized (finalize() was called); create a new one with new_comm")
        return self._comm

    def finalize(self):
        """Frees the communicator (collective). Later calls raise an error naming it."""
        if not self._finalized:
            self._comm.destroy()
            self._finalized = True

    def get_rank(self):
        return self._comm.rank

    def get_size(self):
        return self._comm.num_ranks

    def get_name(self):
        return self._options.name

    def get_options(self):
        return self._options

    def get_device(self):
        return self._comm.device

    def get_backend(self):
        return BACKEND

    def get_backend_version(self):
        return "0.1.0"

    def get_backend_impl(self):
        return self._comm

    def unsafe_get_backend(self):
        return self._comm

    def get_init_handle(self):
        raise NotImplementedError("rcclx.torchcomms: get_init_handle (reconfigure) is not implemented by rcclx")

    def reconfigure(self, uuid, init_handles, timeout=None, hints=None):
        raise NotImplementedError("rcclx.torchcomms: reconfigure is not implemented by rcclx")

    def abort(self):
        raise NotImplementedError("rcclx.torchcomms: abort is not implemented by rcclx (finalize instead)")

    def is_abort_supported(self):
        return False

    def is_aborted(self):
        return False

    def set_timeout(self, timeout):
        raise NotImplementedError("rcclx.torchcomms: set_timeout: rcclx's timeout is fixed when the communicator is "
                                  "created (new_comm(timeout=...))")

    def set_hints(self, hints):
        self._options.hints.update(hints)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    # ---- collectives ----
    def all_reduce(self, tensor, op, async_op, hints=None, timeout=None):
        self._c("all_reduce").all_reduce(tensor, op, self._algorithm)
        return TorchWork((tensor,))

    def reduce(self, tensor, root, op, async_op, hints=None, timeout=None):
        self._c("reduce").reduce(tensor, root, op, self._plain())
        return TorchWork((tensor,))

    def broadcast(self, tensor, root, async_op, hints=None, timeout=None):
        self._c("broadcast").broadcast(tensor, root, self._plain())
        return TorchWork((tensor,))

    def barrier(self, async_op, hints=None, timeout=None):
        self._c("barrier").barrier()
        return TorchWork()

    def all_gather_single(self, output, input, async_op, hints=None, timeout=None):  # noqa: A002
        c = self._c("all_gather_single")
        if output.numel() != input.numel() * c.num_ranks:
            raise RuntimeError(f"rcclx.torchcomms.all_gather_single: the output has {output.numel()} elements; it "
                               f"needs num_ranks x input = {c.num_ranks} x {input.numel()}")
        c.all_gather(output, input.contiguous(), self._algorithm)
        return TorchWork((output, input))

    def all_gather(self, tensor_list, tensor, async_op, hints=None, timeout=None):
        c = self._c("all_gather")
        self._check_list("all_gather", "tensor_list", tensor_list, tensor.numel())
        out = torch.empty(c.num_ranks * tensor.numel(), dtype=tensor.dtype, device=tensor.device)
        c.all_gather(out, tensor.contiguous(), self._algorithm)
        for p, t in enumerate(tensor_list):
            _flat_copy(t, out[p * tensor.numel():(p + 1) * tensor.numel()])
        return TorchWork((tensor,) + tuple(tensor_list))

    def all_gather_v(self, tensor_list, tensor, async_op, hints=None, timeout=None):
        """Every rank's tensor (sizes may differ: tensor_list[p] has rank p's size), through the uneven
        AlltoAll (this rank's tensor sent to every rank)."""
        c = self._c("all_gather_v")
        n = c.num_ranks
        self._check_count("all_gather_v", "tensor_list", tensor_list)
        src = tensor.contiguous().reshape(-1)
        out = torch.empty(sum(t.numel() for t in tensor_list), dtype=tensor.dtype, device=tensor.device)
        c.all_to_all_single(out, src.repeat(n), [t.numel() for t in tensor_list], [src.numel()] * n)
        _scatter_into(tensor_list, out)
        return TorchWork((tensor,) + tuple(tensor_list))

    def reduce_scatter_single(self, output, input, op, async_op, hints=None, timeout=None):  # noqa: A002
        c = self._c("reduce_scatter_single")
        if input.numel() != output.numel() * c.num_ranks:
            raise RuntimeError(f"rcclx.torchcomms.reduce_scatter_single: the input has {input.numel()} elements; it "
                               f"needs num_ranks x output = {c.num_ranks} x {output.numel()}")
        c.reduce_scatter(output, input.contiguous(), op, self._algorithm)
        return TorchWork((output, input))

    def reduce_scatter(self, output, input_list, op, async_op, hints=None, timeout=None):
        c = self._c("reduce_scatter")
        self._check_list("reduce_scatter", "input_list", input_list, output.numel())
        src = torch.cat([_flat(t) for t in input_list]) if input_list else output.new_empty(0)
        c.reduce_scatter(output, src, op, self._algorithm)
        return TorchWork((output,) + tuple(input_list))

    def reduce_scatter_v(self, output, input_list, op, async_op, hints=None, timeout=None):
        """Blocks of different sizes: an AllReduce of the concatenation (the same bits as a
        ReduceScatter), this rank's block copied out."""
        c = self._c("reduce_scatter_v")
        self._check_count("reduce_scatter_v", "input_list", input_list)
        if input_list[c.rank].numel() != output.numel():
            raise RuntimeError(f"rcclx.torchcomms.reduce_scatter_v: input_list[{c.rank}] has "
                               f"{input_list[c.rank].numel()} elements, the output {output.numel()}")
        whole = torch.cat([_flat(t) for t in input_list])
        c.all_reduce(whole, op, self._algorithm)
        at = sum(t.numel() for t in input_list[:c.rank])
        _flat_copy(output, whole[at:at + output.numel()])
        return TorchWork((output,) + tuple(input_list))

    def all_to_all_single(self, output, input, async_op, hints=None, timeout=None):  # noqa: A002
        c = self._c("all_to_all_single")
        if output.numel() != input.numel() or input.numel() % c.num_ranks:
            raise RuntimeError(f"rcclx.torchcomms.all_to_all_single: the input has {input.numel()} elements and the "
                               f"output {output.numel()}; both need the same multiple of num_ranks = {c.num_ranks}")
        c.all_to_all(output, input.contiguous(), self._algorithm)
        return TorchWork((output, input))

    def all_to_all_v_single(self, output, input, output_split_sizes, input_split_sizes, async_op, hints=None,  # noqa: A002
                            timeout=None):
        c = self._c("all_to_all_v_single")
        c.all_to_all_single(output, input.contiguous(), list(output_split_sizes), list(input_split_sizes))
        return TorchWork((output, input))

    def all_to_all(self, output_tensor_list, input_tensor_list, async_op, hints=None, timeout=None):
        c = self._c("all_to_all")
        self._check_count("all_to_all", "output_tensor_list", output_tensor_list)
        self._check_count("all_to_all", "input_tensor_list", input_tensor_list)
        like = input_tensor_list[0]
        src = torch.cat([_flat(t) for t in input_tensor_list])
        out = torch.empty(sum(t.numel() for t in output_tensor_list), dtype=like.dtype, device=like.device)
        c.all_to_all_single(out, src, [t.numel() for t in output_tensor_list], [t.numel() for t in input_tensor_list])
        _scatter_into(output_tensor_list, out)
        return TorchWork(tuple(output_tensor_list) + tuple(input_tensor_list))

    def scatter(self, output_tensor, input_tensor_list, root, async_op, hints=None, timeout=None):
        """The root's input_tensor_list[p] to rank p (the uneven AlltoAll with the root's rows only)."""
        c = self._c("scatter")
        c._check_root("scatter", root)
        n, mine = c.num_ranks, c.rank == root
        if mine:
            self._check_count("scatter", "input_tensor_list", input_tensor_list)
            src = torch.cat([_flat(t) for t in input_tensor_list])
            in_splits = [t.numel() for t in input_tensor_list]
        else:
            src, in_splits = output_tensor.new_empty(0), [0] * n
        out_splits = [output_tensor.numel() if p == root else 0 for p in range(n)]
        out = torch.empty(output_tensor.numel(), dtype=output_tensor.dtype, device=output_tensor.device)
        c.all_to_all_single(out, src, out_splits, in_splits)
        _flat_copy(output_tensor, out)
        return TorchWork((output_tensor,) + tuple(input_tensor_list or ()))

    def gather(self, output_tensor_list, input_tensor, root, async_op, hints=None, timeout=None):
        """Every rank's input_tensor into the root's output_tensor_list (the uneven AlltoAll)."""
        c = self._c("gather")
        c._check_root("gather", root)
        n, mine = c.num_ranks, c.rank == root
        src = input_tensor.contiguous().reshape(-1)
        in_splits = [src.numel() if p == root else 0 for p in range(n)]
        if mine:
            self._check_count("gather", "output_tensor_list", output_tensor_list)
            out_splits = [t.numel() for t in output_tensor_list]
        else:
            out_splits = [0] * n
        out = torch.empty(sum(out_splits), dtype=src.dtype, device=src.device)
        c.all_to_all_single(out, src, out_splits, in_splits)
        if mine:
            _scatter_into(output_tensor_list, out)
        return TorchWork((input_tensor,) + tuple(output_tensor_list or ()))

    def gather_single(self, output, input, root, async_op, hints=None, timeout=None):  # noqa: A002
        c = self._c("gather_single")
        chunks = list(output.reshape(-1).chunk(c.num_ranks)) if c.rank == root else []
        if c.rank == root and output.numel() != input.numel() * c.num_ranks:
            raise RuntimeError(f"rcclx.torchcomms.gather_single: the output has {output.numel()} elements; it needs "
                               f"num_ranks x input = {c.num_ranks} x {input.numel()}")
        self.gather(chunks, input, root, async_op)
        return TorchWork((output, input))

    def split(self, ranks, name, hints=None, timeout=None):
        """A communicator of `ranks` (every rank of this one calls it; a rank not in `ranks` gets None)."""
        c = self._c("split")
        k = next(self._splits)
        ranks = [int(r) for r in ranks]
        if c.rank not in ranks:
            return None
        options = CommOptions()
        options.timeout, options.name = self._options.timeout, name
        options.hints = dict(self._options.hints, **(hints or {}))
        store = dist.PrefixStore(f"split/{k}/{','.join(map(str, ranks))}/", self._store)
        comm = _rcclx.Communicator(device=c.device, store=store, rank=ranks.index(c.rank), world_size=len(ranks),
                                   exchange_timeout=options.timeout.total_seconds())
        return TorchComm(comm, options, self._algorithm, store)

    # ---- what rcclx does not do ----
    def _not_implemented(self, what):
        raise NotImplementedError(f"rcclx.torchcomms.TorchComm.{what} is not implemented by rcclx (collectives "
                                  f"only: no point-to-point, windows or hooks)")

    def send(self, tensor, dst, async_op, hints=None, timeout=None):
        self._not_implemented("send")

    def recv(self, tensor, src, async_op, hints=None, timeout=None):
        self._not_implemented("recv")

    def batch_op_create(self):
        self._not_implemented("batch_op_create")

    def new_window(self, tensor=None):
        self._not_implemented("new_window")

    def all_gather_p_init(self, output, hints=None, timeout=None):
        self._not_implemented("all_gather_p_init")

    def all_gather_p_exec(self, handle, input, async_op, hints=None, timeout=None):  # noqa: A002
        self._not_implemented("all_gather_p_exec")

    def all_gather_p_free(self, handle):
        self._not_implemented("all_gather_p_free")

    def get_mem_allocator(self):
        self._not_implemented("get_mem_allocator")

    @property
    def mem_allocator(self):
        return self._not_implemented("mem_allocator")

    def register_pre_hook(self, callback):
        self._not_implemented("register_pre_hook")

    def register_post_hook(self, callback):
        self._not_implemented("register_post_hook")

    def register_abort_hook(self, callback):
        self._not_implemented("register_abort_hook")

    def tensor_register(self, tensor):
        self._not_implemented("tensor_register")

    def tensor_deregister(self, tensor):
        self._not_implemented("tensor_deregister")

    # ---- helpers ----
    def _plain(self):
        return "automatic" if self._algorithm == "low_precision" else self._algorithm

    def _check_count(self, what, name, tensors):
        n = self._comm.num_ranks
        if tensors is None or len(tensors) != n:
            raise RuntimeError(f"rcclx.torchcomms.{what}: {name} has {0 if tensors is None else len(tensors)} "
                               f"tensors; it needs num_ranks = {n}")

    def _check_list(self, what, name, tensors, numel):
        self._check_count(what, name, tensors)
        for p, t in enumerate(tensors):
            if t.numel() != numel:
                raise RuntimeError(f"rcclx.torchcomms.{what}: {name}[{p}] has {t.numel()} elements; every one needs "
                                   f"{numel}")


def _flat_copy(dst, src):
    dst.copy_(src.reshape(dst.shape))


def _scatter_into(tensors, flat):
    at = 0
    for t in tensors:
        _flat_copy(t, flat[at:at + t.numel()])
        at += t.numel()

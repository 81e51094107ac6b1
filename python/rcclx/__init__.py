"""rcclx for PyTorch: collectives over a torch.distributed group, as torch operators.

    import torch.distributed as dist, rcclx
    dist.init_process_group("gloo")                # or "nccl"; any group works
    comm = rcclx.Communicator()                    # collective over the default group
    comm.all_reduce(t)                             # in place, as dist.all_reduce; returns t
    torch.ops.rcclx.all_reduce(t, comm.id, "sum", "automatic")   # the registered operator

The exchanges (the set-up, each call's check) travel over a torch.distributed Store: the default
group's (Communicator(group=...)) or the one given (Communicator(store=...)); every wait is bounded
by the communicator's timeout. rcclx opens no socket of its own.
rcclx.torchcomms is torchcomms' API over it; rcclx.distributed the torch.distributed backend.
docs/pytorch.md.
"""
import contextlib
import math
import os
import threading

import torch
import torch.distributed as dist

from . import _C  # registers torch.ops.rcclx.*
from ._exchange import StoreAllgather, group_allgather, group_store
from ._ops import RedOpType, ReduceOp, op_arguments

__all__ = ["Communicator", "ReduceOp", "RedOpType", "new_comm", "backend", "max_ranks", "include_dir"]

backend = _C.backend      # "host" (CPU tensors, ranks as processes) or "cuda"
max_ranks = _C.max_ranks

# The dtypes the collectives take (low_precision: float32 and bfloat16).
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool)


def include_dir():
    """The rcclx headers (include/rcclx/...) for your own extension's include_dirs: the copy installed
    with this package, or the source tree's."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "include"), os.path.join(here, "..", "..", "include")):
        if os.path.isfile(os.path.join(d, "rcclx", "pytorch", "kernel_handles.hpp")):
            return os.path.abspath(d)
    raise RuntimeError("rcclx.include_dir: the rcclx headers are not installed with this package")


_ALGORITHMS = ("flat", "tree", "low_precision", "automatic")


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


def _widened(name, t):
    """avg of int8 / uint8 (which the library does not reduce) runs on an int32 copy: the exact sum,
    divided by the rank count and truncated toward zero, narrowed back (modulo 2^8)."""
    return name == "avg" and t.dtype in (torch.int8, torch.uint8)


def _single_rank_reduce(t, name, factor, factor_tensor):
    """The reduction over one rank, as rcclx computes it (fp32 for 16-bit floats)."""
    if name == "premul_sum":
        if t.dtype in (torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool):
            raise RuntimeError(f"rcclx: op = premul_sum is not defined for {t.dtype} elements")
        f = factor_tensor.reshape(()).to(t.dtype) if factor_tensor is not None else factor
        if t.dtype == torch.float64:
            t.mul_(f)
        else:
            f = f.float() if isinstance(f, torch.Tensor) else float(torch.tensor(f, dtype=torch.float32))
            t.copy_(t.float() * f)
    return t


def _stream_handle(index):
    """The current stream's handle as an int (torch >= 2's _cuda_getCurrentRawStream, cheaper than
    torch.cuda.current_stream()), or None where this torch has none that answers one."""
    global _raw_stream_fn
    if _raw_stream_fn is False:
        return None
    try:
        h = _raw_stream_fn(index)
        if isinstance(h, int):
            return h
    except Exception:  # noqa: BLE001 (any failure: the plain path from then on)
        pass
    _raw_stream_fn = False
    return None


_raw_stream_fn = getattr(torch._C, "_cuda_getCurrentRawStream", None) or False


class _Call:
    """A call of a Communicator: holds its lock, and names the call (and the per-call timeout of
    call_timeout) to the exchanges it makes, for their errors."""
    __slots__ = ("comm", "what", "saved")

    def __init__(self, comm, what):
        self.comm, self.what = comm, what

    def __enter__(self):
        c = self.comm
        c._lock.acquire()
        if backend == "cuda":
            # The calls share the communicator's workspace and pads: one on another stream than the
            # call before it (FSDP's all-gather and reduce-scatter streams) waits for that stream's
            # work so far, as one NCCL communicator orders its calls. Nothing to do on one stream.
            raw = _stream_handle(c.device.index)
            if raw is None or raw != c._raw_stream:
                s = torch.cuda.current_stream()
                if c._stream is not None and c._stream != s:
                    e = torch.cuda.Event()
                    e.record(c._stream)
                    s.wait_event(e)
                c._stream, c._raw_stream = s, raw
        ag = c._allgather
        if isinstance(ag, StoreAllgather):
            self.saved = (ag.call, ag.limit)
            label, limit = c._scope
            name = f"rcclx.Communicator.{self.what}"
            ag.call = name if label is None else f"{label} ({name})"
            ag.limit = limit
        return self

    def __exit__(self, *exc):
        c = self.comm
        ag = c._allgather
        if isinstance(ag, StoreAllgather):
            ag.call, ag.limit = self.saved
        c._lock.release()
        return False


class Communicator:
    """Every rank of `group` (None: the default group) constructs one, in the same order.

    buffer_bytes: the workspace each rank shares with its peers (default 8 MiB);
    timeout: seconds a rank waits for a peer before the call fails with an error naming it and the
    call: in a kernel (default 10 s) and in the exchanges (the set-up, each call's check; default
    300 s: exchange_timeout, where given, bounds those instead); call_timeout(seconds) bounds the
    exchanges of the calls made in its block;
    check_calls: compare every call's arguments across ranks before it runs (one exchange per call:
    clear errors for mismatched calls, at the cost of a round trip; default on);
    symmetric_bytes: the pool of symmetric_empty (default 64 MiB, allocated on first use);
    max_tiles: signal-pad slots kept for tile-protocol kernels (all_reduce_rmsnorm's tokens, your
    own kernels' tiles; default 2048, at most 3967).
    The exchanges go over a torch.distributed Store: over a group, the default group's store under
    a prefix naming the group and this communicator's place among those built over it; or `store`,
    `rank` and `world_size` (torch.distributed need not be initialised). A wait that ends at the
    timeout names the call and the ranks that did not arrive (a rank that skipped the call, or
    stopped); a rank whose process exited is named within about a second.
    A group of one rank works (the collectives are local copies).
    """

    def __init__(self, group=None, device=None, buffer_bytes=0, timeout=0.0, check_calls=True,
                 symmetric_bytes=0, max_tiles=0, *, store=None, rank=None, world_size=None,
                 exchange_timeout=None):
        self.id = None
        self._destroyed = False
        self._lock = threading.RLock()
        self._scope = (None, None)  # call_timeout's (name, seconds) for the calls in its block
        self._stream = None  # CUDA build: the stream of the last call (_Call orders the next after it)
        self._raw_stream = None  # ... and its handle (an int: compared on every call without a Stream object)
        self._allgather = None
        self.group = group
        if store is not None:
            if rank is None or world_size is None:
                raise ValueError("rcclx.Communicator: with store=..., rank and world_size are required")
            self.rank, self.num_ranks = int(rank), int(world_size)
        else:
            if not dist.is_initialized():
                raise RuntimeError("rcclx.Communicator: torch.distributed is not initialized "
                                   "(call torch.distributed.init_process_group first, or pass store=...)")
            self.rank = dist.get_rank(group)
            self.num_ranks = dist.get_world_size(group)
        if not 1 <= self.num_ranks <= max_ranks:
            raise ValueError(f"rcclx.Communicator: the group has {self.num_ranks} ranks; rcclx takes 1..{max_ranks}")
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
        if n == 1:
            self.id = -1  # no shared memory, no exchange: every collective is a local copy
            return
        bound = float(exchange_timeout) if exchange_timeout is not None else \
            float(timeout) if timeout and float(timeout) > 0 else 300.0
        if store is None:
            store = group_store(group)  # None: this torch exposes no default store (all_gather_object)
        mailbox = _C.NativeMailbox() if store is not None else None
        allgather = StoreAllgather(store, self.rank, n, bound, mailbox) if store is not None else \
            group_allgather(group, n)
        self._allgather = allgather
        with _Call(self, "__init__"):
            self.id = _C.create(self.rank, n, allgather, int(buffer_bytes), float(timeout),
                                1 if check_calls else 0, int(symmetric_bytes), int(max_tiles), mailbox)

    @property
    def single(self):
        """A communicator of one rank (collectives run locally)."""
        return self.num_ranks == 1

    def destroy(self):
        """Frees this rank's buffers (collective: every rank calls it). A later call raises an error
        saying so."""
        with _Call(self, "destroy"):
            if self.id is not None and self.id >= 0:
                _C.destroy(self.id)
            self.id = None
            self._destroyed = True

    @contextlib.contextmanager
    def call_timeout(self, timeout=None, name=None):
        """The calls made in the block (by this thread: the block holds the communicator's lock) wait
        at most `timeout` seconds (None: the communicator's) in their exchanges (the call check, the
        split sizes of the uneven all_to_all), and their errors name `name` (the caller's name of
        the call; an enclosing block's name stays) too. A kernel's wait for a peer stays bounded by
        the communicator's `timeout`."""
        with self._lock:
            saved = self._scope
            self._scope = (saved[0] if saved[0] is not None else name,  # an enclosing block's name stays
                           float(timeout) if timeout is not None else saved[1])
            try:
                yield self
            finally:
                self._scope = saved

    # ---- argument checks done here (before the operators) ----
    def _live(self, what):
        if self.id is None:
            raise RuntimeError(f"rcclx.Communicator.{what}: this communicator was destroyed (destroy() or "
                               f"finalize() was called); create a new one")
        return self.id

    def _check(self, what, *tensors):
        """Refuses what the operators would run silently: meta tensors, tensors on another device,
        tensors that require grad while autograd records (the collectives are not differentiable)."""
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"rcclx.Communicator.{what}: expected a tensor, got {type(t).__name__}")
            if t.device.type == "meta":
                raise RuntimeError(f"rcclx.Communicator.{what}: a meta tensor has no data to communicate "
                                   f"(the communicator's device is {self.device})")
            if t.device.type != self.device.type or (
                    self.device.type != "cpu" and t.device.index is not None and t.device.index != self.device.index):
                raise RuntimeError(f"rcclx.Communicator.{what}: the tensor is on {t.device}; this communicator's "
                                   f"device is {self.device}")
            if t.requires_grad and torch.is_grad_enabled():
                raise RuntimeError(f"rcclx.Communicator.{what}: the tensor requires grad; rcclx's collectives are "
                                   f"not differentiable (call them under torch.no_grad(), or on t.detach())")
        return self._live(what)

    # ---- the torch.distributed spelling ----
    def all_reduce(self, t, op="sum", algorithm="automatic"):
        """In place, as torch.distributed.all_reduce; returns t. The same bits on every rank. op: "sum",
        "min", "max", "product", "avg", or an rcclx.ReduceOp (PREMUL_SUM(factor): a number or a
        one-element tensor)."""
        with _Call(self, "all_reduce"):
            cid = self._check("all_reduce", t)
            name, factor, ft = op_arguments(op, "rcclx.Communicator.all_reduce")
            if self.single:
                return _single_rank_reduce(t, name, factor, ft)
            if _widened(name, t):
                w = t.to(torch.int32)
                torch.ops.rcclx.all_reduce(w, cid, name, _algorithm_name(algorithm), factor, ft)
                return t.copy_(w)
            torch.ops.rcclx.all_reduce(t, cid, name, _algorithm_name(algorithm), factor, ft)
        return t

    def all_gather(self, out, t, algorithm="automatic"):
        """out: num_ranks x t.numel() elements, as torch.distributed.all_gather_into_tensor."""
        return self._copying("all_gather", out, t, algorithm)

    def reduce_scatter(self, out, t, op="sum", algorithm="automatic"):
        """t: num_ranks x out.numel() elements, as torch.distributed.reduce_scatter_tensor."""
        with _Call(self, "reduce_scatter"):
            cid = self._check("reduce_scatter", out, t)
            name, factor, ft = op_arguments(op, "rcclx.Communicator.reduce_scatter")
            if self.single:
                _local_copy("reduce_scatter", out, t, out.numel())
                _single_rank_reduce(out, name, factor, ft)
                return out
            if _widened(name, t):
                w = torch.empty(out.shape, dtype=torch.int32, device=out.device)
                torch.ops.rcclx.reduce_scatter(w, t.to(torch.int32), cid, name, _algorithm_name(algorithm), factor, ft)
                return out.copy_(w)
            torch.ops.rcclx.reduce_scatter(out, t, cid, name, _algorithm_name(algorithm), factor, ft)
        return out

    def all_to_all(self, out, t, algorithm="automatic", output_split_sizes=None, input_split_sizes=None):
        """As torch.distributed.all_to_all_single: equal splits of the flattened tensors, or uneven
        ones given in elements (output_split_sizes / input_split_sizes, num_ranks entries each; the
        sizes of the first dimension are taken too, as torch does: see all_to_all_single)."""
        if output_split_sizes is None and input_split_sizes is None:
            return self._copying("all_to_all", out, t, algorithm)
        return self.all_to_all_single(out, t, output_split_sizes, input_split_sizes)

    def _copying(self, what, out, t, algorithm):
        """all_gather and the equal-split all_to_all (torch.ops.rcclx.<what>): on one rank a copy."""
        with _Call(self, what):
            cid = self._check(what, out, t)
            if self.single:
                _local_copy(what, out, t, t.numel())
                return out
            getattr(torch.ops.rcclx, what)(out, t, cid, _algorithm_name(algorithm))
        return out

    def all_to_all_single(self, out, t, output_split_sizes=None, input_split_sizes=None):
        """torch.distributed.all_to_all_single: split sizes count rows of the first dimension (None:
        equal splits); rank p's rows for this rank land at the prefix offset of output_split_sizes."""
        n = self.num_ranks

        def rows(sizes, x, which):
            if sizes is None or len(sizes) == 0:
                if x.dim() == 0 or x.shape[0] % n:
                    raise RuntimeError(f"rcclx.Communicator.all_to_all_single: the {which}'s first dimension "
                                       f"({x.shape[0] if x.dim() else 'a scalar'}) does not split into {n} equal parts")
                return [x.shape[0] // n] * n
            sizes = [int(v) for v in sizes]
            if len(sizes) != n:
                raise RuntimeError(f"rcclx.Communicator.all_to_all_single: {which}_split_sizes has {len(sizes)} "
                                   f"entries; it needs num_ranks = {n}")
            if x.dim() == 0 or sum(sizes) != x.shape[0]:
                raise RuntimeError(f"rcclx.Communicator.all_to_all_single: {which}_split_sizes add up to "
                                   f"{sum(sizes)} rows; the {which} has {x.shape[0] if x.dim() else 0}")
            return sizes

        with _Call(self, "all_to_all_single"):
            cid = self._check("all_to_all_single", out, t)
            in_rows = rows(input_split_sizes, t, "input")
            out_rows = rows(output_split_sizes, out, "output")
            in_row, out_row = math.prod(t.shape[1:]), math.prod(out.shape[1:])
            if t.dim() > 1 and out.dim() > 1 and t.shape[1:] != out.shape[1:]:
                raise RuntimeError(f"rcclx.Communicator.all_to_all_single: the rows of the input {tuple(t.shape[1:])} "
                                   f"and of the output {tuple(out.shape[1:])} differ")
            in_splits = [r * in_row for r in in_rows]
            out_splits = [r * out_row for r in out_rows]
            if self.single:
                _local_copy("all_to_all_single", out, t, in_splits[0])
                return out
            if input_split_sizes is None and output_split_sizes is None and in_splits == out_splits:
                torch.ops.rcclx.all_to_all(out, t, cid, "automatic")
            else:
                torch.ops.rcclx.all_to_all_v(out, t, cid, out_splits, in_splits)
        return out

    def broadcast(self, t, root=0, algorithm="automatic"):
        """In place, as torch.distributed.broadcast: every rank's t <- root's t; returns t."""
        with _Call(self, "broadcast"):
            cid = self._check("broadcast", t)
            self._check_root("broadcast", root)
            if not self.single:
                torch.ops.rcclx.broadcast(t, cid, int(root), _algorithm_name(algorithm))
        return t

    def reduce(self, t, root=0, op="sum", algorithm="automatic"):
        """In place on the root, as torch.distributed.reduce (the other ranks' t are left as they
        were); returns t."""
        with _Call(self, "reduce"):
            cid = self._check("reduce", t)
            self._check_root("reduce", root)
            name, factor, ft = op_arguments(op, "rcclx.Communicator.reduce")
            if self.single:
                return _single_rank_reduce(t, name, factor, ft)
            if _widened(name, t):
                w = t.to(torch.int32)
                torch.ops.rcclx.reduce(w, cid, int(root), name, _algorithm_name(algorithm), factor, ft)
                return t.copy_(w) if self.rank == root else t
            torch.ops.rcclx.reduce(t, cid, int(root), name, _algorithm_name(algorithm), factor, ft)
        return t

    def barrier(self):
        """Every rank waits for every other."""
        with _Call(self, "barrier"):
            cid = self._live("barrier")
            if not self.single:
                _C.barrier(cid)

    def _check_root(self, what, root):
        if not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < self.num_ranks:
            raise ValueError(f"rcclx.Communicator.{what}: root = {root!r} is outside [0, {self.num_ranks})")

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
        with _Call(self, "all_reduce_rmsnorm"):
            torch.ops.rcclx.all_reduce_rmsnorm(x, residual, weight, out, float(eps),
                                               self._check("all_reduce_rmsnorm", x), _algorithm_name(algorithm),
                                               fmt, scale)
        return out, residual

    # ---- your own kernels ----
    def kernel_handles(self, t):
        """The device handles of the symmetric tensor t (a symmetric_empty tensor) for your own
        extension's kernels: a CPU uint8 tensor holding an rcclx::pytorch::kernel_handles record
        (include/rcclx/pytorch/kernel_handles.hpp): every rank's copy of t, the signal pads and the
        pad slots kept for tile-protocol kernels. Local (no exchange)."""
        return _C.kernel_handles(self._live("kernel_handles"), t)

    @property
    def tile_slots(self):
        """(first, max_tiles): the signal-pad slots kept for tile-protocol kernels."""
        return _C.tile_slots(self._live("tile_slots"))

    # ---- symmetric tensors, graphs, errors ----
    def symmetric_empty(self, shape, dtype=torch.float32):
        """Collective (every rank, same order, same shape and dtype): an uninitialised tensor in this
        communicator's registered pool. Collectives on it read the peers' copies directly (no copy
        into the workspace). The pool is reused once none of its tensors is alive."""
        if isinstance(shape, int):
            shape = (shape,)
        with _Call(self, "symmetric_empty"):
            return _C.symmetric_empty(self._live("symmetric_empty"), [int(d) for d in shape],
                                      torch.empty(0, dtype=dtype))

    def is_symmetric(self, t):
        """Does t lie in this communicator's registered memory (symmetric_empty)?"""
        return _C.is_symmetric(self._live("is_symmetric"), t)

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
        with _Call(self, "graph_capture"):
            _C.register_graph_buffers(self._live("graph_capture"))

    def synchronize(self):
        """Waits for the current stream, then raises an error a kernel recorded (GPU builds: a peer
        that never arrived within the timeout). The host backend raises at the call itself."""
        _C.synchronize(self._live("synchronize"))

    # ---- the torchcomms spelling ----
    def allreduce(self, t, op=ReduceOp.SUM, async_op=False):
        self.all_reduce(t, op)
        return _Done(t) if async_op else None


def _local_copy(what, out, t, count):
    """A collective over one rank: out's first `count` elements <- t's."""
    if out.dtype != t.dtype:
        raise RuntimeError(f"rcclx.{what}: the output's dtype {out.dtype} differs from the input's {t.dtype}")
    if out.numel() < count or t.numel() < count:
        raise RuntimeError(f"rcclx.{what}: the output has {out.numel()} elements, the input {t.numel()}; "
                           f"{count} are needed")
    if out.data_ptr() != t.data_ptr():
        out.reshape(-1)[:count].copy_(t.reshape(-1)[:count])


def new_comm(*args, **kwargs):
    """torchcomms' constructor. new_comm("rcclx", device, name=..., ...) is rcclx.torchcomms.new_comm
    (a TorchComm); the older new_comm(device, name=None, group=None, **kwargs) gives a Communicator
    over `group` (default: the default group, initialised from the environment if needed)."""
    if args and isinstance(args[0], str) and args[0] == "rcclx" or "backend" in kwargs:
        from . import torchcomms
        return torchcomms.new_comm(*args, **kwargs)
    return _legacy_new_comm(*args, **kwargs)


def _legacy_new_comm(device, name=None, group=None, **kwargs):
    if not dist.is_initialized():
        dist.init_process_group("gloo" if backend == "host" else "nccl")
    c = Communicator(group=group, device=device, **kwargs)
    c.name = name
    return c

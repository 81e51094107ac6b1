"""rcclx.torchcomms as torchcomms' own integration tests use it (new_comm("rcclx", device, name=...),
the collectives with async_op positional, TorchWork, ReduceOp.type), on 4 processes over the
environment torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Every rank builds every
rank's input from one seed, so each result is checked against a reference computed here in float64
(floating types) or int64 (integers, bool), not by rcclx; all_reduce's bits are compared across
ranks. Also: the misuse cases (finalize, meta tensors, tensors that require grad, a rank that skips a
call, unsupported ops and calls), and a communicator of one rank."""
import datetime
import hashlib
import os
import socket
import tempfile
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import rcclx

N = 4
FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
DTYPES = FLOATS + INTS + [torch.bool]
EPS = {torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float64: 2.0 ** -52}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(fn, n, *args):
    port = _free_port()
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_worker, args=(n, port, os.path.join(d, "store"), fn, args), nprocs=n, join=True)


def _worker(rank, n, port, path, fn, args):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    fn(rank, n, dist.FileStore(path, n), *args)


def _input(p, count, dtype, seed, op=""):
    """Rank p's input: random floats (for PRODUCT near 1, so that 4 factors stay in range), small
    integers (no overflow in any op over 4 ranks), or random bools."""
    g = torch.Generator().manual_seed(seed * 7919 + p)
    if dtype == torch.bool:
        return torch.rand(count, generator=g) < 0.5
    if dtype.is_floating_point:
        x = torch.rand(count, generator=g, dtype=torch.float64) * 0.5 + 0.75 if op == "PRODUCT" else \
            torch.randn(count, generator=g, dtype=torch.float64)
        return x.to(dtype)
    lo = 0 if dtype == torch.uint8 else -3
    return torch.randint(lo, 4, (count,), generator=g, dtype=torch.int64).to(dtype)


def _reference(ins, op, n, dtype, factor=None):
    """op over the ranks' inputs in float64 / int64 (bool: or / and), as torch defines it."""
    if dtype == torch.bool:
        x = torch.stack([i.to(torch.int64) for i in ins])
        r = {"SUM": x.max(0).values, "MAX": x.max(0).values, "PRODUCT": x.min(0).values, "MIN": x.min(0).values}[op]
        return r.bool()
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    x = torch.stack([i.to(wide) for i in ins])
    if op == "SUM":
        return x.sum(0)
    if op == "PRODUCT":
        return x.prod(0)
    if op == "MIN":
        return x.min(0).values
    if op == "MAX":
        return x.max(0).values
    if op == "AVG":
        return x.sum(0) / n if dtype.is_floating_point else torch.div(x.sum(0), n, rounding_mode="trunc")
    if op == "PREMUL_SUM":
        f = float(torch.tensor(float(factor), dtype=dtype)) if dtype != torch.float64 else float(factor)
        return (x * f).sum(0)
    raise AssertionError(op)


def _check(got, ref, dtype, n, what):
    if not dtype.is_floating_point:
        assert torch.equal(got, ref.to(dtype)), (what, got[:8].tolist(), ref[:8].tolist())
        return
    # One rounding to the output type after fp32 accumulation of n terms (float64: in float64).
    acc = 2.0 ** -52 if dtype == torch.float64 else 2.0 ** -23
    tol = EPS[dtype] * ref.abs() + 4 * n * acc * (ref.abs() + 1.0)
    err = (got.to(torch.float64) - ref).abs()
    assert bool((err <= tol).all()), (what, float(err.max()))


def _same_bits(store, tag, rank, n, t):
    """Every rank's t has the same bytes (compared through a FileStore, not through rcclx)."""
    h = hashlib.sha1(t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()
    store.set(f"{tag}/{rank}", h)
    return all(store.get(f"{tag}/{p}").decode() == h for p in range(n))


def _ops_for(dtype):
    import rcclx.torchcomms as tc
    if dtype == torch.bool:
        return [("SUM", tc.ReduceOp.SUM), ("PRODUCT", tc.ReduceOp.PRODUCT), ("MIN", tc.ReduceOp.MIN),
                ("MAX", tc.ReduceOp.MAX)]
    ops = [("SUM", tc.ReduceOp.SUM), ("PRODUCT", tc.ReduceOp.PRODUCT), ("MIN", tc.ReduceOp.MIN),
           ("MAX", tc.ReduceOp.MAX), ("AVG", tc.ReduceOp.AVG)]
    if dtype.is_floating_point:
        ops.append(("PREMUL_SUM", tc.ReduceOp.PREMUL_SUM(0.37)))
        ops.append(("PREMUL_SUM", tc.ReduceOp.PREMUL_SUM(torch.tensor([2.0], dtype=dtype))))
    return ops


def _factor(op):
    f = op.factor
    return None if f is None else (float(f.reshape(())) if isinstance(f, torch.Tensor) else f)


# ---- every collective, op and dtype on 4 processes ---------------------------------------------

def _collectives(rank, n, store):
    import rcclx.torchcomms as torchcomms
    from rcclx.torchcomms import RedOpType, ReduceOp
    device = torch.device("cpu") if rcclx.backend == "host" else torch.device("cuda", 0)
    # A small workspace: 20011 elements run in several chunks / slices.
    comm = torchcomms.new_comm("rcclx", device, name="test_comm", hints={"rcclx::buffer_bytes": str(1 << 16)})
    assert (comm.get_rank(), comm.get_size(), comm.get_name(), comm.get_backend()) == (rank, n, "test_comm", "rcclx")
    assert comm.get_device() == device
    seed = 0
    for dtype in DTYPES:
        for count in (0, 37, 20011):
            for name, op in _ops_for(dtype):
                seed += 1
                assert op.type == getattr(RedOpType, name)
                ins = [_input(p, count, dtype, seed, name) for p in range(n)]
                ref = _reference(ins, name, n, dtype, _factor(op))
                what = (str(dtype), count, repr(op))
                # all_reduce, sync (a TorchWork) and async.
                t = ins[rank].clone().to(device)
                work = comm.all_reduce(t, op, False)
                work.wait()
                assert work.is_completed()
                _check(t.cpu(), ref, dtype, n, ("all_reduce",) + what)
                assert _same_bits(store, f"ar{seed}", rank, n, t.cpu()), what
                t = ins[rank].clone().to(device)
                comm.all_reduce(t, op, async_op=True).wait()
                _check(t.cpu(), ref, dtype, n, ("all_reduce async",) + what)
                # reduce to a root (the root's tensor only).
                root = seed % n
                t = ins[rank].clone().to(device)
                comm.reduce(t, root, op, False)
                if rank == root:
                    _check(t.cpu(), ref, dtype, n, ("reduce",) + what)
                # reduce_scatter_single and the list form: block `rank` of the reduction.
                c = count // n
                if c:
                    out = torch.empty(c, dtype=dtype, device=device)
                    comm.reduce_scatter_single(out, ins[rank][:c * n].clone().to(device), op, False)
                    _check(out.cpu(), ref[rank * c:(rank + 1) * c], dtype, n, ("reduce_scatter_single",) + what)
                    out = torch.empty(c, dtype=dtype, device=device)
                    blocks = [ins[rank][p * c:(p + 1) * c].clone().to(device) for p in range(n)]
                    comm.reduce_scatter(out, blocks, op, True).wait()
                    _check(out.cpu(), ref[rank * c:(rank + 1) * c], dtype, n, ("reduce_scatter",) + what)
        # The copies: exact, of every dtype (the same inputs for every rank, rank-dependent sizes).
        count = 1001
        ins = [_input(p, count + p, dtype, 1000 + seed) for p in range(n)]
        out = torch.empty(n * count, dtype=dtype, device=device)
        comm.all_gather_single(out, ins[rank][:count].clone().to(device), False)
        assert torch.equal(out.cpu(), torch.cat([i[:count] for i in ins])), dtype
        outs = [torch.empty(count, dtype=dtype, device=device) for _ in range(n)]
        comm.all_gather(outs, ins[rank][:count].clone().to(device), False)
        assert all(torch.equal(o.cpu(), i[:count]) for o, i in zip(outs, ins)), dtype
        outs = [torch.empty(count + p, dtype=dtype, device=device) for p in range(n)]
        comm.all_gather_v(outs, ins[rank].clone().to(device), False)
        assert all(torch.equal(o.cpu(), i) for o, i in zip(outs, ins)), dtype
        for root in range(n):
            t = (ins[rank][:count] if rank == root else torch.zeros(count, dtype=dtype)).clone().to(device)
            comm.broadcast(t, root, False)
            assert torch.equal(t.cpu(), ins[root][:count]), (dtype, root)
        # all_to_all_single (equal blocks) and all_to_all_v_single / all_to_all (uneven).
        c = 250
        x = ins[rank][:c * n].clone().to(device)
        out = torch.empty(c * n, dtype=dtype, device=device)
        comm.all_to_all_single(out, x, False)
        assert torch.equal(out.cpu(), torch.cat([ins[p][rank * c:(rank + 1) * c] for p in range(n)])), dtype
        size = lambda src, dst: 3 * src + 5 * dst + (src + dst) % 3  # noqa: E731 (elements src sends dst)
        off = lambda src, dst: sum(size(src, q) for q in range(dst))  # noqa: E731
        in_sizes = [size(rank, p) for p in range(n)]
        out_sizes = [size(p, rank) for p in range(n)]
        x = ins[rank][:sum(in_sizes)].clone().to(device)
        out = torch.empty(sum(out_sizes), dtype=dtype, device=device)
        comm.all_to_all_v_single(out, x, out_sizes, in_sizes, False)
        want = torch.cat([ins[p][off(p, rank):off(p, rank) + size(p, rank)] for p in range(n)])
        assert torch.equal(out.cpu(), want), dtype
        outs = [torch.empty(s, dtype=dtype, device=device) for s in out_sizes]
        comm.all_to_all(outs, list(x.split(in_sizes)), True).wait()
        assert torch.equal(torch.cat(outs).cpu(), want), dtype
        # scatter, gather, gather_single from / to root 1.
        out = torch.empty(count, dtype=dtype, device=device)
        comm.scatter(out, [i[:count].clone().to(device) for i in ins] if rank == 1 else [], 1, False)
        assert torch.equal(out.cpu(), ins[rank][:count]), dtype
        outs = [torch.empty(count, dtype=dtype, device=device) for _ in range(n)] if rank == 1 else []
        comm.gather(outs, ins[rank][:count].clone().to(device), 1, False)
        if rank == 1:
            assert all(torch.equal(o.cpu(), i[:count]) for o, i in zip(outs, ins)), dtype
    # reduce_scatter_v: blocks of rank-dependent sizes.
    sizes = [5, 0, 17, 3]
    ins = [_input(p, sum(sizes), torch.float32, 77) for p in range(n)]
    ref = _reference(ins, "SUM", n, torch.float32)
    out = torch.empty(sizes[rank], device=device)
    comm.reduce_scatter_v(out, [b.to(device) for b in ins[rank].split(sizes)], ReduceOp.SUM, False)
    at = sum(sizes[:rank])
    _check(out.cpu(), ref[at:at + sizes[rank]], torch.float32, n, "reduce_scatter_v")
    comm.barrier(False).wait()
    # split: a communicator of ranks 1 and 3 (the others get None).
    sub = comm.split([1, 3], "odd")
    assert (sub is None) == (rank not in (1, 3))
    if sub is not None:
        t = torch.full((9,), float(rank), device=device)
        sub.all_reduce(t, ReduceOp.SUM, False)
        assert sub.get_size() == 2 and bool((t.cpu() == 4.0).all())
        sub.finalize()
    _misuse(rank, n, comm, device)
    _skipped_call(rank, n, store, device)


def _misuse(rank, n, comm, device):
    from rcclx.torchcomms import ReduceOp
    with pytest.raises(NotImplementedError, match="send"):
        comm.send(torch.ones(2), (rank + 1) % n, False)
    with pytest.raises(NotImplementedError, match="BAND"):
        comm.all_reduce(torch.ones(2, dtype=torch.int32, device=device), ReduceOp.BAND, False)
    with pytest.raises(RuntimeError, match="meta tensor"):
        comm.all_reduce(torch.ones(4, device="meta"), ReduceOp.SUM, False)
    with pytest.raises(RuntimeError, match="requires grad"):
        comm.all_reduce(torch.ones(4, device=device, requires_grad=True), ReduceOp.SUM, False)
    with torch.no_grad():  # allowed: no graph is recorded
        comm.all_reduce(torch.ones(4, device=device, requires_grad=True), ReduceOp.SUM, False)
    # The next call after the errors above works on every rank.
    t = torch.ones(4, device=device)
    comm.all_reduce(t, ReduceOp.SUM, False)
    assert bool((t.cpu() == n).all())
    comm.finalize()
    with pytest.raises(RuntimeError, match="finalize"):
        comm.all_reduce(t, ReduceOp.SUM, False)


def test_torchcomms_collectives_against_float64():
    _spawn(_collectives, N)


# ---- a rank that skips a call: an error within the timeout, naming it -----------------------------

def _skipped_call(rank, n, store, device):
    import rcclx.torchcomms as torchcomms
    comm = torchcomms.new_comm("rcclx", device, name="skip", timeout=datetime.timedelta(seconds=2))
    t = torch.ones(8, device=device)
    if rank != 2:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"TorchComm\.all_reduce.*waited 2 s for rank\(s\) \[2\]"):
            comm.all_reduce(t, torchcomms.ReduceOp.SUM, False)
        assert time.monotonic() - start < 30
    store.set(f"done/{rank}", "1")
    store.wait([f"done/{p}" for p in range(n)])
    # A per-call timeout shorter than the communicator's (120 s) bounds that call, positional or by
    # keyword, and the error names the call.
    comm = torchcomms.new_comm("rcclx", device, name="short", timeout=datetime.timedelta(seconds=120))
    if rank != 1:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"TorchComm\.all_gather_v.*waited 1\.5 s for rank\(s\) \[1\].*"
                                               r"the call's timeout"):
            comm.all_gather_v([torch.empty(2, device=device) for _ in range(n)], torch.ones(2, device=device), False,
                              timeout=datetime.timedelta(seconds=1.5))
        # The exchanges are out of step from then on: the next call says so at once.
        with pytest.raises(RuntimeError, match=r"TorchComm\.barrier.*unusable since an earlier exchange failed.*"
                                               r"all_gather_v"):
            comm.barrier(False)
        assert time.monotonic() - start < 60
    store.set(f"short/{rank}", "1")
    store.wait([f"short/{p}" for p in range(n)])
    comm = torchcomms.new_comm("rcclx", device, name="short2", timeout=datetime.timedelta(seconds=120))
    if rank != 1:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"TorchComm\.barrier.*waited 1 s for rank\(s\) \[1\]"):
            comm.barrier(False, None, 1.0)
        assert time.monotonic() - start < 60
    store.set(f"short2/{rank}", "1")
    store.wait([f"short2/{p}" for p in range(n)])
    # A rank whose process exits: the others' next call names it at once (its pid is gone), well
    # within the 60 s timeout.
    comm = torchcomms.new_comm("rcclx", device, name="dies", timeout=datetime.timedelta(seconds=60))
    comm.all_reduce(t, torchcomms.ReduceOp.SUM, False)
    if rank == n - 1:
        os._exit(0)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=f"rank {n - 1} .pid [0-9]+. no longer running"):
        comm.all_reduce(t, torchcomms.ReduceOp.SUM, False)
    assert time.monotonic() - start < 20


# ---- one rank ---------------------------------------------------------------------------------

def _one_rank(rank, n, store):
    import rcclx.torchcomms as torchcomms
    from rcclx.torchcomms import ReduceOp
    comm = torchcomms.new_comm("rcclx", torch.device("cpu") if rcclx.backend == "host" else "cuda", name="one")
    dev = comm.get_device()
    assert comm.get_size() == 1
    t = torch.arange(5.0, device=dev)
    comm.all_reduce(t, ReduceOp.SUM, False)
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    comm.all_reduce(t, ReduceOp.PREMUL_SUM(2.0), False)
    assert t.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    out = torch.empty(5, device=dev)
    comm.all_gather_single(out, t, False)
    assert torch.equal(out, t)
    comm.reduce_scatter_single(out, t * 3, ReduceOp.MAX, False)
    assert torch.equal(out, t * 3)
    comm.all_to_all_v_single(out, t, [5], [5], False)
    assert torch.equal(out, t)
    comm.broadcast(t, 0, False)
    comm.barrier(False)
    with pytest.raises(ValueError, match="root"):
        comm.broadcast(t, 1, False)
    comm.finalize()


def test_one_rank():
    _spawn(_one_rank, 1)

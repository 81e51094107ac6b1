"""rcclx's torch operators on 2, 3 and 4 processes over a gloo group (host backend: CPU tensors) or
on one GPU (CUDA backend: every process on the same device). Each rank's result is compared with a
float64 reference computed from every rank's input, and every rank's bits with rank 0's."""
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import rcclx

RANKS = [2, 3, 4]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _device():
    return torch.device("cpu") if rcclx.backend == "host" else torch.device("cuda", 0)


def _input(rank, n, dtype, seed):
    g = torch.Generator().manual_seed(seed * 131 + rank)
    return torch.randn(n, generator=g, dtype=torch.float32).to(dtype)


def _tolerance(dtype, ranks, ref):
    # One rounding of the fp32 sum to the output type, plus fp32 accumulation over `ranks` terms.
    eps = {torch.float32: 2.0 ** -23, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}[dtype]
    return eps * ref.abs() + ranks * 2.0 ** -23 * (ref.abs() + 1.0) + 1e-30


def _same_bits_everywhere(t, group=None):
    mine = t.contiguous().view(torch.uint8).cpu() if t.dtype != torch.float32 else t.cpu().view(torch.int32)
    all_ = [None] * dist.get_world_size(group)
    dist.all_gather_object(all_, mine.tolist(), group=group)
    return all(x == all_[0] for x in all_)


def _run(fn, n, *args):
    """Runs fn(rank, n, *args) in n spawned processes over a gloo group; fails with the first rank's
    traceback."""
    with tempfile.TemporaryDirectory() as d:
        init = "file://" + os.path.join(d, "rendezvous")
        mp.spawn(_worker, args=(n, init, fn, args), nprocs=n, join=True)


def _worker(rank, n, init, fn, args):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    try:
        fn(rank, n, *args)
    finally:
        dist.destroy_process_group()


# ---- the collectives against float64 -------------------------------------------------------------

def _all_collectives(rank, n, dtype):
    dev = _device()
    comm = rcclx.Communicator(timeout=20.0)
    for count in (1, 1000, 4096 * n + 8 * n):
        for op in ("sum", "min", "max"):
            for algo in ("flat", "tree", "automatic"):
                x = _input(rank, count, dtype, count + len(op))
                ins = [_input(r, count, dtype, count + len(op)).double() for r in range(n)]
                ref = {"sum": sum(ins), "min": torch.stack(ins).min(0).values,
                       "max": torch.stack(ins).max(0).values}[op]
                t = x.to(dev)
                out = comm.all_reduce(t, op=op, algorithm=algo)
                assert out is t
                err = (t.double().cpu() - ref).abs()
                assert bool((err <= _tolerance(dtype, n, ref)).all()), (count, op, algo, float(err.max()))
                assert _same_bits_everywhere(t), (count, op, algo)
        # AllGather: exact copies in rank order.
        x = _input(rank, count, dtype, 7).to(dev)
        out = torch.empty(n * count, dtype=dtype, device=dev)
        comm.all_gather(out, x)
        for r in range(n):
            assert torch.equal(out[r * count:(r + 1) * count].cpu(), _input(r, count, dtype, 7)), r
        # ReduceScatter and AlltoAll need count % n == 0.
        c = count * n
        x = _input(rank, c, dtype, 9).to(dev)
        out = torch.empty(count, dtype=dtype, device=dev)
        comm.reduce_scatter(out, x)
        ref = sum(_input(r, c, dtype, 9).double() for r in range(n))[rank * count:(rank + 1) * count]
        assert bool(((out.double().cpu() - ref).abs() <= _tolerance(dtype, n, ref)).all())
        out = torch.empty(c, dtype=dtype, device=dev)
        comm.all_to_all(out, x)
        for r in range(n):
            want = _input(r, c, dtype, 9)[rank * count:(rank + 1) * count]
            assert torch.equal(out[r * count:(r + 1) * count].cpu(), want), r
    # The registered operator, called directly, and the torchcomms spelling.
    t = torch.full((16,), float(rank + 1), dtype=dtype, device=dev)
    torch.ops.rcclx.all_reduce(t, comm.id, "sum", "automatic")
    assert bool((t.float().cpu() == n * (n + 1) / 2).all())
    t = torch.ones(16, dtype=dtype, device=dev)
    work = comm.allreduce(t, rcclx.ReduceOp.MAX, async_op=True)
    work.wait()
    assert bool((t.float().cpu() == 1).all())
    comm.destroy()


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_collectives_against_float64(n, dtype):
    _run(_all_collectives, n, dtype)


# ---- up to 16 ranks ------------------------------------------------------------------------------

def _many_ranks(rank, n):
    dev = _device()
    comm = rcclx.Communicator(timeout=60.0)
    for algo in ("flat", "tree", "automatic"):
        t = torch.full((1000 + n,), float(rank + 1), device=dev)
        comm.all_reduce(t, algorithm=algo)
        assert bool((t.cpu() == n * (n + 1) / 2).all()), algo
    x = torch.full((8,), float(rank), device=dev)
    out = torch.empty(8 * n, device=dev)
    comm.all_gather(out, x)
    assert torch.equal(out.cpu(), torch.arange(n, dtype=torch.float32).repeat_interleave(8))
    comm.destroy()


@pytest.mark.parametrize("n", [16])  # the most a communicator takes (2, 3 and 4 above)
def test_many_ranks(n):
    _run(_many_ranks, n)


# ---- bad input: a clear exception, and the next call works ----------------------------------------

def _bad_input(rank, n):
    dev = _device()
    comm = rcclx.Communicator(timeout=20.0)
    t = torch.ones(64, dtype=torch.complex64, device=dev)
    with pytest.raises(RuntimeError, match="dtype"):
        comm.all_reduce(t)
    t = torch.ones(64, 2, device=dev).t()
    with pytest.raises(RuntimeError, match="contiguous"):
        comm.all_reduce(t)
    with pytest.raises(ValueError, match="op must be"):
        comm.all_reduce(torch.ones(4, device=dev), op="prod")
    with pytest.raises(ValueError, match="algorithm must be"):
        comm.all_reduce(torch.ones(4, device=dev), algorithm="ring")
    with pytest.raises(RuntimeError, match="output has"):
        comm.all_gather(torch.empty(3, device=dev), torch.ones(4, device=dev))
    # Sizes that differ across ranks: every rank fails with the same error, nothing hangs.
    t = torch.ones(100 + (rank == 1) * 8, device=dev)
    with pytest.raises(RuntimeError, match="rank"):
        comm.all_reduce(t)
    # The next call works.
    t = torch.full((1000,), float(rank), device=dev)
    comm.all_reduce(t)
    assert bool((t.cpu() == n * (n - 1) / 2).all())
    comm.destroy()


@pytest.mark.parametrize("n", [2, 3])
def test_bad_input_is_a_clear_error(n):
    _run(_bad_input, n)


# ---- shapes seen by tracing --------------------------------------------------------------------

def test_meta_implementations_keep_shapes():
    t = torch.empty(8, 4, device="meta")
    torch.ops.rcclx.all_reduce(t, 0, "sum", "automatic")
    assert t.shape == (8, 4)
    out = torch.empty(16, device="meta")
    torch.ops.rcclx.all_gather(out, torch.empty(8, device="meta"), 0, "automatic")
    torch.ops.rcclx.broadcast(t, 0, 1, "automatic")
    torch.ops.rcclx.reduce(t, 0, 1, "premul_sum", "automatic", 0.5, torch.empty(1, device="meta"))
    torch.ops.rcclx.all_to_all_v(out, torch.empty(16, device="meta"), 0, [8, 8], [4, 12])
    assert t.shape == (8, 4) and out.shape == (16,)


def test_meta_tensors_are_refused_by_the_communicator():
    # The operators' Meta implementations serve tracing; a Communicator call on a meta tensor (no
    # data to communicate) is an error before any exchange.
    comm = rcclx.Communicator.__new__(rcclx.Communicator)
    comm.id, comm.device = 1, _device()
    with pytest.raises(RuntimeError, match="meta tensor"):
        comm._check("all_reduce", torch.empty(4, device="meta"))
    comm.id = None
    with pytest.raises(RuntimeError, match="destroyed"):
        comm._check("all_reduce", torch.empty(4))

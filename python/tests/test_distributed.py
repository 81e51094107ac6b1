"""rcclx as a torch.distributed backend (import rcclx.distributed; init_process_group("rcclx")): the
torch.distributed collectives on it against values computed here, and a DDP training of a small
model for a few steps whose parameters are bit-identical on every rank, within float32 rounding of
the same training over gloo (a second group in the same job) and of a single-process float64
reference. Process counts 3 (DDP) and 2 (new_group)."""
import datetime
import hashlib
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import rcclx
import rcclx.distributed  # noqa: F401 (registers the backend)

STEPS, BATCH, LR = 4, 5, 0.05
# The CUDA build runs every process on GPU 0 (the tensors, the model and DDP there); the host build on the CPU.
DEV = torch.device("cpu") if rcclx.backend == "host" else torch.device("cuda", 0)


def _spawn(fn, n, backend):
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_worker, args=(n, "file://" + os.path.join(d, "rdv"), backend, fn), nprocs=n, join=True)


def _worker(rank, n, init, backend, fn):
    if DEV.type == "cuda":
        torch.cuda.set_device(DEV)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=n)
    try:
        fn(rank, n)
    finally:
        dist.destroy_process_group()


def _model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _batch(rank, step, dtype=torch.float32):
    g = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(BATCH, 6, generator=g, dtype=torch.float64)
    y = torch.randn(BATCH, 3, generator=g, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def _on(x):
    return x.to(DEV)


def _fit(module, rank):
    """STEPS steps of SGD on this rank's batches (module: the model wrapped for data parallelism)."""
    opt = torch.optim.SGD(module.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = map(_on, _batch(rank, step))
        loss = torch.nn.functional.mse_loss(module(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def _train(model, rank, group):
    _fit(torch.nn.parallel.DistributedDataParallel(model.to(DEV), process_group=group), rank)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()


def _reference(n):
    """One process, float64: DDP's gradient is the mean over ranks of each rank's gradient."""
    model = _model().double()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in (_batch(r, step, torch.float64)
                                                                           for r in range(n))) / n
        loss.backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _ddp(rank, n):
    assert dist.get_backend() == "rcclx"
    gloo = dist.new_group(backend="gloo")
    mine = _train(_model(), rank, None)            # the default group: rcclx
    theirs = _train(_model(), rank, gloo)
    # Bit-identical parameters on every rank (compared over gloo, not rcclx).
    digests = [None] * n
    dist.all_gather_object(digests, hashlib.sha1(mine.numpy().tobytes()).hexdigest(), group=gloo)
    assert len(set(digests)) == 1, digests
    ref = _reference(n)
    assert float((mine.double() - ref).abs().max()) < 1e-5, float((mine.double() - ref).abs().max())
    assert float((mine - theirs).abs().max()) < 1e-5, float((mine - theirs).abs().max())
    start = torch.cat([p.detach().reshape(-1) for p in _model().parameters()])
    assert float((mine - start).abs().max()) > 1e-3  # the steps moved the parameters


def test_ddp_on_rcclx_matches_gloo_and_float64():
    _spawn(_ddp, 3, "rcclx")


def _collectives(rank, n):
    g = dist.new_group(backend="rcclx")
    t = _on(torch.arange(7, dtype=torch.float32) + rank)
    dist.all_reduce(t, group=g)
    assert torch.equal(t.cpu(), (torch.arange(7, dtype=torch.float32) * n + sum(range(n))))
    t = _on(torch.full((5,), rank + 1, dtype=torch.int64))
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT, group=g)
    assert bool((t == 2).all())  # 1 * 2
    t = _on(torch.full((4,), float(rank)))
    dist.broadcast(t, src=1, group=g)
    assert bool((t == 1.0).all())
    t = _on(torch.full((3,), float(rank + 5)))
    dist.reduce(t, dst=0, op=dist.ReduceOp.MAX, group=g)
    if rank == 0:
        assert bool((t == n + 4).all())
    outs = [_on(torch.empty(3)) for _ in range(n)]
    dist.all_gather(outs, _on(torch.full((3,), float(rank))), group=g)
    assert [o[0].item() for o in outs] == [float(r) for r in range(n)]
    out = _on(torch.empty(2))
    dist.reduce_scatter(out, [_on(torch.full((2,), float(rank * 10 + p))) for p in range(n)], group=g)
    assert bool((out == sum(r * 10 + rank for r in range(n))).all())
    x = _on(torch.arange(2 * n, dtype=torch.float64) + 100 * rank)
    y = _on(torch.empty(2 * n, dtype=torch.float64))
    dist.all_to_all_single(y, x, group=g)
    assert y.tolist() == [float(100 * p + 2 * rank + k) for p in range(n) for k in range(2)]
    out = _on(torch.empty(3, dtype=torch.int32))
    parts = [_on(torch.full((3,), 10 * p + 1, dtype=torch.int32)) for p in range(n)] if rank == 1 else None
    dist.scatter(out, parts, src=1, group=g)
    assert out.tolist() == [10 * rank + 1] * 3
    gathered = [_on(torch.empty(2)) for _ in range(n)] if rank == 0 else None
    dist.gather(_on(torch.full((2,), rank + 0.5)), gathered, dst=0, group=g)
    if rank == 0:
        assert [o.tolist() for o in gathered] == [[r + 0.5] * 2 for r in range(n)]
    dist.barrier(group=g)
    with pytest.raises(NotImplementedError, match="send"):
        dist.send(_on(torch.ones(1)), dst=(rank + 1) % n, group=g)
    # A barrier the last rank skips (alive, in the gloo group's barrier): monitored_barrier's timeout
    # (1 s, shorter than the group's) bounds the others' wait, and the error names it and the rank.
    if rank != n - 1:
        with pytest.raises(RuntimeError, match=rf"monitored_barrier.*waited 1 s for rank\(s\) \[{n - 1}\]"):
            g.monitored_barrier(datetime.timedelta(seconds=1))
    dist.barrier()


def test_new_group_rcclx_collectives():
    _spawn(_collectives, 2, "gloo")

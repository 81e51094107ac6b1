"""torch >= 2 on the rcclx torch.distributed backend (init_process_group("rcclx")): functional
collectives (torch.distributed._functional_collectives, reached from C++ through the group object),
DTensor on a DeviceMesh (sharding, redistribution, a tensor-parallel MLP) and FSDP2 (fully_shard) for
a few training steps, against values computed here and a single-process float64 reference. Skipped
on torch 1.13 (Debian's, CI), which has neither DTensor nor FSDP2; 3 processes."""
import hashlib

import pytest
import torch
import torch.distributed as dist

from test_distributed import DEV, _fit, _model, _on, _reference, _spawn

_missing = []
try:
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
except (ImportError, ValueError) as e:  # torch 1.13 (ValueError: its modules under Python 3.11)
    _missing.append(str(e))
try:
    from torch.distributed.fsdp import fully_shard
except (ImportError, ValueError) as e:
    _missing.append(str(e))

pytestmark = pytest.mark.skipif(bool(_missing), reason=f"needs torch >= 2.6 ({'; '.join(_missing)})")

N = 3


def _wait(t):
    return t.wait() if hasattr(t, "wait") else t


def _checks(rank, checks):
    """Runs every check (name, function) and fails with all of them that failed, named."""
    failed = []
    for name, fn in checks:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 (each failure is reported with its name)
            failed.append(f"{name}: {type(e).__name__}: {str(e)[:300]}")
    assert not failed, f"rank {rank}: " + " | ".join(failed)


def _functional(rank, n):
    g = dist.group.WORLD
    base = torch.arange(6, dtype=torch.float32)
    tri = n * (n + 1) // 2

    def all_reduce():
        x = _on(base + rank)
        assert torch.equal(_wait(funcol.all_reduce(x, "sum", g)).cpu(), base * n + sum(range(n)))
        assert torch.equal(_wait(funcol.all_reduce(x, "max", g)).cpu(), base + n - 1)
        assert torch.equal(_wait(funcol.all_reduce(x, "avg", g)).cpu(), base + (n - 1) / 2)
        assert torch.equal(x.cpu(), base + rank)  # functional: the input is left as it was

    def all_gather():
        got = _wait(funcol.all_gather_tensor(_on(torch.full((2, 3), float(rank))), 0, g)).cpu()
        assert torch.equal(got, torch.cat([torch.full((2, 3), float(r)) for r in range(n)]))

    def reduce_scatter():
        x = _on(torch.arange(2 * n, dtype=torch.float32) * (rank + 1))
        rs = _wait(funcol.reduce_scatter_tensor(x, "sum", 0, g))
        assert rs.cpu().tolist() == [float(k * tri) for k in range(2 * rank, 2 * rank + 2)]

    def all_to_all():
        got = _wait(funcol.all_to_all_single(_on(torch.arange(n, dtype=torch.int64) + 10 * rank), None, None, g))
        assert got.cpu().tolist() == [10 * p + rank for p in range(n)]

    def broadcast():
        assert _wait(funcol.broadcast(_on(torch.full((4,), float(rank))), 1, g)).cpu().tolist() == [1.0] * 4

    def coalesced():
        outs = funcol.all_gather_into_tensor_coalesced([_on(torch.full((1,), float(rank))),
                                                        _on(torch.full((2,), 2.0 * rank))], g)
        outs = [_wait(o).cpu() for o in outs]
        assert outs[0].tolist() == [float(r) for r in range(n)]
        assert outs[1].tolist() == [2.0 * r for r in range(n) for _ in range(2)]

    def coalescing_manager():  # records the calls and runs them as one allreduce_coalesced
        t1, t2 = _on(torch.full((3,), float(rank))), _on(torch.full((5,), 1.0))
        with dist._coalescing_manager(group=g, device=DEV):
            dist.all_reduce(t1)
            dist.all_reduce(t2)
        assert t1.tolist() == [float(sum(range(n)))] * 3 and t2.tolist() == [float(n)] * 5

    def premul_sum():  # with its factor (torch >= 2 exposes it to the backend)
        t = _on(torch.full((4,), float(rank + 1)))
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        assert t.cpu().tolist() == [0.5 * tri] * 4

    _checks(rank, [(f.__name__, f) for f in (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, coalesced,
                                             coalescing_manager, premul_sum)])


def test_functional_collectives():
    _spawn(_functional, N, "rcclx")


def _dtensor(rank, n):
    mesh = init_device_mesh(DEV.type, (n,))
    full = torch.arange(n * 4 * 5, dtype=torch.float32).reshape(n * 4, 5)
    rows = slice(4 * rank, 4 * rank + 4)

    def scatter_and_gather():
        d = distribute_tensor(_on(full if rank == 0 else torch.zeros_like(full)), mesh, [Shard(0)])  # from rank 0
        assert torch.equal(d.to_local().cpu(), full[rows])
        assert torch.equal(d.full_tensor().cpu(), full)
        assert torch.equal(d.redistribute(mesh, [Replicate()]).to_local().cpu(), full)

    def shard_to_shard():  # an all_to_all (5 columns on n ranks: uneven)
        d = DTensor.from_local(_on(full[rows]), mesh, [Shard(0)])
        cols = d.redistribute(mesh, [Shard(1)]).to_local().cpu()
        assert torch.equal(cols, torch.tensor_split(full, n, dim=1)[rank])

    def partial():
        p = DTensor.from_local(_on(full * (rank + 1)), mesh, [Partial()])
        assert torch.equal(p.redistribute(mesh, [Shard(0)]).to_local().cpu(), (full * (n * (n + 1) // 2))[rows])
        assert torch.equal(p.full_tensor().cpu(), full * (n * (n + 1) // 2))

    def tensor_parallel_mlp():  # the first layer's columns and the second's rows sharded, the input replicated
        g = torch.Generator().manual_seed(7)
        w1 = torch.randn(6, 4 * n, dtype=torch.float64, generator=g)
        w2 = torch.randn(4 * n, 3, dtype=torch.float64, generator=g)
        x = torch.randn(5, 6, dtype=torch.float64, generator=g)
        ref = torch.tanh(x @ w1) @ w2
        xd = distribute_tensor(_on(x.float()), mesh, [Replicate()])
        w1d = distribute_tensor(_on(w1.float()), mesh, [Shard(1)])
        w2d = distribute_tensor(_on(w2.float()), mesh, [Shard(0)])
        y = torch.tanh(xd @ w1d) @ w2d
        assert y.placements[0].is_partial(), y.placements
        got = y.full_tensor().cpu().double()
        assert float((got - ref).abs().max()) < 1e-4, float((got - ref).abs().max())

    _checks(rank, [(f.__name__, f) for f in (scatter_and_gather, shard_to_shard, partial, tensor_parallel_mlp)])


def test_dtensor_on_a_device_mesh():
    _spawn(_dtensor, N, "rcclx")


def _fsdp(rank, n):
    mesh = init_device_mesh(DEV.type, (n,))
    model = _model().to(DEV)
    fully_shard(model[0], mesh=mesh)
    fully_shard(model[2], mesh=mesh)
    fully_shard(model, mesh=mesh)
    _fit(model, rank)
    mine = torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()]).cpu()
    # (full_tensor: an all_gather of the shards)
    gloo = dist.new_group(backend="gloo")
    digests = [None] * n
    dist.all_gather_object(digests, hashlib.sha1(mine.numpy().tobytes()).hexdigest(), group=gloo)
    assert len(set(digests)) == 1, digests
    ref = _reference(n)  # the mean over ranks of each rank's gradient, as DDP
    assert float((mine.double() - ref).abs().max()) < 1e-5, float((mine.double() - ref).abs().max())
    start = torch.cat([p.detach().reshape(-1) for p in _model().parameters()])
    assert float((mine - start).abs().max()) > 1e-3


def test_fsdp2_matches_float64():
    _spawn(_fsdp, N, "rcclx")

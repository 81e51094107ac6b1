"""Symmetric tensors (every backend), CUDA graph capture and replay (CUDA backend), and
torch.compile(fullgraph=True) over the registered operators (torch >= 2.0), on several processes
(host backend: CPU tensors; CUDA backend: every process on the same GPU)."""
import pytest
import torch

import rcclx

from test_collectives import _device, _input, _run, _same_bits_everywhere, _tolerance

needs_cuda = pytest.mark.skipif(rcclx.backend != "cuda", reason="CUDA graphs need the CUDA build of rcclx")
needs_compile = pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile needs torch >= 2.0")


# ---- symmetric tensors ---------------------------------------------------------------------------

def _symmetric(rank, n):
    dev = _device()
    comm = rcclx.Communicator(timeout=20.0, symmetric_bytes=1 << 20)
    for dtype in (torch.float32, torch.bfloat16):
        count = 3000
        t = comm.symmetric_empty((count,), dtype)
        assert t.device.type == dev.type and t.dtype == dtype and t.shape == (count,)
        assert comm.is_symmetric(t)
        t.copy_(_input(rank, count, dtype, 5).to(dev))
        comm.all_reduce(t)
        ref = sum(_input(r, count, dtype, 5).double() for r in range(n))
        assert bool(((t.double().cpu() - ref).abs() <= _tolerance(dtype, n, ref)).all())
        assert _same_bits_everywhere(t)
        del t
    assert not comm.is_symmetric(torch.ones(16, device=dev))
    # A request larger than the pool: a clear error on every rank, and the pool still works.
    with pytest.raises(RuntimeError, match="do not fit"):
        comm.symmetric_empty((1 << 20,), torch.float32)
    a = comm.symmetric_empty((64, 4), torch.float32)
    a.fill_(float(rank + 1))
    comm.all_reduce(a, op="max")
    assert bool((a.cpu() == n).all())
    del a
    comm.destroy()


@pytest.mark.parametrize("n", [2, 3])
def test_symmetric_tensors(n):
    _run(_symmetric, n)


# ---- CUDA graphs ---------------------------------------------------------------------------------

def _graph(rank, n):
    dev = _device()
    comm = rcclx.Communicator(timeout=20.0)
    x = torch.zeros(5000, device=dev)
    y = torch.zeros(4096, dtype=torch.bfloat16, device=dev)
    comm.all_reduce(x)  # warm-up outside the capture (kernels loaded, nothing allocated in it)
    g = torch.cuda.CUDAGraph()
    with comm.graph_capture(), torch.cuda.graph(g):
        x.mul_(2.0)
        comm.all_reduce(x)
        comm.all_reduce(y, op="max", algorithm="flat")
    for step in range(3):
        x.copy_(_input(rank, x.numel(), torch.float32, 20 + step).to(dev))
        y.copy_(_input(rank, y.numel(), torch.bfloat16, 40 + step).to(dev))
        g.replay()
        torch.cuda.synchronize()
        comm.synchronize()
        ref = sum(2.0 * _input(r, x.numel(), torch.float32, 20 + step).double() for r in range(n))
        assert bool(((x.double().cpu() - ref).abs() <= _tolerance(torch.float32, n, ref)).all()), step
        want = torch.stack([_input(r, y.numel(), torch.bfloat16, 40 + step) for r in range(n)]).amax(0)
        assert torch.equal(y.cpu(), want), step
        assert _same_bits_everywhere(x)
    comm.destroy()


@needs_cuda
@pytest.mark.parametrize("n", [2, 4])
def test_cuda_graph_capture_and_replay(n):
    _run(_graph, n)


def _reused_address(rank, n):
    """A captured buffer freed and its address reused by a new allocation: the second capture's peers
    must map the new allocation, not the first one's (the cache keys on the allocation's handle)."""
    dev = _device()
    comm = rcclx.Communicator(timeout=20.0)
    results = []
    for step in range(2):
        x = torch.empty(1 << 20, device=dev)  # 4 MiB: a block of its own in the caching allocator
        results.append(x.data_ptr())
        x.fill_(float(rank + 1 + 10 * step))
        comm.all_reduce(x)
        g = torch.cuda.CUDAGraph()
        with comm.graph_capture(), torch.cuda.graph(g):
            comm.all_reduce(x)
        x.fill_(float(rank + 1 + 10 * step))
        g.replay()
        torch.cuda.synchronize()
        comm.synchronize()
        want = sum(float(r + 1 + 10 * step) for r in range(n))
        assert bool((x.cpu() == want).all()), (step, float(x[0]))
        del g, x
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the segment goes back to the driver; the next one may reuse the address
    comm.destroy()


@needs_cuda
def test_freed_and_reused_address_is_not_a_stale_mapping():
    _run(_reused_address, 2)


def _expandable(rank, n):
    """PyTorch's expandable_segments allocations (virtual memory): eager calls work (they copy through
    the workspace); a graph capture that reads them zero-copy either works (the runtime shares them) or
    fails on every rank with an error naming the buffer and the reason - never a hang or a wrong
    result - and the communicator still works after it."""
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    dev = _device()
    comm = rcclx.Communicator(timeout=20.0)
    x = torch.full((4096,), float(rank + 1), device=dev)
    segments = torch.cuda.memory_snapshot()
    if segments and "is_expandable" in segments[0]:
        assert any(s["is_expandable"] for s in segments), "the allocator did not use expandable segments"
    comm.all_reduce(x)
    assert bool((x.cpu() == n * (n + 1) / 2).all())
    g = torch.cuda.CUDAGraph()
    try:
        with comm.graph_capture(), torch.cuda.graph(g):
            comm.all_reduce(x)
    except RuntimeError as e:
        assert "expandable_segments" in str(e), str(e)
    else:  # registered: the replay must read the peers' tensors
        x.fill_(float(rank + 1))
        g.replay()
        torch.cuda.synchronize()
        comm.synchronize()
        assert bool((x.cpu() == n * (n + 1) / 2).all())
    x.fill_(1.0)
    comm.all_reduce(x)
    assert bool((x.cpu() == n).all())
    comm.destroy()


@needs_cuda
@pytest.mark.skipif(not hasattr(torch.cuda.memory, "_set_allocator_settings"), reason="needs torch >= 2.1")
def test_expandable_segments_are_shared_or_refused_clearly():
    _run(_expandable, 2)


# ---- torch.compile -------------------------------------------------------------------------------

class _RowParallelTail(torch.nn.Module):
    """The end of a row-parallel layer: partial product, AllReduce, bias, SiLU."""

    def __init__(self, comm):
        super().__init__()
        self.comm_id = comm.id

    def forward(self, x, w, b):
        y = x @ w
        torch.ops.rcclx.all_reduce(y, self.comm_id, "sum", "automatic")
        return torch.nn.functional.silu(y + b)


def _compile(rank, n):
    import torch._dynamo as dynamo

    dev = _device()
    comm = rcclx.Communicator(timeout=20.0)
    m = _RowParallelTail(comm)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(8, 64, generator=g).to(dev)
    w = torch.randn(64, 32, generator=torch.Generator().manual_seed(100 + rank)).to(dev)
    b = torch.randn(32, generator=torch.Generator().manual_seed(7)).to(dev)
    eager = m(x, w, b)
    dynamo.reset()
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")  # fullgraph: a graph break fails
    out = compiled(x, w, b)
    assert torch.equal(out, eager)
    explain = dynamo.explain(m)(x, w, b)
    assert explain.graph_break_count == 0
    comm.destroy()


@needs_compile
@pytest.mark.parametrize("n", [2])
def test_torch_compile_fullgraph(n):
    _run(_compile, n)

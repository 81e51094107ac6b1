"""Example 06 end to end: builds the user extension (setup.py here) against the installed rcclx, then
runs its fused linear + AllReduce + bias + SiLU kernel on 2 and 3 processes over a gloo group and
compares every rank's output with torch in float64; every rank must hold the same bits.
RCCLX_EXAMPLE_BUILD: where to build (default: a temporary directory)."""
import os
import subprocess
import sys
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import rcclx

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def build_dir():
    d = os.environ.get("RCCLX_EXAMPLE_BUILD") or tempfile.mkdtemp(prefix="rcclx_example06_")
    if os.environ.get("RCCLX_EXAMPLE_PREBUILT"):  # built already (e.g. beside the rcclx package)
        return d
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", d, "--build-temp",
                    os.path.join(d, "tmp")], cwd=HERE, check=True)
    return d


def _slices(rank, n, M, K, N):
    g = torch.Generator().manual_seed(11)
    x = torch.rand(M, K, generator=g, dtype=torch.float64) * 2 - 1
    w = torch.rand(K, N, generator=g, dtype=torch.float64) * 2 - 1
    bias = torch.rand(N, generator=g, dtype=torch.float64) * 2 - 1
    k = K // n
    return x, w, bias, x[:, rank * k:(rank + 1) * k], w[rank * k:(rank + 1) * k]


def _worker(rank, n, init, build, M, K, N):
    sys.path.insert(0, build)
    import linear_silu_ext
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    try:
        dev = torch.device("cpu") if rcclx.backend == "host" else torch.device("cuda", 0)
        comm = rcclx.Communicator(timeout=20.0)
        x, w, bias, x_r, w_r = _slices(rank, n, M, K, N)
        ws = comm.symmetric_empty(linear_silu_ext.workspace_bytes(M, N), torch.uint8)
        handles = comm.kernel_handles(ws)
        for _ in range(3):  # repeated calls alternate the workspace's halves
            out = linear_silu_ext.forward(x_r.float().to(dev), w_r.float().to(dev), bias.float().to(dev), handles)
            comm.synchronize()  # raises an error the kernel recorded (a peer that never arrived)
        ref = torch.nn.functional.silu(x @ w + bias)
        mag = (x.abs() @ w.abs() + bias.abs() + 1.0)
        err = (out.double().cpu() - ref).abs()
        assert bool((err <= 1e-6 * mag).all()), float(err.max())
        bits = out.cpu().view(torch.int32).tolist()
        all_bits = [None] * n
        dist.all_gather_object(all_bits, bits)
        assert all(b == all_bits[0] for b in all_bits), "ranks hold different bits"
        del ws
        comm.destroy()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("n", [2, 3])
def test_linear_silu_against_float64(build_dir, n):
    if rcclx.backend != "host" and not torch.cuda.is_available():
        pytest.skip("rcclx built for CUDA, no GPU here")
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_worker, args=(n, "file://" + os.path.join(d, "rv"), build_dir, 40, 64 * n, 96), nprocs=n,
                 join=True)

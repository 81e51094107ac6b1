#!/usr/bin/env python3
"""bench/multi_gpu/torch_allreduce.py: the baselines of the multi-GPU comparison, one process per
GPU (start with scripts/launch -n N). Times NCCL's all_reduce through torch.distributed (stream
launches and CUDA-graph replays) and, where this PyTorch has them, symmetric memory's one-shot and
two-shot all-reduce. Rank 0 prints one JSON object (sizes, dtype, microseconds per call).

NVLink multicast stays off (scripts/launch sets NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1; checked here too).
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist


def parse_size(s):
    s = s.strip().upper()
    mult = 1
    for suf, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if s.endswith(suf):
            s, mult = s[:-1], m
            break
    return int(float(s) * mult)


def timed(fn, iters, graph_calls, use_graph):
    """Median microseconds per call: events around single calls, or graph replays of graph_calls calls."""
    stream = torch.cuda.current_stream()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    if use_graph:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(stream)
        with torch.cuda.stream(s):
            fn()  # warm up on the capture stream
            torch.cuda.synchronize()
            with torch.cuda.graph(g, stream=s):
                for _ in range(graph_calls):
                    fn()
        stream.wait_stream(s)
        g.replay()
        torch.cuda.synchronize()
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) * 1e3 / graph_calls)
    else:
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) * 1e3)
    samples.sort()
    return samples[len(samples) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default="256M")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--graph-calls", type=int, default=16)
    ap.add_argument("--graph-max-bytes", default="4M")
    a = ap.parse_args()
    for var, want in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        if os.environ.get(var) != want:
            sys.exit(f"refusing to run: {var} must be {want} (start through scripts/launch)")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", torch.cuda.current_device()))
    dtype = getattr(torch, a.dtype)
    esize = torch.tensor([], dtype=dtype).element_size()
    symm = None
    try:
        import torch.distributed._symmetric_memory as symm_mem
        symm = symm_mem
    except Exception as e:  # noqa: BLE001
        symm_error = repr(e)
    rows = []
    size = max(parse_size(a.min_bytes), esize)
    gmax = parse_size(a.graph_max_bytes)
    while size <= parse_size(a.max_bytes):
        n = size // esize
        x = torch.randn(n, device="cuda", dtype=torch.float32).to(dtype)
        row = {"bytes": size, "count": n, "dtype": a.dtype, "world": world}
        row["nccl_us"] = timed(lambda: dist.all_reduce(x), a.iters, a.graph_calls, False)
        if size <= gmax:
            try:
                row["nccl_graph_us"] = timed(lambda: dist.all_reduce(x), a.iters, a.graph_calls, True)
            except Exception as e:  # noqa: BLE001
                row["nccl_graph_error"] = repr(e)[:200]
        if symm is not None and world > 1:
            try:
                t = symm.empty(n, dtype=dtype, device="cuda")
                t.copy_(x)
                symm.rendezvous(t, dist.group.WORLD.group_name)
                gname = dist.group.WORLD.group_name
                row["symm_one_shot_us"] = timed(lambda: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", gname),
                                                a.iters, a.graph_calls, False)
                row["symm_two_shot_us"] = timed(lambda: torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", gname),
                                                a.iters, a.graph_calls, False)
            except Exception as e:  # noqa: BLE001
                row["symm_error"] = repr(e)[:200]
        rows.append(row)
        size *= 4
    if rank == 0:
        print(json.dumps({"baseline": "torch.distributed NCCL + symmetric memory", "torch": torch.__version__,
                          "nccl": ".".join(map(str, torch.cuda.nccl.version())), "rows": rows}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

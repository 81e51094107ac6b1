"""rcclx from PyTorch against rcclx from C++, per message size, in one run:

    python3 bench/torch/bench_allreduce.py [--procs 8] [--dtype bfloat16] [--max-bytes 64M]

Spawns --procs processes (all on GPU 0, or CPU tensors for a host-backend build) over a gloo group,
each with an rcclx.Communicator(check_calls=False; True with --check-calls), and times in-place
sum AllReduces of each size:
  C++    the communicator's allreduce called in a C++ loop (as rcclx-bench --procs calls it);
  eager  torch.ops.rcclx.all_reduce called from Python, one call at a time;
  graph  the same calls captured in a CUDA graph (comm.graph_capture()) and replayed.
Each figure is wall clock per call over a loop that ends when the stream has finished it (the
slowest rank's), the median of --reps such loops (processes sharing one GPU see rare stalls).
With every process on one GPU, run under MPS (nvidia-cuda-mps-control -d) so that the
ranks' kernels run side by side; RCCLX_COLLECTIVE_BLOCKS (default here 128 / procs) keeps every rank's
blocks resident together. Targets (docs/pytorch.md): graph replay within 5% of C++, eager at most 5 us per call
above it.

--ops also times the other collectives, each per size: C++ (rcclx._C.time_op: the op's C++ function, its
checks included, called in a C++ loop) against eager (torch.ops.rcclx.<op> called from Python, one call at
a time), with the same stream wait at the end of each loop; sizes are each rank's input bytes.
"""
import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import rcclx


def _parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def _sizes(lo, hi):
    """lo, 4 lo, 16 lo, ... up to hi, then hi itself."""
    b = lo
    while b <= hi:
        yield b
        b *= 4
    if b // 4 != hi:
        yield hi


def _iters(nbytes):
    return max(20, min(2000, int(2e8 // max(nbytes, 1) ** 0.5 // 2000)))


def _slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def _median(loop, reps):
    """The median of reps calls of loop() (each returns the same figure on every rank)."""
    return sorted(loop() for _ in range(reps))[reps // 2]


def _run(rank, n, init, args):
    # Every rank's blocks must be resident at once (they wait for each other): with all ranks on one
    # GPU, cap the blocks per collective so that n ranks' blocks fit (a communicator per GPU uses 128).
    os.environ.setdefault("RCCLX_COLLECTIVE_BLOCKS", str(max(1, 128 // n)))
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    gpu = rcclx.backend != "host"
    dev = torch.device("cuda", 0) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(dev)
    dtype = getattr(torch, args.dtype)
    comm = rcclx.Communicator(check_calls=args.check_calls, timeout=60.0)
    sync = (lambda: torch.cuda.current_stream().synchronize()) if gpu else (lambda: None)
    if rank == 0:
        print(f"# rcclx from PyTorch: {n} processes on {'one GPU (' + torch.cuda.get_device_name(0) + ')' if gpu else 'the host backend'}, "
              f"{args.dtype}, in-place sum AllReduce, algorithm {args.algorithm}, call checks "
              f"{'on' if args.check_calls else 'off'}; us per call (slowest rank)")
        print(f"# MPS: {os.environ.get('RCCLX_BENCH_MPS', 'unknown')}; RCCLX_COLLECTIVE_BLOCKS="
              f"{os.environ['RCCLX_COLLECTIVE_BLOCKS']}")
        print(f"{'bytes':>10} {'C++':>9} {'eager':>9} {'eager-C++':>10} {'graph':>9} {'graph/C++':>10}")
    elem = torch.empty(0, dtype=dtype).element_size()
    for nbytes in _sizes(args.min_bytes, args.max_bytes):
        count = max(1, nbytes // elem)
        t = torch.ones(count, dtype=dtype, device=dev)
        iters = _iters(nbytes) if args.iters == 0 else args.iters
        # C++
        rcclx._C.time_all_reduce(comm.id, t, args.algorithm, 5)

        def cpp_loop():
            dist.barrier()
            return _slowest(rcclx._C.time_all_reduce(comm.id, t, args.algorithm, iters)) / iters

        cpp = _median(cpp_loop, args.reps)
        # eager
        op = torch.ops.rcclx.all_reduce
        for _ in range(5):
            op(t, comm.id, "sum", args.algorithm)
        sync()

        def eager_loop():
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                op(t, comm.id, "sum", args.algorithm)
            sync()
            return _slowest(time.perf_counter() - t0) / iters

        eager = _median(eager_loop, args.reps)
        # graph
        graph = float("nan")
        if gpu:
            per_graph = min(iters, 50)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):  # warm-up on a side stream, as torch.cuda.graph expects
                op(t, comm.id, "sum", args.algorithm)
            torch.cuda.current_stream().wait_stream(s)
            sync()
            g = torch.cuda.CUDAGraph()
            with comm.graph_capture(), torch.cuda.graph(g):
                for _ in range(per_graph):
                    op(t, comm.id, "sum", args.algorithm)
            replays = max(1, iters // per_graph)
            g.replay()
            sync()

            def graph_loop():
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(replays):
                    g.replay()
                sync()
                return _slowest(time.perf_counter() - t0) / (replays * per_graph)

            graph = _median(graph_loop, args.reps)
            del g
        if rank == 0:
            print(f"{nbytes:>10} {cpp * 1e6:>9.2f} {eager * 1e6:>9.2f} {(eager - cpp) * 1e6:>+10.2f} "
                  f"{graph * 1e6:>9.2f} {graph / cpp:>10.3f}", flush=True)
        del t
    ops = [o for o in args.ops.split(",") if o]
    if ops and rank == 0:
        print(f"# other collectives: {args.dtype}, roots rank 0, even splits; us per call (slowest rank)")
        print(f"{'op':>15} {'bytes':>10} {'C++':>9} {'eager':>9} {'eager-C++':>10}")
    for name in ops:
        for nbytes in _sizes(max(args.min_bytes, n * elem), args.ops_max_bytes):
            count = max(n, nbytes // elem // n * n)
            t = torch.ones(count, dtype=dtype, device=dev)
            outs = {"all_gather": n * count, "reduce_scatter": count // n, "all_to_all": count, "all_to_all_v": count}
            out = torch.empty(outs.get(name, 0), dtype=dtype, device=dev)
            splits = [count // n] * n
            call = {
                "all_reduce": lambda: torch.ops.rcclx.all_reduce(t, comm.id, "sum", args.algorithm),
                "all_reduce_avg": lambda: torch.ops.rcclx.all_reduce(t, comm.id, "avg", args.algorithm),
                "broadcast": lambda: torch.ops.rcclx.broadcast(t, comm.id, 0, args.algorithm),
                "reduce": lambda: torch.ops.rcclx.reduce(t, comm.id, 0, "sum", args.algorithm),
                "all_gather": lambda: torch.ops.rcclx.all_gather(out, t, comm.id, args.algorithm),
                "reduce_scatter": lambda: torch.ops.rcclx.reduce_scatter(out, t, comm.id, "sum", args.algorithm),
                "all_to_all": lambda: torch.ops.rcclx.all_to_all(out, t, comm.id, args.algorithm),
                "all_to_all_v": lambda: torch.ops.rcclx.all_to_all_v(out, t, comm.id, splits, splits),
                "barrier": lambda: rcclx._C.barrier(comm.id),
            }[name]
            iters = _iters(nbytes) if args.iters == 0 else args.iters
            rcclx._C.time_op(comm.id, name, out, t, args.algorithm, 5)

            def cpp_loop():
                dist.barrier()
                return _slowest(rcclx._C.time_op(comm.id, name, out, t, args.algorithm, iters)) / iters

            cpp = _median(cpp_loop, args.reps)
            for _ in range(5):
                call()
            sync()

            def eager_loop():
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    call()
                sync()
                return _slowest(time.perf_counter() - t0) / iters

            eager = _median(eager_loop, args.reps)
            if rank == 0:
                print(f"{name:>15} {nbytes:>10} {cpp * 1e6:>9.2f} {eager * 1e6:>9.2f} {(eager - cpp) * 1e6:>+10.2f}",
                      flush=True)
            if name == "barrier":
                break
    comm.destroy()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--procs", type=int, default=8)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--algorithm", default="automatic", choices=["automatic", "flat", "tree", "low_precision"])
    p.add_argument("--min-bytes", type=_parse_bytes, default=8)
    p.add_argument("--max-bytes", type=_parse_bytes, default=64 << 20)
    p.add_argument("--iters", type=int, default=0, help="calls per size (0: by size)")
    p.add_argument("--ops", default="", help="also these collectives (comma-separated): all_reduce, all_reduce_avg, "
                   "broadcast, reduce, all_gather, reduce_scatter, all_to_all, all_to_all_v, barrier")
    p.add_argument("--ops-max-bytes", type=_parse_bytes, default=1 << 20)
    p.add_argument("--check-calls", action="store_true", help="communicators with call checks (one exchange "
                   "between the ranks per call, through their shared-memory mailbox)")
    p.add_argument("--reps", type=int, default=5, help="timed loops per figure; the median is printed")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_run, args=(args.procs, "file://" + os.path.join(d, "rv"), args), nprocs=args.procs, join=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch's own FP8 conversions, timed on the GPU: the peer of rcclx-bench-fp8.

Prints one JSON object: median milliseconds (CUDA events, rotating between two input tensors)
for n elements of
    fp8_e4m3fn_to_float_ms    x.float() on a torch.float8_e4m3fn tensor
    fp8_e4m3fn_to_bf16_ms     x.to(torch.bfloat16) on it
    float_to_fp8_e4m3fn_ms    x.to(torch.float8_e4m3fn) on a float32 tensor
    bf16_to_fp8_e4m3fn_ms     the same from bfloat16
    copy_float_ms             out.copy_(x) of n float32 (PyTorch's device copy)

Usage: python3 bench/fp8/torch_baseline.py [--n 67108864] [--iters 50] [--warmup 5]
(run by `rcclx-bench-fp8 --suite gpu`, or by hand on the same machine).
"""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64 << 20)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - report any import failure as data
        print(json.dumps({"error": "cannot import torch: %s" % e}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch.cuda.is_available() is False", "torch": torch.__version__}))
        return 0
    n = args.n
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(1)
    x32 = [torch.randn(n, device=dev, generator=gen) for _ in range(2)]
    xbf = [t.to(torch.bfloat16) for t in x32]
    x8 = [t.to(torch.float8_e4m3fn) for t in x32]
    out32 = torch.empty(n, device=dev)

    def timeit(fn):
        for i in range(args.warmup):
            fn(i)
        torch.cuda.synchronize()
        times = []
        for i in range(args.iters):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            fn(i)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        return statistics.median(times)

    res = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "n": n,
        "iters": args.iters,
        "fp8_e4m3fn_to_float_ms": timeit(lambda i: x8[i % 2].float()),
        "fp8_e4m3fn_to_bf16_ms": timeit(lambda i: x8[i % 2].to(torch.bfloat16)),
        "float_to_fp8_e4m3fn_ms": timeit(lambda i: x32[i % 2].to(torch.float8_e4m3fn)),
        "bf16_to_fp8_e4m3fn_ms": timeit(lambda i: xbf[i % 2].to(torch.float8_e4m3fn)),
        "copy_float_ms": timeit(lambda i: out32.copy_(x32[i % 2])),
    }
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())

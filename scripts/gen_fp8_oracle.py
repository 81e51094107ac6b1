#!/usr/bin/env python3
"""PyTorch oracle vectors for rcclx's FP8 encoder (tests/fp8/oracle_test.cpp).

For each of torch.float8_e4m3fn, float8_e5m2, float8_e4m3fnuz and float8_e5m2fnuz this converts
float32 inputs with `x.to(dtype)` (PyTorch's own conversion, non-saturating) and writes
tests/fp8/data/fp8_oracle_<format>.bin:

    8 bytes   magic b"RFP8ORC1"
    u32       65536, then 65536 result bytes: the inputs are every bf16 pattern i, as float32 bits i << 16
    u32       n, then n records of (u32 float32 input bits, u8 result byte)   [little-endian]

The n explicit inputs are: every code value and every midpoint between adjacent codes (including
the overflow threshold above max), each with its neighbours 1 and 2 float32 ulps away, both signs;
zeros, float32 denormals, FLT_MIN/MAX, infinities, NaNs with several payloads and signs; 20000
uniformly random bit patterns and 20000 log-uniform values across the format's range.
Total size stays under 2 MB for the four files.

The results come from CUDA tensors when CUDA is available (PyTorch's CUDA copy kernel applies the
scalar c10::Float8_* conversion, independent of the host CPU's vector ISA), else from CPU tensors.
When both are available any disagreement between them is printed and counted in the summary. The script also prints
the bytes PyTorch writes for NaN, Inf and overflow, and checks the assumption rcclx documents:
.to(float8) does not saturate (e4m3 overflow -> NaN, e5m2 -> Inf, fnuz -> 0x80).

Usage (on a machine with PyTorch >= 2.1; the GPU machine has 2.11):
    python3 scripts/gen_fp8_oracle.py [--out tests/fp8/data]
"""
import argparse
import json
import os
import struct
import sys

import torch

FORMATS = {
    "e4m3": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
    "e4m3_fnuz": torch.float8_e4m3fnuz,
    "e5m2_fnuz": torch.float8_e5m2fnuz,
}
MAGIC = b"RFP8ORC1"


def f32_from_bits(bits):
    """int list (0..2^32-1) -> float32 tensor with exactly those bit patterns."""
    t = torch.tensor([b - (1 << 32) if b >= (1 << 31) else b for b in bits], dtype=torch.int32)
    return t.view(torch.float32)


def bits_of(x):
    """float32 tensor -> list of unsigned bit patterns."""
    return [(b + (1 << 32)) & 0xFFFFFFFF for b in x.view(torch.int32).tolist()]


def convert(x, dtype, device="cpu"):
    return x.to(device).to(dtype).view(torch.uint8).cpu().tolist()


def boundary_bits(dtype):
    codes = torch.arange(128, dtype=torch.uint8).view(dtype).float()
    values = sorted(set(v for v in codes.tolist() if v == v and abs(v) != float("inf")))
    step_top = values[-1] - values[-2]
    points = list(values)
    points += [(a + b) / 2 for a, b in zip(values, values[1:])]
    points += [values[-1] + step_top / 2, values[-1] + step_top, 2 * (values[-1] + step_top)]
    base = bits_of(torch.tensor(points, dtype=torch.float32))
    out = set()
    for b in base:
        for d in (-2, -1, 0, 1, 2):
            v = b + d
            if 0 <= v < 0x7F800000:
                out.add(v)
    specials = [0x00000000, 0x00000001, 0x00000002, 0x007FFFFF, 0x00800000, 0x00800001, 0x7F7FFFFF,
                0x7F7FFFFE, 0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x7FBFFFFF, 0x3F800000,
                0x33800000, 0x2F800000, 0x4F800000]
    out.update(specials)
    out = sorted(out)
    return out + [b | 0x80000000 for b in out]


def random_bits(dtype, gen):
    r = torch.randint(0, 1 << 32, (20000,), generator=gen, dtype=torch.int64).tolist()
    codes = torch.arange(128, dtype=torch.uint8).view(dtype).float()
    finite = codes[torch.isfinite(codes)]
    lo = float(finite[finite > 0].min()) / 4
    hi = float(finite.max()) * 4
    e = torch.rand(20000, generator=gen, dtype=torch.float64) * (torch.log2(torch.tensor(hi / lo))) + torch.log2(
        torch.tensor(lo))
    sign = torch.where(torch.rand(20000, generator=gen) < 0.5, -1.0, 1.0).double()
    vals = (sign * torch.exp2(e)).float()
    return r + bits_of(vals)


def special_report(dtype, device):
    names = ["nan", "-nan", "inf", "-inf", "2*max", "-2*max", "1e30", "-0.0", "-1e-30"]
    codes = torch.arange(128, dtype=torch.uint8).view(dtype).float()
    mx = float(codes[torch.isfinite(codes)].max())
    nans = f32_from_bits([0x7FC00000, 0xFFC00000])  # +NaN, -NaN by their bits
    rest = torch.tensor([float("inf"), -float("inf"), 2 * mx, -2 * mx, 1e30, -0.0, -1e-30], dtype=torch.float32)
    return dict(zip(names, ["0x%02X" % c for c in convert(torch.cat([nans, rest]), dtype, device)])), mx


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fp8", "data"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(20240611)
    cuda = torch.cuda.is_available()
    summary = {"torch": torch.__version__, "cuda": cuda, "formats": {}}
    ok = True
    for name, dtype in FORMATS.items():
        report, mx = special_report(dtype, "cuda" if cuda else "cpu")
        # Non-saturating: overflow is not clamped to max.
        expect_overflow = {"e4m3": ("0x7F", "0xFF"), "e5m2": ("0x7C", "0xFC")}.get(name, ("0x80", "0x80"))
        saturating = (report["2*max"], report["-2*max"]) != expect_overflow
        if saturating:
            ok = False
            print(f"UNEXPECTED: {name}: .to() overflow gave {report['2*max']}/{report['-2*max']}, "
                  f"expected {expect_overflow} (non-saturating)", file=sys.stderr)
        bf16_bits = [i << 16 for i in range(65536)]
        pair_bits = boundary_bits(dtype) + random_bits(dtype, gen)
        primary = "cuda" if cuda else "cpu"
        bf16_res = convert(f32_from_bits(bf16_bits), dtype, primary)
        pair_res = convert(f32_from_bits(pair_bits), dtype, primary)
        cpu_cuda_diff = None
        if cuda:
            cpu_cuda_diff = 0
            for bits, res in ((bf16_bits, bf16_res), (pair_bits, pair_res)):
                res_cpu = convert(f32_from_bits(bits), dtype, "cpu")
                for b, g, c in zip(bits, res, res_cpu):
                    if c != g:
                        if cpu_cuda_diff < 8:
                            print(f"{name}: CPU and CUDA differ for 0x{b:08X}: cuda 0x{g:02X} cpu 0x{c:02X}")
                        cpu_cuda_diff += 1
        path = os.path.join(args.out, f"fp8_oracle_{name}.bin")
        with open(path, "wb") as f:
            f.write(MAGIC)
            f.write(struct.pack("<I", len(bf16_res)))
            f.write(bytes(bf16_res))
            f.write(struct.pack("<I", len(pair_bits)))
            f.write(b"".join(struct.pack("<IB", b, r) for b, r in zip(pair_bits, pair_res)))
        summary["formats"][name] = {"file": os.path.relpath(path, root), "bytes": os.path.getsize(path),
                                    "explicit_inputs": len(pair_bits), "max_finite": mx, "specials": report,
                                    "non_saturating": not saturating, "source": primary,
                                    "cpu_cuda_mismatches": cpu_cuda_diff}
        print(f"{name}: {len(bf16_res)} bf16 + {len(pair_bits)} float32 inputs -> {path}; specials {report}")
    print(json.dumps(summary, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

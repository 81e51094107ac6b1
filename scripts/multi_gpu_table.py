#!/usr/bin/env python3
"""scripts/multi_gpu_table.py: the side-by-side table of the multi-GPU comparison, from the JSON files
that scripts/multi-gpu-bench writes for N processes (one per GPU):

    rcclx_procsN_{bf16,float}.json     rcclx-bench --procs N --json (flat, tree, automatic, lpc; copy / reg)
    nccl_procsN.json                   rcclx-bench-nccl --json (ncclAllReduce plain and with symmetric windows)
    torch_procsN_{bfloat16,float32}.json   bench/multi_gpu/torch_allreduce.py (PyTorch symmetric memory)

    scripts/multi_gpu_table.py DIR N [--markdown]

Per type and size: time per call (us) of every variant, the best NCCL (plain or window), and
auto / NCCL (< 1 is faster than NCCL). Every time is the slowest rank's median, graph replays up to
the tools' --graph-max-bytes and stream events above (PyTorch's symmetric-memory rows: rank 0's
events, no graph). Then the multi-GPU targets, evaluated on these numbers:
  - at <= 256 KiB on 8 GPUs, rcclx automatic at least 1.3x faster than NCCL;
  - at every other size up to 256 MiB, automatic faster than NCCL or within 10% of it;
  - LPC faster than NCCL at >= 64 MiB.
"NCCL" is the faster of plain and window at each size: the stricter comparison. rcclx automatic is
the faster of its copy and registered-input rows (NCCL's window rows register their buffers too).
"""
import json
import os
import sys


def load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        d = json.load(f)
    return d["rows"] if isinstance(d, dict) else d


def fmt(x):
    return "-" if x is None else (f"{x:.1f}" if x >= 100 else f"{x:.2f}")


def human(b):
    for suf, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= m and b % m == 0:
            return f"{b // m}{suf}"
    return str(b)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    d, n = sys.argv[1], int(sys.argv[2])
    md = "--markdown" in sys.argv
    verdicts = {"small": [], "other": [], "lpc": []}
    bad_rows = []
    for t, tt in (("bf16", "bfloat16"), ("float", "float32")):
        times = {}  # (bytes, column) -> us
        for r in load(os.path.join(d, f"rcclx_procs{n}_{t}.json")):
            if r.get("type") != t:
                continue
            if not r.get("ok", False):
                bad_rows.append(f"rcclx {t} {r['size_bytes']} {r['algorithm']} {r['input']}: {r.get('error', '')}")
                continue
            alg = {"automatic": "auto", "low_precision": "lpc"}.get(r["algorithm"], r["algorithm"])
            col = alg if r["input"] == "copy" else alg + "_reg"
            times[(r["size_bytes"], col)] = r["procs_us"]
        for r in load(os.path.join(d, f"nccl_procs{n}.json")):
            if r.get("type") != t:
                continue
            if not r.get("ok", False):
                bad_rows.append(f"nccl {t} {r['bytes']} {r['algorithm']}")
                continue
            times[(r["bytes"], r["algorithm"])] = r["time_us"]
        for r in load(os.path.join(d, f"torch_procs{n}_{tt}.json")):
            for k, col in (("symm_one_shot_us", "symm1"), ("symm_two_shot_us", "symm2")):
                if k in r:
                    times[(r["bytes"], col)] = r[k]
        sizes = sorted({b for b, _ in times})
        if not sizes:
            continue
        cols = ["flat", "tree", "auto", "flat_reg", "tree_reg", "auto_reg", "lpc", "nccl", "nccl_win", "symm1", "symm2"]
        cols = [c for c in cols if any((b, c) in times for b in sizes)]
        head = ["size"] + cols + ["auto/nccl", "lpc/nccl"]
        print(f"\n### {n} GPUs, {t}: time per call (us)\n")
        if md:
            print("| " + " | ".join(head) + " |")
            print("|" + "---|" * len(head))
        else:
            print(" ".join(f"{h:>10}" for h in head))
        for b in sizes:
            g = lambda c: times.get((b, c))  # noqa: E731
            ncc = [x for x in (g("nccl"), g("nccl_win")) if x is not None]
            nccl = min(ncc) if ncc else None
            autos = [x for x in (g("auto"), g("auto_reg")) if x is not None]
            auto = min(autos) if autos else None
            ra = auto / nccl if auto and nccl else None
            rl = g("lpc") / nccl if g("lpc") and nccl else None
            cells = [human(b)] + [fmt(g(c)) for c in cols] + [fmt(ra), fmt(rl)]
            print(("| " + " | ".join(cells) + " |") if md else " ".join(f"{c:>10}" for c in cells))
            if ra is not None and b <= (256 << 20):
                if b <= (256 << 10) and n == 8:
                    verdicts["small"].append((ra <= 1 / 1.3, t, b, ra))
                else:
                    verdicts["other"].append((ra <= 1.10, t, b, ra))
            if rl is not None and b >= (64 << 20):
                verdicts["lpc"].append((rl < 1.0, t, b, rl))
    print()
    names = {"small": "auto >= 1.3x faster than NCCL at <= 256 KiB (8 GPUs)",
             "other": "auto faster than NCCL or within 10% (other sizes <= 256 MiB)",
             "lpc": "LPC faster than NCCL at >= 64 MiB"}
    for k, v in verdicts.items():
        if not v:
            print(f"# target {names[k]}: not measured here" + (" (needs 8 GPUs)" if k == "small" and n != 8 else ""))
            continue
        worst = max(v, key=lambda x: x[3])
        fails = [x for x in v if not x[0]]
        print(f"# target {names[k]}: {'PASS' if not fails else 'MISS'} "
              f"({len(v) - len(fails)}/{len(v)} sizes; worst {worst[1]} {human(worst[2])}: ratio {worst[3]:.2f})")
        for x in fails:
            print(f"#   miss: {x[1]} {human(x[2])} ratio {x[3]:.2f}")
    for line in bad_rows:
        print(f"# FAILED row: {line}")
    return 1 if bad_rows else 0


if __name__ == "__main__":
    sys.exit(main())

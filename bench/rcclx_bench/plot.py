#!/usr/bin/env python3
"""Plot rcclx-bench JSON: time vs size per algorithm (one panel per element type), with the
empty-kernel and copy baselines of the same run, and hbm% of the tree below; with a third argument,
also the LPC vs plain collectives (time per collective and type, and the LPC speedup below).

usage: plot.py rcclx-bench.json out.png [collectives.png]
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    with open(src) as f:
        data = json.load(f)
    rows = [r for r in data["rows"] if not r["error"]]
    types = sorted({r["type"] for r in rows})
    fig, axes = plt.subplots(2, max(1, len(types)), figsize=(7 * max(1, len(types)), 9), squeeze=False)
    for col, t in enumerate(types):
        ax, ax2 = axes[0][col], axes[1][col]
        series = {}
        for r in rows:
            if r["type"] != t:
                continue
            label = r["algorithm"] + ("" if r["input"] == "copy" else " (input in sym. buffer)")
            series.setdefault(label, []).append(r)
        for label, rs in sorted(series.items()):
            rs.sort(key=lambda r: r["size_bytes"])
            ax.plot([r["size_bytes"] for r in rs], [r["time_us"] for r in rs], marker="o", ms=3, label=label)
            if label == "tree":
                ax2.plot([r["size_bytes"] for r in rs], [100 * r["hbm_efficiency"] for r in rs], marker="o", ms=3,
                         label="tree hbm%")
            if label == "flat":
                ax2.plot([r["size_bytes"] for r in rs], [100 * r["hbm_efficiency"] for r in rs], marker="o", ms=3,
                         label="flat hbm%")
        base = sorted(series.get("flat", []) or next(iter(series.values())), key=lambda r: r["size_bytes"])
        ax.plot([r["size_bytes"] for r in base], [r["empty_us"] for r in base], "k--", lw=1,
                label="empty kernel (flat grid)")
        ax.plot([r["size_bytes"] for r in base], [r["copy_us"] for r in base], "k:", lw=1,
                label="device copy of N*S bytes")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("time per call (us)")
        ax.set_title("%s AllReduce, %d emulated ranks, %s (%s)" % (t, data["num_ranks"], data["device"], data["backend"]))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        ax2.axhline(90, color="r", lw=1, ls="--", label="tree target 90% (>= 16 MiB)")
        ax2.set_xscale("log", base=2)
        ax2.set_xlabel("bytes per rank")
        ax2.set_ylabel("required HBM traffic / copy bandwidth (%)")
        ax2.grid(True, which="both", alpha=0.3)
        ax2.legend(fontsize=8)
    fig.suptitle(data["command"], fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


def plot_collectives(src, dst):
    with open(src) as f:
        data = json.load(f)
    rows = [r for r in data.get("collectives", []) if not r["error"]]
    if not rows:
        return
    types = sorted({r["type"] for r in rows})
    colls = ["allreduce", "allgather", "reduce_scatter", "alltoall"]
    fig, axes = plt.subplots(2, len(types), figsize=(7 * len(types), 9), squeeze=False)
    for col, t in enumerate(types):
        ax, ax2 = axes[0][col], axes[1][col]
        for c in colls:
            for algo, style in (("lpc", "-"), ("tree", ":"), ("direct", ":")):
                rs = sorted([r for r in rows if r["type"] == t and r["collective"] == c and r["algorithm"] == algo],
                            key=lambda r: r["size_bytes"])
                if rs:
                    ax.plot([r["size_bytes"] for r in rs], [r["time_us"] for r in rs], style, marker="o", ms=3,
                            label="%s %s" % (c, algo))
            rs = sorted([r for r in rows if r["type"] == t and r["collective"] == c and r["algorithm"] == "lpc"],
                        key=lambda r: r["size_bytes"])
            ax2.plot([r["size_bytes"] for r in rs], [100.0 * r["hbm_efficiency"] for r in rs], marker="o", ms=3,
                     label=c)
        ax2.axhline(75, color="r", lw=1, ls="--", label="LPC target 75% (>= 16 MiB)")
        for a in (ax, ax2):
            a.set_xscale("log", base=2)
            a.set_xlabel("input bytes per rank")
            a.grid(True, which="both", alpha=0.3)
            a.legend(fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("time per call (us)")
        ax.set_title("%s: LPC (FP8 wire) vs plain, %d emulated ranks, %s" % (t, data["num_ranks"], data["device"]))
        ax2.set_ylabel("LPC: required HBM traffic / copy bandwidth (%)")
    fig.suptitle(data["command"], fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    if any(r for r in json.load(open(sys.argv[1]))["rows"]):
        main(sys.argv[1], sys.argv[2])
    if len(sys.argv) == 4:
        plot_collectives(sys.argv[1], sys.argv[3])

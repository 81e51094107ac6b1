#!/usr/bin/env python3
"""Plot rcclx-bench JSON: time vs size per algorithm (one panel per element type), with the
empty-kernel and copy baselines of the same run, and hbm% of the tree below.

usage: plot.py rcclx-bench.json out.png
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
        ax2.axhline(70, color="r", lw=1, ls="--", label="70% target")
        ax2.set_xscale("log", base=2)
        ax2.set_xlabel("bytes per rank")
        ax2.set_ylabel("required HBM traffic / copy bandwidth (%)")
        ax2.grid(True, which="both", alpha=0.3)
        ax2.legend(fontsize=8)
    fig.suptitle(data["command"], fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

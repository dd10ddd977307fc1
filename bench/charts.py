#!/usr/bin/env python3
"""Charts of the benchmarks' JSON output (`--json FILE`, schema in bench/README.md) as PNG files.

Per input file one figure: one panel per group, a bar per loader at its median GB/s with a min-max
whisker over its runs, the group's same-run references beside them in grey with hatching, and
on each loader's bar its ratio to its reference (whose label is bold). The title names the bench, the machine and the
date; the command line that produced the JSON is the caption. Headless (Agg) and deterministic:
the same JSON gives the same PNG (no timestamps in the file's metadata).

usage: charts.py [--out DIR] FILE.json [FILE.json ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from pathlib import Path

LOADER_COLOR = "#1f77b4"
REFERENCE_COLOR = "#b0b0b0"
REFERENCE_HATCH = "//"


def load_report(path: Path) -> dict:
    """The JSON report, checked for what the charts need; ValueError names the first problem."""
    report = json.loads(path.read_text())
    for key in ("bench", "machine", "date", "command", "results"):
        if key not in report:
            raise ValueError(f"{path}: no '{key}' (not a bench/README.md report?)")
    for i, r in enumerate(report["results"]):
        for key in ("group", "name", "runs_gbps"):
            if key not in r:
                raise ValueError(f"{path}: results[{i}] has no '{key}'")
    return report


def groups_of(report: dict) -> dict[str, list[dict]]:
    """Results by group, in the order the bench wrote them: references first within a group."""
    groups: dict[str, list[dict]] = {}
    for r in report["results"]:
        groups.setdefault(r["group"], []).append(r)
    return {g: sorted(rs, key=lambda r: not r.get("is_reference", False)) for g, rs in groups.items()}


def stats(r: dict) -> tuple[float, float, float]:
    """(median, min, max) GB/s: the bench's own median when written, else the runs' upper median."""
    runs = sorted(r["runs_gbps"]) or [0.0]
    median = r.get("median_gbps", runs[len(runs) // 2])
    return median, r.get("min_gbps", runs[0]), r.get("max_gbps", runs[-1])


def machine_line(m: dict) -> str:
    parts = [m.get("cpu", "unknown CPU"), f"{m['nproc']} cores" if "nproc" in m else None,
             f"{m['memory_bytes'] / 2**30:.0f} GiB" if "memory_bytes" in m else None, m.get("kernel")]
    return ", ".join(p for p in parts if p)


def size_text(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def draw_group(ax, title: str, results: list[dict]) -> None:
    """One panel: bars at the medians with min-max whiskers, ratios on the loaders' bars."""
    medians = {r["name"]: stats(r)[0] for r in results}
    top = max([stats(r)[2] for r in results] + [1e-9])
    for x, r in enumerate(results):
        median, lo, hi = stats(r)
        ref = r.get("is_reference", False)
        ax.bar(x, median, width=0.7, color=REFERENCE_COLOR if ref else LOADER_COLOR,
               hatch=REFERENCE_HATCH if ref else None, edgecolor="#404040", linewidth=0.6, zorder=2)
        ax.errorbar(x, median, yerr=[[median - lo], [hi - median]], fmt="none", ecolor="black",
                    elinewidth=1, capsize=4, zorder=3)
        ax.text(x, hi + top * 0.02, f"{median:.2f}", ha="center", va="bottom", fontsize=8, zorder=4)
        base = medians.get(r.get("reference", ""), 0)
        if not ref and base > 0:
            ax.text(x, median / 2, f"{median / base:.2f}×", ha="center", va="center", fontsize=9, color="white",
                    fontweight="bold", zorder=4)
    # The references that ratios are taken against get bold labels (the "best raw" of several).
    bases = {r.get("reference") for r in results if not r.get("is_reference", False)}
    labels = []
    for r in results:
        label = "\n".join(textwrap.wrap(r["name"], 18))
        if r.get("note"):
            label += "\n" + "\n".join(textwrap.wrap(f"({r['note']})", 18))
        labels.append(label)
    ax.set_xticks(range(len(results)), labels, fontsize=7)
    for tick, r in zip(ax.get_xticklabels(), results):
        if r["name"] in bases:
            tick.set_fontweight("bold")
    ax.set_title("\n".join(textwrap.wrap(title, 40)), fontsize=9)
    ax.set_ylim(0, top * 1.15)
    ax.set_ylabel("GB/s")
    ax.grid(axis="y", color="#e0e0e0", zorder=0)


def make_figure(report: dict):
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    groups = groups_of(report)
    cols = min(3, max(1, len(groups)))
    rows = math.ceil(len(groups) / cols) if groups else 1
    widest = max([len(rs) for rs in groups.values()] + [1])
    width = max(4.6, 1.25 * widest + 1.2)
    # 7 pt monospace is ~0.06 in a character: wrap the command to the figure's width.
    caption = textwrap.wrap("$ " + report["command"], int(width * cols / 0.062), break_on_hyphens=False)
    height = 4.6 * rows + 1.0 + 0.14 * len(caption) + 0.35  # panels, title, caption, legend (inches)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height), squeeze=False)
    for ax, (title, results) in zip(axes.flat, groups.items()):
        draw_group(ax, title, results)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    size = f", {size_text(report['size_bytes'])}" if report.get("size_bytes") else ""
    fig.suptitle(f"{report['bench']}{size} — {report['date']}\n{machine_line(report['machine'])}", fontsize=10)
    caption_h = (0.14 * len(caption) + 0.08) / height  # figure fractions
    legend_h = 0.35 / height
    fig.text(0.01, 0.02 / height, "\n".join(caption), fontsize=7, family="monospace", ha="left", va="bottom")
    fig.legend(handles=[Patch(facecolor=LOADER_COLOR, edgecolor="#404040", label="loader (median, min–max of runs)"),
                        Patch(facecolor=REFERENCE_COLOR, hatch=REFERENCE_HATCH, edgecolor="#404040",
                              label="same-run reference (bold label: ratios are to it)")],
               loc="lower center", bbox_to_anchor=(0.5, caption_h), ncol=2, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, caption_h + legend_h, 1, 1))
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help="JSON reports written by the benches' --json")
    ap.add_argument("--out", type=Path, default=Path("."), help="directory for the PNGs (default: .)")
    ap.add_argument("--dpi", type=int, default=110)
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Deterministic output: no build date or software in the PNG, one hash seed for hatching.
    matplotlib.rcParams["svg.hashsalt"] = "tz-bench"
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.files:
        report = load_report(path)
        fig = make_figure(report)
        out = args.out / (path.stem + ".png")
        fig.savefig(out, dpi=args.dpi, metadata={"Software": None})
        plt.close(fig)
        print(f"charts: {path} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

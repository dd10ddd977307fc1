"""The benchmarks' common JSON output for Python benches: the same schema as bench/bench_json.hpp
(documented in bench/README.md), read by bench/charts.py."""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path


def machine_info() -> dict:
    m = {"nproc": os.cpu_count() or 1, "kernel": f"{platform.system()} {platform.release()}"}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                m["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        m["memory_bytes"] = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        pass
    return m


def entry(group: str, name: str, runs_gbps: list[float], reference: str | None = None,
          is_reference: bool = False, note: str | None = None, median: float | None = None) -> dict:
    """One result; `median` is the one the bench printed (default: the upper median, as the C++
    benches print it)."""
    runs = sorted(runs_gbps) or [0.0]
    e = {"group": group, "name": name}
    if is_reference:
        e["is_reference"] = True
    elif reference:
        e["reference"] = reference
    if note:
        e["note"] = note
    e.update(runs_gbps=list(runs_gbps), median_gbps=runs[len(runs) // 2] if median is None else median, min_gbps=runs[0], max_gbps=runs[-1])
    return e


def write_report(path: str | Path, bench: str, size_bytes: int, results: list[dict], argv=None, **extra) -> None:
    """Writes the report; `extra` keys go beside the schema's (readers ignore what they do not know)."""
    argv = sys.argv if argv is None else argv
    command = os.environ.get("TZ_BENCH_COMMAND") or shlex.join(argv)
    report = {**extra, "schema": "tz-bench/1", "bench": bench, "machine": machine_info(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": command,
              "size_bytes": size_bytes, "results": results}
    Path(path).write_text(json.dumps(report, indent=1) + "\n")


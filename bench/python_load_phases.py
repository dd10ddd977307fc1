#!/usr/bin/env python3
"""Where a Python load's time goes, first load in a fresh process against later ones.

Each fresh process times every `TensorDeserializer(path, device=...)` of a few loads in a row and
splits it: opening the source (`_open_source`: in a fresh process this starts the engine's
workers and their io_uring rings), opening the reader (`_open_reader`: the header pass, with the
engine's own `open_seconds` beside it), the load (`_load`: joining the device preparation, the
engine's load with its own `total_s`, wrapping the tensors) and what is left outside the engine.
A first load's extra time shows up in one of these; on an H100 (2026-11-27) it was the reader's
open waiting 10-20 ms for a worker while the pinned ring was made beside it.

usage: python_load_phases.py [--device cuda:0] [--procs 3] [--loads 4] [--size-mib 4096]
                             [--cli TENSORIZER [--lib DIR]] [--file MODEL] [--verify] [--smoke]
Without --file a model is made with `tensorizer synth` (--cli) in a temporary directory. --smoke:
64 MiB, 1 process of 2 loads, device cpu unless --device is given. The JSON of every run goes to
--json when given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def worker(path: str, device: str, loads: int, verify: bool) -> None:
    """One fresh process: `loads` timed loads; prints one JSON line."""
    import torch

    if device.startswith("cuda"):
        torch.zeros(1, device=device)  # torch's CUDA context, made before any timed load
    import tensorizer._deserializer_core as core
    from tensorizer import TensorDeserializer

    phase: dict = {}

    def timed(name, fn):
        def run(*args, **kwargs):
            t = time.perf_counter()
            try:
                out = fn(*args, **kwargs)
                if name == "reader_s":
                    phase["engine_open_s"] = float(out.open_seconds)
                return out
            finally:
                phase[name] = phase.get(name, 0.0) + time.perf_counter() - t
        return run

    # Module globals the constructor looks up at call time; the load is a method of the core class.
    core._open_source = timed("source_s", core._open_source)
    core._open_reader = timed("reader_s", core._open_reader)
    core._DeserializerCore._load = timed("load_s", core._DeserializerCore._load)
    runs = []
    for _ in range(loads):
        phase.clear()
        t0 = time.perf_counter()
        d = TensorDeserializer(path, device=device, verify_hash=verify)
        tensors = dict(d.items())
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        total = time.perf_counter() - t0
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        engine = {k: float(v) for k, v in d._timings.items()}
        runs.append(dict(phase, total_s=total, gb_per_s=nbytes / total / 1e9, engine_total_s=engine.get("total_s", 0.0),
                         engine_verify_s=engine.get("verify_s", 0.0), engine_wait_s=engine.get("wait_s", 0.0),
                         outside_s=total - engine.get("total_s", 0.0)))
        del tensors, d
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    print(json.dumps({"runs": runs}))


def report(procs: list) -> None:
    cols = ("total_s", "source_s", "reader_s", "engine_open_s", "load_s", "engine_total_s", "outside_s", "engine_verify_s",
            "engine_wait_s")
    print(f"  {'':<7} {'GB/s':>6} " + " ".join(f"{c[:-2]:>12}" for c in cols)
          + "   (ms, medians over processes; engine_verify and engine_wait: worker-seconds summed over"
          " threads, hashing and waiting for a ring slot)")
    for label, pick in (("first", lambda runs: runs[:1]), ("later", lambda runs: runs[1:])):
        rows = [r for p in procs for r in pick(p["runs"])]
        if not rows:
            continue
        med = {c: statistics.median(r.get(c, 0.0) for r in rows) for c in cols + ("gb_per_s",)}
        print(f"  {label:<7} {med['gb_per_s']:6.2f} " + " ".join(f"{1e3 * med[c]:12.2f}" for c in cols))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="")
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--loads", type=int, default=4)
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--cli", default="tensorizer", help="the tensorizer CLI (makes the model)")
    ap.add_argument("--lib", default="", help="LD_LIBRARY_PATH for the CLI (a GPU bundle's lib/)")
    ap.add_argument("--file", help="an existing model instead of a synthetic one")
    ap.add_argument("--json", help="write every run here")
    ap.add_argument("--verify", action="store_true", help="verified loads (verify_hash=True)")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    device = a.device or ("cpu" if a.smoke else "cuda:0")
    if a.worker:
        worker(a.worker, device, a.loads, a.verify)
        return 0
    if a.smoke:
        a.size_mib, a.procs, a.loads = 64, 1, 2
    with tempfile.TemporaryDirectory(prefix="tz-phases-") as tmp:
        path = a.file or os.path.join(tmp, "model.tensors")
        if not a.file:
            env = dict(os.environ, LD_LIBRARY_PATH=a.lib) if a.lib else None
            subprocess.run([a.cli, "synth", path, "--size-mib", str(a.size_mib)], check=True, capture_output=True, env=env)
        with open(path, "rb") as f:  # into the page cache: every process reads a warm file
            while f.read(64 << 20):
                pass
        procs = []
        for _ in range(a.procs):
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", path, "--device", device, "--loads", str(a.loads)]
            cmd += ["--verify"] if a.verify else []
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300).stdout
            procs.append(json.loads(out.strip().splitlines()[-1]))
    print(f"python_load_phases: {a.procs} fresh process(es) x {a.loads} {'verified ' if a.verify else ''}loads"
          f" of {a.size_mib} MiB onto {device}")
    report(procs)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": device, "size_mib": a.size_mib, "verify": a.verify, "procs": procs}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Tensors as they land (issue 34 §1): a layer stack run layer by layer while the model loads
(``TensorDeserializer.stream()``), against load-then-run, on CPU here and on cuda when asked.

The model: N square layers (``layer.i.weight``, d x d float32), written by our serializer into a
work directory. The workload: x <- relu(x @ W_i^T) for a batch of B rows, layer after layer. Per
mode, each run is a fresh process of build/venv's Python (pre-touched after its imports, as
cloud_bench's pyload says why), medians of --runs:

  load       TensorDeserializer(path) alone: the load time every other figure is measured against
  then-run   load everything, then run the stack
  stream     run layer i as soon as stream() hands its weight over
  compute    the stack alone, on weights already in memory (the compute's own length)

Reported: the first layer's weights ready (stream mode: its handover) as a fraction of the load
time (goal <= 5%), time to the first layer's output, and total time over the load alone (goal
<= 1.1x where the compute is shorter than the load). --trace FILE keeps the streamed load's
timeline (each tensor's "ready" instant beside the reads).

usage: stream_bench.py [--layers N] [--width D] [--batch B] [--runs R] [--device cpu|cuda]
                       [--source PATH_OR_URL] [--trace FILE] [--json FILE] [--smoke]
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))


def worker(a) -> None:
    """One run in this process: prints RESULT <json>."""
    import torch
    from python_load_worker import pretouch
    from tensorizer import TensorDeserializer

    pretouch(a.pretouch)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    x0 = torch.randn(a.batch, a.width, generator=torch.Generator().manual_seed(1)).to(dev)
    # Warm torch's matmul (its thread pool starts on the first one) outside the timing, in every mode.
    torch.relu(x0 @ torch.zeros(a.width, a.width, device=dev).T)
    sync()
    out = {}
    t0 = time.perf_counter()
    if a.mode == "compute":
        weights = [torch.randn(a.width, a.width, device=dev) for _ in range(a.layers)]
        sync()
        t0 = time.perf_counter()
        x = x0
        for i, w in enumerate(weights):
            x = torch.relu(x @ w.T)
            if i == 0:
                sync()
                out["first_output_s"] = time.perf_counter() - t0
    elif a.mode in ("load", "then-run"):
        d = TensorDeserializer(a.source, device=dev)
        sync()
        out["load_s"] = time.perf_counter() - t0
        if a.mode == "then-run":
            x = x0
            for i in range(a.layers):
                x = torch.relu(x @ d[f"layer.{i}.weight"].T)
                if i == 0:
                    sync()
                    out["first_output_s"] = time.perf_counter() - t0
    else:  # stream
        d = TensorDeserializer(a.source, device=dev, lazy_load=True, trace_file=a.trace or None)
        x = x0
        for i, (name, w) in enumerate(d.stream()):
            if i == 0:
                out["first_ready_s"] = time.perf_counter() - t0
            x = torch.relu(x @ w.T)
            if i == 0:
                sync()
                out["first_output_s"] = time.perf_counter() - t0
        out["layers"] = i + 1
    sync()
    out["total_s"] = time.perf_counter() - t0
    print("RESULT " + json.dumps(out), flush=True)


def make_model(path: Path, layers: int, width: int) -> int:
    import torch
    from tensorizer import TensorSerializer

    g = torch.Generator().manual_seed(0)
    with TensorSerializer(str(path)) as s:
        s.write_state_dict({f"layer.{i}.weight": torch.randn(width, width, generator=g) / width ** 0.5
                            for i in range(layers)})
    return path.stat().st_size


def run_one(a, mode: str, trace: str | None = None) -> dict:
    cmd = [a.python, __file__, "--worker", mode, "--source", a.source, "--layers", str(a.layers),
           "--width", str(a.width), "--batch", str(a.batch), "--device", a.device,
           "--pretouch", str(a.file_bytes * 5 // 4)]
    if trace:
        cmd += ["--trace", trace]
    text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(next(line for line in text.splitlines() if line.startswith("RESULT "))[7:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--source", help="a model of layer.i.weight (d x d) to load instead of writing one")
    ap.add_argument("--trace", help="the last streamed run's timeline (Chrome trace-event JSON)")
    ap.add_argument("--json", help="also write the results as tz-bench/1")
    ap.add_argument("--smoke", action="store_true", help="CI: 8 layers of 256, 1 run")
    ap.add_argument("--python", default=str(REPO / "build" / "venv" / "bin" / "python"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--pretouch", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        a.mode = a.worker
        worker(a)
        return 0
    if a.smoke:
        a.layers, a.width, a.runs = 8, 256, 1
    with tempfile.TemporaryDirectory(prefix="tz-stream-bench-") as work:
        if not a.source:
            a.source = str(Path(work) / "stack.tensors")
            a.file_bytes = make_model(Path(a.source), a.layers, a.width)
        else:
            a.file_bytes = os.path.getsize(a.source) if os.path.exists(a.source) else a.layers * a.width ** 2 * 4
        modes = ["load", "then-run", "stream", "compute"]
        runs = {m: [] for m in modes}
        for r in range(a.runs):  # alternating, so drift hits every mode alike
            for m in modes:
                runs[m].append(run_one(a, m, a.trace if (m == "stream" and r == a.runs - 1) else None))
        report(a, runs)
    return 0


def report(a, runs: dict) -> None:
    def med(mode, key):
        return statistics.median(r[key] for r in runs[mode])

    load = med("load", "total_s")
    compute = med("compute", "total_s")
    rows = [("load alone", load, None), ("load, then run", med("then-run", "total_s"), med("then-run", "first_output_s")),
            ("run as tensors land (stream)", med("stream", "total_s"), med("stream", "first_output_s")),
            ("compute alone", compute, med("compute", "first_output_s"))]
    mib = a.file_bytes / 2 ** 20
    print(f"model: {a.layers} layers of {a.width}x{a.width} float32 ({mib:.0f} MiB), batch {a.batch}, "
          f"device {a.device}, medians of {a.runs} fresh processes")
    print(f"{'mode':32s} {'total s':>9s} {'x load':>7s} {'first output s':>15s}")
    for name, total, first in rows:
        print(f"{name:32s} {total:9.3f} {total / load:7.2f} {'' if first is None else f'{first:15.4f}'}")
    first_ready = med("stream", "first_ready_s")
    print(f"first layer's weights ready: {first_ready:.4f} s = {first_ready / load:.1%} of the load alone (goal <= 5%)")
    print(f"streamed load-and-run: {med('stream', 'total_s') / load:.2f}x the load alone (goal <= 1.1x; compute "
          f"{'shorter' if compute < load else 'LONGER'} than the load: {compute / load:.2f}x)")
    if a.json:
        from bench_json import entry, write_report

        gb = a.file_bytes / 1e9
        results = [entry("stream", "load alone", [gb / r["total_s"] for r in runs["load"]], is_reference=True)]
        for m, name in (("then-run", "load, then run"), ("stream", "run as tensors land")):
            results.append(entry("stream", name, [gb / r["total_s"] for r in runs[m]], reference="load alone"))
        write_report(a.json, "stream_bench", a.file_bytes, results, runs=runs, first_ready_fraction=first_ready / load)


if __name__ == "__main__":
    sys.exit(main())

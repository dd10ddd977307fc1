#!/usr/bin/env python3
"""Sharded checkpoints against one file of the same bytes, in one run, fresh processes:

* the same tensors as one safetensors file and as a sharded checkpoint (`tensorizer convert
  MODEL DIR/ --max-shard-size`: transformers' names and index), both made from one synthesized model;
* `tensorizer load --json` of each (C++), and a fresh Python process timing
  `TensorDeserializer(..., device="cpu")` (loads every tensor) of each (our package);
* locally (page cache warm) and from S3 (Ceph RGW on loopback, both uploaded by `tensorizer convert`).

Each round runs the pair in a rotated order; the ratio sharded / one file is per round, reported as a
median (goal: >= 0.95, a sharded load within 5% of the single-file load). Memory is pre-touched before
every process (bench/pretouch.hpp says why), and each process loads `--repeat` times (each load freed
before the next) and reports the median: on this VM a load still meets memory the host took back and
pays first-touch faults at random (one process, the same warm-file load: 0.87, 8.6, 8.4, 1.9 GB/s),
which swamped the difference being measured when every process loaded once.

usage: shard_bench.py BUILD_DIR [--size-mib 1024] [--shards 8] [--runs 5] [--repeat 5] [--no-s3] [--python PY]
                      [--json FILE]
env: TZ_NET_WORKDIR (default BUILD_DIR/net-servers), TZ_NET_PORT_BASE (default 18000).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_json  # noqa: E402

SERVERS = Path(__file__).resolve().parent.parent / "scripts" / "servers"
S3_KEY, S3_SECRET, S3_BUCKET = "TESTKEY", "TESTSECRET", "tz-test"
PY_LOAD = """
import gc, statistics, sys, time
from tensorizer import TensorDeserializer
target = sys.argv[2] if len(sys.argv) == 3 else sys.argv[2:]
rates = []
for _ in range(int(sys.argv[1])):
    t0 = time.monotonic()
    d = TensorDeserializer(target, device="cpu")
    seconds = time.monotonic() - t0
    rates.append(sum(t.numel() * t.element_size() for t in d.values()) / seconds / 1e9)
    d.close(); del d; gc.collect()
print(sorted(rates)[(len(rates) - 1) // 2])
"""

def pretouch(size: int) -> None:
    with mmap.mmap(-1, size) as m:
        ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(m)), 1, size)


class Bench:
    def __init__(self, cli: Path, python: str, size: int, env: dict, repeat: int):
        self.cli, self.python, self.size, self.env, self.repeat = cli, python, size, env, repeat

    def cli_load(self, target: str, *extra: str) -> float:
        """GB/s of the median of `repeat` loads in one fresh `tensorizer load --repeat` process
        (stored data bytes / load call to every tensor ready)."""
        pretouch(2 * self.size)
        out = subprocess.run([str(self.cli), "load", "--json", "--repeat", str(self.repeat), *extra, target],
                             check=True, capture_output=True, text=True, env=self.env)
        return json.loads(out.stdout)["gb_per_s"]

    def py_load(self, target: str) -> float:
        """GB/s of the median of `repeat` TensorDeserializer(target) loads (open, load, into torch
        tensors) in one fresh interpreter."""
        pretouch(2 * self.size)
        out = subprocess.run([self.python, "-c", PY_LOAD, str(self.repeat), target], check=True, capture_output=True,
                             text=True, env=self.env)
        return float(out.stdout.split()[-1])


def rounds(runs: int, pair: dict) -> dict:
    """`runs` rounds of the two loads in `pair`, alternating which goes first."""
    out = {name: [] for name in pair}
    names = list(pair)
    for r in range(runs):
        for name in names[r % 2:] + names[:r % 2]:
            out[name].append(pair[name]())
    return out


def start(script: str, top: Path, base: int) -> bool:
    p = subprocess.run(["bash", str(SERVERS / script), "start", str(top), str(base)], capture_output=True, text=True)
    if p.returncode != 0:
        print(f"shard_bench: {script} did not start ({p.returncode}): {p.stderr[-300:]}; skipping S3")
    return p.returncode == 0


def prepare(cli: Path, work: Path, size_mib: int, shards: int) -> tuple[Path, Path]:
    model = work / f"model-{size_mib}.tensors"
    one, sharded = work / f"one-{size_mib}.safetensors", work / f"shards-{size_mib}-{shards}"
    if not model.exists():
        subprocess.run([str(cli), "synth", str(model), "--size-mib", str(size_mib)], check=True, capture_output=True)
    if not one.exists():
        subprocess.run([str(cli), "convert", str(model), str(one)], check=True, capture_output=True)
    if not sharded.exists():
        max_shard = max(one.stat().st_size // shards + 1, 1)
        subprocess.run([str(cli), "convert", str(model), f"{sharded}/", "--max-shard-size", str(max_shard)],
                       check=True, capture_output=True)
    # The same page-cache state for both: written pages are dropped and read back in. On this kernel
    # (6.18, ext4) a file's pages as its writer left them load ~25% slower than pages read in from
    # disk (larger folios): without this, whichever form was written last looked slower.
    for f in [one, *sharded.iterdir()]:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        subprocess.run(["cat", str(f)], check=True, stdout=subprocess.DEVNULL)  # into the page cache
    return one, sharded


def report(results: dict, size: int, shard_count: int, a) -> None:
    print(f"{size} bytes as one safetensors file and as {shard_count} shards, {a.runs} rounds of fresh processes "
          f"(each the median of {a.repeat} loads), {os.cpu_count()} cores")
    print(f"{'load':34} {'one file GB/s':>14} {'sharded GB/s':>13} {'sharded/one (rounds)':>40}")
    entries, ratios = [], {}
    for where, pair in results.items():
        one, many = pair["one file"], pair["sharded"]
        ratio = [m / o for m, o in zip(many, one)]
        ratios[where] = ratio
        print(f"{where:34} {statistics.median(one):14.2f} {statistics.median(many):13.2f}   median "
              f"{statistics.median(ratio):.3f} ({', '.join(f'{x:.2f}' for x in ratio)})")
        entries.append(bench_json.entry(where, "one file", one, is_reference=True))
        entries.append(bench_json.entry(where, f"{shard_count} shards", many, reference="one file"))
    if a.json:
        bench_json.write_report(a.json, "shard_bench", size, entries, ratios=ratios)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", type=Path)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5, help="loads per process; the process reports their median")
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--python", default=None, help="interpreter with our package (default BUILD_DIR/venv/bin/python)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    build = a.build.resolve()
    cli = build / "bin" / "tensorizer"
    python = a.python or str(build / "venv" / "bin" / "python")
    top = Path(os.environ.get("TZ_NET_WORKDIR", build / "net-servers"))
    base = int(os.environ.get("TZ_NET_PORT_BASE", "18000"))
    work = build / "shard-bench"
    work.mkdir(exist_ok=True)
    one, sharded = prepare(cli, work, a.size_mib, a.shards)
    shard_count = len(list(sharded.glob("model-*.safetensors")))
    env = dict(os.environ)
    b = Bench(cli, python, one.stat().st_size, env, a.repeat)
    index = str(sharded / "model.safetensors.index.json")
    b.cli_load(str(one)), b.cli_load(index)  # warm-up, not counted
    results = {
        "C++ CLI, local": rounds(a.runs, {"one file": lambda: b.cli_load(str(one)), "sharded": lambda: b.cli_load(index)}),
        "Python, local": rounds(a.runs, {"one file": lambda: b.py_load(str(one)), "sharded": lambda: b.py_load(index)}),
    }
    if not a.no_s3 and start("rgw.sh", top, base):
        endpoint = f"http://127.0.0.1:{base + 480}"
        env.update(AWS_ACCESS_KEY_ID=S3_KEY, AWS_SECRET_ACCESS_KEY=S3_SECRET, AWS_ENDPOINT_URL_S3=endpoint)
        prefix = f"s3://{S3_BUCKET}/shard-bench-{a.size_mib}"
        model = work / f"model-{a.size_mib}.tensors"
        max_shard = one.stat().st_size // a.shards + 1
        subprocess.run([str(cli), "convert", str(model), f"{prefix}/one.safetensors", "--s3-endpoint", endpoint],
                       check=True, capture_output=True, env=env)
        subprocess.run([str(cli), "convert", str(model), f"{prefix}/shards/", "--max-shard-size", str(max_shard),
                        "--s3-endpoint", endpoint], check=True, capture_output=True, env=env)
        s3_one, s3_shards = f"{prefix}/one.safetensors", f"{prefix}/shards/"
        ep = ("--s3-endpoint", endpoint)
        b.cli_load(s3_one, *ep), b.cli_load(s3_shards, *ep)  # warm-up
        results["C++ CLI, S3 (RGW loopback)"] = rounds(
            a.runs, {"one file": lambda: b.cli_load(s3_one, *ep), "sharded": lambda: b.cli_load(s3_shards, *ep)})
        results["Python, S3 (RGW loopback)"] = rounds(
            a.runs, {"one file": lambda: b.py_load(s3_one), "sharded": lambda: b.py_load(s3_shards)})
    report(results, one.stat().st_size, shard_count, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The node-local cache (backends/CACHE.md) against its references, in one run, fresh CLI processes:

* second load: `tensorizer load --cache-dir C URL` reading the cached copy, against `tensorizer load
  FILE` of the same bytes from a local file (goal: >= 0.95x);
* first load: the same URL with an empty cache (filling it), against the URL without a cache
  (goal: >= 0.9x), and against the bound where loading and writing the copy share the cores:
  1/(1/no-cache + 1/page-cache-write), the write measured in the same round.

The object is served by nginx on loopback (scripts/servers/nginx.sh) from a file in the page cache;
the local file is that same file. Memory is pre-touched before every process (see
bench/pretouch.hpp: this VM's first touches of memory it handed back cost ~1.7 s/GiB). Every round
runs the first-load steps, then the local-file load and the hit, each group in a rotated order; the
ratios are per round, reported as medians. Rates are the CLI's (stored data bytes / load call to every
tensor ready); the process wall times are reported beside them, since a fill's copy is made durable
(fsync) after the load returned, before the process exits.

usage: cache_bench.py BUILD_DIR [--size-mib 1024] [--runs 5] [--json FILE]
env: TZ_NET_WORKDIR (default BUILD_DIR/net-servers), TZ_NET_PORT_BASE (default 18000). Exit 77: no nginx.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_json  # noqa: E402

SERVERS = Path(__file__).resolve().parent.parent / "scripts" / "servers"
PRETOUCH_BYTES = 0  # set by main()


def pretouch(size: int) -> None:
    """Writes and frees `size` bytes just before a run (bench/pretouch.hpp says why): this VM hands
    freed memory back to its host, and whichever run first touches such memory pays ~1.7 s/GiB."""
    with mmap.mmap(-1, size) as m:
        ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(m)), 1, size)


def load(cli: Path, target: str, *extra: str) -> dict:
    """One fresh `tensorizer load --json` process: its report plus the process wall time."""
    pretouch(PRETOUCH_BYTES)
    started = time.monotonic()
    out = subprocess.run([str(cli), "load", "--json", *extra, target], check=True, capture_output=True, text=True)
    report = json.loads(out.stdout)
    report["wall_s"] = time.monotonic() - started
    return report


def write_limit(directory: Path, size: int) -> dict:
    """The reference a fill adds to a load: writing `size` bytes into a new file's page cache next to
    the cache (16 MiB writes, no fsync: a fill's fsync runs after its load returned)."""
    directory.mkdir(parents=True, exist_ok=True)
    path, chunk = directory / "write-limit.tmp", b"\1" * (16 << 20)
    pretouch(PRETOUCH_BYTES)
    started = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for at in range(0, size, len(chunk)):
            os.write(fd, chunk[: min(len(chunk), size - at)])
    finally:
        os.close(fd)
    seconds = time.monotonic() - started
    path.unlink()
    return {"gb_per_s": size / seconds / 1e9, "wall_s": seconds}


def one_round(cli: Path, model: Path, url: str, cache: Path, order: int) -> dict:
    """The steps of a round in an order set by `order`; checks the cache did what each load needs."""
    def fill():
        shutil.rmtree(cache, ignore_errors=True)
        r = load(cli, url, "--cache-dir", str(cache))
        assert r["cache"].startswith("filled"), r["cache"]
        return r

    def hit():
        if not cache.exists():
            fill()
        r = load(cli, url, "--cache-dir", str(cache))
        assert r["cache"].startswith("hit"), r["cache"]
        return r

    # First the first-load steps, then the second-load pair, each rotated: whatever heavy step ends
    # the first part (the fill's 1 GiB of new page cache and freed memory) precedes the local load
    # and the hit equally often, so the pair is compared under the same conditions.
    first = [("remote, cache off", lambda: load(cli, url)), ("remote, cache on (fill)", fill),
             ("page cache write", lambda: write_limit(cache.parent / "cache-bench-write", model.stat().st_size))]
    second = [("local file", lambda: load(cli, str(model))), ("cache hit", hit)]
    steps = first[order % 3:] + first[:order % 3] + second[order % 2:] + second[:order % 2]
    return {name: run() for name, run in steps}


def start_nginx(top: Path, base: int) -> None:
    out = subprocess.run(["bash", str(SERVERS / "nginx.sh"), "start", str(top), str(base)], capture_output=True, text=True)
    if out.returncode == 77:
        print("cache_bench: nginx not installed: skipping")
        sys.exit(77)
    if out.returncode != 0:
        sys.exit(f"cache_bench: could not start nginx: {out.stderr[-500:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", type=Path)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    cli = a.build.resolve() / "bin" / "tensorizer"
    top = Path(os.environ.get("TZ_NET_WORKDIR", a.build.resolve() / "net-servers"))
    base = int(os.environ.get("TZ_NET_PORT_BASE", "18000"))
    start_nginx(top, base)
    www = top / "nginx" / "www" / "cache-bench"
    www.mkdir(parents=True, exist_ok=True)
    model = www / f"model-{a.size_mib}.tensors"
    if not model.exists():
        subprocess.run([str(cli), "synth", str(model), "--size-mib", str(a.size_mib)], check=True, capture_output=True)
    subprocess.run(["cat", str(model)], check=True, stdout=subprocess.DEVNULL)  # into the page cache
    url = f"http://127.0.0.1:{base + 80}/cache-bench/{model.name}"
    global PRETOUCH_BYTES
    # Twice the model: a fill also takes as much page cache for the copy it writes.
    PRETOUCH_BYTES = 2 * model.stat().st_size + (64 << 20)
    cache = top / "cache-bench-dir"
    load(cli, str(model)), load(cli, url)  # warm-up, not counted
    rounds = [one_round(cli, model, url, cache, i) for i in range(a.runs)]
    shutil.rmtree(cache, ignore_errors=True)
    report(rounds, model, a)
    return 0


def report(rounds: list[dict], model: Path, a) -> None:
    names = list(rounds[0])
    rate = {n: [r[n]["gb_per_s"] for r in rounds] for n in names}
    wall = {n: [r[n]["wall_s"] for r in rounds] for n in names}
    ratio_hit = [r["cache hit"]["gb_per_s"] / r["local file"]["gb_per_s"] for r in rounds]
    ratio_fill = [r["remote, cache on (fill)"]["gb_per_s"] / r["remote, cache off"]["gb_per_s"] for r in rounds]
    # A fill does the remote load's work plus writing the copy; where both compete for the same cores
    # (nginx, the client and the copy on 2 cores here) the fill cannot beat doing them one after the other.
    serial = [1 / (1 / r["remote, cache off"]["gb_per_s"] + 1 / r["page cache write"]["gb_per_s"]) for r in rounds]
    ratio_serial = [r["remote, cache on (fill)"]["gb_per_s"] / b for r, b in zip(rounds, serial)]
    size = rounds[0]["local file"]["bytes"]
    print(f"{size} data bytes, {a.runs} rounds of fresh `tensorizer load` processes, {os.cpu_count()} cores")
    print(f"{'load':28} {'GB/s median':>12} {'min':>7} {'max':>7} {'process wall s':>15}")
    for n in ("local file", "cache hit", "remote, cache off", "remote, cache on (fill)", "page cache write"):
        runs = sorted(rate[n])
        print(f"{n:28} {statistics.median(runs):12.2f} {runs[0]:7.2f} {runs[-1]:7.2f} {statistics.median(wall[n]):15.2f}")
    print(f"second load, cache hit / local file:     median {statistics.median(ratio_hit):.2f} "
          f"(rounds {', '.join(f'{x:.2f}' for x in ratio_hit)}; goal >= 0.95)")
    print(f"first load, cache on / cache off:        median {statistics.median(ratio_fill):.2f} "
          f"(rounds {', '.join(f'{x:.2f}' for x in ratio_fill)}; goal >= 0.9)")
    print(f"first load, cache on / (load, then write):  median {statistics.median(ratio_serial):.2f} "
          f"(the bound where loading and writing share the cores: 1/(1/off + 1/write) = "
          f"{statistics.median(serial):.2f} GB/s)")
    if a.json:
        results = [
            bench_json.entry("second load", "local file", rate["local file"], is_reference=True),
            bench_json.entry("second load", "cache hit", rate["cache hit"], reference="local file"),
            bench_json.entry("first load (HTTP, loopback)", "cache off", rate["remote, cache off"], is_reference=True),
            bench_json.entry("first load (HTTP, loopback)", "cache on (fill)", rate["remote, cache on (fill)"],
                             reference="cache off"),
            bench_json.entry("first load (HTTP, loopback)", "load, then write the copy (bound)", serial,
                             is_reference=True, note="1/(1/cache off + 1/page cache write), per round"),
        ]
        bench_json.write_report(a.json, "cache_bench", size, results,
                                ratios={"hit_over_local": ratio_hit, "fill_over_off": ratio_fill,
                                        "fill_over_serial_bound": ratio_serial},
                                wall_s=wall)


if __name__ == "__main__":
    sys.exit(main())

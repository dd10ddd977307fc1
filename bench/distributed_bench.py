#!/usr/bin/env python3
"""How much does a partitioned load cut each rank's reads and time, and what does the fan-out cost?

Worlds of 1, 2 and 4 processes on gloo (loopback, CPU): each rank loads its share of a synthesized
.tensors file (tensorizer.distributed.load_partitioned) and the shares fan out by a broadcast from
each owner and by one all-gather of padded flat buffers; then each rank reads tensor-parallel slices
of every 2-d tensor (rows: torch.chunk along dim 0; columns: along dim 1, with the default 64 KiB
gap coalescing, which reads through the other ranks' columns of these 4 KiB rows, and without it,
one read per row). Reported per world:
bytes read per rank (the loader's count), time per rank for the share, the fan-out time, and the
rate of the whole (data bytes / (load + fan-out)). The reference is world 1 in the same run: one
process reading everything, no fan-out. The file is in the page cache (written just before), so
this measures the engine and the collectives, not the disk. Medians of --repeat loads per rank.

usage: distributed_bench.py [--size-mib 256] [--worlds 1,2,4] [--repeat 3] [--smoke] [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(args) -> None:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    from tensorizer import _C
    from tensorizer.distributed import Slice, load_partitioned, load_slices

    reader = _C.Reader.open_checkpoint([args.file])
    every = list(range(len(reader.entries)))
    out = {"rank": rank, "world": world}
    for fanout in ("broadcast", "all_gather"):
        runs = []
        for _ in range(args.repeat):
            dist.barrier()
            _, st = load_partitioned(reader, every, process_group=dist.group.WORLD, fanout=fanout)
            runs.append(st)
        out[fanout] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    two_d = [i for i, e in enumerate(reader.entries) if len(e.shape) == 2]
    for name, dim, gap in (("rows", 0, 64 << 10), ("columns", 1, 64 << 10), ("columns_exact", 1, 0)):
        runs = []
        for _ in range(args.repeat):
            dist.barrier()
            _, st = load_slices(reader, {i: Slice(dim=dim) for i in two_d}, rank=rank, world=world, gap_merge=gap)
            runs.append(st)
        out[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


def make_file(path: Path, size_mib: int) -> int:
    import torch
    from tensorizer import TensorSerializer

    g = torch.Generator().manual_seed(0)
    s = TensorSerializer(str(path))
    total = 0
    i = 0
    while total < size_mib << 20:
        rows = 1024 if i % 3 else 1000  # uneven shapes too
        t = torch.randn(rows, 1024, generator=g)
        s.write_tensor(i, f"layer{i}.weight", 0, t)
        total += t.numel() * 4
        i += 1
    s.close()
    return total


def run_world(world: int, file: Path, repeat: int, out: Path) -> list:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out.mkdir(parents=True, exist_ok=True)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", "--file", str(file), "--repeat", str(repeat), "--out", str(out)],
            env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)),
        )
        for r in range(world)
    ]
    for p in procs:
        if p.wait(timeout=900) != 0:
            raise SystemExit(f"distributed_bench: a rank of world {world} failed (exit {p.returncode})")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="16 MiB, one load: checks the bench runs")
    ap.add_argument("--json")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--file")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.smoke:
        args.size_mib, args.repeat = 16, 1
    with tempfile.TemporaryDirectory(prefix="tz_dist_bench_") as tmp:
        file = Path(tmp) / "model.tensors"
        data = make_file(file, args.size_mib)
        print(f"distributed_bench: {data / 2**20:.0f} MiB of float32 tensors (1000-1024 x 1024), gloo on loopback, "
              f"{os.cpu_count()} cores, medians of {args.repeat}; file in the page cache")
        print(f"{'world':>5} {'fan-out':>10} {'read/rank MiB':>14} {'1/N MiB':>8} {'load/rank s':>11} "
              f"{'fan-out s':>9} {'total GB/s':>10} {'rows MiB/rank':>13} {'rows s':>7} {'cols MiB/rank':>13} {'cols s':>7} "
              f"{'exact cols MiB':>14} {'exact s':>7}")
        rows = []
        for world in [int(w) for w in args.worlds.split(",")]:
            res = run_world(world, file, args.repeat, Path(tmp) / f"w{world}")
            for fanout in ("broadcast", "all_gather"):
                read = max(r[fanout]["read_bytes"] for r in res)
                load = max(r[fanout]["load_s"] for r in res)
                fan = max(r[fanout]["fanout_s"] for r in res)
                row = {"world": world, "fanout": fanout, "read_bytes_per_rank_max": read,
                       "read_bytes_per_rank": [r[fanout]["read_bytes"] for r in res], "data_bytes": data,
                       "load_s_max": load, "fanout_s_max": fan,
                       "status_s_max": max(r[fanout]["status_s"] for r in res), "gb_per_s": data / (load + fan) / 1e9,
                       "rows_read_bytes": max(r["rows"]["read_bytes"] for r in res),
                       "columns_read_bytes": max(r["columns"]["read_bytes"] for r in res),
                       "rows_s": max(r["rows"]["load_s"] for r in res),
                       "columns_s": max(r["columns"]["load_s"] for r in res),
                       "columns_exact_read_bytes": max(r["columns_exact"]["read_bytes"] for r in res),
                       "columns_exact_s": max(r["columns_exact"]["load_s"] for r in res)}
                rows.append(row)
                print(f"{world:>5} {fanout:>10} {read / 2**20:>14.2f} {data / world / 2**20:>8.2f} {load:>11.3f} "
                      f"{fan:>9.3f} {row['gb_per_s']:>10.2f} {row['rows_read_bytes'] / 2**20:>13.2f} "
                      f"{row['rows_s']:>7.3f} {row['columns_read_bytes'] / 2**20:>13.2f} {row['columns_s']:>7.3f} "
                      f"{row['columns_exact_read_bytes'] / 2**20:>14.2f} {row['columns_exact_s']:>7.3f}")
        if args.json:
            Path(args.json).write_text(json.dumps({"bench": "distributed", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

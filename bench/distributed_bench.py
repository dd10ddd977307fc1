#!/usr/bin/env python3
"""How much does a partitioned load cut each rank's reads and time, and what does the fan-out cost?

Worlds of 1, 2 and 4 processes on gloo (loopback, CPU; or --device cuda: each rank's share lands in
its GPU's memory through the engine's pinned ring, fanned out by NCCL or, --backend gloo, by gloo
with CUDA tensors): each rank loads its share of a synthesized
.tensors file (tensorizer.distributed.load_partitioned) and the shares fan out by a broadcast from
each owner and by one all-gather of padded flat buffers; then each rank reads tensor-parallel slices
of every 2-d tensor (rows: torch.chunk along dim 0; columns: along dim 1, with the default 64 KiB
gap coalescing, which reads through the other ranks' columns of these 4 KiB rows, and without it,
one read per row). Reported per world:
bytes read per rank (the loader's count), time per rank for the share, the fan-out time, and the
rate of the whole (data bytes / (load + fan-out)), the per-rank rate of the share (share bytes /
load) beside a plain single-process load of the whole file to the same sink in the same run (the
single-GPU steady state with --device cuda), and the pinned memory each rank read through (the
ring: bounded whatever the share). The file is in the page cache (written just before), so this
measures the engine and the collectives, not the disk. Medians of --repeat loads per rank.
--json writes tz-bench/1 (bench/README.md).

usage: distributed_bench.py [--size-mib 256] [--worlds 1,2,4] [--repeat 3] [--device cpu|cuda]
                            [--backend gloo|nccl] [--smoke] [--json FILE]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_json  # noqa: E402


def worker(args) -> None:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = "cpu"
    if args.device == "cuda":  # ranks beyond the GPUs share them (gloo only: NCCL needs one each)
        device = f"cuda:{rank % torch.cuda.device_count()}"
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(args.backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    from tensorizer import _C
    from tensorizer.distributed import Slice, load_partitioned, load_slices

    reader = _C.Reader.open_checkpoint([args.file])
    every = list(range(len(reader.entries)))
    out = {"rank": rank, "world": world, "device": device}
    if world == 1:  # the reference: one plain load of everything to the same sink
        dev = torch.device(device)
        rates = []
        for _ in range(args.repeat):
            loaded = reader.load(device=dev.index if dev.type == "cuda" else -1)
            rates.append(loaded.bytes / loaded.timings["total_s"] / 1e9)
            del loaded
        out["single_gbps"] = rates
    for fanout in fanouts(args):
        runs = []
        for _ in range(args.repeat):
            dist.barrier()
            _, st = load_partitioned(reader, every, process_group=dist.group.WORLD, fanout=fanout, device=device)
            runs.append(st)
        out[fanout] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        out[fanout]["share_gbps"] = [r["share_bytes"] / r["load_s"] / 1e9 for r in runs if r["load_s"] > 0]
    two_d = [i for i, e in enumerate(reader.entries) if len(e.shape) == 2]
    for name, dim, gap in (("rows", 0, 64 << 10), ("columns", 1, 64 << 10), ("columns_exact", 1, 0)):
        runs = []
        for _ in range(args.repeat):
            dist.barrier()
            _, st = load_slices(reader, {i: Slice(dim=dim) for i in two_d}, rank=rank, world=world, gap_merge=gap,
                                device=device)
            runs.append(st)
        out[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


def fanouts(args) -> tuple:
    """The fan-outs measured: both, except gloo with CUDA tensors, whose all-gather into one tensor
    torch does not promise (broadcast is what two ranks on one GPU use)."""
    return ("broadcast",) if args.backend == "gloo" and args.device == "cuda" else ("broadcast", "all_gather")


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


def run_world(world: int, file: Path, args, out: Path) -> list:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out.mkdir(parents=True, exist_ok=True)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", "--file", str(file), "--repeat", str(args.repeat), "--out", str(out),
             "--device", args.device, "--backend", args.backend],
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
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                    help="default: nccl with --device cuda, else gloo")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--file")
    ap.add_argument("--out")
    args = ap.parse_args()
    args.backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    if args.worker:
        worker(args)
        return
    if args.smoke:
        args.size_mib, args.repeat = 16, 1
    with tempfile.TemporaryDirectory(prefix="tz_dist_bench_") as tmp:
        file = Path(tmp) / "model.tensors"
        data = make_file(file, args.size_mib)
        print(f"distributed_bench: {data / 2**20:.0f} MiB of float32 tensors (1000-1024 x 1024), {args.backend}, "
              f"device {args.device}, {os.cpu_count()} cores, medians of {args.repeat}; file in the page cache")
        print(f"{'world':>5} {'fan-out':>10} {'read/rank MiB':>14} {'1/N MiB':>8} {'load/rank s':>11} "
              f"{'fan-out s':>9} {'total GB/s':>10} {'rows MiB/rank':>13} {'rows s':>7} {'cols MiB/rank':>13} {'cols s':>7} "
              f"{'exact cols MiB':>14} {'exact s':>7}")
        rows, results = [], []
        worlds = [int(w) for w in args.worlds.split(",")]
        if 1 not in worlds:
            worlds.insert(0, 1)  # the single-process reference runs in world 1
        for world in worlds:
            res = run_world(world, file, args, Path(tmp) / f"w{world}")
            if world == 1:
                single = res[0]["single_gbps"]
                results.append(bench_json.entry("per-rank load", f"single load ({args.device})", single, is_reference=True))
                print(f"single load of the whole file to {res[0]['device']}: {statistics.median(single):.2f} GB/s")
            for fanout in fanouts(args):
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
                       "columns_exact_s": max(r["columns_exact"]["load_s"] for r in res),
                       "pinned_bytes_per_rank": [r[fanout]["pinned_bytes"] for r in res],
                       "share_gbps_slowest_rank": min(statistics.median(r[fanout]["share_gbps"]) for r in res)}
                rows.append(row)
                slowest = min(res, key=lambda r: statistics.median(r[fanout]["share_gbps"]))
                results.append(bench_json.entry("per-rank load", f"world {world} {fanout}: slowest rank's share",
                                                slowest[fanout]["share_gbps"], reference=f"single load ({args.device})",
                                                note=f"pinned per rank: {max(row['pinned_bytes_per_rank'])} bytes"))
                print(f"{world:>5} {fanout:>10} {read / 2**20:>14.2f} {data / world / 2**20:>8.2f} {load:>11.3f} "
                      f"{fan:>9.3f} {row['gb_per_s']:>10.2f} {row['rows_read_bytes'] / 2**20:>13.2f} "
                      f"{row['rows_s']:>7.3f} {row['columns_read_bytes'] / 2**20:>13.2f} {row['columns_s']:>7.3f} "
                      f"{row['columns_exact_read_bytes'] / 2**20:>14.2f} {row['columns_exact_s']:>7.3f}")
                print(f"      share rate (slowest rank) {row['share_gbps_slowest_rank']:.2f} GB/s = "
                      f"{row['share_gbps_slowest_rank'] / statistics.median(single):.2f}x the single load; "
                      f"pinned per rank {max(row['pinned_bytes_per_rank']) / 2**20:.1f} MiB")
        if args.json:
            bench_json.write_report(args.json, "distributed", data, results, rows=rows, device=args.device,
                                    backend=args.backend)


if __name__ == "__main__":
    main()

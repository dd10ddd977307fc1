#!/usr/bin/env python3
"""Python load benchmark: the same .tensors file loaded by our `tensorizer` (build/venv), by the real
tensorizer 2.11.1 (the system interpreter, a separate process), by our C++ CLI (`tensorizer load
--json`) and by safetensors (the file converted to .safetensors), into fresh memory with a warm page
cache, on the CPU and, when torch sees a GPU, on CUDA.

Each peer runs in its own subprocess (this script re-invoked with --worker under the peer's
interpreter). By default every timed load runs in a fresh process, after warm-up loads of a small
(8 MiB) file that start torch and the loader: that is a replica's first load, into memory no
allocator has held before. (With --reuse-process a subprocess times --runs loads after one warm-up
load of the big file; glibc then hands the freed chunks below its mmap threshold - every tensor of
the sample model - back to the next load, so that measures loads into recycled memory.) A load is timed from the call that opens the file until every tensor exists as a
torch tensor on the device (CUDA synchronized). The real tensorizer is tried with num_readers
1,2,4,8 and reported at its best median. After the timed runs each Python peer hashes what it
loaded (outside the clock); the hashes must agree, else the exit status is 1.

Prints a markdown table of medians (GB/s = 1e9 bytes/s of tensor data) and the ratios ours / real
tensorizer (target >= 1.3 on CPU), ours / C++ CLI (target within 5%) and ours / safetensors.

usage: python_load_bench.py [--size MiB | --file F] [--runs N] [--smoke] [--json OUT]
(--json: bench/README.md's schema for bench/charts.py, plus every setting under "details".)
Exit 77 (skip) when our package is not built (scripts/python_build.sh) or the CLI is missing.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP = 77


# ------------------------------------------------------------------------------------------------
# Worker side (runs under the peer's interpreter; imports only what that peer needs)


def _digest(tensors: dict) -> str:
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach()
        h.update(name.encode())
        if t.numel():
            h.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _sync(device: str):
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def pretouch(nbytes: int) -> None:
    """Writes to nbytes of new anonymous memory and unmaps it again.

    This machine is a KVM guest whose virtio-balloon driver reports freed memory to the host
    (free page reporting, order 9 = 2 MiB, about 2 s after the free); the host then drops its
    backing, and the next first touch of those pages costs about 1.7 s per GiB on the host side -
    whichever program touches them. Which loader meets such pages depends on what ran a few seconds
    before it. Touching and freeing the memory just before a timed load hands every peer the same
    kind of memory a bare-metal machine has: new to the process, backed by the host.
    """
    import ctypes
    import mmap

    if nbytes <= 0:
        return
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(m, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    view = (ctypes.c_char * nbytes).from_buffer(m)
    ctypes.memset(view, 1, nbytes)
    del view
    m.close()


def _time_loads(load, device: str, runs: int, warmup: int, digest: bool, warmup_load=None, pretouch_bytes=0):
    """Calls load() -> dict name -> tensor warmup+runs times; returns per-run seconds and bytes.
    Warm-up calls use warmup_load when given (a small file: initializes torch and the loader
    without leaving the allocator holding the big file's memory)."""
    seconds, nbytes, last_digest = [], 0, None
    for i in range(warmup + runs):
        gc.collect()
        if i >= warmup:
            pretouch(pretouch_bytes)
        t0 = time.perf_counter()
        tensors = (warmup_load or load)() if i < warmup else load()
        _sync(device)
        elapsed = time.perf_counter() - t0
        nbytes = sum(t.nbytes for t in tensors.values())
        if i >= warmup:
            seconds.append(elapsed)
        if digest and i == warmup + runs - 1:
            last_digest = _digest(tensors)
        del tensors
    gc.collect()
    return seconds, nbytes, last_digest


def worker_tensorizer(args) -> list[dict]:
    import tensorizer
    from tensorizer import TensorDeserializer

    results = []
    for readers in args.readers.split(","):
        num_readers = None if readers == "default" else int(readers)

        def make_load(path):
            def load():
                d = TensorDeserializer(path, device=args.device, num_readers=num_readers)
                tensors = dict(d.items())
                d.close()
                return tensors
            return load

        seconds, nbytes, digest = _time_loads(make_load(args.path), args.device, args.runs, args.warmup, args.digest,
                                              make_load(args.warmup_path) if args.warmup_path else None,
                                              args.pretouch)
        results.append({
            "how": f"TensorDeserializer(num_readers={readers})",
            "version": getattr(tensorizer, "__version__", "?"),
            "seconds": seconds, "bytes": nbytes, "digest": digest,
        })
    return results


def worker_safetensors(args) -> list[dict]:
    import safetensors
    from safetensors.torch import load_file

    def modes_for(path):
        if args.device == "cpu":
            # load_file's default backend maps the file lazily (no bytes read): copy them (clone), or
            # read them with the pread backend.
            return [('load_file(backend="pread")', lambda: load_file(path, device="cpu", backend="pread")),
                    ("load_file (mmap) + clone", lambda: {k: v.clone() for k, v in load_file(path, device="cpu").items()})]
        return [(f'load_file(device="{args.device}")', lambda: load_file(path, device=args.device))]

    modes = modes_for(args.path)
    warm = modes_for(args.warmup_path) if args.warmup_path else [(how, None) for how, _ in modes]
    results = []
    for i, ((how, load), (_, warmup_load)) in enumerate(zip(modes, warm)):
        if args.only is not None and i != args.only:
            continue
        seconds, nbytes, digest = _time_loads(load, args.device, args.runs, args.warmup, args.digest, warmup_load,
                                              args.pretouch)
        results.append({"how": how, "version": safetensors.__version__, "seconds": seconds,
                        "bytes": nbytes, "digest": digest})
    return results


def worker_probe(_args) -> list[dict]:
    import importlib.util

    info = {"python": sys.executable}
    try:
        import tensorizer

        info["tensorizer_file"] = tensorizer.__file__
        info["tensorizer_version"] = getattr(tensorizer, "__version__", "?")
        info["ours"] = importlib.util.find_spec("tensorizer._C") is not None
    except Exception as e:  # noqa: BLE001 - any import failure means "not usable"
        info["tensorizer_error"] = f"{type(e).__name__}: {e}"
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = bool(torch.cuda.is_available())
    except Exception as e:  # noqa: BLE001
        info["torch_error"] = f"{type(e).__name__}: {e}"
    info["safetensors"] = importlib.util.find_spec("safetensors") is not None
    return [info]


def worker_convert(args) -> list[dict]:
    """Fallback converter (.tensors -> .safetensors) when the CLI cannot: real/our tensorizer."""
    from safetensors.torch import save_file
    from tensorizer import TensorDeserializer

    with TensorDeserializer(args.path, device="cpu") as d:
        save_file({k: v.detach().contiguous() for k, v in d.items()}, args.out)
    return [{}]


WORKERS = {"tensorizer": worker_tensorizer, "safetensors": worker_safetensors,
           "probe": worker_probe, "convert": worker_convert}


def worker_main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", choices=sorted(WORKERS), required=True)
    ap.add_argument("--path")
    ap.add_argument("--out")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of all peers, interleaved; medians are over all rounds' runs (default 3)")
    ap.add_argument("--readers", default="default")
    ap.add_argument("--warmup-path", default=None, help="file for the warm-up loads (default: --path)")
    ap.add_argument("--only", type=int, default=None, help="safetensors: run only this mode")
    ap.add_argument("--pretouch", type=int, default=0, help="bytes to touch and free before each timed load")
    ap.add_argument("--digest", action="store_true")
    args = ap.parse_args(argv)
    print("RESULT " + json.dumps(WORKERS[args.worker](args)), flush=True)


# ------------------------------------------------------------------------------------------------
# Driver side


def run_worker(python: str, kind: str, timeout: float, **kwargs) -> list[dict]:
    cmd = [python, str(Path(__file__).resolve()), "--worker", kind]
    for k, v in kwargs.items():
        if v is True:
            cmd.append(f"--{k.replace('_', '-')}")
        elif v not in (None, False):
            cmd += [f"--{k.replace('_', '-')}", str(v)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd="/")
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def run_cli(cli: str, path: str, device: str, runs: int, warmup: int, timeout: float, pretouch_bytes: int = 0) -> dict:
    cmd = [cli, "load", path, "--json"] + (["--device", device] if device != "cpu" else [])
    seconds, nbytes = [], 0
    for i in range(warmup + runs):
        if i >= warmup:
            pretouch(pretouch_bytes)  # the CLI starts in milliseconds: well inside the ~2 s window
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        report = json.loads(proc.stdout)
        nbytes = report["bytes"]
        if i >= warmup:
            seconds.append(report["seconds"])
    how = "tensorizer load --json" + (f" --device {device}" if device != "cpu" else "")
    return {"how": how, "version": "", "seconds": seconds, "bytes": nbytes, "digest": None}


def warm_page_cache(*paths):
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            buf = bytearray(16 << 20)
            while f.readinto(buf):
                pass


def venv_base_python(venv_python: Path) -> str | None:
    """The interpreter a venv was made from (pyvenv.cfg `home`): outside the venv, it imports the
    real tensorizer."""
    cfg = venv_python.parent.parent / "pyvenv.cfg"
    if cfg.is_file():
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home":
                for name in (f"python{sys.version_info.major}.{sys.version_info.minor}", "python3"):
                    candidate = Path(value.strip()) / name
                    if candidate.exists():
                        return str(candidate)
    return shutil.which("python3")


def summarize(result: dict) -> dict:
    secs = result["seconds"]
    gbps = [result["bytes"] / s / 1e9 for s in secs]
    return {**result, "median_s": statistics.median(secs), "median_gbps": result["bytes"] / statistics.median(secs) / 1e9,
            "min_gbps": min(gbps), "max_gbps": max(gbps)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", help="benchmark this .tensors file instead of generating one")
    ap.add_argument("--size", type=int, default=1024, help="MiB of the generated model (default 1024)")
    ap.add_argument("--runs", type=int, default=7, help="timed loads per peer and setting (default 7)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of all peers, interleaved; medians are over all rounds' runs (default 3)")
    ap.add_argument("--smoke", action="store_true", help="tiny and fast (CTest): 16 MiB, 2 runs")
    ap.add_argument("--real-readers", default="1,2,4,8", help="num_readers tried for the real tensorizer")
    ap.add_argument("--ours-readers", default="default", help="num_readers tried for ours ('default' = None)")
    ap.add_argument("--devices", default="auto", help="cpu, cuda or auto (cpu, plus cuda when available)")
    ap.add_argument("--ours-python", default=str(REPO / "build" / "venv" / "bin" / "python"))
    ap.add_argument("--real-python", default=None, help="default: the venv's base interpreter")
    ap.add_argument("--cli", default=str(REPO / "build" / "bin" / "tensorizer"))
    ap.add_argument("--workdir", default=None, help="where the generated files go (default: a temp dir)")
    ap.add_argument("--reuse-process", action="store_true",
                    help="time --runs loads per process (default: one timed load per fresh process)")
    ap.add_argument("--peers", default="ours,cli,real,safetensors",
                    help="which peers to run (comma-separated subset of the default)")
    ap.add_argument("--no-pretouch", action="store_true",
                    help="do not touch and free memory before each timed load (see pretouch())")
    ap.add_argument("--no-check", action="store_true", help="skip the cross-peer content hash check")
    ap.add_argument("--json", dest="json_out", help="also write all results as JSON here")
    ap.add_argument("--self-test", action="store_true",
                    help="harness check only: accept a --ours-python whose tensorizer is not ours")
    args = ap.parse_args(argv)
    if args.smoke:
        args.size, args.runs, args.rounds, args.real_readers = 16, 2, 1, "1,2"
    timeout = 120 if args.smoke else 1800
    digest = not args.no_check

    # Absolute but not resolved: the venv's python is a symlink to the base interpreter, and only
    # the venv path imports our package. Workers run with cwd=/.
    ours_python = Path(os.path.abspath(args.ours_python))
    args.cli = os.path.abspath(args.cli)
    if not ours_python.exists():
        print(f"SKIP: {ours_python} does not exist (run scripts/python_build.sh)")
        return SKIP
    ours_probe = run_worker(str(ours_python), "probe", timeout)[0]
    if not ours_probe.get("ours") and not args.self_test:
        print(f"SKIP: {ours_python} does not import our tensorizer: {ours_probe}")
        return SKIP
    real_python = args.real_python or venv_base_python(ours_python)
    peers = set(args.peers.split(","))
    real_probe = run_worker(real_python, "probe", timeout)[0] if real_python and "real" in peers else {}
    real_ok = "real" in peers and bool(real_probe.get("tensorizer_file")) and not real_probe.get("ours")
    cli = args.cli if Path(args.cli).exists() else None
    run_cli_peer = cli is not None and "cli" in peers

    tmp = None
    if args.file:
        path = os.path.abspath(args.file)
    else:
        if cli is None:
            print(f"SKIP: {args.cli} not found (needed to generate the model: build the project)")
            return SKIP
        tmp = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="tz-pybench-"))
        tmp.mkdir(parents=True, exist_ok=True)
        path = str(tmp / f"synth-{args.size}MiB.tensors")
        if not os.path.exists(path):
            subprocess.run([cli, "synth", path, "--size-mib", str(args.size)], check=True,
                           stdout=subprocess.DEVNULL, timeout=timeout)
    # The warm-up file of the fresh-process mode: small, same code paths.
    small_dir = Path(tempfile.mkdtemp(prefix="tz-pybench-warmup-"))
    small, small_st = str(small_dir / "warmup.tensors"), str(small_dir / "warmup.safetensors")
    if cli:
        subprocess.run([cli, "synth", small, "--size-mib", "8"], check=True, stdout=subprocess.DEVNULL, timeout=timeout)
        subprocess.run([cli, "convert", small, small_st], check=True, stdout=subprocess.DEVNULL, timeout=timeout)
    else:
        args.reuse_process = True
    st_path = os.path.splitext(path)[0] + ".safetensors"
    if not os.path.exists(st_path):
        if cli:
            subprocess.run([cli, "convert", path, st_path], check=True, stdout=subprocess.DEVNULL, timeout=timeout)
        else:
            run_worker(str(ours_python), "convert", timeout, path=path, out=st_path)

    devices = ["cpu"]
    if args.devices == "cuda":
        devices = ["cuda"]
    elif args.devices == "auto" and ours_probe.get("cuda"):
        devices.append("cuda")

    touch = 0 if args.no_pretouch or args.reuse_process else int(os.path.getsize(path) * 1.25)
    raw = {}  # (device, peer, how) -> result with the seconds of every round
    notes = []

    def add(device, peer, results):
        for r in results:
            key = (device, peer, r["how"])
            if key in raw:
                raw[key]["seconds"] += r["seconds"]
                raw[key]["digests"].add(r["digest"])
            else:
                raw[key] = {**r, "seconds": list(r["seconds"]), "digests": {r["digest"]}}

    st_python = real_python if real_probe.get("safetensors") else str(ours_python)
    if not real_ok:
        notes.append("real tensorizer not run" if "real" not in peers else
                     f"real tensorizer unavailable ({real_python}: {real_probe})")
    if not cli:
        notes.append(f"C++ CLI not found at {args.cli}")
    try:
        # Rounds interleave the peers, so a change in the machine's load hits all of them alike.
        for _round in range(args.rounds):
            for device in devices:
                dev_arg = "cuda:0" if device == "cuda" else "cpu"
                common = dict(device=dev_arg, runs=args.runs, warmup=args.warmup, digest=digest)

                if args.reuse_process:
                    # Several loads per process: after the first, allocators may hand back the
                    # previous load's memory (glibc keeps freed chunks below its mmap threshold).
                    warm_page_cache(path)
                    add(device, "ours (Python)", run_worker(str(ours_python), "tensorizer", timeout, path=path,
                                                            readers=args.ours_readers, **common))
                    if run_cli_peer:
                        warm_page_cache(path)
                        add(device, "our C++ CLI", [run_cli(cli, path, dev_arg, args.runs, args.warmup, timeout)])
                    if real_ok and (device == "cpu" or real_probe.get("cuda")):
                        warm_page_cache(path)
                        add(device, "real tensorizer", run_worker(real_python, "tensorizer", timeout, path=path,
                                                                  readers=args.real_readers, **common))
                    if "safetensors" in peers:
                        warm_page_cache(st_path)
                        try:
                            add(device, "safetensors", run_worker(st_python, "safetensors", timeout, path=st_path,
                                                                  **common))
                        except RuntimeError as e:
                            notes.append(f"safetensors failed: {e}")
                    continue
                # Fresh memory for real: one timed load per process, after warm-up loads of a small
                # file (imports, torch and loader start-up are not timed; no big chunk is cached).
                once = dict(common, runs=1, pretouch=touch)
                for _run in range(args.runs):
                    for readers in args.ours_readers.split(","):
                        warm_page_cache(path)
                        add(device, "ours (Python)", run_worker(str(ours_python), "tensorizer", timeout, path=path,
                                                                readers=readers, warmup_path=small, **once))
                    if run_cli_peer:
                        warm_page_cache(path)
                        add(device, "our C++ CLI", [run_cli(cli, path, dev_arg, 1, 0, timeout, touch)])
                    if real_ok and (device == "cpu" or real_probe.get("cuda")):
                        for readers in args.real_readers.split(","):
                            warm_page_cache(path)
                            add(device, "real tensorizer", run_worker(real_python, "tensorizer", timeout, path=path,
                                                                      readers=readers, warmup_path=small, **once))
                    for mode in range((2 if device == "cpu" else 1) if "safetensors" in peers else 0):
                        warm_page_cache(st_path)
                        try:
                            add(device, "safetensors", run_worker(st_python, "safetensors", timeout, path=st_path,
                                                                  warmup_path=small_st, only=mode, **once))
                        except RuntimeError as e:
                            notes.append(f"safetensors failed: {e}")
    finally:
        shutil.rmtree(small_dir, ignore_errors=True)
        if tmp is not None and not args.workdir:
            shutil.rmtree(tmp, ignore_errors=True)

    rows = []  # (device, peer, summary)
    for (device, peer, _how), r in raw.items():
        digests = r.pop("digests") - {None}
        digest = digests.pop() if len(digests) == 1 else ("differs between rounds" if digests else None)
        rows.append((device, peer, summarize({**r, "digest": digest})))

    # Report
    size_gb = rows[0][2]["bytes"] / 1e9 if rows else 0
    print(f"\nPython load benchmark: {size_gb:.3f} GB of tensor data ({os.path.basename(path)}), "
          f"warm page cache; median of {args.rounds} round(s) x {args.runs} runs; "
          + ("several loads per process (recycled memory) after " if args.reuse_process else
             ("one timed load per fresh process (fresh memory" + (", pre-touched" if touch else "") + ") after "))
          + f"{args.warmup} warm-up load(s); "
          f"{os.cpu_count()} CPUs\n")
    print("| device | peer | how | median GB/s | median s | range GB/s |")
    print("| --- | --- | --- | ---: | ---: | --- |")
    for device, peer, s in rows:
        version = f" {s['version']}" if s.get("version") else ""
        print(f"| {device} | {peer}{version} | {s['how']} | {s['median_gbps']:.2f} | {s['median_s']:.3f} "
              f"| {s['min_gbps']:.2f}–{s['max_gbps']:.2f} |")

    def best(device, peer):
        cands = [s for d, p, s in rows if d == device and p == peer]
        return max(cands, key=lambda s: s["median_gbps"]) if cands else None

    ratios = {}
    print("\n| device | ours / real tensorizer (target ≥ 1.30) | ours / C++ CLI (target 0.95–1.05) | ours / safetensors |")
    print("| --- | ---: | ---: | ---: |")
    for device in devices:
        ours = best(device, "ours (Python)")
        cells = []
        for peer in ("real tensorizer", "our C++ CLI", "safetensors"):
            other = best(device, peer)
            if ours and other:
                ratio = ours["median_gbps"] / other["median_gbps"]
                ratios[(device, peer)] = ratio
                cells.append(f"{ratio:.2f}× (vs {other['how']})")
            else:
                cells.append("n/a")
        print(f"| {device} | " + " | ".join(cells) + " |")
    for note in notes:
        print(f"\nnote: {note}")

    status = 0
    digests = {(d, p, s["how"]): s["digest"] for d, p, s in rows if s.get("digest")}
    if len(set(digests.values())) > 1:
        print("\nERROR: the peers loaded different data:")
        for key, value in digests.items():
            print(f"  {key}: {value}")
        status = 1
    elif digests:
        print(f"\ncontent check: {len(digests)} loads by {len({p for _, p, _ in digests})} peers hashed alike")

    if args.json_out:
        write_json(args, rows, devices, best, path, ratios=ratios, notes=notes, ours=ours_probe, real=real_probe)
    return status


def write_json(args, rows, devices, best, path, ratios, **extra):
    """bench/README.md's schema: per device one group, each peer at its best setting, compared with
    the real tensorizer; every setting of every peer is kept under "details"."""
    from bench_json import entry, write_report

    results = []
    for device in devices:
        group = f"{device}, " + ("several loads per process" if args.reuse_process else "one load per fresh process")
        names = {}  # peer -> its label, with the version when it has one
        for peer in ("real tensorizer", "ours (Python)", "our C++ CLI", "safetensors"):
            s = best(device, peer)
            if s:
                names[peer] = f"{peer} {s['version']}".strip()
                results.append(entry(group, names[peer], [s["bytes"] / t / 1e9 for t in s["seconds"]],
                                     reference=names.get("real tensorizer"), is_reference=peer == "real tensorizer",
                                     note=s["how"], median=s["median_gbps"]))
    write_report(args.json_out, "python_load_bench", rows[0][2]["bytes"] if rows else 0, results, file=path,
                 runs=args.runs, rounds=args.rounds, details=[{"device": d, "peer": p, **s} for d, p, s in rows],
                 ratios={f"{d}: ours/{p}": r for (d, p), r in ratios.items()}, **extra)


if __name__ == "__main__":
    if "--worker" in sys.argv[1:]:
        worker_main(sys.argv[1:])
    else:
        sys.exit(main())

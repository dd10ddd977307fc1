#!/usr/bin/env python3
"""Python load benchmark: the same .tensors file loaded by our `tensorizer` (build/venv), by the real
tensorizer 2.11.1 (the system interpreter, a separate process), by our C++ CLI (`tensorizer load
--json`) and by safetensors (the file converted to .safetensors), into fresh memory with a warm page
cache, on the CPU and, when torch sees a GPU, on CUDA.

Each peer runs in its own subprocess (bench/python_load_worker.py under the peer's
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
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from python_load_worker import pretouch  # bench/ is this script's sys.path[0]

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().parent / "python_load_worker.py"  # a peer's loads, in its own interpreter
SKIP = 77


# ------------------------------------------------------------------------------------------------
# Driver side


def run_worker(python: str, kind: str, timeout: float, **kwargs) -> list[dict]:
    cmd = [python, str(WORKER), "--worker", kind]
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


def parse_args(argv):
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
    return args


class Bench:
    """One benchmark run: the peers found, the files, and the results as the rounds add them."""

    def __init__(self, args):
        self.args = args
        self.timeout = 120 if args.smoke else 1800
        self.digest = not args.no_check
        self.raw = {}  # (device, peer, how) -> result with the seconds of every round
        self.notes = []
        self.tmp = self.small_dir = None

    def probe(self) -> int:
        """Finds the peers; SKIP where ours is not built, else 0."""
        args = self.args
        # Absolute but not resolved: the venv's python is a symlink to the base interpreter, and
        # only the venv path imports our package. Workers run with cwd=/.
        self.ours_python = Path(os.path.abspath(args.ours_python))
        args.cli = os.path.abspath(args.cli)
        if not self.ours_python.exists():
            print(f"SKIP: {self.ours_python} does not exist (run scripts/python_build.sh)")
            return SKIP
        self.ours_probe = run_worker(str(self.ours_python), "probe", self.timeout)[0]
        if not self.ours_probe.get("ours") and not args.self_test:
            print(f"SKIP: {self.ours_python} does not import our tensorizer: {self.ours_probe}")
            return SKIP
        self.real_python = args.real_python or venv_base_python(self.ours_python)
        self.peers = set(args.peers.split(","))
        self.real_probe = (run_worker(self.real_python, "probe", self.timeout)[0]
                           if self.real_python and "real" in self.peers else {})
        self.real_ok = ("real" in self.peers and bool(self.real_probe.get("tensorizer_file"))
                        and not self.real_probe.get("ours"))
        self.cli = args.cli if Path(args.cli).exists() else None
        self.run_cli_peer = self.cli is not None and "cli" in self.peers
        self.st_python = self.real_python if self.real_probe.get("safetensors") else str(self.ours_python)
        if not self.real_ok:
            self.notes.append("real tensorizer not run" if "real" not in self.peers else
                              f"real tensorizer unavailable ({self.real_python}: {self.real_probe})")
        if not self.cli:
            self.notes.append(f"C++ CLI not found at {args.cli}")
        self.devices = ["cpu"]
        if args.devices == "cuda":
            self.devices = ["cuda"]
        elif args.devices == "auto" and self.ours_probe.get("cuda"):
            self.devices.append("cuda")
        return 0

    def _cli_run(self, *argv):
        subprocess.run([self.cli, *argv], check=True, stdout=subprocess.DEVNULL, timeout=self.timeout)

    def make_files(self) -> int:
        """The model (generated unless --file), its safetensors copy and the small warm-up files;
        SKIP where the model must be generated and the CLI is missing, else 0."""
        args = self.args
        if args.file:
            self.path = os.path.abspath(args.file)
        else:
            if self.cli is None:
                print(f"SKIP: {args.cli} not found (needed to generate the model: build the project)")
                return SKIP
            self.tmp = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="tz-pybench-"))
            self.tmp.mkdir(parents=True, exist_ok=True)
            self.path = str(self.tmp / f"synth-{args.size}MiB.tensors")
            if not os.path.exists(self.path):
                self._cli_run("synth", self.path, "--size-mib", str(args.size))
        # The warm-up file of the fresh-process mode: small, same code paths.
        self.small_dir = Path(tempfile.mkdtemp(prefix="tz-pybench-warmup-"))
        self.small, self.small_st = str(self.small_dir / "warmup.tensors"), str(self.small_dir / "warmup.safetensors")
        if self.cli:
            self._cli_run("synth", self.small, "--size-mib", "8")
            self._cli_run("convert", self.small, self.small_st)
        else:
            args.reuse_process = True
        self.st_path = os.path.splitext(self.path)[0] + ".safetensors"
        if not os.path.exists(self.st_path):
            if self.cli:
                self._cli_run("convert", self.path, self.st_path)
            else:
                run_worker(str(self.ours_python), "convert", self.timeout, path=self.path, out=self.st_path)
        self.touch = 0 if args.no_pretouch or args.reuse_process else int(os.path.getsize(self.path) * 1.25)
        return 0

    def cleanup(self):
        if self.small_dir is not None:
            shutil.rmtree(self.small_dir, ignore_errors=True)
        if self.tmp is not None and not self.args.workdir:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def add(self, device, peer, results):
        for r in results:
            key = (device, peer, r["how"])
            if key in self.raw:
                self.raw[key]["seconds"] += r["seconds"]
                self.raw[key]["digests"].add(r["digest"])
            else:
                self.raw[key] = {**r, "seconds": list(r["seconds"]), "digests": {r["digest"]}}

    def _safetensors(self, row_device, **kwargs):
        """safetensors' loads; kwargs go to its worker (`device` among them: "cuda:0", say)."""
        warm_page_cache(self.st_path)
        try:
            self.add(row_device, "safetensors", run_worker(self.st_python, "safetensors", self.timeout,
                                                       path=self.st_path, **kwargs))
        except RuntimeError as e:
            self.notes.append(f"safetensors failed: {e}")

    def _real_runs_on(self, device) -> bool:
        return self.real_ok and (device == "cpu" or bool(self.real_probe.get("cuda")))

    def run_rounds(self):
        # Rounds interleave the peers, so a change in the machine's load hits all of them alike.
        for _round in range(self.args.rounds):
            for device in self.devices:
                if self.args.reuse_process:
                    self._reused_process_runs(device)
                else:
                    self._fresh_process_runs(device)

    def _common(self, device):
        dev_arg = "cuda:0" if device == "cuda" else "cpu"
        return dev_arg, dict(device=dev_arg, runs=self.args.runs, warmup=self.args.warmup, digest=self.digest)

    def _reused_process_runs(self, device):
        # Several loads per process: after the first, allocators may hand back the previous
        # load's memory (glibc keeps freed chunks below its mmap threshold).
        args, t = self.args, self.timeout
        dev_arg, common = self._common(device)
        warm_page_cache(self.path)
        self.add(device, "ours (Python)", run_worker(str(self.ours_python), "tensorizer", t, path=self.path,
                                                     readers=args.ours_readers, **common))
        if self.run_cli_peer:
            warm_page_cache(self.path)
            self.add(device, "our C++ CLI", [run_cli(self.cli, self.path, dev_arg, args.runs, args.warmup, t)])
        if self._real_runs_on(device):
            warm_page_cache(self.path)
            self.add(device, "real tensorizer", run_worker(self.real_python, "tensorizer", t, path=self.path,
                                                           readers=args.real_readers, **common))
        if "safetensors" in self.peers:
            self._safetensors(device, **common)

    def _fresh_process_runs(self, device):
        # Fresh memory for real: one timed load per process, after warm-up loads of a small file
        # (imports, torch and loader start-up are not timed; no big chunk is cached).
        args, t = self.args, self.timeout
        dev_arg, common = self._common(device)
        once = dict(common, runs=1, pretouch=self.touch)
        for _run in range(args.runs):
            for readers in args.ours_readers.split(","):
                warm_page_cache(self.path)
                self.add(device, "ours (Python)", run_worker(str(self.ours_python), "tensorizer", t, path=self.path,
                                                             readers=readers, warmup_path=self.small, **once))
            if self.run_cli_peer:
                warm_page_cache(self.path)
                self.add(device, "our C++ CLI", [run_cli(self.cli, self.path, dev_arg, 1, 0, t, self.touch)])
            if self._real_runs_on(device):
                for readers in args.real_readers.split(","):
                    warm_page_cache(self.path)
                    self.add(device, "real tensorizer", run_worker(self.real_python, "tensorizer", t, path=self.path,
                                                                   readers=readers, warmup_path=self.small, **once))
            for mode in range((2 if device == "cpu" else 1) if "safetensors" in self.peers else 0):
                self._safetensors(device, warmup_path=self.small_st, only=mode, **once)

    def rows(self):
        """(device, peer, summary) per setting, each with its one digest over the rounds."""
        out = []
        for (device, peer, _how), r in self.raw.items():
            r = dict(r)
            digests = r.pop("digests") - {None}
            digest = digests.pop() if len(digests) == 1 else ("differs between rounds" if digests else None)
            out.append((device, peer, summarize({**r, "digest": digest})))
        return out


def print_table(b: Bench, rows):
    args = b.args
    size_gb = rows[0][2]["bytes"] / 1e9 if rows else 0
    print(f"\nPython load benchmark: {size_gb:.3f} GB of tensor data ({os.path.basename(b.path)}), "
          f"warm page cache; median of {args.rounds} round(s) x {args.runs} runs; "
          + ("several loads per process (recycled memory) after " if args.reuse_process else
             ("one timed load per fresh process (fresh memory" + (", pre-touched" if b.touch else "") + ") after "))
          + f"{args.warmup} warm-up load(s); "
          f"{os.cpu_count()} CPUs\n")
    print("| device | peer | how | median GB/s | median s | range GB/s |")
    print("| --- | --- | --- | ---: | ---: | --- |")
    for device, peer, s in rows:
        version = f" {s['version']}" if s.get("version") else ""
        print(f"| {device} | {peer}{version} | {s['how']} | {s['median_gbps']:.2f} | {s['median_s']:.3f} "
              f"| {s['min_gbps']:.2f}–{s['max_gbps']:.2f} |")


def print_ratios(devices, best):
    """Ours against each peer at its best setting, per device; returns {(device, peer): ratio}."""
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
    return ratios


def check_content(rows) -> int:
    """1 where the peers loaded different data (their digests differ), else 0."""
    digests = {(d, p, s["how"]): s["digest"] for d, p, s in rows if s.get("digest")}
    if len(set(digests.values())) > 1:
        print("\nERROR: the peers loaded different data:")
        for key, value in digests.items():
            print(f"  {key}: {value}")
        return 1
    if digests:
        print(f"\ncontent check: {len(digests)} loads by {len({p for _, p, _ in digests})} peers hashed alike")
    return 0


def main(argv=None):
    args = parse_args(argv)
    b = Bench(args)
    if b.probe() == SKIP:
        return SKIP
    try:
        if b.make_files() == SKIP:
            return SKIP
        b.run_rounds()
    finally:
        b.cleanup()
    rows = b.rows()
    print_table(b, rows)

    def best(device, peer):
        cands = [s for d, p, s in rows if d == device and p == peer]
        return max(cands, key=lambda s: s["median_gbps"]) if cands else None

    ratios = print_ratios(b.devices, best)
    for note in b.notes:
        print(f"\nnote: {note}")
    status = check_content(rows)
    if args.json_out:
        write_json(args, rows, b.devices, best, b.path, ratios=ratios, notes=b.notes, ours=b.ours_probe,
                   real=b.real_probe)
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
    sys.exit(main())

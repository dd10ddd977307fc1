#!/usr/bin/env python3
# Question: how fast does a model reach GPU memory through each entry point of ours (CLI, C ABI,
# Python), plain, verified and encrypted, first load in a fresh process and later loads in it,
# against the engine's steady state, the pinned copy limit and the peers (tensorizer 2.11.1,
# safetensors, Run:ai streamer, fastsafetensors, torch's pinned copy) on the same file, in one run?
#
# Runs on a bare GPU machine from a bundle built elsewhere (docs/gpu.md#running-on-a-bare-gpu-machine): --bin holds the
# CLI, gpu_load_bench and c_load_bench, --ours and --peers are PYTHONPATH folders. Every timed
# Python load runs in a fresh process after torch has made its CUDA context (so no loader pays for
# that); each process loads `--later` more times for the later-load figure. Every loader's tensors
# are digested on the device (per tensor: the sum of its bytes, by name) and must agree. Writes
# the table as text and tz-bench/1 JSON (bench/README.md) for bench/charts.py. --smoke: a tiny run
# of the same steps (the CUDA emulation's CLI needs no GPU; Python steps are skipped without one).
import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


BIN_ENV = None  # the environment of our C++ programs (LD_LIBRARY_PATH = --lib), set by main()


def sh(cmd, timeout, env=None):
    """Runs cmd; returns stdout; raises with stderr's tail on failure."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env or BIN_ENV)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {r.returncode}: {r.stderr[-800:]}")
    return r.stdout


# ---- worker side: one fresh Python process, first load then later loads, then a digest ----

def _digest(tensors):
    import torch
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous().view(-1).view(torch.uint8)
        h.update(f"{name}:{t.numel()}:{int(t.sum(dtype=torch.int64).item())};".encode())
    return h.hexdigest()


def _loader(kind, path, key):
    import torch
    if kind == "ours" or kind == "tensorizer":
        from tensorizer import TensorDeserializer

        def load(verify=False, encrypted=False):
            kw = {"device": "cuda:0"}
            if verify:
                kw["verify_hash"] = True
            if encrypted:
                from tensorizer import DecryptionParams
                kw["encryption"] = DecryptionParams.from_key(key)
            d = TensorDeserializer(path, **kw)
            return dict(d.items())
        return load
    if kind == "safetensors":
        from safetensors.torch import load_file
        return lambda **_: load_file(path, device="cuda:0")
    if kind == "runai":
        from runai_model_streamer import SafetensorsStreamer

        def load(**_):
            out = {}
            with SafetensorsStreamer() as s:
                s.stream_file(path)
                for name, t in s.get_tensors():
                    out[name] = t.to("cuda:0", non_blocking=True)
            return out
        return load
    if kind == "fastsafetensors":
        from fastsafetensors import SafeTensorsFileLoader, SingleGroup

        def load(**_):
            loader = SafeTensorsFileLoader(SingleGroup(), torch.device("cuda:0"), nogds=True)
            loader.add_filenames({0: [path]})
            fb = loader.copy_files_to_device()
            out = {k: fb.get_tensor(k).clone() for k in list(fb.key_to_rank_lidx.keys())}
            fb.close()
            loader.close()
            return out
        return load
    if kind == "torch_pinned":
        size = os.path.getsize(path)
        host = torch.empty(size, dtype=torch.uint8).pin_memory()
        host.fill_(1)
        return lambda **_: {"all": host.to("cuda:0", non_blocking=True)}
    raise ValueError(kind)


def worker(args):
    import torch
    torch.zeros(1, device="cuda:0")  # torch's own CUDA context, made before any timed load
    key = open(args.key, "rb").read() if args.key else None
    load = _loader(args.worker, args.file, key)
    rates, digest, nbytes = [], None, 0
    for k in range(1 + args.later):
        t0 = time.perf_counter()
        tensors = load(verify=args.verify, encrypted=bool(key))
        torch.cuda.synchronize()
        s = time.perf_counter() - t0
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        rates.append(nbytes / s / 1e9)
        if k == 0 and args.worker != "torch_pinned":
            digest = _digest(tensors)
        del tensors
        torch.cuda.empty_cache()
    print(json.dumps({"runs_gbps": rates, "digest": digest, "bytes": nbytes}))


# ---- driver side ----

def python_runs(a, kind, path, procs, verify=False, key=None):
    site = a.ours if kind == "ours" else a.peers
    env = dict(os.environ, PYTHONPATH=site, PYTHONUNBUFFERED="1")
    firsts, laters, digests = [], [], set()
    for _ in range(procs):
        cmd = [a.python, os.path.abspath(__file__), "--worker", kind, "--file", path, "--later", str(a.later)]
        if verify:
            cmd.append("--verify")
        if key:
            cmd += ["--key", key]
        out = json.loads(sh(cmd, a.step_timeout, env).strip().splitlines()[-1])
        firsts.append(out["runs_gbps"][0])
        laters += out["runs_gbps"][1:]
        if out["digest"]:
            digests.add(out["digest"])
    return firsts, laters, digests


def program(a, name):
    """Our program `name` in --bin (its build on the CUDA emulation with --emulated)."""
    return os.path.join(a.bin, name + ("_emulated" if a.emulated else ""))


def cli_runs(a, path, procs, extra=()):
    """Fresh processes of `load --device`, then one more whose tensors are read back from the
    device (--device-sha256) and must equal `hash --json` of the file: the bytes, not the counts."""
    cli = program(a, "tensorizer")
    firsts, laters, pinned, setups = [], [], (0, 0), []
    for _ in range(procs):
        rep = json.loads(sh([cli, "load", "--device", "cuda:0", "--json", "--repeat", str(1 + a.later), *extra, path],
                            a.step_timeout))
        firsts.append(rep["runs_gb_per_s"][0])
        laters += rep["runs_gb_per_s"][1:]
        pinned = max(pinned, (rep["pinned_max_bytes"], rep["ring_bytes"]))
        setups.append((rep["setup_s"], rep["stages"]["open_s"], rep["context_s"]))
    if not 0 < pinned[0] <= pinned[1]:  # the goal: pinned memory bounded by the ring, whatever the model
        raise RuntimeError(f"pinned staging held {pinned[0]} bytes against a ring of {pinned[1]}")
    keys = [x for x in extra if x != "--verify"]
    got = json.loads(sh([cli, "load", "--device", "cuda:0", "--json", "--device-sha256", *extra, path], a.step_timeout))
    want = json.loads(sh([program(a, "tensorizer"), "hash", "--json", *keys, path], a.step_timeout))
    on_device = {t["name"]: t["sha256"] for t in got["device_sha256"]}
    in_file = {t["name"]: t["sha256"] for t in want["tensors"]}
    if on_device != in_file:
        bad = [n for n in in_file if on_device.get(n) != in_file[n]]
        raise RuntimeError(f"{len(bad)} tensor(s) differ on the device from the file, e.g. {bad[:3]}")
    return firsts, laters, pinned, setups


def c_runs(a, path, procs):
    """Fresh processes of c_load_bench; with each one's set-up before its first load, outside its
    rates: (tz_model_open then tz_prepare_device, the open, the prepare) in s."""
    firsts, laters, setups = [], [], []
    for _ in range(procs):
        rep = json.loads(sh([program(a, "c_load_bench"), path, "0", str(1 + a.later)], a.step_timeout))
        firsts.append(rep["runs_gbps"][0])
        laters += rep["runs_gbps"][1:]
        setups.append((rep["open_s"] + rep["prepare_s"], rep["open_s"], rep["prepare_s"]))
    return firsts, laters, setups


def engine_reference(a, path, verify=False):
    """gpu_load_bench's figures: the copy limit, the memory bound, the plain pipeline, the engine's
    steady state and a load with a fresh context; verified: the N-core hash limit, the verified
    steady state (CRC32s on the GPU), the same with every hash on the host (host_crc) and with the
    split tensors started in file order instead of longest first (file_order; keys suffixed
    _verified)."""
    runs = "2" if a.smoke else "5"
    cmd = [program(a, "gpu_load_bench"), "--file", path, "--runs", runs, "--no-cold"] + (["--verify"] if verify else [])
    out = sh(cmd, a.step_timeout)
    sys.stdout.write(out)
    ref = {}
    for key, pat in [("limit", r"^limit\s+([\d.]+)"), ("bound", r"bound min\(limit, that\) ([\d.]+)"),
                     ("pipe", r"^pipe\s+([\d.]+)"), ("steady", r"^warm ring\s+([\d.]+)"),
                     ("fresh_ctx", r"^fresh ctx\s+([\d.]+)"), ("hash_limit", r"^hash\s+([\d.]+)"),
                     ("host_crc", r"^host CRC32\s+([\d.]+)"),
                     ("file_order", r"^file order\s+([\d.]+)"), ("sha_limit", r"^sha\s+([\d.]+)")]:
        m = re.search(pat, out, re.M)
        if m:
            ref[key + ("_verified" if verify and key not in ("hash_limit", "sha_limit") else "")] = float(m.group(1))
    return ref


def make_files(a, tmp):
    cli = os.path.join(a.bin, "tensorizer")
    plain = os.path.join(tmp, "model.tensors")
    sh([cli, "synth", plain, "--size-mib", str(a.size_mib)], a.step_timeout)
    st = os.path.join(tmp, "model.safetensors")
    sh([cli, "convert", plain, st], a.step_timeout)
    key = os.path.join(tmp, "key")
    sh([cli, "keygen", key], a.step_timeout)
    enc = os.path.join(tmp, "model.enc.tensors")
    sh([cli, "copy", "--encrypt-key-file", key, plain, enc], a.step_timeout)
    for p in (plain, st, enc):  # into the page cache: every loader reads warm files
        with open(p, "rb") as f:
            while f.read(64 << 20):
                pass
    return plain, st, enc, key


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--key", help=argparse.SUPPRESS)
    ap.add_argument("--verify", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bin", help="folder with tensorizer, gpu_load_bench, c_load_bench")
    ap.add_argument("--lib", default="", help="LD_LIBRARY_PATH for the C++ programs (the bundle's lib/)")
    ap.add_argument("--ours", default="", help="PYTHONPATH with our tensorizer package")
    ap.add_argument("--peers", default="", help="PYTHONPATH with tensorizer 2.11.1, runai, fastsafetensors")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--procs", type=int, default=3, help="fresh processes per loader")
    ap.add_argument("--py-procs", type=int, default=0, help="fresh processes per Python loader (default: --procs)")
    ap.add_argument("--later", type=int, default=3, help="loads after the first in each process")
    ap.add_argument("--step-timeout", type=float, default=240)
    ap.add_argument("--skip", default="", help="comma-separated steps to leave out")
    ap.add_argument("--json", help="write tz-bench/1 JSON here")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one process per loader")
    ap.add_argument("--emulated", action="store_true",
                    help="no GPU: the CLI and gpu_load_bench built on the CUDA emulation (NAME_emulated); "
                         "the C ABI and Python steps are left out")
    return ap.parse_args()


# The Python loaders of the table: (row, worker kind, file: plain/st/enc, verified, encrypted).
PYTHON_ROWS = [("Python", "ours", "plain", False, False), ("Python verified", "ours", "plain", True, False),
               ("Python encrypted", "ours", "enc", False, True),
               ("tensorizer 2.11.1", "tensorizer", "plain", False, False),
               ("tensorizer 2.11.1 verified", "tensorizer", "plain", True, False),
               ("tensorizer 2.11.1 encrypted", "tensorizer", "enc", False, True),
               ("safetensors", "safetensors", "st", False, False), ("Run:ai streamer", "runai", "st", False, False),
               ("fastsafetensors (no GDS)", "fastsafetensors", "st", False, False),
               ("torch pinned .to(cuda)", "torch_pinned", "plain", False, False)]


class Steps:
    """Runs the table's steps: one that fails is reported and the rest still run."""

    def __init__(self, skip):
        self.skip, self.failed = skip, []

    def __call__(self, name, fn):
        if name in self.skip:
            return None
        t0 = time.time()
        try:
            r = fn()
            print(f"gpu_table: {name} done in {time.time() - t0:.1f} s", flush=True)
            return r
        except Exception as e:
            print(f"gpu_table: {name} FAILED: {e}", flush=True)
            self.failed.append(name)
            return None


def run_steps(a, step, files):
    """The engine references, then every loader's rows; returns (ref, rows, digests, (pinned, setups))."""
    plain, st, enc, key = files
    ref = step("engine", lambda: engine_reference(a, plain)) or {}
    ref.update(step("engine verified", lambda: engine_reference(a, plain, verify=True)) or {})
    rows, digests = [], {}  # rows: (name, first-load runs, later-load runs)
    pinned = {}  # CLI rows: (most pinned bytes any load held, the ring's bytes)
    # CLI and C ABI rows, per process: (set-up before the first load, the open, the GPU's context) in s;
    # the CLI makes the context beside the open, the C ABI after it (tz_prepare_device).
    setups = {}
    for name, path, extra in [("CLI", plain, ()), ("CLI verified", plain, ("--verify",)),
                              ("CLI encrypted", enc, ("--decrypt-key-file", key)),
                              ("CLI safetensors", st, ())]:
        r = step(name, lambda: cli_runs(a, path, a.procs, extra))
        if r:
            rows.append((name, r[0], r[1]))
            pinned[name], setups[name] = r[2], r[3]
    r = step("C ABI", lambda: c_runs(a, plain, a.procs))
    if r:
        rows.append(("C ABI", r[0], r[1]))
        setups["C ABI"] = r[2]
    by_kind = {"plain": plain, "st": st, "enc": enc}
    for name, kind, which, verify, encrypted in ([] if "python" in step.skip else PYTHON_ROWS):
        r = step(name, lambda: python_runs(a, kind, by_kind[which], a.py_procs or a.procs, verify,
                                           key if encrypted else None))
        if r:
            rows.append((name, r[0], r[1]))
            if r[2]:
                digests[name] = r[2]
    return ref, rows, digests, (pinned, setups)


def main():
    a = parse_args()
    if a.worker:
        return worker(a)
    if a.smoke:
        a.size_mib, a.procs, a.later = 48, 1, 1
    global BIN_ENV
    BIN_ENV = dict(os.environ, LD_LIBRARY_PATH=a.lib) if a.lib else None
    skip = set(filter(None, a.skip.split(",")))
    if a.emulated:
        skip.add("python")
        if not os.path.exists(program(a, "c_load_bench")):  # built with the shared library only
            skip.add("C ABI")
    step = Steps(skip)
    with tempfile.TemporaryDirectory(prefix="gpu_table_") as tmp:
        ref, rows, digests, cli_setup = run_steps(a, step, make_files(a, tmp))
    report(a, ref, rows, digests, cli_setup)
    if step.failed:
        print(f"gpu_table: {len(step.failed)} step(s) failed: {', '.join(step.failed)}")
    agree = len({frozenset(d) for d in digests.values()}) <= 1
    return 1 if step.failed or not agree else 0


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def report(a, ref, rows, digests, cli_setup):
    steady = ref.get("steady", float("nan"))
    print(f"\n== GPU table: {a.size_mib} MiB, medians; first = first load in a fresh process, later = loads after it ==")
    for k in ("limit", "bound", "pipe", "steady", "fresh_ctx", "hash_limit", "sha_limit", "steady_verified",
              "host_crc_verified", "file_order_verified"):
        if k in ref:
            print(f"  {k:<10} {ref[k]:7.2f} GB/s")
    hash_limit = ref.get("hash_limit", float("nan"))
    sha_limit = ref.get("sha_limit", float("nan"))
    print(f"  {'loader':<30} {'first':>7} {'later':>7}  first/steady later/steady  later/hash-limit later/sha-limit"
          " (verified)")
    for name, first, later in rows:
        vs_hash = f"{med(later) / hash_limit:17.3f} {med(later) / sha_limit:15.3f}" if "verified" in name else ""
        print(f"  {name:<30} {med(first):7.2f} {med(later):7.2f}  {med(first) / steady:11.3f} {med(later) / steady:12.3f}"
              f"{vs_hash}")
    pinned, setups = cli_setup
    for name, (held, ring) in pinned.items():
        print(f"  pinned: {name} held at most {held / (1 << 20):.1f} MiB of its {ring / (1 << 20):.1f} MiB ring"
              " (every load of every process)")
    for name, runs in setups.items():  # not in the rates: what a fresh process spends before its first load
        setup, opened, context = (1e3 * med([r[k] for r in runs]) for k in range(3))
        how = "then the GPU's context and ring (tz_prepare_device)" if name == "C ABI" else "beside the GPU's context"
        print(f"  set-up: {name} {setup:.1f} ms before the first load: open {opened:.1f} ms {how}"
              f" {context:.1f} ms (medians over processes)")
    if any(name.startswith("Python") for name, _, _ in rows):
        print("  (Python rows time TensorDeserializer whole: their first load holds its open and the device's preparation)")
    groups = {}
    for name, ds in digests.items():
        groups.setdefault(frozenset(ds), []).append(name)
    print(f"  content: {len(groups)} distinct digest set(s) over {len(digests)} Python loaders"
          + ("" if len(groups) <= 1 else ": " + "; ".join(", ".join(v) for v in groups.values())))
    if a.json:
        from bench_json import entry, write_report
        results = []
        for group, pick in (("first load, fresh process", 1), ("later loads in the process", 2)):
            if "steady" in ref:
                results.append(entry(group, "engine steady state", [ref["steady"]], is_reference=True))
            results += [entry(group, row[0], row[pick], reference="engine steady state") for row in rows if row[pick]]
        write_report(a.json, "gpu_table", a.size_mib << 20, results)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Question (issue 34 §2): what does checking a model's signature cost a load, when the digests are
taken from the bytes the load reads (`load --signature`) rather than in a pass of their own (what
`model_signing verify` does before a server loads)?

One run, fresh processes, rounds alternating between the rows, medians; memory pre-touched before
each (docs/benchmarks.md, "Fresh memory on these VMs"); the file in the page cache (read once first).
Rows, by wall time of the whole process (file bytes / seconds):
  load                        `tensorizer load MODEL/model.tensors`, unsigned: the load alone
  load --signature (files)    the same load checking a signature of the model's files
  load --signature (shards)   ... of its 1 GB shards (model signing's shard method)
  verify --signature (files)  our pass of its own on every core: the N-core SHA-256 limit, files
  verify --signature (shards) the same over shards (shards of one file hash in parallel)
  openssl sha256              one core's SHA-256 over the weights file (OpenSSL, SHA-NI where the CPU has it;
                              coreutils' sha256sum has no SHA-NI: 0.36 GB/s here)
  model_signing verify        OpenSSF's verifier (its venv, scripts/setup.sh), files; when present
Goal: a signed load >= 0.8x of min(the unsigned load, the N-core SHA-256 limit of the same files).
usage: signed_load_bench.py CLI SIZE_MIB [REPEAT=5] [--json FILE]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from python_load_worker import pretouch  # noqa: E402

MS_VENV = os.environ.get("TZ_MODEL_SIGNING_VENV", "/opt/tz-peers/model-signing-1.1.1")


def wall(argv):
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli"), ap.add_argument("size_mib", type=int), ap.add_argument("repeat", type=int, nargs="?", default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tz-signed-bench-")
    try:
        model = os.path.join(work, "model")
        os.mkdir(model)
        weights = os.path.join(model, "model.tensors")
        subprocess.run([a.cli, "synth", weights, "--size-mib", str(a.size_mib)], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump({"architectures": ["Synth"]}, f)
        key, pub = os.path.join(work, "key.pem"), os.path.join(work, "pub.pem")
        subprocess.run(f"openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out {key}",
                       shell=True, check=True, stderr=subprocess.DEVNULL)
        subprocess.run(["openssl", "ec", "-in", key, "-pubout", "-out", pub], check=True, stderr=subprocess.DEVNULL)
        sigs = {m: os.path.join(work, f"{m}.sig") for m in ("files", "shards")}
        subprocess.run([a.cli, "sign", "--private-key", key, "--signature", sigs["files"], model], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([a.cli, "sign", "--private-key", key, "--shards", "--signature", sigs["shards"], model],
                       check=True, stdout=subprocess.DEVNULL)
        size = os.path.getsize(weights) + os.path.getsize(os.path.join(model, "config.json"))
        rows = {
            "load": [a.cli, "load", weights],
            "load --signature (files)": [a.cli, "load", "--signature", sigs["files"], "--public-key", pub, weights],
            "load --signature (shards)": [a.cli, "load", "--signature", sigs["shards"], "--public-key", pub, weights],
            "verify --signature (files)": [a.cli, "verify", "--signature", sigs["files"], "--public-key", pub, model],
            "verify --signature (shards)": [a.cli, "verify", "--signature", sigs["shards"], "--public-key", pub, model],
            "openssl sha256": ["openssl", "dgst", "-sha256", weights],
        }
        ms = os.path.join(MS_VENV, "bin", "model_signing")
        if os.access(ms, os.X_OK):
            rows["model_signing verify (files)"] = [ms, "verify", "key", model, "--signature", sigs["files"], "--public_key", pub]
        else:
            print(f"model_signing: {ms} missing (scripts/setup.sh): its row is left out")
        for argv in rows.values():  # every row once, untimed: the file in the page cache, each command known to pass
            wall(argv)
        times = {name: [] for name in rows}
        for _ in range(a.repeat):
            for name, argv in rows.items():
                pretouch(size * 5 // 4)
                times[name].append(wall(argv))
        med = {name: statistics.median(t) for name, t in times.items()}
        rate = {name: size / s / 1e9 for name, s in med.items()}
        print(f"{size / 2**20:.0f} MiB model (weights + config.json), {os.cpu_count()} cores, medians of {a.repeat} fresh processes")
        print(f"{'row':32} {'wall s':>8} {'GB/s':>7}")
        for name in rows:
            print(f"{name:32} {med[name]:8.3f} {rate[name]:7.3f}")
        out = {"size_bytes": size, "repeat": a.repeat, "wall_s": med, "gb_per_s": rate}
        for method in ("files", "shards"):
            limit = min(rate["load"], rate[f"verify --signature ({method})"])
            out[f"ratio_{method}"] = rate[f"load --signature ({method})"] / limit
            print(f"signed load ({method}) / min(load, N-core SHA-256 limit) = {out[f'ratio_{method}']:.2f} (goal 0.8)")
        if "model_signing verify (files)" in med:
            before = med["model_signing verify (files)"] + med["load"]
            print(f"model_signing verify then load: {before:.3f} s; load --signature: {med['load --signature (files)']:.3f} s "
                  f"({before / med['load --signature (files)']:.2f}x)")
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(out) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# tests/soak/soak.py: load and faults, as figures. Loads small synthesized models with the CLI over
# HTTP (nginx), S3 (Ceph RGW) and Redis through fault_proxy.py at several fault rates (interleaved in
# one run), checks every load byte for byte, uploads through the same proxies, and reports loads
# failed, bytes wrong, leftovers (proxy connections, temp files) and the throughput lost to faults.
# usage: soak.py [--quick] [--loads N] [--rates 0,0.01,0.05] ...   (exit 0 = no failure, 77 = no server)
import argparse
import filecmp
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(__file__))
from fault_proxy import ProxySet  # noqa: E402
from servers import BUCKET, REPO, S3_ENV, Servers  # noqa: E402

BACKENDS = ("http", "s3", "redis")
MODES = ("copy", "hash", "load")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cli", default=os.path.join(REPO, "build", "bin", "tensorizer"))
    ap.add_argument("--quick", action="store_true", help="30 loads, 2 uploads per store and rate (CI)")
    ap.add_argument("--loads", type=int, default=1000, help="loads in all (spread over stores and rates)")
    ap.add_argument("--uploads", type=int, default=10, help="uploads per store (s3, redis) and rate")
    ap.add_argument("--rates", default="0,0.01,0.05", help="fault rates per request / client write")
    ap.add_argument("--sizes-mib", default="4,7,10,13,16")
    ap.add_argument("--stall-timeout", type=float, default=1.0)
    ap.add_argument("--give-up-after", type=float, default=10.0)
    ap.add_argument("--workdir", default=os.path.join(REPO, "build", "soak"))
    ap.add_argument("--port-base", type=int, default=19000, help="servers' ports as scripts/servers/*.sh")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--py-loads", type=int, default=300, help="loads in ONE Python process (resource growth)")
    ap.add_argument("--python", default=os.path.join(REPO, "build", "venv", "bin", "python"),
                    help="interpreter with our tensorizer package (scripts/python_build.sh makes build/venv)")
    ap.add_argument("--py-path", help="PYTHONPATH holding our tensorizer package (with --python python3)")
    a = ap.parse_args()
    if a.quick:
        a.loads, a.uploads, a.sizes_mib, a.py_loads = min(a.loads, 30), min(a.uploads, 2), "4,6", min(a.py_loads, 15)
    a.rates = [float(r) for r in a.rates.split(",")]
    a.sizes_mib = [int(s) for s in a.sizes_mib.split(",")]
    return a


class Soak:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.work = os.path.join(a.workdir, "work")
        self.tmp = os.path.join(self.work, "tmp")
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.tmp)
        self.env = dict(os.environ, TMPDIR=self.tmp, **S3_ENV)
        self.servers = Servers(os.path.join(a.workdir, "servers"), a.port_base)
        self.limits = ["--connect-timeout", "2", "--first-byte-timeout", str(2 * a.stall_timeout),
                       "--stall-timeout", str(a.stall_timeout), "--give-up-after", str(a.give_up_after)]
        self.stats = defaultdict(lambda: defaultdict(float))  # (kind, store, rate) -> figures
        self.failures = []

    def cli(self, *args, timeout=300):
        t0 = time.monotonic()
        try:
            p = subprocess.run([self.a.cli, *args], env=self.env, capture_output=True, timeout=timeout)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            rc, out, err = "hang", b"", b"killed after %d s" % timeout
        return rc, out, err, time.monotonic() - t0

    def must(self, *args):
        rc, out, err, _ = self.cli(*args)
        if rc != 0:
            sys.exit(f"soak: setup step {' '.join(args)} failed ({rc}): {err.decode(errors='replace')}")
        return out

    def uri(self, store, port, name):
        if store == "http":
            return [f"http://127.0.0.1:{port}/soak/{name}.tensors"]
        if store == "s3":
            return [f"s3://{BUCKET}/soak/{name}.tensors", "--s3-endpoint", f"http://127.0.0.1:{port}"]
        return [f"redis://127.0.0.1:{port}/soak-{name}"]

    def direct_port(self, store):
        return {"http": self.servers.http, "s3": self.servers.s3, "redis": self.servers.redis}[store]

    def prepare(self):
        """Synthesizes the models, records their hashes and load byte counts, publishes them directly."""
        self.models = []
        os.makedirs(os.path.join(self.servers.www, "soak"), exist_ok=True)
        for i, mib in enumerate(self.a.sizes_mib):
            name = f"m{i}"
            path = os.path.join(self.work, name + ".tensors")
            self.must("synth", path, "--size-mib", str(mib), "--seed", str(i + 1))
            model = {"name": name, "path": path, "size": os.path.getsize(path),
                     "hash": self.must("hash", "--json", path),
                     "bytes": json.loads(self.must("load", "--json", path))["bytes"]}
            shutil.copy(path, os.path.join(self.servers.www, "soak", name + ".tensors"))
            for store in ("s3", "redis"):
                self.must("copy", path, *self.uri(store, self.direct_port(store), name))
            self.models.append(model)

    def check_load(self, mode, store, port, model):
        """One load through a proxy; returns (outcome, seconds): ok, failed (rc, message) or wrong."""
        src = self.uri(store, port, model["name"])
        if mode == "copy":
            out = os.path.join(self.work, "down.tensors")
            rc, _, err, secs = self.cli("copy", *self.limits, *src, out)
            wrong = rc == 0 and not filecmp.cmp(out, model["path"], shallow=False)
            if os.path.exists(out):
                os.remove(out)
        elif mode == "hash":
            rc, stdout, err, secs = self.cli("hash", "--json", *self.limits, *src)
            wrong = rc == 0 and stdout != model["hash"]
        else:
            rc, stdout, err, secs = self.cli("load", "--verify", "--json", *self.limits, *src)
            wrong = rc == 0 and json.loads(stdout)["bytes"] != model["bytes"]
        if rc != 0:
            return ("failed", f"exit {rc}: {err.decode(errors='replace').strip()[-400:]}"), secs
        return ("wrong" if wrong else "ok", ""), secs

    def run_loads(self, proxies):
        plan = [(BACKENDS[i % 3], self.a.rates[(i // 3) % len(self.a.rates)], MODES[(i // 9) % 3])
                for i in range(self.a.loads)]
        for n, (store, rate, mode) in enumerate(plan):
            model = self.rng.choice(self.models)
            (outcome, why), secs = self.check_load(mode, store, proxies[store, rate].port, model)
            s = self.stats["load", store, rate]
            s["attempted"] += 1
            s[outcome] += 1
            s["seconds"] += secs
            s["bytes"] += model["size"]
            if outcome != "ok":
                self.failures.append(f"load #{n} {mode} {store} rate {rate} {model['name']}: {outcome} {why}")
            if (n + 1) % 50 == 0:
                print(f"soak: {n + 1}/{len(plan)} loads, {len(self.failures)} failures", flush=True)

    def run_uploads(self, proxies):
        """Uploads through the proxies, each checked by a direct download (no proxy) compared to the file."""
        for i in range(self.a.uploads):
            for store in ("s3", "redis"):
                for rate in self.a.rates:
                    model = self.rng.choice(self.models)
                    name = f"up{i}-{int(rate * 1000)}"
                    rc, _, err, secs = self.cli("copy", *self.limits, model["path"], *self.uri(store, proxies[store, rate].port, name))
                    s = self.stats["upload", store, rate]
                    s["attempted"] += 1
                    s["seconds"] += secs
                    s["bytes"] += model["size"]
                    outcome = "failed"
                    if rc == 0:
                        out = os.path.join(self.work, "up.tensors")
                        rc2, _, err, _ = self.cli("copy", *self.uri(store, self.direct_port(store), name), out)
                        outcome = "ok" if rc2 == 0 and filecmp.cmp(out, model["path"], shallow=False) else "wrong"
                        if os.path.exists(out):
                            os.remove(out)
                    s[outcome] += 1
                    if outcome != "ok":
                        self.failures.append(f"upload {store} rate {rate} {name}: {outcome} exit {rc}: "
                                             f"{err.decode(errors='replace').strip()[-400:]}")

    def run_python(self, proxies):
        """py_resources.py in one process against the highest-rate proxies; None when no package."""
        a = self.a
        if a.py_loads <= 0:
            return {"skipped": "--py-loads 0"}
        if not os.path.exists(a.python) and not a.py_path:
            return {"skipped": f"no {a.python} (scripts/python_build.sh) and no --py-path"}
        rate = max(a.rates)
        sources = []
        for m in self.models:
            for store in BACKENDS:
                src = self.uri(store, proxies[store, rate].port, m["name"])
                sources.append({"uri": src[0], "s3_endpoint": src[-1], "hash_json": m["hash"].decode()})
        spec_path = os.path.join(self.work, "py_spec.json")
        with open(spec_path, "w") as f:
            json.dump({"loads": a.py_loads, "warmup": max(3, a.py_loads // 10), "sources": sources,
                       "s3": {"key": S3_ENV["AWS_ACCESS_KEY_ID"], "secret": S3_ENV["AWS_SECRET_ACCESS_KEY"]},
                       "timeouts": {"connect_timeout": 2.0, "first_byte_timeout": 2 * a.stall_timeout,
                                    "stall_timeout": a.stall_timeout, "give_up_after": a.give_up_after}}, f)
        env = dict(self.env)
        if a.py_path:
            env["PYTHONPATH"] = os.path.abspath(a.py_path)
        p = subprocess.run([a.python if os.path.exists(a.python) else sys.executable,
                            os.path.join(os.path.dirname(__file__), "py_resources.py"), spec_path],
                           env=env, capture_output=True, text=True, cwd=self.work)
        if p.returncode != 0:
            self.failures.append(f"py_resources.py exit {p.returncode}: {p.stderr[-600:]}")
            return {"error": p.stderr[-300:]}
        r = json.loads(p.stdout)
        r["rate"] = rate
        self.failures += [f"python load: {e}" for e in r["errors"]]
        if r["wrong"]:
            self.failures.append(f"python loads: {r['wrong']} delivered other bytes")
        return r

    def leftovers(self, proxy_set):
        deadline = time.monotonic() + 3 * self.a.stall_timeout + 5  # injected stalls end, closes are seen
        while time.monotonic() < deadline and any(p.open for p in proxy_set.proxies):
            time.sleep(0.1)
        left = {"proxy_connections_open": sum(p.open for p in proxy_set.proxies),
                "temp_files": sorted(os.listdir(self.tmp))}
        s3 = self.servers.s3_client()
        if s3 is not None:
            uploads = s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
            left["s3_multipart_uploads"] = [u["Key"] for u in uploads]
        return left


def report(soak, proxy_set, proxies, left, py, wall):
    a = soak.a
    rows, total = [], defaultdict(float)
    print(f"\n{'kind':7}{'store':7}{'rate':>6}{'tries':>7}{'failed':>7}{'wrong':>6}{'faults':>7}{'MB/s':>8}{'lost':>7}")
    for kind in ("load", "upload"):
        for store in BACKENDS:
            base_tput = None
            for rate in a.rates:
                s = soak.stats.get((kind, store, rate))
                if not s:
                    continue
                tput = s["bytes"] / s["seconds"] / 1e6 if s["seconds"] else 0.0
                base_tput = tput if base_tput is None else base_tput
                lost = 1 - tput / base_tput if base_tput else 0.0
                loads_faults = soak.faults_after_loads[store, rate]  # the proxies serve both phases
                faults = loads_faults if kind == "load" else sum(proxies[store, rate].faults.values()) - loads_faults
                print(f"{kind:7}{store:7}{rate:6.2f}{int(s['attempted']):7d}{int(s['failed']):7d}{int(s['wrong']):6d}"
                      f"{faults:7d}{tput:8.1f}{lost:7.1%}")
                rows.append({"kind": kind, "store": store, "rate": rate, **s, "faults": faults, "mb_per_s": tput, "lost": lost})
                for k in ("attempted", "failed", "wrong"):
                    total[kind, k] += s[k]
    faults = defaultdict(int)
    for p in proxy_set.proxies:
        for k, v in p.faults.items():
            faults[k] += v
    requests = sum(p.requests for p in proxy_set.proxies)
    conns = sum(p.opened for p in proxy_set.proxies)
    print(f"\nloads: {int(total['load', 'attempted'])} attempted, {int(total['load', 'failed'])} failed, "
          f"{int(total['load', 'wrong'])} wrong; uploads: {int(total['upload', 'attempted'])} attempted, "
          f"{int(total['upload', 'failed'])} failed, {int(total['upload', 'wrong'])} wrong")
    print(f"proxy: {conns} connections, {requests} requests/writes, faults injected {dict(faults)}")
    print(f"python (one process, rate {py.get('rate')}): {py}")
    print(f"leftovers: {left}   wall {wall:.0f} s")
    for f in soak.failures[:20]:
        print("FAIL", f)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "faults": faults, "requests": requests, "connections": conns,
                       "leftovers": left, "python": py, "failures": soak.failures, "wall_s": wall}, f, indent=1, default=str)
    clean = left["proxy_connections_open"] == 0 and not left["temp_files"] and not left.get("s3_multipart_uploads")
    return 0 if not soak.failures and clean else 1


def main():
    a = parse_args()
    soak = Soak(a)
    soak.servers.start()
    t0 = time.monotonic()
    proxy_set = ProxySet()
    try:
        soak.prepare()
        ports = {"http": soak.servers.http, "s3": soak.servers.s3, "redis": soak.servers.redis}
        proxies = {}
        for store in BACKENDS:
            for j, rate in enumerate(a.rates):
                kind = "redis" if store == "redis" else "http"
                proxies[store, rate] = proxy_set.add(kind, ports[store], rate, 3 * a.stall_timeout, a.seed * 100 + j)
        soak.run_loads(proxies)
        soak.faults_after_loads = {k: sum(p.faults.values()) for k, p in proxies.items()}
        soak.run_uploads(proxies)
        py = soak.run_python(proxies)
        left = soak.leftovers(proxy_set)
        return report(soak, proxy_set, proxies, left, py, time.monotonic() - t0)
    finally:
        proxy_set.stop()
        soak.servers.stop()


if __name__ == "__main__":
    sys.exit(main())

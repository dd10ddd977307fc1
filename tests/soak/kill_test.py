#!/usr/bin/env python3
# tests/soak/kill_test.py: SIGKILLs `tensorizer copy` at random points of writing to a local path, to S3
# (PutObject and multipart) and to Redis, then looks at what is visible: the target must hold the previous
# version or nothing (no file / object / keys) or the complete new one, never something half-written.
# Also lists what is left beside it (temporary files, dangling multipart uploads, stray Redis keys).
# usage: kill_test.py [--quick] [--trials N]   (exit 0 = nothing half-written visible, 77 = no server)
import argparse
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(__file__))
from servers import BUCKET, REPO, S3_ENV, Servers  # noqa: E402


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 20):
            h.update(b)
    return h.hexdigest()


class KillTest:
    def __init__(self, a):
        self.a, self.rng = a, random.Random(a.seed)
        self.work = os.path.join(a.workdir, "work")
        shutil.rmtree(self.work, ignore_errors=True)
        self.tmp = os.path.join(self.work, "tmp")
        self.out = os.path.join(self.work, "out")
        os.makedirs(self.tmp)
        os.makedirs(self.out)
        self.env = dict(os.environ, TMPDIR=self.tmp, **S3_ENV)
        self.servers = Servers(os.path.join(a.workdir, "servers"), a.port_base)
        self.results = defaultdict(Counter)
        self.problems = []

    def run(self, *args, check=True):
        p = subprocess.run([self.a.cli, *args], env=self.env, capture_output=True)
        if check and p.returncode != 0:
            sys.exit(f"kill_test: {' '.join(args)} failed: {p.stderr.decode(errors='replace')}")
        return p.returncode

    def target(self, kind, name):
        if kind == "local":
            return [os.path.join(self.out, name + ".tensors")]
        if kind == "s3":
            return [f"s3://{BUCKET}/kill/{name}.tensors", "--s3-endpoint", f"http://127.0.0.1:{self.servers.s3}"]
        return [f"redis://127.0.0.1:{self.servers.redis}/kill-{name}"]

    def visible(self, kind, name):
        """sha256 of what the target holds now (downloaded directly), or None when it holds nothing."""
        if kind == "local":
            path = self.target(kind, name)[0]
            return sha(path) if os.path.exists(path) else None
        if kind == "redis" and not self.redis_keys(name):
            return None
        down = os.path.join(self.work, "down.tensors")
        args = self.target(kind, name)
        p = subprocess.run([self.a.cli, "copy", args[0], down, *args[1:]], env=self.env, capture_output=True)
        if p.returncode != 0:
            err = p.stderr.decode(errors="replace")
            if "(not_found)" in err:
                return None
            return "unreadable: " + err.strip()[-300:]
        digest = sha(down)
        os.remove(down)
        return digest

    def redis_keys(self, name):
        out = subprocess.run(["redis-cli", "-p", str(self.servers.redis), "--scan", "--pattern", f"kill-{name}:*"],
                             capture_output=True, text=True, check=True).stdout
        return out.split()

    def leftovers(self, kind, name):
        left = [f for f in os.listdir(self.out) if ".tmp" in f] + os.listdir(self.tmp)
        if kind == "s3" and self.s3 is not None:
            uploads = self.s3.list_multipart_uploads(Bucket=BUCKET, Prefix=f"kill/{name}").get("Uploads", [])
            left += [f"multipart upload {u['UploadId'][:12]}.. of {u['Key']}" for u in uploads]
        if kind == "redis":  # staged keys of a cut-off upload (they expire after a day)
            out = subprocess.run(["redis-cli", "-p", str(self.servers.redis), "--scan", "--pattern", "tz-staging-*"],
                                 capture_output=True, text=True, check=True).stdout.split()
            if out:
                left.append("staged redis keys")
                subprocess.run(["redis-cli", "-p", str(self.servers.redis), "DEL", *out], capture_output=True, check=True)
        return left

    def trial(self, kind, model, previous, n):
        name = f"{kind}{n}"
        if previous is not None:
            self.run("copy", previous["path"], *self.target(kind, name))
        before = previous["sha"] if previous else None
        full = model["seconds"][kind]
        delay = self.rng.uniform(0, 1.2 * full)
        proc = subprocess.Popen([self.a.cli, "copy", model["path"], *self.target(kind, name)], env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        finished = proc.poll() is not None
        if not finished:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        now = self.visible(kind, name)
        if now is not None and now.startswith("unreadable") and "(ETag no longer matches)" in now:
            # RGW may complete a PutObject whose whole body it got before the kill while we read: the
            # reader saw the object change under it (and said so). Look again once it settled.
            self.results[f"{kind} {model['name']}"]["object changed while checked (server finished the PUT)"] += 1
            time.sleep(2)
            now = self.visible(kind, name)
        if now == model["sha"]:
            state = "new version"
        elif now is None:
            state = "nothing"
        elif now == before:
            state = "previous version"
        else:
            state = "HALF-WRITTEN"
            self.problems.append(f"{kind} {model['name']} killed at {delay:.2f}s of ~{full:.2f}s: {now}")
        key = f"{kind} {model['name']} {'over previous' if previous else 'fresh'}"
        self.results[key][("finished, " if finished else "killed, ") + state] += 1
        for left in self.leftovers(kind, name):
            what = ("dangling multipart upload" if left.startswith("multipart") else left if left.startswith("staged") else
                    "temp file beside the target" if ".tmp" in left else "entry left in TMPDIR")
            self.results[key]["left: " + what] += 1
        self.cleanup(kind, name)

    def cleanup(self, kind, name):
        for f in os.listdir(self.out) + os.listdir(self.tmp):
            p = os.path.join(self.out if os.path.exists(os.path.join(self.out, f)) else self.tmp, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        if kind == "redis" and (keys := self.redis_keys(name)):
            subprocess.run(["redis-cli", "-p", str(self.servers.redis), "DEL", *keys], capture_output=True, check=True)
        if kind == "s3" and self.s3 is not None:
            self.s3.delete_object(Bucket=BUCKET, Key=f"kill/{name}.tensors")
            for u in self.s3.list_multipart_uploads(Bucket=BUCKET, Prefix=f"kill/{name}").get("Uploads", []):
                self.s3.abort_multipart_upload(Bucket=BUCKET, Key=u["Key"], UploadId=u["UploadId"])

    def prepare(self):
        """Models (small: PutObject; big: multipart), each timed once per target for the kill points."""
        self.models = []
        for name, mib in (("small", 8), ("big", self.a.big_mib)):
            path = os.path.join(self.work, name + ".tensors")
            self.run("synth", path, "--size-mib", str(mib), "--seed", str(mib))
            model = {"name": name, "path": path, "sha": sha(path), "seconds": {}}
            for kind in self.a.kinds:
                t0 = time.monotonic()
                self.run("copy", path, *self.target(kind, "timing"))
                model["seconds"][kind] = time.monotonic() - t0
                self.cleanup(kind, "timing")
            self.models.append(model)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cli", default=os.path.join(REPO, "build", "bin", "tensorizer"))
    ap.add_argument("--quick", action="store_true", help="2 trials per case")
    ap.add_argument("--trials", type=int, default=8, help="trials per target, model and fresh/over-previous")
    ap.add_argument("--kinds", default="local,s3,redis")
    ap.add_argument("--big-mib", type=int, default=80, help="> 64 MiB: the S3 upload goes multipart")
    ap.add_argument("--workdir", default=os.path.join(REPO, "build", "soak-kill"))
    ap.add_argument("--port-base", type=int, default=17000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    a.kinds = a.kinds.split(",")
    if a.quick:
        a.trials = 2
    t = KillTest(a)
    need = [s for k, s in (("s3", "rgw"), ("redis", "redis")) if k in a.kinds]
    t.servers.start(need)
    try:
        t.s3 = t.servers.s3_client() if "s3" in a.kinds else None
        t.prepare()
        n = 0
        for kind in a.kinds:
            for model in t.models:
                other = t.models[0] if model is t.models[1] else t.models[1]
                for previous in (None, other):
                    for _ in range(a.trials):
                        t.trial(kind, model, previous, n)
                        n += 1
        for key, c in t.results.items():
            print(f"{key:32} " + ", ".join(f"{v} {k}" for k, v in sorted(c.items())))
        for p in t.problems:
            print("PROBLEM", p)
        return 1 if t.problems else 0
    finally:
        t.servers.stop()


if __name__ == "__main__":
    sys.exit(main())

# tests/soak/servers.py: starts/stops the test servers (nginx, redis-server, Ceph RGW) with
# scripts/servers/*.sh, as the CTest fixtures of tests/net.cmake do, and names their ports and the
# S3 credentials; shared by soak.py and kill_test.py.
import os
import subprocess
import sys

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = os.path.join(REPO, "scripts", "servers")
S3_ENV = {"AWS_ACCESS_KEY_ID": "TESTKEY", "AWS_SECRET_ACCESS_KEY": "TESTSECRET"}
BUCKET = "tz-test"


class Servers:
    """Ports follow scripts/servers/*.sh: HTTP base+80, Redis base+379, S3 base+480."""

    def __init__(self, workdir, base):
        self.workdir, self.base = workdir, base
        self.http, self.redis, self.s3 = base + 80, base + 379, base + 480
        self.www = os.path.join(workdir, "nginx", "www")
        self.started = []

    def start(self, names=("nginx", "redis", "rgw")):
        for name in names:
            rc = subprocess.call([os.path.join(SCRIPTS, name + ".sh"), "start", self.workdir, str(self.base)])
            if rc == 77:
                print(f"soak: {name} not installed: skipping", file=sys.stderr)
                sys.exit(77)
            if rc != 0:
                sys.exit(f"soak: could not start {name} (exit {rc})")
            self.started.append(name)

    def stop(self):
        for name in reversed(self.started):
            subprocess.call([os.path.join(SCRIPTS, name + ".sh"), "stop", self.workdir, str(self.base)])

    def s3_client(self):
        """boto3 client straight to RGW (no proxy), or None without boto3."""
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            return None
        return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.s3}", region_name="us-east-1",
                            aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}))


def process_resources(pid):
    """(RSS KiB, open fds, threads) of a live process, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    rss = int(status["VmRSS"].split()[0])
    threads = int(status["Threads"])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds, threads

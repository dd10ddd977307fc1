"""The real tensorizer (2.11.1) reads what our CLI published remotely: over HTTP from nginx, from the keys
our `copy` wrote to Redis (format/FORMAT.md §13), and from S3 (RGW) through its open_stream (boto3 presigning).

usage: check_remote_cross.py http|redis|s3 CLI
env: TZ_NET_WORKDIR, TZ_NET_PORT_BASE, TZ_NET_SCRIPTS (the servers of tests/net.cmake). Exit 77 = skipped.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tzcross  # noqa: E402

SERVER = {"http": "nginx", "redis": "redis", "s3": "rgw"}


def start_server(suite, top, base):
    """Starts the suite's server with its script (idempotent); exits 77 when it is not installed."""
    scripts = os.environ.get("TZ_NET_SCRIPTS", os.path.join(os.path.dirname(__file__), "../../scripts/servers"))
    rc = subprocess.run([os.path.join(scripts, SERVER[suite] + ".sh"), "start", top, str(base)]).returncode
    if rc == tzcross.SKIP_EXIT_CODE:
        print(f"skipped: {SERVER[suite]} is not installed")
        sys.exit(tzcross.SKIP_EXIT_CODE)
    if rc != 0:
        print(f"FAIL: could not start {SERVER[suite]}")
        sys.exit(1)


def our_hashes(failures, cli, path):
    """name -> sha256 of each tensor as our CLI computes it from the local file."""
    doc = tzcross.cli_json(failures, cli, "hash", "--json", path)
    return {tzcross.name_key(t["name"]): t["sha256"] for t in (doc or {}).get("tensors", [])}


def check_deserializer(failures, what, source, expected, **kwargs):
    """Loads `source` with TensorDeserializer(verify_hash=True) and compares every tensor's sha256."""
    from tensorizer import TensorDeserializer

    try:
        with TensorDeserializer(source, device="cpu", verify_hash=True, **kwargs) as d:
            got = {tzcross.name_key(name): tzcross.sha256_hex(tzcross.tensor_bytes(t)) for name, t in d.items()}
    except Exception as error:  # any failure of the peer is a failed check, reported with its message
        failures.check(False, f"{what}: TensorDeserializer failed: {type(error).__name__}: {error}")
        return
    failures.check(set(got) == set(expected), f"{what}: tensor names differ: {sorted(set(got) ^ set(expected))[:5]}")
    bad = [k for k in expected if got.get(k) != expected[k]]
    failures.check(not bad, f"{what}: {len(bad)} tensors differ, e.g. {bad[:3]}")
    print(f"{what}: {len(got)} tensors read and verified by tensorizer")


def check_s3(failures, cli, model, expected, base):
    """Our multipart/PutObject upload, read back through tensorizer's open_stream (boto3 presigned URL)."""
    try:
        import boto3  # noqa: F401
    except ImportError:
        print("S3 part skipped: boto3 is not installed (tensorizer presigns S3 URLs with it)")
        return False
    from tensorizer.stream_io import open_stream

    endpoint = f"http://127.0.0.1:{base + 480}"
    env = dict(os.environ, AWS_ACCESS_KEY_ID="TESTKEY", AWS_SECRET_ACCESS_KEY="TESTSECRET")
    url = "s3://tz-test/cross/model.tensors"
    up = subprocess.run([cli, "copy", "--s3-endpoint", endpoint, model, url], env=env, capture_output=True, text=True)
    if not failures.check(up.returncode == 0, f"copy to {url} failed: {up.stderr.strip()}"):
        return True
    stream = open_stream(url, s3_endpoint=endpoint, s3_access_key_id="TESTKEY", s3_secret_access_key="TESTSECRET",
                         force_http=True)
    check_deserializer(failures, f"S3 {url}", stream, expected)
    return True


def main():
    suite, cli = sys.argv[1], sys.argv[2]
    tzcross.import_peers()
    top, base = os.environ["TZ_NET_WORKDIR"], int(os.environ["TZ_NET_PORT_BASE"])
    start_server(suite, top, base)
    work = os.path.join(top, f"cli-cross-{suite}")
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "model.tensors")
    failures = tzcross.Failures()
    # synth names are plain strings: tensorizer's inline Redis commands break on structured names (§13).
    synth = tzcross.run_cli(cli, "synth", model, "--size-mib", "12", "--seed", "5")
    if not failures.check(synth.returncode == 0, f"synth failed: {synth.stderr}"):
        failures.finish("check_remote_cross")
    expected = our_hashes(failures, cli, model)
    failures.check(len(expected) > 10, f"our hash --json listed {len(expected)} tensors")
    if suite == "http":
        www = os.path.join(top, "nginx", "www", "cli-cross")
        os.makedirs(www, exist_ok=True)
        cp = tzcross.run_cli(cli, "copy", model, os.path.join(www, "model.tensors"))
        failures.check(cp.returncode == 0, f"copy into nginx's root failed: {cp.stderr}")
        check_deserializer(failures, "HTTP", f"http://127.0.0.1:{base + 80}/cli-cross/model.tensors", expected)
    elif suite == "redis":
        url = f"redis://127.0.0.1:{base + 379}/cli-cross"
        up = tzcross.run_cli(cli, "copy", model, url)
        if failures.check(up.returncode == 0, f"copy to {url} failed: {up.stderr}"):
            check_deserializer(failures, f"Redis {url}", url, expected)
    elif not check_s3(failures, cli, model, expected, base):
        sys.exit(tzcross.SKIP_EXIT_CODE)
    failures.finish(f"check_remote_cross {suite}")


if __name__ == "__main__":
    main()

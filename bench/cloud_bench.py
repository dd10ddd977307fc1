# The Python half of bench/cloud_bench.sh (issue 32): runs each profile's loaders in fresh processes,
# checks what they loaded against the file, and prints the tables. The shell half owns the servers and
# the shaping proxies; this file never starts either.
#
# Subcommands:
#   pyload SOURCE [--s3-endpoint URL] [--digest OUT]   one Python load, run by the interpreter under test
#       (build/venv/bin/python: ours; python3: tensorizer 2.11.1): TensorDeserializer(open_stream(...),
#       device="cpu") at its defaults; prints "LOAD <seconds> <tensor bytes>". --digest writes
#       {tensor name: SHA-256 of its data bytes} to OUT, the same digest `tensorizer hash --json` prints.
#   reference FILE OUT --cli CLI [--python PY]   the digests everything is compared with: the file's SHA-256,
#       the CLI's per-tensor hashes and, with PY, ours loading the local file (which must agree with them).
#   profile ...   one profile: a checked load by each loader, then REPEAT rounds of all of them.
#   table RESULTS [--json FILE]   medians, ratios and peak memory per profile.
#   chart LINES OUT   the JSON lines of `table --json` as a tz-bench/1 report (bench/README.md) for
#       bench/charts.py: a panel per profile and protocol, wall GB/s runs, curl rows as the references.
#
# Peak memory is ru_maxrss of the reaped child (os.wait4): the number /usr/bin/time -f %M prints, without
# one more process inside every wall time. For N parallel curls it is the largest single curl.
import argparse
import hashlib
import json
import re
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

S3_KEY, S3_SECRET = "TESTKEY", "TESTSECRET"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # bench_json (chart), python_load_worker (pre-touch): bench/ is not a package


def die(msg):
    sys.exit(f"cloud_bench: {msg}")


# ---- pyload: runs inside the interpreter under test --------------------------------------------------

def pyload(args):
    from python_load_worker import pretouch
    import torch  # noqa: F401 (imported before the clock, as any program using tensorizer has)
    from tensorizer import TensorDeserializer
    from tensorizer.stream_io import open_stream

    kwargs = {}
    if args.source.startswith("s3://"):
        # An explicit http:// endpoint needs force_http, in 2.11.1 and in ours alike (else: ValueError).
        kwargs = dict(s3_access_key_id=S3_KEY, s3_secret_access_key=S3_SECRET, s3_endpoint=args.s3_endpoint,
                      force_http=True)
    # This VM's memory freed a moment ago costs ~1.7 s/GiB to touch again once the host has taken it
    # back, about 2 s after the free, which is how long Python and torch take to start: so a Python
    # loader pre-touches here, after its imports, and the driver takes this time out of its wall.
    t_touch = time.perf_counter()
    pretouch(args.pretouch)
    print(f"PRETOUCH {time.perf_counter() - t_touch:.6f}", flush=True)
    t0 = time.perf_counter()
    d = TensorDeserializer(open_stream(args.source, "rb", **kwargs) if "://" in args.source else args.source,
                           device="cpu")
    seconds = time.perf_counter() - t0
    nbytes = sum(t.nbytes for t in d.values())
    print(f"LOAD {seconds:.6f} {nbytes}", flush=True)
    if args.digest:
        with open(args.digest, "w") as f:
            json.dump({name: tensor_sha256(t) for name, t in d.items()}, f)


def tensor_sha256(t):
    import torch

    # The data bytes in C order, whatever the dtype (numpy has no bfloat16: go through uint8).
    return hashlib.sha256(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()).hexdigest()


# ---- measuring fresh processes ------------------------------------------------------------------------

def spawn(argv, env, out):
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def reap(p, limit_s):
    """Waits for p (killing it after limit_s); returns (exit code, max RSS KiB)."""
    timer = threading.Timer(limit_s, p.kill)
    timer.start()
    try:
        _, status, usage = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    return p.returncode, usage.ru_maxrss


def run(argv, env=None, limit_s=900):
    """Runs one fresh process; returns (output, wall seconds, max RSS KiB). Dies on failure."""
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        rc, rss = reap(spawn(argv, env, out), limit_s)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read()
    if rc != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {rc}:\n{text[-2000:]}")
    return text, wall, rss


def field(text, key):
    for line in text.splitlines():
        if line.startswith(key + " "):
            return line[len(key) + 1:].split()
    raise RuntimeError(f"no '{key}' line in:\n{text[-2000:]}")


class Bench:
    def __init__(self, a):
        self.a, self.size = a, a.bytes
        self.pretouch_bytes = a.bytes * 5 // 4
        self.s3_url = f"{a.s3_endpoint}/{a.s3_uri[len('s3://'):]}"  # path style, for curl

    # Each loader returns (own GB/s, wall GB/s, max RSS KiB); wall GB/s = file bytes / process wall time.
    def curl(self, url, n, s3):
        part = -(-self.size // n)
        sign = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{S3_KEY}:{S3_SECRET}",
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"] if s3 else []
        outs, procs = [], []
        t0 = time.perf_counter()
        for a in range(0, self.size, part):
            outs.append(tempfile.TemporaryFile("w+"))
            procs.append(spawn(["curl", "-sf", "-o", "/dev/null", "-w", "%{size_download} %{time_total}\n",
                                "-r", f"{a}-{min(a + part, self.size) - 1}", *sign, url], None, outs[-1]))
        reaped = [reap(p, 900) for p in procs]
        wall = time.perf_counter() - t0
        got, own = 0, 0.0
        for (rc, _), out in zip(reaped, outs):
            out.seek(0)
            text = out.read()
            out.close()
            if rc != 0:
                raise RuntimeError(f"curl {url} exited {rc}: {text}")
            b, s = text.split()
            got, own = got + int(b), max(own, float(s))
        if got != self.size:
            raise RuntimeError(f"curl got {got} of {self.size} bytes from {url}")
        # own: curl's own timing, the slowest range's time_total (process start-up excluded).
        return self.size / own / 1e9, self.size / wall / 1e9, max(r for _, r in reaped)

    def cli(self, *args):
        text, wall, rss = run([self.a.cli, "load", *args, "--json"])
        out = json.loads(text[text.index("{"):])
        return out["gb_per_s"], self.size / wall / 1e9, rss

    def py(self, python, source, digest=None):
        extra = ["--s3-endpoint", self.a.s3_endpoint] if source.startswith("s3://") else []
        text, wall, rss = run([python, os.path.join(HERE, "cloud_bench.py"), "pyload", source, *extra,
                               "--pretouch", str(0 if digest else self.pretouch_bytes),
                               *(["--digest", digest] if digest else [])])
        seconds, nbytes = field(text, "LOAD")
        wall -= float(field(text, "PRETOUCH")[0])  # see pyload
        return int(nbytes) / float(seconds) / 1e9, self.size / wall / 1e9, rss

    def runai_env(self):
        return dict(os.environ, AWS_ENDPOINT_URL=self.a.s3_endpoint, RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0",
                    AWS_EC2_METADATA_DISABLED="true")

    def runai(self, concurrency=None, digest=False):
        text, wall, rss = run([self.a.runai_python, os.path.join(HERE, "peers", "runai_peer.py"), self.a.s3_uri,
                               str(self.size), *(["--concurrency", str(concurrency)] if concurrency else []),
                               "--pretouch", str(0 if digest else self.pretouch_bytes),
                               *(["--digest"] if digest else [])], env=self.runai_env())
        if digest:
            return field(text, "SHA256")[0]
        wall -= float(field(text, "PRETOUCH")[0])  # pre-touched after its imports, as pyload
        return float(field(text, "GBPS")[0]), self.size / wall / 1e9, rss


# ---- one profile ----------------------------------------------------------------------------------------

def check_tensors(what, path, reference):
    with open(path) as f:
        got = json.load(f)
    bad = sorted(k for k in set(got) | set(reference) if got.get(k) != reference.get(k))
    if bad:
        die(f"DIGEST MISMATCH: {what} loaded {len(bad)} tensor(s) unlike the file, e.g. {bad[:3]}")
    print(f"  digest ok: {what} ({len(got)} tensors match the file)")


def profile(a):
    b, p, http, s3 = Bench(a), a.profile, a.http, a.s3_uri
    with open(a.reference) as f:
        ref = json.load(f)
    ours_py = a.venv_python
    peer_py = None if a.smoke else a.peer_python
    runai_py = None if a.smoke else a.runai_python
    s3e = ["--s3-endpoint", a.s3_endpoint]

    # The checked loads: fresh processes, untimed, so that no hashing lands inside a timed wall.
    print(f"{p}: checking what each loader loads")
    try:
        run([a.cli, "load", "--verify", http])
        run([a.cli, "load", "--verify", *s3e, s3])
    except RuntimeError as e:
        die(f"verified load through the {p} proxy failed: {e}")
    print("  verify ok: tensorizer load --verify (http, s3)")
    with tempfile.TemporaryDirectory() as tmp:
        digest = os.path.join(tmp, "digest.json")
        try:
            for src in (http, s3) if ours_py else ():
                b.py(ours_py, src, digest)
                check_tensors(f"ours python {src.split(':')[0]}", digest, ref["tensors"])
            if peer_py:
                b.py(peer_py, http, digest)
                check_tensors("tensorizer 2.11.1 http", digest, ref["tensors"])
        except RuntimeError as e:
            die(f"checked Python load through the {p} proxy failed: {e}")
        if peer_py:
            try:
                b.py(peer_py, s3, digest)
            except RuntimeError as e:  # a peer's limitation, not ours: the row is left out, loudly
                print(f"  tensorizer 2.11.1 s3: FAILED, row skipped: {str(e).strip().splitlines()[-1]}")
                a.peer_s3 = False
            else:
                check_tensors("tensorizer 2.11.1 s3", digest, ref["tensors"])
    if runai_py:
        try:
            sha = b.runai(digest=True)
        except RuntimeError as e:
            print(f"  runai: FAILED, rows skipped: {e}")
            runai_py = None
        else:
            if sha != ref["file_sha256"]:
                die(f"DIGEST MISMATCH: runai streamed sha256 {sha}, the file is {ref['file_sha256']}")
            print("  digest ok: runai s3 (sha256 of the object = sha256sum of the file)")

    loaders = []  # (name, family, function)
    for n in a.curl_n:
        loaders += [(f"curl {n} ranges http", "http", lambda n=n: b.curl(http, n, False)),
                    (f"curl {n} ranges s3", "s3", lambda n=n: b.curl(b.s3_url, n, True))]
    if a.direct:
        n = max(a.curl_n)
        loaders.append((f"curl {n} ranges http, direct (no proxy)", "ceiling", lambda: b.curl(a.direct, n, False)))
    loaders += [("ours cli http", "http", lambda: b.cli(http)), ("ours cli s3", "s3", lambda: b.cli(*s3e, s3))]
    if ours_py:
        loaders += [("ours python http", "http", lambda: b.py(ours_py, http)),
                    ("ours python s3", "s3", lambda: b.py(ours_py, s3))]
    if not a.smoke:
        for r in a.knobs:
            loaders += [(f"ours cli http --readers {r} (knob)", "http", lambda r=r: b.cli(http, "--readers", str(r))),
                        (f"ours cli s3 --readers {r} (knob)", "s3", lambda r=r: b.cli(*s3e, s3, "--readers", str(r)))]
    if peer_py:
        loaders.append(("tensorizer 2.11.1 http", "http", lambda: b.py(peer_py, http)))
        if a.peer_s3:
            loaders.append(("tensorizer 2.11.1 s3", "s3", lambda: b.py(peer_py, s3)))
    if runai_py:
        loaders.append(("runai s3 defaults", "s3", lambda: b.runai()))
        for c in a.runai_sweep:
            loaders.append((f"runai s3 concurrency={c}", "s3", lambda c=c: b.runai(c)))

    if a.only:
        loaders = [x for x in loaders if re.search(a.only, x[0])]
        print(f"{p}: only {', '.join(x[0] for x in loaders)} (--only {a.only!r})")
    with open(a.results, "a") as out:
        for round_ in range(1, a.repeat + 1):
            for name, family, fn in loaders:
                # Every loader, curl included, starts on memory the host backs (docs/benchmarks.md, "Fresh
                # memory on these VMs"): else whichever runs first after a free pays ~1.7 s/GiB for it.
                # In a child of its own: the driver's own peak would show in its children's ru_maxrss.
                # Python loaders touch theirs after their imports (pyload), which take about as long as
                # the host takes to reclaim memory freed here.
                if not name.startswith(("ours python", "tensorizer 2.11.1", "runai")):
                    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {HERE!r}); "
                                    f"from python_load_worker import pretouch; pretouch({b.pretouch_bytes})"],
                                   check=True)
                try:
                    own, wall, rss = fn()
                except RuntimeError as e:
                    die(f"{name} failed ({p}, round {round_}): {e}")
                out.write(json.dumps(dict(profile=p, loader=name, family=family, gbps=own, wall_gbps=wall,
                                          rss_kib=rss)) + "\n")
                out.flush()
            print(f"{p}: round {round_}/{a.repeat} done")


# ---- the tables -------------------------------------------------------------------------------------------

def ratio(x):
    return "-" if x is None else f"{x:.2f}"


def table(a):
    rows = {}
    for line in open(a.results):
        r = json.loads(line)
        rows.setdefault(r["profile"], {}).setdefault(r["loader"], []).append(r)
    lines = []
    for p, loaders in rows.items():
        med = {k: dict(family=v[0]["family"], own=statistics.median(x["gbps"] for x in v),
                       wall=statistics.median(x["wall_gbps"] for x in v),
                       rss=statistics.median(x["rss_kib"] for x in v) / 1024, runs=v) for k, v in loaders.items()}
        best = {}
        for fam in ("http", "s3"):
            curls = [k for k, m in med.items() if k.startswith("curl") and m["family"] == fam]
            if curls:
                best[fam] = max(curls, key=lambda k: med[k]["wall"])
        # Run:ai's sweep: the table keeps its best concurrency; every point is listed under the table.
        sweep = {k: m for k, m in med.items() if k.startswith("runai s3 concurrency=")}
        best_sweep = max(sweep, key=lambda k: sweep[k]["wall"]) if sweep else None
        n = len(next(iter(loaders.values())))
        print(f"\nprofile {p}: {a.bytes / 2**20:.1f} MiB file, median of {n} fresh processes each. wall GB/s = file "
              f"bytes / whole process time (primary: what a user waits for); GB/s = the tool's own timing.\n"
              f"ratios against the best curl row of the same protocol: http '{best.get('http')}', "
              f"s3 '{best.get('s3')}'")
        print(f"{'loader':42} {'wall GB/s':>9} {'wall ratio':>10} {'GB/s':>7} {'ratio':>6} {'peak RSS MiB':>12}")
        for k, m in med.items():
            ref = best.get(m["family"])
            wr = m["wall"] / med[ref]["wall"] if ref else None  # None: the ceiling row, no reference
            r = m["own"] / med[ref]["own"] if ref else None
            if k not in sweep or k == best_sweep:
                label = f"{k} (best of sweep)" if k == best_sweep else k
                print(f"{label:42} {m['wall']:9.3f} {ratio(wr):>10} {m['own']:7.3f} {ratio(r):>6} {m['rss']:12.0f}")
            lines.append(dict(profile=p, loader=k, family=m["family"], size_bytes=a.bytes, reference=ref,
                              runs_gbps=[x["gbps"] for x in m["runs"]], median_gbps=m["own"], ratio=r,
                              wall_runs_gbps=[x["wall_gbps"] for x in m["runs"]], median_wall_gbps=m["wall"],
                              wall_ratio=wr, runs_rss_kib=[x["rss_kib"] for x in m["runs"]],
                              median_peak_rss_mib=m["rss"]))
        if sweep:
            points = ", ".join(f"{k.split('=')[1]}: {m['wall']:.3f}" for k, m in sweep.items())
            print(f"runai sweep (wall GB/s): {points}; best concurrency={best_sweep.split('=')[1]}")
        ceiling = [k for k, m in med.items() if m["family"] == "ceiling"]
        if ceiling:
            direct = med[ceiling[0]]["own"]
            via = med[ceiling[0].split(",")[0]]["own"]
            print(f"proxy ceiling: {ceiling[0].split(',')[0]} through the loopback proxy {via:.3f} GB/s, "
                  f"direct {direct:.3f} GB/s ({via / direct:.2f}x of direct)")
            lines.append({"ceiling": {"via_proxy_gbps": via, "direct_gbps": direct, "ratio": via / direct}})
    if a.json:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)


def reference(a):
    h = hashlib.sha256()
    with open(a.file, "rb") as f:
        while chunk := f.read(16 << 20):
            h.update(chunk)
    text, _, _ = run([a.cli, "hash", a.file, "--json"])
    tensors = {t["name"]: t["sha256"] for t in json.loads(text[text.index("{"):])["tensors"]}
    ref = dict(file_sha256=h.hexdigest(), tensors=tensors)
    with open(a.out, "w") as f:
        json.dump(ref, f)
    if a.python:  # ours from the local file must agree with the CLI, or every Python comparison is moot
        run([a.python, os.path.join(HERE, "cloud_bench.py"), "pyload", a.file, "--digest", a.out + ".py"])
        check_tensors("ours python, local file, against `tensorizer hash`", a.out + ".py", tensors)


def chart(a):
    import bench_json

    rows = [json.loads(line) for line in open(a.lines)]
    results, size = [], 0
    for r in rows:
        if "profile" not in r or r.get("family") not in ("http", "s3"):
            continue  # the ceiling: printed in the table, not a panel of its own
        if r["loader"].startswith("runai s3 concurrency=") and r["loader"] != best_runai(rows, r["profile"]):
            continue
        size = r["size_bytes"]
        group = f"{r['profile']}, {r['family'].upper()}"
        is_ref = r["loader"].startswith("curl")
        results.append(bench_json.entry(group, r["loader"], r["wall_runs_gbps"], is_reference=is_ref,
                                        reference=None if is_ref else r["reference"], median=r["median_wall_gbps"]))
    bench_json.write_report(a.out, "cloud_bench", size, results)


def best_runai(rows, profile):
    sweep = [r for r in rows if r.get("profile") == profile and r["loader"].startswith("runai s3 concurrency=")]
    return max(sweep, key=lambda r: r["median_wall_gbps"])["loader"] if sweep else None


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("pyload")
    s.add_argument("source"), s.add_argument("--s3-endpoint"), s.add_argument("--digest")
    s.add_argument("--pretouch", type=int, default=0, help="bytes to touch and free after the imports")
    s = sub.add_parser("reference")
    s.add_argument("file"), s.add_argument("out"), s.add_argument("--cli", required=True), s.add_argument("--python")
    s = sub.add_parser("profile")
    for opt in ("--profile", "--results", "--reference", "--cli", "--http", "--s3-endpoint", "--s3-uri"):
        s.add_argument(opt, required=True)
    s.add_argument("--bytes", type=int, required=True)
    s.add_argument("--repeat", type=int, default=3)
    s.add_argument("--direct", help="the same file straight from nginx: the proxy's ceiling row")
    s.add_argument("--venv-python", help="ours (build/venv/bin/python); left out: no Python rows")
    s.add_argument("--peer-python", help="an interpreter with tensorizer 2.11.1; left out: no 2.11.1 rows")
    s.add_argument("--runai-python", help="the Run:ai 0.17 venv's python; left out: no Run:ai rows")
    s.add_argument("--curl-n", type=lambda v: [int(x) for x in v.split(",")], default=[8, 32, 64])
    s.add_argument("--runai-sweep", type=lambda v: [int(x) for x in v.split(",")], default=[16, 32, 64])
    s.add_argument("--smoke", action="store_true", help="no 2.11.1, no Run:ai, no --readers knob rows")
    s.add_argument("--knobs", type=lambda v: [int(x) for x in v.split(",")], default=[16, 32],
                   help="the --readers values of the knob rows")
    s.add_argument("--only", help="a regular expression: time only the loaders whose names match (checks still run)")
    s = sub.add_parser("table")
    s.add_argument("results"), s.add_argument("--bytes", type=int, required=True), s.add_argument("--json")
    s = sub.add_parser("chart")
    s.add_argument("lines"), s.add_argument("out")
    a = ap.parse_args()
    if a.cmd == "profile":
        a.peer_s3 = True  # cleared when 2.11.1 cannot read this S3 endpoint
    {"pyload": pyload, "reference": reference, "profile": profile, "table": table, "chart": chart}[a.cmd](a)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# tests/soak/py_resources.py: many loads in ONE long-lived process with our Python package
# (stream_io.open_stream + TensorDeserializer), for resource growth under faults: RSS, open fds and
# threads after a warm-up and at the end; each load's tensors are compared (SHA-256 of their bytes)
# with `tensorizer hash --json` of the local file. Run by soak.py against its fault proxies.
# usage: py_resources.py SPEC.json   (SPEC: loads, warmup, timeouts, s3 {key, secret}, sources
#        [{uri, s3_endpoint?, hash_json}]); prints one JSON object on stdout.
import gc
import hashlib
import json
import sys
import time

import torch
from tensorizer import TensorDeserializer, stream_io

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from servers import process_resources  # noqa: E402


def load_once(src, spec):
    kwargs = {"timeouts": spec["timeouts"]}
    if src["uri"].startswith("s3://"):
        kwargs.update(s3_access_key_id=spec["s3"]["key"], s3_secret_access_key=spec["s3"]["secret"],
                      s3_endpoint=src["s3_endpoint"], force_http=True)
    want = {t["name"]: t["sha256"] for t in json.loads(src["hash_json"])["tensors"]}
    with stream_io.open_stream(src["uri"], "rb", **kwargs) as f:
        with TensorDeserializer(f, verify_hash=True) as d:
            got = {}
            for name, t in d.items():
                raw = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                got[name] = hashlib.sha256(raw).hexdigest()
    return got == want, sum(1 for _ in want)


def main():
    spec = json.load(open(sys.argv[1]))
    counts = {"attempted": 0, "ok": 0, "failed": 0, "wrong": 0}
    errors, before, samples = [], None, []
    t0 = time.monotonic()
    for i in range(spec["loads"]):
        if i == spec["warmup"]:
            gc.collect()
            before = process_resources("self")
        if i >= spec["warmup"] and (i - spec["warmup"]) % max(1, (spec["loads"] - spec["warmup"]) // 5) == 0:
            samples.append((i, process_resources("self")[0]))  # RSS KiB along the way: a trend, not two points
        src = spec["sources"][i % len(spec["sources"])]
        counts["attempted"] += 1
        try:
            ok, _ = load_once(src, spec)
            counts["ok" if ok else "wrong"] += 1
        except Exception as e:  # a load that failed after its retries: counted and reported
            counts["failed"] += 1
            errors.append(f"{src['uri']}: {type(e).__name__}: {str(e)[-300:]}")
    gc.collect()
    time.sleep(0.5)
    after = process_resources("self")
    print(json.dumps({**counts, "seconds": time.monotonic() - t0, "warmup": spec["warmup"],
                      "before": dict(zip(("rss_kib", "fds", "threads"), before)),
                      "after": dict(zip(("rss_kib", "fds", "threads"), after)), "rss_kib_by_load": samples, "errors": errors[:10]}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The worker side of bench/python_load_bench.py: one peer's loads, timed inside a process of the
peer's own interpreter (ours from build/venv, the real tensorizer 2.11.1 from the system one). The
driver runs it as `python_load_worker.py --worker KIND ...`; it prints one line, "RESULT <json>".
It imports only what its peer needs.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sys
import time


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


if __name__ == "__main__":
    worker_main(sys.argv[1:])

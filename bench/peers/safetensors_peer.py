# Peer benchmark: safetensors loading the same tensors (FILE converted once to FILE.safetensors
# through the real tensorizer); prints GB/s of load_file and safe_open, and "RESULT <best>".
# safetensors maps the file lazily, so each tensor is cloned: the bytes are really in memory.
import argparse
import gc
import os
import statistics
import time

from safetensors import safe_open
from safetensors.torch import load_file, save_file


def convert(tensors_path, st_path):
    from tensorizer import TensorDeserializer
    d = TensorDeserializer(tensors_path, device="cpu")
    save_file({k: v.contiguous() for k, v in d.items()}, st_path)
    d.close()


def with_load_file(path):
    t0 = time.perf_counter()
    ts = {k: v.clone() for k, v in load_file(path, device="cpu").items()}
    nbytes = sum(t.nbytes for t in ts.values())
    return nbytes / (time.perf_counter() - t0) / 1e9


def with_safe_open(path):
    t0 = time.perf_counter()
    nbytes = 0
    keep = []
    with safe_open(path, framework="pt", device="cpu") as f:
        for k in f.keys():
            t = f.get_tensor(k).clone()
            nbytes += t.nbytes
            keep.append(t)
    return nbytes / (time.perf_counter() - t0) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    st_path = args.file + ".safetensors"
    if not os.path.exists(st_path):
        convert(args.file, st_path)
    best, best_runs = 0.0, []
    for name, fn in (("load_file", with_load_file), ("safe_open+get_tensor", with_safe_open)):
        runs = []
        for _ in range(args.runs):
            runs.append(fn(st_path))
            gc.collect()
        med = statistics.median(runs)
        print(f"safetensors {name}: median {med:.2f} GB/s (runs {', '.join(f'{r:.2f}' for r in runs)})")
        if med >= best:
            best, best_runs = med, runs
    print(f"RESULT {best:.3f}")
    print("RESULT_RUNS " + " ".join(f"{r:.4f}" for r in best_runs))  # every run of the best (--json)


if __name__ == "__main__":
    main()

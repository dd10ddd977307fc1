# Peer for remote_load_bench: the real tensorizer (PyPI) loading an http(s) URL to CPU with
# TensorDeserializer(url, device="cpu", num_readers=k) for k = 1, 2, 4, 8; prints the median GB/s
# (tensor bytes / wall seconds, construction included) per k and "RESULT <best median GB/s>".
import argparse
import gc
import statistics
import time

from tensorizer import TensorDeserializer


def load_once(url, readers):
    start = time.perf_counter()
    d = TensorDeserializer(url, device="cpu", num_readers=readers)
    nbytes = sum(t.nbytes for t in d.values())
    seconds = time.perf_counter() - start
    d.close()
    del d
    gc.collect()
    return nbytes / seconds / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    best = 0.0
    for readers in (1, 2, 4, 8):
        runs = [load_once(args.url, readers) for _ in range(args.runs)]
        med = statistics.median(runs)
        print(f"tensorizer num_readers={readers}: median {med:.2f} GB/s (runs {', '.join(f'{r:.2f}' for r in runs)})",
              flush=True)
        best = max(best, med)
    print(f"RESULT {best:.3f}")


if __name__ == "__main__":
    main()

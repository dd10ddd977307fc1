# Peer benchmark: the real tensorizer (PyPI) loading FILE or URL (http(s)://, s3://, redis://) to CPU;
# prints GB/s per num_readers and "RESULT <best median GB/s>" for load_bench --peers and
# remote_load_bench --peer.
import argparse
import gc
import statistics
import time

from tensorizer import TensorDeserializer


def load_once(path, readers):
    t0 = time.perf_counter()
    d = TensorDeserializer(path, device="cpu", num_readers=readers)
    nbytes = sum(t.nbytes for t in d.values())
    seconds = time.perf_counter() - t0
    d.close()
    del d
    gc.collect()
    return nbytes / seconds / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file", help="a path or a URL tensorizer can open")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--readers", default="1,2,4", help="comma-separated num_readers values to try")
    args = ap.parse_args()
    best = 0.0
    for readers in (int(r) for r in args.readers.split(",")):
        runs = [load_once(args.file, readers) for _ in range(args.runs)]
        med = statistics.median(runs)
        print(f"tensorizer num_readers={readers}: median {med:.2f} GB/s (runs {', '.join(f'{r:.2f}' for r in runs)})",
              flush=True)
        best = max(best, med)
    print(f"RESULT {best:.3f}")


if __name__ == "__main__":
    main()

# Peer benchmark: the real tensorizer (PyPI) loading FILE or URL (http(s)://, s3://, redis://) to CPU;
# prints GB/s per num_readers and "RESULT <best median GB/s>" for remote_load_bench --peer.
#
# Every timed load runs in a fresh process (this script re-invoked with --one), after an untimed
# lazy load of one tensor (imports, torch start-up) and, for local files, after pre-touching memory
# (see pretouch() in bench/python_load_bench.py). Several loads in one process would measure
# recycled memory: glibc keeps freed chunks below its mmap threshold (every tensor of a typical
# model) and hands them to the next load without a single page fault.
import argparse
import gc
import os
import statistics
import subprocess
import sys
import time


def load_once(path, readers, pretouch_bytes):
    from tensorizer import TensorDeserializer

    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:  # untimed warm-up
        next(iter(d.values()), None)
    gc.collect()
    if pretouch_bytes:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        from python_load_bench import pretouch

        pretouch(pretouch_bytes)
    t0 = time.perf_counter()
    d = TensorDeserializer(path, device="cpu", num_readers=readers)
    nbytes = sum(t.nbytes for t in d.values())
    seconds = time.perf_counter() - t0
    d.close()
    return nbytes / seconds / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file", help="a path or a URL tensorizer can open")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--readers", default="1,2,4", help="comma-separated num_readers values to try")
    ap.add_argument("--one", action="store_true", help="internal: one timed load in this process")
    args = ap.parse_args()
    pretouch_bytes = os.path.getsize(args.file) * 5 // 4 if os.path.isfile(args.file) else 0
    if args.one:
        print(f"GBPS {load_once(args.file, int(args.readers), pretouch_bytes)}")
        return
    best, best_runs = 0.0, []
    for readers in (int(r) for r in args.readers.split(",")):
        runs = []
        for _ in range(args.runs):
            out = subprocess.run([sys.executable, os.path.abspath(__file__), args.file, "--one", "--readers",
                                  str(readers)], capture_output=True, text=True, check=True)
            runs.append(float(out.stdout.split("GBPS ")[1]))
        med = statistics.median(runs)
        print(f"tensorizer num_readers={readers}: median {med:.2f} GB/s (runs {', '.join(f'{r:.2f}' for r in runs)})",
              flush=True)
        if med >= best:
            best, best_runs = med, runs
    print(f"RESULT {best:.3f}")
    print("RESULT_RUNS " + " ".join(f"{r:.4f}" for r in best_runs))  # every run of the best (--json)


if __name__ == "__main__":
    main()

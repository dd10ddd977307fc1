# Peer benchmark: Run:ai Model Streamer 0.17 (runai-model-streamer, S3 backend) reading one S3 object into
# host memory as raw bytes, for bench/cloud_bench.sh; prints "GBPS <GB/s>" and, with --digest, "SHA256 <hex>".
#
# Run it with the interpreter of the venv that scripts/setup.sh makes (/opt/tz-peers/runai-0.17/bin/python).
# API (0.17): FileStreamer streams a list of FileChunks (a path plus (offset, size) ranges); get_chunks()
# yields (file id, range index, uint8 tensor) as ranges complete, in any order. The object is asked for
# as back-to-back ranges of --range-mib (like the ranges of the tensors its SafetensorsStreamer asks for;
# the C++ layer splits a submission's bytes into RUNAI_STREAMER_CHUNK_BYTESIZE reads over its workers
# whatever the ranges are).
# S3 is configured only through the environment, read by the C++ layer at FileStreamer start:
#   AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (the AWS default chain),
#   RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0 (path style, for S3-compatible stores),
#   AWS_EC2_METADATA_DISABLED=true (no instance-metadata probe on a machine outside EC2),
#   RUNAI_STREAMER_OBJ_CONCURRENCY (S3 clients, default 8; RUNAI_STREAMER_CONCURRENCY when unset),
#   RUNAI_STREAMER_CHUNK_BYTESIZE (bytes per S3 read, default 8 MiB, at least 5 MiB).
# --concurrency N sets RUNAI_STREAMER_OBJ_CONCURRENCY here; left out, the streamer's default holds.
import argparse
import hashlib
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("uri", help="s3://bucket/key")
    ap.add_argument("size", type=int, help="the object's size in bytes")
    ap.add_argument("--concurrency", type=int, help="RUNAI_STREAMER_OBJ_CONCURRENCY (default: the streamer's)")
    ap.add_argument("--range-mib", type=int, default=16, help="bytes per requested range, MiB (default 16)")
    ap.add_argument("--digest", action="store_true", help="also print the SHA-256 of the bytes received")
    ap.add_argument("--pretouch", type=int, default=0,
                    help="bytes to touch and free after the imports (bench/cloud_bench.py pyload says why)")
    args = ap.parse_args()
    if args.concurrency:
        os.environ["RUNAI_STREAMER_OBJ_CONCURRENCY"] = str(args.concurrency)
    from runai_model_streamer import FileChunks, FileStreamer  # imports torch: before the clock starts

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from python_load_worker import pretouch  # bench/: stdlib only

    t_touch = time.perf_counter()
    pretouch(args.pretouch)
    print(f"PRETOUCH {time.perf_counter() - t_touch:.6f}", flush=True)
    step = args.range_mib << 20
    sizes = [min(step, args.size - a) for a in range(0, args.size, step)]
    parts = [None] * len(sizes)
    t0 = time.perf_counter()
    with FileStreamer() as fs:  # the C++ streamer and its S3 clients start here: inside the timing
        fs.stream_files([FileChunks.contiguous(0, args.uri, 0, sizes)])
        for _, index, tensor in fs.get_chunks():
            # Host destination: the streamer hands its buffer over (owned), so keeping the view is no copy.
            parts[index] = tensor
        seconds = time.perf_counter() - t0
        got = sum(p.numel() for p in parts if p is not None)
        if got != args.size:
            sys.exit(f"runai_peer: got {got} of {args.size} bytes")
        print(f"GBPS {args.size / seconds / 1e9:.4f}", flush=True)
        if args.digest:  # after the timing, and only when asked: hashing 1 GiB takes longer than a fast load
            h = hashlib.sha256()
            for p in parts:
                h.update(p.numpy())
            print(f"SHA256 {h.hexdigest()}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks safetensors files written by our writer with the python library, for safetensors_test.

Usage: st_check.py FILE MANIFEST [FILE MANIFEST ...] (one process, so torch is imported once). MANIFEST uses st_make.py's format (T and M lines; the file column
is ignored). Every tensor must load with the expected dtype, shape and sha256 of its raw bytes,
through safetensors.deserialize (every dtype) and safetensors.torch.load_file (the dtypes its torch
loader knows); the metadata must match exactly. Prints what differs and exits 1 on a mismatch,
exits 77 when safetensors or torch cannot be imported.
"""
import hashlib
import sys

try:
    import torch
    import safetensors
    import safetensors.torch as st
except ImportError as e:
    print(f"st_check.py: {e}", file=sys.stderr)
    sys.exit(77)


def read_manifest(path):
    tensors, metadata = {}, {}
    with open(path, encoding="ascii") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if parts[0] == "T":
                name = bytes.fromhex(parts[2]).decode()
                shape = [int(d) for d in parts[4].split(",")] if parts[4] else []
                tensors[name] = (parts[3], shape, parts[5])
            elif parts[0] == "M":
                metadata[bytes.fromhex(parts[2]).decode()] = bytes.fromhex(parts[3]).decode()
    return tensors, metadata


def check(path, manifest):
    """Returns the list of differences between the file and its manifest."""
    expected, expected_meta = read_manifest(manifest)
    problems = []
    with open(path, "rb") as f:
        raw = dict(safetensors.deserialize(f.read()))
    if set(raw) != set(expected):
        problems.append(f"tensor names {sorted(raw)} != {sorted(expected)}")
    for name, (dtype, shape, digest) in expected.items():
        got = raw.get(name)
        if got is None:
            continue
        actual = (got["dtype"], list(got["shape"]), hashlib.sha256(bytes(got["data"])).hexdigest())
        if actual != (dtype, shape, digest):
            problems.append(f"{name!r}: deserialize gives {actual}, expected {(dtype, shape, digest)}")
    if all(dtype in st._TYPES for dtype, _, _ in expected.values()):
        for name, t in st.load_file(path).items():
            digest = hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
            if name in expected and digest != expected[name][2]:
                problems.append(f"{name!r}: load_file bytes have sha256 {digest}, expected {expected[name][2]}")
    with safetensors.safe_open(path, framework="numpy") as f:
        meta = f.metadata() or {}
    if meta != expected_meta:
        problems.append(f"metadata {meta} != {expected_meta}")
    return [f"st_check.py {path}: {p}" for p in problems]


def main():
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit("usage: st_check.py FILE MANIFEST [FILE MANIFEST ...]")
    problems = []
    for i in range(0, len(args), 2):
        problems += check(args[i], args[i + 1])
    for p in problems:
        print(p, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

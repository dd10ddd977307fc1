"""Writes the reference vectors with the REAL tensorizer: NAME.tensors plus NAME.manifest.json.

usage: make_vectors.py [--tensorizer VERSION] [--python PATH] OUTDIR

VERSION is 2.11.1 (the default: five files, small_mixed, module, nested, meta_v4, encrypted) or
2.12.1 (the same five plus the data version 5 files of cases_2121.py: long_v5, long_v5_meta,
long_v5_encrypted); README.md in this folder says what each covers. --python runs the script under
that interpreter (the venv scripts/setup.sh makes for 2.12.1); a missing one is a skip. Every manifest lists, per tensor, the sha256 of the bytes the source torch tensor holds (so
it does not depend on tensorizer's reader), and the on-disk details read back by an independent parser
(layout.py): offsets, lengths, stored dtype, module index, header hashes (recomputed here over
H || plaintext and compared), crypt info. The file is then read back with tensorizer itself
(verify_hash=True) and must give the same bytes. Anything that disagrees stops the script: a manifest
is only written once it is known to be right.

Deterministic (fixed seeds) except encrypted.tensors, whose nonces are random per run; its manifest
records them. Exits 77 (CTest's skip code) when torch or that tensorizer cannot be imported.
"""

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cases  # noqa: E402
import cases_2121  # noqa: E402
import layout  # noqa: E402

SKIP = 77
CASES = {"2.11.1": cases.all_cases, "2.12.1": lambda: cases.all_cases() + cases_2121.all_cases()}
CONVENTIONS = {
    "sha256": "sha256 of the tensor's raw little-endian bytes in C-contiguous order, computed from the source "
              "torch tensor (bfloat16/float8 as their bit patterns; meta tensors: the zeros they read back as)",
    "dtype": "torch dtype; file.file_dtype is the exact dtype string stored in the file "
             "(opaque dtypes: '<V2\\u0000torch.bfloat16')",
    "name": "str for plain names; null + path for structured (nested) names; "
            "file.stored_name is the exact UTF-8 name in the file",
    "header_hashes": "hashes as stored in each tensor header (over the header with zeroed hash values and "
                     "without crypt_info, then the plaintext data); crc32 as 8 hex digits of its value",
}


def import_peers(version):
    try:
        import tensorizer
        import torch  # noqa: F401
    except (ImportError, OSError) as error:  # OSError: libnacl finds no libsodium
        print(f"skipped: torch/tensorizer not importable ({error}); run scripts/setup.sh")
        sys.exit(SKIP)
    if tensorizer.__version__ != version:
        print(f"skipped: tensorizer {tensorizer.__version__} is installed, the vectors need {version}")
        sys.exit(SKIP)


def run_under(python, args):
    """Re-runs this script under `python` (without --python), or exits 77 when it is absent. A venv's
    python is a symlink to its base interpreter, so only running it gives the venv's packages."""
    if not os.access(python, os.X_OK):
        print(f"skipped: {python} does not exist (scripts/setup.sh makes the tensorizer {args.tensorizer} venv)")
        sys.exit(SKIP)
    os.execv(python, [python, os.path.abspath(__file__), "--tensorizer", args.tensorizer, args.outdir])


def tensor_bytes(tensor):
    """The bytes a load gives; None for a meta tensor too large to spell out (GiBs of zeros)."""
    import torch

    if tensor.is_meta:
        size = tensor.numel() * tensor.element_size()
        return bytes(size) if size < 1 << 30 else None
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def environment():
    import numpy
    import tensorizer
    import torch

    return {"tensorizer_version": tensorizer.__version__, "torch_version": torch.__version__,
            "numpy_version": numpy.__version__, "python": platform.python_version(),
            "platform": f"{platform.system()} {platform.machine()}", "byteorder": sys.byteorder}


def file_section(data, header, entry):
    """What the file holds for one tensor, read by layout.py; the header hashes are recomputed."""
    th = layout.tensor_header(data, entry["header_offset"], layout.has_crypt_info(header),
                              entry["metadata_version"] == layout.LONG_TAG)
    for field in ("name", "dtype", "shape", "tensor_type", "data_length"):
        if th[field] != entry[field]:
            raise SystemExit(f"{entry['name']!r}: header {field} {th[field]!r} != metadata {entry[field]!r}")
    if entry["data_offset"] != entry["header_offset"] + th["header_size"]:
        raise SystemExit(f"{entry['name']!r}: data does not follow its header")
    return th, {"stored_name": th["name"].decode("utf-8"), "file_dtype": th["dtype"].decode("utf-8"),
                "stored_shape": th["shape"], "tensor_type": layout.TENSOR_TYPES[th["tensor_type"]],
                "module_idx": th["module_idx"], "header_offset": entry["header_offset"],
                "header_size": th["header_size"], "data_offset": entry["data_offset"],
                "data_length": entry["data_length"], "metadata_version": entry["metadata_version"],
                "header_hashes": th["hashes"], "crypt_info": th["crypt_info"]}


def tensor_record(spec, data, header, entry):
    """One manifest tensor: what was written (from the torch tensor) and where it lies (from the file)."""
    tensor = spec.tensor
    plain = tensor_bytes(tensor)
    th, file = file_section(data, header, entry)
    want = layout.expected_hashes(th["hashed_header"], b"" if tensor.is_meta else plain)
    for kind, value in th["hashes"].items():
        if want[kind] != value:
            raise SystemExit(f"{spec.path}: stored {kind} {value} != recomputed {want[kind]}")
    if th["crypt_info"] is None and not tensor.is_meta and plain is not None:
        stored = data[entry["data_offset"]:entry["data_offset"] + entry["data_length"]]
        if stored != plain:
            raise SystemExit(f"{spec.path}: stored bytes differ from the tensor's")
    plain_name = len(spec.path) == 1 and isinstance(spec.path[0], str)
    record = {"name": spec.path[0] if plain_name else None, "path": list(spec.path),
              "dtype": str(tensor.dtype), "shape": list(tensor.shape), "tensor_type": spec.tensor_type,
              "nbytes": tensor.numel() * tensor.element_size(),
              "sha256": hashlib.sha256(plain).hexdigest() if plain is not None else None}
    if tensor.is_meta:
        record["meta"] = True
    elif not tensor.is_contiguous():
        record["source_stride"] = list(tensor.stride())
        record["source_storage_offset"] = tensor.storage_offset()
    if spec.note:
        record["note"] = spec.note
    if spec.module_index is not None:
        record["expected_module_idx"] = spec.module_index
    record["file"] = file
    return record


def read_back(path, all_specs, key):
    """tensorizer itself must read every tensor back, verified, with the manifest's dtype, shape and bytes
    (but those it would allocate GiBs for: Spec.read_back)."""
    from tensorizer import DecryptionParams, TensorDeserializer

    enc = DecryptionParams.from_key(key) if key else None
    specs = [s for s in all_specs if s.read_back]
    left_out = {s.path[0] for s in all_specs if not s.read_back}
    with TensorDeserializer(path, device="cpu", verify_hash=True, lazy_load=True, encryption=enc,
                            filter_func=(lambda name: name not in left_out) if left_out else None) as d:
        rows = list(d.read_tensors())
    if len(rows) != len(specs):
        raise SystemExit(f"{path}: tensorizer read {len(rows)} tensors, {len(specs)} were written")
    for (idx, kind, name, got), spec in zip(rows, specs):
        want_name = spec.path[0] if len(spec.path) == 1 and isinstance(spec.path[0], str) else tuple(spec.path)
        if (name, kind.name, got.dtype, list(got.shape)) != (want_name, spec.tensor_type, spec.tensor.dtype,
                                                              list(spec.tensor.shape)):
            raise SystemExit(f"{path}: tensorizer read {name!r} {kind.name} {got.dtype} {list(got.shape)}")
        if tensor_bytes(got) != tensor_bytes(spec.tensor):
            raise SystemExit(f"{path}: tensorizer read different bytes for {name!r}")
    return [f"TensorDeserializer(verify_hash=True): {len(rows)}/{len(all_specs)} tensors match name, dtype, "
            "shape, tensor type and raw bytes" + (f" (left out: {sorted(left_out)})" if left_out else ""),
            f"independent parse (tests/vectors/layout.py) of {len(specs)} headers: offsets agree with the "
            "metadata, CRC32/SHA256 recomputed over H || plaintext"]


def write_sequentially(path, case):
    """The case's tensors by one write_tensor call each (each call synchronizes the file): tensorizer 2.12
    rewrites the earlier metadata entries with tags when a long tensor arrives."""
    from tensorizer import TensorSerializer
    from tensorizer.serialization import TensorType

    serializer = TensorSerializer(path)
    for spec in case.specs:
        serializer.write_tensor(0, spec.path[0], TensorType[spec.tensor_type], spec.tensor)
    serializer.close()
    with open(path, "rb") as stream:
        return stream.read()


def write_vector(out_dir, case):
    from tensorizer import EncryptionParams, TensorSerializer

    path = os.path.join(out_dir, f"{case.name}.tensors")
    serializer = TensorSerializer(path, encryption=EncryptionParams(case.key) if case.key else None)
    case.write(serializer)
    serializer.close()
    with open(path, "rb") as stream:
        data = stream.read()
    header = layout.file_header(data)
    if header["data_version"] != case.data_version:
        raise SystemExit(f"{path}: data version {header['data_version']}, expected {case.data_version}")
    if case.feature_flags is not None and header["feature_flags"] != case.feature_flags:
        raise SystemExit(f"{path}: feature flags {header['feature_flags']}, expected {case.feature_flags}")
    if case.sequential_too:
        with tempfile.TemporaryDirectory() as tmp:
            if write_sequentially(os.path.join(tmp, "seq.tensors"), case) != data:
                raise SystemExit(f"{path}: write_tensor calls give other bytes than write_state_dict")
    entries = layout.metadata_entries(data, header)
    if len(entries) != len(case.specs):
        raise SystemExit(f"{path}: {len(entries)} metadata entries, {len(case.specs)} tensors written")
    tensors = [tensor_record(s, data, header, e) for s, e in zip(case.specs, entries)]
    checks = read_back(path, case.specs, case.key)
    manifest = {
        "file": os.path.basename(path), "file_size": len(data), "file_sha256": hashlib.sha256(data).hexdigest(),
        "description": case.description, "writer_api": case.writer_api, "file_header": header,
        "encryption": case.encryption_record(), "byte_reproducible": case.key is None,
        "generator": "tests/vectors/make_vectors.py", "environment": environment(),
        "skipped_dtypes": case.skipped_dtypes or None, "conventions": CONVENTIONS,
        "tensor_count": len(tensors), "tensors": tensors, "roundtrip": {"ok": True, "checks": checks, "errors": []},
    }
    with open(os.path.join(out_dir, f"{case.name}.manifest.json"), "w", encoding="utf-8") as stream:
        json.dump(manifest, stream, indent=1, ensure_ascii=False)
    return manifest


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tensorizer", default="2.11.1", choices=sorted(CASES))
    parser.add_argument("--python", help="run under this interpreter (its venv holds that tensorizer)")
    parser.add_argument("outdir")
    args = parser.parse_args()
    if args.python:
        run_under(args.python, args)
    import_peers(args.tensorizer)
    out_dir = args.outdir
    os.makedirs(out_dir, exist_ok=True)
    for case in CASES[args.tensorizer]():
        m = write_vector(out_dir, case)
        print(f"{m['file']}: v{m['file_header']['data_version']}, {m['tensor_count']} tensors, {m['file_size']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

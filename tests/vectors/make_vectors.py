"""Writes the reference vectors with the REAL tensorizer 2.11.1: NAME.tensors plus NAME.manifest.json.

usage: make_vectors.py OUTDIR

Five files (small_mixed, module, nested, meta_v4, encrypted; README.md in this folder says what each
covers). Every manifest lists, per tensor, the sha256 of the bytes the source torch tensor holds (so
it does not depend on tensorizer's reader), and the on-disk details read back by an independent parser
(layout.py): offsets, lengths, stored dtype, module index, header hashes (recomputed here over
H || plaintext and compared), crypt info. The file is then read back with tensorizer itself
(verify_hash=True) and must give the same bytes. Anything that disagrees stops the script: a manifest
is only written once it is known to be right.

Deterministic (fixed seeds) except encrypted.tensors, whose nonces are random per run; its manifest
records them. Exits 77 (CTest's skip code) when torch or tensorizer 2.11.1 cannot be imported.
"""

import hashlib
import json
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cases  # noqa: E402
import layout  # noqa: E402

SKIP = 77
TENSORIZER_VERSION = "2.11.1"
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


def import_peers():
    try:
        import tensorizer
        import torch  # noqa: F401
    except (ImportError, OSError) as error:  # OSError: libnacl finds no libsodium
        print(f"skipped: torch/tensorizer not importable ({error}); run scripts/setup.sh")
        sys.exit(SKIP)
    if tensorizer.__version__ != TENSORIZER_VERSION:
        print(f"skipped: tensorizer {tensorizer.__version__} is installed, the vectors need {TENSORIZER_VERSION}")
        sys.exit(SKIP)


def tensor_bytes(tensor):
    import torch

    if tensor.is_meta:
        return bytes(tensor.numel() * tensor.element_size())
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
    th = layout.tensor_header(data, entry["header_offset"], layout.has_crypt_info(header))
    for field in ("name", "dtype", "shape", "tensor_type", "data_length"):
        if th[field] != entry[field]:
            raise SystemExit(f"{entry['name']!r}: header {field} {th[field]!r} != metadata {entry[field]!r}")
    if entry["data_offset"] != entry["header_offset"] + th["header_size"]:
        raise SystemExit(f"{entry['name']!r}: data does not follow its header")
    return th, {"stored_name": th["name"].decode("utf-8"), "file_dtype": th["dtype"].decode("utf-8"),
                "stored_shape": th["shape"], "tensor_type": layout.TENSOR_TYPES[th["tensor_type"]],
                "module_idx": th["module_idx"], "header_offset": entry["header_offset"],
                "header_size": th["header_size"], "data_offset": entry["data_offset"],
                "data_length": entry["data_length"], "header_hashes": th["hashes"], "crypt_info": th["crypt_info"]}


def tensor_record(spec, data, header, entry):
    """One manifest tensor: what was written (from the torch tensor) and where it lies (from the file)."""
    tensor = spec.tensor
    plain = tensor_bytes(tensor)
    th, file = file_section(data, header, entry)
    want = layout.expected_hashes(th["hashed_header"], b"" if tensor.is_meta else plain)
    for kind, value in th["hashes"].items():
        if want[kind] != value:
            raise SystemExit(f"{spec.path}: stored {kind} {value} != recomputed {want[kind]}")
    if th["crypt_info"] is None and not tensor.is_meta:
        stored = data[entry["data_offset"]:entry["data_offset"] + entry["data_length"]]
        if stored != plain:
            raise SystemExit(f"{spec.path}: stored bytes differ from the tensor's")
    plain_name = len(spec.path) == 1 and isinstance(spec.path[0], str)
    record = {"name": spec.path[0] if plain_name else None, "path": list(spec.path),
              "dtype": str(tensor.dtype), "shape": list(tensor.shape), "tensor_type": spec.tensor_type,
              "nbytes": tensor.numel() * tensor.element_size(), "sha256": hashlib.sha256(plain).hexdigest()}
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


def read_back(path, specs, key):
    """tensorizer itself must read every tensor back, verified, with the manifest's dtype, shape and bytes."""
    from tensorizer import DecryptionParams, TensorDeserializer

    enc = DecryptionParams.from_key(key) if key else None
    with TensorDeserializer(path, device="cpu", verify_hash=True, lazy_load=True, encryption=enc) as d:
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
    return [f"TensorDeserializer(verify_hash=True): {len(rows)}/{len(specs)} tensors match name, dtype, shape, "
            "tensor type and raw bytes",
            f"independent parse (tests/vectors/layout.py) of {len(specs)} headers: offsets agree with the "
            "metadata, CRC32/SHA256 recomputed over H || plaintext"]


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
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    import_peers()
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for case in cases.all_cases():
        m = write_vector(out_dir, case)
        print(f"{m['file']}: v{m['file_header']['data_version']}, {m['tensor_count']} tensors, {m['file_size']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

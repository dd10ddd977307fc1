#!/usr/bin/env python3
"""Writes safetensors files with the python library for safetensors_test, plus a manifest.

Usage: st_make.py OUTDIR. Writes OUTDIR/*.safetensors and OUTDIR/manifest.tsv with one line per
tensor "T<TAB>file<TAB>name<TAB>dtype<TAB>shape<TAB>sha256" and per metadata entry
"M<TAB>file<TAB>key<TAB>value". Names, keys and values are UTF-8 hex-encoded (so any character
survives), shape is comma-separated (empty for 0-d), sha256 is of the tensor's raw bytes.
Exits 77 when safetensors or torch cannot be imported.
"""
import hashlib
import os
import sys

try:
    import torch
    import safetensors
    from safetensors.torch import save_file
except ImportError as e:
    print(f"st_make.py: {e}", file=sys.stderr)
    sys.exit(77)

# safetensors code -> torch dtype, for every code torch can produce.
DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U64": torch.uint64, "U32": torch.uint32, "U16": torch.uint16, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "F8_E4M3FNUZ": torch.float8_e4m3fnuz, "F8_E5M2FNUZ": torch.float8_e5m2fnuz,
    "F8_E8M0": torch.float8_e8m0fnu, "C64": torch.complex64, "F4": torch.float4_e2m1fn_x2,
}


def raw_bytes(t):
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def random_tensor(gen, dtype, shape):
    """A tensor whose bytes are random (any bit pattern; 0/1 for bool)."""
    probe = torch.empty(0, dtype=dtype)
    count = 1
    for d in shape:
        count *= d
    data = torch.randint(0, 256, (count * probe.element_size(),), dtype=torch.uint8, generator=gen)
    if dtype == torch.bool:
        data = data % 2
    return data.view(dtype).reshape(shape)


def st_shape(code, t):
    """The shape python writes: F4 counts 4-bit values, so its last dimension doubles."""
    shape = list(t.shape)
    if code == "F4" and shape:
        shape[-1] *= 2
    return shape


def write(outdir, lines, fname, tensors, codes, metadata):
    save_file(tensors, os.path.join(outdir, fname), metadata=metadata)
    for name, t in tensors.items():
        shape = ",".join(str(d) for d in st_shape(codes[name], t))
        digest = hashlib.sha256(raw_bytes(t)).hexdigest()
        lines.append(f"T\t{fname}\t{name.encode().hex()}\t{codes[name]}\t{shape}\t{digest}")
    for key, value in (metadata or {}).items():
        lines.append(f"M\t{fname}\t{key.encode().hex()}\t{value.encode().hex()}")


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    lines = []
    for code, dtype in DTYPES.items():
        tensors = {"matrix": random_tensor(gen, dtype, (3, 5)), "empty": random_tensor(gen, dtype, (0, 4))}
        if code != "F4":  # a 0-d F4 tensor would hold two 4-bit values
            tensors["scalar"] = random_tensor(gen, dtype, ())
        codes = {name: code for name in tensors}
        write(outdir, lines, f"dtype_{code}.safetensors", tensors, codes, {"format": "pt"})
    mixed, codes = {}, {}
    for i, (code, dtype) in enumerate(DTYPES.items()):
        if code in ("F4", "F8_E8M0"):
            continue
        name = ["layer.%d.weight" % i, "b%02d" % (40 - i), "é\"\n\\\t/%d" % i][i % 3]
        mixed[name] = random_tensor(gen, dtype, (i % 4 + 1, 3))
        codes[name] = code
    write(outdir, lines, "mixed.safetensors", mixed, codes, {"note": "é \"quoted\"\n\u0001 end"})
    write(outdir, lines, "no_metadata.safetensors", {"x": random_tensor(gen, torch.float32, (7,))},
          {"x": "F32"}, None)
    with open(os.path.join(outdir, "manifest.tsv"), "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""Writes reference .tensors files with the REAL tensorizer 2.11.1, plus an expected manifest for each.

usage: make_reference.py OUTDIR

Each NAME.tensors gets NAME.manifest.json listing, in file order, every tensor's public name (a string,
or a list for a structured path), dtype, shape, type, module index, data length and the sha256 of its
C-order bytes computed from the torch tensor (zeros for meta tensors). The file is then read back with
the real tensorizer (hashes verified) and must match the manifest, so the manifest is known-good before
anything of ours is compared with it. Exits 77 when torch/tensorizer cannot be imported.
"""

import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tzcross  # noqa: E402


def seeded(seed):
    import torch

    return torch.Generator().manual_seed(seed)


def plain_state_dict():
    """Flat {str: tensor} of every numpy-native dtype: data version 1, plain names only."""
    import torch

    g = seeded(1)
    specials = torch.tensor([0.0, -0.0, 1.0, float("inf"), float("-inf"), float("nan"), 1e-45, 3.4e38])
    wide = torch.randn(6, 8, generator=g)
    return {
        "f32.matrix": torch.randn(4, 5, generator=g),
        "f32.specials": specials,
        "f32.scalar": torch.tensor(2.5),
        "f32.empty": torch.empty(0),
        "f32.empty_2d": torch.empty(3, 0),
        "f32.transposed": wide.t(),  # non-contiguous: stored in C order of the transposed view
        "f32.strided": wide[:, ::3],
        "f32.4d": torch.randn(2, 3, 4, 5, generator=g),
        "f32.big": torch.randn(1024, 1024, generator=g),  # 4 MiB: more than one read and hash block
        "f16.vector": torch.randn(17, generator=g).half(),
        "f64.matrix": torch.randn(3, 3, generator=g).double(),
        "i8.vector": torch.arange(-8, 8, dtype=torch.int8),
        "u8.vector": torch.arange(0, 256, 17, dtype=torch.uint8),
        "i16.vector": torch.arange(-300, 300, 37, dtype=torch.int16),
        "i32.matrix": torch.randint(-2**31, 2**31 - 1, (3, 7), generator=g, dtype=torch.int32),
        "i64.scalar": torch.tensor(-7, dtype=torch.int64),
        "i64.vector": torch.tensor([2**62, -2**62, 0, 1], dtype=torch.int64),
        "u16.vector": torch.arange(0, 65535, 4099).to(torch.uint16),
        "u32.vector": torch.tensor([0, 1, 2**31, 2**32 - 1], dtype=torch.int64).to(torch.uint32),
        "u64.vector": torch.tensor([0, 1, 2**62], dtype=torch.int64).to(torch.uint64),
        "bool.mask": torch.tensor([True, False, True, True, False]),
        "bool.empty": torch.empty(0, 2, dtype=torch.bool),
        "c64.vector": torch.randn(5, generator=g, dtype=torch.complex64),
        "c128.scalar": torch.tensor(1 - 2j, dtype=torch.complex128),
        "naïve.wéight": torch.ones(2, 2),
        "层.权重": torch.full((3,), 4.0),
    }


def opaque_state_dict():
    """Dtypes numpy lacks, stored as "<numpy view>\\0torch.<name>": data version 2."""
    import torch

    g = seeded(2)
    base = torch.randn(3, 4, generator=g)
    tensors = {
        "bf16.matrix": base.bfloat16(),
        "bf16.scalar": torch.tensor(-1.5, dtype=torch.bfloat16),
        "f32.neighbour": base,
        "c32.vector": torch.randn(4, generator=g, dtype=torch.complex64).to(torch.complex32),
    }
    # Zero-size or meta tensors of an opaque dtype are left out: tensorizer 2.11.1 cannot read them.
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
        if hasattr(torch, name):
            tensors[f"{name}.matrix"] = base.to(getattr(torch, name))
    return tensors


def nested_state_dict():
    """Nested dicts and lists: top-level string keys stay plain, deeper paths become structured names."""
    import torch

    g = seeded(3)
    return {
        "step": torch.tensor(1000, dtype=torch.int64),
        "model": {
            "layers": [
                {"weight": torch.randn(4, 4, generator=g).bfloat16(), "bias": torch.zeros(4)},
                {"weight": torch.randn(4, 4, generator=g).bfloat16(), "bias": torch.ones(4)},
            ],
            "norm": {"weight": torch.randn(4, generator=g).half()},
        },
        "schedule": [torch.tensor([0.1, 0.01]), torch.arange(3)],
        "clé": {"ünïcode": torch.arange(5, dtype=torch.int16)},
    }


def meta_state_dict():
    """Meta tensors (no data, read back as zeros) next to real ones: data version 4."""
    import torch

    g = seeded(4)
    # 0-d and opaque-dtype meta tensors are left out: tensorizer 2.11.1 cannot read them back.
    return {
        "dense.before": torch.randn(3, 4, generator=g),
        "meta.f32": torch.empty(4, 5, device="meta"),
        "meta.i64": torch.empty(7, dtype=torch.int64, device="meta"),
        "dense.after": torch.arange(5, dtype=torch.int32),
    }


def tiny_module():
    """A small nn.Module with nested children, a tied weight and persistent/non-persistent buffers."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)
            self.norm = nn.LayerNorm(4)

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.blocks = nn.Sequential(Block(), Block())
            self.batch_norm = nn.BatchNorm1d(4)  # buffers, one of them a 0-d int64
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight  # tied: written once under each owner
            self.register_buffer("scale", torch.tensor(0.5))  # root buffer: named ".scale"
            self.register_buffer("mask", torch.tensor([True, False, True]), persistent=False)

    torch.manual_seed(5)
    return Tiny()


def manifest_entry(name, tensor, tensor_type, module_index):
    data_length = 0 if tensor.is_meta else tensor.numel() * tensor.element_size()
    return {"name": tzcross.public_name(name), "dtype": tzcross.dtype_name(tensor),
            "shape": list(tensor.shape), "type": tensor_type, "module_index": module_index,
            "data_length": data_length, "nbytes": tensor.numel() * tensor.element_size(),
            "meta": bool(tensor.is_meta),
            "sha256": tzcross.sha256_hex(tzcross.tensor_bytes(tensor))}


def state_dict_entries(node, path=()):
    """Depth-first, in iteration order, as write_state_dict flattens it (format/FORMAT.md §5.5)."""
    if isinstance(node, dict):
        for key, child in node.items():
            yield from state_dict_entries(child, path + (key,))
    elif isinstance(node, (list, tuple)):
        for index, child in enumerate(node):
            yield from state_dict_entries(child, path + (index,))
    else:
        yield manifest_entry(path, node, "state_dict", 0)


def module_entries(module):
    """Per module in named_modules() order: its own parameters, then its own buffers (format/FORMAT.md §5.4)."""
    for index, (module_name, child) in enumerate(module.named_modules()):
        for attr, tensor in child.named_parameters(recurse=False):
            yield manifest_entry(f"{module_name}.{attr}", tensor, "param", index)
        for attr, tensor in child.named_buffers(recurse=False):
            yield manifest_entry(f"{module_name}.{attr}", tensor, "buffer", index)


def reference_cases():
    """(name, description, expected data version, write(serializer), manifest entries) per file."""
    plain, opaque, nested, meta = plain_state_dict(), opaque_state_dict(), nested_state_dict(), meta_state_dict()
    module = tiny_module()
    return [
        ("plain", "flat state dict, numpy-native dtypes, 0-d, zero-size, non-contiguous, non-ASCII", 1,
         lambda s: s.write_state_dict(plain), list(state_dict_entries(plain))),
        ("opaque", "bfloat16, complex32 and float8 (opaque dtype strings)", 2,
         lambda s: s.write_state_dict(opaque), list(state_dict_entries(opaque))),
        ("nested", "nested dicts and lists: structured names", 2,
         lambda s: s.write_state_dict(nested), list(state_dict_entries(nested))),
        ("meta", "meta tensors (no data, read as zeros)", 4,
         lambda s: s.write_state_dict(meta), list(state_dict_entries(meta))),
        ("module", "write_module: params, buffers, module indices, a tied weight", 1,
         lambda s: s.write_module(module), list(module_entries(module))),
    ]


def read_file_header(path):
    with open(path, "rb") as stream:
        head = stream.read(41)
    version = struct.unpack_from("<I", head, 5)[0]
    flags = int.from_bytes(head[9:41], "little")
    return version, flags


def check_against_real_read(path, entries):
    """The real tensorizer must read back exactly what the manifest says, or the manifest is wrong."""
    read = tzcross.read_real(path)
    got = [(e["name"], e["type"], e["module_index"], tzcross.dtype_name(e["tensor"]), list(e["tensor"].shape),
            tzcross.sha256_hex(tzcross.tensor_bytes(e["tensor"]))) for e in read]
    want = [(e["name"], e["type"], e["module_index"], e["dtype"], e["shape"], e["sha256"]) for e in entries]
    if got != want:
        for index, (g, w) in enumerate(zip(got, want)):
            if g != w:
                raise SystemExit(f"{path}: tensor {index}: real tensorizer read {g}, manifest says {w}")
        raise SystemExit(f"{path}: real tensorizer read {len(got)} tensors, manifest lists {len(want)}")


def write_reference(out_dir, case):
    import tensorizer
    import torch
    from tensorizer import TensorSerializer

    name, description, expected_version, write, entries = case
    path = os.path.join(out_dir, f"{name}.tensors")
    serializer = TensorSerializer(path)
    write(serializer)
    serializer.close()
    version, flags = read_file_header(path)
    if version != expected_version:
        raise SystemExit(f"{path}: tensorizer wrote data version {version}, expected {expected_version}")
    check_against_real_read(path, entries)
    with open(path, "rb") as stream:
        data = stream.read()
    manifest = {"file": os.path.basename(path), "description": description, "data_version": version,
                "flags": flags, "file_size": len(data), "file_sha256": tzcross.sha256_hex(data),
                "writer": {"tensorizer": tensorizer.__version__, "torch": torch.__version__},
                "tensors": entries}
    with open(os.path.join(out_dir, f"{name}.manifest.json"), "w", encoding="utf-8") as stream:
        json.dump(manifest, stream, indent=1, ensure_ascii=False)
    return manifest


def make_all(out_dir):
    """Writes every reference file and manifest into out_dir; returns the manifests."""
    os.makedirs(out_dir, exist_ok=True)
    manifests = []
    for case in reference_cases():
        manifest = write_reference(out_dir, case)
        manifest["path"] = os.path.join(out_dir, manifest["file"])
        print(f"wrote {manifest['path']}: v{manifest['data_version']}, {len(manifest['tensors'])} tensors, "
              f"{manifest['file_size']} bytes")
        manifests.append(manifest)
    return manifests


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tzcross.import_peers()
    make_all(sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The tensors of the five reference vectors (make_vectors.py writes them with the real tensorizer; the
data version 5 ones that only 2.12.1 writes are in cases_2121.py).

Fixed seeds, so every file but encrypted.tensors (random nonces) is the same bytes on every run with the
same torch. Each spec is one tensor in the order tensorizer writes it: its path, the tensor, the tensor
type tensorizer gives it and, for write_module, the module index it must get (format/FORMAT.md §5).
"""

import hashlib
from dataclasses import dataclass, field

# The fixed key of encrypted.tensors: sha256 of a fixed phrase, so it is the same on every run.
KEY_PHRASE = "tensorizer golden vectors: fixed encryption key v1"


@dataclass
class Spec:
    path: tuple
    tensor: object
    tensor_type: str = "STATE_DICT"
    module_index: int = None
    note: str = ""
    read_back: bool = True  # False: tensorizer's reader would allocate GiBs for it (a huge meta tensor)


@dataclass
class Case:
    name: str
    description: str
    writer_api: str
    data_version: int
    specs: list
    write: object
    key: bytes = None
    skipped_dtypes: list = field(default_factory=list)
    feature_flags: int = None  # the file header's flags, checked when given
    sequential_too: bool = False  # also written by write_tensor calls, which must give the same bytes

    def encryption_record(self):
        if not self.key:
            return None
        return {"method": "EncryptionParams(key) (exact 32-byte key)", "key_hex": self.key.hex(),
                "key_derivation": f"sha256('{KEY_PHRASE}')"}


def bits(values, int_dtype, float_dtype):
    """A float tensor from exact bit patterns (NaN payloads, subnormals survive: no float arithmetic)."""
    import numpy
    import torch

    unsigned = {torch.int16: numpy.uint16, torch.int32: numpy.uint32}[int_dtype]
    signed = {torch.int16: numpy.int16, torch.int32: numpy.int32}[int_dtype]
    return torch.from_numpy(numpy.array(values, dtype=unsigned).view(signed)).view(float_dtype)


def state_dict_specs(sd, notes=None):
    """write_state_dict's flattening (format/FORMAT.md §5.5): depth-first, in iteration order."""
    notes = notes or {}

    def walk(node, path):
        if isinstance(node, dict):
            for key, child in node.items():
                yield from walk(child, path + (key,))
        elif isinstance(node, (list, tuple)):
            for index, child in enumerate(node):
                yield from walk(child, path + (index,))
        else:
            yield Spec(path, node, note=notes.get(path[0] if len(path) == 1 else path, ""))

    return list(walk(sd, ()))


def small_mixed():
    import torch

    g = torch.Generator().manual_seed(1)
    base = torch.randn(3, 5, generator=g)
    wide = torch.arange(48, dtype=torch.int32).reshape(6, 8)
    sd = {
        "f32.matrix": torch.randn(4, 5, generator=g),
        "f16.vector": torch.randn(17, generator=g).half(),
        "bf16.matrix": torch.randn(3, 7, generator=g).bfloat16(),
        "f64.cube": torch.randn(2, 3, 4, generator=g, dtype=torch.float64),
        "i8.vector": torch.arange(-16, 17, dtype=torch.int8),
        "u8.image.nchw": torch.randint(0, 256, (2, 3, 4, 5), generator=g, dtype=torch.uint8),
        "i16.vector": torch.tensor([-32768, -300, -1, 0, 1, 2, 300, 12345, 32767], dtype=torch.int16),
        "i32.matrix": torch.tensor([[-2**31, -1, 0], [1, 2, 3], [65536, 7, 2**31 - 1]], dtype=torch.int32),
        "i64.vector": torch.tensor([-2**63, -1, 0, 2**40, 2**63 - 1], dtype=torch.int64),
        "bool.mask": torch.rand(2, 8, generator=g) > 0.5,
        "c64.vector": torch.randn(6, generator=g, dtype=torch.complex64),
        "c128.vector": torch.randn(3, generator=g, dtype=torch.complex128),
        "scalar.f32": torch.tensor(3.25),
        "scalar.i64": torch.tensor(-42, dtype=torch.int64),
        "scalar.bf16": torch.tensor(-1.5, dtype=torch.bfloat16),
        "empty.f32": torch.empty(0, 3),
        "empty.i8.3d": torch.empty(2, 0, 4, dtype=torch.int8),
        "transposed.f32": base.t(),
        "strided.i32": wide[1:5, ::2],
        "conv.weight.f16.4d": torch.randn(4, 3, 2, 2, generator=g).half(),
        "special.f32": bits([0x7FC00000, 0x7F800001, 0xFFC00001, 0x7F800000, 0xFF800000, 0x80000000, 0x00000000,
                             0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF], torch.int32, torch.float32),
        "special.f16": bits([0x7E00, 0x7C01, 0x7C00, 0xFC00, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF],
                            torch.int16, torch.float16),
        "special.bf16": bits([0x7FC0, 0x7F81, 0x7F80, 0xFF80, 0x8000, 0x0001, 0x007F, 0x0080, 0x7F7F, 0xFF7F],
                             torch.int16, torch.bfloat16),
        "ünïcødé.名前.тензор.weight": torch.tensor([1.0, -2.0, 0.5]),
        "emoji.🙂.bias": torch.tensor([7, -7], dtype=torch.int16),
        "a.b.c.d.e.f.g.deeply.dotted.name": torch.tensor([1e300, -1e-300], dtype=torch.float64),
    }
    notes = {"u8.image.nchw": "4-d", "scalar.f32": "0-d scalar", "scalar.i64": "0-d scalar",
             "scalar.bf16": "0-d scalar, opaque dtype", "empty.f32": "zero-size [0,3]",
             "empty.i8.3d": "zero-size [2,0,4]",
             "transposed.f32": "non-contiguous: (3,5) tensor transposed to (5,3), stride (1,5); stored C-contiguous",
             "strided.i32": "non-contiguous slice [1:5, ::2] of a (6,8) tensor, storage offset 8, stride (8,2)",
             "special.f32": "NaN (incl. signalling with payload and negative), +-inf, -0, subnormals, FLT_MIN, "
                            "+-FLT_MAX",
             "ünïcødé.名前.тензор.weight": "non-ASCII UTF-8 name"}
    skipped = []
    # Dtypes torch 1.13 lacked: numpy-native unsigned ints and opaque float8 (format/FORMAT.md §7.1).
    for name, dtype_name, values in (("u16.vector", "uint16", [0, 1, 40000, 65535]),
                                     ("u32.vector", "uint32", [0, 1, 2**31, 2**32 - 1]),
                                     ("u64.vector", "uint64", [0, 1, 2**62, 2**63 - 1])):
        if hasattr(torch, dtype_name):
            sd[name] = torch.tensor(values, dtype=torch.int64).to(getattr(torch, dtype_name))
        else:
            skipped.append({"dtype": f"torch.{dtype_name}", "reason": f"not available in torch {torch.__version__}"})
    for name, dtype_name in (("f8e4m3fn.matrix", "float8_e4m3fn"), ("f8e5m2.matrix", "float8_e5m2")):
        if hasattr(torch, dtype_name):
            sd[name] = torch.randn(3, 4, generator=g).to(getattr(torch, dtype_name))
            notes[name] = "opaque 1-byte dtype (|V1)"
        else:
            skipped.append({"dtype": f"torch.{dtype_name}", "reason": f"not available in torch {torch.__version__}"})
    return Case("small_mixed",
                f"Flat state dict of {len(sd)} tensors: every dtype torch {torch.__version__} and tensorizer 2.11.1 "
                "both handle (f32, f16, bf16, f64, i8, u8, i16, i32, i64, bool, c64, c128, plus u16/u32/u64 and "
                "float8 where torch has them), 0-d scalars, zero-size tensors, 1-d/3-d/4-d, a transposed and a "
                "strided (non-contiguous) tensor, special float bit patterns, dotted and non-ASCII names. "
                "Contains opaque dtypes (bfloat16), so data version 2.",
                "TensorSerializer.write_state_dict(flat dict)", 2, state_dict_specs(sd, notes),
                lambda s: s.write_state_dict(sd), skipped_dtypes=skipped)


def tiny_model():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, n_in, n_out):
            super().__init__()
            self.fc = nn.Linear(n_in, n_out)
            self.norm = nn.LayerNorm(n_out)

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("position_ids", torch.arange(12, dtype=torch.int64).reshape(1, 12))
            self.register_buffer("scale", torch.tensor(0.125))
            self.register_buffer("attn_mask", torch.tril(torch.ones(4, 4, dtype=torch.bool)), persistent=False)
            self.embed = nn.Embedding(16, 8)
            self.blocks = nn.Sequential(Block(8, 32), Block(32, 8))
            self.bn = nn.BatchNorm1d(8)
            self.head = nn.Linear(8, 16, bias=False)
            self.head.weight = self.embed.weight  # tied

    torch.manual_seed(2)
    model = Tiny()
    with torch.no_grad():
        for block in model.blocks:  # LayerNorm starts at ones/zeros: make its bytes worth checking
            block.norm.weight.uniform_(0.5, 1.5)
            block.norm.bias.uniform_(-0.1, 0.1)
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
        model.bn.num_batches_tracked.fill_(7)
    return model.eval()


def module_specs(model):
    """write_module's order (format/FORMAT.md §5.4): per named_modules() entry, own params then own buffers."""
    specs = []
    for index, (module_name, module) in enumerate(model.named_modules()):
        for kind, members in (("PARAM", module.named_parameters(recurse=False)),
                              ("BUFFER", module.named_buffers(recurse=False))):
            for attr, tensor in members:
                note = "root-level tensor: tensorizer writes a leading '.'" if not module_name else ""
                if attr == "attn_mask":
                    note += "; non-persistent buffer (written: include_non_persistent_buffers=True)"
                if tensor is model.embed.weight:
                    note = "tied: head.weight and embed.weight share storage"
                specs.append(Spec((f"{module_name}.{attr}",), tensor, kind, index, note))
    return specs


def module():
    model = tiny_model()
    return Case("module",
                "write_module() of a tiny model (root-level buffers incl. a 0-d and a non-persistent bool buffer, "
                "Embedding, 2x[Linear+LayerNorm] in a Sequential, BatchNorm1d, Linear head tied to the "
                "embedding). PARAM (0) and BUFFER (1) tensor types, module indices from named_modules(). Only "
                "numpy-native dtypes, so data version 1.",
                "TensorSerializer.write_module(model)  (defaults: include_non_persistent_buffers=True)", 1,
                module_specs(model), lambda s: s.write_module(model))


def nested():
    import torch

    g = torch.Generator().manual_seed(3)
    sd = {
        "model": {
            "layers": [
                {"weight": torch.randn(4, 4, generator=g), "bias": torch.randn(4, generator=g)},
                {"weight": torch.randn(4, 4, generator=g).bfloat16(), "bias": torch.randn(4, generator=g).bfloat16()},
            ],
            "norm": {"scale": torch.tensor(0.75)},
        },
        "lm_head": torch.randn(8, 4, generator=g).half(),
        "dotted.top.level": torch.tensor([1, 2, 3], dtype=torch.int32),
        "ünïcødé": {"名前": torch.tensor([-5, 5], dtype=torch.int64)},
        "list_of_lists": [[torch.tensor([1, 255], dtype=torch.uint8), torch.tensor([9], dtype=torch.uint8)],
                          [torch.tensor([True, False, True])]],
    }
    return Case("nested",
                "Nested dict/list structure. Top-level string keys are stored as plain UTF-8 names; deeper paths "
                "as RS (0x1E) + compact JSON array (ensure_ascii, so non-ASCII keys appear as \\uXXXX), e.g. "
                "'\\x1e[\"model\",\"layers\",0,\"weight\"]'. Contains bfloat16, so data version 2.",
                "TensorSerializer.write_state_dict(nested dicts/lists)", 2, state_dict_specs(sd),
                lambda s: s.write_state_dict(sd))


def meta_v4():
    import torch

    g = torch.Generator().manual_seed(4)
    sd = {
        "real.before": torch.randn(3, 2, generator=g),
        "meta.f32": torch.empty(4, 5, device="meta"),
        "meta.f64.3d": torch.empty(2, 3, 2, dtype=torch.float64, device="meta"),
        "real.after": torch.tensor([1, -1, 300, -300], dtype=torch.int16),
    }
    meta_note = "meta-device tensor: stored with data_length 0 and no data; reads back as zeros"
    return Case("meta_v4",
                "Meta-device tensors force data version 4 (32-byte feature-flags field written; here all zero). "
                "Meta tensors are hollow (data_length 0) and deserialize to zeros.",
                "TensorSerializer.write_state_dict(flat dict incl. meta tensors)", 4,
                state_dict_specs(sd, {"meta.f32": meta_note, "meta.f64.3d": meta_note}),
                lambda s: s.write_state_dict(sd))


def encrypted():
    import torch

    g = torch.Generator().manual_seed(5)
    tied = torch.randn(6, generator=g).half()
    sd = {
        "f32.matrix": torch.randn(8, 16, generator=g),
        "bf16.vector": torch.randn(33, generator=g).bfloat16(),
        "i8.vector": torch.tensor([-128, -1, 0, 1, 2, 3, 127], dtype=torch.int8),
        "bool.mask": torch.tensor([True, False, False, True, True]),
        "scalar.f64": torch.tensor(2.718281828459045, dtype=torch.float64),
        "transposed.f32": torch.randn(3, 4, generator=g).t(),
        "tied.a": tied,
        "tied.b": tied,
        "big.f16.multichunk": torch.randn(1024, 1536, generator=g).half(),
        "ünïcødé.名前": torch.tensor([[1, 2], [3, 4]], dtype=torch.int32),
    }
    tied_note = "same tensor object under two names (tensorizer clones shared memory before in-place encryption)"
    notes = {"transposed.f32": "non-contiguous (transposed)", "tied.a": tied_note, "tied.b": tied_note,
             "big.f16.multichunk": "3 MiB: spans 2 encryption chunks (chunk_size 2 MiB), sequential nonces"}
    key = hashlib.sha256(KEY_PHRASE.encode()).digest()
    return Case("encrypted",
                "Encrypted with a fixed exact key (key_hex in 'encryption'). Data version 3. Per tensor: "
                "XSalsa20-Poly1305 (crypto_secretbox-compatible, one detached MAC per 2 MiB chunk, sequential "
                "nonces); only a SHA256 hash (no CRC32) in the header; the crypt_info chunks (nonce, macs) are in "
                "each tensor's manifest entry. No zero-size tensors: tensorizer 2.11.1 fails to encrypt them.",
                "TensorSerializer(path, encryption=EncryptionParams(key=KEY)).write_state_dict(...); "
                "read with DecryptionParams.from_key(KEY)", 3, state_dict_specs(sd, notes),
                lambda s: s.write_state_dict(sd), key=key)


def all_cases():
    return [small_mixed(), module(), nested(), meta_v4(), encrypted()]

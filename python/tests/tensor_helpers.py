"""Helpers shared by the serialization tests: a tensor's bytes, equality by bytes, every torch
dtype this torch has, random tensors of any dtype, writing a state dict, a nested state dict, and
the entries write_module makes for a module."""

import hashlib

import torch

from tensorizer import TensorSerializer, TensorType


def raw(t) -> bytes:
    """A tensor's bytes in C order (its logical contents, whatever the dtype)."""
    t = t.detach().cpu().contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def assert_same(a, b):
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert tuple(a.shape) == tuple(b.shape)
    assert raw(a) == raw(b)


def _dtype_list():
    names = [
        "float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
        "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "complex32",
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    ]
    return [getattr(torch, n) for n in names if isinstance(getattr(torch, n, None), torch.dtype)]


DTYPES = _dtype_list()


def random_tensor(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    numel = 1
    for d in shape:
        numel *= d
    itemsize = torch.empty((), dtype=dtype).element_size()
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    bits = torch.randint(0, 256, (numel * itemsize,), dtype=torch.uint8, generator=g)
    return bits.view(dtype).reshape(shape)


def write_sd(path, sd, **kw):
    with TensorSerializer(str(path), **kw) as s:
        s.write_state_dict(sd)


def sha(t) -> str:
    return hashlib.sha256(raw(t)).hexdigest()


# A nested state dict: lists, dicts, a non-ASCII dotted name.
NESTED = {
    "model": {
        "layers": [
            {"weight": torch.arange(4.0), "bias": torch.zeros(2)},
            {"weight": torch.ones(3), "bias": torch.full((2,), 7.0)},
        ],
        "norm": torch.tensor([1.5]),
    },
    "lm_head": torch.arange(3, dtype=torch.int32),
    "ünïcode.name": torch.tensor(1, dtype=torch.int8),
}


def expected_module_entries(m, include_non_persistent=True):
    out = []
    for idx, (mname, mod) in enumerate(m.named_modules()):
        for attr, t in mod.named_parameters(recurse=False):
            out.append((idx, TensorType.PARAM, f"{mname}.{attr}", t))
        for attr, t in mod.named_buffers(recurse=False):
            if not include_non_persistent and attr in mod._non_persistent_buffers_set:
                continue
            out.append((idx, TensorType.BUFFER, f"{mname}.{attr}", t))
    return out

"""TensorSerializer / TensorDeserializer: round trips, structure, modules, byte identity with and
cross-reads against the real tensorizer 2.11.1, and the reference vectors (tests/vectors/make_vectors.py)."""

import collections.abc
import hashlib
import io
import json
import os
import types

import numpy
import pytest
import torch

from conftest import TinyModel, make_tiny_model, tensor_layout

import tensorizer
from tensorizer import TensorDeserializer, TensorSerializer, TensorType
from tensorizer.serialization import HashMismatchError

# ---------------------------------------------------------------------------------------------
# helpers


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


# ---------------------------------------------------------------------------------------------
# dtypes and shapes


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_dtype_round_trip(tensors_path, dtype, lazy):
    sd = {
        "matrix": random_tensor(dtype, (3, 5), seed=1),
        "scalar": random_tensor(dtype, (), seed=2),
        "empty": random_tensor(dtype, (0, 4), seed=3),
        "big": random_tensor(dtype, (257, 3), seed=4),
    }
    path = tensors_path()
    write_sd(path, sd)
    with TensorDeserializer(path, device="cpu", lazy_load=lazy, verify_hash=True) as d:
        assert list(d.keys()) == list(sd)
        for k, v in sd.items():
            got = d[k]
            assert isinstance(got, torch.nn.Parameter)
            assert got.requires_grad == (dtype.is_floating_point or dtype.is_complex)
            assert_same(got, v)


def test_non_contiguous_and_views(tensors_path):
    base = torch.arange(60, dtype=torch.int16).reshape(6, 10)
    sd = {
        "transposed": base.t(),
        "strided": base[::2, 1::3],
        "offset_view": base[3:, 2:],
        "bf16_t": base.to(torch.bfloat16).t(),
        "conj": torch.complex(torch.ones(3), torch.arange(3.0)).conj(),
        "neg": torch.arange(4.0)._neg_view() if hasattr(torch.Tensor, "_neg_view") else -torch.arange(4.0),
    }
    path = tensors_path()
    write_sd(path, sd)
    with TensorDeserializer(path, device="cpu") as d:
        for k, v in sd.items():
            assert torch.equal(d[k], v.resolve_conj().resolve_neg().contiguous()), k
            assert d[k].is_contiguous()


def test_meta_tensors_and_total_tensor_bytes(tensors_path):
    sd = {
        "real": torch.arange(6, dtype=torch.float32),
        "meta": torch.empty(4, 3, device="meta"),
        "meta_bf16": torch.empty(5, device="meta", dtype=torch.bfloat16),  # 2.11.1 cannot read this
    }
    path = tensors_path()
    write_sd(path, sd)
    eager = TensorDeserializer(path, device="cpu", verify_hash=True)
    lazy = TensorDeserializer(path, device="cpu", lazy_load=True, verify_hash=True)
    for d in (eager, lazy):
        assert torch.equal(d["meta"], torch.zeros(4, 3))
        assert d["meta_bf16"].dtype == torch.bfloat16 and not d["meta_bf16"].any()
        assert torch.equal(d["real"], sd["real"])
    # Eager mode reports the data bytes (meta tensors count 0); lazy mode the deserialized bytes.
    assert eager.total_tensor_bytes == 24
    assert lazy.total_tensor_bytes == 24 + 48 + 10
    assert eager.total_file_bytes == lazy.total_file_bytes == 24
    assert eager.total_bytes_read > 24
    eager.close()
    lazy.close()
    with open(path, "rb") as f:
        assert int.from_bytes(f.read(9)[5:9], "little") == 4  # meta tensors make it v4


def test_numpy_arrays_written(tensors_path):
    arrays = {
        "f32": numpy.arange(12, dtype=numpy.float32).reshape(3, 4),
        "fortran": numpy.asfortranarray(numpy.arange(6, dtype=numpy.int32).reshape(2, 3)),
        "big_endian": numpy.arange(5, dtype=">i4"),
        "bool": numpy.array([True, False]),
        "scalar": numpy.array(3.5),
        "u16": numpy.arange(3, dtype=numpy.uint16),
    }
    path = tensors_path()
    with TensorSerializer(path) as s:
        for i, (k, v) in enumerate(arrays.items()):
            s.write_tensor(i, k, TensorType.BUFFER, v)
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        got = {name: (idx, kind, arr) for idx, kind, name, arr, _, _ in d.read_numpy_arrays()}
    for i, (k, v) in enumerate(arrays.items()):
        idx, kind, arr = got[k]
        assert idx == i and kind == TensorType.BUFFER
        numpy.testing.assert_array_equal(arr, v)
        assert arr.dtype == v.dtype.newbyteorder("=")


def test_numpy_dtype_without_torch_equivalent(tensors_path):
    with TensorSerializer(tensors_path()) as s:
        for bad in (numpy.array(["a"]), numpy.array([object()]), numpy.zeros(2, "datetime64[s]")):
            with pytest.raises(TypeError):
                s.write_tensor(0, "x", TensorType.PARAM, bad)
        s.write_tensor(0, "ok", TensorType.PARAM, numpy.zeros(2))


# ---------------------------------------------------------------------------------------------
# structure, mapping, tree, filters


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


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_nested_structure(tensors_path, lazy):
    path = tensors_path()
    write_sd(path, NESTED)
    with TensorDeserializer(path, device="cpu", lazy_load=lazy) as d:
        assert list(d.keys()) == ["model", "lm_head", "ünïcode.name"]
        assert len(d) == 3 and "model" in d and "nope" not in d and 0 not in d
        model = d["model"]
        assert isinstance(model, types.MappingProxyType)
        assert list(model.keys()) == ["layers", "norm"]
        layers = model["layers"]
        assert isinstance(layers, types.MappingProxyType) and list(layers.keys()) == [0, 1]
        assert torch.equal(layers[1]["bias"], NESTED["model"]["layers"][1]["bias"])
        with pytest.raises(TypeError):
            model["x"] = 1
        tree = d.tree()
        assert isinstance(tree, dict) and isinstance(tree["model"]["layers"], list)
        assert torch.equal(tree["model"]["layers"][0]["weight"], torch.arange(4.0))
        sub = d.tree(("model", "layers"))
        assert isinstance(sub, list) and len(sub) == 2
        assert torch.equal(d.tree(["model", "norm"]), torch.tensor([1.5]))
        assert d.tree(("missing",), default="dflt") == "dflt"
        with pytest.raises(TypeError):
            d.tree("model")
        with pytest.raises(KeyError, match="Tensor nope not found"):
            d["nope"]
        names = [name for _, _, name, _ in d.read_tensors()]
        assert names[0] == ("model", "layers", 0, "weight")
        assert "lm_head" in names and "ünïcode.name" in names
        assert all(kind == TensorType.STATE_DICT and idx == 0 for idx, kind, _, _ in d.read_tensors())


def test_top_level_list_and_tuple(tensors_path):
    path = tensors_path()
    write_sd(path, [torch.ones(1), (torch.zeros(2), torch.arange(3))])
    with TensorDeserializer(path, device="cpu") as d:
        assert list(d.keys()) == [0, 1]
        assert torch.equal(d[0], torch.ones(1))
        assert list(d[1].keys()) == [0, 1]
        tree = d.tree()
        assert isinstance(tree, list) and isinstance(tree[1], list)
        assert torch.equal(tree[1][1], torch.arange(3))
        with pytest.raises(KeyError):
            d["0"]


def test_filter_func(tensors_path):
    path = tensors_path()
    write_sd(path, NESTED)
    seen = []

    def keep(name):
        seen.append(name)
        return isinstance(name, tuple) and name[-1] == "weight" or name == "lm_head"

    with TensorDeserializer(path, device="cpu", filter_func=keep) as d:
        assert ("model", "layers", 0, "weight") in seen and "lm_head" in seen
        assert list(d.keys()) == ["model", "lm_head"]
        assert list(d["model"].keys()) == ["layers"]
        assert list(d["model"]["layers"][0].keys()) == ["weight"]
        assert len(list(d.read_tensors())) == 3
        # per-call filters on top
        assert [n for _, _, n, _ in d.read_tensors()] == []  # cursor at the end
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        only = d.tree(filter_func=lambda n: n == "lm_head")
        assert list(only.keys()) == ["lm_head"]


def test_read_tensors_cursor(tensors_path):
    path = tensors_path()
    sd = {k: torch.full((2,), float(i)) for i, k in enumerate("abcde")}
    write_sd(path, sd)
    for lazy in (False, True):
        with TensorDeserializer(path, device="cpu", lazy_load=lazy) as d:
            assert [t[2] for t in d.read_tensors(num_tensors=1)] == ["a"]
            assert [t[2] for t in d.read_tensors(num_tensors=2)] == ["b", "c"]
            # d[k] does not move the cursor (2.11.1 made it jump past k, and then failed on
            # earlier keys)
            assert torch.equal(d["e"], sd["e"])
            assert torch.equal(d["a"], sd["a"])
            assert [t[2] for t in d.read_numpy_arrays(num_tensors=1)] == ["d"]
            assert [t[2] for t in d.read_tensors()] == ["e"]
            assert list(d.read_tensors()) == []
            with pytest.raises(ValueError):
                list(d.read_tensors(num_tensors=-2))
            assert list(d.read_tensors(num_tensors=0)) == []
    # eager mode: read_tensors() right after the constructor yields everything
    with TensorDeserializer(path, device="cpu") as d:
        assert [t[2] for t in d.read_tensors()] == list("abcde")


def test_read_numpy_arrays_opaque(tensors_path):
    path = tensors_path()
    bf = torch.tensor([1.0, -2.5, 3.0], dtype=torch.bfloat16)
    write_sd(path, {"f": torch.arange(3.0), "bf": bf})
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        it = d.read_numpy_arrays()
        idx, kind, name, arr, opaque, tdt = next(it)
        assert (name, opaque, tdt) == ("f", False, None)
        numpy.testing.assert_array_equal(arr, numpy.arange(3.0, dtype=numpy.float32))
        with pytest.raises(ValueError, match="opaque"):
            next(it)
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        rows = list(d.read_numpy_arrays(allow_raw_data=True))
        _, _, name, arr, opaque, tdt = rows[1]
        assert (name, opaque, tdt) == ("bf", True, "torch.bfloat16")
        assert arr.dtype == numpy.dtype("<i2")
        assert arr.tobytes() == raw(bf)
    with TensorDeserializer(path, device="meta") as d:
        with pytest.raises(RuntimeError, match="only valid"):
            list(d.read_numpy_arrays())


def test_dtype_cast_only_floats(tensors_path):
    path = tensors_path()
    sd = {
        "f32": torch.arange(4.0),
        "i64": torch.tensor([1, 2, 3 << 40]),
        "c64": torch.tensor([1 + 2j], dtype=torch.complex64),
        "b": torch.tensor([True]),
        "bf": torch.ones(2, dtype=torch.bfloat16),
    }
    write_sd(path, sd)
    for lazy in (False, True):
        with TensorDeserializer(path, device="cpu", dtype=torch.float16, lazy_load=lazy) as d:
            assert d["f32"].dtype == torch.float16 and torch.equal(d["f32"], sd["f32"].half())
            assert d["bf"].dtype == torch.float16
            assert torch.equal(d["i64"], sd["i64"])  # 2.11.1 would give float16 (inf)
            assert d["c64"].dtype == torch.complex64  # 2.11.1 would drop the imaginary part
            assert d["b"].dtype == torch.bool


def test_file_objects_and_specs(tensors_path):
    path = tensors_path()
    write_sd(path, {"x": torch.arange(5), "y": torch.ones(2, 2)})
    data = path.read_bytes()
    specs = [
        str(path),
        path,  # PathLike
        os.fsencode(str(path)),  # bytes: a path (2.11.1: TypeError)
    ]
    for spec in specs:
        with TensorDeserializer(spec, device="cpu") as d:
            assert torch.equal(d["x"], torch.arange(5))
    bio = io.BytesIO(data)
    with TensorDeserializer(bio, device="cpu", num_readers=4) as d:
        assert torch.equal(d["y"], torch.ones(2, 2))
    with open(path, "rb") as f:
        d = TensorDeserializer(f, device="cpu", lazy_load=True)
        assert torch.equal(d["x"], torch.arange(5))
        d.close()
        assert f.closed  # as tensorizer: the deserializer owns the file object
    fd = os.open(path, os.O_RDONLY)
    try:
        with TensorDeserializer(fd, device="cpu") as d:
            assert torch.equal(d["x"], torch.arange(5))
    finally:
        os.close(fd)
    with open(path, "r") as f:
        with pytest.raises(ValueError, match="binary"):
            TensorDeserializer(f, device="cpu")


class _Unbuffered(io.RawIOBase):
    """A readable binary stream with no fileno (read into memory)."""

    def __init__(self, data):
        self._b = io.BytesIO(data)

    def readable(self):
        return True

    def readinto(self, b):
        return self._b.readinto(b)


def test_serializer_file_objects(tensors_path):
    sd = {"a": torch.arange(10.0), "b": torch.ones(3, dtype=torch.bfloat16)}
    ref = tensors_path()
    write_sd(ref, sd)
    bio = io.BytesIO()
    s = TensorSerializer(bio)
    s.write_state_dict(sd)
    s.close()
    assert bio.getvalue() == ref.read_bytes()  # BytesIO is left open with the data
    other = tensors_path()
    with open(other, "wb") as f:
        s = TensorSerializer(f)
        s.write_state_dict(sd)
        s.close()
        assert f.closed
    assert other.read_bytes() == ref.read_bytes()
    third = tensors_path()
    fd = os.open(third, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        s = TensorSerializer(fd)  # an int is a file descriptor (2.11.1: AttributeError)
        s.write_state_dict(sd)
        s.close()
    finally:
        os.close(fd)
    assert third.read_bytes() == ref.read_bytes()
    with TensorDeserializer(_Unbuffered(ref.read_bytes()), device="cpu") as d:
        assert_same(d["b"], sd["b"])


def test_embedded_offset_is_refused_clearly(tensors_path):
    ref = tensors_path()
    write_sd(ref, {"a": torch.arange(3)})
    bio = io.BytesIO(b"x" * 10 + ref.read_bytes())
    bio.seek(10)
    with pytest.raises(NotImplementedError, match="nonzero offset"):
        TensorDeserializer(bio, device="cpu")
    out = io.BytesIO(b"prefix")
    out.seek(6)
    with pytest.raises(NotImplementedError, match="nonzero offset"):
        TensorSerializer(out)


def test_serializer_context_manager_discards_on_error(tensors_path):
    path = tensors_path()
    with pytest.raises(RuntimeError, match="boom"):
        with TensorSerializer(path) as s:
            s.write_tensor(0, "a", TensorType.PARAM, torch.ones(2))
            raise RuntimeError("boom")
    assert not path.exists()
    s = TensorSerializer(path)
    s.write_tensor(0, "a", TensorType.PARAM, torch.ones(2))
    assert s.total_tensor_bytes == 8
    s.close()
    s.close()  # idempotent
    assert s.total_tensor_bytes == 8
    with pytest.raises(ValueError, match="closed"):
        s.write_tensor(0, "b", TensorType.PARAM, torch.ones(2))


def test_writer_does_not_touch_input(tensors_path):
    t = torch.arange(1 << 20, dtype=torch.float32)  # 4 MiB: several encryption chunks
    before = t.clone()
    with TensorSerializer(tensors_path(), encryption=tensorizer.EncryptionParams.random()) as s:
        s.write_tensor(0, "t", TensorType.PARAM, t)
    assert torch.equal(t, before)


# ---------------------------------------------------------------------------------------------
# modules


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


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_write_module_names_types_indices(tensors_path, tiny_model, lazy):
    path = tensors_path()
    with TensorSerializer(path) as s:
        s.write_module(tiny_model)
    expected = expected_module_entries(tiny_model)
    assert ".scale" in [e[2] for e in expected] and "head.weight" in [e[2] for e in expected]
    with TensorDeserializer(path, device="cpu", lazy_load=lazy, verify_hash=True) as d:
        got = list(d.read_tensors())
    assert [(i, k, n) for i, k, n, _ in got] == [(i, k, n) for i, k, n, _ in expected]
    for (_, _, _, a), (_, _, _, b) in zip(got, expected):
        assert_same(a, b)


def test_load_into_module(tensors_path, tiny_model):
    path = tensors_path()
    with TensorSerializer(path) as s:
        s.write_module(tiny_model)
    fresh = TinyModel()
    for p in fresh.parameters():
        torch.nn.init.zeros_(p)
    d = TensorDeserializer(path, device="cpu", lazy_load=True)
    assert d.load_into_module(fresh) == len(expected_module_entries(tiny_model))
    for (n, a), (_, b) in zip(tiny_model.state_dict().items(), fresh.state_dict().items()):
        assert_same(a, b)
    assert torch.equal(fresh.mask, tiny_model.mask)
    assert "mask" not in fresh.state_dict()  # stays non-persistent
    x = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(fresh.head(fresh.embed(x)), tiny_model.head(tiny_model.embed(x)))


def test_load_into_module_closes_file(tensors_path):
    path = tensors_path()
    lin = torch.nn.Linear(2, 2)
    with TensorSerializer(path) as s:
        s.write_module(lin)
    d = TensorDeserializer(path, device="cpu", lazy_load=True, filter_func=lambda n: n == ".weight")
    target = torch.nn.Linear(2, 2)
    assert d.load_into_module(target) == 1
    assert torch.equal(target.weight, lin.weight)
    d2 = TensorDeserializer(path, device="cpu", lazy_load=True)
    d2.load_into_module(torch.nn.Linear(2, 2), filter_func=lambda n: n == ".weight")
    with pytest.raises(OSError, match="closed"):
        d2[".bias"]


def test_load_into_module_checks_before_loading(tensors_path):
    sd_path = tensors_path()
    write_sd(sd_path, {"weight": torch.ones(2, 2)})
    m = torch.nn.Linear(2, 2)
    before = m.weight.detach().clone()
    with TensorDeserializer(sd_path, device="cpu") as d:
        with pytest.raises(NotImplementedError, match="write_state_dict"):
            d.load_into_module(m)
    assert torch.equal(m.weight, before)
    mod_path = tensors_path()
    with TensorSerializer(mod_path) as s:
        s.write_tensor(0, ".weight", TensorType.PARAM, torch.ones(2, 2))
        s.write_tensor(1, "missing.weight", TensorType.PARAM, torch.ones(2))
    with TensorDeserializer(mod_path, device="cpu") as d:
        with pytest.raises(KeyError):
            d.load_into_module(m)
    assert torch.equal(m.weight, before)  # nothing attached


def test_load_into_module_replaces_other_kind(tensors_path):
    """2.11.1: KeyError "attribute 'bias' already exists" (coreweave/tensorizer#67)."""
    path = tensors_path()
    with TensorSerializer(path) as s:
        s.write_tensor(0, ".bias", TensorType.PARAM, torch.arange(3.0))
        s.write_tensor(0, ".weight", TensorType.BUFFER, torch.ones(3, 3))
        s.write_tensor(0, ".plain", TensorType.BUFFER, torch.zeros(1))
    m = torch.nn.Module()
    m.register_buffer("bias", torch.zeros(3))
    m.weight = torch.nn.Parameter(torch.zeros(3, 3))
    m.plain = 5
    with TensorDeserializer(path, device="cpu") as d:
        assert d.load_into_module(m) == 3
    assert "bias" in dict(m.named_parameters()) and "bias" not in dict(m.named_buffers())
    assert "weight" in dict(m.named_buffers()) and "weight" not in dict(m.named_parameters())
    assert torch.equal(m.bias, torch.arange(3.0)) and torch.equal(m.plain, torch.zeros(1))


def test_write_module_options(tensors_path, tiny_model):
    path = tensors_path()
    with TensorSerializer(path) as s:
        s.write_module(tiny_model, include_non_persistent_buffers=False)
    with TensorDeserializer(path, device="cpu") as d:
        keys = list(d.keys())
    assert ".mask" not in keys
    assert ".scale" in keys and ".ids" in keys  # root persistent buffers kept (2.11.1 drops them)
    assert keys == [n for _, _, n, _ in expected_module_entries(tiny_model, False)]
    m = make_tiny_model()
    with TensorSerializer(tensors_path()) as s:
        s.write_module(m, remove_tensors=True)
    assert m.embed.weight is None and m.scale is None and m.layers[0].bias is None


def test_verify_module(tensors_path, tiny_model):
    path = tensors_path()
    with TensorSerializer(path) as s:
        s.write_module(tiny_model)
    for lazy in (False, True):
        with TensorDeserializer(path, device="cpu", lazy_load=lazy) as d:
            ok, results = d.verify_module(tiny_model)
            assert ok, [r for r in results if not r[1]]
            assert len(results) == len(expected_module_entries(tiny_model))
            other = make_tiny_model()
            with torch.no_grad():
                other.layers[1].weight.add_(1)
            ok, results = d.verify_module(other)
            assert not ok
            assert [n for n, good in results if not good] == ["layers.1.weight"]
    # in-memory source: the hashes survive the eager close
    with TensorDeserializer(io.BytesIO(path.read_bytes()), device="cpu") as d:
        assert d.verify_module(tiny_model)[0]


def test_verify_hash_detects_corruption(tensors_path):
    path = tensors_path()
    write_sd(path, {"a": torch.arange(100.0), "b": torch.arange(10)})
    data = bytearray(path.read_bytes())
    a_data = tensor_layout(bytes(data))[0]["data_offset"]
    data[a_data + 17] ^= 0xFF
    bad = tensors_path("bad")
    bad.write_bytes(bytes(data))
    with pytest.raises(HashMismatchError):
        TensorDeserializer(bad, device="cpu", verify_hash=True)
    with TensorDeserializer(bad, device="cpu", lazy_load=True, verify_hash=True) as d:
        assert torch.equal(d["b"], torch.arange(10))
        with pytest.raises(HashMismatchError):
            d["a"]
    with TensorDeserializer(bad, device="cpu") as d:  # unverified: loads silently
        assert not torch.equal(d["a"], torch.arange(100.0))
    with TensorDeserializer(bad, device="cpu", lazy_load=True) as d:
        with pytest.raises(HashMismatchError):
            list(d.read_tensors(verify_hash=True))


def test_device_handling(tensors_path):
    path = tensors_path()
    write_sd(path, {"a": torch.arange(3.0)})
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            TensorDeserializer(path, device="cuda")
        with TensorDeserializer(path) as d:  # default device: cpu without CUDA
            assert d["a"].device.type == "cpu"
    with TensorDeserializer(path, device="meta") as d:
        assert d["a"].device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_cuda_round_trip(tensors_path, lazy):
    sd = {str(dt): random_tensor(dt, (33, 7), seed=i) for i, dt in enumerate(DTYPES)}
    sd["empty"] = torch.empty(0, 5)
    sd["meta"] = torch.empty(3, device="meta")
    path = tensors_path()
    write_sd(path, sd)
    with TensorDeserializer(path, device="cuda", lazy_load=lazy, verify_hash=True) as d:
        for k, v in sd.items():
            got = d[k]
            assert got.device.type == "cuda"
            if k == "meta":
                assert not got.any()
            else:
                assert_same(got.cpu(), v)
    with TensorDeserializer(path, device="cuda:0", dtype=torch.float16) as d:
        assert d["torch.float32"].dtype == torch.float16


# ---------------------------------------------------------------------------------------------
# byte identity with the real tensorizer 2.11.1


def _sd_for_identity():
    torch.manual_seed(3)
    sd = {
        "f32": torch.randn(4, 5),
        "f16": torch.randn(3).half(),
        "bf16": torch.randn(2, 3).to(torch.bfloat16),
        "i64_scalar": torch.tensor(7),
        "bool": torch.tensor([True, False, True]),
        "c64": torch.randn(2, dtype=torch.complex64),
        "empty": torch.empty(0, 3),
        "transposed": torch.arange(6, dtype=torch.int16).reshape(2, 3).t(),
        "u8": torch.arange(5, dtype=torch.uint8),
        "dotted.name.ü": torch.ones(1),
    }
    for name in ("float8_e4m3fn", "float8_e5m2", "uint16"):
        dt = getattr(torch, name, None)
        if isinstance(dt, torch.dtype):
            sd[name] = torch.arange(4, dtype=torch.float32).to(dt)
    return sd


IDENTITY_SCRIPT = """
import torch, pickle, sys
from tensorizer import TensorSerializer, TensorType
sd = torch.load("sd.pt")
s = TensorSerializer("real_sd.tensors"); s.write_state_dict(sd); s.close()
s = TensorSerializer("real_nested.tensors"); s.write_state_dict(torch.load("nested.pt")); s.close()
m = make_tiny_model()
s = TensorSerializer("real_module.tensors"); s.write_module(m); s.close()
s = TensorSerializer("real_meta.tensors")
s.write_tensor(3, "meta", TensorType.BUFFER, torch.empty(4, 2, device="meta"))
s.write_tensor(1, "x", TensorType.PARAM, torch.arange(3.0))
s.close()
import numpy
s = TensorSerializer("real_numpy.tensors")
s.write_tensor(0, "np_f64", TensorType.PARAM, numpy.linspace(0, 1, 7))
s.write_tensor(2, "np_i8", TensorType.BUFFER, numpy.arange(-3, 3, dtype=numpy.int8).reshape(2, 3))
s.write_tensor(5, "np_bool", TensorType.STATE_DICT, numpy.array([[True], [False]]))
s.close()
"""


def test_byte_identical_to_real_tensorizer(tmp_path, real_tensorizer, tiny_model):
    sd = _sd_for_identity()
    torch.save(sd, tmp_path / "sd.pt")
    torch.save(NESTED, tmp_path / "nested.pt")
    real_tensorizer(IDENTITY_SCRIPT)

    write_sd(tmp_path / "ours_sd.tensors", sd)
    write_sd(tmp_path / "ours_nested.tensors", NESTED)
    with TensorSerializer(tmp_path / "ours_module.tensors") as s:
        s.write_module(tiny_model)
    with TensorSerializer(tmp_path / "ours_meta.tensors") as s:
        s.write_tensor(3, "meta", TensorType.BUFFER, torch.empty(4, 2, device="meta"))
        s.write_tensor(1, "x", TensorType.PARAM, torch.arange(3.0))
    with TensorSerializer(tmp_path / "ours_numpy.tensors") as s:
        s.write_tensor(0, "np_f64", TensorType.PARAM, numpy.linspace(0, 1, 7))
        s.write_tensor(2, "np_i8", TensorType.BUFFER, numpy.arange(-3, 3, dtype=numpy.int8).reshape(2, 3))
        s.write_tensor(5, "np_bool", TensorType.STATE_DICT, numpy.array([[True], [False]]))
    for name in ("sd", "nested", "module", "meta", "numpy"):
        ours = (tmp_path / f"ours_{name}.tensors").read_bytes()
        real = (tmp_path / f"real_{name}.tensors").read_bytes()
        assert len(ours) == len(real), name
        assert ours == real, f"{name}: first difference at byte {_first_diff(ours, real)}"


def _first_diff(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


REAL_READS_OURS = """
import torch, hashlib, json
from tensorizer import TensorDeserializer
def raw(t):
    t = t.detach().cpu().contiguous()
    return b"" if t.numel() == 0 else t.reshape(-1).view(torch.uint8).numpy().tobytes()
out = {}
for lazy in (False, True):
    d = TensorDeserializer("ours.tensors", device="cpu", verify_hash=True, lazy_load=lazy)
    out[str(lazy)] = {k: [str(v.dtype), list(v.shape), hashlib.sha256(raw(v)).hexdigest()] for k, v in d.items()}
    d.close()
m = make_tiny_model(seed=5)
for p in m.parameters():
    torch.nn.init.zeros_(p)
d = TensorDeserializer("ours_module.tensors", device="cpu", verify_hash=True)
d.load_into_module(m)
out["module"] = {k: hashlib.sha256(raw(v)).hexdigest() for k, v in m.state_dict().items()}
print(json.dumps(out))
"""


def test_real_tensorizer_reads_ours(tmp_path, real_tensorizer, tiny_model):
    sd = _sd_for_identity()
    sd = {k: v for k, v in sd.items() if v.numel() or v.dtype != torch.bfloat16}
    write_sd(tmp_path / "ours.tensors", sd)
    with TensorSerializer(tmp_path / "ours_module.tensors") as s:
        s.write_module(tiny_model)
    out = json.loads(real_tensorizer(REAL_READS_OURS))
    for lazy in ("False", "True"):
        assert list(out[lazy]) == list(sd)
        for k, v in sd.items():
            assert out[lazy][k] == [str(v.dtype), list(v.shape), sha(v)], k
    # 2.11.1's load_into_module registers every buffer as persistent, so its state_dict also
    # has the non-persistent "mask"
    assert out["module"].pop("mask") == sha(tiny_model.mask)
    assert out["module"] == {k: sha(v) for k, v in tiny_model.state_dict().items()}


def test_we_read_real_tensorizer_files(tmp_path, real_tensorizer, tiny_model):
    sd = _sd_for_identity()
    torch.save(sd, tmp_path / "sd.pt")
    torch.save(NESTED, tmp_path / "nested.pt")
    real_tensorizer(IDENTITY_SCRIPT)
    for lazy in (False, True):
        with TensorDeserializer(tmp_path / "real_sd.tensors", device="cpu", verify_hash=True, lazy_load=lazy) as d:
            assert list(d.keys()) == list(sd)
            for k, v in sd.items():
                assert_same(d[k], v.contiguous())
        with TensorDeserializer(tmp_path / "real_nested.tensors", device="cpu", verify_hash=True, lazy_load=lazy) as d:
            tree = d.tree()
            assert torch.equal(tree["model"]["layers"][1]["bias"], NESTED["model"]["layers"][1]["bias"])
    fresh = TinyModel()
    with TensorDeserializer(tmp_path / "real_module.tensors", device="cpu", verify_hash=True) as d:
        d.load_into_module(fresh)
        assert d.verify_module(tiny_model)[0]
    for (_, a), (_, b) in zip(tiny_model.state_dict().items(), fresh.state_dict().items()):
        assert_same(a, b)
    with TensorDeserializer(tmp_path / "real_meta.tensors", device="cpu", lazy_load=True) as d:
        rows = list(d.read_tensors())
        assert [(i, int(k), n) for i, k, n, _ in rows] == [(3, 1, "meta"), (1, 0, "x")]
        assert torch.equal(rows[0][3], torch.zeros(4, 2))


# ---------------------------------------------------------------------------------------------
# the reference vectors (written by the vectors_dir session fixture, conftest.py)


def _manifest(vectors_dir, name):
    return json.loads((vectors_dir / f"{name}.manifest.json").read_text())


@pytest.mark.parametrize("name", ["small_mixed", "module", "nested", "meta_v4", "encrypted"])
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_reference_vectors(vectors_dir, name, lazy):
    manifest = _manifest(vectors_dir, name)
    enc = None
    if manifest.get("encryption"):
        enc = tensorizer.DecryptionParams.from_key(bytes.fromhex(manifest["encryption"]["key_hex"]))
    path = vectors_dir / f"{name}.tensors"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == manifest["file_sha256"]
    with TensorDeserializer(path, device="cpu", verify_hash=True, lazy_load=lazy, encryption=enc) as d:
        rows = list(d.read_tensors())
        assert len(rows) == manifest["tensor_count"] == len(manifest["tensors"])
        assert d.total_file_bytes == manifest["file_header"]["header_tensor_size"]
        for (idx, kind, name_, t), m in zip(rows, manifest["tensors"]):
            want_name = m["name"] if m["name"] is not None else tuple(m["path"])
            assert name_ == want_name
            assert str(t.dtype) == m["dtype"]
            assert list(t.shape) == m["shape"]
            assert kind.name == m["tensor_type"]
            assert idx == m["file"]["module_idx"]
            assert hashlib.sha256(raw(t)).hexdigest() == m["sha256"], want_name


def test_reference_module_vector_load_into_module(vectors_dir):
    path = vectors_dir / "module.tensors"
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        names = list(d.keys())
    # the tiny model of the vectors is not ours; check load_into_module through a module tree
    # built from the names themselves
    root = torch.nn.Module()
    for n in names:
        parts = n.split(".")[:-1]
        mod = root
        for p in parts:
            if p == "":
                continue
            if not hasattr(mod, p):
                mod.add_module(p, torch.nn.Module())
            mod = getattr(mod, p)
    with TensorDeserializer(path, device="cpu", verify_hash=True) as d:
        assert d.load_into_module(root) == len(names)
        ok, results = d.verify_module(root)
        assert ok, [r for r in results if not r[1]]


# ---------------------------------------------------------------------------------------------
# Redis (to_redis and redis:// reads), and stream_io streams


SERVERS = __import__("pathlib").Path(__file__).resolve().parents[2] / "scripts" / "servers"
REDIS_PORT_BASE = 25600  # redis on 25979 (test_stream_io uses 23600, CTest 18000)


@pytest.fixture(scope="module")
def redis_client(tmp_path_factory):
    import shutil
    import subprocess

    redis = pytest.importorskip("redis")
    if shutil.which("redis-server") is None or shutil.which("bash") is None:
        pytest.skip("redis-server not installed")
    root = tmp_path_factory.mktemp("redis")
    script = str(SERVERS / "redis.sh")
    out = subprocess.run(["bash", script, "start", str(root), str(REDIS_PORT_BASE)],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        pytest.skip(f"redis.sh could not start a server: {out.stderr.strip()[-300:]}")
    client = redis.Redis(host="127.0.0.1", port=REDIS_PORT_BASE + 379)
    yield client
    client.close()
    subprocess.run(["bash", script, "stop", str(root), str(REDIS_PORT_BASE)], capture_output=True, timeout=60)


def _redis_uri(prefix):
    return f"redis://127.0.0.1:{REDIS_PORT_BASE + 379}/{prefix}"


def test_to_redis_and_back(tensors_path, redis_client):
    sd = {"a": torch.arange(10.0), "b.c": torch.ones(3, dtype=torch.bfloat16), "empty": torch.empty(0)}
    path = tensors_path()
    write_sd(path, sd)
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        d.to_redis(redis_client, "ours")
    keys = sorted(k.decode() for k in redis_client.keys("ours:*"))
    layout = tensor_layout(path.read_bytes())
    assert "ours:header:0" in keys
    assert redis_client.get("ours:header:0") == path.read_bytes()[:262217]
    for e in layout:
        name = e["raw_name"].decode()
        assert redis_client.get(f"ours:{name}:{e['header_offset']}") == path.read_bytes()[e["header_offset"]:e["data_offset"]]
    for lazy in (False, True):
        with TensorDeserializer(_redis_uri("ours"), device="cpu", lazy_load=lazy, verify_hash=True) as d:
            for k, v in sd.items():
                assert_same(d[k], v)
    # through a stream_io stream (the deserializer uses its native source)
    from tensorizer import stream_io

    stream = stream_io.open_stream(_redis_uri("ours"), "rb")
    assert getattr(stream, "_tz_source", None) is not None
    with TensorDeserializer(stream, device="cpu") as d:
        assert_same(d["b.c"], sd["b.c"])
    # eager deserializers closed their file: to_redis needs lazy_load=True
    with TensorDeserializer(path, device="cpu") as d:
        with pytest.raises(OSError, match="closed"):
            d.to_redis(redis_client, "again")


REAL_TO_REDIS = """
import torch, redis, json, sys
from tensorizer import TensorDeserializer, TensorSerializer
port = int(sys.argv[1]) if len(sys.argv) > 1 else {port}
client = redis.Redis(host="127.0.0.1", port=port)
s = TensorSerializer("real.tensors"); s.write_state_dict({{"x": torch.arange(7.0), "y": torch.tensor([1, 2])}}); s.close()
TensorDeserializer("real.tensors", lazy_load=True, device="cpu").to_redis(client, "real")
d = TensorDeserializer("redis://127.0.0.1:{port}/ours2", device="cpu", verify_hash=True)
print(json.dumps({{k: v.tolist() for k, v in d.items()}}))
"""


def test_redis_cross_with_real_tensorizer(tensors_path, redis_client, real_tensorizer):
    path = tensors_path()
    write_sd(path, {"p": torch.arange(4.0), "q": torch.tensor([True, False])})
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        d.to_redis(redis_client, "ours2")
    out = json.loads(real_tensorizer(REAL_TO_REDIS.format(port=REDIS_PORT_BASE + 379)))
    assert out == {"p": [0.0, 1.0, 2.0, 3.0], "q": [True, False]}
    with TensorDeserializer(_redis_uri("real"), device="cpu", verify_hash=True) as d:
        assert torch.equal(d["x"], torch.arange(7.0)) and torch.equal(d["y"], torch.tensor([1, 2]))


def test_stream_like_object_with_native_source(tensors_path):
    """Any object carrying a ``_tz_source`` (what stream_io streams do) is read through it."""
    from tensorizer import _C

    path = tensors_path()
    write_sd(path, {"a": torch.arange(3)})

    class Stream:
        closed = False

        def __init__(self):
            self._tz_source = _C.Source.open(str(path))

        def close(self):
            self.closed = True

    s = Stream()
    with TensorDeserializer(s, device="cpu") as d:
        assert torch.equal(d["a"], torch.arange(3))
    assert s.closed


@pytest.mark.parametrize("kind", ["stream", "bytesio", "fileobj", "path"])
def test_module_details_after_eager_close(tensors_path, tiny_model, kind):
    """Module indices (read_tensors) and stored hashes (verify_module) stay available after
    the eager constructor closed the file, whatever the source."""
    from tensorizer import _C

    path = tensors_path()
    with TensorSerializer(path) as s:
        s.write_module(tiny_model)

    class Stream:
        def __init__(self):
            self._tz_source = _C.Source.open(str(path))

        def close(self):
            pass

    source = {
        "stream": Stream,
        "bytesio": lambda: io.BytesIO(path.read_bytes()),
        "fileobj": lambda: open(path, "rb"),
        "path": lambda: str(path),
    }[kind]()
    with TensorDeserializer(source, device="cpu") as d:
        rows = [(i, k, n) for i, k, n, _ in d.read_tensors()]
        assert rows == [(i, k, n) for i, k, n, _ in expected_module_entries(tiny_model)]
        assert d.verify_module(tiny_model)[0]


def test_safetensors_files(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    sd = {"a": torch.arange(4.0), "b": torch.ones(2, dtype=torch.bfloat16), "c": torch.tensor([1, 2])}
    path = tmp_path / "x.safetensors"
    safetensors_torch.save_file(sd, str(path))
    for lazy in (False, True):
        with TensorDeserializer(path, device="cpu", lazy_load=lazy) as d:
            assert sorted(d.keys()) == ["a", "b", "c"]
            for k, v in sd.items():
                assert_same(d[k], v)


def test_file_header_and_flags_report_the_file_header(tmp_path):
    path = tmp_path / "m.tensors"
    with TensorSerializer(str(path)) as s:
        s.write_state_dict({"a": torch.arange(4.0), "b": torch.zeros(2)})
    with TensorDeserializer(str(path)) as d:
        header = d._file_header
        assert isinstance(header, tensorizer.serialization._FileHeader)
        assert header.tensor_count == 2 and header.tensor_size == d.total_file_bytes
        assert header.version_number >= 1
        assert tensorizer.serialization._FileFeatureFlags.encrypted not in d._file_flags


def test_a_replaced_tensor_hash_changes_what_verification_expects(tmp_path, monkeypatch):
    # 2.11.1's test_verification_fail replaces serialization.TensorHash with one that zeroes hashes.
    path = tmp_path / "m.tensors"
    with TensorSerializer(str(path)) as s:
        s.write_state_dict({"a": torch.arange(4.0), "b": torch.ones(3)})
    original = tensorizer.serialization.TensorHash

    def zeroed(*args, **kwargs):
        h = original(*args, **kwargs)
        h.hash = bytes(len(h.hash))
        return h

    monkeypatch.setattr(tensorizer.serialization, "TensorHash", zeroed)
    for readers in (1, 4):
        with pytest.raises(HashMismatchError, match="Tensor 'a' failed CRC32 verification"):
            TensorDeserializer(str(path), verify_hash=True, num_readers=readers).close()
    with TensorDeserializer(str(path), lazy_load=True, verify_hash=True) as d:
        with pytest.raises(HashMismatchError):
            d["b"]
    TensorDeserializer(str(path)).close()  # unverified loads do not look
    monkeypatch.setattr(tensorizer.serialization, "TensorHash", original)
    TensorDeserializer(str(path), verify_hash=True).close()

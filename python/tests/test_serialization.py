"""TensorSerializer / TensorDeserializer: round trips of every dtype and shape, structure, file
objects, modules, verification and devices (against the real tensorizer 2.11.1 and the reference
vectors: test_serialization_cross.py)."""

import io
import os
import types

import numpy
import pytest
import torch


import tensorizer
from tensorizer import TensorDeserializer, TensorSerializer, TensorType
from tensorizer.serialization import HashMismatchError

from tensor_helpers import DTYPES, NESTED, assert_same, expected_module_entries, random_tensor, raw, write_sd

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
# other sources and kinds


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

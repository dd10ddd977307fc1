"""TensorSerializer / TensorDeserializer with torch modules: write_module's names, types and
indices, load_into_module, verify_module, hash verification, and devices."""

import io

import pytest
import torch

from conftest import TinyModel, make_tiny_model, tensor_layout
from tensor_helpers import DTYPES, assert_same, expected_module_entries, random_tensor, write_sd

from tensorizer import TensorDeserializer, TensorSerializer, TensorType
from tensorizer.serialization import HashMismatchError

# ---------------------------------------------------------------------------------------------
# modules


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

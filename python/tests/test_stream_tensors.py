"""Tensors as they land (beyond 2.11.1): ``TensorDeserializer.stream()`` yields each tensor once, in
file order, checked, while the rest still loads; a failure raises after the tensors handed over
before it, which stay valid. (That a tensor is handed over long before the load ends is checked
by the engine's ready_test; the device path by tests/python/device_emulated.py.)"""

import gc

import pytest
import torch

from tensorizer import TensorDeserializer, TensorSerializer
from tensorizer.serialization import HashMismatchError
from tensorizer._crypt import DecryptionParams, EncryptionParams


def layers(n=12, width=96):
    g = torch.Generator().manual_seed(7)
    return {f"layer.{i}.weight": torch.randn(width + i, width, generator=g) for i in range(n)}


@pytest.fixture
def model(tmp_path):
    tensors = layers()
    path = tmp_path / "m.tensors"
    with TensorSerializer(path) as s:
        s.write_state_dict(tensors)
    return path, tensors


def test_stream_yields_every_tensor_once_in_file_order_and_keeps_them(model):
    path, tensors = model
    with TensorDeserializer(path, device="cpu", lazy_load=True, verify_hash=True) as d:
        got = list(d.stream())
        assert [k for k, _ in got] == list(tensors)  # file order = the order written
        for k, t in got:
            assert torch.equal(t, tensors[k])
            assert d[k] is t  # kept: nothing is read again


def test_stream_as_each_completes_and_filtered(model):
    path, tensors = model
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        got = dict(d.stream(in_file_order=False))
    assert sorted(got) == sorted(tensors)
    assert all(torch.equal(got[k], tensors[k]) for k in tensors)
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        first = d["layer.3.weight"]  # loaded already: yielded first
        names = [k for k, _ in d.stream(filter_func=lambda n: n in ("layer.1.weight", "layer.3.weight"))]
        assert names == ["layer.3.weight", "layer.1.weight"]
        assert d["layer.3.weight"] is first


def test_stream_of_an_encrypted_model_yields_plaintext(tmp_path):
    tensors = layers(4)
    enc = EncryptionParams.random()
    path = tmp_path / "enc.tensors"
    with TensorSerializer(path, encryption=enc) as s:
        s.write_state_dict(tensors)
    dec = DecryptionParams.from_key(enc.key)
    with TensorDeserializer(path, device="cpu", lazy_load=True, encryption=dec, verify_hash=True) as d:
        for k, t in d.stream():
            assert torch.equal(t, tensors[k])


def test_a_corrupt_tensor_raises_after_the_earlier_ones_which_stay_intact(model, tmp_path):
    path, tensors = model
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        offset = d._entries[d._selected[6]].data_offset  # layer.6.weight
    data = bytearray(path.read_bytes())
    data[offset + 40] ^= 0x10
    bad = tmp_path / "bad.tensors"
    bad.write_bytes(bytes(data))
    got = []
    d = TensorDeserializer(bad, device="cpu", lazy_load=True, verify_hash=True)
    with pytest.raises(HashMismatchError, match="layer.6.weight"):
        for k, t in d.stream():
            got.append((k, t))
    d.close()
    del d
    gc.collect()
    assert [k for k, _ in got] == list(tensors)[: len(got)]
    assert len(got) <= 6
    for k, t in got:  # the failed load is gone; what it handed over is unchanged
        assert torch.equal(t, tensors[k])

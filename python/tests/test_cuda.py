"""The binding's CUDA path: loads straight to GPU memory through the engine's pinned ring, exported
as DLPack capsules and wrapped by torch. Every test compares against the same file loaded to host
memory (or against the tensors written), byte for byte. Skipped without a CUDA device.
"""

import gc
import hashlib
import json

import pytest
import torch

from conftest import make_tiny_model
from test_serialization import DTYPES, assert_same, random_tensor, raw, write_sd

import tensorizer
from tensorizer import TensorDeserializer, TensorSerializer
from tensorizer.serialization import HashMismatchError

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _mixed_sd():
    sd = {str(dt): random_tensor(dt, (129, 31), seed=i) for i, dt in enumerate(DTYPES)}
    sd["scalar"] = torch.tensor(2.5)
    sd["empty"] = torch.empty(0, 7)
    sd["meta"] = torch.empty(5, device="meta")
    return sd


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_every_dtype_lands_on_the_device_byte_for_byte(tensors_path, lazy):
    sd = _mixed_sd()
    path = tensors_path()
    write_sd(path, sd)
    with TensorDeserializer(path, device="cuda:0", lazy_load=lazy, verify_hash=True) as d:
        assert set(d.keys()) == set(sd)
        for k, v in sd.items():
            got = d[k]
            assert got.device == torch.device("cuda", 0), k
            if k == "meta":
                assert got.shape == v.shape and not got.any()
            else:
                assert_same(got.cpu(), v)


def test_tensors_outlive_the_deserializer_and_device_memory_is_returned(tensors_path):
    big = random_tensor(torch.float32, (64, 1024, 256), seed=7)  # 64 MiB
    path = tensors_path()
    write_sd(path, {"big": big, "small": torch.arange(10)})
    torch.cuda.synchronize()
    free_before, _ = torch.cuda.mem_get_info()
    d = TensorDeserializer(path, device="cuda:0")
    kept = d["big"]
    d.close()
    del d
    gc.collect()
    # the DLPack capsule keeps the engine's device allocation alive after the deserializer is gone
    assert raw(kept) == raw(big)  # random bits hold NaNs: compare bytes, not values
    free_held, _ = torch.cuda.mem_get_info()
    assert free_before - free_held >= big.numel() * 4
    del kept
    gc.collect()
    torch.cuda.synchronize()
    free_after, _ = torch.cuda.mem_get_info()
    # everything the load allocated (64 MiB and more) is back; allow the driver some slack
    assert free_before - free_after < 8 << 20, (free_before, free_after)


def test_repeated_loads_leak_no_device_memory(tensors_path):
    path = tensors_path()
    write_sd(path, {"w": torch.randn(1 << 20), "b": torch.randn(100)})
    for _ in range(2):  # warm: CUDA context, streams, the shared pinned ring
        with TensorDeserializer(path, device="cuda:0") as d:
            d["w"].sum().item()
    gc.collect()
    torch.cuda.synchronize()
    free_before, _ = torch.cuda.mem_get_info()
    for _ in range(30):
        with TensorDeserializer(path, device="cuda:0") as d:
            d["w"].sum().item()
        gc.collect()
    torch.cuda.synchronize()
    free_after, _ = torch.cuda.mem_get_info()
    assert free_before - free_after < 8 << 20, (free_before, free_after)


def test_a_tensor_larger_than_the_ring_with_hashes(tensors_path):
    # The engine's default ring is 16 x 4 MiB: 96 MiB is cut into many slots and hashed in order.
    big = random_tensor(torch.uint8, (96 << 20,), seed=3)
    path = tensors_path()
    write_sd(path, {"big": big, "after": torch.arange(7)})
    with TensorDeserializer(path, device="cuda:0", verify_hash=True) as d:
        assert raw(d["big"]) == raw(big)
        assert torch.equal(d["after"].cpu(), torch.arange(7))


def test_a_corrupt_split_tensor_raises_on_the_device_path(tensors_path):
    big = random_tensor(torch.uint8, (20 << 20,), seed=4)
    path = tensors_path()
    write_sd(path, {"big": big})
    data = bytearray(path.read_bytes())
    data[-1000] ^= 0x40  # inside big's data, far from its header
    path.write_bytes(bytes(data))
    with pytest.raises(HashMismatchError):
        with TensorDeserializer(path, device="cuda:0", verify_hash=True) as d:
            d["big"]


def test_encrypted_file_decrypts_onto_the_device(tensors_path):
    sd = _mixed_sd()
    sd["large"] = random_tensor(torch.float16, (3 << 20,), seed=9)  # 6 MiB: several cipher chunks
    enc = tensorizer.EncryptionParams.random()
    path = tensors_path()
    write_sd(path, sd, encryption=enc)
    dec = tensorizer.DecryptionParams.from_key(enc.key)
    with TensorDeserializer(path, device="cuda:0", encryption=dec, verify_hash=True) as d:
        for k, v in sd.items():
            if k != "meta":
                assert_same(d[k].cpu(), v)
    wrong = tensorizer.DecryptionParams.from_key(bytes(32))
    with pytest.raises(tensorizer.CryptographyError):
        with TensorDeserializer(path, device="cuda:0", encryption=wrong) as d:
            d["large"]


def test_filtered_load_uploads_only_the_selected_tensors(tensors_path):
    sd = {f"layer{i}.weight": random_tensor(torch.bfloat16, (256, 64), seed=i) for i in range(20)}
    path = tensors_path()
    write_sd(path, sd)
    keep = {"layer3.weight", "layer17.weight"}
    with TensorDeserializer(path, device="cuda:0", filter_func=lambda n: n in keep) as d:
        assert set(d.keys()) == keep
        for k in keep:
            assert_same(d[k].cpu(), sd[k])


def test_load_into_module_on_the_device(tensors_path):
    model = make_tiny_model(seed=5)
    path = tensors_path()
    with TensorSerializer(str(path)) as s:
        s.write_module(model)
    fresh = make_tiny_model(seed=99).to("cuda")
    with TensorDeserializer(path, device="cuda:0", verify_hash=True) as d:
        d.load_into_module(fresh)
    want = model.state_dict()
    for k, v in fresh.state_dict().items():
        assert v.device.type == "cuda", k
        assert_same(v.cpu(), want[k])
    with torch.no_grad():
        x = torch.arange(6).reshape(2, 3)
        assert torch.equal(fresh.embed(x.cuda()).cpu(), model.embed(x))


def test_bare_cuda_follows_the_torch_device_context(tensors_path):
    path = tensors_path()
    write_sd(path, {"a": torch.arange(12.0)})
    with torch.device("cuda:0"):
        with TensorDeserializer(path, device="cuda") as d:
            assert d["a"].device == torch.device("cuda", 0)
    with TensorDeserializer(path, device=0) as d:
        assert d["a"].device == torch.device("cuda", 0)


def test_dtype_cast_happens_on_the_device(tensors_path):
    path = tensors_path()
    src = torch.randn(1000)
    write_sd(path, {"f": src, "i": torch.arange(5)})
    with TensorDeserializer(path, device="cuda:0", dtype=torch.bfloat16) as d:
        assert d["f"].dtype == torch.bfloat16 and d["f"].device.type == "cuda"
        assert torch.equal(d["f"].cpu(), src.to(torch.bfloat16))
        assert d["i"].dtype == torch.int64  # integers are never cast


def test_reference_vectors_on_the_device(vectors_dir):
    for manifest_path in sorted(vectors_dir.glob("*.manifest.json")):
        m = json.loads(manifest_path.read_text())
        path = vectors_dir / manifest_path.name.replace(".manifest.json", ".tensors")
        enc = None
        if m.get("encryption"):
            enc = tensorizer.DecryptionParams.from_key(bytes.fromhex(m["encryption"]["key_hex"]))
        with TensorDeserializer(path, device="cuda:0", verify_hash=True, lazy_load=True, encryption=enc) as d:
            rows = list(d.read_tensors())
        assert len(rows) == len(m["tensors"]), path.name
        for (_, _, name, t), want in zip(rows, m["tensors"]):
            assert t.device.type == "cuda", (path.name, name)
            assert hashlib.sha256(raw(t)).hexdigest() == want["sha256"], (path.name, name)


def test_perf_stats_count_device_bytes(tensors_path, monkeypatch):
    from tensorizer import serialization

    path = tensors_path()
    write_sd(path, {"w": torch.randn(1 << 18)})
    monkeypatch.setattr(serialization, "_perf_stats", dict.fromkeys(
        ("tensor_to_device_secs", "tensor_to_device_bytes", "file_readinto_secs", "file_readinto_bytes",
         "verify_secs", "decrypt_secs", "load_secs", "loads"), 0))
    with TensorDeserializer(path, device="cuda:0") as d:
        d["w"]
    stats = serialization._get_perf_stats()
    assert stats["loads"] == 1
    assert stats["tensor_to_device_bytes"] >= (1 << 18) * 4
    assert stats["load_secs"] > 0

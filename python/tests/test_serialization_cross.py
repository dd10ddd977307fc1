"""TensorSerializer / TensorDeserializer against the real tensorizer 2.11.1: byte-identical files,
each reading the other's files (local and through Redis), and the reference vectors
(tests/vectors/make_vectors.py)."""

import hashlib
import json

import numpy
import pytest
import torch

from conftest import TinyModel, tensor_layout
from tensor_helpers import NESTED, assert_same, raw, sha, write_sd

import tensorizer
from tensorizer import TensorDeserializer, TensorSerializer, TensorType

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

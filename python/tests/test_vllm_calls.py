"""The tensorizer calls vLLM makes, kept in our suite.

vLLM loads ``load_format="tensorizer"`` (and writes such checkpoints) through the ``tensorizer``
package: encryption keys, ``open_stream`` on the URI with its S3 keyword arguments always passed,
``TensorSerializer`` over that stream with a meta-device marker parameter on the root module,
``TensorDeserializer`` with vLLM's keyword arguments, the ``tensorizer.utils`` helpers and files
sharded by rank. Our package installed in tensorizer 2.11.1's place must pass every one of these
calls the way 2.11.1 does. Written by us from vLLM's usage; no vLLM code is copied. Among them: a
serializer that vLLM's pattern leaves unclosed must still leave a complete file (an issue once left
a 0-byte file), never fail silently.
"""

import gc
import io
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import TINY_MODEL_SRC, make_tiny_model
from tensor_helpers import assert_same, expected_module_entries

from tensorizer import DecryptionParams, EncryptionParams, TensorDeserializer, TensorSerializer
from tensorizer.serialization import CryptographyError
from tensorizer.stream_io import open_stream
from tensorizer.utils import convert_bytes, get_mem_usage, no_init_or_tensor

MARKER_KEY = ".vllm_tensorized_marker"
# vLLM passes these to every open_stream call, local paths included (from its config or the env).
S3_NONE = dict(s3_access_key_id=None, s3_secret_access_key=None, s3_endpoint=None)
S3_SET = dict(s3_access_key_id="AKIAUNUSED", s3_secret_access_key="unused-secret",
              s3_endpoint="object.example.invalid", force_http=True)

# Executed here and in the real-tensorizer subprocess (after TINY_MODEL_SRC): vLLM's marker.
MARKED_SRC = textwrap.dedent(
    """
    def marked_model(seed=0):
        m = make_tiny_model(seed)
        marker = torch.nn.Parameter(torch.tensor((1,), device="meta"), requires_grad=False)
        m.register_parameter("vllm_tensorized_marker", marker)
        return m
    """
)
_ns = {"make_tiny_model": make_tiny_model, "torch": torch}
exec(MARKED_SRC, _ns)  # noqa: S102 - our own constant source
marked_model = _ns["marked_model"]

DEVICES = [
    "cpu:0",
    pytest.param("cuda:0", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                    reason="needs a CUDA device")),
]


def _assert_loads_as(source, model, encryption=None):
    """`source` (a path or bytes) holds write_module(model): every entry, equal tensors."""
    if isinstance(source, bytes):
        source = io.BytesIO(source)
    entries = expected_module_entries(model)
    with TensorDeserializer(source, device="cpu", verify_hash=True, encryption=encryption) as d:
        assert list(d.keys()) == [name for _, _, name, _ in entries]
        for _, _, name, t in entries:
            if t.is_meta:
                assert d[name].shape == t.shape and d[name].dtype == t.dtype, name
            else:
                assert_same(d[name], t)


def _write_closed(path, model, **kw):
    s = TensorSerializer(str(path), **kw)  # 2.11.1's serializer is no context manager
    s.write_module(model)
    s.close()
    return path.read_bytes()


# ---------------------------------------------------------------------------------------------
# encryption keys


def test_encryption_params_calls():
    key = EncryptionParams.random().key
    assert isinstance(key, bytes) and len(key) == 32
    assert EncryptionParams.random().key != key
    assert EncryptionParams(key=key).key == key
    assert isinstance(DecryptionParams.from_key(key), DecryptionParams)  # decrypts: see the round trip
    with pytest.raises(ValueError):
        EncryptionParams(key=b"short")
    with pytest.raises(ValueError):
        DecryptionParams.from_key(b"short")


def test_encrypted_round_trip_the_vllm_way(tmp_path):
    keyfile = tmp_path / "model.key"
    keyfile.write_bytes(EncryptionParams.random().key)  # vLLM's keyfile: the raw 32-byte key
    model = marked_model()
    path = tmp_path / "model.tensors"
    with open_stream(str(path), mode="wb+", **S3_NONE) as stream:
        serializer = TensorSerializer(stream, encryption=EncryptionParams(key=keyfile.read_bytes()),
                                      limit_cpu_concurrency=2)
        serializer.write_module(model)
        serializer.close()
    assert model.embed.weight.detach().numpy().tobytes() not in path.read_bytes()
    with open_stream(str(keyfile), **S3_NONE) as f:
        decryption = DecryptionParams.from_key(f.read())
    _assert_loads_as(path, model, encryption=decryption)
    with pytest.raises(CryptographyError):
        TensorDeserializer(str(path), device="cpu").load_into_module(marked_model(seed=1))
    wrong = DecryptionParams.from_key(EncryptionParams.random().key)
    with pytest.raises(CryptographyError):
        TensorDeserializer(str(path), device="cpu", encryption=wrong).load_into_module(marked_model(seed=1))


# ---------------------------------------------------------------------------------------------
# open_stream on local paths


@pytest.mark.parametrize("s3_kwargs", [S3_NONE, S3_SET], ids=["s3-none", "s3-set"])
def test_open_stream_local_path_ignores_s3_kwargs(tmp_path, s3_kwargs):
    path = str(tmp_path / "blob.bin")
    with open_stream(path, mode="wb+", **s3_kwargs) as f:
        f.write(b"tensorizer" * 100)
        f.seek(0)
        assert f.read(10) == b"tensorizer"  # "wb+" reads back, as a local file does
    with open_stream(path, mode="rb", **s3_kwargs) as f:
        assert f.read() == b"tensorizer" * 100
    assert os.path.getsize(path) == 1000  # a plain local file, nothing uploaded


@pytest.mark.parametrize("mode", ["rt", "xyz", "r", "w"])
def test_open_stream_bad_mode_raises_value_error(tmp_path, mode):
    with pytest.raises(ValueError):
        open_stream(str(tmp_path / "x.bin"), mode=mode, **S3_NONE)


# ---------------------------------------------------------------------------------------------
# TensorSerializer


def test_serializer_write_module_with_marker(tmp_path):
    model = marked_model()
    path = tmp_path / "model.tensors"
    with open_stream(str(path), mode="wb+", **S3_SET) as stream:
        serializer = TensorSerializer(stream, encryption=None, limit_cpu_concurrency=1)
        serializer.write_module(model)
        serializer.close()
        assert stream.closed  # as 2.11.1: close() closes the file object
    assert path.read_bytes() == _write_closed(tmp_path / "by_path.tensors", model)
    _assert_loads_as(path, model)


def test_serializer_write_state_dict(tmp_path):
    tensors = {"base_model.lora_A.weight": torch.randn(4, 8),  # vLLM's LoRA adapter: a state dict
               "base_model.lora_B.weight": torch.randn(8, 4).half()}
    path = tmp_path / "adapter_model.tensors"
    with open_stream(str(path), mode="wb+", **S3_NONE) as stream:
        serializer = TensorSerializer(stream)
        serializer.write_state_dict(tensors)
        serializer.close()
    with TensorDeserializer(str(path), device="cpu", verify_hash=True) as d:
        assert list(d.keys()) == list(tensors)
        for k, v in tensors.items():
            assert_same(d[k], v)


REAL_UNCLOSED = """
import gc
from tensorizer import TensorSerializer
from tensorizer.stream_io import open_stream
with open_stream("real_unclosed.tensors", "wb+") as stream:
    serializer = TensorSerializer(stream)
    serializer.write_module(marked_model())
del serializer
gc.collect()
"""


def test_never_closed_serializer_leaves_the_real_file(tmp_path, real_tensorizer):
    model = marked_model()
    path = tmp_path / "ours_unclosed.tensors"
    with open_stream(str(path), "wb+", **S3_NONE) as stream:
        serializer = TensorSerializer(stream)
        serializer.write_module(model)  # never closed, as vLLM's pattern may leave it
    del serializer
    gc.collect()
    ours = path.read_bytes()
    assert len(ours) > 0
    real_tensorizer(MARKED_SRC + REAL_UNCLOSED)
    real = (tmp_path / "real_unclosed.tensors").read_bytes()
    assert len(ours) == len(real)
    assert ours == real
    assert ours == _write_closed(tmp_path / "closed.tensors", model)
    _assert_loads_as(path, model)


def test_never_closed_encrypted_serializer_loads_back(tmp_path):
    key = EncryptionParams.random().key
    model = marked_model()
    path = tmp_path / "enc_unclosed.tensors"
    with open_stream(str(path), "wb+", **S3_NONE) as stream:
        serializer = TensorSerializer(stream, encryption=EncryptionParams(key=key))
        serializer.write_module(model)
    del serializer
    gc.collect()
    assert path.stat().st_size > 0
    _assert_loads_as(path, model, encryption=DecryptionParams.from_key(key))


def test_never_closed_serializer_into_bytesio(tmp_path):
    model = marked_model()
    expected = _write_closed(tmp_path / "closed.tensors", model)
    buf = io.BytesIO()
    serializer = TensorSerializer(buf)
    serializer.write_module(model)
    assert buf.getvalue() == expected  # complete after the write, as 2.11.1
    del serializer
    gc.collect()
    # 2.11.1 closes the BytesIO here (getvalue() then raises); ours keeps its contents.
    assert buf.getvalue() == expected
    _assert_loads_as(buf.getvalue(), model)


def test_stream_closed_before_unclosed_serializer_is_dropped(tmp_path):
    model = marked_model()
    path = tmp_path / "closed_first.tensors"
    with open_stream(str(path), "wb+", **S3_NONE) as stream:
        serializer = TensorSerializer(stream)
        serializer.write_module(model)
        stream.close()
        del serializer
        gc.collect()
    assert path.read_bytes() == _write_closed(tmp_path / "closed.tensors", model)
    _assert_loads_as(path, model)


UNCLOSED_AT_EXIT = """
import sys, torch, tensorizer._C
from tensorizer import TensorSerializer
serializer = TensorSerializer(sys.argv[1])
serializer.write_module(marked_model())
"""


def test_unclosed_path_serializer_is_finished_at_exit(tmp_path):
    path = tmp_path / "at_exit.tensors"
    script = TINY_MODEL_SRC + MARKED_SRC + UNCLOSED_AT_EXIT  # exits without close() or del
    proc = subprocess.run([sys.executable, "-c", script, str(path)], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    model = marked_model()
    assert path.stat().st_size > 0
    assert path.read_bytes() == _write_closed(tmp_path / "closed.tensors", model)
    _assert_loads_as(path, model)


class _NoSeekSink(io.RawIOBase):
    """A write-only stream that cannot seek; records what it is given."""

    def __init__(self):
        super().__init__()
        self.chunks = []

    def writable(self):
        return True

    def seekable(self):
        return False

    def write(self, b):
        if self.closed:
            raise ValueError("I/O operation on closed file")
        self.chunks.append(bytes(b))
        return len(b)


def test_non_seekable_stream_gets_the_file_at_close(tmp_path):
    model = marked_model()
    sink = _NoSeekSink()
    serializer = TensorSerializer(sink)
    serializer.write_module(model)
    serializer.close()
    assert b"".join(sink.chunks) == _write_closed(tmp_path / "closed.tensors", model)


def test_non_seekable_stream_closed_first_is_reported(capfd):
    sink = _NoSeekSink()
    serializer = TensorSerializer(sink)
    serializer.write_module(marked_model())
    sink.close()
    del serializer
    gc.collect()
    assert "could not finish its output" in capfd.readouterr().err


# ---------------------------------------------------------------------------------------------
# TensorDeserializer


def _assert_cast(loaded, t, dtype):
    """`loaded` is `t` read with the deserializer's `dtype`: floating tensors cast to it, bool ones
    kept; integer ones checked by value here (their dtype: test_deserializer_dtype_casts_integers)."""
    loaded = loaded.detach().cpu()
    if dtype is None or t.dtype == torch.bool:
        assert_same(loaded, t)
    elif t.dtype.is_floating_point:
        assert_same(loaded, t.to(dtype))
    else:
        assert torch.equal(loaded.to(t.dtype), t)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("dtype", [None, torch.float16], ids=["dtype-none", "float16"])
def test_deserializer_load_into_module_the_vllm_way(tmp_path, device, lazy, dtype):
    model = marked_model()
    path = tmp_path / "model.tensors"
    _write_closed(path, model)
    target = marked_model(seed=1)
    with open_stream(str(path), mode="rb", **S3_SET) as stream, TensorDeserializer(
        stream, dtype=dtype, device=device, verify_hash=True, encryption=None, num_readers=2, lazy_load=lazy
    ) as deserializer:
        assert MARKER_KEY in deserializer
        deserializer.load_into_module(target)
    entries = expected_module_entries(model)
    # vLLM reads total_tensor_bytes after the with-block, then closes once more.
    # 2.11.1: lazy counts every entry's deserialized size (the meta marker's 8 bytes too); an eager
    # load counts the data read (none for a meta tensor).
    sizes = [t.numel() * t.element_size() if lazy or not t.is_meta else 0 for *_, t in entries]
    assert deserializer.total_tensor_bytes == sum(sizes)
    assert isinstance(convert_bytes(deserializer.total_tensor_bytes), str)
    deserializer.close()
    got = dict(target.named_parameters(remove_duplicate=False))
    got.update(target.named_buffers(remove_duplicate=False))
    for _, _, name, t in entries:
        loaded = got[name.lstrip(".")]
        assert loaded.device.type == torch.device(device).type, name
        if not t.is_meta:
            _assert_cast(loaded, t, dtype)


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_deserializer_dtype_casts_floating_tensors_only(tmp_path, lazy):
    # vLLM passes dtype=model_config.dtype. 2.11.1 casts every non-bool tensor to it, integer
    # buffers included (ids -> float16; coreweave/tensorizer#206); ours casts floating-point
    # tensors only and keeps integer buffers exact (docs/compatibility.md), which the module's own
    # buffers (int64 here) then receive unchanged.
    model = marked_model()
    path = tmp_path / "model.tensors"
    _write_closed(path, model)
    target = marked_model(seed=1)
    with TensorDeserializer(str(path), dtype=torch.float16, device="cpu:0", lazy_load=lazy) as d:
        assert d[".mask"].dtype == torch.bool
        assert d[".ids"].dtype == model.ids.dtype
        d.load_into_module(target)
    assert target.ids.dtype == model.ids.dtype and torch.equal(target.ids, model.ids)
    assert torch.equal(target.norm.num_batches_tracked, model.norm.num_batches_tracked)
    for name, param in target.named_parameters():
        if not param.is_meta and param.is_floating_point():
            assert param.dtype == torch.float16, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_readers", [None, 1, 3])
def test_deserializer_items_the_vllm_way(tmp_path, device, num_readers):
    model = marked_model()
    path = tmp_path / "model.tensors"
    _write_closed(path, model)
    stream = open_stream(str(path), **S3_NONE)  # vLLM's weights iterator: default mode ("rb")
    with TensorDeserializer(stream, verify_hash=False, encryption=None, num_readers=num_readers,
                            device=device) as state:
        items = list(state.items())
        entries = expected_module_entries(model)
        assert [k for k, _ in items] == [name for _, _, name, _ in entries]
        for (_, _, name, t), (_, v) in zip(entries, items):
            assert v.device.type == torch.device(device).type, name
            if not t.is_meta:
                assert_same(v.cpu(), t)


def test_marker_check_on_lazy_deserializer(tmp_path):
    marked, plain = tmp_path / "marked.tensors", tmp_path / "plain.tensors"
    _write_closed(marked, marked_model())
    _write_closed(plain, make_tiny_model())
    kwargs = dict(verify_hash=None, encryption=None, num_readers=None, lazy_load=True)
    assert MARKER_KEY in TensorDeserializer(open_stream(str(marked), **S3_NONE), **kwargs)
    assert MARKER_KEY not in TensorDeserializer(open_stream(str(plain), **S3_NONE), **kwargs)


def test_num_readers_must_be_an_int(tmp_path):
    path = tmp_path / "model.tensors"
    _write_closed(path, marked_model())
    with pytest.raises(TypeError):
        TensorDeserializer(str(path), device="cpu", num_readers="bar")


# ---------------------------------------------------------------------------------------------
# tensorizer.utils and sharded files


def test_utils_as_vllm_uses_them():
    # Values from tensorizer 2.11.1.
    assert convert_bytes(1024) == "1.0 KB"
    assert convert_bytes(1024, decimal=False) == "1.0 KiB"
    assert convert_bytes(0) == "0.0 bytes"
    assert convert_bytes(1536000) == "1.5 MB"
    assert convert_bytes(2.5e9 / 0.5) == "5.0 GB"  # vLLM: bytes per second, a float
    assert convert_bytes(10**16) == "10.0 PB"
    usage = get_mem_usage()
    assert isinstance(usage, str)
    assert re.match(r"CPU: \(maxrss: [\d,]+MiB F: [\d,]+MiB\)", usage), usage


def test_no_init_or_tensor_gives_meta_parameters():
    linear = no_init_or_tensor(lambda: torch.nn.Linear(3, 4))
    assert isinstance(linear, torch.nn.Linear)
    assert linear.weight.is_meta and linear.bias.is_meta and linear.weight.shape == (4, 3)
    with no_init_or_tensor():
        seq = torch.nn.Sequential(torch.nn.Embedding(5, 2), torch.nn.LayerNorm(2))
    assert all(p.is_meta for p in seq.parameters())
    assert not torch.empty(2).is_meta  # restored afterwards
    assert not torch.nn.Linear(2, 2).weight.is_meta
    with pytest.raises(TypeError):
        no_init_or_tensor(42)


def test_sharded_files_named_by_rank(tmp_path):
    uri = str(tmp_path / "model-rank-%03d.tensors")
    models = {rank: marked_model(seed=rank + 7) for rank in (0, 1)}
    for rank, model in models.items():
        with open_stream(uri % rank, mode="wb+", **S3_NONE) as stream:
            serializer = TensorSerializer(stream)
            serializer.write_module(model)
            serializer.close()
    names = sorted(os.listdir(tmp_path))
    assert names == ["model-rank-000.tensors", "model-rank-001.tensors"]
    assert (tmp_path / names[0]).read_bytes() != (tmp_path / names[1]).read_bytes()
    for rank, model in models.items():
        _assert_loads_as(uri % rank, model)

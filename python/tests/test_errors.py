"""The exception types of the reading and writing API (format/FORMAT.md §3, §4, §5, §8, §11, §15)."""

import io
import os

import numpy
import pytest
import torch

import tensorizer
from tensorizer import TensorDeserializer, TensorSerializer, TensorType
from tensorizer.serialization import (
    CryptographyError,
    HashMismatchError,
    UnsupportedError,
)

from conftest import tensor_layout


@pytest.fixture
def good_file(tmp_path):
    path = tmp_path / "good.tensors"
    with TensorSerializer(path) as s:
        s.write_state_dict({"a": torch.arange(8.0), "b": torch.ones(2, 2)})
    return path


def patched(tmp_path, source, offset, new: bytes, name="patched.tensors"):
    data = bytearray(source.read_bytes())
    data[offset : offset + len(new)] = new
    out = tmp_path / name
    out.write_bytes(bytes(data))
    return out


def test_exception_hierarchy():
    assert issubclass(tensorizer.CryptographyError, Exception)
    assert tensorizer.CryptographyError is CryptographyError
    assert issubclass(HashMismatchError, Exception)
    assert issubclass(UnsupportedError, ValueError) and issubclass(UnsupportedError, NotImplementedError)
    from tensorizer import _crypt

    assert issubclass(CryptographyError, _crypt.CryptographyError)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        TensorDeserializer(tmp_path / "nope.tensors", device="cpu")


def test_not_a_tensorizer_file(tmp_path, good_file):
    bad = patched(tmp_path, good_file, 0, b"|XXX|")
    with pytest.raises(ValueError):
        TensorDeserializer(bad, device="cpu")
    junk = tmp_path / "junk.tensors"
    junk.write_bytes(b"hello world, not a model at all")
    with pytest.raises(ValueError):
        TensorDeserializer(junk, device="cpu")
    empty = tmp_path / "empty.tensors"
    empty.write_bytes(b"")
    with pytest.raises((ValueError, OSError)):
        TensorDeserializer(empty, device="cpu")


def test_unknown_version_and_flags(tmp_path, good_file):
    with pytest.raises(ValueError):
        TensorDeserializer(patched(tmp_path, good_file, 5, (99).to_bytes(4, "little")), device="cpu")
    v4 = patched(tmp_path, good_file, 5, (4).to_bytes(4, "little"), "v4.tensors")
    with TensorDeserializer(v4, device="cpu") as d:  # v4 without flags is fine
        assert torch.equal(d["a"], torch.arange(8.0))
    with pytest.raises(ValueError):
        TensorDeserializer(patched(tmp_path, v4, 9, b"\x02", "flags.tensors"), device="cpu")


def test_truncated_file(tmp_path, good_file):
    data = good_file.read_bytes()
    cut = tmp_path / "cut.tensors"
    cut.write_bytes(data[: len(data) - 30])
    with pytest.raises((ValueError, OSError)):
        TensorDeserializer(cut, device="cpu")
    short = tmp_path / "short.tensors"
    short.write_bytes(data[:40])
    with pytest.raises(ValueError):
        TensorDeserializer(short, device="cpu")


def test_empty_index(tmp_path):
    path = tmp_path / "none.tensors"
    TensorSerializer(path).close()
    assert path.stat().st_size == 262225  # format/FORMAT.md §2: the writer can produce it...
    with pytest.raises(ValueError, match="empty"):
        TensorDeserializer(path, device="cpu")  # ...and the reader rejects it


def test_corrupt_data_hash_mismatch(tmp_path, good_file):
    e = tensor_layout(good_file.read_bytes())[1]
    bad = patched(tmp_path, good_file, e["data_offset"] + 3, b"\x7f")
    with pytest.raises(HashMismatchError, match="b"):
        TensorDeserializer(bad, device="cpu", verify_hash=True)
    # corrupt header field covered by the hash (the shape byte stays consistent with the index,
    # so flip a stored hash byte instead)
    h = e["header_offset"] + 8 + 2 + 1 + 2 + 1 + 1 + 3 + 1 + 8 + 2 + 1 + 2  # CRC32 value
    bad2 = patched(tmp_path, good_file, h, b"\x00\x00\x00\x00", "crc.tensors")
    with pytest.raises(HashMismatchError, match="CRC32"):
        TensorDeserializer(bad2, device="cpu", verify_hash=True)
    with TensorDeserializer(bad2, device="cpu") as d:
        assert torch.equal(d["b"], torch.ones(2, 2))


def test_deserializer_argument_errors(good_file):
    with pytest.raises(ValueError):
        TensorDeserializer(good_file, device="cpu", num_readers=0)
    with pytest.raises(TypeError):
        TensorDeserializer(good_file, device="cpu", num_readers="2")
    with pytest.raises(TypeError):
        TensorDeserializer(good_file, device="cpu", encryption="key")
    with TensorDeserializer(good_file, device="cpu", num_readers=64) as d:  # capped
        assert len(d) == 2
    with TensorDeserializer(good_file, device="cpu", plaid_mode=True, plaid_mode_buffers=4) as d:
        assert len(d) == 2
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError):
            TensorDeserializer(good_file, device="cuda:0")
    with pytest.raises(TypeError):
        TensorDeserializer(12.5, device="cpu")


def test_mapping_errors(good_file):
    with TensorDeserializer(good_file, device="cpu", lazy_load=True) as d:
        with pytest.raises(KeyError, match="Tensor zzz not found"):
            d["zzz"]
        with pytest.raises(KeyError):
            d[["unhashable"]]
        assert d.get("zzz") is None
        with pytest.raises(TypeError):
            d.tree(0)


def test_closed_deserializer(good_file):
    d = TensorDeserializer(good_file, device="cpu", lazy_load=True)
    a = d["a"]
    d.close()
    d.close()
    assert torch.equal(d["a"], a)  # cached tensors stay usable
    with pytest.raises(OSError, match="closed"):
        d["b"]


def test_serializer_argument_errors(tmp_path):
    path = tmp_path / "s.tensors"
    with pytest.raises(TypeError):
        TensorSerializer(path, limit_cpu_concurrency="4")
    with pytest.raises(ValueError):
        TensorSerializer(path, limit_cpu_concurrency=0)
    with pytest.raises(ValueError, match="binary"):
        TensorSerializer(io.StringIO())
    with open(tmp_path / "ro", "wb") as f:
        f.write(b"x")
    with open(tmp_path / "ro", "rb") as f:
        with pytest.raises(ValueError, match="writable"):
            TensorSerializer(f)
    with TensorSerializer(path, compress_tensors=True, limit_cpu_concurrency=2) as s:
        s.write_tensor(0, "x", TensorType.PARAM, torch.ones(1))


def test_write_errors(tmp_path):
    with TensorSerializer(tmp_path / "e.tensors") as s:
        s.write_tensor(0, "a", TensorType.PARAM, torch.ones(1))
        with pytest.raises(ValueError, match="multiple times"):
            s.write_tensor(0, "a", TensorType.PARAM, torch.ones(1))
        s.write_tensor(0, ("n", "x"), TensorType.STATE_DICT, torch.ones(1))
        with pytest.raises(ValueError, match="leaf and a prefix"):
            s.write_tensor(0, ("n",), TensorType.STATE_DICT, torch.ones(1))
        with pytest.raises(ValueError, match="Conflicting"):
            s.write_tensor(0, ("n", "x", "y"), TensorType.STATE_DICT, torch.ones(1))
        with pytest.raises(ValueError, match="key type"):
            s.write_tensor(0, ("n", 0), TensorType.STATE_DICT, torch.ones(1))
        with pytest.raises(ValueError):
            s.write_tensor(0, ("n", -1), TensorType.STATE_DICT, torch.ones(1))
        with pytest.raises(ValueError):
            s.write_tensor(0, (), TensorType.STATE_DICT, torch.ones(1))
        with pytest.raises(TypeError):
            s.write_tensor(0, ("n", 1.5), TensorType.STATE_DICT, torch.ones(1))
        with pytest.raises(ValueError):
            s.write_tensor(0, "\x1e[0]", TensorType.PARAM, torch.ones(1))
        with pytest.raises(ValueError):
            s.write_tensor(0, "t", 7, torch.ones(1))
        with pytest.raises(ValueError):
            s.write_tensor(70000, "t", TensorType.PARAM, torch.ones(1))
        with pytest.raises(TypeError):
            s.write_tensor(0, "t", TensorType.PARAM, [1.0, 2.0])
        with pytest.raises(TypeError):
            s.write_tensor(0, "t", TensorType.PARAM, numpy.array([1 + 2j], dtype=numpy.clongdouble))
        q = torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)
        with pytest.raises(NotImplementedError):
            s.write_tensor(0, "q", TensorType.PARAM, q)
        # failed writes leave nothing behind: the name is still free
        s.write_tensor(0, "t", TensorType.PARAM, torch.ones(1))
    with TensorDeserializer(tmp_path / "e.tensors", device="cpu") as d:
        assert list(d.keys()) == ["a", "n", "t"]


def test_write_state_dict_errors(tmp_path):
    with TensorSerializer(tmp_path / "sd.tensors") as s:
        with pytest.raises(TypeError):
            s.write_state_dict({1: torch.ones(1)})
        with pytest.raises(TypeError):
            s.write_state_dict({"x": 3})
        with pytest.raises(TypeError):
            s.write_state_dict({"x": "a string"})  # 2.11.1 recursed forever
        with pytest.raises(TypeError):
            s.write_state_dict({"x": numpy.ones(2)})  # numpy leaves are not accepted here
        with pytest.raises(TypeError):
            s.write_state_dict(torch.ones(2))


def test_metadata_overflow(tmp_path):
    """The 256 KiB metadata block holds a bounded number of entries (format/FORMAT.md §4.1)."""
    name = "n" * 1000
    written = 0
    with pytest.raises(RuntimeError, match="Metadata overflow"):
        with TensorSerializer(tmp_path / "o.tensors") as s:
            for i in range(300):  # 300 entries of ~1040 bytes > 262144
                s.write_tensor(0, f"{name}{i}", TensorType.PARAM, torch.ones(1))
                written += 1
    assert 200 < written < 300
    assert not (tmp_path / "o.tensors").exists()  # the with block discarded it
    # outside a with block the file stays valid with the tensors that fitted, as in tensorizer
    s = TensorSerializer(tmp_path / "p.tensors")
    with pytest.raises(RuntimeError):
        for i in range(300):
            s.write_tensor(0, f"{name}{i}", TensorType.PARAM, torch.ones(1))
    s.close()
    with TensorDeserializer(tmp_path / "p.tensors", device="cpu") as d:
        assert len(d) == written


def test_load_errors_keep_deserializer_usable(tmp_path, good_file):
    e = tensor_layout(good_file.read_bytes())[0]
    bad = patched(tmp_path, good_file, e["data_offset"], b"\xff\xff")
    with TensorDeserializer(bad, device="cpu", lazy_load=True, verify_hash=True) as d:
        with pytest.raises(HashMismatchError):
            d["a"]
        assert torch.equal(d["b"], torch.ones(2, 2))
        with pytest.raises(HashMismatchError):
            d.tree()


def test_os_errors_are_oserrors(tmp_path):
    directory = tmp_path / "adir"
    directory.mkdir()
    with pytest.raises(OSError):
        TensorDeserializer(directory, device="cpu")
    if os.geteuid() != 0:
        locked = tmp_path / "locked.tensors"
        locked.write_bytes(b"")
        os.chmod(locked, 0)
        with pytest.raises(PermissionError):
            TensorDeserializer(locked, device="cpu")


def test_perf_stats_follow_the_environment_variable(tmp_path):
    """TENSORIZER_ENABLE_PERF_STATS turns on _get_perf_stats (tensorizer's keys + the engine's stages)."""
    import subprocess
    import sys

    path = tmp_path / "p.tensors"
    with TensorSerializer(str(path)) as s:
        s.write_tensor(0, "w", TensorType.PARAM, torch.ones(1 << 20))
    code = (
        "import sys, tensorizer.serialization as S\n"
        "from tensorizer import TensorDeserializer\n"
        "TensorDeserializer(sys.argv[1], device='cpu', verify_hash=True).close()\n"
        "try:\n    st = S._get_perf_stats()\nexcept RuntimeError as e:\n    print('disabled', e); sys.exit(0)\n"
        "assert st['file_readinto_bytes'] == 4 << 20, st\n"
        "assert st['loads'] == 1 and st['file_readinto_secs'] > 0 and st['verify_secs'] > 0, st\n"
        "assert st['tensor_to_device_bytes'] == 0, st\n"
        "print('enabled')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TENSORIZER_ENABLE_PERF_STATS"}
    off = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env)
    on = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                        env={**env, "TENSORIZER_ENABLE_PERF_STATS": "1"})
    assert off.returncode == 0 and off.stdout.startswith("disabled Performance stats are not enabled"), off.stderr
    assert on.returncode == 0 and on.stdout.strip() == "enabled", on.stderr

"""EncryptionParams / DecryptionParams (format/FORMAT.md §9.5) and encrypted files: round trips, wrong
and missing keys, tampering, passphrases, and cross-reads with the real tensorizer 2.11.1."""

import json

import pytest
import torch

from tensorizer import (
    CryptographyError,
    DecryptionParams,
    EncryptionParams,
    TensorDeserializer,
    TensorSerializer,
    TensorType,
)
from tensorizer.serialization import HashMismatchError

from conftest import tensor_layout

OpsLimit = EncryptionParams.OpsLimit
MemLimit = EncryptionParams.MemLimit
SALT = bytes(range(16))


def cheap(passphrase="correct horse", salt=SALT):
    return EncryptionParams.from_string(passphrase, OpsLimit.MIN, MemLimit.MIN, salt)


def sample():
    torch.manual_seed(0)
    return {
        "w": torch.randn(64, 32),
        "b16": torch.randn(7).to(torch.bfloat16),
        "i": torch.arange(10),
        "scalar": torch.tensor(2.5),
        "big": torch.arange(3 << 19, dtype=torch.float32),  # 6 MiB: 3 encryption chunks
    }


def write(path, sd, enc):
    with TensorSerializer(path, encryption=enc) as s:
        s.write_state_dict(sd)


def check(path, sd, dec, **kw):
    with TensorDeserializer(path, device="cpu", encryption=dec, verify_hash=True, **kw) as d:
        assert list(d.keys()) == list(sd)
        for k, v in sd.items():
            assert d[k].dtype == v.dtype and torch.equal(d[k], v), k


# ---------------------------------------------------------------------------------------------
# parameter validation


def test_presets():
    assert [int(x) for x in OpsLimit] == [1, 2, 3, 4]
    assert [int(x) for x in MemLimit] == [8192, 64 << 20, 256 << 20, 1 << 30]
    assert [x.name for x in OpsLimit] == ["MIN", "INTERACTIVE", "MODERATE", "SENSITIVE"]


def test_encryption_params_key_validation():
    for bad in ("x" * 32, 123, None, [0] * 32):
        with pytest.raises(TypeError):
            EncryptionParams(bad)
    for n in (0, 16, 31, 33):
        with pytest.raises(ValueError):
            EncryptionParams(bytes(n))
    key = bytes(range(32))
    for form in (key, bytearray(key), memoryview(key)):
        assert EncryptionParams(form).key == key
    with pytest.raises(ValueError, match="salt"):
        EncryptionParams(key).salt
    r = EncryptionParams.random()
    assert len(r.key) == 32 and r.key != EncryptionParams.random().key
    with pytest.raises(ValueError):
        r.salt
    assert key.hex() not in repr(EncryptionParams(key))


def test_from_string_validation():
    with pytest.raises(ValueError):
        EncryptionParams.from_string("")
    with pytest.raises(ValueError):
        EncryptionParams.from_string(b"")
    with pytest.raises(TypeError):
        EncryptionParams.from_string("x", opslimit=MemLimit.MIN)
    with pytest.raises(TypeError):
        EncryptionParams.from_string("x", memlimit=OpsLimit.MIN)
    with pytest.raises(TypeError):
        EncryptionParams.from_string("x", opslimit="3")
    with pytest.raises(TypeError):
        EncryptionParams.from_string("x", OpsLimit.MIN, MemLimit.MIN, salt="0123456789abcdef")
    for n in (0, 15, 17, 32):
        with pytest.raises(ValueError):
            EncryptionParams.from_string("x", OpsLimit.MIN, MemLimit.MIN, salt=bytes(n))
    with pytest.raises(ValueError):
        EncryptionParams.from_string("x", 0, MemLimit.MIN)
    with pytest.raises(ValueError):
        EncryptionParams.from_string("x", OpsLimit.MIN, 4096)


def test_from_string_is_deterministic_with_a_salt():
    a = cheap()
    b = EncryptionParams.from_string(b"correct horse", 1, 8192, bytearray(SALT))
    assert a.key == b.key and a.salt == SALT and len(a.key) == 32
    assert cheap("other").key != a.key
    assert cheap(salt=bytes(16)).key != a.key
    assert EncryptionParams.from_string("é", OpsLimit.MIN, MemLimit.MIN, SALT).key == (
        EncryptionParams.from_string("é".encode(), OpsLimit.MIN, MemLimit.MIN, SALT).key
    )
    assert EncryptionParams.from_string("é", OpsLimit.MIN, MemLimit.MIN, SALT, encoding="latin-1").key == (
        EncryptionParams.from_string("é".encode("latin-1"), OpsLimit.MIN, MemLimit.MIN, SALT).key
    )
    random_salt = EncryptionParams.from_string("x", OpsLimit.MIN, MemLimit.MIN)
    assert len(random_salt.salt) == 16 and random_salt.salt != SALT


def test_decryption_params_validation():
    with pytest.raises(ValueError):
        DecryptionParams.from_key(b"")
    with pytest.raises(ValueError):
        DecryptionParams.from_key(bytes(31))
    with pytest.raises(TypeError):
        DecryptionParams.from_key("k" * 32)
    DecryptionParams.from_key(bytearray(32))
    with pytest.raises(ValueError):
        DecryptionParams.from_string("")
    with pytest.raises(TypeError):
        DecryptionParams.from_string(12345)
    DecryptionParams.from_string(b"bytes ok")


def test_deserializer_and_serializer_check_param_types(tmp_path):
    path = tmp_path / "p.tensors"
    with pytest.raises(TypeError):
        TensorSerializer(path, encryption=DecryptionParams.from_key(bytes(32)))
    with pytest.raises(TypeError):
        TensorSerializer(path, encryption=b"k" * 32)
    write(path, {"a": torch.ones(1)}, EncryptionParams.random())
    with pytest.raises(TypeError):
        TensorDeserializer(path, device="cpu", encryption=EncryptionParams.random())
    with pytest.raises(ValueError, match="no key or source"):
        TensorDeserializer(path, device="cpu", encryption=DecryptionParams())


# ---------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_random_key_round_trip(tmp_path, lazy):
    sd = sample()
    enc = EncryptionParams.random()
    path = tmp_path / "r.tensors"
    write(path, sd, enc)
    check(path, sd, DecryptionParams.from_key(enc.key), lazy_load=lazy)
    data = path.read_bytes()
    assert int.from_bytes(data[5:9], "little") == 3  # encrypted files start at v3
    assert sd["w"].numpy().tobytes()[:64] not in data  # the data is not in clear


def test_passphrase_round_trip(tmp_path):
    sd = sample()
    enc = cheap()
    path = tmp_path / "p.tensors"
    write(path, sd, enc)
    check(path, sd, DecryptionParams.from_string("correct horse"))
    check(path, sd, DecryptionParams.from_string(b"correct horse"), lazy_load=True)
    check(path, sd, DecryptionParams.from_key(enc.key))  # the derived key opens it too


def test_zero_size_and_meta_tensors_encrypted(tmp_path):
    """2.11.1 fails with IndexError on zero-size tensors when encrypting."""
    sd = {
        "empty": torch.empty(0, 4),
        "meta": torch.empty(3, 2, device="meta"),
        "data": torch.arange(5.0),
        "empty_bf16": torch.empty(0, dtype=torch.bfloat16),
    }
    enc = EncryptionParams.random()
    path = tmp_path / "z.tensors"
    write(path, sd, enc)
    with TensorDeserializer(path, device="cpu", encryption=DecryptionParams.from_key(enc.key), verify_hash=True) as d:
        assert d["empty"].shape == (0, 4)
        assert torch.equal(d["meta"], torch.zeros(3, 2))
        assert torch.equal(d["data"], sd["data"])
        assert d["empty_bf16"].dtype == torch.bfloat16
    data = path.read_bytes()
    assert int.from_bytes(data[5:9], "little") == 4 and data[9] & 1  # v4, flagged encrypted


def test_encrypted_module_and_verify(tmp_path):
    from conftest import TinyModel, make_tiny_model

    m = make_tiny_model()
    enc = EncryptionParams.random()
    path = tmp_path / "m.tensors"
    with TensorSerializer(path, encryption=enc) as s:
        s.write_module(m)
    fresh = TinyModel()
    with TensorDeserializer(path, device="cpu", encryption=DecryptionParams.from_key(enc.key)) as d:
        d.load_into_module(fresh)
        ok, results = d.verify_module(m)
        assert ok, [r for r in results if not r[1]]
    for (_, a), (_, b) in zip(m.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------
# failures


def test_wrong_and_missing_keys(tmp_path):
    sd = sample()
    enc = EncryptionParams.random()
    path = tmp_path / "w.tensors"
    write(path, sd, enc)
    with pytest.raises(CryptographyError, match="not requested"):
        TensorDeserializer(path, device="cpu")
    with pytest.raises(CryptographyError):
        TensorDeserializer(path, device="cpu", encryption=DecryptionParams.from_key(bytes(32)))
    with TensorDeserializer(path, device="cpu", lazy_load=True, encryption=DecryptionParams.from_key(bytes(32))) as d:
        with pytest.raises(CryptographyError):
            d["w"]
    # a passphrase for a file written with an exact key
    with pytest.raises(CryptographyError, match="passphrase|[Ss]ource string"):
        TensorDeserializer(path, device="cpu", encryption=DecryptionParams.from_string("pw"))


def test_wrong_passphrase(tmp_path):
    sd = {"a": torch.arange(4.0)}
    path = tmp_path / "pw.tensors"
    write(path, sd, cheap())
    with pytest.raises(CryptographyError):
        TensorDeserializer(path, device="cpu", encryption=DecryptionParams.from_string("wrong"))


def test_key_for_unencrypted_file(tmp_path):
    v1 = tmp_path / "v1.tensors"
    with TensorSerializer(v1) as s:
        s.write_state_dict({"a": torch.ones(2)})
    with pytest.raises(CryptographyError, match="predating encryption"):
        TensorDeserializer(v1, device="cpu", encryption=DecryptionParams.from_key(bytes(32)))
    v4 = tmp_path / "v4.tensors"
    with TensorSerializer(v4) as s:
        s.write_state_dict({"m": torch.empty(2, device="meta")})
    with pytest.raises(CryptographyError, match="not flagged"):
        TensorDeserializer(v4, device="cpu", encryption=DecryptionParams.from_key(bytes(32)))


def test_tampered_ciphertext(tmp_path):
    sd = {"a": torch.arange(1000.0), "b": torch.arange(3)}
    enc = EncryptionParams.random()
    path = tmp_path / "t.tensors"
    write(path, sd, enc)
    data = bytearray(path.read_bytes())
    a = tensor_layout(bytes(data))[0]
    data[a["data_offset"] + 1234] ^= 0x01  # inside "a"'s ciphertext
    bad = tmp_path / "bad.tensors"
    bad.write_bytes(bytes(data))
    dec = DecryptionParams.from_key(enc.key)
    with pytest.raises(CryptographyError):
        TensorDeserializer(bad, device="cpu", encryption=dec)
    with TensorDeserializer(bad, device="cpu", encryption=dec, lazy_load=True) as d:
        assert torch.equal(d["b"], sd["b"])
        with pytest.raises(CryptographyError):
            d["a"]


def test_tampered_plaintext_hash(tmp_path):
    """A changed stored SHA-256 is caught by verify_hash, not by the MAC."""
    sd = {"a": torch.arange(10.0)}
    enc = EncryptionParams.random()
    path = tmp_path / "h.tensors"
    write(path, sd, enc)
    data = bytearray(path.read_bytes())
    e = tensor_layout(bytes(data))[0]
    # header: size 8, module 2, type 1, name 2+1, dtype 1+3, ndim 1, shape 4, hash section
    # length 2, hash count 1, then SHA256 (type 1, length 32, value)
    pos = e["header_offset"] + 8 + 2 + 1 + 3 + 4 + 1 + 4 + 2 + 1
    assert data[pos : pos + 2] == bytes([1, 32])
    data[pos + 2] ^= 0xFF
    path.write_bytes(bytes(data))
    dec = DecryptionParams.from_key(enc.key)
    with pytest.raises(HashMismatchError):
        TensorDeserializer(path, device="cpu", encryption=dec, verify_hash=True)
    with TensorDeserializer(path, device="cpu", encryption=dec) as d:
        assert torch.equal(d["a"], sd["a"])


# ---------------------------------------------------------------------------------------------
# cross-reads with the real tensorizer 2.11.1


REAL_KEY_AND_FILE = """
import torch
from tensorizer import EncryptionParams, TensorSerializer
E = EncryptionParams
enc = E.from_string("correct horse", E.OpsLimit.MIN, E.MemLimit.MIN, bytes(range(16)))
print(enc.key.hex())
sd = torch.load("sd.pt")
s = TensorSerializer("real.tensors", encryption=enc); s.write_state_dict(sd); s.close()
"""


def test_real_tensorizer_files_and_keys(tmp_path, real_tensorizer):
    sd = sample()
    torch.save(sd, tmp_path / "sd.pt")
    real_key = real_tensorizer(REAL_KEY_AND_FILE).strip()
    assert cheap().key.hex() == real_key  # same Argon2id parameters, same key
    check(tmp_path / "real.tensors", sd, DecryptionParams.from_string("correct horse"))
    check(tmp_path / "real.tensors", sd, DecryptionParams.from_key(bytes.fromhex(real_key)), lazy_load=True)


REAL_READS_OURS = """
import torch, json
from tensorizer import DecryptionParams, TensorDeserializer
from tensorizer.serialization import CryptographyError
sd = torch.load("sd.pt")
out = {}
for name, dec in (("pw", DecryptionParams.from_string("correct horse")),
                  ("key", DecryptionParams.from_key(bytes.fromhex(open("key.hex").read())))):
    d = TensorDeserializer(name + ".tensors", device="cpu", encryption=dec, verify_hash=True)
    out[name] = all(torch.equal(d[k], v) for k, v in sd.items()) and list(d.keys()) == list(sd)
    d.close()
try:
    TensorDeserializer("key.tensors", device="cpu", encryption=DecryptionParams.from_key(bytes(32)))
    out["wrong"] = "no error"
except CryptographyError as e:
    out["wrong"] = "CryptographyError"
print(json.dumps(out))
"""


def test_real_tensorizer_reads_our_encrypted_files(tmp_path, real_tensorizer):
    sd = sample()
    torch.save(sd, tmp_path / "sd.pt")
    write(tmp_path / "pw.tensors", sd, cheap())
    enc = EncryptionParams.random()
    write(tmp_path / "key.tensors", sd, enc)
    (tmp_path / "key.hex").write_text(enc.key.hex())
    out = json.loads(real_tensorizer(REAL_READS_OURS))
    assert out == {"pw": True, "key": True, "wrong": "CryptographyError"}


def test_reference_encrypted_vector(vectors_dir):
    manifest = json.loads((vectors_dir / "encrypted.manifest.json").read_text())
    path = vectors_dir / "encrypted.tensors"
    key = bytes.fromhex(manifest["encryption"]["key_hex"])
    with TensorDeserializer(path, device="cpu", encryption=DecryptionParams.from_key(key), verify_hash=True) as d:
        assert len(list(d.read_tensors())) == manifest["tensor_count"]
    with pytest.raises(CryptographyError):
        TensorDeserializer(path, device="cpu")
    wrong = bytes([key[0] ^ 1]) + key[1:]
    with pytest.raises(CryptographyError):
        TensorDeserializer(path, device="cpu", encryption=DecryptionParams.from_key(wrong))

"""Signed models through the Python package (tensorizer.signing.ModelSignature): a model signed by
`tensorizer sign` loads with its signature checked in the load's pass; a changed weight byte, a
changed config.json, an extra file or the wrong key raise instead of returning tensors; lazy loads
check on the first access; stream() refuses before the check; a stream or URI cannot be checked."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from tensorizer import TensorDeserializer, TensorSerializer
from tensorizer.serialization import CryptographyError, HashMismatchError
from tensorizer.signing import ModelSignature

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("TZ_CLI", REPO / "build" / "bin" / "tensorizer"))


def _run(*argv):
    subprocess.run([str(a) for a in argv], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """(model dir, signature, public key, other public key, the tensors written)."""
    if not CLI.is_file():
        pytest.skip(f"{CLI} is not built (set TZ_CLI): it signs the test model")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: it makes the test keys")
    root = tmp_path_factory.mktemp("signed")
    model = root / "model"
    model.mkdir()
    tensors = {f"layer.{i}.weight": torch.arange(i * 1000, i * 1000 + 40000, dtype=torch.float32) for i in range(6)}
    s = TensorSerializer(str(model / "model.tensors"))
    s.write_state_dict(tensors)
    s.close()
    (model / "config.json").write_text('{"architectures": ["Test"]}\n')
    keys = {}
    for name in ("signer", "other"):
        key = root / f"{name}.key"
        subprocess.run(f"openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out {key}",
                       shell=True, check=True, stderr=subprocess.DEVNULL)
        _run("openssl", "ec", "-in", key, "-pubout", "-out", root / f"{name}.pub")
        keys[name] = root / f"{name}.pub"
    _run(CLI, "sign", "--private-key", root / "signer.key", "--signature", root / "model.sig", model)
    return model, root / "model.sig", keys["signer"], keys["other"], tensors


def _copy(signed, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(signed[0], model)
    return model


def test_a_signed_model_loads_with_its_signature_checked(signed):
    model, sig, pub, _, tensors = signed
    with TensorDeserializer(str(model / "model.tensors"), device="cpu",
                            signature=ModelSignature(sig, public_key=pub)) as d:
        assert set(d.keys()) == set(tensors)
        for name, t in tensors.items():
            assert torch.equal(d[name], t)
    with open(model / "model.tensors", "rb") as f:  # a file opened from a path is checked too
        with TensorDeserializer(f, device="cpu", signature=ModelSignature(sig, public_key=pub)) as d:
            assert len(d) == len(tensors)


@pytest.mark.parametrize("change", ["weight byte", "config.json", "extra file"])
def test_a_changed_model_raises_instead_of_loading(signed, tmp_path, change):
    _, sig, pub, _, _ = signed
    model = _copy(signed, tmp_path)
    if change == "weight byte":
        with open(model / "model.tensors", "r+b") as f:
            f.seek(os.path.getsize(model / "model.tensors") - 100)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 1]))
        named = "model.tensors"
    elif change == "config.json":
        (model / "config.json").write_text('{"architectures": ["Other"]}\n')
        named = "config.json"
    else:
        (model / "extra.txt").write_text("extra")
        named = "extra.txt"
    with pytest.raises(HashMismatchError, match=named):
        TensorDeserializer(str(model / "model.tensors"), device="cpu", signature=ModelSignature(sig, public_key=pub))


def test_the_wrong_key_raises(signed):
    model, sig, _, other, _ = signed
    with pytest.raises(CryptographyError, match="another key"):
        TensorDeserializer(str(model / "model.tensors"), device="cpu", signature=ModelSignature(sig, public_key=other))


def test_lazy_loads_check_on_first_access_and_stream_waits_for_it(signed, tmp_path):
    _, sig, pub, _, tensors = signed
    model = _copy(signed, tmp_path)
    first = next(iter(tensors))
    d = TensorDeserializer(str(model / "model.tensors"), device="cpu", lazy_load=True,
                           signature=ModelSignature(sig, public_key=pub))
    with pytest.raises(ValueError, match="signature"):
        next(d.stream())
    (model / "config.json").write_text("changed")
    with pytest.raises(HashMismatchError, match="config.json"):
        d[first]  # one tensor: the whole model is still hashed
    shutil.copy(signed[0] / "config.json", model / "config.json")
    assert torch.equal(d[first], tensors[first])  # checked now, and passed
    d.close()


def test_what_cannot_be_checked_is_refused_up_front(signed):
    model, sig, pub, _, _ = signed
    with pytest.raises(ValueError, match="public_key or certificate_chain"):
        ModelSignature(sig)
    data = (model / "model.tensors").read_bytes()
    import io

    with pytest.raises(ValueError, match="must be local"):
        TensorDeserializer(io.BytesIO(data), device="cpu", signature=ModelSignature(sig, public_key=pub))
    with pytest.raises(TypeError):
        TensorDeserializer(str(model / "model.tensors"), device="cpu", signature=str(sig))


def test_a_signed_sharded_checkpoint_hashes_every_shard_in_the_load(signed, tmp_path):
    model, sig, pub, _, tensors = signed
    ckpt = tmp_path / "ckpt"
    _run(CLI, "convert", model / "model.tensors", str(ckpt) + "/", "--max-shard-size", "300KB")
    shutil.copy(model / "config.json", ckpt / "config.json")
    key = Path(sig).parent / "signer.key"
    _run(CLI, "sign", "--private-key", key, "--signature", tmp_path / "ckpt.sig", ckpt)
    shards = sorted(ckpt.glob("*.safetensors"))
    assert len(shards) > 1
    with TensorDeserializer(str(ckpt), device="cpu", signature=ModelSignature(tmp_path / "ckpt.sig", public_key=pub)) as d:
        for name, t in tensors.items():
            assert torch.equal(d[name], t)
    with open(shards[1], "r+b") as f:
        f.seek(os.path.getsize(shards[1]) - 10)
        f.write(b"\x00\x01")
    with pytest.raises(HashMismatchError, match=shards[1].name):
        TensorDeserializer(str(ckpt), device="cpu", signature=ModelSignature(tmp_path / "ckpt.sig", public_key=pub))

"""Our package against tensorizer 2.12.1 (data version 5): it reads every reference file 2.12.1 writes
(tests/vectors/make_vectors.py --tensorizer 2.12.1), writes the v5 ones byte for byte, and 2.12.1
reads what it writes. 2.12.1 lives in the venv scripts/setup.sh makes (``TZ_TENSORIZER_2121_PYTHON``
overrides its python; ``TZ_VECTORS_2121`` names ready vectors); without it these tests skip.
"""

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import tensorizer
from tensorizer import TensorDeserializer, TensorSerializer

ROOT = pathlib.Path(__file__).resolve().parents[2]
PEER_PYTHON = os.environ.get("TZ_TENSORIZER_2121_PYTHON", "/opt/tz-peers/tensorizer-2.12.1/bin/python")
PEER_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
FILES = ["small_mixed", "module", "nested", "meta_v4", "encrypted", "long_v5", "long_v5_meta", "long_v5_encrypted"]


@pytest.fixture(scope="session")
def vectors_2121(tmp_path_factory):
    given = os.environ.get("TZ_VECTORS_2121")
    if given:
        return pathlib.Path(given)
    out = tmp_path_factory.mktemp("vectors-2.12.1")
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "vectors" / "make_vectors.py"), "--tensorizer",
                           "2.12.1", "--python", PEER_PYTHON, str(out)],
                          env=dict(PEER_ENV, PYTHONDONTWRITEBYTECODE="1"), capture_output=True, text=True, timeout=600)
    if proc.returncode == 77:
        pytest.skip(proc.stdout.strip())
    assert proc.returncode == 0, f"make_vectors.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return out


def raw(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("name", FILES)
def test_reads_every_file_tensorizer_2121_writes(vectors_2121, name):
    manifest = json.loads((vectors_2121 / f"{name}.manifest.json").read_text())
    enc = None
    if manifest.get("encryption"):
        enc = tensorizer.DecryptionParams.from_key(bytes.fromhex(manifest["encryption"]["key_hex"]))
    # A meta tensor of 4 GiB (sha256 null in its manifest) would load as 4 GiB of zeros: left out.
    huge = {m["name"] for m in manifest["tensors"] if m["sha256"] is None}
    want = [m for m in manifest["tensors"] if m["name"] not in huge]
    with TensorDeserializer(vectors_2121 / f"{name}.tensors", device="cpu", verify_hash=True, lazy_load=True,
                            encryption=enc, filter_func=(lambda n: n not in huge) if huge else None) as d:
        rows = list(d.read_tensors())
    assert len(rows) == len(want)
    for (idx, kind, got_name, t), m in zip(rows, want):
        assert got_name == (m["name"] if m["name"] is not None else tuple(m["path"]))
        assert (str(t.dtype), list(t.shape), kind.name, idx) == (m["dtype"], m["shape"], m["tensor_type"],
                                                                 m["file"]["module_idx"])
        assert hashlib.sha256(raw(t)).hexdigest() == m["sha256"]


def long_v5_state_dict():
    sys.path.insert(0, str(ROOT / "tests" / "vectors"))
    try:
        import cases_2121
    finally:
        sys.path.pop(0)
    return {spec.path[0]: spec.tensor for spec in cases_2121.long_v5().specs}


def test_writes_data_version_5_as_2121_does_and_2121_reads_it(vectors_2121, tmp_path):
    ours = tmp_path / "long_v5.tensors"
    serializer = TensorSerializer(ours)
    serializer.write_state_dict(long_v5_state_dict())
    serializer.close()
    assert ours.read_bytes() == (vectors_2121 / "long_v5.tensors").read_bytes()
    # 2.12.1 itself reads it back, verified.
    code = ("import sys, torch; from tensorizer import TensorDeserializer\n"
            "with TensorDeserializer(sys.argv[1], device='cpu', verify_hash=True) as d:\n"
            "    print(sorted((k, list(v.shape)) for k, v in d.items()))\n")
    proc = subprocess.run([PEER_PYTHON, "-s", "-c", code, str(ours)], env=PEER_ENV, capture_output=True, text=True,
                          timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr
    want = sorted((k, list(v.shape)) for k, v in long_v5_state_dict().items())
    assert proc.stdout.strip() == str(want)

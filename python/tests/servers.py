"""Starting the loopback test servers (scripts/servers/{nginx,redis,rgw}.sh) from the Python tests:
one place for the start, the skip reasons and the stop."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "servers"


def start(script: str, workdir: Path, port_base: int, tries: int = 1):
    """Runs SCRIPT start WORKDIR PORT_BASE and returns a function that stops it. Skips the test when
    the server is not installed (exit 77) or does not come up (after `tries` attempts; a late
    server is stopped before the next attempt and before skipping)."""
    path = SCRIPTS / script
    if not path.is_file():
        pytest.skip(f"{path} not found")
    if shutil.which("bash") is None:
        pytest.skip("bash not found")

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(path), command, str(workdir), str(port_base)], capture_output=True,
                              text=True, timeout=300)

    for _ in range(max(tries, 1)):
        out = run("start")
        if out.returncode == 77:
            pytest.skip(f"{script}: {out.stderr.strip() or 'not installed'}")
        if out.returncode == 0:
            return lambda: run("stop")
        run("stop")  # a server that came up late must not outlive the attempt
    pytest.skip(f"{script} could not start a server on port base {port_base}: {out.stderr.strip()[-500:]}")

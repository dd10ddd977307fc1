"""The native module releases the GIL during long calls, and open/close cycles leak nothing.

GIL: a ticker thread sleeps 1 ms per tick (re-acquiring the GIL for each tick). While a load that
holds the GIL runs, it cannot tick at all; we require many ticks *inside* the load's time window.
Leaks: 1,000 TensorDeserializer open/load/close cycles must return to the same number of threads and
open file descriptors, and grow the resident set by less than a generous bound.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import tensorizer
from tensorizer import TensorDeserializer, TensorSerializer
from tensorizer import _C


def _write_model(path: str, tensors: int, elements: int) -> None:
    gen = torch.Generator().manual_seed(7)
    with TensorSerializer(path) as s:
        for i in range(tensors):
            s.write_tensor(0, f"layer.{i}.weight", tensorizer.TensorType.PARAM,
                           torch.randn(elements, generator=gen))


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> str:
    # 32 tensors x 4 Mi float32 = 512 MiB: long enough that the call spans many 1 ms ticks.
    path = str(tmp_path_factory.mktemp("gil") / "big.tensors")
    _write_model(path, tensors=32, elements=4 << 20)
    return path


def _ticks_during(call) -> tuple[int, float]:
    """Runs call() on this thread while a ticker thread ticks; returns (ticks inside the call, its seconds)."""
    stamps: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        while not stop.is_set():
            time.sleep(0.001)
            stamps.append(time.perf_counter())

    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.02)  # the ticker is running before the call starts
    start = time.perf_counter()
    call()
    end = time.perf_counter()
    stop.set()
    t.join()
    return sum(1 for s in stamps if start < s < end), end - start


@pytest.mark.parametrize("verify", [False, True])
def test_native_load_releases_the_gil(big_file: str, verify: bool) -> None:
    reader = _C.Reader(_C.Source.open(big_file))
    ticks, seconds = _ticks_during(lambda: reader.load(verify=verify))
    # A GIL-holding call allows no tick at all; a released one ~1 per ms (less on a busy machine).
    assert seconds > 0.02, f"the load took {seconds:.3f} s: too short to tell"
    assert ticks >= max(5, int(seconds * 1000 * 0.1)), f"{ticks} ticks in {seconds:.3f} s of loading"


def test_deserializer_releases_the_gil(big_file: str) -> None:
    holder = []
    ticks, seconds = _ticks_during(lambda: holder.append(TensorDeserializer(big_file, device="cpu", verify_hash=True)))
    assert len(holder[0]) == 32
    assert seconds > 0.02
    assert ticks >= max(5, int(seconds * 1000 * 0.1)), f"{ticks} ticks in {seconds:.3f} s of loading"
    holder[0].close()


def test_writer_releases_the_gil(tmp_path) -> None:
    big = torch.randn(16 << 20)  # 64 MiB, hashed (CRC32 + SHA-256) and written in one call
    path = str(tmp_path / "w.tensors")

    def write() -> None:
        with TensorSerializer(path) as s:
            s.write_tensor(0, "big", tensorizer.TensorType.PARAM, big)

    ticks, seconds = _ticks_during(write)
    assert seconds > 0.02
    assert ticks >= max(5, int(seconds * 1000 * 0.1)), f"{ticks} ticks in {seconds:.3f} s of writing"


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leaks_over_1000_open_close_cycles(tmp_path) -> None:
    path = str(tmp_path / "small.tensors")
    _write_model(path, tensors=8, elements=16 << 10)  # 8 x 64 KiB

    def cycle(lazy: bool) -> None:
        with TensorDeserializer(path, device="cpu", lazy_load=lazy, verify_hash=True) as d:
            total = sum(float(t.detach().sum()) for t in d.values())
            assert total == total  # touch every tensor (NaN-free data)

    for _ in range(20):  # warm up allocator pools, torch's lazy init, the shared scheduler
        cycle(False)
        cycle(True)
    gc.collect()
    threads, fds, rss = _threads(), _fds(), _rss_bytes()
    for i in range(1000):
        cycle(lazy=bool(i % 2))
    gc.collect()
    time.sleep(0.05)  # a scheduler whose last holder died joins its workers synchronously; be generous
    assert _threads() == threads, f"threads {threads} -> {_threads()}"
    assert _fds() == fds, f"open file descriptors {fds} -> {_fds()}"
    grown = _rss_bytes() - rss
    # 1,000 cycles x 512 KiB loaded = 500 MiB passed through; a leak of even one load per cycle shows.
    assert grown < 32 << 20, f"resident set grew by {grown / 2**20:.1f} MiB over 1,000 cycles"


def test_a_forked_child_loads_with_its_own_workers(tmp_path) -> None:
    """After a fork (multiprocessing, DataLoader workers) the child has none of the parent's engine
    threads; its loads must start their own instead of waiting forever on the parent's."""
    path = str(tmp_path / "fork.tensors")
    _write_model(path, tensors=4, elements=1 << 16)
    with TensorDeserializer(path, device="cpu") as d:  # the parent's scheduler exists now
        expected = {k: v.detach().clone() for k, v in d.items()}
        keep_alive = _C.Reader(_C.Source.open(path))  # and stays alive across the fork
        pid = os.fork()
        if pid == 0:  # child: exit status 0 only when the load worked and matched
            code = 1
            try:
                # As DataLoader workers do: torch's OpenMP pool does not survive a fork.
                torch.set_num_threads(1)
                with TensorDeserializer(path, device="cpu", verify_hash=True) as c:
                    same = all((c[k].detach().numpy() == v.numpy()).all() for k, v in expected.items())
                    code = 0 if same else 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's load hung")
        assert os.waitstatus_to_exitcode(status) == 0
        assert len(keep_alive.entries) == 4  # the parent's objects still work
        assert len(keep_alive.load()) == 4


def test_loads_one_after_another_reuse_the_engine_workers(tmp_path) -> None:
    """Opening, loading and dropping a model per call (serving code does) must not start and join
    the engine's workers (and their io_uring rings) each time: on an H100 that was ~8 ms a load.
    Run in a fresh interpreter so that no other test's open reader keeps the workers alive."""
    path = str(tmp_path / "again.tensors")
    _write_model(path, tensors=4, elements=1 << 12)
    script = textwrap.dedent(
        f"""
        import gc, os, sys
        import torch
        torch.set_num_threads(1)
        from tensorizer import TensorDeserializer

        def cycle():
            with TensorDeserializer({path!r}, device="cpu", lazy_load=True) as d:
                assert d["layer.0.weight"].numel() == 1 << 12
                threads = set(os.listdir("/proc/self/task"))  # the open reader's workers among them
                assert len(list(d.values())) == 4
            gc.collect()
            return threads

        first = cycle()
        later = [cycle() for _ in range(5)]
        print(len(first), [len(t) for t in later], [len(first & t) for t in later])
        sys.exit(0 if all(t == first for t in later) else 3)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"threads first, later, kept from the first: {done.stdout.strip()} {done.stderr[-2000:]}"

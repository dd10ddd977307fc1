"""Partitioned and sliced loads over torch.distributed (gloo on loopback, world sizes 2 and 4, one
process per rank, distributed_worker.py): every rank's tensors are bit-identical to a
single-process load (plain, verified, encrypted; one file, a sharded safetensors checkpoint,
HTTP through the test nginx), each rank reads 1/N of the data within one range, slices equal
torch.chunk of the whole, and a failing or dying rank is reported on every rank within the bound.
Beyond tensorizer 2.11.1: our package only."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import servers

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from tensorizer import DecryptionParams, EncryptionParams, TensorDeserializer, TensorSerializer  # noqa: E402

WORKER = Path(__file__).with_name("distributed_worker.py")
PORT_BASE = int(os.environ.get("TZ_DIST_PORT_BASE", "27200"))  # nginx at base + 80
WAIT_S = 180  # a whole world's run, 4 interpreters importing torch on 2 busy cores included
GROUP_TIMEOUT_S = 20  # the process group's collective timeout: the bound on reporting a failure

SLICES = {"w_rows": [0], "w_cols": [1], "v1d": [0], "t3d": [1], "w_explicit": [1, 3, 10]}


def model() -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "big": torch.randn(1536, 1024, generator=g),  # 6 MiB: cut inside it, encrypted over 3 chunks
        "w_rows": torch.randn(37, 1000, generator=g),
        "w_cols": torch.randn(300, 257, generator=g).to(torch.bfloat16),
        "v1d": torch.randint(0, 255, (1001,), generator=g, dtype=torch.uint8),
        "t3d": torch.randn(5, 7, 300, generator=g).to(torch.float16),
        "w_explicit": torch.randn(64, 33, generator=g),
        "tokens": torch.randint(0, 1 << 40, (333,), generator=g),
        "mid": torch.randn(700, 1024, generator=g),
        "empty": torch.empty(0, 3),
        "odd": torch.randn(3, generator=g).to(torch.float64),
    }


def write(path: Path, sd: dict, enc=None) -> None:
    s = TensorSerializer(str(path), encryption=enc)
    s.write_state_dict(sd)
    s.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(world: int, out: Path, **args) -> list:
    """Runs `world` ranks of distributed_worker.py and returns each rank's saved result."""
    out.mkdir(parents=True, exist_ok=True)
    args = {"out": str(out), "timeout_s": GROUP_TIMEOUT_S, **args}
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(WORKER), json.dumps(args)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = []
    deadline = time.monotonic() + WAIT_S
    for p in procs:
        try:
            logs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"a rank did not finish within {WAIT_S} s")
    results = []
    for r in range(world):
        f = out / f"rank{r}.pt"
        if str(args.get("fail")).startswith("die") and r == args.get("fail_rank", 1):
            results.append(None)
            continue
        assert f.is_file(), f"rank {r} saved nothing:\n{logs[r][-3000:]}"
        results.append(torch.load(f, weights_only=False))
    return results


def assert_identical(results: list, reference: dict, world: int, slices: dict | None = None) -> None:
    for r, got in enumerate(results):
        assert "error" not in got, got.get("error")
        assert set(got["tensors"]) == set(reference)
        for name, full in reference.items():
            t = got["tensors"][name]
            if slices and name in slices:
                spec = slices[name]
                full_part = full.narrow(spec[0], spec[1], spec[2] - spec[1]) if len(spec) == 3 else \
                    torch.chunk(full, world, spec[0])[r]
                expect = full_part
            else:
                expect = full
            assert t.dtype == expect.dtype and t.shape == expect.shape, name
            as_bytes = lambda x: x.contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
            assert torch.equal(as_bytes(t), as_bytes(expect)), f"rank {r}: {name}"


def assert_balanced(results: list, unit_bytes: int) -> None:
    """Each rank read its 1/N share of the data, give or take one unit (a cut's alignment, or the
    largest tensor) plus the tensor headers it reads."""
    data = results[0]["stats"]["data_bytes"]
    world = len(results)
    assert sum(g["stats"]["share_bytes"] for g in results) == data
    for g in results:
        st = g["stats"]
        assert abs(st["share_bytes"] - data / world) <= unit_bytes, st
        assert st["share_bytes"] <= st["read_bytes"] <= st["share_bytes"] + (16 << 10), st  # + tensor headers


def single_load(spec, **kw) -> dict:
    with TensorDeserializer(spec, device="cpu", **kw) as d:
        return {k: v.detach().clone() for k, v in d.items()}


@pytest.fixture(scope="module")
def plain_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("dist") / "m.tensors"
    write(path, model())
    return path


@pytest.mark.parametrize("world", [2, 4])
def test_plain_partitioned_load_and_slices_match_a_single_load(plain_file, tmp_path, world):
    ref = single_load(str(plain_file))
    results = run_world(world, tmp_path, spec=str(plain_file), slices=SLICES)
    assert_identical(results, ref, world, SLICES)
    assert_balanced(results, 4096)
    for r, g in enumerate(results):  # each rank's slices delivered exactly its parts' bytes
        part = lambda n, s: ref[n].narrow(s[0], s[1], s[2] - s[1]) if len(s) == 3 else torch.chunk(ref[n], world, s[0])[r]  # noqa: E731
        assert g["stats"]["slice_data_bytes"] == sum(part(n, s).numel() * ref[n].element_size() for n, s in SLICES.items())


@pytest.mark.parametrize("world", [2, 4])
def test_verified_partitioned_load_hashes_whole_tensors_on_their_owners(plain_file, tmp_path, world):
    ref = single_load(str(plain_file))
    results = run_world(world, tmp_path, spec=str(plain_file), verify=True)
    assert_identical(results, ref, world)
    assert_balanced(results, max(v.numel() * v.element_size() for v in ref.values()))


@pytest.mark.parametrize("world,fanout", [(2, "all_gather"), (4, "all_gather"), (4, "broadcast")])
def test_both_fanouts_give_every_rank_every_tensor(plain_file, tmp_path, world, fanout):
    ref = single_load(str(plain_file))
    results = run_world(world, tmp_path, spec=str(plain_file), fanout=fanout)
    assert_identical(results, ref, world)
    assert_balanced(results, 4096)


def test_verified_slices_refuse_with_a_clear_error_on_every_rank(plain_file, tmp_path):
    results = run_world(2, tmp_path, spec=str(plain_file), verify=True, slices={"w_rows": [0]})
    for g in results:
        assert "cannot verify a partial read" in g["error"], g


@pytest.mark.parametrize("world", [2, 4])
def test_encrypted_partitioned_load_cuts_at_cipher_chunks(tmp_path, world):
    enc = EncryptionParams.random()
    path = tmp_path / "e.tensors"
    write(path, model(), enc)
    ref = single_load(str(path), encryption=DecryptionParams.from_key(enc.key))
    results = run_world(world, tmp_path / "out", spec=str(path), key=enc.key.hex(), slices=SLICES)
    assert_identical(results, ref, world, SLICES)
    assert_balanced(results, 2 << 20)


@pytest.mark.parametrize("world", [2, 4])
def test_sharded_safetensors_checkpoint(tmp_path, world):
    st = pytest.importorskip("safetensors.torch")
    sd = {k: v for k, v in model().items() if v.numel()}
    names = list(sd)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for fname, keys in shards.items():
        st.save_file({k: sd[k] for k in keys}, str(tmp_path / fname))
        weight_map.update({k: fname for k in keys})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    ref = single_load(str(index))
    assert set(ref) == set(sd)
    results = run_world(world, tmp_path / "out", spec=str(index), slices=SLICES)
    assert_identical(results, ref, world, SLICES)
    assert_balanced(results, 4096)


@pytest.mark.parametrize("world", [2, 4])
def test_http_partitioned_load_through_nginx(plain_file, tmp_path_factory, world):
    root = tmp_path_factory.mktemp("dist_nginx")
    stop = servers.start("nginx.sh", root, PORT_BASE)
    try:
        shutil.copy(plain_file, root / "nginx" / "www" / "m.tensors")
        url = f"http://127.0.0.1:{PORT_BASE + 80}/m.tensors"
        ref = single_load(url)
        results = run_world(world, root / "out", spec=url, slices=SLICES)
        assert_identical(results, ref, world, SLICES)
        assert_balanced(results, 4096)
    finally:
        stop()


@pytest.mark.parametrize("world,fail", [(2, "bad_file"), (4, "bad_file"), (2, "wrong_key"), (4, "wrong_key")])
def test_a_failing_rank_is_named_on_every_rank(tmp_path, world, fail):
    enc = EncryptionParams.random()
    path = tmp_path / "e.tensors"
    write(path, model(), enc)
    results = run_world(world, tmp_path / "out", spec=str(path), key=enc.key.hex(), fail=fail, fail_rank=1)
    for g in results:
        assert "rank 1 failed to load" in g.get("error", ""), g.get("error")
        assert g["error_rank"] == 1
        assert g["elapsed_s"] < GROUP_TIMEOUT_S
    cause = "FileNotFoundError" if fail == "bad_file" else "CryptographyError"
    assert all(cause in g["error"] for g in results)


@pytest.mark.parametrize("world", [2, 4])
def test_a_dead_rank_fails_every_other_rank_within_the_group_timeout(plain_file, tmp_path, world):
    results = run_world(world, tmp_path, spec=str(plain_file), fail="die", fail_rank=1)
    for r, g in enumerate(results):
        if r == 1:
            continue
        assert "error" in g, f"rank {r} did not fail"
        assert g["elapsed_s"] < GROUP_TIMEOUT_S + 15, g
        # Named through the store (hosted by rank 0, alive here): the dead rank never arrived.
        assert g["error_rank"] == 1 and g["error"].startswith("rank 1 did not reach"), g["error"]


@pytest.mark.parametrize("world", [2, 3])
def test_a_rank_dying_during_the_fanout_fails_every_other_rank_in_bounded_time(plain_file, tmp_path, world):
    """Rank 1 passes the status exchange (its share read) and dies before the data moves: the
    others' fan-out fails, each raising DistributedLoadError within the group's timeout."""
    results = run_world(world, tmp_path, spec=str(plain_file), fail="die_in_fanout", fail_rank=1)
    for r, g in enumerate(results):
        if r == 1:
            continue
        assert "error" in g, f"rank {r} did not fail"
        assert "the fan-out failed" in g["error"], g["error"]
        assert g["elapsed_s"] < GROUP_TIMEOUT_S + 15, g


# The most pinned memory a CUDA rank may hold: the engine's largest ring (64 slots of 4 MiB, a page
# more each), whatever the model; the share itself never passes through a host buffer.
RING_BOUND_BYTES = 64 * ((4 << 20) + 4096)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("mode", ["plain", "verified", "encrypted"])
@pytest.mark.parametrize("backend,world", [("nccl", 1), ("gloo", 2)])
def test_cuda_partitioned_load_through_the_device_sink(plain_file, tmp_path, backend, world, mode):
    """Each rank's share and slices land in its GPU's memory through the engine's pinned ring, and
    fan out as CUDA tensors: NCCL at world 1; gloo with CUDA tensors at world 2 on one GPU (two
    NCCL ranks cannot share a GPU). Bit-identical to a single-process load."""
    if backend == "nccl" and not dist.is_nccl_available():
        pytest.skip("torch.distributed has no NCCL")
    spec, key, kw = plain_file, None, {}
    if mode == "encrypted":
        enc = EncryptionParams.random()
        spec, key = tmp_path / "e.tensors", enc.key.hex()
        write(spec, model(), enc)
        kw = {"encryption": DecryptionParams.from_key(enc.key)}
    ref = single_load(str(spec), **kw)
    slices = None if mode == "verified" else SLICES  # a verified slice is refused (its own test)
    results = run_world(world, tmp_path / "out", spec=str(spec), key=key, verify=mode == "verified", slices=slices,
                        backend=backend, device="cuda:0")
    assert_identical(results, ref, world, slices)
    for g in results:
        assert 0 < g["stats"]["pinned_bytes"] <= RING_BOUND_BYTES, g["stats"]
        assert g["stats"]["device"].startswith("cuda"), g["stats"]


def test_slices_without_a_group_name_their_parts(plain_file):
    from tensorizer.distributed import Slice

    ref = single_load(str(plain_file))
    slices = {"w_cols": Slice(dim=1, parts=3, index=2), "t3d": Slice(dim=-1, start=7, stop=290), "v1d": 0}
    with pytest.raises(ValueError, match="parts and index are needed"):
        TensorDeserializer(str(plain_file), device="cpu", slices={"v1d": 0})
    got = TensorDeserializer(str(plain_file), device="cpu",
                             slices={k: v for k, v in slices.items() if k != "v1d"})
    assert torch.equal(got["w_cols"], torch.chunk(ref["w_cols"], 3, 1)[2])
    assert torch.equal(got["t3d"], ref["t3d"][..., 7:290])
    assert torch.equal(got["big"], ref["big"])  # the rest loads as usual
    with pytest.raises(Exception, match="cannot verify a partial read"):
        TensorDeserializer(str(plain_file), device="cpu", verify_hash=True, slices={"w_cols": Slice(1, 2, 0)})
    with pytest.raises(ValueError, match="eager load"):
        TensorDeserializer(str(plain_file), device="cpu", lazy_load=True, slices={"w_cols": Slice(1, 2, 0)})

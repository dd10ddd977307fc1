"""tensorizer.torch_compat (format/FORMAT.md §14.1): torch.save / torch.load with a tensorizer sidecar.

The pickling machinery is tested with `save_func` / `load_func` (no native module needed); the
default sidecar path through TensorSerializer / TensorDeserializer, encryption, and byte-level
compatibility with the real tensorizer 2.11.1 (system interpreter, subprocess) need tensorizer._C.
"""

import asyncio
import inspect
import io
import os
import pickle
import subprocess
import threading
from pathlib import Path

import pytest
from realpeer import run_real
import torch

from tensorizer import torch_compat
from tensorizer.torch_compat import tensorizer_loading, tensorizer_saving

# The real tensorizer must not see our package: no PYTHONPATH / venv, no user site, run from "/".




def native():
    try:
        from tensorizer import serialization
    except ImportError as e:
        pytest.skip(f"tensorizer._C is not built: {e}")
    return serialization


class MemorySidecar:
    """save_func / load_func keeping the sidecar's tensors in memory, keyed by location."""

    def __init__(self):
        self.files = {}
        self.saves = []

    def save(self, file_obj, tensors, kwargs):
        self.saves.append((file_obj, len(tensors), dict(kwargs)))
        self.files[file_obj] = [t.clone() for t in tensors]

    def load(self, file_obj, kwargs):
        return self.files[file_obj]


def sample_objects():
    torch.manual_seed(0)
    base = torch.arange(12, dtype=torch.float32)
    return {
        "linear": torch.nn.Linear(4, 3),
        "base": base,
        "view": base[2:8].view(2, 3),  # shares base's storage
        "bf16": torch.randn(5).to(torch.bfloat16),
        "f8": torch.randn(4).to(torch.float8_e4m3fn),
        "int": torch.tensor([1, -2, 3], dtype=torch.int64),
        "meta": torch.empty(3, 2, device="meta"),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0),
        "other": [1, "two", 3.0],
    }


def check_objects(got, want):
    assert got.keys() == want.keys()
    assert torch.equal(got["linear"].weight, want["linear"].weight)
    for k in ("base", "view", "bf16", "int", "scalar", "empty"):
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    assert torch.equal(got["f8"].view(torch.uint8), want["f8"].view(torch.uint8))
    assert got["meta"].device.type == "meta" and got["meta"].shape == (3, 2)
    assert got["view"].untyped_storage().data_ptr() == got["base"].untyped_storage().data_ptr()
    assert got["other"] == want["other"]


# -- the pickling machinery (no native module) ----------------------------------------------------


def test_round_trip_through_the_sidecar(tmp_path):
    store, obj, pt = MemorySidecar(), sample_objects(), str(tmp_path / "m.pt")
    with tensorizer_saving(save_func=store.save, some_option=1):
        torch.save(obj, pt)
    assert [(f, k) for f, _, k in store.saves] == [(pt + ".tensors", {"some_option": 1})]
    tensors = store.files[pt + ".tensors"]
    assert all(t.dtype == torch.uint8 and t.dim() == 1 for t in tensors)
    # One per storage with data, in bytes: base (the view shares it) 48, weight 48, bias 12, bf16 10,
    # int64 24, float8 4, scalar 4; the empty and the meta tensor have no data and stay with torch.
    assert sorted(t.numel() for t in tensors) == [4, 4, 10, 12, 24, 48, 48]
    with tensorizer_loading(load_func=store.load):
        check_objects(torch.load(pt), obj)


def test_storages_are_deduplicated_and_sized_as_whole_storages(tmp_path):
    store, pt = MemorySidecar(), str(tmp_path / "d.pt")
    base = torch.arange(10, dtype=torch.float64)
    obj = [base, base[3:], base.view(2, 5), torch.ones(3, dtype=torch.int8)]
    with tensorizer_saving(save_func=store.save):
        torch.save(obj, pt)
    assert [t.numel() for t in store.files[pt + ".tensors"]] == [80, 3]
    with tensorizer_loading(load_func=store.load):
        got = torch.load(pt)
    assert all(torch.equal(a, b) for a, b in zip(got, obj))
    assert len({t.untyped_storage().data_ptr() for t in got[:3]}) == 1


def test_set_storage_sharing_survives(tmp_path):
    store, pt = MemorySidecar(), str(tmp_path / "s.pt")
    a = torch.arange(6, dtype=torch.float32)
    b = torch.empty(0).set_(a.untyped_storage(), 2, (2,), (1,))
    with tensorizer_saving(save_func=store.save):
        torch.save({"a": a, "b": b}, pt)
    with tensorizer_loading(load_func=store.load):
        got = torch.load(pt)
    got["a"][2] = 100.0
    assert got["b"][0].item() == 100.0


def test_pickle_references_have_tensorizers_format(tmp_path):
    store, pt = MemorySidecar(), str(tmp_path / "p.pt")
    with tensorizer_saving(save_func=store.save):
        torch.save({"x": torch.ones(2, dtype=torch.float16)}, pt)
    seen = []

    class Recorder(pickle.Unpickler):
        def persistent_load(self, pid):
            seen.append(pid)
            return torch.TypedStorage(wrap_storage=store.files[pt + ".tensors"][pid[3]].untyped_storage(),
                                      dtype=pid[4], _internal=True)

    import zipfile

    with zipfile.ZipFile(pt) as z:
        data = z.read([n for n in z.namelist() if n.endswith("data.pkl")][0])
    Recorder(io.BytesIO(data)).load()
    assert seen == [("TensorizerPickler", 0, "storage", 0, torch.float16)]


def test_signatures_of_torch_save_and_load_stay_intact():
    save_sig, load_sig = inspect.signature(torch.save), inspect.signature(torch.load)
    with tensorizer_saving(), tensorizer_loading():
        assert torch.save is not torch_compat._ORIG_TORCH_SAVE
        assert inspect.signature(torch.save) == save_sig and inspect.signature(torch.load) == load_sig
    assert torch.save is torch_compat._ORIG_TORCH_SAVE and torch.load is torch_compat._ORIG_TORCH_LOAD


def test_no_sidecar_without_tensor_data(tmp_path):
    store, pt = MemorySidecar(), str(tmp_path / "n.pt")
    with tensorizer_saving(save_func=store.save):
        torch.save({"meta": torch.empty(4, device="meta"), "n": 3}, pt)
    assert store.saves == []
    with tensorizer_loading(load_func=store.load):
        got = torch.load(pt)
    assert got["n"] == 3 and got["meta"].is_meta


def test_file_obj_paths_and_callbacks(tmp_path):
    store = MemorySidecar()
    pt = str(tmp_path / "c.pt")
    with tensorizer_saving("explicit.tensors", save_func=store.save):
        torch.save(torch.ones(2), pt)
    with tensorizer_loading("explicit.tensors", load_func=store.load):
        assert torch.equal(torch.load(pt), torch.ones(2))
    with tensorizer_saving(lambda f: f + ".custom", save_func=store.save):
        torch.save(torch.ones(3), pt)
    assert [f for f, _, _ in store.saves] == ["explicit.tensors", pt + ".custom"]
    with tensorizer_loading(lambda f: f + ".custom", load_func=store.load):
        assert torch.equal(torch.load(pt), torch.ones(3))
    # A callback returning None: plain torch serialization for that call.
    with tensorizer_saving(lambda f: None, save_func=store.save):
        torch.save(torch.ones(4), pt)
    assert len(store.saves) == 2
    assert torch.equal(torch.load(pt, weights_only=True), torch.ones(4))
    with tensorizer_loading(lambda f: None, load_func=store.load):
        assert torch.equal(torch.load(pt, weights_only=True), torch.ones(4))


def test_file_objects_use_their_name_and_bytesio_falls_back(tmp_path, caplog):
    store, pt = MemorySidecar(), tmp_path / "f.pt"
    with tensorizer_saving(save_func=store.save), open(pt, "wb") as f:
        torch.save(torch.ones(2), f)
    assert [s[0] for s in store.saves] == [str(pt) + ".tensors"]
    buf = io.BytesIO()
    with tensorizer_saving(save_func=store.save), caplog.at_level("WARNING"):
        torch.save(torch.ones(5), buf)
    assert len(store.saves) == 1 and "Cannot infer" in caplog.text
    buf.seek(0)
    with tensorizer_loading(load_func=store.load):
        assert torch.equal(torch.load(buf, weights_only=True), torch.ones(5))


def test_other_pickle_modules_are_refused(tmp_path):
    import types

    other = types.ModuleType("other_pickle")
    with tensorizer_saving(), pytest.raises(ValueError, match="pickle_module"):
        torch.save(torch.ones(1), str(tmp_path / "x.pt"), pickle_module=other)
    with tensorizer_loading(), pytest.raises(ValueError, match="pickle_module"):
        torch.load(str(tmp_path / "x.pt"), pickle_module=other)


def test_weights_only_needs_suppression(tmp_path):
    store, pt = MemorySidecar(), str(tmp_path / "w.pt")
    with tensorizer_saving(save_func=store.save):
        torch.save({"t": torch.ones(2)}, pt)
    with tensorizer_loading(load_func=store.load), pytest.raises(RuntimeError, match="suppress_weights_only"):
        torch.load(pt, weights_only=True)
    with tensorizer_loading(load_func=store.load, suppress_weights_only=True):
        assert torch.equal(torch.load(pt, weights_only=True)["t"], torch.ones(2))


def test_unknown_reference_versions_and_kinds_are_refused(tmp_path):
    store, pt = MemorySidecar(), str(tmp_path / "v.pt")
    store.files["v"] = [torch.zeros(4, dtype=torch.uint8)]
    for pid, message in ((("TensorizerPickler", 1, "storage", 0, None), "version"),
                         (("TensorizerPickler", 0, "module", 0, None), "object type")):
        class P(pickle.Pickler):
            def persistent_id(self, obj, pid=pid):
                return pid if isinstance(obj, torch.UntypedStorage) else None

        buf = io.BytesIO()
        P(buf).dump(torch.UntypedStorage(4))
        with tensorizer_loading("v", load_func=store.load):
            # What torch.load's wrapper does before unpickling: resolve the sidecar.
            token = torch_compat._load_target.set("v")
            try:
                u = torch_compat._tensorizer_pickle.Unpickler(io.BytesIO(buf.getvalue()))
                with pytest.raises(pickle.UnpicklingError, match=message):
                    u.load()
            finally:
                torch_compat._load_target.reset(token)


def test_plain_pt_files_load_inside_the_loading_context(tmp_path):
    pt = str(tmp_path / "plain.pt")
    torch.save({"t": torch.arange(3)}, pt)
    with tensorizer_loading():  # the sidecar does not exist and is never opened
        assert torch.equal(torch.load(pt)["t"], torch.arange(3))


def test_nested_and_mixed_contexts(tmp_path):
    outer, inner = MemorySidecar(), MemorySidecar()
    pt = str(tmp_path / "n.pt")
    with tensorizer_saving(save_func=outer.save):
        with tensorizer_saving(save_func=inner.save, level="inner"):
            torch.save(torch.ones(2), pt)
        torch.save(torch.ones(3), pt)
        with tensorizer_loading(load_func=outer.load):
            assert torch.equal(torch.load(pt), torch.ones(3))
    assert [s[2] for s in inner.saves] == [{"level": "inner"}] and len(outer.saves) == 1
    assert torch.save is torch_compat._ORIG_TORCH_SAVE and torch.load is torch_compat._ORIG_TORCH_LOAD


def test_contexts_are_per_thread(tmp_path):
    store = MemorySidecar()
    entered, done = threading.Event(), threading.Event()
    errors = []

    def saver():
        try:
            with tensorizer_saving(save_func=store.save):
                entered.set()
                done.wait(30)
                torch.save(torch.ones(2), str(tmp_path / "thread.pt"))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=saver)
    t.start()
    assert entered.wait(30)
    # While the other thread's context is active, this thread's torch.save is the plain one.
    torch.save(torch.ones(3), str(tmp_path / "main.pt"))
    assert torch.equal(torch.load(str(tmp_path / "main.pt"), weights_only=True), torch.ones(3))
    done.set()
    t.join(30)
    assert errors == [] and [s[0] for s in store.saves] == [str(tmp_path / "thread.pt") + ".tensors"]


def test_contexts_are_per_async_task(tmp_path):
    store = MemorySidecar()

    async def inside(ready, go):
        with tensorizer_saving(save_func=store.save):
            ready.set()
            await go.wait()
            torch.save(torch.ones(2), str(tmp_path / "task.pt"))

    async def outside(ready, go):
        await ready.wait()
        torch.save(torch.ones(2), str(tmp_path / "other.pt"))
        go.set()

    async def main():
        ready, go = asyncio.Event(), asyncio.Event()
        await asyncio.gather(inside(ready, go), outside(ready, go))

    asyncio.run(main())
    assert [s[0] for s in store.saves] == [str(tmp_path / "task.pt") + ".tensors"]


def test_a_module_pickles_whole(tmp_path):
    store, pt = MemorySidecar(), str(tmp_path / "module.pt")
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    with tensorizer_saving(save_func=store.save):
        torch.save(model, pt)
    assert os.path.getsize(pt) < 64 << 10
    with tensorizer_loading(load_func=store.load):
        got = torch.load(pt, weights_only=False)
    x = torch.randn(5, 3)
    assert torch.equal(got(x), model(x))


def test_legacy_torch_format_works_too(tmp_path):
    store, pt = MemorySidecar(), str(tmp_path / "legacy.pt")
    obj = sample_objects()
    with tensorizer_saving(save_func=store.save):
        torch.save(obj, pt, _use_new_zipfile_serialization=False)
    assert len(store.saves) == 1
    with tensorizer_loading(load_func=store.load):
        check_objects(torch.load(pt, weights_only=False), obj)


# -- pickle compatibility with the real tensorizer (no native module) -----------------------------

RAW_SIDECAR_HELPERS = """
import os, torch
def raw_save(file_obj, tensors, kwargs):
    os.makedirs(file_obj, exist_ok=True)
    for i, t in enumerate(tensors):
        with open(os.path.join(file_obj, str(i)), "wb") as f:
            f.write(t.cpu().numpy().tobytes())
def raw_load(file_obj, kwargs):
    out, i = [], 0
    while os.path.exists(os.path.join(file_obj, str(i))):
        with open(os.path.join(file_obj, str(i)), "rb") as f:
            data = bytearray(f.read())
        out.append(torch.frombuffer(data, dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8))
        i += 1
    return out
"""
exec(RAW_SIDECAR_HELPERS)  # defines raw_save / raw_load here too

CROSS_CHECK = """
import hashlib
def digest(obj):
    h = hashlib.sha256()
    for k in sorted(obj):
        v = obj[k]
        if isinstance(v, torch.Tensor):
            h.update(k.encode() + str(v.dtype).encode() + str(tuple(v.shape)).encode())
            if v.device.type != "meta":
                h.update(v.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
def make():
    torch.manual_seed(5)
    base = torch.randn(16)
    return {"a": base, "view": base[4:12].view(2, 4), "bf": torch.randn(6).to(torch.bfloat16),
            "i": torch.arange(7, dtype=torch.int32), "meta": torch.empty(2, device="meta")}
"""
exec(CROSS_CHECK)


def test_the_real_tensorizer_loads_our_pt_file(tmp_path):
    pt, sidecar = str(tmp_path / "ours.pt"), str(tmp_path / "ours.raw")
    obj = make()  # noqa: F821 (defined by exec above)
    with tensorizer_saving(sidecar, save_func=raw_save):  # noqa: F821
        torch.save(obj, pt)
    code = RAW_SIDECAR_HELPERS + CROSS_CHECK + """
import sys
from tensorizer.torch_compat import tensorizer_loading
with tensorizer_loading(sys.argv[2], load_func=raw_load):
    got = torch.load(sys.argv[1])
assert got["view"].untyped_storage().data_ptr() == got["a"].untyped_storage().data_ptr()
print(digest(got))
"""
    assert run_real(code, pt, sidecar).strip() == digest(obj)  # noqa: F821


def test_we_load_the_real_tensorizers_pt_file(tmp_path):
    pt, sidecar = str(tmp_path / "real.pt"), str(tmp_path / "real.raw")
    code = RAW_SIDECAR_HELPERS + CROSS_CHECK + """
import sys
from tensorizer.torch_compat import tensorizer_saving
with tensorizer_saving(sys.argv[2], save_func=raw_save):
    torch.save(make(), sys.argv[1])
"""
    run_real(code, pt, sidecar)
    with tensorizer_loading(sidecar, load_func=raw_load):  # noqa: F821
        got = torch.load(pt)
    assert digest(got) == digest(make())  # noqa: F821
    assert got["view"].untyped_storage().data_ptr() == got["a"].untyped_storage().data_ptr()


# -- with the native module: real sidecar files ----------------------------------------------------


def test_default_sidecar_is_a_tensors_file_of_uint8_storages(tmp_path):
    serialization = native()
    pt = str(tmp_path / "model.pt")
    obj = sample_objects()
    with tensorizer_saving():
        torch.save(obj, pt)
    assert os.path.exists(pt + ".tensors")
    with serialization.TensorDeserializer(pt + ".tensors", device="cpu") as d:
        storages = d.tree()
        assert isinstance(storages, list)
        assert all(t.dtype == torch.uint8 and t.dim() == 1 for t in storages)
    with tensorizer_loading(device="cpu"):
        check_objects(torch.load(pt), obj)


def test_encrypted_sidecar_needs_its_key(tmp_path):
    serialization = native()
    from tensorizer import DecryptionParams, EncryptionParams

    pt = str(tmp_path / "enc.pt")
    obj = sample_objects()
    encryption = EncryptionParams.random()
    with tensorizer_saving(encryption=encryption):
        torch.save(obj, pt)
    with tensorizer_loading(device="cpu", encryption=DecryptionParams.from_key(encryption.key)):
        check_objects(torch.load(pt), obj)
    with tensorizer_loading(device="cpu"), pytest.raises(serialization.CryptographyError):
        torch.load(pt)


def test_the_real_tensorizer_loads_our_files_and_sidecar(tmp_path):
    native()
    pt = str(tmp_path / "ours.pt")
    obj = make()  # noqa: F821
    with tensorizer_saving():
        torch.save(obj, pt)
    code = CROSS_CHECK + """
import sys, torch
from tensorizer.torch_compat import tensorizer_loading
with tensorizer_loading(device="cpu"):
    got = torch.load(sys.argv[1])
print(digest(got))
"""
    assert run_real("import torch\n" + code, pt).strip() == digest(obj)  # noqa: F821


def test_we_load_the_real_tensorizers_files_and_sidecar(tmp_path):
    native()
    pt = str(tmp_path / "real.pt")
    code = CROSS_CHECK + """
import sys, torch
from tensorizer.torch_compat import tensorizer_saving
with tensorizer_saving():
    torch.save(make(), sys.argv[1])
"""
    run_real("import torch\n" + code, pt)
    assert os.path.exists(pt + ".tensors")
    with tensorizer_loading(device="cpu"):
        got = torch.load(pt)
    assert digest(got) == digest(make())  # noqa: F821


def test_our_sidecar_bytes_equal_the_real_tensorizers(tmp_path):
    native()
    ours, real = str(tmp_path / "ours.pt"), str(tmp_path / "real.pt")
    with tensorizer_saving():
        torch.save(make(), ours)  # noqa: F821
    run_real("import torch\n" + CROSS_CHECK + """
import sys
from tensorizer.torch_compat import tensorizer_saving
with tensorizer_saving():
    torch.save(make(), sys.argv[1])
""", real)
    assert Path(ours + ".tensors").read_bytes() == Path(real + ".tensors").read_bytes()

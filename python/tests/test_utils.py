"""tensorizer.utils (format/FORMAT.md §11.4): byte formatting, memory statistics, no_init_or_tensor."""

import asyncio
import json
import os
import re
import subprocess
import sys
import threading

import pytest
from realpeer import run_real
import torch

from tensorizer import utils
from tensorizer.utils import (
    CPUMemoryUsage,
    GlobalGPUMemoryUsage,
    MemoryUsage,
    TorchGPUMemoryUsage,
    convert_bytes,
    get_device,
    get_gpu_name,
    get_mem_usage,
    no_init_or_tensor,
)

# The real tensorizer must not see our package: no PYTHONPATH / venv, no user site, run from "/".
SIZES = [0, 1, 999, 1000, 1023, 1024, 1500, 999_999, 10**6, 1 << 20, 1 << 30, 10**15, 999 * 10**15, 10**18,
         1 << 50, 1 << 60, 123456789012, 0.5]




def test_convert_bytes_examples_from_the_spec():
    assert convert_bytes(999) == "999.0 bytes"
    assert convert_bytes(1500) == "1.5 KB"
    assert convert_bytes(1 << 30, decimal=False) == "1.0 GiB"
    assert convert_bytes(10**18) == "1000.0 PB"
    assert convert_bytes(1536, False) == "1.5 KiB"
    assert convert_bytes(1 << 60, decimal=False) == "1024.0 PiB"


def test_convert_bytes_matches_the_real_tensorizer():
    out = run_real(
        "import json; from tensorizer.utils import convert_bytes as c;"
        f"print(json.dumps([[c(n), c(n, False)] for n in {SIZES!r}]))")
    assert json.loads(out) == [[convert_bytes(n), convert_bytes(n, False)] for n in SIZES]


def test_get_device_and_gpu_name_follow_cuda_availability():
    if torch.cuda.is_available():
        assert get_device() == torch.device("cuda")
        assert get_gpu_name() == torch.cuda.get_device_name()
    else:
        assert get_device() == torch.device("cpu")
        assert get_gpu_name() == "N/A"


def test_cpu_memory_usage_reports_this_process():
    usage = CPUMemoryUsage.now()
    assert isinstance(usage, tuple) and usage._fields == ("maxrss", "free")
    # This process has imported torch: its peak RSS is tens of MiB at least.
    assert usage.maxrss > 20 << 20
    assert usage.free > 0
    assert re.fullmatch(r"CPU: \(maxrss: [\d,]+MiB F: [\d,]+MiB\)", str(usage))


def test_memory_usage_string_has_cpu_and_gpu_parts_when_cuda_exists():
    text = get_mem_usage()
    usage = MemoryUsage.now()
    assert usage._fields == ("cpu", "gpu", "torch")
    if torch.cuda.is_available():
        assert isinstance(usage.gpu, GlobalGPUMemoryUsage) and isinstance(usage.torch, TorchGPUMemoryUsage)
        assert re.fullmatch(r"CPU: \(.*\) GPU: \(U: [\d,]+MiB F: [\d,]+MiB T: [\d,]+MiB\) "
                            r"TORCH: \(R: [\d,]+MiB/[\d,]+MiB, A: [\d,]+MiB/[\d,]+MiB\)", text)
    else:
        assert usage.gpu is None and usage.torch is None
        assert GlobalGPUMemoryUsage.now() is None and TorchGPUMemoryUsage.now() is None
        assert re.fullmatch(r"CPU: \(maxrss: [\d,]+MiB F: [\d,]+MiB\)", text)


def test_gpu_usage_strings_format_mib_like_tensorizer():
    assert str(GlobalGPUMemoryUsage(3 << 30, 1 << 30, 2 << 30)) == "GPU: (U: 2,048MiB F: 1,024MiB T: 3,072MiB)"
    assert str(TorchGPUMemoryUsage(1 << 20, 2 << 20, 3 << 20, 4 << 20)) == "TORCH: (R: 1MiB/2MiB, A: 3MiB/4MiB)"


# -- no_init_or_tensor ----------------------------------------------------------------------------

def originals():
    return (torch.empty, torch.nn.Linear.reset_parameters, torch.nn.Embedding.reset_parameters,
            torch.nn.LayerNorm.reset_parameters)


def build():
    return torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))


def all_meta(model):
    return all(p.device.type == "meta" for p in model.parameters())


def test_no_init_context_builds_on_meta_and_restores_torch():
    before = originals()
    with no_init_or_tensor():
        model = build()
        assert torch.empty(3).device.type == "meta"
        assert torch.empty(3, device="cpu").device.type == "meta"  # forced, whatever is asked
    assert all_meta(model)
    assert originals() == before
    assert torch.empty(3).device.type == "cpu"
    assert not all_meta(build())


def test_no_init_skips_reset_parameters(monkeypatch):
    calls = []
    original = torch.nn.Linear.reset_parameters
    monkeypatch.setattr(torch.nn.Linear, "reset_parameters", lambda self: calls.append(self) or original(self))
    with no_init_or_tensor():
        torch.nn.Linear(2, 2)
    assert calls == []
    torch.nn.Linear(2, 2)
    assert len(calls) == 1


def test_no_init_as_call_wrapper_returns_the_result():
    model = no_init_or_tensor(build)
    assert all_meta(model)
    assert no_init_or_tensor(lambda: 42) == 42


@pytest.mark.parametrize("bad", [1, "model", object()])
def test_no_init_rejects_non_callables(bad):
    with pytest.raises(TypeError, match="expected a callable"):
        no_init_or_tensor(bad)


def test_no_init_is_reentrant():
    before = originals()
    with no_init_or_tensor():
        with no_init_or_tensor():
            assert torch.empty(1).device.type == "meta"
        assert torch.empty(1).device.type == "meta"  # the inner exit did not end the outer context
        assert no_init_or_tensor(lambda: torch.empty(1)).device.type == "meta"
    assert originals() == before


def test_no_init_restores_after_an_exception():
    before = originals()
    with pytest.raises(KeyError):
        with no_init_or_tensor():
            raise KeyError("boom")
    assert originals() == before


def test_no_init_leaves_someone_elses_later_patch_alone():
    mine = torch.empty
    try:
        with no_init_or_tensor():
            patched = lambda *a, **k: mine(*a, **k)  # noqa: E731
            torch.empty = patched
        assert torch.empty is patched
    finally:
        torch.empty = mine


def test_no_init_is_scoped_to_its_thread():
    inside, outside_done, results = threading.Event(), threading.Event(), {}

    def worker():
        with no_init_or_tensor():
            inside.set()
            outside_done.wait(30)
            results["worker"] = torch.empty(2).device.type

    original_empty = torch.empty
    t = threading.Thread(target=worker)
    t.start()
    assert inside.wait(30)
    # The worker's context is active (torch.empty is swapped process-wide) but this thread is outside it.
    assert torch.empty is not original_empty
    results["main"] = torch.empty(2).device.type
    results["main_model_meta"] = all_meta(build())
    outside_done.set()
    t.join(30)
    assert results == {"worker": "meta", "main": "cpu", "main_model_meta": False}
    assert torch.empty(1).device.type == "cpu"


def test_no_init_is_scoped_to_its_async_task():
    async def inside(ready, go):
        with no_init_or_tensor():
            ready.set()
            await go.wait()
            return torch.empty(1).device.type

    async def outside(ready, go):
        await ready.wait()
        kind = torch.empty(1).device.type
        go.set()
        return kind

    async def main():
        ready, go = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(inside(ready, go), outside(ready, go))

    assert asyncio.run(main()) == ["meta", "cpu"]


def test_no_init_concurrent_threads_keep_the_swap_until_the_last_leaves():
    before = originals()
    barrier = threading.Barrier(4)
    errors = []

    def worker():
        try:
            for _ in range(20):
                with no_init_or_tensor():
                    barrier.wait(30)
                    assert torch.empty(1).device.type == "meta"
                barrier.wait(30)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert originals() == before


def test_utils_does_not_need_the_native_module():
    code = ("import sys, tensorizer.utils as u; u.no_init_or_tensor(lambda: None);"
            "print('tensorizer._C' in sys.modules, 'tensorizer.serialization' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_utils_all_matches_tensorizer():
    assert set(utils.__all__) == {"convert_bytes", "get_device", "GlobalGPUMemoryUsage", "TorchGPUMemoryUsage",
                                  "CPUMemoryUsage", "MemoryUsage", "get_mem_usage", "get_gpu_name",
                                  "no_init_or_tensor"}


# -- the package's top level ----------------------------------------------------------------------

TENSORIZER_ALL = ["TensorSerializer", "TensorDeserializer", "TensorType", "CryptographyError", "EncryptionParams",
                  "DecryptionParams", "FilterFuncType", "stream_io", "torch_compat", "utils", "protobuf",
                  "tensors_pb2"]


def test_package_all_is_tensorizers():
    import tensorizer

    assert tensorizer.__all__ == TENSORIZER_ALL
    assert isinstance(tensorizer.__version__, str) and tensorizer.__version__
    assert set(TENSORIZER_ALL) <= set(dir(tensorizer))


def test_import_is_lazy_and_star_import_gets_everything():
    code = (
        "import sys, tensorizer\n"
        "print(sorted(m for m in ('torch', 'tensorizer._C', 'tensorizer.serialization') if m in sys.modules))\n"
        "ns = {}\n"
        "exec('from tensorizer import *', ns)\n"
        "import tensorizer.serialization as s, tensorizer._crypt as c, types\n"
        "assert ns['TensorSerializer'] is s.TensorSerializer and ns['EncryptionParams'] is c.EncryptionParams\n"
        "assert ns['DecryptionParams'] is c.DecryptionParams and ns['TensorType'] is s.TensorType\n"
        "assert all(isinstance(ns[m], types.ModuleType) for m in ('stream_io', 'torch_compat', 'utils',"
        " 'protobuf', 'tensors_pb2'))\n"
        "print(sorted(set(tensorizer.__all__) - set(ns)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if out.returncode != 0 and ("import name '_C'" in out.stderr or "No module named 'tensorizer._C'" in out.stderr):
        pytest.skip("tensorizer._C is not built")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "[]"]


def test_unknown_attributes_raise_attribute_error():
    import tensorizer

    with pytest.raises(AttributeError):
        tensorizer.no_such_name  # noqa: B018

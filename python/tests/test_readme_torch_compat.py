"""tensorizer's README examples, continued (see test_readme_examples.py for what was adapted): the
PyTorch compatibility (torch_compat) examples and the README's smaller feature examples
(concurrent reads, state dicts, bfloat16, numpy), run as tests."""

from __future__ import annotations

import importlib.util
import io
import os
from pathlib import Path

import pytest
import torch

from tensorizer import TensorDeserializer, TensorSerializer, TensorType
from readme_helpers import DEVICE, TinyNet, assert_same_tensors, tiny_model_for_readme


# ---------------------------------------------------------------------------------------------
# PyTorch Compatibility


def test_readme_pytorch_compatibility_example(in_tmp):
    from tensorizer import TensorDeserializer, TensorSerializer
    import torch

    model: torch.nn.Module = tiny_model_for_readme()

    # Saving with torch.save
    state_dict = model.state_dict()
    torch.save(state_dict, "model.pt")

    # Loading with torch.load
    state_dict = torch.load("model.pt", map_location=DEVICE)
    model.load_state_dict(state_dict)

    # Saving with tensorizer.TensorSerializer
    state_dict = model.state_dict()
    serializer = TensorSerializer("model.tensors")
    serializer.write_state_dict(state_dict)
    serializer.close()

    # Loading with tensorizer.TensorDeserializer
    fresh = tiny_model_for_readme(seed=99).to(DEVICE)  # a different model, to see the load take effect
    with TensorDeserializer("model.tensors", device=DEVICE) as state_dict:
        fresh.load_state_dict(state_dict)

    assert_same_tensors(fresh.state_dict(), model.state_dict())


def test_readme_torch_compat_example(in_tmp):
    import torch
    from tensorizer.torch_compat import tensorizer_loading, tensorizer_saving

    model: torch.nn.Module = tiny_model_for_readme()

    state_dict = model.state_dict()

    # Saving with torch.save, internally using tensorizer.TensorSerializer
    with tensorizer_saving("model.pt.tensors"):
        torch.save(state_dict, "model.pt")

    # Loading with torch.load, internally using tensorizer.TensorDeserializer
    with tensorizer_loading("model.pt.tensors", device=DEVICE):
        state_dict = torch.load("model.pt")
    fresh = tiny_model_for_readme(seed=99).to(DEVICE)
    fresh.load_state_dict(state_dict)

    assert_same_tensors(fresh.state_dict(), model.state_dict())
    # The tensor data went to the sidecar, not into the pickle.
    data_bytes = sum(t.nbytes for t in model.state_dict().values())
    assert os.path.getsize("model.pt.tensors") > data_bytes > os.path.getsize("model.pt")
    with TensorDeserializer("model.pt.tensors", device="cpu", lazy_load=True) as d:
        assert len(d) > 0


def test_readme_torch_compat_callback_example(in_tmp):
    import torch
    from tensorizer.torch_compat import tensorizer_loading, tensorizer_saving

    def tensors_path(f: torch.types.FileLike) -> str | None:
        if isinstance(f, str):
            return f.replace(".pt", "-tensor-data.tensors", 1)
        else:
            # Returning None will save normally, without using tensorizer.
            # This is useful for file-like objects like io.BytesIO,
            # where sidecar files don't make sense.
            return None

    model: torch.nn.Module = tiny_model_for_readme()
    state_dict = model.state_dict()

    with tensorizer_saving(tensors_path):
        # Will save to model.pt and model-tensor-data.tensors
        torch.save(state_dict, "model.pt")

    with tensorizer_loading(tensors_path, device=DEVICE):
        # Will load from model.pt and model-tensor-data.tensors
        state_dict = torch.load("model.pt")
    fresh = tiny_model_for_readme(seed=99).to(DEVICE)
    fresh.load_state_dict(state_dict)

    assert_same_tensors(fresh.state_dict(), model.state_dict())
    assert sorted(os.listdir(".")) == ["model-tensor-data.tensors", "model.pt"]

    # A BytesIO target: the callback returns None, torch saves as usual.
    buffer = io.BytesIO()
    with tensorizer_saving(tensors_path):
        torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    with tensorizer_loading(tensors_path):
        plain = torch.load(buffer)
    assert_same_tensors(plain, model.state_dict())
    assert sorted(os.listdir(".")) == ["model-tensor-data.tensors", "model.pt"]


def test_readme_torch_compat_saved_reference_is_not_intercepted(in_tmp):
    from tensorizer.torch_compat import tensorizer_saving
    from torch import save as original_torch_save

    model = tiny_model_for_readme()
    with tensorizer_saving():
        # This won't work, but torch.save(..., "model.pt") would work
        original_torch_save(model.state_dict(), "model.pt")
    assert not os.path.exists("model.pt.tensors")
    assert_same_tensors(torch.load("model.pt"), model.state_dict())

    with tensorizer_saving():
        torch.save(model.state_dict(), "model2.pt")
    assert os.path.exists("model2.pt.tensors")


def test_torch_compat_module_docstring_example(in_tmp):
    """torch_compat's module docstring: a whole module through torch.save / torch.load."""
    import os
    import torch
    from tensorizer.torch_compat import (
        tensorizer_saving, tensorizer_loading
    )

    module: torch.nn.Module = tiny_model_for_readme()

    with tensorizer_saving():
        torch.save(module, "module.pt")

    assert os.path.exists("module.pt")
    assert os.path.exists("module.pt.tensors")

    # weights_only=False: a whole module is a pickle of arbitrary objects (torch >= 2.6 defaults to
    # weights_only=True, which the docstring predates).
    with tensorizer_loading(device=DEVICE, num_readers=4):
        deserialized_module = torch.load("module.pt", weights_only=False)

    assert isinstance(deserialized_module, TinyNet)
    assert_same_tensors(deserialized_module.state_dict(), module.state_dict())
    ids = torch.randint(0, 100, (3, 5))
    assert torch.equal(deserialized_module.cpu()(ids), module(ids))


def test_readme_torch_compat_weights_only(in_tmp):
    """README: weights_only=True is incompatible unless suppress_weights_only=True."""
    from tensorizer.torch_compat import tensorizer_loading, tensorizer_saving

    model = tiny_model_for_readme()
    with tensorizer_saving():
        torch.save(model.state_dict(), "model.pt")
    with tensorizer_loading(suppress_weights_only=True):
        state_dict = torch.load("model.pt", weights_only=True)
    assert_same_tensors(state_dict, model.state_dict())


# ---------------------------------------------------------------------------------------------
# Additional Features: Concurrent Reads, state_dict, bfloat16, Numpy


def test_readme_concurrent_reads(in_tmp):
    model = tiny_model_for_readme()
    serializer = TensorSerializer("model.tensors")
    serializer.write_module(model)
    serializer.close()

    for readers in (1, 2, 4):
        with TensorDeserializer("model.tensors", device="cpu", num_readers=readers) as d:
            assert_same_tensors(dict(d), model.state_dict())
    data = Path("model.tensors").read_bytes()
    # "synthetic file-like objects such as BytesIO are not currently able to be reopened": 2.11.1
    # raises ValueError; ours lifts that limitation (serialization.py's list of differences), so
    # there the load must simply be right.
    if importlib.util.find_spec("tensorizer._C") is None:
        with pytest.raises(ValueError):
            TensorDeserializer(io.BytesIO(data), device="cpu", num_readers=2)
    else:
        with TensorDeserializer(io.BytesIO(data), device="cpu", num_readers=2) as d:
            assert_same_tensors(dict(d), model.state_dict())
    with TensorDeserializer(io.BytesIO(data), device="cpu", num_readers=1) as d:
        assert_same_tensors(dict(d), model.state_dict())


def test_readme_state_dict_support(in_tmp):
    """The deserializer of a write_module file is usable as a state_dict for load_state_dict."""
    model = tiny_model_for_readme()
    serializer = TensorSerializer("model.tensors")
    serializer.write_module(model)
    serializer.close()
    fresh = tiny_model_for_readme(seed=99)
    with TensorDeserializer("model.tensors", device="cpu") as d:
        fresh.load_state_dict(d, strict=True)
    assert_same_tensors(fresh.state_dict(), model.state_dict())


OPAQUE = {
    "bf16": torch.bfloat16,
    "c32": torch.complex32,
    "f8e5m2": torch.float8_e5m2,
    "f8e4m3fn": torch.float8_e4m3fn,
}


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_readme_bfloat16_support(in_tmp):
    torch.manual_seed(3)
    tensors = {name: torch.randn(7, 5).to(dtype) for name, dtype in OPAQUE.items()}
    tensors["i16"] = torch.arange(35, dtype=torch.int16).reshape(7, 5)  # a real int dtype
    serializer = TensorSerializer("mixed.tensors")
    for i, (name, tensor) in enumerate(tensors.items()):
        serializer.write_tensor(i, name, TensorType.PARAM, tensor)
    serializer.close()
    with TensorDeserializer("mixed.tensors", device="cpu") as d:
        for name, tensor in tensors.items():
            assert d[name].dtype == tensor.dtype, name
            assert torch.equal(d[name].view(torch.uint8), tensor.view(torch.uint8)), name


def test_readme_numpy_support(in_tmp):
    import numpy as np

    arrays = {"f32": np.arange(12, dtype=np.float32).reshape(3, 4), "u8": np.arange(5, dtype=np.uint8)}
    bf16 = torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16)
    serializer = TensorSerializer("numpy.tensors")
    serializer.write_tensor(0, "f32", TensorType.PARAM, arrays["f32"])
    serializer.write_tensor(0, "u8", TensorType.BUFFER, arrays["u8"])
    serializer.write_tensor(0, "bf16", TensorType.PARAM, bf16)
    serializer.close()

    # Opaque dtypes raise ValueError unless allow_raw_data=True.
    with TensorDeserializer("numpy.tensors", device="cpu", lazy_load=True) as d:
        with pytest.raises(ValueError):
            list(d.read_numpy_arrays())
    with TensorDeserializer("numpy.tensors", device="cpu", lazy_load=True) as d:
        rows = list(d.read_numpy_arrays(allow_raw_data=True))
    assert [row[2] for row in rows] == ["f32", "u8", "bf16"]
    by_name = {row[2]: row for row in rows}
    for name, array in arrays.items():
        _, ttype, _, got, is_opaque, torch_dtype = by_name[name]
        assert isinstance(got, np.ndarray) and got.dtype == array.dtype and (got == array).all()
        assert (is_opaque, torch_dtype) == (False, None)
    assert by_name["u8"][1] == TensorType.BUFFER
    _, _, _, raw, is_opaque, torch_dtype = by_name["bf16"]
    assert is_opaque is True and torch_dtype == "torch.bfloat16"
    assert raw.tobytes() == bf16.view(torch.int16).numpy().tobytes()
    # read_tensors yields the true dtype.
    with TensorDeserializer("numpy.tensors", device="cpu", lazy_load=True) as d:
        got = {name: t for _, _, name, t in d.read_tensors()}
    assert got["bf16"].dtype == torch.bfloat16 and torch.equal(got["bf16"], bf16)

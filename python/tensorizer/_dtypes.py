"""dtypes (format/FORMAT.md §7.1) and the tensors' bytes: a stored dtype string to a torch dtype,
numpy dtypes to torch names, wrapping a load's buffers and DLPack capsules as tensors, and a
tensor's bytes or numpy view for writing and hashing.

Private module: ``tensorizer.serialization`` re-exports every name defined here and is their public
home (the public names' ``__module__``); import them from there.
"""

from typing import Dict, Optional, Tuple

import numpy
import torch

from ._types import UnsupportedError


# ---------------------------------------------------------------------------------------------
# dtypes (format/FORMAT.md §7.1)

_INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_torch_dtype_cache: Dict[str, torch.dtype] = {}


def _parse_torch_dtype(name: str) -> torch.dtype:
    module, _, attr = name.partition(".")
    dtype = getattr(torch, attr, None) if module == "torch" and attr else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"Invalid torch_dtype: {name}")
    return dtype


def _device_tensor(loaded, pos: int, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
    """Tensor `pos` of a device load: its typed DLPack capsule as it is (no view, no reshape:
    most of the wrapping time per tensor), or its bytes viewed as `dtype` where DLPack has no such
    dtype (float8 travels as uint8) or torch reads the type code otherwise."""
    capsule = loaded.dlpack(pos, typed=True)
    if capsule is not None:
        try:
            t = torch.from_dlpack(capsule)
        except (BufferError, RuntimeError, TypeError):
            t = None
        if t is not None and t.dtype == dtype:
            return t
    return torch.from_dlpack(loaded.dlpack(pos)).view(dtype).reshape(shape)


def _entry_torch_dtype(entry) -> torch.dtype:
    # Keyed by the stored dtype string, which alone decides the numpy part, the torch part and
    # opacity (safetensors entries carry the tensorizer string of their dtype): one field read per
    # tensor on the load's hot path instead of three.
    key = entry.dtype
    dtype = _torch_dtype_cache.get(key)
    if dtype is None:
        if entry.opaque:
            dtype = _parse_torch_dtype(entry.torch_dtype)
        else:
            np_dtype = numpy.dtype(entry.numpy_dtype)
            if np_dtype.byteorder == ">":
                raise UnsupportedError(
                    f"Big-endian dtype {entry.numpy_dtype!r} of tensor {entry.display} is not"
                    " supported"
                )
            try:
                dtype = torch.from_numpy(numpy.empty(0, dtype=np_dtype)).dtype
            except TypeError as e:
                raise ValueError(
                    f"dtype {entry.numpy_dtype!r} of tensor {entry.display} has no torch"
                    " equivalent"
                ) from e
        _torch_dtype_cache[key] = dtype
    return dtype


_numpy_name_cache: Dict[numpy.dtype, str] = {}


def _numpy_torch_name(dtype: numpy.dtype) -> str:
    name = _numpy_name_cache.get(dtype)
    if name is None:
        try:
            name = str(torch.from_numpy(numpy.empty((), dtype=dtype.newbyteorder("="))).dtype)
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"Cannot serialize an array with dtype {dtype.name}: it has no torch equivalent"
            ) from e
        _numpy_name_cache[dtype] = name
    return name


def _host_bytes(t: torch.Tensor):
    """A zero-copy uint8 numpy view of a CPU tensor's contiguous bytes (b"" when empty)."""
    if t.is_quantized:
        raise NotImplementedError(f"Serialization for {t.dtype} is not implemented.")
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy()


def _numpy_view_of(t: torch.Tensor) -> Tuple[numpy.ndarray, bool, Optional[str]]:
    """(array, is_opaque, torch dtype name) for a CPU tensor, zero-copy where possible."""
    t = t.detach()
    try:
        return t.numpy(), False, None
    except TypeError:
        pass
    int_type = _INT_OF_SIZE.get(t.element_size())
    if int_type is None:
        raise ValueError(
            f"Cannot create a numpy array with opaque elements of size {t.element_size()} bytes"
        )
    return t.view(int_type).numpy(), True, str(t.dtype)

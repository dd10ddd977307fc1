"""tensorizer's legacy protobuf model format (format/FORMAT.md §14.2, tensors.proto), unrelated to .tensors.

`serialize_model(model, stream)` writes one `tensors.Module` holding an Attribute per named module,
each holding its parameters and buffers as Tensor attributes; `deserialize_model(model, stream)`
puts them back into a model of the same structure. Needs torch and the `protobuf` package, not the
native engine.

Differences from tensorizer 2.11.1, all fixes:

* bfloat16 and complex32 round-trip. 2.11.1 decoded DT_BFLOAT16 as numpy float16 and DT_COMPLEX32 as
  complex64 (wrong values, wrong element count), and could not encode them at all (``.numpy()`` has
  no such dtypes). Here tensor bytes are viewed as bytes on the way out and reinterpreted with the
  exact torch dtype on the way in, so every dtype in the enum keeps its bits.
* Quantized tensors are written as their integer representation (``int_repr()``); the format has no
  field for scale or zero point, so they are read back as that integer tensor (uint8, int8, int32),
  as 2.11.1 reads them; quint4x2 comes back as a 1-D uint8 tensor of its packed bytes (2.11.1 fails
  on it). 2.11.1 could not write quantized tensors at all.
* A dtype outside the enum (e.g. float8) raises TypeError naming it, not KeyError.
* `deserialize_model` restores parameters as ``torch.nn.Parameter`` (keeping the existing
  parameter's ``requires_grad``), not as plain tensors.
* `serialize_model` logs module names at DEBUG level instead of printing them.
* `PbNpyDtypes` lists only dtypes with an exact numpy equivalent (no bfloat16 / complex32 entries).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import BinaryIO, Tuple, Union

import numpy as np
import torch

from . import tensors_pb2 as tensors_pb
from .tensors_pb2 import Tensor as TensorPb

__all__ = ["serialize_tensor", "deserialize_tensor", "serialize_model", "deserialize_model",
           "DtypePbs", "PbDtypes", "PbNpyDtypes"]

logger = logging.getLogger(__name__)

DtypePbs = {
    torch.float32: tensors_pb.DT_FLOAT32,
    torch.float64: tensors_pb.DT_FLOAT64,
    torch.float16: tensors_pb.DT_FLOAT16,
    torch.bfloat16: tensors_pb.DT_BFLOAT16,
    torch.complex32: tensors_pb.DT_COMPLEX32,
    torch.complex64: tensors_pb.DT_COMPLEX64,
    torch.complex128: tensors_pb.DT_COMPLEX128,
    torch.uint8: tensors_pb.DT_UINT8,
    torch.int8: tensors_pb.DT_INT8,
    torch.int16: tensors_pb.DT_INT16,
    torch.int32: tensors_pb.DT_INT32,
    torch.int64: tensors_pb.DT_INT64,
    torch.bool: tensors_pb.DT_BOOL,
    torch.quint8: tensors_pb.DT_QUINT8,
    torch.qint8: tensors_pb.DT_QINT8,
    torch.qint32: tensors_pb.DT_QINT32,
    torch.quint4x2: tensors_pb.DT_QUINT4_2,
}

PbDtypes = {pb: dtype for dtype, pb in DtypePbs.items()}

# The dtype a Tensor's bytes are read as. Quantized tensors come back as their integer representation.
_READ_AS = {
    **PbDtypes,
    tensors_pb.DT_QUINT8: torch.uint8,
    tensors_pb.DT_QINT8: torch.int8,
    tensors_pb.DT_QINT32: torch.int32,
    tensors_pb.DT_QUINT4_2: torch.uint8,
}

PbNpyDtypes = {
    tensors_pb.DT_FLOAT32: np.float32,
    tensors_pb.DT_FLOAT64: np.float64,
    tensors_pb.DT_FLOAT16: np.float16,
    tensors_pb.DT_COMPLEX64: np.complex64,
    tensors_pb.DT_COMPLEX128: np.complex128,
    tensors_pb.DT_UINT8: np.uint8,
    tensors_pb.DT_INT8: np.int8,
    tensors_pb.DT_INT16: np.int16,
    tensors_pb.DT_INT32: np.int32,
    tensors_pb.DT_INT64: np.int64,
    tensors_pb.DT_BOOL: np.bool_,
    tensors_pb.DT_QUINT8: np.uint8,
    tensors_pb.DT_QINT8: np.int8,
    tensors_pb.DT_QINT32: np.int32,
    tensors_pb.DT_QUINT4_2: np.uint8,
}


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach()
    if t.is_quantized:
        t = t.int_repr()
    t = t.cpu().contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def serialize_tensor(t: torch.Tensor, attribute=None) -> TensorPb:
    """A `tensors.Tensor` message for `t` (its dtype, shape and C-order bytes), with `attr_type` set
    when `attribute` (AT_PARAMETER or AT_BUFFER) is given. TypeError for a dtype the enum lacks."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"serialize_tensor expects a torch.Tensor, not {type(t).__name__}")
    if attribute is not None and attribute not in (tensors_pb.AT_PARAMETER, tensors_pb.AT_BUFFER):
        raise ValueError(f"attribute must be AT_PARAMETER, AT_BUFFER or None, not {attribute!r}")
    if t.dtype not in DtypePbs:
        raise TypeError(f"{t.dtype} cannot be stored in tensors.proto (no Dtype value for it)")
    extra = {} if attribute is None else {"attr_type": attribute}
    return TensorPb(dtype=DtypePbs[t.dtype], shape=list(t.shape), data=_tensor_bytes(t), **extra)


def deserialize_tensor(t: TensorPb) -> Union[torch.Tensor, Tuple[torch.Tensor, int]]:
    """The tensor in a `tensors.Tensor` message, paired with its `attr_type` when that is set.
    ValueError when the data length does not match dtype and shape."""
    if t.dtype not in _READ_AS:
        raise ValueError(f"unknown tensors.Dtype value {t.dtype}")
    dtype = _READ_AS[t.dtype]
    shape = tuple(t.shape)
    itemsize = torch.empty((), dtype=dtype, device="cpu").element_size()
    numel = 1
    for dim in shape:
        numel *= dim
    if t.dtype == tensors_pb.DT_QUINT4_2:
        expected = (numel + 1) // 2  # packed: two 4-bit values per byte; read back as the 1-D bytes
    else:
        expected = numel * itemsize
    if len(t.data) != expected:
        raise ValueError(f"tensors.Tensor of {tensors_pb.Dtype.Name(t.dtype)} {list(shape)} holds"
                         f" {len(t.data)} bytes, expected {expected}")
    if len(t.data) == 0:
        tensor = torch.zeros(shape if t.dtype != tensors_pb.DT_QUINT4_2 else (0,), dtype=dtype)
    else:
        flat = torch.frombuffer(bytearray(t.data), dtype=torch.uint8)
        tensor = flat if t.dtype == tensors_pb.DT_QUINT4_2 else flat.view(dtype).reshape(shape)
    if t.HasField("attr_type"):
        return tensor, t.attr_type
    return tensor


def serialize_model(model: torch.nn.Module, file_stream: BinaryIO) -> None:
    """Writes `model`'s parameters and buffers to `file_stream` as one serialized `tensors.Module`."""
    modules = []
    for module_name, module in model.named_modules():
        logger.debug("serializing module %r", module_name)
        attributes = [
            tensors_pb.Attribute(name=name, tensor=serialize_tensor(param, tensors_pb.AT_PARAMETER))
            for name, param in module.named_parameters(recurse=False)
        ]
        attributes += [
            tensors_pb.Attribute(name=name, tensor=serialize_tensor(buffer, tensors_pb.AT_BUFFER))
            for name, buffer in module.named_buffers(recurse=False)
        ]
        modules.append(tensors_pb.Attribute(name=module_name, module=tensors_pb.Module(attributes=attributes)))
    file_stream.write(tensors_pb.Module(name="", attributes=modules).SerializeToString())


def deserialize_model(model: torch.nn.Module, file_stream: BinaryIO) -> None:
    """Reads a `tensors.Module` written by `serialize_model` from `file_stream` and sets each tensor
    on the module of the same name in `model` (KeyError if `model` has no such module). Tensor
    attributes without `attr_type` and non-tensor attributes are skipped, as in tensorizer."""
    model_proto = tensors_pb.Module()
    model_proto.ParseFromString(file_stream.read())
    modules = OrderedDict(model.named_modules())
    for module_attr in model_proto.attributes:
        module = modules[module_attr.name]
        for attr in module_attr.module.attributes:
            if attr.WhichOneof("value") != "tensor" or not attr.tensor.HasField("attr_type"):
                continue
            tensor, attr_type = deserialize_tensor(attr.tensor)
            if attr_type == tensors_pb.AT_PARAMETER:
                old = module._parameters.get(attr.name)
                requires_grad = (old.requires_grad if old is not None
                                 else tensor.is_floating_point() or tensor.is_complex())
                module._parameters[attr.name] = torch.nn.Parameter(tensor, requires_grad=requires_grad)
            elif attr_type == tensors_pb.AT_BUFFER:
                module._buffers[attr.name] = tensor
            else:
                raise ValueError(f"Unknown attribute type {attr_type} for {module_attr.name!r}.{attr.name}")

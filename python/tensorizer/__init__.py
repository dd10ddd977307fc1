"""tensorizer: fast loading of model weights from .tensors files, with tensorizer's Python API
(format/FORMAT.md §11–§14) on a C++ engine (the extension module `tensorizer._C`).

Names are imported on first use (PEP 562), so ``import tensorizer`` is cheap and the parts that do
not need the native engine (`tensorizer.utils`, `tensorizer.protobuf`, `tensorizer.tensors_pb2`)
work even where `tensorizer._C` cannot be imported; ``from tensorizer import *`` and
``tensorizer.TensorSerializer`` import what they need. `protobuf` and `tensors_pb2` need the
Python `protobuf` package; without it they are left out of `__all__` and fail (ImportError) only
when accessed.
"""

import importlib
import importlib.util
from typing import TYPE_CHECKING

from ._version import __version__

__all__ = [
    "TensorSerializer",
    "TensorDeserializer",
    "TensorType",
    "CryptographyError",
    "EncryptionParams",
    "DecryptionParams",
    "FilterFuncType",
    "stream_io",
    "torch_compat",
    "utils",
    "protobuf",
    "tensors_pb2",
]
try:
    _have_protobuf = importlib.util.find_spec("google.protobuf") is not None
except (ImportError, ValueError):
    _have_protobuf = False
if not _have_protobuf:  # keep ``from tensorizer import *`` working without the protobuf package
    __all__ = [n for n in __all__ if n not in ("protobuf", "tensors_pb2")]

# Where each lazily imported name lives.
_FROM_MODULE = {
    "TensorSerializer": ".serialization",
    "TensorDeserializer": ".serialization",
    "TensorType": ".serialization",
    "CryptographyError": ".serialization",
    # Not in tensorizer's __all__ (it lives in tensorizer.serialization there), but handy here.
    "HashMismatchError": ".serialization",
    "FilterFuncType": ".serialization",
    "EncryptionParams": "._crypt",
    "DecryptionParams": "._crypt",
    "ModelSignature": ".signing",  # beyond 2.11.1: signed models
}
_SUBMODULES = ("serialization", "stream_io", "torch_compat", "utils", "protobuf", "tensors_pb2", "signing")
# Internal modules that 2.11.1's `import tensorizer` imports too, so `tensorizer._crypt.available`
# and the like work without importing them first.
_SUBMODULES += ("_crypt", "_syscalls", "_version")

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these come from __getattr__
    from . import protobuf, serialization, stream_io, tensors_pb2, torch_compat, utils
    from ._crypt import DecryptionParams, EncryptionParams
    from .signing import ModelSignature
    from .serialization import CryptographyError, FilterFuncType, HashMismatchError, TensorDeserializer, TensorSerializer, TensorType


def __getattr__(name):
    if name in _FROM_MODULE:
        value = getattr(importlib.import_module(_FROM_MODULE[name], __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module("." + name, __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_FROM_MODULE) | set(_SUBMODULES))

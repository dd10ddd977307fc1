"""tensorizer's reading and writing API (format/FORMAT.md §11) on top of the native engine ``tensorizer._C``.

The engine does every byte of I/O, hashing, encryption and decryption (with the GIL released);
this module is the PyTorch-facing layer: names and structure, devices, dtypes, ``torch.nn.Module``
handling and tensorizer's exceptions.

Error mapping (``_C.set_error_types``; engine error kind -> Python exception):

==================  =================================================================
engine kind         raised as
==================  =================================================================
``crypto``          ``CryptographyError``
``hash_mismatch``   ``HashMismatchError``
``format``          ``ValueError`` (as tensorizer: "Not a tensorizer file", bad version…)
``invalid_argument``  ``ValueError``
``unsupported``     ``UnsupportedError`` (a ``ValueError`` *and* ``NotImplementedError``)
``not_found``       ``FileNotFoundError`` (missing file, HTTP 404, S3 object, Redis key)
``io``              ``OSError``
``network``         ``ConnectionError`` (an ``OSError``)
``auth``            ``PermissionError`` (an ``OSError``)
``timeout``         ``TimeoutError`` (an ``OSError``)
``cuda``            ``RuntimeError``
``no_device``       ``RuntimeError`` (tensorizer raises ``RuntimeError`` without CUDA)
``cancelled``       ``concurrent.futures.CancelledError``
==================  =================================================================

A missing tensor *name* in a ``TensorDeserializer`` is a ``KeyError`` (``"Tensor <k> not found"``),
raised by this module, not by the engine.

Deliberate differences from tensorizer 2.11.1 (its bugs, format/FORMAT.md §15) are listed in the
docstrings of the methods concerned and summarised in ``_DIFFERENCES`` below.

This module is the public facade; the code lives in private modules beside it, and every name
they define is re-exported here (the public classes keep ``__module__ == "tensorizer.serialization"``):

========================  =========================================================================
``_types``                exceptions and the error mapping, TensorType, HashType, TensorHash,
                          TensorEntry, the file header's fields, format constants
``_paths``                tensor names and structured paths, state_dict flattening and rebuilding
``_dtypes``               dtype conversion, wrapping loaded bytes as tensors, a tensor's bytes
``_sources``              header parsing for verify_module, devices, opening sources and readers
``_deserializer_core``    TensorDeserializer's private base: opening, loading, header details
``_deserializer``         TensorDeserializer: constructor, mapping interface, public methods
``_serializer``           TensorSerializer
========================  =========================================================================

The load performance counters (``_perf_stats`` and the functions that fill and read it) stay
here. Callers replace ``_perf_stats`` and ``TensorHash`` on this module, so the private modules
look those up here at call time.
"""

# Most of these are used only by the private modules now; they stay imported so that every name
# this module had before the split is still one of its attributes.
import collections.abc
import concurrent.futures
import contextlib
import dataclasses
import enum
import errno
import hashlib
import io
import itertools
import os
import shutil
import stat
import struct
import tempfile
import threading
import types
import typing
import zlib
from enum import IntEnum
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import numpy
import torch

from . import _C
from . import _crypt, stream_io, utils
from ._crypt import DecryptionParams, EncryptionParams

__all__ = [
    "TensorSerializer",
    "TensorDeserializer",
    "TensorType",
    "CryptographyError",
    "HashMismatchError",
    "EncryptionParams",
    "DecryptionParams",
    "FilterFuncType",
]

_DIFFERENCES = """
Differences from tensorizer 2.11.1 (each one a fix of a behaviour listed in format/FORMAT.md §15 or
found while testing against 2.11.1):

* dtype=: only floating-point tensors are cast; integer, bool and complex tensors keep their
  dtype (2.11.1 casts every non-bool tensor, coreweave/tensorizer#206).
* Zero-size tensors can be written to encrypted files (2.11.1: IndexError).
* Meta tensors of an opaque dtype (bfloat16, float8...) are readable (2.11.1: TypeError).
* load_into_module: checks every selected tensor's type and name before loading anything
  (2.11.1 raises NotImplementedError half-way); replaces an existing attribute of the other
  kind (a buffer where the file has a parameter, or a plain attribute) instead of raising
  KeyError (coreweave/tensorizer#67); keeps a non-persistent buffer non-persistent.
* read_tensors/read_numpy_arrays: their cursor is moved only by read_tensors/read_numpy_arrays.
  In 2.11.1 the eager load, d[k], tree() and load_into_module moved it too, so read_tensors()
  after an eager constructor yielded nothing, and d["a"] after d["c"] in lazy mode raised
  RuntimeError("Tensor not found").
* verify_module: root-level tensors written by write_module (".weight") are matched to the
  module's "weight"; each tensor is reported once.
* File specs: bytes are paths and ints are file descriptors (2.11.1: TypeError/AttributeError).
* num_readers > 1 works on any source (BytesIO included; 2.11.1: ValueError "Cannot reopen").
* A plain str name beginning with 0x1E is refused by write_tensor (2.11.1 writes a name it
  then misreads as a structured path).
* write_state_dict: a str or bytes leaf raises TypeError (2.11.1 recursed into it forever).
* numpy arrays in a non-native byte order are written in native (little-endian) order.
* write_module(include_non_persistent_buffers=False) keeps the root module's persistent
  buffers (2.11.1 dropped every root-level buffer: it compared ".name" with "name") and drops
  its non-persistent ones.
* TensorSerializer needs only a writable binary file object (no read/seek), leaves an
  io.BytesIO open at close() (2.11.1 closed it, discarding the file), and is also a context
  manager (an exception inside the block discards the file). A failed write_tensor leaves the
  name free for another try.
* requires_grad is decided on the returned dtype (2.11.1 used the stored one, so dtype= casts
  to a non-float dtype failed).
* safetensors files can be read too.
* EncryptionParams / DecryptionParams never show key material in repr().
"""


# ---------------------------------------------------------------------------------------------
# The implementation, re-exported (tensorizer 2.11.1 code and tests reach some private names here).

from ._types import (  # noqa: E402,F401
    ENCRYPTION_TENSORIZER_VERSION,
    META_TENSOR_TENSORIZER_VERSION,
    NON_OPAQUE_TENSORIZER_VERSION,
    OPAQUE_DTYPE_SEP,
    OPAQUE_TENSORIZER_VERSION,
    TENSORIZER_MAGIC,
    TENSORIZER_VERSION,
    _STORED_TENSOR_HASH,
    CryptographyError,
    FilterFuncType,
    HashMismatchError,
    HashType,
    TensorEntry,
    TensorHash,
    TensorType,
    UnsupportedError,
    _FileFeatureFlags,
    _FileHeader,
    _SupportsBool,
    _TensorPathComponent,
)
from ._paths import (  # noqa: E402,F401
    _children,
    _entry_path,
    _flatten_state_dict,
    _Path,
    _PathRegistry,
    _public_name,
    _restructure,
    _to_path,
    _validate_path,
)
from ._dtypes import (  # noqa: E402,F401
    _INT_OF_SIZE,
    _device_tensor,
    _entry_torch_dtype,
    _host_bytes,
    _numpy_name_cache,
    _numpy_torch_name,
    _numpy_view_of,
    _parse_torch_dtype,
    _torch_dtype_cache,
)
from ._sources import (  # noqa: E402,F401
    _check_hashes,
    _checkpoint_specs,
    _default_device,
    _fd_path,
    _HeaderInfo,
    _is_remote,
    _mode_check_read,
    _open_reader,
    _open_source,
    _OpenedSource,
    _parse_header,
    _prepare_device_quietly,
    _resolve_cuda_device,
)
from ._deserializer import TensorDeserializer, _attach  # noqa: E402,F401
from ._serializer import TensorSerializer, _mode_check_write  # noqa: E402,F401

# Defined in the private modules, but this module is their home as before the split: pickles
# (TensorType members), reprs and help() name tensorizer.serialization.
for _cls in (
    CryptographyError,
    HashMismatchError,
    UnsupportedError,
    TensorType,
    HashType,
    TensorHash,
    TensorEntry,
    _SupportsBool,
    _FileFeatureFlags,
    _FileHeader,
    _PathRegistry,
    _HeaderInfo,
    _OpenedSource,
    TensorDeserializer,
    TensorSerializer,
):
    _cls.__module__ = __name__
del _cls


# TENSORIZER_ENABLE_PERF_STATS (any non-empty value, read at import as tensorizer does): every load
# adds the engine's per-stage timings here. The keys of tensorizer 2.11.1 come first; the engine's
# other stages follow (seconds summed over loads; verify/decrypt are summed over worker threads).
_enable_perf_stats: bool = bool(os.environ.get("TENSORIZER_ENABLE_PERF_STATS"))
_perf_stats: Optional[Dict[str, float]] = (
    dict.fromkeys(("tensor_to_device_secs", "tensor_to_device_bytes", "file_readinto_secs", "file_readinto_bytes",
                   "verify_secs", "decrypt_secs", "load_secs", "loads"), 0)
    if _enable_perf_stats else None
)
_perf_stats_lock = threading.Lock()


def _record_perf_stats(loaded) -> None:
    if _perf_stats is None:
        return
    t = loaded.timings
    with _perf_stats_lock:
        _perf_stats["file_readinto_secs"] += t.get("read_s", 0.0)
        _perf_stats["file_readinto_bytes"] += loaded.bytes
        if loaded.device >= 0:
            _perf_stats["tensor_to_device_secs"] += t.get("upload_s", 0.0) + t.get("wait_s", 0.0)
            _perf_stats["tensor_to_device_bytes"] += loaded.bytes
        _perf_stats["verify_secs"] += t.get("verify_s", 0.0)
        _perf_stats["decrypt_secs"] += t.get("decrypt_s", 0.0)
        _perf_stats["load_secs"] += t.get("total_s", 0.0)
        _perf_stats["loads"] += 1


def _get_perf_stats():
    """The accumulated load timings (TENSORIZER_ENABLE_PERF_STATS); RuntimeError when disabled."""
    if _perf_stats is None:
        raise RuntimeError("Performance stats are not enabled")
    with _perf_stats_lock:
        return dict(_perf_stats)

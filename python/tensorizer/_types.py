"""tensorizer.serialization's exceptions and their mapping onto the engine's error kinds, and its
small types and constants: TensorType, HashType, TensorHash, TensorEntry, the file header's fields
(format/FORMAT.md §3.1, §5.2, §8.1, §11.3).

Private module: ``tensorizer.serialization`` re-exports every name defined here (but
``_serialization_module``, the private modules' way back to it) and is their public home (the
public names' ``__module__``); import them from there.
"""

import concurrent.futures
import dataclasses
import enum
import typing
from enum import IntEnum
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy

from . import _C, _crypt


# ---------------------------------------------------------------------------------------------
# Exceptions


class CryptographyError(_crypt.CryptographyError):
    """A key, passphrase, encryption mode or MAC check failed."""


class HashMismatchError(Exception):
    """A tensor's data did not match the CRC32 / SHA-256 stored in its header."""


class UnsupportedError(ValueError, NotImplementedError):
    """A feature of the file or call that the engine does not support."""


_C.set_error_types(
    {
        "io": OSError,
        "format": ValueError,
        "hash_mismatch": HashMismatchError,
        "crypto": CryptographyError,
        "not_found": FileNotFoundError,
        "invalid_argument": ValueError,
        "network": ConnectionError,
        "auth": PermissionError,
        "timeout": TimeoutError,
        "cuda": RuntimeError,
        "no_device": RuntimeError,
        "unsupported": UnsupportedError,
        "cancelled": concurrent.futures.CancelledError,
    }
)

# ---------------------------------------------------------------------------------------------
# Constants and small public types (format/FORMAT.md §3.1, §5.2, §8.1, §11.3)


class TensorType(IntEnum):
    PARAM = 0
    BUFFER = 1
    STATE_DICT = 2


class HashType(IntEnum):
    CRC32 = 0
    SHA256 = 1


TENSORIZER_VERSION = 4
META_TENSOR_TENSORIZER_VERSION = 4
ENCRYPTION_TENSORIZER_VERSION = 3
OPAQUE_TENSORIZER_VERSION = 2
NON_OPAQUE_TENSORIZER_VERSION = 1
TENSORIZER_MAGIC = b"|TZR|"
OPAQUE_DTYPE_SEP = "\0"

_TensorPathComponent = Union[str, int]


class _SupportsBool(typing.Protocol):
    def __bool__(self) -> bool: ...


# A filter function gets a str for plain names and a tuple of str/int for structured paths.
FilterFuncType = Callable[[Union[str, Sequence[_TensorPathComponent]]], _SupportsBool]


@dataclasses.dataclass(order=True)
class TensorHash:
    __slots__ = ("type", "hash")
    type: HashType
    hash: bytes


# The class the header parsers were written with: where code has replaced serialization.TensorHash
# (2.11.1's test_verification_fail does), loads compare with what the replacement builds.
_STORED_TENSOR_HASH = TensorHash


class _FileFeatureFlags(enum.IntFlag):
    encrypted = enum.auto()


@dataclasses.dataclass
class _FileHeader:
    """The file header's fields (format/FORMAT.md §3.1), as 2.11.1's `TensorDeserializer._file_header`
    shows them; the engine parses the header, this only reports it."""

    __slots__ = ("version_number", "feature_flags", "tensor_size", "tensor_count")
    version_number: int
    feature_flags: _FileFeatureFlags
    tensor_size: int
    tensor_count: int


@dataclasses.dataclass(order=True)
class TensorEntry:
    """One metadata entry (format/FORMAT.md §4.2), as tensorizer exposes it."""

    __slots__ = (
        "name",
        "type",
        "dtype",
        "shape",
        "offset",
        "data_offset",
        "data_length",
        "hashes",
        "header_hashes",
    )
    name: Union[str, tuple]
    type: TensorType
    dtype: str
    shape: Tuple[int, ...]
    offset: int
    data_offset: int
    data_length: int
    hashes: Optional[List[TensorHash]]
    header_hashes: Optional[Dict[HashType, Any]]

    @property
    def deserialized_length(self) -> int:
        if self.data_length > 0:
            return self.data_length
        numpy_part = self.dtype.split(OPAQUE_DTYPE_SEP, 1)[0]
        itemsize = numpy.dtype(numpy_part.replace("V", "i")).itemsize
        return itemsize * int(numpy.prod(self.shape, dtype=numpy.int64))


def _serialization_module():
    """``tensorizer.serialization``, looked up at call time. Code moved out of it reads the names
    callers replace there (``monkeypatch.setattr(serialization, "TensorHash", ...)``, its
    ``_perf_stats``) through this, so that a replacement still reaches that code."""
    from . import serialization

    return serialization

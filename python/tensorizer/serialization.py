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
"""

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


# ---------------------------------------------------------------------------------------------
# Paths (format/FORMAT.md §5.1)

_Path = Tuple[_TensorPathComponent, ...]


def _public_name(path: _Path) -> Union[str, tuple]:
    return path[0] if len(path) == 1 and isinstance(path[0], str) else tuple(path)


def _entry_path(entry) -> _Path:
    name = entry.name
    return (name,) if isinstance(name, str) else tuple(name)


def _validate_path(path: _Path) -> None:
    if not path:
        raise ValueError("Invalid empty tensor path")
    for c in path:
        if isinstance(c, bool) or not isinstance(c, (str, int)):
            raise TypeError(f"Invalid tensor path component type: {c.__class__.__name__!r}")
        if isinstance(c, int) and c < 0:
            raise ValueError(f"Invalid negative integer tensor path component: {c}")


class _PathRegistry:
    """Prefix tree of the paths written so far; refuses conflicts as tensorizer does."""

    __slots__ = ("_root",)
    _LEAF = object()

    def __init__(self):
        self._root: dict = {}

    def register(self, path: _Path) -> None:
        """Records path (check() it first)."""
        branch = self._root
        for component in path[:-1]:
            branch = branch.setdefault(component, {})
        branch[path[-1]] = self._LEAF

    def check(self, path: _Path) -> None:
        """Raises ValueError if path conflicts with a registered one."""
        branch = self._root
        # Key types must agree at every level (format/FORMAT.md §4.3).
        for depth, component in enumerate(path):
            if not branch:
                break
            existing = type(next(iter(branch)))
            if existing is not type(component):
                raise ValueError(
                    f"Conflicting tensor paths: {_public_name(path)} has a different key type"
                    f" ({type(component).__name__!r}) than existing keys at the prefix"
                    f" {path[: depth + 1]} ({existing.__name__!r})"
                )
            nxt = branch.get(component)
            if not isinstance(nxt, dict):
                break
            branch = nxt
        branch = self._root
        for depth, component in enumerate(path[:-1]):
            nxt = branch.get(component, {})
            if not isinstance(nxt, dict):
                raise ValueError(
                    f"Conflicting tensor paths: {_public_name(path)} extends the tensor"
                    f" {_public_name(path[: depth + 1])}"
                )
            branch = nxt
        last = path[-1]
        if last in branch:
            if isinstance(branch[last], dict):
                raise ValueError(
                    f"Conflicting tensor paths: {_public_name(path)} is both"
                    " a leaf and a prefix of another path"
                )
            raise ValueError(
                f"Conflicting tensor paths: {_public_name(path)} is used multiple times"
            )


def _to_path(name) -> _Path:
    if isinstance(name, str):
        if name.startswith("\x1e"):
            raise ValueError(
                "Tensor names beginning with the byte 0x1E are reserved for structured paths;"
                " pass the path as a tuple instead"
            )
        return (name,)
    if isinstance(name, (tuple, list)):
        path = tuple(name)
        _validate_path(path)
        return path
    raise TypeError(f"Invalid tensor path type: {name.__class__.__name__!r}")


def _flatten_state_dict(obj, prefix: _Path = ()) -> Iterator[Tuple[_Path, torch.Tensor]]:
    """Depth-first flattening of nested mappings / sequences (format/FORMAT.md §5.5)."""
    stack = [(prefix, _children(obj))]
    while stack:
        pre, it = stack[-1]
        for key, item in it:
            path = pre + (key,)
            if isinstance(item, torch.Tensor):
                yield path, item
            else:
                stack.append((path, _children(item)))
                break
        else:
            stack.pop()


def _children(obj):
    if isinstance(obj, collections.abc.Mapping):
        for k in obj.keys():
            if not isinstance(k, str):
                raise TypeError(
                    "Invalid key type for state_dict: expected str, got"
                    f" {k.__class__.__name__!r}"
                )
        return iter(obj.items())
    if isinstance(obj, collections.abc.Sequence) and not isinstance(
        obj, (str, bytes, bytearray)
    ):
        return enumerate(obj)
    raise TypeError(
        f"Cannot serialize type as part of a state_dict: {obj.__class__.__name__!r}"
    )


def _restructure(flat: Iterable[Tuple[_Path, Any]], as_proxies: bool):
    """Builds nested containers from (path, value) pairs in file order.

    as_proxies: every level is a read-only MappingProxyType (int keys for list levels);
    otherwise int-keyed levels become lists sorted by index and str levels dicts in file order.
    """
    base: dict = {}
    for path, value in flat:
        branch = base
        for c in path[:-1]:
            branch = branch.setdefault(c, {})
        branch[path[-1]] = value

    def convert(layer):
        if not isinstance(layer, dict):
            return layer
        items = [(k, convert(v)) for k, v in layer.items()]
        if as_proxies:
            return types.MappingProxyType(dict(items))
        if items and isinstance(items[0][0], int):
            items.sort(key=lambda kv: kv[0])
            return [v for _, v in items]
        return dict(items)

    return convert(base)


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


# ---------------------------------------------------------------------------------------------
# Header parsing for verify_module (format/FORMAT.md §6.1, §8.2)


class _HeaderInfo(typing.NamedTuple):
    module_idx: int
    hashes: List[TensorHash]
    hash_prefix: bytes  # H of format/FORMAT.md §8.2
    stored: Tuple[Tuple[int, bytes], ...] = ()  # the (type, value) pairs as the file holds them


def _parse_header(header: bytes, has_crypt: bool, long_shape: bool) -> _HeaderInfo:
    """Module index, stored hashes and H (the header with every hash value zeroed and the
    crypt-info block cut out) of a tensor header (format/FORMAT.md §6.1, §8.2)."""
    mv = memoryview(header)
    (module_idx,) = struct.unpack_from("<H", mv, 8)
    pos = 8 + 2 + 1  # header_size, module_idx, tensor_type
    (name_len,) = struct.unpack_from("<H", mv, pos)
    pos += 2 + name_len
    dtype_len = mv[pos]
    pos += 1 + dtype_len
    ndim = mv[pos]
    pos += 1 + ndim * (8 if long_shape else 4)
    (hash_section_len,) = struct.unpack_from("<H", mv, pos)
    pos += 2
    hash_end = pos + hash_section_len
    count = mv[pos]
    pos += 1
    h = bytearray(header)
    hashes = []
    stored = []
    for _ in range(count):
        kind, length = mv[pos], mv[pos + 1]
        value = bytes(mv[pos + 2 : pos + 2 + length])
        hashes.append(TensorHash(HashType(kind), value))
        stored.append((kind, value))
        h[pos + 2 : pos + 2 + length] = bytes(length)
        pos += 2 + length
    if has_crypt:
        (crypt_len,) = struct.unpack_from("<Q", mv, hash_end)
        del h[hash_end : hash_end + 8 + crypt_len]
    return _HeaderInfo(module_idx, hashes, bytes(h), tuple(stored))


def _check_hashes(hashes, h: bytes, data) -> bool:
    for th in hashes:
        if th.type == HashType.CRC32:
            if zlib.crc32(data, zlib.crc32(h)) != struct.unpack("<I", th.hash)[0]:
                return False
        elif th.type == HashType.SHA256:
            sha = hashlib.sha256(h)
            sha.update(data)
            if sha.digest() != th.hash:
                return False
    return True


# ---------------------------------------------------------------------------------------------
# Devices


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _resolve_cuda_device() -> torch.device:
    """The CUDA device meant by a bare "cuda": a torch.device context or
    torch.set_default_device first, then torch.cuda.current_device() (format/FORMAT.md §11.1)."""
    try:
        mode = torch.overrides._get_current_function_mode()
        ctx = getattr(mode, "device", None) if mode is not None else None
    except (AttributeError, TypeError):
        ctx = None
    if ctx is None:
        get_default = getattr(torch, "get_default_device", None)
        ctx = get_default() if get_default is not None else None
    if ctx is not None:
        ctx = torch.device(ctx)
        if ctx.type == "cuda" and ctx.index is not None:
            return ctx
    if torch.cuda.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cuda", 0)


# ---------------------------------------------------------------------------------------------
# Sources


def _is_remote(spec: str) -> bool:
    return "://" in spec


def _mode_check_read(file_obj) -> None:
    try:
        readable = file_obj.readable()
    except AttributeError:
        readable = True
    if isinstance(file_obj, io.TextIOBase) or not readable:
        mode = getattr(file_obj, "mode", "")
        raise ValueError(
            "TensorDeserializer's file_obj must be readable "
            'and in binary mode (mode="rb"{})'.format(mode and f', current mode="{mode}"')
        )


def _fd_path(fd: int) -> Optional[str]:
    """A path that reopens the regular file behind fd, or None."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    for path in (f"/proc/self/fd/{fd:d}", f"/dev/fd/{fd:d}"):
        try:
            if os.path.samestat(st, os.stat(path)):
                return path
        except OSError:
            continue
    return None


class _OpenedSource:
    __slots__ = ("source", "base", "stream", "spec", "kind", "specs")

    def __init__(self, source, base=0, stream=None, spec=None, kind="path", specs=None):
        self.source = source
        self.specs = specs  # kind "checkpoint": the paths or URIs given
        self.base = base  # offset of the magic in the source (embedded streams, format/FORMAT.md §4.4)
        self.stream = stream  # the caller's file object, closed with the deserializer
        self.spec = spec  # a path or URI that can be reopened, or None
        self.kind = kind  # "path", "uri", "fd", "stream", "buffer", "checkpoint"


def _checkpoint_specs(file_obj) -> Optional[List[str]]:
    """The paths or URIs of a sharded checkpoint (an extension over 2.11.1, which reads one
    file): a ``*.index.json`` path or URI, a local directory, an ``http(s)://`` or ``s3://``
    prefix ending in ``/``, or a list/tuple of safetensors files. None for anything else."""
    if isinstance(file_obj, (list, tuple)):
        if not file_obj or not all(isinstance(f, (str, os.PathLike)) for f in file_obj):
            raise TypeError("a sharded checkpoint given as a list needs paths or URIs of its safetensors files")
        return [os.fspath(f) for f in file_obj]
    if not isinstance(file_obj, (str, os.PathLike)):
        return None
    spec = os.fspath(file_obj)
    remote = isinstance(file_obj, str) and _is_remote(spec)
    if spec.endswith(".index.json"):
        return [spec]
    if remote and spec.endswith("/") and not spec.lower().startswith("redis://"):
        return [spec]
    if not remote and os.path.isdir(spec):
        return [spec]
    return None


def _open_source(file_obj) -> _OpenedSource:
    specs = _checkpoint_specs(file_obj)
    if specs is not None:
        return _OpenedSource(None, spec=None, kind="checkpoint", specs=specs)
    if isinstance(file_obj, (str, os.PathLike, bytes)):
        spec = os.fsdecode(file_obj) if not isinstance(file_obj, str) else file_obj
        if isinstance(file_obj, os.PathLike):
            spec = os.fspath(spec)
        kind = "uri" if _is_remote(spec) and not isinstance(file_obj, os.PathLike) else "path"
        if kind == "path" and not os.path.exists(spec):
            # 2.11.1 opens local paths with open(): the OS's own error, with errno and filename set.
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), spec)
        options = stream_io._uri_options(spec) if kind == "uri" else {}
        return _OpenedSource(_C.Source.open(spec, **options), spec=spec, kind=kind)
    if isinstance(file_obj, int) and not isinstance(file_obj, bool):
        path = _fd_path(file_obj)
        if path is None:
            raise ValueError(f"File descriptor {file_obj} is not an open regular file")
        base = os.lseek(file_obj, 0, os.SEEK_CUR)
        return _OpenedSource(_C.Source.open(path), base=base, kind="fd")
    native = getattr(file_obj, "_tz_source", None)
    if native is not None:
        return _OpenedSource(native, stream=file_obj, kind="stream")
    if not callable(getattr(file_obj, "read", None)):
        raise TypeError(
            "file_obj must be a path, a URI, a file descriptor or a readable binary file object,"
            f" not {file_obj.__class__.__name__}"
        )
    _mode_check_read(file_obj)
    fd = None
    fileno = getattr(file_obj, "fileno", None)
    if callable(fileno):
        try:
            fd = fileno()
        except (io.UnsupportedOperation, OSError, ValueError):
            fd = None
    pos = 0
    try:
        if file_obj.seekable():
            pos = file_obj.tell()
    except (AttributeError, OSError, ValueError):
        pos = 0
    if isinstance(fd, int) and fd >= 0:
        path = _fd_path(fd)
        if path is not None:
            return _OpenedSource(_C.Source.open(path), base=pos, stream=file_obj, kind="fd")
    # Anything else: read it into memory. Offsets in the file are absolute positions of the
    # underlying stream, so a seekable one is read from its start.
    if pos:
        file_obj.seek(0)
        data = file_obj.read()
    else:
        data = file_obj.read()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError("TensorDeserializer's file_obj must be in binary mode")
    return _OpenedSource(_C.Source.from_buffer(data), base=pos, stream=file_obj, kind="buffer")


def _prepare_device_quietly(device: int, verify: bool) -> None:
    """Makes the engine's context of CUDA device `device` ahead of the first load. A failure is
    left for that load to report: it recurs there, with the load's own error."""
    with contextlib.suppress(Exception):
        _C.prepare_device(device, verify)


def _open_reader(opened: _OpenedSource):
    if opened.kind == "checkpoint":
        # One native reader over every shard: its index is checked against them, and loads plan
        # and read all shards' tensors in one pipeline.
        options = {}
        if any(str(s).lower().startswith("s3://") for s in opened.specs):
            options = stream_io._uri_options("s3://")
        return _C.Reader.open_checkpoint(opened.specs, **options)
    if not opened.base:
        try:
            return _C.Reader(opened.source)
        except OSError as e:
            # A file too short for the header is a format problem (tensorizer: ValueError).
            try:
                size = opened.source.size()
            except Exception:
                raise e from None
            if size < 73:
                raise ValueError(f"File too small to be a tensorizer file: {e}") from e
            raise
    try:
        return _C.Reader(opened.source, offset=opened.base)
    except TypeError as e:
        raise UnsupportedError(
            "Reading a tensorizer stream embedded at a nonzero offset"
            f" ({opened.base}) of a file is not supported by this build"
        ) from e


# ---------------------------------------------------------------------------------------------
# TensorDeserializer


class TensorDeserializer(collections.abc.Mapping, contextlib.AbstractContextManager):
    """Reads a ``.tensors`` file (or a safetensors file) into PyTorch tensors.

    A read-only mapping whose keys are the top level of the file's (possibly nested) names, in
    file order, and a context manager.

    Args:
        file_obj: a path, an ``http(s)://``, ``s3://`` or ``redis://`` URI, a
            ``tensorizer.stream_io`` stream, an open binary file, or any readable binary file
            object (read into memory). ``bytes`` are a path and an ``int`` a file descriptor.
            A sharded safetensors checkpoint (beyond 2.11.1) loads as one file: its
            ``*.safetensors.index.json`` (path or URI), a directory holding one, an
            ``http(s)://`` or ``s3://`` prefix ending in ``/``, or a list of its safetensors
            files; the index is checked against the shards and every shard's tensors load in
            one pass.
        device: where tensors go; default ``cuda`` if available, else ``cpu``. ``cuda`` without
            an index follows the current torch device context. ``RuntimeError`` if CUDA is
            requested but unavailable.
        filter_func: ``name -> bool``, applied once here; ``name`` is a ``str`` for plain names
            and a ``tuple`` for structured paths. Excluded tensors disappear entirely.
        dtype: cast **floating-point** tensors to this dtype. Unlike tensorizer 2.11.1, integer,
            bool and complex tensors keep their dtype (2.11.1 cast every non-bool tensor, which
            turned token ids into floats and complex64 into bfloat16,
            coreweave/tensorizer#206).
        lazy_load: ``False`` (default) loads every selected tensor now, in one pass, then
            closes the file; ``True`` loads on access and caches.
        plaid_mode, plaid_mode_buffers: accepted and ignored, as in tensorizer ≥ 2.9.
        num_readers: parallel readers for bulk loads; ``None`` lets the engine choose; must be
            ≥ 1; capped at the tensor count. Works on every kind of source.
        verify_hash: check every tensor's CRC32 / SHA-256; ``HashMismatchError`` otherwise.
        encryption: a ``DecryptionParams`` for encrypted files.
        process_group: a ``torch.distributed`` process group (beyond 2.11.1): every rank of it
            constructs a deserializer of the same file together; each reads a share of the data
            balanced by bytes and the shares fan out over the group's collectives, so every rank
            holds every tensor (``tensorizer.distributed``). A failure on any rank raises
            ``tensorizer.distributed.DistributedLoadError`` on every rank, naming the rank and
            cause. Needs an eager load. ``distributed_stats`` then holds the bytes and seconds.
        slices: ``{pattern: Slice | dim}`` (beyond 2.11.1): tensors whose name matches a pattern
            (``fnmatch`` for a str, ``search`` for a compiled regex) are read only in part, this
            rank's ``torch.chunk`` part along the dimension (``tensorizer.distributed.Slice``;
            rank and parts come from ``process_group`` unless given) and are not fanned out. A
            partial slice cannot be verified: with ``verify_hash`` it raises ``UnsupportedError``.
        trace_file: (beyond 2.11.1) a path where each load writes its timeline as Chrome
            trace-event JSON (open it in ui.perfetto.dev): per range its read, check and upload
            spans, ring waits, the device allocation, the first copy done. A later load of the
            same deserializer (lazy loads) replaces the file.

    Returned tensors are ``torch.nn.Parameter`` objects, with ``requires_grad`` for floating
    and complex dtypes. On the CPU they share memory with the engine's load buffer (no copy).
    """

    # Compressed tensors are not written or read (as in 2.11.1, where this counter stays 0).
    total_compressed_tensor_bytes = 0

    def __init__(
        self,
        file_obj,
        device: Optional[Union[torch.device, str, int]] = None,
        filter_func: Optional[FilterFuncType] = None,
        dtype: Optional[torch.dtype] = None,
        *,
        lazy_load: bool = False,
        plaid_mode: Optional[bool] = None,  # noqa: ARG002 - accepted for compatibility
        plaid_mode_buffers: Optional[int] = None,  # noqa: ARG002
        num_readers: Optional[int] = None,
        verify_hash: bool = False,
        encryption: Optional[DecryptionParams] = None,
        process_group=None,
        slices=None,
        trace_file: Optional[str] = None,
    ):
        self._reader = None
        # Load-latency research (ours, not 2.11.1's): each engine load writes its timeline here as
        # Chrome trace-event JSON (ui.perfetto.dev), replacing an earlier load's.
        self._trace_file = None if trace_file is None else os.fspath(trace_file)
        self._opened: Optional[_OpenedSource] = None
        self._closed = False
        self._cache: Dict[int, torch.nn.Parameter] = {}
        self._headers: Dict[int, _HeaderInfo] = {}
        self._bytes_read = 0
        self._timings: Dict[str, float] = {}
        self._header_source = None
        self._init_failed = False
        self._process_group = process_group
        self._slices = dict(slices) if slices else {}
        self._status_exchanged = False
        self.distributed_stats: Dict[str, float] = {}
        try:
            if (process_group is not None or self._slices) and lazy_load:
                raise ValueError("process_group and slices need an eager load (lazy_load=False)")
            self._init(
                file_obj, device, filter_func, dtype, lazy_load, num_readers, verify_hash,
                encryption,
            )
        except BaseException as e:
            self._init_failed = True
            self.close()
            if process_group is not None and not self._status_exchanged and isinstance(e, Exception):
                # The other ranks wait in the status exchange: tell them why this one failed.
                from . import distributed

                distributed.report_failure(process_group, e)
                rank = torch.distributed.get_rank(process_group)
                raise distributed.DistributedLoadError(
                    f"rank {rank} failed to load: {type(e).__name__}: {e}", rank=rank, cause=str(e)
                ) from e
            raise

    def _init(
        self, file_obj, device, filter_func, dtype, lazy_load, num_readers, verify_hash,
        encryption,
    ):
        # Device
        device = _default_device() if device is None else torch.device(device)
        is_cuda = device.type == "cuda"
        if is_cuda and not torch.cuda.is_available():
            raise RuntimeError(
                "Cannot deserialize to CUDA device because CUDA is not available"
            )
        self._device_is_dynamic = is_cuda and device.index is None and lazy_load
        if is_cuda and device.index is None:
            device = _resolve_cuda_device()
        self._device: torch.device = device

        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype: expected torch.dtype or None, got {dtype!r}")
        self._dtype = dtype
        self._verify_hash = bool(verify_hash)
        self._lazy_load = bool(lazy_load)

        # Decryption
        if encryption is not None and not isinstance(encryption, DecryptionParams):
            raise TypeError(
                "encryption parameter: expected DecryptionParams instance"
                f" or None, {encryption.__class__.__name__} found"
            )
        if encryption is not None and encryption._native is None:
            raise ValueError("Invalid DecryptionParams, no key or source string provided")
        self._decryption = None if encryption is None else encryption._native

        if num_readers is not None:
            if isinstance(num_readers, bool) or not isinstance(num_readers, int):
                raise TypeError(
                    f"num_readers: expected int or None, got {num_readers.__class__.__name__}"
                )
            if num_readers < 1:
                raise ValueError("num_readers must be positive")

        # The device's context (streams, completion threads, pinned ring) is made on a thread of
        # its own while the file opens, so the first load finds it ready (_load joins it).
        self._preparing = None
        engine_device = self._engine_device(device)
        if engine_device >= 0:
            self._preparing = threading.Thread(
                target=_prepare_device_quietly, args=(engine_device, self._verify_hash), daemon=True
            )
            self._preparing.start()

        # Source and index
        self._opened = _open_source(file_obj)
        self._reader = reader = _open_reader(self._opened)
        self._file_version = reader.version
        self._kind = reader.kind
        self._encrypted_file = bool(reader.encrypted)
        if self._decryption is not None and not self._encrypted_file:
            if reader.kind == "tensorizer" and reader.version < ENCRYPTION_TENSORIZER_VERSION:
                raise CryptographyError(
                    "Tensor decryption was requested,"
                    " but the file provided comes from a tensorizer version"
                    " predating encryption, so it must not be encrypted."
                    " Either set encryption=None on the TensorDeserializer,"
                    " or ensure that the correct file was provided."
                )
            raise CryptographyError(
                "Tensor decryption was requested,"
                " but the file provided is not flagged as encrypted."
                " Either set encryption=None on the TensorDeserializer,"
                " or ensure that the correct file was provided."
            )
        if self._encrypted_file and self._decryption is None:
            raise CryptographyError("Tensor is encrypted, but decryption was not requested")

        self.total_file_bytes = reader.file_bytes
        entries = list(reader.entries)
        self._file_header = _FileHeader(
            reader.version,
            _FileFeatureFlags.encrypted if self._encrypted_file else _FileFeatureFlags(0),
            reader.file_bytes,
            len(entries),
        )
        if not entries:
            raise ValueError("Tensor index in the file is empty")
        self._entries = entries
        self._paths: List[_Path] = [_entry_path(e) for e in entries]
        self._bytes_read = entries[0].header_offset - self._opened.base

        if filter_func is not None:
            selected = [i for i, p in enumerate(self._paths) if filter_func(_public_name(p))]
        else:
            selected = list(range(len(entries)))
        self._selected: List[int] = selected
        self._index_of: Dict[_Path, int] = {self._paths[i]: i for i in selected}
        # Prefix tree of the selected paths: inner nodes are dicts, leaves entry indices.
        structure: dict = {}
        for i in selected:
            path = self._paths[i]
            branch = structure
            for c in path[:-1]:
                nxt = branch.setdefault(c, {})
                if not isinstance(nxt, dict):
                    raise ValueError(f"Conflicting tensor paths: {_public_name(path)}")
                branch = nxt
            if path[-1] in branch:
                raise ValueError(f"Conflicting tensor paths: {_public_name(path)}")
            branch[path[-1]] = i
        self._structure = structure

        if num_readers is not None:
            num_readers = min(num_readers, max(len(selected), 1))
        self._num_readers = num_readers
        self._cursor = -1  # position in self._selected of the last read_tensors() yield

        self.total_tensor_bytes = sum(entries[i].deserialized_bytes for i in selected)

        if not self._lazy_load:
            self._load(selected, self._verify_hash)
            self.total_tensor_bytes = sum(entries[i].data_length for i in selected)
            self._release_file()

    # -- file lifetime ---------------------------------------------------------------------

    def _release_file(self, keep_details: bool = True) -> None:
        """Closes the file (tensors already loaded stay usable).

        The per-tensor header details (module index, stored hashes) that read_tensors and
        verify_module may still need are kept reachable: paths and URIs are reopened on
        demand; local descriptors and in-memory files have them read now (cheap); for a
        stream object's (possibly remote) source, a reference to the source is kept until
        close()."""
        if self._reader is not None:
            opened = self._opened
            if keep_details and opened is not None and opened.spec is None:
                if opened.kind in ("fd", "buffer"):
                    self._prefetch_headers()
                elif opened.kind == "stream":
                    self._header_source = opened.source
            reader, self._reader = self._reader, None
            reader.close()
        opened = self._opened
        if opened is not None:
            opened.source = None
            stream, opened.stream = opened.stream, None
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.close()

    def close(self) -> None:
        """Releases the file and the key material. Loaded tensors stay valid."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._release_file(keep_details=not self._init_failed)
        self._header_source = None
        self._decryption = None

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()

    def __exit__(self, exc_type, exc_val, tb):
        self.close()

    # -- loading -----------------------------------------------------------------------------

    def _target_device(self) -> torch.device:
        return _resolve_cuda_device() if self._device_is_dynamic else self._device

    @staticmethod
    def _engine_device(target: torch.device) -> int:
        """The CUDA device index the engine loads straight to, or -1 for host memory (then
        moved with .to(), e.g. for "meta" or when the engine sees no CUDA device)."""
        if target.type == "cuda" and _C.cuda_device_count() > 0:
            return target.index if target.index is not None else 0
        return -1

    def _require_open(self):
        if self._reader is None:
            raise OSError(
                "The file was closed (after an eager load, load_into_module() or close());"
                " create a new TensorDeserializer to load more tensors"
            )
        return self._reader

    def _load(self, indices: Sequence[int], verify: bool) -> None:
        """Loads the uncached tensors among indices in one engine call and caches them."""
        todo = [i for i in indices if i not in self._cache]
        if not todo:
            return
        reader = self._require_open()
        target = self._target_device()
        dev = self._engine_device(target)
        if self._preparing is not None:
            # A failure there recurs, reported, in the load itself.
            self._preparing.join()
            self._preparing = None
        if self._process_group is not None or self._slices:
            self._load_distributed(todo, verify, target)
            return
        kwargs = {"verify": bool(verify), "decryption": self._decryption, "trace": self._trace_file}
        if dev >= 0:
            kwargs["device"] = dev
        if len(todo) == 1:
            loaded = reader.load_one(todo[0], **kwargs)
        else:
            loaded = reader.load(
                list(todo), readers=self._num_readers or 0, **kwargs
            )
        self._note_timings(loaded)
        if verify:
            self._check_replaced_hashes(loaded.indices)
        on_device = dev >= 0
        entries, cache, span = self._entries, self._cache, 0
        # Per tensor, on every load: kept to a few field reads (each a call into _C) and the
        # wrapping itself, a few microseconds a tensor that Python adds to the engine's load.
        for pos, idx in enumerate(loaded.indices):
            entry = entries[idx]
            dtype = _entry_torch_dtype(entry)
            if entry.deserialized_bytes == 0:
                t = torch.empty(entry.shape, dtype=dtype, device=target)
            elif on_device:
                t = _device_tensor(loaded, pos, dtype, entry.shape)
            else:
                t = torch.frombuffer(loaded.buffer(pos), dtype=torch.uint8)
                t = t.view(dtype).reshape(entry.shape)
            cache[idx] = self._to_parameter(t, target, on_target=on_device)
            span += entry.data_offset + entry.data_length - entry.header_offset
        self._bytes_read += span

    @property
    def _file_flags(self) -> _FileFeatureFlags:
        """The file header's feature flags (2.11.1's private accessor; see `_file_header`)."""
        return self._file_header.feature_flags

    @_file_flags.setter
    def _file_flags(self, val: _FileFeatureFlags) -> None:
        # Reported only: the engine reads the flags from the file itself.
        self._file_header.feature_flags = val

    def _check_replaced_hashes(self, indices: Sequence[int]) -> None:
        """Raises HashMismatchError for the first tensor whose hashes, as a replaced
        `serialization.TensorHash` builds them from the header, differ from the stored ones.

        2.11.1 verifies against the TensorHash objects its header parser made, so replacing the
        class changes the expected values; the engine has just verified the data against the
        stored values, so a difference there is a mismatch with the data. Nothing is read while
        TensorHash is the class this module defines."""
        if TensorHash is _STORED_TENSOR_HASH or self._kind != "tensorizer":
            return
        self._ensure_headers(indices)
        for i in indices:
            info = self._headers[i]
            for expected, (kind, stored) in zip(info.hashes, info.stored):
                if bytes(expected.hash) == stored:
                    continue
                name = _public_name(self._paths[i])
                if kind == HashType.CRC32:
                    raise HashMismatchError(
                        f"Tensor '{name}' failed CRC32 verification. Expected"
                        f" {int.from_bytes(expected.hash, 'little')}, got {int.from_bytes(stored, 'little')}."
                    )
                raise HashMismatchError(
                    f"Tensor '{name}' failed SHA256 verification."
                    f" Expected {bytes(expected.hash).hex()}, got {stored.hex()}."
                )

    def _load_distributed(self, todo: Sequence[int], verify: bool, target: torch.device) -> None:
        """The eager load with a process group or slices (tensorizer.distributed): slices read
        in part on this rank, the rest partitioned over the group and fanned out (or, without a
        group, loaded as usual)."""
        from . import distributed

        reader = self._require_open()
        group = self._process_group
        rank = world = None
        if group is not None:
            rank = torch.distributed.get_rank(group)
            world = torch.distributed.get_world_size(group)
        names = {i: self._entries[i].display for i in todo}
        sliced = distributed.match_slices(names, self._slices)
        rest = [i for i in todo if i not in sliced]
        common = {"verify": bool(verify), "decryption": self._decryption, "readers": self._num_readers or 0}
        error, got, stats = None, {}, {}
        try:
            if sliced:
                got, sstats = distributed.load_slices(reader, sliced, rank=rank, world=world, device=target, **common)
                stats.update({"slice_" + k: v for k, v in sstats.items()})
        except Exception as e:
            if group is None:
                raise
            error = f"{type(e).__name__}: {e}"
        if group is not None:
            self._status_exchanged = True
            flat, pstats = distributed.load_partitioned(
                reader, rest, process_group=group, device=target, prior_error=error, **common
            )
            stats.update(pstats)
        else:
            flat = {}
            if rest:
                saved, self._slices = self._slices, {}
                try:
                    self._load(rest, verify)
                finally:
                    self._slices = saved
        self.distributed_stats = stats
        self._bytes_read += int(stats.get("read_bytes", 0)) + int(stats.get("slice_read_bytes", 0))
        entries = self._entries
        for i in rest if group is not None else []:
            entry = entries[i]
            t = distributed.typed(flat[i], _entry_torch_dtype(entry), entry.shape)
            self._cache[i] = self._to_parameter(t, target)
        for i, (buf, shape) in got.items():
            t = distributed.typed(buf, _entry_torch_dtype(entries[i]), shape)
            self._cache[i] = self._to_parameter(t, target)

    def _note_timings(self, loaded) -> None:
        _record_perf_stats(loaded)
        with contextlib.suppress(Exception):
            for k, v in loaded.timings.items():
                self._timings[k] = self._timings.get(k, 0.0) + float(v)

    def _to_parameter(self, t: torch.Tensor, target: torch.device, on_target: bool = False) -> torch.nn.Parameter:
        """`t` as a Parameter on `target`, cast to the deserializer's dtype if floating point;
        on_target: `t` is known to be on `target` already (a device load's tensor)."""
        dtype = t.dtype
        if self._dtype is not None and dtype.is_floating_point and dtype != self._dtype:
            t = t.to(dtype=self._dtype)
            dtype = t.dtype
        if not on_target and t.device != target:
            t = t.to(device=target)
        return torch.nn.Parameter(t, requires_grad=dtype.is_floating_point or dtype.is_complex)

    # -- mapping -----------------------------------------------------------------------------

    def _leaves_under(self, node) -> List[int]:
        if not isinstance(node, dict):
            return [node]
        out: List[int] = []
        stack = [iter(node.values())]
        while stack:
            for v in stack[-1]:
                if isinstance(v, dict):
                    stack.append(iter(v.values()))
                    break
                out.append(v)
            else:
                stack.pop()
        out.sort()
        return out

    def __getitem__(self, name) -> Union[torch.nn.Parameter, typing.Mapping]:
        try:
            node = self._structure[name]
        except (KeyError, TypeError):
            raise KeyError(f"Tensor {name} not found") from None
        if not isinstance(node, dict):
            t = self._cache.get(node)
            if t is None:  # not loaded yet (lazy)
                self._load([node], self._verify_hash)
                t = self._cache[node]
            return t
        leaves = self._leaves_under(node)
        self._load(leaves, self._verify_hash)
        plen = 1
        return _restructure(
            ((self._paths[i][plen:], self._cache[i]) for i in leaves), as_proxies=True
        )

    def __iter__(self):
        return iter(self._structure)

    def __len__(self) -> int:
        return len(self._structure)

    def __contains__(self, key) -> bool:
        try:
            return key in self._structure
        except TypeError:
            return False

    def keys(self):
        return self._structure.keys()

    def tree(
        self,
        prefix: Optional[Iterable[_TensorPathComponent]] = None,
        *,
        default: Any = None,
        filter_func: Optional[FilterFuncType] = None,
    ):
        """Loads a subtree as real containers: int-keyed levels become lists sorted by index,
        str-keyed levels dicts in file order; a prefix naming a tensor gives that tensor.
        ``prefix`` must be a sequence (``TypeError`` for a bare str or int). Returns
        ``default`` when nothing matches."""
        if prefix is None:
            prefix = ()
        if isinstance(prefix, (str, int)):
            raise TypeError(
                f"Invalid prefix: expected sequence, got {prefix.__class__.__name__!r}"
                " (for a single-element prefix, use a single-element sequence)"
            )
        prefix = tuple(prefix)
        n = len(prefix)
        keys = [
            i
            for i in self._selected
            if self._paths[i][:n] == prefix
            and (filter_func is None or filter_func(_public_name(self._paths[i])))
        ]
        if not keys:
            return default
        self._load(keys, self._verify_hash)
        if len(keys) == 1 and len(self._paths[keys[0]]) == n:
            return self._cache[keys[0]]
        return _restructure(
            ((self._paths[i][n:], self._cache[i]) for i in keys), as_proxies=False
        )

    # -- sequential reads ---------------------------------------------------------------------

    def _read_selected(self, filter_func, num_tensors, verify_hash) -> Iterator[int]:
        if num_tensors < 0 and num_tensors != -1:
            raise ValueError("num_tensors must be -1 or non-negative")
        if num_tensors == 0:
            return
        verify = self._verify_hash if verify_hash is None else bool(verify_hash)
        positions = range(self._cursor + 1, len(self._selected))
        if filter_func is not None:
            positions = [
                p
                for p in positions
                if filter_func(_public_name(self._paths[self._selected[p]]))
            ]
        positions = list(positions)
        if num_tensors != -1:
            positions = positions[:num_tensors]
        self._load([self._selected[p] for p in positions], verify)
        for p in positions:
            self._cursor = p
            yield self._selected[p]

    def read_tensors(
        self,
        filter_func: Optional[FilterFuncType] = None,
        num_tensors: int = -1,
        verify_hash: Optional[bool] = None,
    ) -> Iterator[Tuple[int, TensorType, Union[str, tuple], torch.nn.Parameter]]:
        """Yields ``(module_idx, tensor_type, name, tensor)`` in file order, continuing after
        the last tensor an earlier ``read_tensors``/``read_numpy_arrays`` call yielded.

        ``num_tensors``: at most that many (-1: all; other negatives: ``ValueError``).
        Unlike 2.11.1, ``d[k]``, ``tree()``, ``load_into_module()`` and the eager load do not
        move this cursor (in 2.11.1, ``read_tensors()`` after an eager constructor yielded
        nothing)."""
        for idx in self._read_selected(filter_func, num_tensors, verify_hash):
            entry = self._entries[idx]
            yield (
                self._module_idx(idx),
                TensorType(entry.type),
                _public_name(self._paths[idx]),
                self._cache[idx],
            )

    def read_numpy_arrays(
        self,
        filter_func: Optional[FilterFuncType] = None,
        num_tensors: int = -1,
        allow_raw_data: bool = False,
        verify_hash: Optional[bool] = None,
    ) -> Iterator[Tuple[int, TensorType, Union[str, tuple], numpy.ndarray, bool, Optional[str]]]:
        """Like ``read_tensors`` (same cursor) but yields numpy arrays:
        ``(module_idx, tensor_type, name, array, is_opaque, torch_dtype)``. CPU only
        (``RuntimeError`` otherwise). A dtype numpy lacks (bfloat16, float8…) raises
        ``ValueError`` unless ``allow_raw_data``, which yields it as a same-size signed integer
        array with ``is_opaque=True`` and the torch dtype's name."""
        if self._device.type != "cpu":
            raise RuntimeError("read_numpy_arrays is only valid when deserializing to the CPU")
        for idx in self._read_selected(filter_func, num_tensors, verify_hash):
            entry = self._entries[idx]
            name = _public_name(self._paths[idx])
            arr, is_opaque, torch_dtype = _numpy_view_of(self._cache[idx])
            if is_opaque and not allow_raw_data:
                raise ValueError(
                    f"{name} has an opaque datatype: "
                    f"(Torch: {torch_dtype}, Numpy: {arr.dtype.str}). "
                    "Set `allow_raw_data=True` to return as a numpy array "
                    f"with a datatype of {arr.dtype.str}"
                )
            yield self._module_idx(idx), TensorType(entry.type), name, arr, is_opaque, torch_dtype

    # -- modules -----------------------------------------------------------------------------

    def load_into_module(
        self,
        m: torch.nn.Module,
        filter_func: Optional[FilterFuncType] = None,
        verify_hash: Optional[bool] = None,
    ) -> int:
        """Attaches the selected tensors to ``m`` (``register_parameter`` for PARAM,
        ``register_buffer`` for BUFFER), looking modules up by the name before the last ``.``.
        Returns the number of tensors, then closes the file.

        A safetensors source (one file, or a sharded checkpoint: see the class) stores no
        tensor kinds: each tensor becomes what ``m`` has under its name (a buffer stays a
        buffer, anything else is a parameter).

        Raises ``NotImplementedError`` for STATE_DICT tensors of a ``.tensors`` file or structured names and
        ``KeyError`` for a module path ``m`` lacks -- all checked before anything is loaded.
        Tensors of ``m`` that the file lacks are left as they are.

        Differences from 2.11.1: an attribute that already exists as the other kind of member
        (a buffer where the file has a parameter, or a plain attribute) is replaced instead of
        raising ``KeyError`` (coreweave/tensorizer#67); a buffer ``m`` registered as
        non-persistent stays non-persistent; nothing is attached when a check fails."""
        verify = self._verify_hash if verify_hash is None else bool(verify_hash)
        modules = dict(m.named_modules())
        keys = [
            i
            for i in self._selected
            if filter_func is None or filter_func(_public_name(self._paths[i]))
        ]
        plan = []
        for i in keys:
            entry = self._entries[i]
            kind = TensorType(entry.type)
            if kind == TensorType.STATE_DICT and self._kind != "safetensors":
                raise NotImplementedError(
                    "This was serialized using TensorSerializer.write_state_dict(), so it"
                    " cannot be loaded using TensorDeserializer.load_into_module()."
                    " Use the TensorDeserializer object directly as a state_dict mapping"
                    " instead."
                )
            path = self._paths[i]
            if len(path) != 1 or not isinstance(path[0], str):
                raise NotImplementedError(
                    "Cannot deserialize structured tensor keys as a module;"
                    " try using the TensorDeserializer directly as a state_dict mapping"
                    " instead."
                )
            obj_path, _, attr = path[0].rpartition(".")
            if obj_path not in modules:
                raise KeyError(obj_path)
            if kind == TensorType.STATE_DICT:
                # safetensors (one file or a sharded checkpoint) stores no parameter/buffer kind:
                # a tensor becomes what the module already has under that name.
                kind = TensorType.BUFFER if attr in modules[obj_path]._buffers else TensorType.PARAM
            plan.append((i, kind, modules[obj_path], attr))
        self._load(keys, verify)
        for i, kind, module, attr in plan:
            _attach(module, attr, self._cache[i], kind)
        self._release_file()
        return len(keys)

    def verify_module(self, m: torch.nn.Module) -> Tuple[bool, List[Tuple[Union[str, tuple], bool]]]:
        """Checks ``m``'s tensors against the hashes stored in the file.

        Returns ``(all_passed, [(name, passed), ...])``, one pair per selected tensor of the
        file; a tensor ``m`` lacks counts as failed. Root-level names written by
        ``write_module`` (``".weight"``) match ``m``'s ``"weight"`` (2.11.1 reported them as
        failures). ``RuntimeError`` when the stored hashes cannot be read any more (a closed
        stream that cannot be reopened)."""
        tensors: Dict[Any, torch.Tensor] = dict(m.state_dict())
        tensors.update(m.named_buffers())
        results: List[Tuple[Union[str, tuple], bool]] = []
        for i in self._selected:
            entry = self._entries[i]
            name = _public_name(self._paths[i])
            lookup = name
            if (
                isinstance(name, str)
                and name.startswith(".")
                and entry.type != TensorType.STATE_DICT
            ):
                lookup = name[1:]
            t = tensors.get(lookup)
            if t is None:
                results.append((name, False))
                continue
            info = self._header_info(i)
            hashes, h = info.hashes, info.hash_prefix
            if tuple(t.shape) != tuple(entry.shape):
                results.append((name, False))
                continue
            data = b"" if entry.data_length == 0 else _host_bytes(t)
            results.append((name, _check_hashes(hashes, h, data)))
        return all(ok for _, ok in results), results

    def _header_info(self, i: int) -> _HeaderInfo:
        info = self._headers.get(i)
        if info is None:
            self._ensure_headers([i])
            info = self._headers[i]
        return info

    def _module_idx(self, i: int) -> int:
        native = getattr(self._entries[i], "module_idx", None)
        if native is not None:
            return native
        return self._header_info(i).module_idx

    def _ensure_headers(self, indices: Iterable[int]) -> None:
        """Reads the per-tensor headers (module index, stored hashes) not known yet: from the
        open file, or by reopening a path or URI after the file was closed."""
        missing = [i for i in indices if i not in self._headers]
        if not missing:
            return
        if self._kind != "tensorizer":
            for i in missing:
                self._headers[i] = _HeaderInfo(0, [], b"", ())
            return
        e0 = self._entries[missing[0]]
        if getattr(e0, "hashes", None) is not None and getattr(e0, "hash_prefix", None) is not None:
            for i in missing:
                e = self._entries[i]
                stored = tuple((int(k), bytes(v)) for k, v in e.hashes)
                hashes = [TensorHash(HashType(k), v) for k, v in stored]
                self._headers[i] = _HeaderInfo(e.module_idx, hashes, bytes(e.hash_prefix), stored)
            return
        opened = self._opened
        if self._reader is not None and opened is not None and opened.source is not None:
            source = opened.source
        elif self._header_source is not None:
            source = self._header_source
        elif opened is not None and opened.spec is not None:
            options = stream_io._uri_options(opened.spec) if opened.kind == "uri" else {}
            source = _C.Source.open(opened.spec, **options)
        else:
            raise RuntimeError(
                f"The headers of {self._entries[missing[0]].display} are not available:"
                " the file was closed and cannot be reopened"
            )
        for i in missing:
            e = self._entries[i]
            raw = source.read(e.header_offset, e.data_offset - e.header_offset)
            # The entry's tag, not its dimensions, says how the header stores them (FORMAT.md §16.1).
            long_shape = getattr(e, "metadata_version", 1) == 5
            self._headers[i] = _parse_header(raw, self._encrypted_file, long_shape)

    def _prefetch_headers(self) -> None:
        """Reads the header details of every selected tensor while the file is open."""
        with contextlib.suppress(Exception):
            self._ensure_headers(self._selected)

    # -- properties and misc -----------------------------------------------------------------

    @property
    def total_bytes_read(self) -> int:
        """Bytes read from the file so far: the header and index plus each loaded tensor's
        header and data."""
        return self._bytes_read

    @property
    def cache_status(self) -> Optional[str]:
        stream = self._opened.stream if self._opened is not None else None
        headers = getattr(stream, "response_headers", None)
        if headers is None:
            return None
        return headers.get("x-cache-status", None)

    def to_redis(self, redis_client, key_prefix: str, force: bool = False) -> None:
        """Stores the file in Redis in tensorizer's layout (format/FORMAT.md §13): ``<prefix>:header:0``
        and ``<prefix>:<name>:<offset>`` keys for each selected tensor's header and data.
        Needs an open file (``lazy_load=True``). ``tensorizer copy FILE redis://...`` does the
        same from the command line."""
        reader = self._require_open()
        if reader.kind != "tensorizer":
            raise ValueError("to_redis needs a .tensors file")
        source = self._opened.source
        base = self._opened.base
        (metadata_len,) = struct.unpack("<Q", source.read(base + 65, 8))
        redis_client.set(f"{key_prefix}:header:0", source.read(base, 73 + metadata_len))
        for i in self._selected:
            e = self._entries[i]
            name = e.raw_name.decode("utf-8")
            header_key = f"{key_prefix}:{name}:{e.header_offset}"
            if not force and redis_client.exists(header_key):
                continue
            redis_client.set(
                header_key, source.read(e.header_offset, e.data_offset - e.header_offset)
            )
            redis_client.set(
                f"{key_prefix}:{name}:{e.data_offset}", source.read(e.data_offset, e.data_length)
            )


def _attach(module: torch.nn.Module, attr: str, tensor: torch.nn.Parameter, kind: TensorType):
    if attr in module._modules:
        raise KeyError(f"attribute '{attr}' already exists as a submodule")
    if kind == TensorType.PARAM:
        if attr in module._buffers:
            del module._buffers[attr]
            module._non_persistent_buffers_set.discard(attr)
        elif attr not in module._parameters and hasattr(module, attr):
            delattr(module, attr)
        module.register_parameter(attr, tensor)
    else:
        persistent = attr not in getattr(module, "_non_persistent_buffers_set", ())
        if attr in module._parameters:
            del module._parameters[attr]
        elif attr not in module._buffers and hasattr(module, attr):
            delattr(module, attr)
        module.register_buffer(attr, tensor, persistent=persistent)


# ---------------------------------------------------------------------------------------------
# TensorSerializer


def _mode_check_write(file_obj) -> None:
    try:
        writable = file_obj.writable()
    except AttributeError:
        writable = hasattr(file_obj, "write")
    if isinstance(file_obj, io.TextIOBase) or not writable:
        mode = getattr(file_obj, "mode", "")
        raise ValueError(
            "TensorSerializer's file_obj must be writable "
            'and in binary mode (mode="wb+"{})'.format(mode and f', current mode="{mode}"')
        )


class TensorSerializer:
    """Writes a ``.tensors`` file, byte-identical to tensorizer 2.11.1 for the same calls
    (apart from the random nonces of encrypted files).

    Args:
        file_obj: a path, an ``s3://`` or ``redis://`` URI (uploaded at ``close()``), or a
            writable binary file object (the file is built in a temporary file and copied into
            it at ``close()``; the object is then closed, as tensorizer does, except an
            ``io.BytesIO``, which keeps its contents). ``bytes`` are a path and an ``int`` a file
            descriptor.
        compress_tensors: accepted for compatibility; does nothing.
        encryption: an ``EncryptionParams`` to encrypt every tensor's data.
        limit_cpu_concurrency: a positive int, accepted for compatibility (the engine sizes its
            own thread pools).

    Also a context manager: leaving the block closes the file, or discards it when the block
    raised.
    """

    # Compressed tensors are not written or read (as in 2.11.1, where this counter stays 0).
    total_compressed_tensor_bytes = 0

    def __init__(
        self,
        file_obj,
        compress_tensors: bool = False,
        *,
        encryption: Optional[EncryptionParams] = None,
        limit_cpu_concurrency: Optional[int] = None,
    ) -> None:
        self._writer = None
        self._closed = False
        self._file = None
        self._tmpdir: Optional[str] = None
        self._total_tensor_bytes = 0
        if limit_cpu_concurrency is not None:
            if isinstance(limit_cpu_concurrency, bool) or not isinstance(
                limit_cpu_concurrency, int
            ):
                raise TypeError(
                    "limit_cpu_concurrency parameter: expected int or None,"
                    f" {limit_cpu_concurrency.__class__.__name__} found"
                )
            if limit_cpu_concurrency < 1:
                raise ValueError(
                    "limit_cpu_concurrency parameter: must be positive"
                    f" (or None for unbound), got {limit_cpu_concurrency}"
                )
        self.cpu_limit = limit_cpu_concurrency or os.cpu_count() or 1
        self.compress_tensors = compress_tensors
        if encryption is not None and not isinstance(encryption, EncryptionParams):
            raise TypeError(
                "encryption parameter: expected EncryptionParams instance"
                f" or None, {encryption.__class__.__name__} found"
            )
        native_enc = None if encryption is None else encryption._native
        self._encrypted = encryption is not None
        self._registry = _PathRegistry()

        if isinstance(file_obj, (str, os.PathLike, bytes)):
            spec = os.fsdecode(file_obj) if not isinstance(file_obj, str) else file_obj
            if isinstance(file_obj, os.PathLike):
                spec = os.fspath(spec)
            options = {} if isinstance(file_obj, os.PathLike) else stream_io._uri_options(spec, for_write=True)
            self._writer = _C.Writer(spec, encryption=native_enc, **options)
            return
        if isinstance(file_obj, int) and not isinstance(file_obj, bool):
            file_obj = open(file_obj, "wb", closefd=False)  # noqa: SIM115 - closed in close()
        _mode_check_write(file_obj)
        pos = 0
        with contextlib.suppress(AttributeError, OSError, ValueError):
            if file_obj.seekable():
                pos = file_obj.tell()
        self._tmpdir = tempfile.mkdtemp(prefix="tensorizer-")
        tmp = os.path.join(self._tmpdir, "out.tensors")
        try:
            if pos:
                try:
                    self._writer = _C.Writer(tmp, encryption=native_enc, offset=pos)
                except TypeError as e:
                    raise UnsupportedError(
                        "Writing a tensorizer stream at a nonzero offset"
                        f" ({pos}) of a file object is not supported by this build"
                    ) from e
            else:
                self._writer = _C.Writer(tmp, encryption=native_enc)
        except BaseException:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
            raise
        self._file = file_obj
        self._tmp_path = tmp

    # -- writing -----------------------------------------------------------------------------

    def _writer_or_raise(self):
        if self._closed or self._writer is None:
            raise ValueError("TensorSerializer is closed")
        return self._writer

    def _write_entry(self, idx: int, path: _Path, tensor_type, tensor) -> None:
        writer = self._writer_or_raise()
        kind = int(TensorType(tensor_type))
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TypeError(f"module index must be an int, got {idx.__class__.__name__}")
        if not 0 <= idx <= 0xFFFF:
            raise ValueError(f"module index {idx} does not fit in 16 bits")
        if isinstance(tensor, torch.Tensor):
            if tensor.is_quantized:
                raise NotImplementedError(f"Serialization for {tensor.dtype} is not implemented.")
            shape = tuple(tensor.shape)
            dtype_name = str(tensor.dtype)
            meta = tensor.is_meta
            data = b"" if meta else _host_bytes(tensor)
        elif isinstance(tensor, numpy.ndarray):
            dtype_name = _numpy_torch_name(tensor.dtype)
            shape = tuple(tensor.shape)
            arr = tensor
            if not arr.dtype.isnative:
                arr = arr.astype(arr.dtype.newbyteorder("="))
            if not arr.flags.c_contiguous:
                arr = numpy.ascontiguousarray(arr)
            data = arr.reshape(-1).view(numpy.uint8) if arr.size else b""
            meta = False
        else:
            raise TypeError(
                "tensor must be a torch.Tensor or a numpy.ndarray,"
                f" got {tensor.__class__.__name__}"
            )
        name = path[0] if len(path) == 1 and isinstance(path[0], str) else tuple(path)
        self._registry.check(path)
        try:
            writer.write(idx, name, kind, dtype_name, shape, data, meta)
        except UnsupportedError as e:  # the engine's errc::unsupported for a limit of the format
            if "metadata overflow" in str(e).lower():
                # tensorizer: RuntimeError("Metadata overflow"); the file stays valid
                raise RuntimeError(f"Metadata overflow: {e}") from e
            raise
        self._registry.register(path)

    def write_tensor(
        self,
        idx: int,
        name: Union[str, Sequence[_TensorPathComponent]],
        tensor_type: TensorType,
        tensor: Union[torch.Tensor, numpy.ndarray],
    ) -> None:
        """Writes one tensor (torch or numpy; any layout, written as contiguous C order).

        ``name`` is a str, or a tuple of str/int for a structured path. A numpy dtype without a
        torch equivalent raises ``TypeError``; quantized torch dtypes ``NotImplementedError``;
        a name used twice or clashing with an earlier path ``ValueError``."""
        self._write_entry(idx, _to_path(name), tensor_type, tensor)

    def write_module(
        self,
        m: torch.nn.Module,
        remove_tensors: bool = False,
        *,
        include_non_persistent_buffers: bool = True,
    ) -> None:
        """Writes every parameter and buffer of ``m`` (format/FORMAT.md §5.4): for each module of
        ``m.named_modules()`` (its position is the module index), its own parameters (PARAM)
        then its own buffers (BUFFER), named ``f"{module_name}.{attr}"`` (so tensors of the
        root get a leading dot). ``remove_tensors`` sets each attribute to None once written;
        ``include_non_persistent_buffers=False`` leaves out buffers registered with
        ``persistent=False``."""
        modules = tuple(m.named_modules())
        state_keys = None

        def is_persistent(module_name: str, module: torch.nn.Module, attr: str) -> bool:
            nonlocal state_keys
            non_persistent = getattr(module, "_non_persistent_buffers_set", None)
            if non_persistent is not None:
                return attr not in non_persistent
            if state_keys is None:
                state_keys = set(m.state_dict().keys())
            return (f"{module_name}.{attr}" if module_name else attr) in state_keys

        for idx, (module_name, module) in enumerate(modules):
            for (attr, tensor), kind in itertools.chain(
                zip(module.named_parameters(recurse=False), itertools.repeat(TensorType.PARAM)),
                zip(module.named_buffers(recurse=False), itertools.repeat(TensorType.BUFFER)),
            ):
                label = f"{module_name}.{attr}"
                if (
                    not include_non_persistent_buffers
                    and kind == TensorType.BUFFER
                    and not is_persistent(module_name, module, attr)
                ):
                    continue
                self._write_entry(idx, (label,), kind, tensor)
                if remove_tensors:
                    setattr(module, attr, None)

    def write_state_dict(self, state_dict: Union[typing.Mapping, Sequence]) -> None:
        """Writes a (possibly nested) mapping / sequence of tensors with type STATE_DICT and
        module index 0 (format/FORMAT.md §5.5). A flat ``{str: tensor}`` gives plain names; nested
        levels or a top-level list give structured names. Mapping keys must be ``str``
        (``TypeError``); every leaf must be a ``torch.Tensor`` (``TypeError``)."""
        for path, tensor in _flatten_state_dict(state_dict):
            self._write_entry(0, path, TensorType.STATE_DICT, tensor)

    # -- finishing ---------------------------------------------------------------------------

    @property
    def total_tensor_bytes(self) -> int:
        """Sum of the data bytes written so far (the header's tensor_size)."""
        if self._writer is not None and not self._closed:
            return self._writer.total_tensor_bytes
        return self._total_tensor_bytes

    def close(self) -> None:
        """Finishes the file (and uploads it for URIs, or copies it into the file object)."""
        if self._closed:
            return
        self._closed = True
        writer = self._writer
        try:
            if writer is not None:
                self._total_tensor_bytes = writer.total_tensor_bytes
                writer.close()
            if self._file is not None:
                with open(self._tmp_path, "rb") as src:
                    shutil.copyfileobj(src, self._file, 16 << 20)
                with contextlib.suppress(AttributeError):
                    self._file.flush()
                # As tensorizer, close the file object (that is what uploads an
                # open_stream("s3://...", "wb") object) -- except an in-memory BytesIO, whose
                # contents closing would throw away.
                if not isinstance(self._file, io.BytesIO):
                    self._file.close()
        finally:
            self._cleanup_tmp()

    def _abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._writer is not None:
                self._writer.abort()
        finally:
            self._cleanup_tmp()

    def _cleanup_tmp(self) -> None:
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> "TensorSerializer":
        return self

    def __exit__(self, exc_type, exc_val, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._abort()

    def __del__(self):
        # As in tensorizer, a serializer that was never closed still leaves a complete file.
        with contextlib.suppress(Exception):
            if not getattr(self, "_closed", True):
                self.close()


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

"""What TensorDeserializer reads from: per-tensor header parsing for verify_module (format/FORMAT.md
§6.1, §8.2), the target device, and opening a path, URI, file descriptor, stream or sharded
checkpoint as an engine source and reader.

Private module: ``tensorizer.serialization`` re-exports every name defined here and is their public
home (the public names' ``__module__``); import them from there.
"""

import contextlib
import errno
import hashlib
import io
import os
import stat
import struct
import typing
import zlib
from typing import List, Optional, Tuple

import torch

from . import _C, stream_io
from ._types import HashType, TensorHash, UnsupportedError, _serialization_module


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
    # The class tensorizer.serialization.TensorHash is now: callers replace it there.
    TensorHash = _serialization_module().TensorHash  # noqa: N806
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

"""TensorSerializer, the writer (``tensorizer.serialization.TensorSerializer``): tensors, modules and
state_dicts into a ``.tensors`` file through the engine's writer, byte-identical to tensorizer
2.11.1 for the same calls.

Private module: ``tensorizer.serialization`` re-exports every name defined here and is their public
home (the public names' ``__module__``); import them from there.
"""

import atexit
import contextlib
import io
import itertools
import os
import shutil
import stat
import sys
import tempfile
import typing
import weakref
from typing import Optional, Sequence, Union

import numpy
import torch

from . import _C, _boto_upload, stream_io
from ._crypt import EncryptionParams
from ._dtypes import _host_bytes, _numpy_torch_name
from ._paths import _Path, _PathRegistry, _flatten_state_dict, _to_path
from ._types import TensorType, UnsupportedError, _TensorPathComponent


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


def _stream_position(file_obj) -> Optional[int]:
    """The position of a seekable stream (after flushing what it buffers), else None."""
    try:
        if not file_obj.seekable():
            return None
        with contextlib.suppress(AttributeError):
            file_obj.flush()  # the engine may write under the buffer, by descriptor
        return file_obj.tell()
    except (AttributeError, OSError, ValueError):
        return None


def _regular_file_descriptor(file_obj, fallback):
    """The descriptor of a file object over a regular file (written by position, the GIL released),
    else `fallback`."""
    with contextlib.suppress(AttributeError, OSError, ValueError, io.UnsupportedOperation):
        fd = file_obj.fileno()
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    return fallback


def _stream_name(file_obj) -> str:
    name = getattr(file_obj, "name", None)
    return f"stream {name!r}" if isinstance(name, (str, int)) else f"stream {type(file_obj).__name__}"


class TensorSerializer:
    """Writes a ``.tensors`` file, byte-identical to tensorizer 2.11.1 for the same calls
    (apart from the random nonces of encrypted files).

    Args:
        file_obj: a path, an ``s3://`` or ``redis://`` URI (uploaded at ``close()``), or a
            writable binary file object. A seekable one is written as the tensors are written and
            holds a complete file after every write call (as in tensorizer), so closing it before
            the serializer loses nothing; one that cannot seek gets the file at ``close()``.
            ``close()`` then closes the object, as tensorizer does, except an ``io.BytesIO``, which
            keeps its contents. ``bytes`` are a path and an ``int`` a file descriptor.
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
            if spec.lower().startswith("s3://") and _boto_upload.botocore_is_stubbed():
                file_obj = stream_io.open_stream(spec, "wb+")  # uploaded by boto3, which the caller mocks
            else:
                options = {} if isinstance(file_obj, os.PathLike) else stream_io._uri_options(spec, for_write=True)
                self._writer = _C.Writer(spec, encryption=native_enc, **options)
                _unclosed.add(self)
                return
        if isinstance(file_obj, int) and not isinstance(file_obj, bool):
            file_obj = open(file_obj, "wb", closefd=False)  # noqa: SIM115 - closed in close()
        _mode_check_write(file_obj)
        pos = _stream_position(file_obj)
        if pos:
            raise UnsupportedError(
                f"Writing a tensorizer stream at a nonzero offset ({pos}) of a file object is not supported"
            )
        if pos is not None:
            # As tensorizer 2.11.1: into the caller's stream as the tensors are written, complete
            # after every write, so a stream its owner closes before this serializer loses nothing.
            self._writer = _C.Writer.for_stream(
                _regular_file_descriptor(file_obj, file_obj), 0, encryption=native_enc, name=_stream_name(file_obj)
            )
            self._file = file_obj
            _unclosed.add(self)
            return
        # A stream that cannot seek takes the finished file at close(); one dropped unclosed with
        # its stream already closed fails loudly (__del__).
        self._tmpdir = tempfile.mkdtemp(prefix="tensorizer-")
        self._tmp_path = os.path.join(self._tmpdir, "out.tensors")
        try:
            self._writer = _C.Writer(self._tmp_path, encryption=native_enc)
        except BaseException:
            self._cleanup_tmp()
            raise
        self._file = file_obj
        _unclosed.add(self)

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
        """Finishes the file (and uploads it for URIs, or copies it into a stream that cannot
        seek), then closes the file object."""
        if self._closed:
            return
        self._closed = True
        _unclosed.discard(self)
        writer = self._writer
        try:
            if writer is not None:
                self._total_tensor_bytes = writer.total_tensor_bytes
                if self._tmpdir is None and self._file is not None and getattr(self._file, "closed", False):
                    writer.abort()  # its owner closed the stream, which holds the whole file
                    return
                writer.close()
            if self._file is not None:
                self._finish_stream(writer)
        finally:
            self._cleanup_tmp()

    def _finish_stream(self, writer) -> None:
        if self._tmpdir is not None:
            with open(self._tmp_path, "rb") as src:
                shutil.copyfileobj(src, self._file, 16 << 20)
        elif writer is not None:
            self._file.seek(writer.size)  # after the end marker, as if written through the object
        with contextlib.suppress(AttributeError):
            self._file.flush()
        # As tensorizer, close the file object (that is what uploads an
        # open_stream("s3://...", "wb") object) -- except an in-memory BytesIO, whose
        # contents closing would throw away.
        if not isinstance(self._file, io.BytesIO):
            self._file.close()

    def _abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        _unclosed.discard(self)
        try:
            if self._writer is not None:
                self._writer.abort()  # a stream keeps the complete file of the tensors written before
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

    def _finish_dropped(self) -> None:
        # As in tensorizer, a serializer that was never closed still leaves a complete file: a
        # seekable stream already holds it, a path is renamed into place, a URI uploaded. Where
        # that cannot be done (a stream that cannot seek, closed first; an upload that fails) the
        # output is incomplete: say so on stderr, never silently.
        if getattr(self, "_closed", True):
            return
        try:
            self.close()
        except Exception as e:  # noqa: BLE001 - __del__ cannot raise; reported instead
            with contextlib.suppress(Exception):
                print(
                    "tensorizer: a TensorSerializer dropped without close() could not finish its output"
                    f" ({type(e).__name__}: {e}); the output is incomplete or missing",
                    file=sys.stderr,
                )

    def __del__(self):
        self._finish_dropped()


# Serializers not closed yet: those still alive at exit are finished while the interpreter can still
# upload (a __del__ during shutdown may run after the modules it needs are gone).
_unclosed: "weakref.WeakSet[TensorSerializer]" = weakref.WeakSet()


@atexit.register
def _finish_unclosed_at_exit() -> None:
    for serializer in list(_unclosed):
        serializer._finish_dropped()

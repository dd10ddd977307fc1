"""TensorDeserializer's internals, as its private base class: opening the file (``_init``), loading
tensors through the engine (plain and distributed), the per-tensor header details, timings and
releasing the file. The public class (``tensorizer.serialization.TensorDeserializer``, in
_deserializer.py) holds the constructor, the mapping interface and the public methods.

Private module: its one class is used only as TensorDeserializer's base; ``tensorizer.serialization``
is the public home of the deserializer.
"""

import contextlib
import threading
from typing import Dict, Iterable, Iterator, List, Sequence

import torch

from . import _C, stream_io
from ._crypt import DecryptionParams
from ._dtypes import _device_tensor, _entry_torch_dtype
from ._paths import _Path, _entry_path, _public_name
from ._sources import (
    _default_device,
    _HeaderInfo,
    _open_reader,
    _open_source,
    _parse_header,
    _prepare_device_quietly,
    _resolve_cuda_device,
)
from ._types import (
    ENCRYPTION_TENSORIZER_VERSION,
    CryptographyError,
    HashMismatchError,
    HashType,
    _FileFeatureFlags,
    _FileHeader,
    _serialization_module,
)


class _DeserializerCore:
    """Opening, loading and header internals of TensorDeserializer (its only subclass), whose
    constructor sets up the attributes these methods use before calling ``_init``. The methods
    keep the names they had on TensorDeserializer (user code reads private ones such as
    ``_file_flags``, and ``_file_header``, which ``_init`` sets)."""

    def _init(
        self, file_obj, device, filter_func, dtype, lazy_load, num_readers, verify_hash,
        encryption,
    ):
        device = self._take_settings(device, dtype, lazy_load, num_readers, verify_hash, encryption)
        self._preparing = None
        reader = self._open_checked(file_obj)
        # The device's context (streams, completion threads, pinned ring) is made on a thread of
        # its own while the index is read, and _load joins it. Not before the open: in a fresh
        # process the open starts the engine's workers and their io_uring rings, and pinning the
        # ring beside that delayed the header pass by 10-20 ms on an H100 host (0.8-4.8 ms of
        # its own); the ring's later slots are pinned beside the load's first reads instead.
        engine_device = self._engine_device(device)
        if engine_device >= 0:
            self._preparing = threading.Thread(
                target=_prepare_device_quietly, args=(engine_device, self._verify_hash), daemon=True
            )
            self._preparing.start()

        selected = self._read_index(reader, filter_func)
        if num_readers is not None:
            num_readers = min(num_readers, max(len(selected), 1))
        self._num_readers = num_readers
        self._cursor = -1  # position in self._selected of the last read_tensors() yield

        entries = self._entries
        self.total_tensor_bytes = sum(entries[i].deserialized_bytes for i in selected)

        if not self._lazy_load:
            self._load(selected, self._verify_hash)
            self.total_tensor_bytes = sum(entries[i].data_length for i in selected)
            self._release_file()


    def _take_settings(self, device, dtype, lazy_load, num_readers, verify_hash, encryption) -> torch.device:
        """Checks and keeps the constructor's settings; returns the target device, resolved."""
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
        return device

    def _open_checked(self, file_obj):
        """Opens the source and its reader, and checks the file's encryption against the
        decryption asked for. Returns the reader."""
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
        return reader

    def _read_index(self, reader, filter_func) -> List[int]:
        """The file header's fields, the index, each entry's path, the selection (filter_func)
        and the prefix tree of the selected paths. Returns the selected entry indices."""
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
        return selected

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

    def _begin_load(self):
        """The open reader, the target device and its engine number (-1: host), once the device
        preparation started at open is done (a failure there recurs, reported, in the load itself)."""
        reader = self._require_open()
        target = self._target_device()
        if self._preparing is not None:
            self._preparing.join()
            self._preparing = None
        return reader, target, self._engine_device(target)

    def _load(self, indices: Sequence[int], verify: bool) -> None:
        """Loads the uncached tensors among indices in one engine call and caches them."""
        todo = [i for i in indices if i not in self._cache]
        if not todo:
            return
        reader, target, dev = self._begin_load()
        if self._process_group is not None or self._slices:
            self._load_distributed(todo, verify, target)
            return
        kwargs = {"verify": bool(verify), "decryption": self._decryption, "trace": self._trace_file}
        if dev >= 0:
            kwargs["device"] = dev
        if self._signature is not None:  # the first load checks it: it hashes every byte of the file
            kwargs["signature"] = self._signature
        if len(todo) == 1:
            loaded = reader.load_one(todo[0], **kwargs)
        else:
            loaded = reader.load(
                list(todo), readers=self._num_readers or 0, **kwargs
            )
        self._note_timings(loaded)
        self._signature = None  # checked: the model matched its signature
        if verify:
            self._check_replaced_hashes(loaded.indices)
        on_device = dev >= 0
        # Per tensor, on every load: kept to a few field reads (each a call into _C) and the
        # wrapping itself, a few microseconds a tensor that Python adds to the engine's load.
        for pos, idx in enumerate(loaded.indices):
            self._keep(loaded, pos, idx, target, on_device)

    def _keep(self, loaded, pos: int, idx: int, target: torch.device, on_device: bool) -> None:
        """Caches tensor `idx`, at position `pos` of `loaded` (a _C.Loaded or _C.Stream), as a Parameter."""
        entry = self._entries[idx]
        dtype = _entry_torch_dtype(entry)
        if entry.deserialized_bytes == 0:
            t = torch.empty(entry.shape, dtype=dtype, device=target)
        elif on_device:
            t = _device_tensor(loaded, pos, dtype, entry.shape)
        else:
            t = torch.frombuffer(loaded.buffer(pos), dtype=torch.uint8)
            t = t.view(dtype).reshape(entry.shape)
        self._cache[idx] = self._to_parameter(t, target, on_target=on_device)
        self._bytes_read += entry.data_offset + entry.data_length - entry.header_offset

    def _stream(self, indices: Sequence[int], verify: bool, in_file_order: bool = True) -> Iterator[int]:
        """Yields each of `indices` once its tensor is cached: the cached ones first, then the rest
        as the engine hands them over (one load; in file order unless in_file_order is False)."""
        todo = [i for i in indices if i not in self._cache]
        yield from (i for i in indices if i in self._cache)
        if not todo:
            return
        reader, target, dev = self._begin_load()
        if self._process_group is not None or self._slices:  # shares and slices land whole
            self._load(todo, verify)
            yield from todo
            return
        stream = _C.stream(reader, list(todo), verify=bool(verify), readers=self._num_readers or 0,
                           decryption=self._decryption, device=dev, trace=self._trace_file,
                           in_file_order=in_file_order)
        while True:
            pos = stream.next()  # raises the load's error after the tensors it handed over
            if pos is None:
                break
            idx = stream.index(pos)
            self._keep(stream, pos, idx, target, dev >= 0)
            yield idx
        self._note_timings(stream)
        if verify:
            self._check_replaced_hashes(todo)

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
        # Both as tensorizer.serialization has them now: callers replace TensorHash there.
        serialization = _serialization_module()
        TensorHash, _STORED_TENSOR_HASH = serialization.TensorHash, serialization._STORED_TENSOR_HASH  # noqa: N806
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
        # Looked up where the perf stats live (callers replace serialization._perf_stats).
        _serialization_module()._record_perf_stats(loaded)
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

    # -- per-tensor headers ------------------------------------------------------------------

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
        # The class tensorizer.serialization.TensorHash is now: callers replace it there.
        TensorHash = _serialization_module().TensorHash  # noqa: N806
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

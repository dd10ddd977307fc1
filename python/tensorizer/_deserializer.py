"""TensorDeserializer, the public reader (``tensorizer.serialization.TensorDeserializer``): its
constructor, the read-only mapping interface, tree(), read_tensors / read_numpy_arrays,
load_into_module / verify_module, to_redis and close(). Opening and loading are in its private
base class (_deserializer_core.py).

Private module: ``tensorizer.serialization`` re-exports every name defined here and is their public
home (the public names' ``__module__``); import them from there.
"""

import collections.abc
import contextlib
import os
import struct
import typing
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy
import torch

from ._crypt import DecryptionParams
from ._deserializer_core import _DeserializerCore
from ._dtypes import _host_bytes, _numpy_view_of
from ._paths import _public_name, _restructure
from ._sources import _check_hashes, _HeaderInfo, _OpenedSource
from ._types import FilterFuncType, TensorType, _TensorPathComponent


# ---------------------------------------------------------------------------------------------
# TensorDeserializer


def _signature_args(signature, file_obj):
    """The engine's signature arguments for `file_obj`, or None; ValueError for what cannot be checked."""
    if signature is None:
        return None
    from .signing import ModelSignature

    if not isinstance(signature, ModelSignature):
        raise TypeError(f"signature must be a tensorizer.signing.ModelSignature, not {type(signature).__name__}")
    path = None
    if isinstance(file_obj, (str, bytes, os.PathLike)):
        path = os.fsdecode(file_obj)
    elif isinstance(getattr(file_obj, "name", None), (str, bytes)):
        path = os.fsdecode(file_obj.name)
    if path is None or "://" in path or not os.path.exists(path):
        raise ValueError("signature: the model must be local (a file or a sharded checkpoint's directory or "
                         f"index, or a file opened from one); got {file_obj!r}")
    return signature._engine_args(path)


class TensorDeserializer(_DeserializerCore, collections.abc.Mapping, contextlib.AbstractContextManager):
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
        signature: (beyond 2.11.1) a ``tensorizer.signing.ModelSignature``: the first load checks
            the model's OpenSSF model signature in its own pass (the file as it is read, the
            model's other files beside it; every byte of the file even when loading a few
            tensors) and raises ``HashMismatchError`` or ``CryptographyError`` instead of returning
            tensors from a model that does not match. ``file_obj`` must be local: a file, a
            sharded checkpoint (every shard hashed in the load), or a file opened from one.

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
        signature=None,
    ):
        self._reader = None
        self._signature = _signature_args(signature, file_obj)
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
            if self._signature is not None and (process_group is not None or self._slices):
                raise ValueError("signature is not checked with process_group or slices: verify the model first "
                                 "(`tensorizer verify --signature`)")
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

    # -- file lifetime ---------------------------------------------------------------------

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

    def stream(
        self,
        filter_func: Optional[FilterFuncType] = None,
        verify_hash: Optional[bool] = None,
        *,
        in_file_order: bool = True,
    ) -> Iterator[Tuple[Union[str, tuple], torch.nn.Parameter]]:
        """(beyond 2.11.1) Tensors as they land: loads the selected tensors (those ``filter_func``
        keeps) in one engine call and yields ``(name, tensor)`` for each as soon as its bytes are
        in place and checked (verified, decrypted), while the rest still arrives: a caller can run
        its first layers before the last ones are read. In file order (the order a forward pass
        wants), or as each completes with ``in_file_order=False``; tensors already loaded come
        first. On a CUDA device a tensor is yielded once its copy completed, so no stream has to
        wait for it. A failure raises after the tensors handed over before it, which stay valid
        and unchanged. Every tensor is also kept: ``d[name]`` afterwards reads nothing.
        ``ValueError`` while a ``signature`` is not checked yet: a stream would hand over tensors
        before the model's last byte was hashed."""
        if self._signature is not None:
            raise ValueError("stream() hands tensors over before the signature can be checked: load the model "
                             "(or one tensor of it) first, which checks the signature")
        verify = self._verify_hash if verify_hash is None else bool(verify_hash)
        indices = [
            i for i in self._selected if filter_func is None or filter_func(_public_name(self._paths[i]))
        ]
        for idx in self._stream(indices, verify, in_file_order):
            yield _public_name(self._paths[idx]), self._cache[idx]

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

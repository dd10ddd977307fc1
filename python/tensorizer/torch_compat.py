"""``torch.save`` / ``torch.load`` with tensorizer as the storage backend (format/FORMAT.md §14.1).

Inside ``with tensorizer_saving():``, ``torch.save(obj, "m.pt")`` pickles `obj` as usual, except
that every tensor storage holding data becomes a reference ``("TensorizerPickler", 0, "storage",
index, dtype)``, and the storages are written, as 1-D uint8 tensors named ``[0]``, ``[1]``, ...,
with ``TensorSerializer.write_state_dict`` to a sidecar file (default ``"m.pt.tensors"``). Inside
``with tensorizer_loading():``, ``torch.load("m.pt")`` reads the sidecar with a
`TensorDeserializer` and rebuilds the storages from it. The files are interchangeable with
tensorizer 2.11.1's (same pickle references, same sidecar bytes).

Both context managers are nestable and thread- and async-safe: ``torch.save`` / ``torch.load`` are
swapped for wrappers while any context is active anywhere (a reference count under a lock), and
the wrappers act only in contexts that entered one (contextvars); elsewhere they call torch's own
functions unchanged.

Differences from tensorizer 2.11.1:

* A file object passed to ``torch.save`` / ``torch.load`` whose sidecar location cannot be inferred
  (no usable ``name``; tensorizer raised TypeError except for BytesIO) gets the same treatment as
  BytesIO there: a warning, and plain torch serialization.
* When no sidecar is used (such a file object, or a `file_obj` callback returning None),
  ``torch.load`` runs exactly as without the context, so ``weights_only`` keeps torch's default;
  with a sidecar, ``weights_only=True`` raises a RuntimeError that names `suppress_weights_only`.
* Sidecars are written with ``TensorSerializer`` used as a context manager, so a failed write does
  not leave the serializer open.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import logging
import os
import pickle
import threading
import types
import typing
from contextvars import ContextVar
from typing import Any, Callable, Iterable, List, Optional, Tuple, Union

import torch

# Module-level names, as in 2.11.1, so that patching tensorizer.torch_compat.TensorSerializer (or
# TensorDeserializer) changes what the sidecars are written and read with.
from .serialization import TensorDeserializer, TensorSerializer

__all__ = ("tensorizer_saving", "tensorizer_loading")

logger = logging.getLogger(__name__)

_FileLike = Union[str, os.PathLike, typing.IO[bytes]]
_SaveFunc = Callable[[Any, List[torch.Tensor], dict], Any]
_LoadFunc = Callable[[Any, dict], Iterable[torch.Tensor]]

_PID_TAG = "TensorizerPickler"
_PID_VERSION = 0


class _NoSidecar:
    """Marks a resolved sidecar location as "none": use plain torch serialization."""

    def __repr__(self):
        return "<no sidecar>"


_NO_SIDECAR = _NoSidecar()

# Per context: whether a tensorizer_saving / tensorizer_loading context is active, with what
# settings, and (set by the wrapper around one torch.save / torch.load call) the resolved sidecar.
_saving: ContextVar[Optional[dict]] = ContextVar("tensorizer_saving", default=None)
_loading: ContextVar[Optional[dict]] = ContextVar("tensorizer_loading", default=None)
_save_target: ContextVar[Any] = ContextVar("tensorizer_save_target", default=_NO_SIDECAR)
_load_target: ContextVar[Any] = ContextVar("tensorizer_load_target", default=_NO_SIDECAR)


# -- pickling ------------------------------------------------------------------------------------


def _untyped(storage) -> torch.UntypedStorage:
    if isinstance(storage, torch.UntypedStorage):
        return storage
    untyped = getattr(storage, "_untyped_storage", None)
    return untyped if untyped is not None else storage.untyped()


def _has_data(storage) -> bool:
    untyped = _untyped(storage)
    return untyped.device.type != "meta" and untyped.data_ptr() != 0


def _storage_as_tensor(storage) -> torch.Tensor:
    """A 1-D uint8 tensor over the whole storage (no copy)."""
    untyped = _untyped(storage)
    tensor = torch.tensor([], dtype=torch.uint8, device=untyped.device)
    tensor.set_(untyped)
    return tensor


def _set_pickler_hook(obj, name: str, value) -> None:
    # The C pickler reads persistent_id / persistent_load through a getset on its base class (and
    # caches the bound function at construction on Python < 3.13); a Python method of the same
    # name in a subclass would make plain setattr land in the instance dict, unseen by pickle.
    for base in (pickle.Pickler, pickle.Unpickler):
        descriptor = base.__dict__.get(name)
        if descriptor is not None and inspect.isgetsetdescriptor(descriptor) and isinstance(obj, base):
            descriptor.__set__(obj, value)
            break
    object.__setattr__(obj, name, value)


class _Pickler(pickle.Pickler):
    """Collects tensor storages into a sidecar list; torch.save's own persistent_id (a method of
    its subclass, or an instance attribute in older torch) handles everything else."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tz_target = _save_target.get()
        self._tz_tensors: List[torch.Tensor] = []
        self._tz_index: dict = {}
        if not any("persistent_id" in vars(c) for c in type(self).__mro__ if issubclass(c, _Pickler)):
            _set_pickler_hook(self, "persistent_id", types.MethodType(_chain_persistent_id(None), self))

    def _tz_persistent_id(self, obj) -> Optional[Tuple]:
        if self._tz_target is _NO_SIDECAR or not torch.is_storage(obj) or not _has_data(obj):
            return None
        tensor = _storage_as_tensor(obj)
        # Storages met again (views, shared tensors) keep their first index.
        key = (tensor.data_ptr(), tensor.dtype, tensor.shape, tensor.layout, tensor.stride())
        index = self._tz_index.setdefault(key, len(self._tz_tensors))
        if index == len(self._tz_tensors):
            self._tz_tensors.append(tensor)
        return (_PID_TAG, _PID_VERSION, "storage", index, getattr(obj, "dtype", None))

    def __setattr__(self, name, value):
        if name == "persistent_id":
            _set_pickler_hook(self, name, types.MethodType(_chain_persistent_id(value), self))
        else:
            super().__setattr__(name, value)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("persistent_id")
        if own is not None and not getattr(own, "_tz_chained", False):
            cls.persistent_id = _chain_persistent_id(own, bound=False)

    def dump(self, obj):
        super().dump(obj)
        tensors, self._tz_tensors, self._tz_index = self._tz_tensors, [], {}
        if tensors:
            _write_sidecar(self._tz_target, tensors)


def _chain_persistent_id(fallback, bound: bool = True):
    """A persistent_id that asks the tensorizer pickler first, then `fallback` (torch's)."""

    def persistent_id(self, obj):
        pid = _Pickler._tz_persistent_id(self, obj)
        if pid is not None or fallback is None:
            return pid
        return fallback(obj) if bound else fallback(self, obj)

    persistent_id._tz_chained = True
    return persistent_id


def _write_sidecar(target, tensors: List[torch.Tensor]) -> None:
    settings = _saving.get() or {}
    kwargs = dict(settings.get("kwargs", {}))
    save_func = settings.get("save_func")
    if save_func is not None:
        save_func(target, tensors, kwargs)
        return
    # As 2.11.1 calls it (so a patched TensorSerializer sees the same calls), except that a failed
    # write is discarded instead of leaving the serializer open.
    serializer = TensorSerializer(target, **kwargs)
    try:
        serializer.write_state_dict(tensors)
    except BaseException as e:
        serializer.__exit__(type(e), e, e.__traceback__)
        raise
    serializer.close()


class _Unpickler(pickle.Unpickler):
    """Rebuilds storages from the sidecar (read on the first tensorizer reference); other
    persistent ids go to torch.load's own persistent_load."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tz_target = _load_target.get()
        self._tz_tensors: Optional[list] = None
        self._tz_storages: dict = {}
        if not any("persistent_load" in vars(c) for c in type(self).__mro__ if issubclass(c, _Unpickler)):
            _set_pickler_hook(self, "persistent_load", types.MethodType(_chain_persistent_load(None), self))

    def _tz_persistent_load(self, pid):
        """The storage for a tensorizer reference, or None for other persistent ids."""
        if self._tz_target is _NO_SIDECAR or not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == _PID_TAG):
            return None
        version, kind = pid[1], pid[2]
        if version > _PID_VERSION:
            raise pickle.UnpicklingError(f"Unsupported TensorizerPickler data version ({version:d})")
        if kind != "storage":
            raise pickle.UnpicklingError(f"Unsupported TensorizerPickler object type ({kind})")
        index, dtype = pid[3:5]
        if (index, dtype) not in self._tz_storages:
            if self._tz_tensors is None:
                self._tz_tensors = _read_sidecar(self._tz_target)
            # An untyped storage is rebuilt as a uint8 TypedStorage, as torch.load does.
            self._tz_storages[index, dtype] = torch.TypedStorage(
                wrap_storage=self._tz_tensors[index].untyped_storage(),
                dtype=torch.uint8 if dtype is None else dtype,
                _internal=True,
            )
        return self._tz_storages[index, dtype]

    def __setattr__(self, name, value):
        if name == "persistent_load":
            _set_pickler_hook(self, name, types.MethodType(_chain_persistent_load(value), self))
        else:
            super().__setattr__(name, value)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("persistent_load")
        if own is not None and not getattr(own, "_tz_chained", False):
            cls.persistent_load = _chain_persistent_load(own, bound=False)

    def load(self):
        try:
            return super().load()
        finally:
            self._tz_tensors = None
            self._tz_storages = {}


def _chain_persistent_load(fallback, bound: bool = True):
    def persistent_load(self, pid):
        storage = _Unpickler._tz_persistent_load(self, pid)
        if storage is not None:
            return storage
        if fallback is None:
            raise pickle.UnpicklingError("unsupported persistent id encountered")
        return fallback(pid) if bound else fallback(self, pid)

    persistent_load._tz_chained = True
    return persistent_load


def _read_sidecar(target):
    settings = _loading.get() or {}
    kwargs = dict(settings.get("kwargs", {}))
    load_func = settings.get("load_func")
    if load_func is not None:
        return list(load_func(target, kwargs))
    with TensorDeserializer(target, **kwargs) as deserializer:
        return deserializer.tree()  # a list: the sidecar's names are [0], [1], ...


def _pickle_module(pickler, unpickler) -> types.ModuleType:
    module = types.ModuleType("tensorizer_pickle")
    module.__getattr__ = lambda name: getattr(pickle, name)
    module.Pickler = pickler
    module.Unpickler = unpickler
    return module


_tensorizer_pickle = _pickle_module(_Pickler, _Unpickler)


# -- the torch.save / torch.load wrappers ----------------------------------------------------------


def _infer_sidecar(f) -> Any:
    """``<name>.tensors`` for a path or a file object with a path-like name, else _NO_SIDECAR."""
    if isinstance(f, (str, bytes, os.PathLike)):
        return os.fsdecode(f) + ".tensors"
    name = getattr(f, "name", None)
    if isinstance(name, (str, bytes, os.PathLike)) and not isinstance(f, io.BytesIO):
        return os.fsdecode(name) + ".tensors"
    logger.warning(
        "Cannot infer a .tensors location from %s; not using the tensorizer backend (set the file_obj"
        " parameter to choose a location instead)", type(f).__name__)
    return _NO_SIDECAR


def _resolve_sidecar(settings: dict, f) -> Any:
    file_obj = settings.get("file_obj")
    if file_obj is None:
        return _infer_sidecar(f)
    if callable(file_obj):
        target = file_obj(f)
        return _NO_SIDECAR if target is None else target
    return file_obj


_ORIG_TORCH_SAVE = torch.save
_ORIG_TORCH_LOAD = torch.load


def _check_pickle_module(pickle_module) -> None:
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError("Tensorizer-based torch serialization is incompatible with using a pickle_module"
                         " other than the default")


@functools.wraps(_ORIG_TORCH_SAVE)
def _save_wrapper(obj, f, pickle_module=pickle, *args, **kwargs):
    settings = _saving.get()
    if settings is None:
        return _ORIG_TORCH_SAVE(obj, f, pickle_module, *args, **kwargs)
    _check_pickle_module(pickle_module)
    target = _resolve_sidecar(settings, f)
    if target is _NO_SIDECAR:
        return _ORIG_TORCH_SAVE(obj, f, pickle, *args, **kwargs)
    token = _save_target.set(target)
    try:
        return _ORIG_TORCH_SAVE(obj, f, _tensorizer_pickle, *args, **kwargs)
    finally:
        _save_target.reset(token)


# torch.load's default pickle_module (None since torch 1.13), 2.11.1's name for it.
_LOAD_WRAPPER_DEFAULT_MODULE: Any = None


@functools.wraps(_ORIG_TORCH_LOAD)
def _load_wrapper(f, map_location=None, pickle_module=_LOAD_WRAPPER_DEFAULT_MODULE, *args, weights_only=None,
                  **kwargs):
    settings = _loading.get()
    if settings is None:
        return _ORIG_TORCH_LOAD(f, map_location, pickle_module, *args, weights_only=weights_only, **kwargs)
    _check_pickle_module(pickle_module)
    target = _resolve_sidecar(settings, f)
    if target is _NO_SIDECAR:
        return _ORIG_TORCH_LOAD(f, map_location, pickle_module, *args, weights_only=weights_only, **kwargs)
    if settings["suppress_weights_only"]:
        weights_only = False
    elif weights_only:
        # Starts with torch's own message, which 2.11.1 let surface (its tests match on it).
        raise RuntimeError(
            "Can not safely load weights when explicit pickle_module is specified: torch.load(weights_only=True)"
            " cannot use tensorizer's storage backend (it needs its own pickle module); pass"
            " suppress_weights_only=True to tensorizer_loading to load with weights_only=False instead")
    token = _load_target.set(target)
    try:
        return _ORIG_TORCH_LOAD(f, map_location, _tensorizer_pickle, *args, weights_only=weights_only, **kwargs)
    finally:
        _load_target.reset(token)


class _Swap:
    """Installs `wrapper` as torch.<name> while any context holds it."""

    def __init__(self, name: str, wrapper):
        self.name, self.wrapper = name, wrapper
        self.lock = threading.Lock()
        self.count = 0
        self.previous = None

    def acquire(self) -> None:
        with self.lock:
            self.count += 1
            if self.count == 1:
                self.previous = getattr(torch, self.name)
                setattr(torch, self.name, self.wrapper)

    def release(self) -> None:
        with self.lock:
            self.count -= 1
            if self.count == 0:
                if getattr(torch, self.name) is self.wrapper:  # leave someone else's later patch alone
                    setattr(torch, self.name, self.previous)
                self.previous = None


_save_swap = _Swap("save", _save_wrapper)
_load_swap = _Swap("load", _load_wrapper)


@contextlib.contextmanager
def tensorizer_saving(file_obj=None, *, save_func: Optional[_SaveFunc] = None, **kwargs):
    """Makes ``torch.save`` in this context store tensor storages with tensorizer.

    Args:
        file_obj: Where the sidecar goes: anything `TensorSerializer` accepts (path, URI, file
            object), or a callable taking ``torch.save``'s `f` and returning one (None: don't use
            tensorizer for that call). Default: `f`'s path plus ``".tensors"``.
        save_func: Optional ``save_func(file_obj, tensors, kwargs)`` replacing the default
            ``TensorSerializer(file_obj, **kwargs).write_state_dict(tensors)``.
        kwargs: Passed to `TensorSerializer` (e.g. ``encryption=``).

    No sidecar is written when nothing has tensor data.
    """
    token = _saving.set({"file_obj": file_obj, "save_func": save_func, "kwargs": kwargs})
    _save_swap.acquire()
    try:
        yield
    finally:
        _save_swap.release()
        _saving.reset(token)


@contextlib.contextmanager
def tensorizer_loading(file_obj=None, *, load_func: Optional[_LoadFunc] = None, suppress_weights_only: bool = False,
                       **kwargs):
    """Makes ``torch.load`` in this context read tensor storages saved by `tensorizer_saving`.

    Args:
        file_obj: Where the sidecar is: anything `TensorDeserializer` accepts, or a callable taking
            ``torch.load``'s `f` and returning one (None: plain ``torch.load``). Default: `f`'s path
            plus ``".tensors"``.
        load_func: Optional ``load_func(file_obj, kwargs) -> Iterable[Tensor]`` replacing the
            default ``TensorDeserializer(file_obj, **kwargs).tree()``.
        suppress_weights_only: Turn ``weights_only=True`` into False instead of raising: the
            tensorizer backend needs a custom pickle module, which ``weights_only`` forbids.
        kwargs: Passed to `TensorDeserializer` (e.g. ``device=``, ``encryption=``).

    Plain ``.pt`` files (without tensorizer references) load normally inside the context; the
    sidecar is opened only when the first tensorizer reference is met.
    """
    token = _loading.set({"file_obj": file_obj, "load_func": load_func,
                          "suppress_weights_only": suppress_weights_only, "kwargs": kwargs})
    _load_swap.acquire()
    try:
        yield
    finally:
        _load_swap.release()
        _loading.reset(token)

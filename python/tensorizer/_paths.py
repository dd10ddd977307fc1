"""Tensor names and structured paths (format/FORMAT.md §5.1): validation, the prefix tree that refuses
conflicting paths when writing, flattening a nested state_dict into paths and rebuilding nested
containers from them when reading.

Private module: ``tensorizer.serialization`` re-exports every name defined here and is their public
home (the public names' ``__module__``); import them from there.
"""

import collections.abc
import types
from typing import Any, Iterable, Iterator, Tuple, Union

import torch

from ._types import _TensorPathComponent


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

"""Dumps the importable surface of whichever `tensorizer` this interpreter imports, as JSON.

Run as a script by test_compat_surface.py, once under the real tensorizer 2.11.1 and once under
ours, so the two dumps can be compared name by name (a process each: both packages import as
``tensorizer``). Usage: ``python surface.py [OUT.json]`` (stdout without OUT).

The dump holds:
* ``modules``: for every module of the package (found by walking the package directory), every
  attribute that is not a dunder and not bound by an import from outside the package, with its kind
  (module / class / function / constant), the signature of callables (parameter names, kinds
  and default reprs, no annotations: those differ in spelling, not meaning), and for classes
  their members (same record, one level deep).
* ``errors``: for a table of bad inputs (chosen from the raises in 2.11.1's own source), the
  exception type name, the moment it was raised (call / use / close, or none) and the message.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import io
import json
import os
import pkgutil
import re
import sys
import tempfile

import tensorizer

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_SIMPLE = (bool, int, float, str, bytes, type(None))


# ---------------------------------------------------------------------------------------------
# names


def module_names() -> list:
    """Every module of the package, submodules of subpackages included (the real `_crypt` is one)."""
    names = [tensorizer.__name__]
    for info in pkgutil.walk_packages(tensorizer.__path__, tensorizer.__name__ + "."):
        names.append(info.name)
    return sorted(names)


def _outside_imports(module) -> set:
    """Names the module's top level binds by importing from outside the package (import torch,
    from typing import Optional): the module's own surface excludes them."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):  # an extension module: nothing imported at the Python level
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("tensorizer"):
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and not (node.module or "").startswith("tensorizer"):
                names.update(alias.asname or alias.name for alias in node.names)
    return names


def _default_text(value) -> str:
    if value is inspect.Parameter.empty:
        return ""
    return "=" + _ADDRESS.sub("", repr(value))


def signature_params(obj) -> list | None:
    """[[name, kind, "=default repr" or ""], ...] without annotations (they differ in spelling, not
    meaning); None where Python cannot tell."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return [[p.name, p.kind.name, _default_text(p.default)] for p in sig.parameters.values()]


def _kind(value) -> str:
    if inspect.ismodule(value):
        return "module"
    if inspect.isclass(value):
        return "class"
    if callable(value):
        return "function"
    return "constant"


def record(value) -> dict:
    out = {"kind": _kind(value)}
    if out["kind"] == "module":
        out["target"] = value.__name__
    elif out["kind"] in ("class", "function"):
        out["signature"] = signature_params(value)
        if out["kind"] == "class":
            out["defined_in"] = getattr(value, "__module__", None)
    else:
        out["type"] = type(value).__name__
        if isinstance(value, _SIMPLE) or (isinstance(value, tuple) and all(isinstance(v, _SIMPLE) for v in value)):
            out["value"] = repr(value)
    return out


def _member_kind(cls, name: str) -> str:
    for klass in cls.__mro__:
        if name in vars(klass):
            raw = vars(klass)[name]
            if isinstance(raw, property):
                return "property"
            if isinstance(raw, classmethod):
                return "classmethod"
            if isinstance(raw, staticmethod):
                return "staticmethod"
            if isinstance(cls, enum.EnumMeta) and isinstance(getattr(cls, name, None), cls):
                return "enum member"
            return "method" if callable(raw) else "attribute"
    return "attribute"  # instance slots and the like


def class_members(cls) -> dict:
    """The class's own members and those of base classes from inside the package (what a base from
    outside, such as io.BufferedIOBase, provides is the same in both packages or not at all)."""
    members = {}
    for klass in cls.__mro__:
        if not (getattr(klass, "__module__", None) or "").startswith("tensorizer"):
            continue
        for name in vars(klass):
            if name in members or (name.startswith("__") and name.endswith("__")):
                continue
            if name.startswith("_abc_") or name in ("_member_map_", "_value2member_map_", "_member_names_"):
                continue
            kind = _member_kind(cls, name)
            entry = {"kind": kind}
            if kind in ("method", "classmethod", "staticmethod"):
                entry["signature"] = signature_params(getattr(cls, name))
            members[name] = entry
    return members


def module_surface(name: str) -> dict:
    try:
        module = importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - an unimportable module is itself a difference to report
        return {"__import_error__": f"{type(e).__name__}: {e}"}
    skip = _outside_imports(module)
    names = set(dir(module)) | set(vars(module))
    out = {}
    for attr in sorted(names):
        if (attr.startswith("__") and attr.endswith("__")) or attr in skip:
            continue
        try:
            value = getattr(module, attr)
        except Exception as e:  # noqa: BLE001 - e.g. an optional dependency missing
            out[attr] = {"kind": "error", "error": f"{type(e).__name__}: {e}"}
            continue
        if inspect.ismodule(value) and not value.__name__.startswith("tensorizer"):
            continue  # an outside module bound some other way (importlib.import_module)
        out[attr] = record(value)
        if out[attr]["kind"] == "class" and (getattr(value, "__module__", None) or "").startswith("tensorizer"):
            out[attr]["members"] = class_members(value)
            out[attr]["names"] = sorted(dir(value))  # inherited from outside the package included
    return out


# ---------------------------------------------------------------------------------------------
# errors


class _Unseekable(io.BytesIO):
    def seekable(self):
        return False


def _write_tiny(path: str) -> str:
    import torch
    from tensorizer import TensorSerializer

    s = TensorSerializer(path)
    s.write_state_dict({"a": torch.arange(4, dtype=torch.float32), "b": torch.ones(2, 2)})
    s.close()
    return path


def instance_attributes(tmp: str) -> dict:
    """The attribute names a TensorSerializer and a TensorDeserializer set on themselves (user code
    reads some, such as `TensorDeserializer._file_header`); class members are in `modules`."""
    from tensorizer import TensorDeserializer, TensorSerializer

    path = _write_tiny(os.path.join(tmp, "inst.tensors"))
    serializer = TensorSerializer(os.path.join(tmp, "inst2.tensors"))
    deserializer = TensorDeserializer(path, lazy_load=True)
    # "own": what 2.11.1 sets per instance; "all": everything reachable (a property counts too).
    out = {name: {"own": sorted(a for a in vars(obj) if not a.startswith("__")),
                  "all": sorted(a for a in dir(obj) if not a.startswith("__"))}
           for name, obj in (("TensorSerializer", serializer), ("TensorDeserializer", deserializer))}
    serializer.close()
    deserializer.close()
    return out


def error_cases(tmp: str) -> dict:
    """name -> (make, use): `make()` is the call under test; `use(obj)`, when given, is the first
    use after it. Each is chosen from a raise in 2.11.1's source."""
    import torch
    from tensorizer import DecryptionParams, EncryptionParams, TensorDeserializer, TensorSerializer, TensorType
    from tensorizer import stream_io
    from tensorizer import torch_compat, utils

    good = os.path.join(tmp, "good.tensors")
    garbage = os.path.join(tmp, "garbage.tensors")
    with open(garbage, "wb") as f:
        f.write(b"not a tensorizer file at all" * 4)
    missing = os.path.join(tmp, "missing", "x.tensors")
    load = lambda **kw: lambda: TensorDeserializer(_write_tiny(good), **kw)  # noqa: E731

    def save_with_pickle_module():
        with torch_compat.tensorizer_saving(os.path.join(tmp, "tc.tensors")):
            torch.save({"x": torch.ones(2)}, os.path.join(tmp, "tc.pt"), pickle_module=json)

    return {
        "open_stream s3 text mode": (lambda: stream_io.open_stream("s3://b/k", mode="r"), None),
        "open_stream http write": (lambda: stream_io.open_stream("http://127.0.0.1:9/y", mode="wb"), None),
        "open_stream https append": (lambda: stream_io.open_stream("https://127.0.0.1:9/y", mode="ab"), None),
        "open_stream redis write": (lambda: stream_io.open_stream("redis://127.0.0.1:9/y", mode="wb"), None),
        "open_stream local text mode": (lambda: stream_io.open_stream(os.path.join(tmp, "t.bin"), "w"), None),
        "open_stream local missing": (lambda: stream_io.open_stream(missing), None),
        "CAInfo none given": (lambda: stream_io.CAInfo(), None),
        "CAInfo two given": (lambda: stream_io.CAInfo(cacert=good, allow_untrusted=True), None),
        "CAInfo bad cacert": (lambda: stream_io.CAInfo(cacert=missing), None),
        "CAInfo bad capath": (lambda: stream_io.CAInfo(capath=missing), None),
        "CURLStreamFile negative begin": (lambda: stream_io.CURLStreamFile("http://127.0.0.1:9/x", begin=-1), None),
        "_parse_s3_uri not s3": (lambda: stream_io._parse_s3_uri("http://b/k"), None),
        "TensorDeserializer missing file": (lambda: TensorDeserializer(missing), None),
        "TensorDeserializer not a tensorizer file": (lambda: TensorDeserializer(garbage), None),
        "TensorDeserializer num_readers=0": (load(num_readers=0), None),
        "TensorDeserializer num_readers str": (load(num_readers="2"), None),
        "TensorDeserializer encryption str": (load(encryption="key"), None),
        "TensorDeserializer empty DecryptionParams": (load(encryption=DecryptionParams()), None),
        "TensorDeserializer write-only file": (lambda: TensorDeserializer(open(os.path.join(tmp, "w.bin"), "wb")),
                                               None),
        "TensorDeserializer missing key": (load(), lambda d: d["nope"]),
        "TensorDeserializer tree of a tensor": (load(), lambda d: d.tree(("a",))),
        "TensorDeserializer read after close": (load(lazy_load=True), lambda d: (d.close(), d["a"])),
        "TensorSerializer read-only file": (lambda: TensorSerializer(open(_write_tiny(good), "rb")), None),
        "TensorSerializer text file": (lambda: TensorSerializer(open(os.path.join(tmp, "t.txt"), "w+")), None),
        "TensorSerializer unseekable": (lambda: TensorSerializer(_Unseekable()), None),
        "TensorSerializer limit_cpu_concurrency=0": (
            lambda: TensorSerializer(os.path.join(tmp, "l.tensors"), limit_cpu_concurrency=0), None),
        "TensorSerializer limit_cpu_concurrency str": (
            lambda: TensorSerializer(os.path.join(tmp, "l.tensors"), limit_cpu_concurrency="2"), None),
        "TensorSerializer encryption str": (
            lambda: TensorSerializer(os.path.join(tmp, "e.tensors"), encryption="key"), None),
        "TensorSerializer write_tensor not a tensor": (
            lambda: TensorSerializer(os.path.join(tmp, "d.tensors")),
            lambda s: s.write_tensor(0, "x", TensorType.TENSOR, [1.0])),
        "EncryptionParams str key": (lambda: EncryptionParams("k" * 32), None),
        "EncryptionParams short key": (lambda: EncryptionParams(b"short"), None),
        "EncryptionParams.from_string empty": (lambda: EncryptionParams.from_string(""), None),
        "EncryptionParams.from_string bad opslimit": (
            lambda: EncryptionParams.from_string("pw", opslimit=EncryptionParams.MemLimit.MIN), None),
        "DecryptionParams.from_string empty": (lambda: DecryptionParams.from_string(""), None),
        "DecryptionParams.from_string int": (lambda: DecryptionParams.from_string(5), None),
        "DecryptionParams.from_key empty": (lambda: DecryptionParams.from_key(b""), None),
        "DecryptionParams.from_key short": (lambda: DecryptionParams.from_key(b"short"), None),
        "torch_compat foreign pickle_module": (save_with_pickle_module, None),
        "utils.no_init_or_tensor not callable": (lambda: utils.no_init_or_tensor(5), None),
        "utils.convert_bytes str": (lambda: utils.convert_bytes("x"), None),
    }


def _outcome(moment: str, e: BaseException) -> dict:
    message = re.sub(re.escape(tempfile.gettempdir()) + r"/tmp\w+", "<tmp>", _ADDRESS.sub("", str(e)))
    return {"moment": moment, "type": type(e).__name__, "message": message}


def run_case(make, use) -> dict:
    try:
        obj = make()
    except Exception as e:  # noqa: BLE001 - recording what was raised is the point
        return _outcome("call", e)
    try:
        if use is not None:
            use(obj)
    except Exception as e:  # noqa: BLE001
        return _outcome("use", e)
    finally:
        close = getattr(obj, "close", None)
    try:
        if callable(close):
            close()
    except Exception as e:  # noqa: BLE001
        return _outcome("close", e)
    return {"moment": "none", "type": None, "message": None}


def errors_and_instances() -> tuple:
    with tempfile.TemporaryDirectory() as tmp:
        errors = {name: run_case(make, use) for name, (make, use) in error_cases(tmp).items()}
        return errors, instance_attributes(tmp)


def main(argv) -> None:
    import warnings

    warnings.simplefilter("ignore")  # deprecations and the like are not the surface
    dump = {
        "package": tensorizer.__file__,
        "version": getattr(tensorizer, "__version__", None),
        "modules": {name: module_surface(name) for name in module_names()},
    }
    dump["errors"], dump["instances"] = errors_and_instances()
    text = json.dumps(dump, indent=1, sort_keys=True)
    if len(argv) > 1:
        with open(argv[1], "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main(sys.argv)

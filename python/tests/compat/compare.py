"""Compares two surface dumps (surface.py) of the real tensorizer 2.11.1 and of ours.

`differences(real, ours)` maps a key to what differs, where the key is
* ``(module, "<module>")``: the module is missing from ours (or fails to import);
* ``(module, name)``: a module attribute is missing, or its kind / signature / value differs;
* ``(module, "Class.member")``: a class member is missing or its kind / signature differs;
* ``(Class, "instance.attr")``: an attribute a constructed TensorSerializer / TensorDeserializer
  has in 2.11.1 is missing from ours;
* ``("errors", case)``: a bad input raised another type, at another moment, or with another message.
Names only ours has are not differences (a drop-in may offer more); `extras` lists them.
Also runnable: ``python compare.py REAL.json OURS.json`` prints the differences.
"""

from __future__ import annotations

import json
import sys


def signature_text(params) -> str:
    if params is None:
        return "(?)"
    prefix = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}
    return "(" + ", ".join(f"{prefix.get(kind, '')}{name}{default}" + ("/kw" if kind == "KEYWORD_ONLY" else "")
                           for name, kind, default in params) + ")"


def _signature_diff(real, ours) -> str | None:
    """None when every call 2.11.1's signature accepts means the same to ours: its parameters in the
    same order, kinds and defaults, followed only by optional keyword-only extras (and ours may
    make a required parameter optional: old calls still bind)."""
    if real == ours:
        return None
    if real is None or ours is None or len(ours) < len(real):
        return f"2.11.1 {signature_text(real)}, ours {signature_text(ours)}"
    for (name, kind, default), (o_name, o_kind, o_default) in zip(real, ours):
        if (name, kind) != (o_name, o_kind) or (default and default != o_default):
            return f"2.11.1 {signature_text(real)}, ours {signature_text(ours)}"
    for name, kind, default in ours[len(real):]:
        if kind != "KEYWORD_ONLY" or not default:
            return f"2.11.1 {signature_text(real)}, ours {signature_text(ours)}"
    return None


def _record_diff(real: dict, ours: dict) -> str | None:
    for field in ("kind", "target", "type", "value"):  # not defined_in: where is not what
        if field in real and real.get(field) != ours.get(field):
            return f"{field}: 2.11.1 {real.get(field)!r}, ours {ours.get(field)!r}"
    if "signature" in real:
        diff = _signature_diff(real["signature"], ours.get("signature"))
        return diff and f"signature: {diff}"
    return None


def _class_diffs(module: str, name: str, real: dict, ours: dict) -> dict:
    out = {}
    theirs, mine = real.get("members", {}), ours.get("members", {})
    for member, entry in theirs.items():
        key = (module, f"{name}.{member}")
        if member not in mine:
            if member not in ours.get("names", ()):  # else inherited (e.g. io's closed, readline)
                out[key] = "missing"
        else:
            diff = _record_diff(entry, mine[member])
            if diff:
                out[key] = diff
    return out


def _module_diffs(module: str, real: dict, ours: dict | None) -> dict:
    if ours is None or "__import_error__" in ours:
        why = "missing" if ours is None else ours["__import_error__"]
        return {(module, "<module>"): why}
    out = {}
    for name, entry in real.items():
        if name not in ours:
            out[(module, name)] = "missing"
            continue
        diff = _record_diff(entry, ours[name])
        if diff:
            out[(module, name)] = diff
        elif entry["kind"] == "class" and entry.get("defined_in") == module:  # once, where 2.11.1 defines it
            out.update(_class_diffs(module, name, entry, ours[name]))
    return out


def _error_diff(real: dict, ours: dict | None) -> str | None:
    if ours is None:
        return "case not run by ours"
    got = (ours["type"], ours["moment"], ours["message"])
    want = (real["type"], real["moment"], real["message"])
    if got != want:
        return f"2.11.1 {want[0]} at {want[1]} {want[2]!r}; ours {got[0]} at {got[1]} {got[2]!r}"
    return None


def differences(real: dict, ours: dict) -> dict:
    out = {}
    for module, names in real["modules"].items():
        out.update(_module_diffs(module, names, ours["modules"].get(module)))
    for cls, attrs in real["instances"].items():
        mine = set(ours["instances"].get(cls, {}).get("all", ()))
        out.update({(cls, f"instance.{a}"): "missing" for a in attrs["own"] if a not in mine})
    for case, outcome in real["errors"].items():
        diff = _error_diff(outcome, ours["errors"].get(case))
        if diff:
            out[("errors", case)] = diff
    return out


def extras(real: dict, ours: dict) -> list:
    """(module, name) pairs only ours has (informational)."""
    out = []
    for module, names in ours["modules"].items():
        theirs = real["modules"].get(module, {})
        out += [(module, name) for name in names if name not in theirs and name != "__import_error__"]
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as a, open(sys.argv[2]) as b:
        diffs = differences(json.load(a), json.load(b))
    for key, what in sorted(diffs.items()):
        print(f"{key[0]:40} {key[1]:45} {what}")
    print(f"{len(diffs)} differences")

"""Checks that our CLI reads files written by the real tensorizer 2.11.1 exactly as the manifests say.

usage: check_ours_read.py CLI [REFDIR]

CLI is our `tensorizer` binary. REFDIR holds the output of make_reference.py; without it the references
are written into a temporary directory first. For every reference file: `inspect --json` must give the
manifest's names, dtypes, shapes, types, module indices and a byte layout whose data ranges hash to the
manifest's sha256; `hash --json` must give the manifest's sha256 per tensor; `verify` and
`load --verify --json` must succeed. Corrupt, truncated, foreign and missing files must fail cleanly
(exit > 0, no signal, no hang).
Exits 77 when torch/tensorizer cannot be imported, 1 on any mismatch.
"""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_reference  # noqa: E402
import tzcross  # noqa: E402


def check_layout(failures, label, got, want, data, expected_header_offset):
    """Offsets must chain back to back from the end of the metadata, and each data range must hash right."""
    header_offset, data_offset = got.get("header_offset"), got.get("data_offset")
    data_length = got.get("data_length")
    if not failures.check(all(isinstance(v, int) for v in (header_offset, data_offset, data_length)),
                          f"{label}: offsets missing or not integers: {got}"):
        return
    failures.check(header_offset == expected_header_offset,
                   f"{label}: header_offset {header_offset}, expected {expected_header_offset}")
    failures.check(header_offset < data_offset <= len(data) - tzcross.END_MARKER_BYTES - data_length,
                   f"{label}: data_offset {data_offset} (header at {header_offset}, length {data_length}, "
                   f"file {len(data)} bytes) is out of place")
    if not want["meta"]:
        stored = data[data_offset:data_offset + data_length]
        failures.check(tzcross.sha256_hex(stored) == want["sha256"],
                       f"{label}: bytes [{data_offset}, +{data_length}) of the file do not hash to the manifest")


def check_inspect(failures, cli, manifest):
    """Returns our inspect output (or None) after comparing it with the manifest field by field."""
    where = manifest["file"]
    info = tzcross.cli_json(failures, cli, "inspect", "--json", manifest["path"])
    if info is None:
        return None
    failures.check(info.get("version") == manifest["data_version"],
                   f"{where}: version {info.get('version')!r}, expected {manifest['data_version']}")
    failures.check(info.get("flags") == manifest["flags"],
                   f"{where}: flags {info.get('flags')!r}, expected {manifest['flags']}")
    tensors = info.get("tensors", [])
    if not failures.check(len(tensors) == len(manifest["tensors"]),
                          f"{where}: {len(tensors)} tensors, expected {len(manifest['tensors'])}"):
        return info
    with open(manifest["path"], "rb") as stream:
        data = stream.read()
    next_header_offset = tzcross.FIRST_HEADER_OFFSET
    for index, (got, want) in enumerate(zip(tensors, manifest["tensors"])):
        label = f"{where}: tensor {index} {tzcross.name_key(want['name'])}"
        for field in ("name", "dtype", "shape", "type", "module_index", "data_length"):
            failures.check(got.get(field) == want[field],
                           f"{label}: {field} is {got.get(field)!r}, expected {want[field]!r}")
        check_layout(failures, label, got, want, data, next_header_offset)
        next_header_offset = (got.get("data_offset") or 0) + (got.get("data_length") or 0)
    failures.check(next_header_offset == len(data) - tzcross.END_MARKER_BYTES,
                   f"{where}: the last tensor ends at {next_header_offset}, the end marker is at "
                   f"{len(data) - tzcross.END_MARKER_BYTES}")
    return info


def check_hash(failures, cli, manifest):
    where = manifest["file"]
    result = tzcross.cli_json(failures, cli, "hash", "--json", manifest["path"])
    if result is None:
        return
    got = {tzcross.name_key(t.get("name")): t.get("sha256") for t in result.get("tensors", [])}
    want = {tzcross.name_key(t["name"]): t["sha256"] for t in manifest["tensors"]}
    failures.check(set(got) == set(want),
                   f"{where}: hash names differ: extra {sorted(set(got) - set(want))}, "
                   f"missing {sorted(set(want) - set(got))}")
    for key in sorted(set(got) & set(want)):
        failures.check(got[key] == want[key], f"{where}: tensor {key}: sha256 {got[key]}, expected {want[key]}")


def check_load(failures, cli, manifest):
    """`load --verify --json` must load every tensor; bytes may count meta tensors as data or not."""
    where = manifest["file"]
    report = tzcross.cli_json(failures, cli, "load", "--verify", "--json", manifest["path"])
    if report is None:
        return
    tensors = manifest["tensors"]
    failures.check(report.get("tensors") == len(tensors),
                   f"{where}: load reports {report.get('tensors')!r} tensors, expected {len(tensors)}")
    stored_bytes = sum(t["data_length"] for t in tensors)
    materialized_bytes = sum(t["nbytes"] for t in tensors)  # meta tensors count as their zeros
    failures.check(report.get("bytes") in (stored_bytes, materialized_bytes),
                   f"{where}: load reports {report.get('bytes')!r} bytes, expected {stored_bytes}")


def check_succeeds(failures, cli, *args):
    result = tzcross.run_cli(cli, *args)
    failures.check(result.returncode == 0,
                   f"`tensorizer {' '.join(map(str, args))}` exited {result.returncode}: "
                   f"{result.stderr.strip()[-2000:]}")


def check_fails_cleanly(failures, cli, what, *args, must_mention=None):
    """A bad input must give exit > 0: not 0, not a signal (crash), not a timeout (hang)."""
    result = tzcross.run_cli(cli, *args, timeout_s=60)
    shown = f"`tensorizer {' '.join(map(str, args))}` on {what}"
    failures.check(0 < result.returncode != 124, f"{shown}: exit {result.returncode}, expected a clean failure")
    if must_mention is not None and result.returncode > 0:
        failures.check(must_mention in result.stdout + result.stderr,
                       f"{shown}: the message does not name {must_mention!r}: {result.stderr.strip()[-500:]!r}")


def write_variant(path, data, edit):
    variant = bytearray(data)
    edit(variant)
    with open(path, "wb") as stream:
        stream.write(variant)
    return path


def check_bad_inputs(failures, cli, manifest, info, work_dir):
    """Flips a data byte, cuts the file, breaks the magic: every command must fail, naming what broke."""
    big = next((t for t in info.get("tensors", []) if t.get("name") == "f32.big"), None)
    if not failures.check(big is not None, f"{manifest['file']}: inspect lists no f32.big"):
        return
    with open(manifest["path"], "rb") as stream:
        data = stream.read()
    middle = big["data_offset"] + big["data_length"] // 2

    def flip(b):
        b[middle] ^= 0x40

    corrupt = write_variant(os.path.join(work_dir, "corrupt.tensors"), data, flip)
    check_fails_cleanly(failures, cli, "a flipped data byte", "verify", corrupt, must_mention="f32.big")
    check_fails_cleanly(failures, cli, "a flipped data byte", "hash", "--json", corrupt)
    check_fails_cleanly(failures, cli, "a flipped data byte", "load", "--verify", corrupt)
    truncated = os.path.join(work_dir, "truncated.tensors")
    with open(truncated, "wb") as stream:
        stream.write(data[:middle])
    check_fails_cleanly(failures, cli, "a truncated file", "verify", truncated)
    check_fails_cleanly(failures, cli, "a truncated file", "hash", "--json", truncated)
    check_fails_cleanly(failures, cli, "a truncated file", "load", truncated)

    def unmagic(b):
        b[0:5] = b"|TZX|"

    foreign = write_variant(os.path.join(work_dir, "foreign.tensors"), data, unmagic)
    check_fails_cleanly(failures, cli, "a bad magic", "inspect", "--json", foreign)
    check_fails_cleanly(failures, cli, "a bad magic", "verify", foreign)
    missing = os.path.join(work_dir, "does-not-exist.tensors")
    check_fails_cleanly(failures, cli, "a missing file", "inspect", "--json", missing, must_mention=missing)


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    cli = os.path.abspath(sys.argv[1])
    tzcross.import_peers()
    failures = tzcross.Failures()
    work_dir = tempfile.mkdtemp(prefix="tz-cross-ours-")
    try:
        if len(sys.argv) == 3:
            manifests = tzcross.load_manifests(sys.argv[2])
        else:
            manifests = make_reference.make_all(os.path.join(work_dir, "refs"))
        failures.check(len(manifests) > 0, "no reference manifests found")
        for manifest in manifests:
            info = check_inspect(failures, cli, manifest)
            check_hash(failures, cli, manifest)
            check_succeeds(failures, cli, "verify", manifest["path"])
            check_load(failures, cli, manifest)
            if manifest["file"] == "plain.tensors" and info is not None:
                check_bad_inputs(failures, cli, manifest, info, work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    failures.finish("check_ours_read")


if __name__ == "__main__":
    sys.exit(main())

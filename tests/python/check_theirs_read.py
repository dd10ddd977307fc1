"""Checks that the real tensorizer 2.11.1 reads files written by our CLI, with hash verification on.

usage: check_theirs_read.py CLI [REFDIR]

For every reference file (make_reference.py; written into a temporary directory when REFDIR is not
given): `tensorizer copy REF OURS` must produce a file byte-identical to REF, and the real tensorizer
must read OURS with verify_hash=True, both tensor by tensor (read_tensors: name, type, module index,
dtype, shape, bytes) and eagerly (the default load), getting exactly what it gets from REF. Then a file
written from scratch by ours (`tensorizer synth --size-mib 4`) must be read by the real tensorizer with
verify_hash=True, and our `hash --json` must agree with the bytes it read.
Exits 77 when torch/tensorizer cannot be imported, 1 on any mismatch.
"""

import os
import shutil
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_reference  # noqa: E402
import tzcross  # noqa: E402

SYNTH_SIZE_MIB = 4


def guarded(failures, what, function, *args):
    """Runs function(*args); an exception (the real reader rejecting our file) becomes a failure."""
    try:
        return function(*args)
    except Exception as error:  # the reader's whole error surface counts as "cannot read it"
        failures.check(False, f"{what}: {type(error).__name__}: {error}")
        traceback.print_exc()
        return None


def same_tensor(failures, where, got, want):
    failures.check(got.dtype == want.dtype, f"{where}: dtype {got.dtype}, expected {want.dtype}")
    failures.check(got.shape == want.shape, f"{where}: shape {list(got.shape)}, expected {list(want.shape)}")
    # Bytes, not torch.equal: NaN payloads and -0.0 must survive too, and some dtypes lack ==.
    failures.check(tzcross.tensor_bytes(got) == tzcross.tensor_bytes(want), f"{where}: data differs")


def compare_entries(failures, label, got, want):
    if not failures.check(len(got) == len(want), f"{label}: {len(got)} tensors, expected {len(want)}"):
        return
    for index, (g, w) in enumerate(zip(got, want)):
        where = f"{label}: tensor {index} {tzcross.name_key(w['name'])}"
        for field in ("name", "type", "module_index"):
            failures.check(g[field] == w[field], f"{where}: {field} {g[field]!r}, expected {w[field]!r}")
        same_tensor(failures, where, g["tensor"], w["tensor"])


def compare_eager(failures, label, got, want_entries):
    want = {tzcross.name_key(e["name"]): e["tensor"] for e in want_entries}
    failures.check(set(got) == set(want), f"{label}: eager load names {sorted(got)}, expected {sorted(want)}")
    for key in sorted(set(got) & set(want)):
        same_tensor(failures, f"{label}: eager {key}", got[key], want[key])


def check_identical(failures, label, ours_path, reference_path):
    with open(ours_path, "rb") as a, open(reference_path, "rb") as b:
        ours, reference = a.read(), b.read()
    if ours == reference:
        failures.check(True, "")
        return
    first = next((i for i, (x, y) in enumerate(zip(ours, reference)) if x != y), min(len(ours), len(reference)))
    failures.check(False, f"{label}: our copy is not byte-identical: {len(ours)} vs {len(reference)} bytes, "
                          f"first difference at offset {first}")


def check_copy(failures, cli, manifest, work_dir):
    label = f"copy of {manifest['file']}"
    ours = os.path.join(work_dir, "ours-" + manifest["file"])
    result = tzcross.run_cli(cli, "copy", manifest["path"], ours)
    if not failures.check(result.returncode == 0,
                          f"{label}: `tensorizer copy` exited {result.returncode}: {result.stderr.strip()[-2000:]}"):
        return
    check_identical(failures, label, ours, manifest["path"])
    want = guarded(failures, f"{label}: real tensorizer reading the reference", tzcross.read_real, manifest["path"])
    got = guarded(failures, f"{label}: real tensorizer reading our copy", tzcross.read_real, ours)
    if want is not None and got is not None:
        compare_entries(failures, label, got, want)
        eager = guarded(failures, f"{label}: real eager load of our copy", tzcross.read_real_eager, ours)
        if eager is not None:
            compare_eager(failures, label, eager, want)


def check_synth(failures, cli, work_dir):
    """A file our writer made from scratch: the real reader must accept it and agree with our hashes."""
    label = f"synth --size-mib {SYNTH_SIZE_MIB}"
    ours = os.path.join(work_dir, "synth.tensors")
    result = tzcross.run_cli(cli, "synth", ours, "--size-mib", SYNTH_SIZE_MIB)
    if not failures.check(result.returncode == 0,
                          f"{label}: exited {result.returncode}: {result.stderr.strip()[-2000:]}"):
        return
    entries = guarded(failures, f"{label}: real tensorizer reading it", tzcross.read_real, ours)
    if entries is None:
        return
    total_bytes = sum(len(tzcross.tensor_bytes(e["tensor"])) for e in entries)
    failures.check(len(entries) > 0, f"{label}: the real tensorizer found no tensors")
    failures.check(SYNTH_SIZE_MIB * 3 // 4 <= total_bytes / 2**20 <= SYNTH_SIZE_MIB * 5 // 4,
                   f"{label}: {total_bytes} bytes of tensors, expected about {SYNTH_SIZE_MIB} MiB")
    guarded(failures, f"{label}: real eager load", tzcross.read_real_eager, ours)
    hashes = tzcross.cli_json(failures, cli, "hash", "--json", ours)
    if hashes is None:
        return
    ours_sha = {tzcross.name_key(t.get("name")): t.get("sha256") for t in hashes.get("tensors", [])}
    theirs_sha = {tzcross.name_key(e["name"]): tzcross.sha256_hex(tzcross.tensor_bytes(e["tensor"]))
                  for e in entries}
    failures.check(ours_sha == theirs_sha,
                   f"{label}: our hash --json disagrees with the bytes the real tensorizer read")


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    cli = os.path.abspath(sys.argv[1])
    tzcross.import_peers()
    failures = tzcross.Failures()
    work_dir = tempfile.mkdtemp(prefix="tz-cross-theirs-")
    try:
        if len(sys.argv) == 3:
            manifests = tzcross.load_manifests(sys.argv[2])
        else:
            manifests = make_reference.make_all(os.path.join(work_dir, "refs"))
        failures.check(len(manifests) > 0, "no reference manifests found")
        for manifest in manifests:
            check_copy(failures, cli, manifest, work_dir)
        check_synth(failures, cli, work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    failures.finish("check_theirs_read")


if __name__ == "__main__":
    sys.exit(main())

"""Cross test of our CLI against the real tensorizer 2.12.1 on data version 5 (dimensions >= 2^32).

usage: check_2121_cross.py CLI   (run under the python of the 2.12.1 venv that scripts/setup.sh makes)

tensorizer 2.12.1 writes the v5 cases of tests/vectors/cases_2121.py, plain and encrypted. Our CLI must
inspect, hash and verify them as written; `copy` and a safetensors round trip (`convert` both ways)
must give the plain file back byte for byte; and 2.12.1 must read, with verify_hash=True, every v5 file
our CLI writes: the copies, a re-encrypted copy, the plain file encrypted by ours (zero-size long
tensors included, which 2.12.1 cannot encrypt itself) and the encrypted one decrypted by ours.
Exits 77 when torch or tensorizer 2.12.1 cannot be imported, 1 on any mismatch.
"""

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "vectors"))
os.environ.setdefault("TZ_PEER_TENSORIZER", "2.12.1")
import tzcross  # noqa: E402


def write_case(tmp, case):
    """The case's file as tensorizer 2.12.1 writes it."""
    from tensorizer import EncryptionParams, TensorSerializer

    path = os.path.join(tmp, f"{case.name}.tensors")
    serializer = TensorSerializer(path, encryption=EncryptionParams(case.key) if case.key else None)
    case.write(serializer)
    serializer.close()
    return path


def read_bytes(path):
    with open(path, "rb") as stream:
        return stream.read()


def check_inspect(f, cli, path, case, flags, *key_args):
    """`inspect --json`: version 5, the flags, and every tensor's name, dtype and shape."""
    got = tzcross.cli_json(f, cli, "inspect", "--json", *key_args, path)
    if got is None:
        return
    where = os.path.basename(path)
    f.check((got["version"], got["flags"]) == (5, flags),
            f"{where}: inspect says version {got['version']} flags {got['flags']}, expected 5 and {flags}")
    want = [(s.path[0], tzcross.dtype_name(s.tensor), list(s.tensor.shape)) for s in case.specs]
    have = [(t["name"], t["dtype"], t["shape"]) for t in got["tensors"]]
    f.check(have == want, f"{where}: inspect lists {have}, expected {want}")


def check_hash(f, cli, path, case, *key_args):
    """`hash --json` (verifying every stored hash) gives the sha256 of each source tensor's bytes."""
    got = tzcross.cli_json(f, cli, "hash", "--json", *key_args, path)
    if got is None:
        return
    have = {t["name"]: t["sha256"] for t in got["tensors"]}
    for spec in case.specs:
        name = spec.path[0]
        f.check(have.get(name) == tzcross.sha256_hex(tzcross.tensor_bytes(spec.tensor)),
                f"{os.path.basename(path)}: ours hashed '{name}' as {have.get(name)}")


def check_real_reads(f, path, case, key=None):
    """tensorizer 2.12.1 reads our file, verified, with the case's names, dtypes, shapes and bytes."""
    from tensorizer import DecryptionParams

    where = os.path.basename(path)
    kwargs = {"encryption": DecryptionParams.from_key(key)} if key else {}
    try:
        entries = tzcross.read_real(path, **kwargs)
    except Exception as error:  # noqa: BLE001 - any failure of the peer to read ours is the finding
        f.check(False, f"{where}: tensorizer 2.12.1 cannot read it: {type(error).__name__}: {error}")
        return
    if not f.check(len(entries) == len(case.specs), f"{where}: 2.12.1 read {len(entries)} tensors"):
        return
    for entry, spec in zip(entries, case.specs):
        got, want = entry["tensor"], spec.tensor
        f.check((entry["name"], got.dtype, list(got.shape)) == (spec.path[0], want.dtype, list(want.shape)),
                f"{where}: 2.12.1 read {entry['name']!r} {got.dtype} {list(got.shape)}")
        f.check(tzcross.tensor_bytes(got) == tzcross.tensor_bytes(want), f"{where}: 2.12.1 read other bytes "
                                                                           f"for {entry['name']!r}")


def check_plain(f, cli, tmp, case):
    ref = write_case(tmp, case)
    check_inspect(f, cli, ref, case, 2)
    check_hash(f, cli, ref, case)
    result = tzcross.run_cli(cli, "verify", ref)
    f.check(result.returncode == 0, f"verify {case.name}: {result.stderr.strip()}")
    ours = os.path.join(tmp, "ours_copy.tensors")
    result = tzcross.run_cli(cli, "copy", ref, ours)
    if f.check(result.returncode == 0, f"copy {case.name}: {result.stderr.strip()}"):
        f.check(read_bytes(ours) == read_bytes(ref), f"{case.name}: `copy` is not byte-identical to 2.12.1's file")
        check_real_reads(f, ours, case)
    st, back = os.path.join(tmp, "round.safetensors"), os.path.join(tmp, "round.tensors")
    for args in (("convert", ref, st), ("convert", st, back)):
        result = tzcross.run_cli(cli, *args)
        f.check(result.returncode == 0, f"{' '.join(args)}: {result.stderr.strip()}")
    if os.path.exists(back):
        f.check(read_bytes(back) == read_bytes(ref), f"{case.name}: .tensors -> safetensors -> .tensors differs")
        check_real_reads(f, back, case)
    return ref


def check_encrypted(f, cli, tmp, case, plain_case, plain_ref):
    key_file = os.path.join(tmp, "key")
    with open(key_file, "wb") as stream:
        stream.write(case.key)
    ref = write_case(tmp, case)
    check_inspect(f, cli, ref, case, 3, "--decrypt-key-file", key_file)
    check_hash(f, cli, ref, case, "--decrypt-key-file", key_file)
    runs = {"reencrypted": (case, ("--decrypt-key-file", key_file, "--encrypt-key-file", key_file), ref, 3),
            "decrypted": (case, ("--decrypt-key-file", key_file), ref, 2),
            "plain_encrypted": (plain_case, ("--encrypt-key-file", key_file), plain_ref, 3)}
    for label, (source_case, args, source, flags) in runs.items():
        out = os.path.join(tmp, f"{label}.tensors")
        result = tzcross.run_cli(cli, "copy", *args, source, out)
        if not f.check(result.returncode == 0, f"copy {label}: {result.stderr.strip()}"):
            continue
        key_args = ("--decrypt-key-file", key_file) if flags == 3 else ()
        check_inspect(f, cli, out, source_case, flags, *key_args)
        check_real_reads(f, out, source_case, case.key if flags == 3 else None)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tzcross.import_peers()
    import cases_2121

    f = tzcross.Failures()
    with tempfile.TemporaryDirectory() as tmp:
        plain_case = cases_2121.long_v5()
        plain_ref = check_plain(f, sys.argv[1], tmp, plain_case)
        check_encrypted(f, sys.argv[1], tmp, cases_2121.long_v5_encrypted(), plain_case, plain_ref)
    f.finish("check_2121_cross")


if __name__ == "__main__":
    sys.exit(main())

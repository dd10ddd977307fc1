"""Encryption cross test: files encrypted by the real tensorizer 2.11.1 are decrypted by our CLI, and
files our CLI encrypts are decrypted by the real tensorizer (exact keys and Argon2id passphrases).

usage: check_encryption_cross.py TENSORIZER_CLI   (exits 77 when torch/tensorizer are missing)
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tzcross  # noqa: E402


def make_tensors():
    import torch

    g = torch.Generator().manual_seed(7)
    return {
        "big.f32": torch.randn(5 * 1024 * 1024 // 4 + 3, generator=g),  # 3 chunks of 2 MiB, odd tail
        "exact.u8": torch.randint(0, 255, (2 * 1024 * 1024,), dtype=torch.uint8, generator=g),  # one full chunk
        "bf16": torch.randn(33, 17, generator=g).to(torch.bfloat16),
        "scalar.i64": torch.tensor(-7, dtype=torch.int64),
        "mask": torch.rand(5, 5, generator=g) > 0.5,
    }


def write_real(path, tensors, encryption):
    from tensorizer import TensorSerializer

    serializer = TensorSerializer(path, encryption=encryption)
    serializer.write_state_dict(tensors)
    serializer.close()


def check_ours_decrypts(f, cli, path, tensors, *decrypt_args):
    hashes = tzcross.cli_json(f, cli, "hash", "--json", *decrypt_args, path)
    if hashes is None:
        return
    got = {h["name"]: h["sha256"] for h in hashes["tensors"]}
    for name, t in tensors.items():
        f.check(got.get(name) == tzcross.sha256_hex(tzcross.tensor_bytes(t)),
                f"{os.path.basename(path)}: ours decrypted '{name}' to the wrong bytes")


def check_real_decrypts(f, path, tensors, decryption):
    from tensorizer import TensorDeserializer
    import torch

    try:
        d = TensorDeserializer(path, device="cpu", verify_hash=True, encryption=decryption)
    except Exception as error:  # noqa: BLE001 - report any failure of the peer as a test failure
        f.check(False, f"{os.path.basename(path)}: the real tensorizer failed to open ours: {error!r}")
        return
    for name, t in tensors.items():
        ok = name in d and d[name].dtype == t.dtype and torch.equal(d[name].detach(), t)
        f.check(ok, f"{os.path.basename(path)}: the real tensorizer read '{name}' differently")
    d.close()


def main():
    tzcross.import_peers()
    from tensorizer import DecryptionParams, EncryptionParams, CryptographyError, TensorDeserializer

    cli = sys.argv[1]
    f = tzcross.Failures()
    tensors = make_tensors()
    key = os.urandom(32)
    with tempfile.TemporaryDirectory() as tmp:
        key_file = os.path.join(tmp, "key.bin")
        with open(key_file, "wb") as out:
            out.write(key)
        pass_file = os.path.join(tmp, "pass.txt")
        with open(pass_file, "w") as out:
            out.write("correct horse battery staple\n")
        min_ops, min_mem = EncryptionParams.OpsLimit.MIN, EncryptionParams.MemLimit.MIN

        # Theirs -> ours.
        theirs_key = os.path.join(tmp, "theirs_key.tensors")
        write_real(theirs_key, tensors, EncryptionParams(key))
        check_ours_decrypts(f, cli, theirs_key, tensors, "--decrypt-key-file", key_file)
        theirs_pass = os.path.join(tmp, "theirs_pass.tensors")
        write_real(theirs_pass, tensors, EncryptionParams.from_string(
            "correct horse battery staple", opslimit=min_ops, memlimit=min_mem))
        check_ours_decrypts(f, cli, theirs_pass, tensors, "--decrypt-passphrase-file", pass_file)
        wrong = tzcross.run_cli(cli, "verify", "--decrypt-key-file", pass_file + ".nokey", theirs_key)
        f.check(wrong.returncode != 0, "ours accepted a missing key file")
        bad_key_file = os.path.join(tmp, "bad.bin")
        with open(bad_key_file, "wb") as out:
            out.write(bytes(32))
        wrong = tzcross.run_cli(cli, "verify", "--decrypt-key-file", bad_key_file, theirs_key)
        f.check(wrong.returncode != 0 and "MAC" in wrong.stderr, f"ours with a wrong key: {wrong.stderr.strip()}")

        # Ours -> theirs: encrypt a plain file written by the real tensorizer.
        # Zero-size tensors too: tensorizer 2.11.1 cannot encrypt them, ours can, and it reads ours.
        import torch
        tensors = dict(tensors, **{"empty.f32": torch.zeros(0, 3), "empty.i8": torch.zeros(2, 0, dtype=torch.int8)})
        plain = os.path.join(tmp, "plain.tensors")
        write_real(plain, tensors, None)
        ours_key = os.path.join(tmp, "ours_key.tensors")
        r = tzcross.run_cli(cli, "copy", "--encrypt-key-file", key_file, plain, ours_key)
        if f.check(r.returncode == 0, f"ours copy --encrypt-key-file failed: {r.stderr.strip()}"):
            check_real_decrypts(f, ours_key, tensors, DecryptionParams.from_key(key))
            try:
                TensorDeserializer(ours_key, device="cpu", encryption=DecryptionParams.from_key(bytes(32)))
                f.check(False, "the real tensorizer opened ours with a wrong key")
            except CryptographyError:
                f.check(True, "")
        ours_pass = os.path.join(tmp, "ours_pass.tensors")
        r = tzcross.run_cli(cli, "copy", "--encrypt-passphrase-file", pass_file, "--kdf-preset", "min", plain, ours_pass)
        if f.check(r.returncode == 0, f"ours copy --encrypt-passphrase-file failed: {r.stderr.strip()}"):
            check_real_decrypts(f, ours_pass, tensors, DecryptionParams.from_string("correct horse battery staple"))
        # Re-encryption with another passphrase, then decryption back to the identical plain file.
        back = os.path.join(tmp, "back.tensors")
        r = tzcross.run_cli(cli, "copy", "--decrypt-passphrase-file", pass_file, ours_pass, back)
        f.check(r.returncode == 0 and open(back, "rb").read() == open(plain, "rb").read(),
                f"decrypting ours back did not give the original plain file: {r.stderr.strip()}")
    f.finish("encryption cross test")


if __name__ == "__main__":
    main()

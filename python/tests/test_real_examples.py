"""The real tensorizer's own example scripts (its GitHub repository's examples/ directory: serialize.py,
deserialize.py, deserialize-simple.py, encryption.py, encrypt_existing.py, hf_serialization.py)
run unchanged against our package, as tests.

The examples are third-party code that is neither on PyPI nor kept in this repository: point
``TZ_REAL_EXAMPLES_DIR`` at a checkout of coreweave/tensorizer's ``examples/`` directory; without it
every test here is skipped with that reason. Each example is copied byte for byte into a
temporary working directory (so its outputs and relative paths land there, and no stray module
beside it can shadow ``tensorizer``) and run as a subprocess: with this venv's interpreter
(``sys.executable``: ``import tensorizer`` is ours) and, for the comparisons, with the real
tensorizer 2.11.1 (``realpeer.REAL_PYTHON``, ``-s``, no PYTHONPATH but the hook below).

Nothing in the examples is edited. What makes them run here, offline, on a CPU:

* **Hugging Face model ids** ("EleutherAI/gpt-j-6B", "EleutherAI/gpt-neo-2.7B"): ``HF_HUB_OFFLINE=1``
  and ``HF_HUB_CACHE`` pointing at a hub cache that the ``hub`` fixture lays out under tmp
  (``models--EleutherAI--gpt-j-6B/{refs/main,refs/float16,snapshots/<rev>/}``, realexamples.py's
  ``build_hub``), holding a tiny
  GPT-J / GPT-Neo of the same architecture (2 layers, width 64, random weights saved in float16
  with ``save_pretrained``) and the tokenizer files of the locally installed all-MiniLM-L6-v2.
  transformers resolves the ids, and serialize.py's ``revision="float16"``, from that cache.
* **S3** (``s3://bucket/gpt-j-6B.tensors`` in serialize.py, deserialize.py, deserialize-simple.py):
  a local radosgw (scripts/servers/rgw.sh) with a bucket named "bucket", and ``HOME`` pointing at a
  temporary home whose ``~/.s3cfg`` (s3cmd's format, which both packages read for keys and
  ``host_base``) names it; its test CA is given through ``SSL_CERT_FILE`` / ``CURL_CA_BUNDLE`` /
  ``AWS_CA_BUNDLE``. The real package uploads with boto3, which needs
  ``AWS_REQUEST_CHECKSUM_CALCULATION=when_required`` for this radosgw. Skips without Ceph.
* **Command-line arguments / environment the examples read**: hf_serialization.py gets the local
  model directory and an output directory as arguments; encrypt_existing.py its key files;
  encryption.py its passphrase from ``SUPER_SECRET_STRONG_PASSWORD``.
* **A ``sitecustomize.py`` on PYTHONPATH** (python/tests/example_site/) that observes and changes
  nothing in tensorizer:
    - ``TZ_EXAMPLE_SEED``: ``torch.manual_seed`` at start-up, so the sampled text that
      deserialize.py prints (``do_sample=True``) is reproducible and can be compared between our
      package and the real one;
    - ``TZ_EXAMPLE_DUMP``: wraps ``transformers.AutoModelForCausalLM.from_pretrained`` /
      ``from_config`` to keep each model the example builds, and at exit saves their parameters
      and buffers (meta tensors marked), so the test checks what the example actually loaded;
    - ``TZ_EXAMPLE_WHICH``: writes ``tensorizer.__file__`` / ``__version__`` at exit, so each run
      proves which package it used;
    - ``TZ_EXAMPLE_CUDA_TO_CPU`` (deserialize-simple.py only, which has no device option and calls
      ``.to("cuda")`` on its input ids unconditionally): maps a "cuda" device in
      ``torch.Tensor.to`` to "cpu" when no GPU is present. deserialize.py needs no such help (it
      picks "cuda" only when available).

What is checked: each run's exit status and its own printed lines; which package it imported;
that the model it loaded (dumped at exit) equals the model it serialized, tensor by tensor; and
against the real 2.11.1 where it runs: serialize.py writes byte-identical objects, deserialize.py /
deserialize-simple.py under the real package read the object ours wrote into the same tensors and
(same seed) print the same sampled text, encrypt_existing.py output of each package is decrypted by
the other. Two examples fail under 2.11.1 itself, and the tests pin that ours fails the same way:
encrypt_existing.py on any file with a floating-point tensor (2.11.1's read_tensors yields those
as Parameters with requires_grad=True and the script calls ``tensor.set_()`` on them), so its
round trips use integer and bool tensors; hf_serialization.py ``--validate`` (it passes
``dtype="float16"``, a string, to TensorDeserializer).
"""

from __future__ import annotations

import pytest
import torch

import realexamples as rx
from realexamples import assert_equal_tensors, example, file_tensors, run_example

PASSPHRASE = "correct horse battery staple"
SEED = "1234"
S3_OBJECT = "gpt-j-6B.tensors"  # s3://bucket/gpt-j-6B.tensors in serialize.py and deserialize*.py


@pytest.fixture(scope="module")
def examples_dir():
    return rx.examples_dir()


@pytest.fixture(scope="module")
def hub(tmp_path_factory, examples_dir):
    return rx.build_hub(tmp_path_factory.mktemp("hf") / "hub")


@pytest.fixture(scope="module")
def rgw(tmp_path_factory, examples_dir):
    with rx.radosgw(tmp_path_factory.mktemp("rgw")) as server:
        yield server


# ---------------------------------------------------------------------------------------------
# serialize.py, deserialize.py, deserialize-simple.py: "EleutherAI/gpt-j-6B" through s3://bucket/


@pytest.fixture(scope="module")
def serialized(examples_dir, hub, rgw, tmp_path_factory):
    """serialize.py run by the real package (when present; its object is kept aside), then by ours
    (its object stays in the bucket for the deserialize examples)."""
    script = example(examples_dir, "serialize.py")
    base = tmp_path_factory.mktemp("serialize")
    real = rx.real_unavailable()
    if not real:
        rx.s3_delete(rgw, S3_OBJECT)
        run = run_example(script, peer="real", cwd=base / "real", hub=hub, rgw=rgw, dump=True)
        real = {"run": run, "file": rx.s3_get(rgw, S3_OBJECT, base / "real.tensors")}
    rx.s3_delete(rgw, S3_OBJECT)
    run = run_example(script, cwd=base / "ours", hub=hub, rgw=rgw, dump=True)
    ours = {"run": run, "file": rx.s3_get(rgw, S3_OBJECT, base / "ours.tensors")}
    return {"ours": ours, "real": real}


def test_serialize_example(serialized, hub):
    """serialize.py with our package: the model it loaded (float16, from the hub cache's "float16"
    revision) is in s3://bucket/gpt-j-6B.tensors, every tensor equal."""
    model = serialized["ours"]["run"].model("from_pretrained")
    assert_equal_tensors(model, hub["EleutherAI/gpt-j-6B"]["tensors"], "the example's model vs the snapshot")
    assert all(t.dtype == torch.float16 for t in hub["EleutherAI/gpt-j-6B"]["tensors"].values())
    assert_equal_tensors(file_tensors(serialized["ours"]["file"]), model, "s3 object vs the example's model")


def test_serialize_example_matches_real(serialized):
    """The same example under tensorizer 2.11.1: the two objects are the same bytes."""
    real = serialized["real"]
    if isinstance(real, str):
        pytest.skip(real)
    ours_file, real_file = serialized["ours"]["file"], real["file"]
    assert_equal_tensors(file_tensors(ours_file), file_tensors(real_file), "ours vs real object")
    assert ours_file.read_bytes() == real_file.read_bytes()  # the same file, byte for byte
    assert_equal_tensors(real["run"].model("from_pretrained"), serialized["ours"]["run"].model("from_pretrained"),
                         "models")


def _run_deserialize(examples_dir, name, hub, rgw, cwd, peer, env=None):
    return run_example(example(examples_dir, name), peer=peer, cwd=cwd, hub=hub, rgw=rgw, dump=True,
                       env={"TZ_EXAMPLE_SEED": SEED, **(env or {})})


def _check_deserialized(run: rx.Run, serialized, with_device_line: bool):
    want = serialized["ours"]["run"].model("from_pretrained")  # the bucket holds what ours wrote
    assert_equal_tensors(run.model("from_config"), want, "deserialized model vs serialized model")
    assert run.line("Deserialized ").endswith("/s")
    assert run.line("Memory usage before: ").startswith("Memory usage before: CPU: ")
    assert run.line("Memory usage after: ")
    assert run.line("Output: ")
    if with_device_line:
        assert run.line("Deserializing to ") == f"Deserializing to {'cuda' if torch.cuda.is_available() else 'cpu'}:"


@pytest.fixture(scope="module")
def deserialized(examples_dir, serialized, hub, rgw, tmp_path_factory):
    return _run_deserialize(examples_dir, "deserialize.py", hub, rgw, tmp_path_factory.mktemp("deserialize"), "ours")


def test_deserialize_example(deserialized, serialized):
    """deserialize.py with our package: loads s3://bucket/gpt-j-6B.tensors lazily into an
    uninitialized model (no_init_or_tensor), every tensor equal to the serialized model's, and
    generates."""
    _check_deserialized(deserialized, serialized, with_device_line=True)


def test_deserialize_example_matches_real(deserialized, examples_dir, serialized, hub, rgw, tmp_path):
    """The real 2.11.1 reading the object our serialize.py wrote: the same tensors, and (same seed)
    the same sampled text."""
    real = _run_deserialize(examples_dir, "deserialize.py", hub, rgw, tmp_path, "real")
    _check_deserialized(real, serialized, with_device_line=True)
    assert_equal_tensors(deserialized.model("from_config"), real.model("from_config"), "ours vs real")
    assert deserialized.line("Output: ") == real.line("Output: ")


CUDA_TO_CPU = {"TZ_EXAMPLE_CUDA_TO_CPU": "1"}


@pytest.fixture(scope="module")
def deserialized_simple(examples_dir, serialized, hub, rgw, tmp_path_factory):
    return _run_deserialize(examples_dir, "deserialize-simple.py", hub, rgw,
                            tmp_path_factory.mktemp("deserialize-simple"), "ours", CUDA_TO_CPU)


def test_deserialize_simple_example(deserialized_simple, serialized):
    """deserialize-simple.py (TensorDeserializer with its default device) with our package. Its
    hard-coded ``.to("cuda")`` is mapped to "cpu" by the sitecustomize hook when there is no GPU:
    the script has no option for it."""
    _check_deserialized(deserialized_simple, serialized, with_device_line=False)


def test_deserialize_simple_example_matches_real(deserialized_simple, examples_dir, serialized, hub, rgw, tmp_path):
    """The same under the real 2.11.1: the same tensors and (same seed) the same sampled text."""
    real = _run_deserialize(examples_dir, "deserialize-simple.py", hub, rgw, tmp_path, "real", CUDA_TO_CPU)
    _check_deserialized(real, serialized, with_device_line=False)
    assert deserialized_simple.line("Output: ") == real.line("Output: ")


# ---------------------------------------------------------------------------------------------
# encryption.py: "EleutherAI/gpt-neo-2.7B", Argon2id key from SUPER_SECRET_STRONG_PASSWORD


@pytest.mark.parametrize("peer", ["ours", "real"])
def test_encryption_example(peer, examples_dir, hub, tmp_path):
    """encryption.py: serializes with EncryptionParams.from_string(passphrase), deserializes with
    DecryptionParams.from_string (plaid_mode=True) into an uninitialized model: every tensor equal
    to the original's, with our package and with the real one."""
    script = example(examples_dir, "encryption.py")
    run = run_example(script, peer=peer, cwd=tmp_path, hub=hub, dump=True,
                      env={"SUPER_SECRET_STRONG_PASSWORD": PASSPHRASE, "TMPDIR": str(tmp_path)})
    original = run.model("from_pretrained")
    assert_equal_tensors(original, hub["EleutherAI/gpt-neo-2.7B"]["tensors"], "the example's model vs the snapshot")
    assert_equal_tensors(run.model("from_config"), original, "decrypted model vs original")
    assert run.line("Serialized and encrypted ").endswith(" MiB/s")
    assert run.line("Deserialized encrypted ").endswith(" MiB/s")
    assert not list(tmp_path.glob("encrypted-tensors*")), "the example removes its temporary file"


# ---------------------------------------------------------------------------------------------
# encrypt_existing.py: add / remove encryption of an existing file (exact, random, pwhash keys)


@pytest.fixture(scope="module")
def plain_tensors(tmp_path_factory):
    """A plain file of assorted integer and bool tensors (module_idx, type, dtypes, shapes: say an
    int8-quantized layer), written by ours. No floating-point tensors: the example calls
    ``tensor.set_()`` on what ``read_tensors`` yields, which fails on those under 2.11.1 too
    (test_encrypt_existing_example_float_tensors)."""
    from tensorizer import TensorType

    torch.manual_seed(5)
    tensors = [
        (0, TensorType.PARAM, "q_proj.weight", torch.randint(-128, 128, (64, 16), dtype=torch.int8)),
        (0, TensorType.BUFFER, "q_proj.zero_point", torch.randint(0, 256, (64,), dtype=torch.uint8)),
        (1, TensorType.BUFFER, "bn.num_batches_tracked", torch.tensor(7)),
        (1, TensorType.STATE_DICT, "ids", torch.arange(12, dtype=torch.int32).reshape(3, 4)),
        (2, TensorType.STATE_DICT, "mask", torch.tensor([[True, False], [False, True]])),
    ]
    return rx.write_tensors(tmp_path_factory.mktemp("plain") / "plain.tensors", tensors), tensors


def test_encrypt_existing_example(examples_dir, plain_tensors, tmp_path):
    """encrypt_existing.py with our package: add exact / random / pwhash encryption to a file and
    remove it again; each result holds the original tensors (module index, type, name, data), the
    encrypted ones only with the key."""
    from tensorizer import CryptographyError, DecryptionParams

    script = example(examples_dir, "encrypt_existing.py")
    plain, tensors = plain_tensors
    key = bytes(range(32))
    (tmp_path / "exact.key").write_bytes(key)
    (tmp_path / "pass.txt").write_bytes(PASSPHRASE.encode() + b"\n")  # stripped by the script
    salt = "00112233445566778899aabbccddeeff"

    def run(*args):
        return run_example(script, *args, cwd=tmp_path)

    def check(name, **kwargs):
        rx.assert_same_file_contents(tmp_path / name, tensors, **kwargs)

    out = run("add", "exact", "--keyfile", "exact.key", "--infile", str(plain), "--outfile", "exact.tensors")
    assert f"({len(tensors)} / {len(tensors)}) Encrypting mask" in out.stdout and "Done" in out.stdout
    check("exact.tensors", encryption=DecryptionParams.from_key(key))
    with pytest.raises(CryptographyError, match="decryption was not requested"):
        check("exact.tensors")
    run("remove", "exact", "--keyfile", "exact.key", "--infile", "exact.tensors", "--outfile", "exact-dec.tensors",
        "-q")
    check("exact-dec.tensors")

    run("add", "random", "--keyfile", "random.key", "--infile", str(plain), "--outfile", "random.tensors", "-q")
    random_key = (tmp_path / "random.key").read_bytes()
    assert len(random_key) == 32
    check("random.tensors", encryption=DecryptionParams.from_key(random_key))

    out = run("add", "pwhash", "--keyfile", "pass.txt", "--opslimit", "min", "--memlimit", "MIN", "--salt", salt,
              "--infile", str(plain), "--outfile", "pwhash.tensors")
    assert out.line("Salt: ") == f"Salt: {salt}"
    check("pwhash.tensors", encryption=DecryptionParams.from_string(PASSPHRASE))
    run("remove", "pwhash", "--keyfile", "pass.txt", "--infile", "pwhash.tensors", "--outfile", "pwhash-dec.tensors")
    check("pwhash-dec.tensors")


def test_encrypt_existing_example_matches_real(examples_dir, plain_tensors, tmp_path):
    """Files encrypted by the example under one package are decrypted by the example under the other
    (exact key one way, Argon2id passphrase the other way)."""
    script = example(examples_dir, "encrypt_existing.py")
    rx.need_real()
    plain, tensors = plain_tensors
    (tmp_path / "exact.key").write_bytes(bytes(range(100, 132)))
    (tmp_path / "pass.txt").write_text(PASSPHRASE)

    def run(peer, *args):
        return run_example(script, *args, "-q", peer=peer, cwd=tmp_path / peer)

    run("real", "add", "exact", "--keyfile", "../exact.key", "--infile", str(plain), "--outfile", "../real-enc.tensors")
    run("ours", "remove", "exact", "--keyfile", "../exact.key", "--infile", "../real-enc.tensors",
        "--outfile", "../real-enc-ours-dec.tensors")
    rx.assert_same_file_contents(tmp_path / "real-enc-ours-dec.tensors", tensors)

    run("ours", "add", "pwhash", "--keyfile", "../pass.txt", "--opslimit", "INTERACTIVE", "--memlimit", "MIN",
        "--infile", str(plain), "--outfile", "../ours-enc.tensors")
    run("real", "remove", "pwhash", "--keyfile", "../pass.txt", "--infile", "../ours-enc.tensors",
        "--outfile", "../ours-enc-real-dec.tensors")
    rx.assert_same_file_contents(tmp_path / "ours-enc-real-dec.tensors", tensors)


def test_encrypt_existing_example_float_tensors(examples_dir, tmp_path):
    """On a file with any floating-point tensor (a model's weights) the example fails under 2.11.1:
    read_tensors yields every floating-point tensor as a ``torch.nn.Parameter`` with
    requires_grad=True, whatever its type, and the script's ``tensor.set_()`` ("Release memory")
    raises. Ours fails the same way, at the same tensor."""
    from tensorizer import TensorType

    script = example(examples_dir, "encrypt_existing.py")
    plain = rx.write_tensors(tmp_path / "floats.tensors", [(0, TensorType.STATE_DICT, "w", torch.ones(3, 2))])
    (tmp_path / "exact.key").write_bytes(bytes(32))
    error = "RuntimeError: a leaf Variable that requires grad is being used in an in-place operation."
    for peer in ("ours", "real"):
        if peer == "real":
            rx.need_real()
        run = run_example(script, "add", "exact", "--keyfile", "../exact.key", "--infile", str(plain),
                          "--outfile", "out.tensors", peer=peer, cwd=tmp_path / peer, check=False)
        assert run.proc.returncode == 1, (run.stdout, run.stderr)
        assert run.stdout == "(1 / 1) Encrypting w\n" and run.stderr.rstrip().endswith(error), run.stderr
        assert "tensor.set_()" in run.stderr


# ---------------------------------------------------------------------------------------------
# hf_serialization.py --model_type transformers [--validate] LOCAL_DIR OUT_DIR


def _check_hf_output(run: rx.Run, snapshot, out_dir):
    assert run.line("MODEL PATH: ") == f"MODEL PATH: {snapshot['dir']}"
    assert run.line("OUTPUT PREFIX: ") == f"OUTPUT PREFIX: {out_dir}"
    assert "INFO hf_serialization.py" in run.stderr and " - Serializing model" in run.stderr
    assert (out_dir / "model-config.json").is_file() and (out_dir / "tokenizer.json").is_file()
    assert_equal_tensors(file_tensors(out_dir / "model.tensors"), snapshot["tensors"], "model.tensors vs the model")


def test_hf_serialization_example(examples_dir, hub, tmp_path):
    """hf_serialization.py, transformers branch, with our package: serializes the local model
    directory to OUT/model.tensors + model-config.json + the tokenizer files and exits 0;
    model.tensors holds the model's tensors. It imports diffusers at the top (only its Stable
    Diffusion branch uses it). The real package's run is in the --validate test below, which
    checks the same serialization output first."""
    rx.need("diffusers")
    script = example(examples_dir, "hf_serialization.py")
    snapshot = hub["EleutherAI/gpt-j-6B"]
    run = run_example(script, "--model_type", "transformers", str(snapshot["dir"]), str(tmp_path / "out"),
                      cwd=tmp_path, hub=hub, dump=True)
    assert_equal_tensors(run.model("from_pretrained"), snapshot["tensors"], "the example's model vs the snapshot")
    _check_hf_output(run, snapshot, tmp_path / "out")


@pytest.mark.parametrize("peer", ["ours", "real"])
def test_hf_serialization_example_validate(peer, examples_dir, hub, tmp_path):
    """With --validate the example reloads with ``TensorDeserializer(..., dtype="float16")``, a
    string where a torch.dtype is expected: 2.11.1 accepts it at construction and then fails in
    load_into_module (``tensor.to(dtype="float16")``: TypeError); ours rejects it with a TypeError
    when constructed. Both exit 1 with a TypeError after serializing correctly."""
    rx.need("diffusers")
    script = example(examples_dir, "hf_serialization.py")
    snapshot = hub["EleutherAI/gpt-j-6B"]
    run = run_example(script, "--model_type", "transformers", "--validate", str(snapshot["dir"]), str(tmp_path / "out"),
                      peer=peer, cwd=tmp_path, hub=hub, check=False)
    assert run.proc.returncode == 1, run.stderr[-3000:]
    if peer == "ours":
        last = run.stderr.rstrip().splitlines()[-1]
        assert last.startswith("TypeError: ") and "'float16'" in last, run.stderr[-3000:]
    else:
        assert "TypeError: to() received an invalid combination of arguments - got (dtype=str" in run.stderr, \
            run.stderr[-3000:]
    assert " - Validating serialization" in run.stderr
    _check_hf_output(run, snapshot, tmp_path / "out")

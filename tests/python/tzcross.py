"""Shared helpers for the cross tests between our CLI and the real Python tensorizer (2.11.1, or the
release TZ_PEER_TENSORIZER names: 2.12.1 when CTest runs them under that release's venv)."""

import hashlib
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Mapping

SKIP_EXIT_CODE = 77  # CTest's SKIP_RETURN_CODE: the Python peers are missing, nothing was tested
TENSORIZER_VERSION = os.environ.get("TZ_PEER_TENSORIZER", "2.11.1")
FIRST_HEADER_OFFSET = 73 + 262144  # magic + file header + the 256 KiB metadata block (format/FORMAT.md §2)
END_MARKER_BYTES = 8


def import_peers():
    """Imports torch and tensorizer, or exits 77 so CTest reports a skip instead of a pass."""
    # torch warns on every complex32 tensor it makes; the references make some on purpose.
    warnings.filterwarnings("ignore", message="ComplexHalf support is experimental")
    try:
        import tensorizer  # noqa: F401
        import torch  # noqa: F401
    except (ImportError, OSError) as error:  # OSError: libnacl finds no libsodium
        print(f"skipped: the Python peers are not importable ({error}); run scripts/setup.sh")
        sys.exit(SKIP_EXIT_CODE)
    version = getattr(tensorizer, "__version__", "?")
    if version != TENSORIZER_VERSION:
        print(f"skipped: tensorizer {version} is installed, these tests need {TENSORIZER_VERSION}")
        sys.exit(SKIP_EXIT_CODE)


class Failures:
    """Collects check failures so one run reports all of them, then sets the exit code."""

    def __init__(self):
        self.messages = []
        self.checks = 0

    def check(self, condition, message):
        self.checks += 1
        if not condition:
            self.messages.append(message)
            print(f"FAIL: {message}", flush=True)
        return condition

    def finish(self, what):
        failed = len(self.messages)
        print(f"{what}: {self.checks - failed} passed, {failed} failed")
        sys.exit(1 if failed else 0)


def run_cli(cli, *args, timeout_s=300):
    """Runs our CLI; returns the CompletedProcess (text mode), never raises on a non-zero exit."""
    command = [cli, *map(str, args)]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as error:
        return subprocess.CompletedProcess(command, 124, error.stdout or "", f"timed out after {timeout_s} s")


def cli_json(failures, cli, *args):
    """Runs our CLI expecting exit 0 and JSON on stdout; returns the parsed object or None (a failure)."""
    result = run_cli(cli, *args)
    shown = " ".join(map(str, args))
    if not failures.check(result.returncode == 0,
                          f"`tensorizer {shown}` exited {result.returncode}: {result.stderr.strip()[-2000:]}"):
        return None
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError as error:
        failures.check(False, f"`tensorizer {shown}` printed invalid JSON ({error}): {result.stdout[:300]!r}")
        return None


def dtype_name(tensor):
    """The torch dtype name without the "torch." prefix, as our CLI prints it."""
    return str(tensor.dtype).removeprefix("torch.")


def tensor_bytes(tensor):
    """The tensor's data in C order as bytes; a meta tensor reads back as zeros (format/FORMAT.md §4.3)."""
    import torch

    if tensor.is_meta:
        return bytes(tensor.numel() * tensor.element_size())
    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def public_name(path):
    """Our CLI's name: a string for a one-string path, a JSON array for a structured path."""
    if isinstance(path, str):
        return path
    path = list(path)
    return path[0] if len(path) == 1 and isinstance(path[0], str) else path


def name_key(name):
    """A hashable, printable key for a name that may be a string or a list."""
    return json.dumps(public_name(name), ensure_ascii=False)


def read_real(path, **kwargs):
    """Reads every tensor with the real tensorizer, verifying hashes, in file order.

    Returns a list of dicts (name, type, module_index, tensor). Uses read_tensors on a lazy
    deserializer because it is the API that exposes module indices and tensor types.
    """
    from tensorizer import TensorDeserializer

    entries = []
    deserializer = TensorDeserializer(path, device="cpu", verify_hash=True, lazy_load=True, **kwargs)
    try:
        for module_index, tensor_type, name, tensor in deserializer.read_tensors():
            entries.append({"name": public_name(name), "type": tensor_type.name.lower(),
                            "module_index": module_index, "tensor": tensor.detach()})
    finally:
        deserializer.close()
    return entries


def read_real_eager(path):
    """Loads the whole file eagerly (the default path users take) with hash verification.

    Returns {name_key: tensor}, flattening the nested structure the deserializer builds.
    """
    from tensorizer import TensorDeserializer

    flat = {}

    def walk(prefix, node):
        if isinstance(node, Mapping):
            for key, child in node.items():
                walk(prefix + [key], child)
        elif isinstance(node, (list, tuple)):
            for index, child in enumerate(node):
                walk(prefix + [index], child)
        else:
            flat[name_key(prefix)] = node.detach()

    deserializer = TensorDeserializer(path, device="cpu", verify_hash=True)
    try:
        walk([], deserializer.tree())
    finally:
        deserializer.close()
    return flat


def load_manifests(reference_dir):
    """Every *.manifest.json in reference_dir, sorted by file name, with the tensor file's path added."""
    manifests = []
    for entry in sorted(os.listdir(reference_dir)):
        if entry.endswith(".manifest.json"):
            with open(os.path.join(reference_dir, entry), encoding="utf-8") as stream:
                manifest = json.load(stream)
            manifest["path"] = os.path.join(reference_dir, manifest["file"])
            manifests.append(manifest)
    return manifests

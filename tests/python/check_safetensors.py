"""Checks `tensorizer convert` both ways against the real safetensors and tensorizer libraries.

usage: check_safetensors.py CLI

The real safetensors library writes a file of every dtype both formats share; our CLI converts it to
.tensors, which the real tensorizer must read with verify_hash=True and get the same tensors; our CLI
converts that back to .safetensors, which the real safetensors library must load to the same tensors.
Exits 77 when torch/tensorizer/safetensors cannot be imported, 1 on any mismatch.
"""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tzcross  # noqa: E402


def shared_dtype_tensors():
    """Tensors of every dtype safetensors and .tensors both store, with 0-d and zero-size shapes."""
    import torch

    g = torch.Generator().manual_seed(6)
    base = torch.randn(3, 5, generator=g)
    tensors = {
        "f32.matrix": base,
        "f32.scalar": torch.tensor(-3.25),
        "f32.empty": torch.empty(2, 0),
        "f16.matrix": base.half(),
        "bf16.matrix": base.bfloat16(),
        "f64.vector": torch.randn(7, generator=g).double(),
        "i8.vector": torch.arange(-4, 4, dtype=torch.int8),
        "u8.vector": torch.arange(0, 250, 25, dtype=torch.uint8),
        "i16.vector": torch.arange(-5, 5, dtype=torch.int16),
        "i32.vector": torch.arange(-5, 5, dtype=torch.int32),
        "i64.scalar": torch.tensor(2**40, dtype=torch.int64),
        "bool.mask": torch.tensor([[True, False], [False, True]]),
        "c64.vector": torch.randn(3, generator=g, dtype=torch.complex64),
        "model.layers.0.attn.weight": torch.randn(16, 16, generator=g),
    }
    for name in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"):
        tensors[f"{name}.vector"] = torch.arange(4).to(getattr(torch, name))
    return tensors


def compare(failures, label, got, want):
    failures.check(set(got) == set(want), f"{label}: names {sorted(got)}, expected {sorted(want)}")
    for name in sorted(set(got) & set(want)):
        g, w = got[name], want[name]
        failures.check(g.dtype == w.dtype and g.shape == w.shape,
                       f"{label}: {name}: {g.dtype} {list(g.shape)}, expected {w.dtype} {list(w.shape)}")
        failures.check(tzcross.tensor_bytes(g) == tzcross.tensor_bytes(w), f"{label}: {name}: data differs")


def convert(failures, cli, source, target):
    result = tzcross.run_cli(cli, "convert", source, target)
    return failures.check(result.returncode == 0,
                          f"`tensorizer convert {os.path.basename(source)} {os.path.basename(target)}` exited "
                          f"{result.returncode}: {result.stderr.strip()[-2000:]}")


def check_round_trip(failures, cli, work_dir):
    from safetensors.torch import load_file, save_file

    want = shared_dtype_tensors()
    source = os.path.join(work_dir, "source.safetensors")
    save_file(want, source)
    converted = os.path.join(work_dir, "converted.tensors")
    if not convert(failures, cli, source, converted):
        return
    try:
        entries = tzcross.read_real(converted)
    except Exception as error:  # the real reader rejecting our file is the failure being tested
        failures.check(False, f"real tensorizer reading {converted}: {type(error).__name__}: {error}")
        return
    compare(failures, "safetensors -> .tensors", {e["name"]: e["tensor"] for e in entries}, want)
    back = os.path.join(work_dir, "back.safetensors")
    if not convert(failures, cli, converted, back):
        return
    try:
        loaded = load_file(back)
    except Exception as error:  # likewise for the real safetensors loader
        failures.check(False, f"real safetensors loading {back}: {type(error).__name__}: {error}")
        return
    compare(failures, ".tensors -> safetensors", loaded, want)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    cli = os.path.abspath(sys.argv[1])
    tzcross.import_peers()
    try:
        import safetensors  # noqa: F401
    except ImportError as error:
        print(f"skipped: safetensors is not importable ({error}); run scripts/setup.sh")
        return tzcross.SKIP_EXIT_CODE
    failures = tzcross.Failures()
    work_dir = tempfile.mkdtemp(prefix="tz-cross-st-")
    try:
        check_round_trip(failures, cli, work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    failures.finish("check_safetensors")


if __name__ == "__main__":
    sys.exit(main())

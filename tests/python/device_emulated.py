#!/usr/bin/env python3
"""Python's device path on the CUDA emulation: loads onto cuda:0 through the emulated tensorizer._C
put, tensor for tensor, the bytes `tensorizer hash` reports for the model, read back from the emulated
device memory (tests/device_access.h, exported by the emulated module, called through ctypes).

usage: device_emulated.py c|deserializer EMULATED_PACKAGE_DIR PYTHON_SOURCE_DIR TENSORIZER_CLI

  c             _C.Reader.load(device=0) whole, filtered, verified and encrypted, load_one(device=0),
                a device that is not there (RuntimeError naming cuda:1), and a partition's shares
                through _C.load_extents_to_device into device memory the test owns.
  deserializer  TensorDeserializer(device="cuda:0"), eager and lazy, against a host load of the same
                file. torch here has no CUDA, so the test lends it the emulation's: is_available()
                says yes, from_dlpack() copies the capsule's device bytes into a CPU tensor, and
                Tensor.to("cuda:0") keeps that tensor; stream() yields the same tensors in file order.
                Exit 77 (skipped) up front without torch.

Temporary files go to a directory of their own, removed at exit.
"""

import contextlib
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import tempfile

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)


def import_emulated_c(package_dir, source_dir):
    """tensorizer from the source tree, with its _C taken from package_dir (the emulated build)."""
    sys.path.insert(0, source_dir)
    import tensorizer

    tensorizer.__path__.insert(0, package_dir)
    from tensorizer import _C

    if os.path.dirname(os.path.realpath(_C.__file__)) != os.path.realpath(package_dir):
        sys.exit(f"imported {_C.__file__}, not the emulated _C of {package_dir}")
    return _C


class Device:
    """Reads DLPack capsules' device bytes through the emulated module's tz_test_dltensor_read."""

    def __init__(self, c_module):
        self.lib = ctypes.CDLL(c_module.__file__)  # the module already loaded: the same emulation
        self.lib.tz_test_device_count.restype = ctypes.c_int
        self.lib.tz_test_dltensor_read.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
        self.lib.tz_test_dltensor_read.restype = ctypes.c_int
        self.lib.tz_test_device_alloc.argtypes = (ctypes.c_size_t,)
        self.lib.tz_test_device_alloc.restype = ctypes.c_void_p
        self.lib.tz_test_device_free.argtypes = (ctypes.c_void_p,)
        self.lib.tz_test_device_read.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
        self.lib.tz_test_device_read.restype = ctypes.c_int
        self.pointer = ctypes.pythonapi.PyCapsule_GetPointer
        self.pointer.restype = ctypes.c_void_p
        self.pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
        self.reads = 0

    def read(self, capsule, size_bytes):
        buf = ctypes.create_string_buffer(max(size_bytes, 1))
        rc = self.lib.tz_test_dltensor_read(self.pointer(capsule, b"dltensor"), buf, size_bytes)
        if rc != 0:
            raise AssertionError(f"reading {size_bytes} device bytes: {rc} (-2: not a CUDA tensor of that size)")
        self.reads += 1
        return buf.raw[:size_bytes]


def cli(tool, *args):
    return subprocess.run([tool, *args], check=True, capture_output=True, text=True).stdout


def make_models(tool, work):
    """A synthetic model, its encrypted copy and key, and the model's SHA-256 per tensor name."""
    plain, enc, key = (os.path.join(work, n) for n in ("model.tensors", "enc.tensors", "key"))
    cli(tool, "synth", plain, "--size-mib", "12", "--seed", "9")
    cli(tool, "keygen", key)
    cli(tool, "copy", "--encrypt-key-file", key, plain, enc)
    hashes = {t["name"]: t["sha256"] for t in json.loads(cli(tool, "hash", "--json", plain))["tensors"]}
    with open(key, "rb") as f:
        return plain, enc, f.read(), hashes


def check_device_load(device, reader, loaded, want, expect_indices, label):
    entries = reader.entries
    check(loaded.device == 0, f"{label}: on device {loaded.device}")
    check(sorted(loaded.indices) == sorted(expect_indices), f"{label}: indices {loaded.indices}")
    bad = []
    for pos, idx in enumerate(loaded.indices):
        e = entries[idx]
        try:
            got = hashlib.sha256(device.read(loaded.dlpack(pos), e.deserialized_bytes)).hexdigest()
            # Typed: the reader refuses a capsule whose dtype and shape do not make up the tensor's size.
            typed = loaded.dlpack(pos, typed=True)
            if typed is None or hashlib.sha256(device.read(typed, e.deserialized_bytes)).hexdigest() != got:
                got = "the typed capsule differs"
        except AssertionError as why:
            got = str(why)
        if got != want[e.display]:
            bad.append(e.display)
    check(not bad, f"{label}: {len(bad)} tensors differ on the device, first {bad[:1]}")
    if not bad:
        print(f"{label}: {len(loaded.indices)} tensors read back from the device equal the model's")


def run_c(_C, device, tool, work):
    plain, enc, key, want = make_models(tool, work)
    check(_C.cuda_device_count() == 1, f"_C sees {_C.cuda_device_count()} devices, the emulation has 1")
    check(device.lib.tz_test_device_count() == 1, "tz_test_device_count() is not 1")
    r = _C.Reader(_C.Source.open(plain))
    n = len(r.entries)
    check_device_load(device, r, r.load(device=0, verify=True), want, range(n), "whole, verified")
    check_device_load(device, r, r.load([7, 2, n - 1], device=0), want, [7, 2, n - 1], "filtered")
    check_device_load(device, r, r.load_one(3, device=0), want, [3], "load_one")
    try:
        r.load(device=0).buffer(0)
        check(False, "buffer() of a device load did not raise")
    except ValueError:
        pass
    try:
        r.load(device=1)
        check(False, "a load onto cuda:1 succeeded; the emulation has one device")
    except Exception as e:  # noqa: BLE001 - _C's own type unless set_error_types mapped it
        check("cuda:1" in str(e), f"the error of a load onto cuda:1 does not name it: {e}")
    e = _C.Reader(_C.Source.open(enc))
    loaded = e.load(device=0, verify=True, decryption=_C.Decryption.from_key(key))
    check_device_load(device, e, loaded, want, range(n), "encrypted, verified")
    check_trace(lambda path: r.load(device=0, trace=path), work, "_C.Reader.load(device=0, trace=...)")
    check_device_extents(_C, device, r, "plain", {})
    check_device_extents(_C, device, e, "encrypted", {"decryption": _C.Decryption.from_key(key)})


def check_device_extents(_C, device, reader, label, kw):
    """Every rank's share of a partition in 3, read by _C.load_extents_to_device into device memory
    this test owns (as a CUDA tensor's storage), equals the same shares read into host memory."""
    align = 2 << 20 if reader.encrypted else 4096
    plan = _C.plan_partition(reader, 3, align=align)
    total = plan["begin"][3]
    flat_of = dict(zip(plan["tensors"], plan["flat_offset"]))
    host = bytearray(total)
    dev = device.lib.tz_test_device_alloc(total)
    check(dev is not None, f"extents, {label}: no emulated device memory")
    if dev is None:
        return
    try:
        pinned = []
        for r in range(3):
            extents = [(i, b, n, flat_of[i] + b) for i, b, n in plan["parts"][r]]
            _C.load_extents(reader, extents, host, **kw)
            got = _C.load_extents_to_device(reader, extents, 0, dev, total, **kw)
            pinned.append(got["pinned_bytes_max"] <= got["ring_bytes"] and got["data_bytes"] == plan["begin"][r + 1] - plan["begin"][r])
        back = ctypes.create_string_buffer(total)
        check(device.lib.tz_test_device_read(back, dev, total) == 0, f"extents, {label}: reading the device back")
        check(all(pinned), f"extents, {label}: a share's pinned bytes or data bytes are off")
        check(back.raw[:total] == bytes(host), f"extents, {label}: the device shares differ from the host shares")
        try:
            _C.load_extents_to_device(reader, [(0, 0, 16, total)], 0, dev, total, **kw)
            check(False, f"extents, {label}: an extent past the region was accepted")
        except Exception as why:  # noqa: BLE001 - _C's own type unless set_error_types mapped it
            check("device region" in str(why), f"extents, {label}: the error does not name the region: {why}")
        print(f"_C.load_extents_to_device, {label}: 3 shares of {total} bytes equal the host's")
    finally:
        device.lib.tz_test_device_free(dev)


def check_trace(load, work, label):
    """A load given a trace path writes Chrome trace-event JSON with the device load's events."""
    path = os.path.join(work, "trace.json")
    if os.path.exists(path):
        os.remove(path)
    load(path)
    with open(path) as f:
        names = {e["name"] for e in json.load(f)["traceEvents"]}
    missing = {"read", "copy to the device", "first copy complete", "allocate device memory"} - names
    check(not missing, f"{label}: the trace lacks {sorted(missing)}")
    if not missing:
        print(f"{label}: trace with {len(names)} kinds of event")


@contextlib.contextmanager
def torch_on_the_emulation(torch, device):
    """Lends CPU torch the emulated device, for TensorDeserializer's device path (see the usage)."""
    saved = torch.cuda.is_available, torch.from_dlpack, torch.Tensor.to

    # DLPack (type code, bits) -> torch dtype, for the typed capsules (dlpack(i, typed=True)).
    dl_dtypes = {(0, 8): torch.int8, (0, 16): torch.int16, (0, 32): torch.int32, (0, 64): torch.int64,
                 (1, 8): torch.uint8, (2, 16): torch.float16, (2, 32): torch.float32, (2, 64): torch.float64,
                 (4, 16): torch.bfloat16, (5, 64): torch.complex64, (5, 128): torch.complex128, (6, 8): torch.bool}

    def from_dlpack(capsule):
        managed = device.pointer(capsule, b"dltensor")
        # DLTensor: data, device (2 x int32), ndim (int32), dtype (uint8, uint8, uint16), shape* ...
        ndim = ctypes.c_int32.from_address(managed + 16).value
        code = ctypes.c_uint8.from_address(managed + 20).value
        bits = ctypes.c_uint8.from_address(managed + 21).value
        shape_at = ctypes.cast(ctypes.c_void_p.from_address(managed + 24).value, ctypes.POINTER(ctypes.c_int64))
        shape = [shape_at[d] for d in range(ndim)]
        dtype = dl_dtypes.get((code, bits))
        if dtype is None:  # as torch does for a type code it does not read
            raise BufferError(f"from_dlpack (emulated): no torch dtype for DLPack code {code}, {bits} bits")
        size = bits // 8
        for d in shape:
            size *= d
        return torch.frombuffer(bytearray(device.read(capsule, size)), dtype=torch.uint8).view(dtype).reshape(shape)

    def to(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        if target is not None and torch.device(target).type == "cuda" and len(args) + len(kwargs) == 1:
            return self  # the tensor stands for one on the emulated device
        return saved[2](self, *args, **kwargs)

    torch.cuda.is_available, torch.from_dlpack, torch.Tensor.to = (lambda: True), from_dlpack, to
    try:
        yield
    finally:
        torch.cuda.is_available, torch.from_dlpack, torch.Tensor.to = saved


def run_deserializer(_C, device, tool, work):
    import torch
    from tensorizer import TensorDeserializer

    plain, _, _, want = make_models(tool, work)
    with TensorDeserializer(plain, device="cpu") as host:
        expected = {k: v.detach().clone() for k, v in host.items()}
    for lazy in (False, True):
        label = f"TensorDeserializer(device='cuda:0', lazy_load={lazy})"
        before = device.reads
        with torch_on_the_emulation(torch, device):
            with TensorDeserializer(plain, device="cuda:0", lazy_load=lazy, verify_hash=True) as d:
                got = {k: v.detach().clone() for k, v in d.items()}
        check(device.reads - before == len(expected), f"{label}: {device.reads - before} tensors came from the device")
        check(sorted(got) == sorted(expected), f"{label}: names differ from a host load's")
        bad = [k for k in expected if k in got and (got[k].dtype != expected[k].dtype or got[k].shape != expected[k].shape
               or hashlib.sha256(got[k].contiguous().view(torch.uint8).numpy().tobytes()).hexdigest() != want[k])]
        check(not bad, f"{label}: {len(bad)} tensors differ from the model, first {bad[:1]}")
        if not bad:
            print(f"{label}: {len(got)} tensors from the device equal the model's and a host load's dtypes and shapes")
    check_stream(torch, device, plain, expected, want)
    with torch_on_the_emulation(torch, device):
        check_trace(lambda path: TensorDeserializer(plain, device="cuda:0", trace_file=path).close(), work,
                    "TensorDeserializer(device='cuda:0', trace_file=...)")
        check_prepared_after_open(plain)
    check_dtypes(torch, device, work)


def check_stream(torch, device, plain, expected, want):
    """TensorDeserializer.stream() onto cuda:0: every tensor once, in file order, with the model's bytes."""
    from tensorizer import TensorDeserializer

    label = "TensorDeserializer(device='cuda:0').stream(verify_hash=True)"
    with torch_on_the_emulation(torch, device):
        with TensorDeserializer(plain, device="cuda:0", lazy_load=True) as d:
            order = list(d.keys())
            got = [(k, v.detach().clone()) for k, v in d.stream(verify_hash=True)]
    names = [k for k, _ in got]
    check(names == order, f"{label}: {names[:3]}... not the file order {order[:3]}...")
    bad = [k for k, v in got if v.dtype != expected[k].dtype or v.shape != expected[k].shape
           or hashlib.sha256(v.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest() != want[k]]
    check(not bad, f"{label}: {len(bad)} tensors differ from the model, first {bad[:1]}")
    if names == order and not bad:
        print(f"{label}: {len(got)} tensors from the device, in file order, equal the model's")


def check_prepared_after_open(plain):
    """The device's context is prepared once the reader is open, not beside the open (in a fresh
    process the open starts the engine's workers, and pinning the ring beside that delayed the
    header pass by 10-20 ms on an H100 host)."""
    import tensorizer._deserializer_core as core
    from tensorizer import TensorDeserializer

    events = []
    open_reader, prepare = core._open_reader, core._prepare_device_quietly

    def recorded_open(*args, **kwargs):
        events.append("open")
        return open_reader(*args, **kwargs)

    def recorded_prepare(*args, **kwargs):
        events.append(f"prepare{args}")
        return prepare(*args, **kwargs)

    core._open_reader, core._prepare_device_quietly = recorded_open, recorded_prepare
    try:
        TensorDeserializer(plain, device="cuda:0").close()
    finally:
        core._open_reader, core._prepare_device_quietly = open_reader, prepare
    check(events == ["open", "prepare(0, False)"], f"TensorDeserializer(device='cuda:0'): open and prepare in the order {events}")
    if events == ["open", "prepare(0, False)"]:
        print("TensorDeserializer(device='cuda:0'): the device is prepared after the reader opens")


def check_dtypes(torch, device, work):
    """Every dtype family through the device path: the typed capsules DLPack can type, and float8
    (exported as uint8 of its shape) through the flat bytes, viewed by the dtype name."""
    from tensorizer import TensorDeserializer, TensorSerializer

    original = {"f8": torch.arange(16, dtype=torch.float32).to(torch.float8_e4m3fn).reshape(4, 4),
                "bool": torch.tensor([True, False, True]), "i64": torch.arange(6, dtype=torch.int64).reshape(2, 3),
                "bf16": torch.arange(8, dtype=torch.bfloat16).reshape(2, 2, 2), "c64": torch.ones(3, dtype=torch.complex64),
                "u8": torch.arange(5, dtype=torch.uint8), "f64": torch.linspace(0, 1, 7, dtype=torch.float64)}
    path = os.path.join(work, "dtypes.tensors")
    s = TensorSerializer(path)
    s.write_state_dict(original)
    s.close()
    with torch_on_the_emulation(torch, device):
        with TensorDeserializer(path, device="cuda:0", verify_hash=True) as d:
            got = {k: v.detach().clone() for k, v in d.items()}
    bad = [k for k, v in original.items() if k not in got or got[k].dtype != v.dtype or got[k].shape != v.shape
           or not torch.equal(got[k].view(torch.uint8), v.view(torch.uint8))]
    check(not bad, f"dtypes through the device path: {bad} differ in dtype, shape or bytes")
    if not bad:
        print(f"dtypes through the device path: {sorted(original)} equal the originals")


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("c", "deserializer"):
        sys.exit(__doc__)
    mode, package_dir, source_dir, tool = sys.argv[1:]
    if mode == "deserializer":
        try:
            import torch  # noqa: F401
        except ImportError:
            print("torch is not importable: skipped (exit 77)")
            return 77
    _C = import_emulated_c(package_dir, source_dir)
    device = Device(_C)
    with tempfile.TemporaryDirectory(prefix="tz-python-device-") as work:
        (run_c if mode == "c" else run_deserializer)(_C, device, tool, work)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print(f"device_emulated.py {mode}: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""tensorizer.protobuf / tensors_pb2 / tensors.proto (format/FORMAT.md §14.2): the legacy protobuf format."""

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from realpeer import run_real as _run_real

pytest.importorskip("google.protobuf")

import tensorizer  # noqa: E402
from tensorizer import protobuf as tpb  # noqa: E402
from tensorizer import tensors_pb2  # noqa: E402

# The real tensorizer must not see our package: no PYTHONPATH / venv, no user site, run from "/".
PROTO = Path(tensorizer.__file__).with_name("tensors.proto")

ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex32, torch.complex64,
              torch.complex128, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool]




def run_real(code: str, stdin: bytes = b"") -> bytes:
    return _run_real(code, stdin=stdin, text=False)


def real_tensorizer_dir() -> Path:
    return Path(run_real("import tensorizer, os; print(os.path.dirname(tensorizer.__file__))").decode().strip())


def protoc_descriptor(proto: Path, tmp_path: Path):
    from google.protobuf import descriptor_pb2

    if shutil.which("protoc") is None:
        pytest.skip("protoc not installed")
    out = tmp_path / (proto.parent.name + ".pb")
    subprocess.run(["protoc", f"-I{proto.parent}", f"--descriptor_set_out={out}", str(proto)], check=True)
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(out.read_bytes())
    return fds.file[0]


def sample(dtype):
    g = torch.Generator().manual_seed(7)
    if dtype == torch.bool:
        return torch.rand(3, 5, generator=g) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        base = torch.randn(3, 5, dtype=torch.complex64 if dtype.is_complex else torch.float32, generator=g)
        return base.to(dtype)
    return torch.randint(-100 if dtype != torch.uint8 else 0, 100, (3, 5), generator=g).to(dtype)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def test_descriptor_equals_protocs_for_our_proto(tmp_path):
    assert protoc_descriptor(PROTO, tmp_path) == tensors_pb2._file_descriptor_proto()
    assert tensors_pb2.DESCRIPTOR.name == "tensors.proto" and tensors_pb2.DESCRIPTOR.package == "tensors"


def test_our_proto_compiles_to_the_real_tensorizers_descriptor(tmp_path):
    real = real_tensorizer_dir() / "tensors.proto"
    if not real.exists():
        pytest.skip("the real tensorizer ships no tensors.proto")
    (tmp_path / "ours").mkdir()
    (tmp_path / "real").mkdir()
    shutil.copy(PROTO, tmp_path / "ours" / "tensors.proto")
    shutil.copy(real, tmp_path / "real" / "tensors.proto")
    assert protoc_descriptor(tmp_path / "ours" / "tensors.proto", tmp_path) == \
        protoc_descriptor(tmp_path / "real" / "tensors.proto", tmp_path)


def test_enum_constants_and_wrappers():
    assert [tensors_pb2.Dtype.Name(i) for i in range(18)][:5] == [
        "DT_INVALID", "DT_FLOAT32", "DT_FLOAT64", "DT_FLOAT16", "DT_BFLOAT16"]
    assert tensors_pb2.DT_QUINT4_2 == 17 and tensors_pb2.DT_BOOL == 13 and tensors_pb2.DT_COMPLEX32 == 5
    assert tensors_pb2.AT_PARAMETER == 0 and tensors_pb2.AT_BUFFER == 1
    assert tensors_pb2.AttributeType.Value("AT_BUFFER") == 1


def test_messages_have_the_proto_fields():
    t = tensors_pb2.Tensor(dtype=tensors_pb2.DT_INT8, shape=[2, 3], data=b"abcdef")
    assert not t.HasField("attr_type")  # proto3 optional: presence is tracked
    t.attr_type = tensors_pb2.AT_PARAMETER
    assert t.HasField("attr_type")
    a = tensors_pb2.Attribute(name="x", int64=5)
    assert a.WhichOneof("value") == "int64"
    a.tensor.CopyFrom(t)
    assert a.WhichOneof("value") == "tensor"
    m = tensors_pb2.Module(name="m", names=["a", "b"], attributes=[a])
    again = tensors_pb2.Module.FromString(m.SerializeToString())
    assert again == m and again.attributes[0].tensor.shape == [2, 3]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_every_dtype_round_trips_bit_exact(dtype):
    tensor = sample(dtype)
    message = tpb.serialize_tensor(tensor)
    assert message.dtype == tpb.DtypePbs[dtype]
    assert list(message.shape) == [3, 5]
    assert len(message.data) == tensor.numel() * tensor.element_size()
    back = tpb.deserialize_tensor(tensors_pb2.Tensor.FromString(message.SerializeToString()))
    assert same_bits(back, tensor)


def test_bfloat16_and_complex32_keep_their_values():
    # tensorizer 2.11.1 decoded these as float16 / complex64 (wrong values and element counts).
    bf = torch.tensor([1.0, -2.5, 3.140625, 1e30], dtype=torch.bfloat16)
    assert torch.equal(tpb.deserialize_tensor(tpb.serialize_tensor(bf)), bf)
    c32 = torch.tensor([1 + 2j, -0.5 + 4j], dtype=torch.complex64).to(torch.complex32)
    back = tpb.deserialize_tensor(tpb.serialize_tensor(c32))
    assert back.dtype == torch.complex32 and torch.equal(back.to(torch.complex64), c32.to(torch.complex64))


def test_attr_type_pairs_the_tensor_with_its_kind():
    t = torch.arange(4, dtype=torch.int64).reshape(2, 2)
    tensor, kind = tpb.deserialize_tensor(tpb.serialize_tensor(t, tensors_pb2.AT_BUFFER))
    assert kind == tensors_pb2.AT_BUFFER and torch.equal(tensor, t)
    with pytest.raises(ValueError):
        tpb.serialize_tensor(t, 7)


def test_scalars_empty_and_non_contiguous_tensors():
    scalar = torch.tensor(3.5)
    assert torch.equal(tpb.deserialize_tensor(tpb.serialize_tensor(scalar)), scalar)
    empty = torch.zeros(0, 4, dtype=torch.float16)
    back = tpb.deserialize_tensor(tpb.serialize_tensor(empty))
    assert back.shape == (0, 4) and back.dtype == torch.float16
    strided = torch.arange(12.0).reshape(3, 4).t()
    assert torch.equal(tpb.deserialize_tensor(tpb.serialize_tensor(strided)), strided)


def test_quantized_tensors_travel_as_their_integer_representation():
    x = torch.linspace(-1, 1, 8)
    for qdtype, int_dtype in ((torch.quint8, torch.uint8), (torch.qint8, torch.int8), (torch.qint32, torch.int32)):
        q = torch.quantize_per_tensor(x, 0.01, 3, qdtype)
        back = tpb.deserialize_tensor(tpb.serialize_tensor(q))
        assert back.dtype == int_dtype and torch.equal(back, q.int_repr())
    q4 = torch.quantize_per_tensor(torch.rand(6), 0.1, 0, torch.quint4x2)
    back = tpb.deserialize_tensor(tpb.serialize_tensor(q4))
    assert back.dtype == torch.uint8 and torch.equal(back, q4.int_repr().reshape(-1))


def test_dtypes_outside_the_enum_raise_type_error():
    with pytest.raises(TypeError, match="float8"):
        tpb.serialize_tensor(torch.zeros(2, dtype=torch.float8_e4m3fn))
    with pytest.raises(TypeError):
        tpb.serialize_tensor([1, 2])


def test_data_length_mismatch_raises_value_error():
    bad = tensors_pb2.Tensor(dtype=tensors_pb2.DT_FLOAT32, shape=[3], data=b"\0" * 8)
    with pytest.raises(ValueError, match="expected 12"):
        tpb.deserialize_tensor(bad)


class Net(torch.nn.Module):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.emb = torch.nn.Embedding(7, 4)
        self.block = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
        self.register_buffer("steps", torch.tensor([5], dtype=torch.int64))
        self.frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
        self.to(dtype)


def test_model_round_trip_restores_parameters_and_buffers():
    torch.manual_seed(0)
    source = Net(torch.bfloat16)
    stream = io.BytesIO()
    tpb.serialize_model(source, stream)
    stream.seek(0)
    target = Net(torch.bfloat16)
    for p in target.parameters():
        torch.nn.init.zeros_(p)
    target.steps.zero_()
    tpb.deserialize_model(target, stream)
    for (name, a), (_, b) in zip(source.state_dict().items(), target.state_dict().items()):
        assert same_bits(a, b), name
    assert all(isinstance(p, torch.nn.Parameter) for p in target.parameters())
    assert target.frozen.requires_grad is False and target.emb.weight.requires_grad is True
    assert dict(target.named_buffers()).keys() == {"steps"}


def test_model_layout_is_one_attribute_per_module():
    stream = io.BytesIO()
    tpb.serialize_model(Net(), stream)
    root = tensors_pb2.Module.FromString(stream.getvalue())
    assert root.name == ""
    assert [a.name for a in root.attributes] == ["", "emb", "block", "block.0", "block.1"]
    top = root.attributes[0].module.attributes
    assert [(a.name, a.tensor.attr_type) for a in top] == [("frozen", tensors_pb2.AT_PARAMETER),
                                                          ("steps", tensors_pb2.AT_BUFFER)]


def test_serialize_model_prints_nothing(capsys):
    tpb.serialize_model(Net(), io.BytesIO())
    assert capsys.readouterr().out == ""


REAL_NET = """
import torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(7, 4)
        self.block = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
        self.register_buffer("steps", torch.tensor([5], dtype=torch.int64))
        self.frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
"""


def test_real_tensorizer_reads_what_we_write():
    torch.manual_seed(1)
    source = Net()
    stream = io.BytesIO()
    tpb.serialize_model(source, stream)
    code = REAL_NET + """
import io, sys, hashlib
from tensorizer import protobuf
net = Net()
protobuf.deserialize_model(net, io.BytesIO(sys.stdin.buffer.read()))
for k, v in net.state_dict().items():
    print(k, hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest())
"""
    import hashlib

    got = run_real(code, stream.getvalue()).decode().split("\n")
    want = [f"{k} {hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest()}"
            for k, v in source.state_dict().items()]
    assert [line for line in got if line] == want


def test_we_read_what_the_real_tensorizer_writes():
    code = REAL_NET + """
import io, sys
import torch
from tensorizer import protobuf
torch.manual_seed(2)
net = Net()
buf = io.BytesIO()
protobuf.serialize_model(net, buf)
sys.stdout.buffer.write(buf.getvalue())
"""
    data = run_real(code)
    # 2.11.1 prints each module name before the message; the message is the tail after the last one.
    module_names = b"\nemb\nblock\nblock.0\nblock.1\n"
    assert data.startswith(module_names)
    target = Net()
    tpb.deserialize_model(target, io.BytesIO(data[len(module_names):]))
    torch.manual_seed(2)
    want = Net()
    for (name, a), (_, b) in zip(want.state_dict().items(), target.state_dict().items()):
        assert same_bits(a, b), name


def test_protobuf_modules_do_not_need_the_native_module():
    code = ("import sys, tensorizer, tensorizer.protobuf, tensorizer.tensors_pb2;"
            "print('tensorizer._C' in sys.modules, 'tensorizer.serialization' in sys.modules,"
            " 'protobuf' in tensorizer.__all__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True"]

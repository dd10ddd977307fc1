"""The data version 5 reference vectors, which only tensorizer 2.12.1 writes (make_vectors.py --tensorizer 2.12.1).

Version 5 comes with a dimension of 2^32 or more. Such a tensor holds at least 4 GiB unless it holds
nothing, so every long tensor here is zero-size (no data) or a meta tensor (data_length 0): the files
stay small and tensorizer writes them without allocating. Only the one 4 GiB meta tensor
(long_v5_meta) is not read back by tensorizer, whose reader would allocate its 4 GiB of zeros.
"""

import hashlib

from cases import KEY_PHRASE, Case, Spec, state_dict_specs

LONG = 2**32  # the first dimension stored as u64 (format/FORMAT.md §16.1)


def long_v5():
    import torch

    g = torch.Generator().manual_seed(21)
    sd = {
        "before.f32": torch.randn(2, 3, generator=g),
        "before.bf16": torch.randn(5, generator=g).bfloat16(),
        "before.meta": torch.empty(3, 4, device="meta"),
        "long.empty.f32": torch.empty(0, LONG),
        "long.empty.i64.3d": torch.empty(2 * LONG, 0, 7, dtype=torch.int64),
        "long.meta.empty.f16": torch.empty(0, LONG + 5, dtype=torch.float16, device="meta"),
        "after.i16": torch.tensor([-32768, -1, 0, 1, 32767], dtype=torch.int16),
        "after.scalar.f64": torch.tensor(2.5, dtype=torch.float64),
        "after.empty.u8": torch.empty(0, 3, dtype=torch.uint8),
    }
    notes = {"long.empty.f32": "zero-size, a dimension of 2^32: u64 dimensions, metadata tag 5",
             "long.empty.i64.3d": "zero-size, first dimension 2^33",
             "long.meta.empty.f16": "meta and zero-size, a dimension of 2^32 + 5",
             "before.f32": "written before the first long tensor: its entry is rewritten with tag 1"}
    return Case("long_v5",
                "Short tensors (f32, opaque bf16, a meta tensor) before and after zero-size tensors with a dimension "
                ">= 2^32. Data version 5 with feature flag 2 (versioned_headers): every metadata entry starts with a "
                "u32 tag, 5 for the long tensors (u64 dimensions in entry and header) and 1 for the others. "
                "tensorizer writes the same bytes tensor by tensor (write_tensor) as in one write_state_dict.",
                "TensorSerializer.write_state_dict(flat dict incl. long zero-size and meta tensors)", 5,
                state_dict_specs(sd, notes), lambda s: s.write_state_dict(sd), feature_flags=2,
                sequential_too=True)


def long_v5_meta():
    import torch

    sd = {
        "small.f32": torch.tensor([1.0, -1.0, 0.5]),
        "long.meta.u8": torch.empty(LONG, dtype=torch.uint8, device="meta"),
        "after.i32": torch.tensor([7, -7], dtype=torch.int32),
    }
    specs = state_dict_specs(sd, {"long.meta.u8": "meta, 2^32 elements: loads as 4 GiB of zeros (not hashed here)"})
    specs[1].read_back = False
    return Case("long_v5_meta",
                "A meta tensor of 2^32 uint8 elements (data_length 0, loads as 4 GiB of zeros) between two small "
                "tensors: data version 5, feature flag 2. Its manifest sha256 is null; tensorizer's read-back "
                "leaves it out.",
                "TensorSerializer.write_state_dict(flat dict incl. a 4 GiB meta tensor)", 5, specs,
                lambda s: s.write_state_dict(sd), feature_flags=2)


def long_v5_encrypted():
    import torch

    g = torch.Generator().manual_seed(22)
    sd = {
        "f32.matrix": torch.randn(8, 16, generator=g),
        "long.meta.empty.f32": torch.empty(0, LONG, device="meta"),
        "big.f16.multichunk": torch.randn(1024, 1536, generator=g).half(),
        "bf16.vector": torch.randn(9, generator=g).bfloat16(),
        "long.meta.empty.i8": torch.empty(3 * LONG, 0, dtype=torch.int8, device="meta"),
        "i8.vector": torch.tensor([-128, 0, 127], dtype=torch.int8),
    }
    notes = {"long.meta.empty.f32": "meta and zero-size with a dimension of 2^32: both hashes, empty crypt info "
                                    "(tensorizer cannot encrypt a zero-size tensor that is not meta)",
             "big.f16.multichunk": "3 MiB: two 2 MiB cipher chunks"}
    key = hashlib.sha256(KEY_PHRASE.encode()).digest()
    return Case("long_v5_encrypted",
                "Encrypted with the fixed key of encrypted.tensors; long tensors are meta and zero-size (the only "
                "long tensors tensorizer can write encrypted without 4 GiB of data). Data version 5, feature flags 3 "
                "(encrypted | versioned_headers).",
                "TensorSerializer(path, encryption=EncryptionParams(key=KEY)).write_state_dict(...)", 5,
                state_dict_specs(sd, notes), lambda s: s.write_state_dict(sd), key=key, feature_flags=3)


def all_cases():
    return [long_v5(), long_v5_meta(), long_v5_encrypted()]

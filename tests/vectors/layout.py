"""An independent parser of .tensors files (format/FORMAT.md §2-§9, §16.1), used by make_vectors.py to record
what the real tensorizer wrote: file header, metadata entries, per-tensor headers, hashes, crypt info.

Written from the spec, not from tensorizer's code, so a manifest's "file" section is a second opinion
on the bytes rather than tensorizer describing itself.
"""

import hashlib
import struct
import zlib

MAGIC = b"|TZR|"
METADATA_SIZE_OFFSET = 65
HASH_NAMES = {0: "crc32", 1: "sha256"}
VERSIONED_HEADERS = 2  # feature flag bit 1 (§16.1): every metadata entry starts with a u32 tag
LONG_TAG = 5  # the tag of an entry with u64 dimensions
CRYPT_CHUNK_CLASSES = {1: "KeyDerivationChunk", 2: "XSalsa20ParallelChunk", 3: "XSalsa20SequentialChunk"}
TENSOR_TYPES = {0: "PARAM", 1: "BUFFER", 2: "STATE_DICT"}


class Cursor:
    """Little-endian reads from a bytes object; every read is bounds-checked."""

    def __init__(self, data, pos=0):
        self.data, self.pos = data, pos

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError(f"read of {n} bytes at offset {self.pos} runs past the end ({len(self.data)})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u(self, fmt):
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]


def file_header(data):
    if data[:5] != MAGIC:
        raise ValueError("bad magic")
    c = Cursor(data, 5)
    version = c.u("I")
    flags = int.from_bytes(c.take(32), "little")
    tensor_size = c.u("Q")
    c.take(8)  # reserved
    count = c.u("Q")
    metadata_size = c.u("Q")
    return {"magic": MAGIC.decode(), "data_version": version, "feature_flags": flags,
            "header_tensor_size": tensor_size, "header_tensor_count": count,
            "metadata_size_offset": METADATA_SIZE_OFFSET, "metadata_size": metadata_size}


def metadata_entries(data, header):
    """The metadata entries (§4.2), in file order; with flag bit 1 each after its u32 tag (§16.1),
    which is 1 (u32 dimensions) or 5 (u64 dimensions). Untagged entries report tag 1."""
    c = Cursor(data, METADATA_SIZE_OFFSET + 8)
    tagged = header["feature_flags"] & VERSIONED_HEADERS != 0
    out = []
    for _ in range(header["header_tensor_count"]):
        tag = c.u("I") if tagged else 1
        if tag not in (1, LONG_TAG):
            raise ValueError(f"metadata entry tag {tag} at offset {c.pos - 4}: expected 1 or 5")
        name = c.take(c.u("H"))
        tensor_type = c.u("B")
        dtype = c.take(c.u("B"))
        dim = "Q" if tag == LONG_TAG else "I"
        shape = [c.u(dim) for _ in range(c.u("B"))]
        header_offset, data_offset, data_length = c.u("Q"), c.u("Q"), c.u("Q")
        out.append({"metadata_version": tag, "name": name, "tensor_type": tensor_type, "dtype": dtype,
                    "shape": shape, "header_offset": header_offset, "data_offset": data_offset,
                    "data_length": data_length})
    return out


def crypt_chunks(body):
    """The CryptInfo body (§9.4) as manifest chunks; only the type-2 fields are spelled out."""
    c = Cursor(body)
    chunks = []
    for _ in range(c.u("H")):
        length = c.u("Q")
        inner = Cursor(c.take(length))
        chunk_type = inner.u("H")
        chunk = {"chunk_class": CRYPT_CHUNK_CLASSES.get(chunk_type, "unknown"), "chunk_type": chunk_type}
        if chunk_type == 2:
            chunk["chunk_size"] = inner.u("Q")
            chunk["nonce_hex"] = inner.take(24).hex()
            chunk["macs_hex"] = [inner.take(16).hex() for _ in range(inner.u("Q"))]
        chunks.append(chunk)
    return {"chunks": chunks}


def tensor_header(data, offset, has_crypt, long_shape=False):
    """One per-tensor header (§6.1): its fields, the hash entries and H (§8.2) for recomputing them.
    long_shape: the entry's tag is 5, so the dimensions are u64 (§16.1)."""
    c = Cursor(data, offset)
    header_size = c.u("Q")
    raw = bytearray(data[offset:offset + header_size])
    module_idx, tensor_type = c.u("H"), c.u("B")
    name = c.take(c.u("H"))
    dtype = c.take(c.u("B"))
    dim = "Q" if long_shape else "I"
    shape = [c.u(dim) for _ in range(c.u("B"))]
    hash_end = c.pos + 2 + c.u("H")
    hashes = {}
    for _ in range(c.u("B")):
        kind, length = c.u("B"), c.u("B")
        start = c.pos - offset
        value = c.take(length)
        raw[start:start + length] = bytes(length)  # H has every hash value zeroed
        hashes[HASH_NAMES[kind]] = "%08x" % struct.unpack("<I", value)[0] if kind == 0 else value.hex()
    c.pos = hash_end
    crypt = None
    if has_crypt:
        crypt_start = c.pos - offset
        body = c.take(c.u("Q"))
        crypt = crypt_chunks(body) if body != b"\0\0" else {"chunks": []}
        del raw[crypt_start:c.pos - offset]  # H leaves the crypt-info block out
    data_length = struct.unpack("<q", data[offset + header_size - 8:offset + header_size])[0]
    return {"header_size": header_size, "module_idx": module_idx, "tensor_type": tensor_type, "name": name,
            "dtype": dtype, "shape": shape, "hashes": hashes, "crypt_info": crypt, "data_length": data_length,
            "hashed_header": bytes(raw)}


def has_crypt_info(header):
    version, flags = header["data_version"], header["feature_flags"]
    return version == 3 or (version >= 4 and flags & 1 == 1)


def expected_hashes(hashed_header, plaintext):
    """CRC32 and SHA-256 over H || plaintext (§8.2), as the manifest writes them."""
    crc = zlib.crc32(plaintext, zlib.crc32(hashed_header))
    return {"crc32": "%08x" % crc, "sha256": hashlib.sha256(hashed_header + plaintext).hexdigest()}

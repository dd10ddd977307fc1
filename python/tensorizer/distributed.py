"""Partitioned and tensor-parallel loads over the caller's torch.distributed process group.

The engine reads; torch.distributed moves bytes between ranks. Nothing here opens a transport of
its own: every exchange is a collective on the group the caller made (NCCL between GPUs, gloo on
CPUs), bounded by that group's timeout (``init_process_group(timeout=...)``).

A partitioned load (``load_partitioned``): the selected tensors' data, back to back in file order,
is cut into ``world`` shares balanced by bytes (``_C.plan_partition``: cuts inside a tensor on 4 KiB
multiples, on 2 MiB cipher chunks for encrypted files, between tensors for verified loads so each
tensor is hashed whole by its owner). Each rank reads its share only, then the ranks exchange
one status each (so a rank that failed names itself and its cause on every rank before any data
moves), then the shares fan out: a broadcast from each owner into the flat buffer (default), or
one all-gather of equal padded buffers.

A slice (``Slice``, ``load_slices``): the part of a tensor along one dimension that
``torch.chunk(t, parts, dim)[index]`` gives, or an explicit ``[start, stop)``; only those bytes are
read (rows: one stretch; columns: one stretch per outer row, coalesced where the gaps are short).
A slice of a hashed tensor cannot be verified (its hash covers the whole tensor): with
``verify_hash`` a partial slice raises ``UnsupportedError``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import time
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from . import _C

__all__ = ["Slice", "DistributedLoadError", "load_partitioned", "load_slices", "match_slices"]

CIPHER_CHUNK_BYTES = 2 << 20
PLAIN_ALIGN_BYTES = 4096
_STATUS_BYTES = 1024


class DistributedLoadError(RuntimeError):
    """A distributed load failed on some rank; raised on every rank. ``rank`` is the rank that
    failed first, or the first rank that never reached the status exchange (it died or hung; None
    when that cannot be told), ``cause`` its message."""

    def __init__(self, message: str, rank: Optional[int] = None, cause: str = ""):
        super().__init__(message)
        self.rank = rank
        self.cause = cause


@dataclasses.dataclass(frozen=True)
class Slice:
    """Which part of a tensor a rank reads along dimension ``dim``: ``torch.chunk``'s part
    ``index`` of ``parts`` (defaults: the group's rank and world size), or ``[start, stop)``
    when both are given."""

    dim: int
    parts: Optional[int] = None
    index: Optional[int] = None
    start: Optional[int] = None
    stop: Optional[int] = None

    def bounds(self, size: int, rank: Optional[int], world: Optional[int]) -> Tuple[int, int]:
        if (self.start is None) != (self.stop is None):
            raise ValueError("Slice: give both start and stop, or neither")
        if self.start is not None:
            return int(self.start), int(self.stop)
        parts = self.parts if self.parts is not None else world
        index = self.index if self.index is not None else rank
        if parts is None or index is None:
            raise ValueError("Slice: parts and index are needed without a process group")
        if parts < 1 or not 0 <= index < parts:
            raise ValueError(f"Slice: part {index} of {parts}")
        return _C.chunk_bounds(size, parts, index)


SliceSpec = Union[Slice, int]


def match_slices(names: Mapping[int, str], slices: Mapping[Union[str, "re.Pattern"], SliceSpec]) -> Dict[int, Slice]:
    """Entry index -> Slice for each name matching a pattern (``fnmatch`` for a str, ``search``
    for a compiled regex; an int spec is ``Slice(dim=spec)``); the first matching pattern wins."""
    out: Dict[int, Slice] = {}
    for idx, name in names.items():
        for pattern, spec in slices.items():
            hit = pattern.search(name) is not None if isinstance(pattern, re.Pattern) else fnmatch.fnmatchcase(name, pattern)
            if hit:
                out[idx] = spec if isinstance(spec, Slice) else Slice(dim=int(spec))
                break
    return out


# ---- status exchange -----------------------------------------------------------------------


def _collective_device(group) -> torch.device:
    backend = dist.get_backend(group)
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _exchange_status(group, error: Optional[str], fingerprint: int) -> None:
    """One all-gather of each rank's status (failed?, a fingerprint of what it plans to load, its
    error message). Raises DistributedLoadError on every rank naming the first failed rank, or a
    rank whose plan differs. A collective that fails itself (a dead rank; the group's timeout)
    raises DistributedLoadError too."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    dev = _collective_device(group)
    mine = torch.zeros(_STATUS_BYTES, dtype=torch.uint8)
    msg = (error or "").encode("utf-8", "replace")[: _STATUS_BYTES - 16]
    mine[0] = 1 if error is not None else 0
    mine[1:9] = torch.tensor(list(int(fingerprint & (2**64 - 1)).to_bytes(8, "little")), dtype=torch.uint8)
    mine[9:11] = torch.tensor(list(len(msg).to_bytes(2, "little")), dtype=torch.uint8)
    if msg:
        mine[16 : 16 + len(msg)] = torch.frombuffer(bytearray(msg), dtype=torch.uint8)
    mine = mine.to(dev)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    arrived = _arrival(group, rank)
    try:
        dist.all_gather(gathered, mine, group=group)
    except Exception as e:  # a rank died, or the group's timeout passed
        missing = arrived(world) if arrived else None
        if missing:
            who = ", ".join(str(r) for r in missing)
            raise DistributedLoadError(
                f"rank {who} did not reach the distributed load's status exchange (died or hung); "
                f"rank {rank}'s collective failed: {e}",
                rank=missing[0], cause=str(e),
            ) from e
        raise DistributedLoadError(
            f"rank {rank}: the distributed load's status exchange failed (a rank died or timed out): {e}",
            cause=str(e),
        ) from e
    statuses = [g.cpu() for g in gathered]
    for r, s in enumerate(statuses):
        if int(s[0]) != 0:
            n = int.from_bytes(bytes(s[9:11].tolist()), "little")
            cause = bytes(s[16 : 16 + n].tolist()).decode("utf-8", "replace")
            raise DistributedLoadError(f"rank {r} failed to load: {cause}", rank=r, cause=cause)
    prints = {bytes(s[1:9].tolist()) for s in statuses}
    if len(prints) != 1:
        raise DistributedLoadError(
            f"rank {rank}: the ranks disagree on the checkpoint (tensor counts and sizes differ)",
            cause="plans differ",
        )


_exchanges = 0  # status exchanges this process has entered: every rank counts alike
_ARRIVAL_WAIT_S = 5.0
# How long the store's host (global rank 0), after a failed exchange, waits for the ranks that
# reached it to read the finding. A rank notices a dead peer only when a neighbour in the
# collective's ring drops its connection, so it may start looking one wait after the first.
_HOST_STAYS_S = 2 * _ARRIVAL_WAIT_S


def _arrival(group, rank: int):
    """Marks this rank's arrival at the status exchange in the default group's store, and returns
    a function that, after a failed collective, lists the ranks that have not arrived within
    _ARRIVAL_WAIT_S (a dead rank never does), so the error can name them. None where the store
    is not reachable (a private torch API: best effort).

    The first rank to finish waiting posts its finding (the verdict), which ranks that notice the
    failure later take at once. The store lives in global rank 0: before that rank goes on to
    raise (and its process, often, to exit), it waits up to _HOST_STAYS_S for every rank that
    arrived to have read the verdict, so that none is left without the store to name the rank."""
    global _exchanges
    _exchanges += 1
    try:
        store = dist.distributed_c10d._get_default_store()
        prefix = f"tensorizer/status/{_exchanges}/"
        store.set(prefix + str(_global_rank(group, rank)), "1")
    except Exception:
        return None

    def missing(world: int) -> List[int]:
        members = [_global_rank(group, r) for r in range(world)]
        unseen = list(range(world))
        try:
            _find_unseen(store, prefix, members, unseen)
            store.set(prefix + "named/" + str(members[rank]), "1")
            if dist.get_rank() == 0:
                _host_stays(store, prefix, [members[r] for r in range(world) if r not in unseen])
        except Exception:
            # The store's host (rank 0) has gone, after its own wait: the ranks seen so far are
            # those it saw too. Without rank 0 itself having been seen, nothing can be said.
            if 0 in unseen:
                return []
        return unseen

    return missing


def _find_unseen(store, prefix: str, members: List[int], unseen: List[int]) -> None:
    """Narrows `unseen` (group ranks) to those that have not arrived: another rank's verdict if
    one is posted, else those not seen within _ARRIVAL_WAIT_S, then posted as the verdict. Raises
    where the store fails, with `unseen` holding what was seen by then."""
    deadline = time.monotonic() + _ARRIVAL_WAIT_S
    while True:
        if store.check([prefix + "verdict"]):
            text = store.get(prefix + "verdict").decode()
            unseen[:] = [int(r) for r in text.split(",") if r]
            return
        unseen[:] = [r for r in unseen if not store.check([prefix + str(members[r])])]
        if not unseen or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    store.set(prefix + "verdict", ",".join(str(r) for r in unseen))


def _host_stays(store, prefix: str, arrived: List[int]) -> None:
    """The store's host: returns once every rank in `arrived` (global ranks) has read the
    verdict, or after _HOST_STAYS_S."""
    deadline = time.monotonic() + _HOST_STAYS_S
    waiting = list(arrived)
    while waiting and time.monotonic() < deadline:
        waiting = [r for r in waiting if not store.check([prefix + "named/" + str(r)])]
        if waiting:
            time.sleep(0.05)


def report_failure(group, error: BaseException) -> None:
    """For a rank that failed before its load's status exchange (opening the file, say): takes
    part in the exchange with its error, so the other ranks fail naming it rather than waiting."""
    try:
        _exchange_status(group, f"{type(error).__name__}: {error}", 0)
    except DistributedLoadError:
        pass


def _fingerprint(entries, indices: Sequence[int]) -> int:
    h = len(indices)
    for i in indices:
        h = (h * 1000003 + entries[i].deserialized_bytes * 31 + i) & (2**64 - 1)
    return h


# ---- partitioned loads -----------------------------------------------------------------------


def _load_into(reader, extents, dest: torch.Tensor, *, verify: bool, readers: int, decryption, gap_merge: int = 64 << 10):
    """Reads (index, begin, length, offset) stretches into the 1-D uint8 tensor `dest`: host
    memory directly, device memory through the engine's bounded pinned ring (the device sink), so
    a rank's share or slices never pass through a host buffer of their size. Returns the engine's
    stats (device: with ring_bytes and pinned_bytes_max)."""
    if dest.device.type == "cpu":
        return _C.load_extents(reader, extents, dest.numpy(), verify=verify, readers=readers, decryption=decryption,
                               gap_merge=gap_merge)
    # The engine copies on streams of its own: what the caller's stream has queued on `dest` (the
    # zero-fill of torch.zeros, say) must be done before those copies land.
    torch.cuda.current_stream(dest.device).synchronize()
    return _C.load_extents_to_device(reader, extents, dest.device.index, dest.data_ptr(), dest.numel(),
                                     verify=verify, readers=readers, decryption=decryption, gap_merge=gap_merge)


def _cuda_index(device: torch.device) -> torch.device:
    """`device` with its index ("cuda" is the current device)."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _global_rank(group, r: int) -> int:
    if group is None or group is dist.GroupMember.WORLD:
        return r
    return dist.get_global_rank(group, r)


def load_partitioned(
    reader,
    indices: Sequence[int],
    *,
    process_group=None,
    device: Union[str, torch.device] = "cpu",
    verify: bool = False,
    decryption=None,
    readers: int = 0,
    fanout: str = "broadcast",
    prior_error: Optional[str] = None,
) -> Tuple[Dict[int, torch.Tensor], Dict[str, float]]:
    """Loads tensors `indices` of `reader` (a ``_C.Reader``) on every rank of `process_group`,
    each rank reading only its share. Returns (entry index -> 1-D uint8 tensor of its bytes on
    `device`, stats): stats has ``read_bytes`` (this rank's source bytes, headers and cipher
    chunks included), ``share_bytes``, ``data_bytes`` (all ranks), ``pinned_bytes`` (the pinned
    ring a CUDA load read through: bounded whatever the share; 0 on the host), ``load_s`` (reading
    the share into its place in the fan-out's buffer on `device`), ``status_s`` (the status
    exchange), ``fanout_s`` (the collectives that move the data).

    Every rank must call it with the same checkpoint and indices. A rank whose read fails makes
    every rank raise DistributedLoadError naming it and its cause; a rank that dies makes the
    others raise within the group's timeout. `prior_error`: this rank already failed (reading its
    slices, say); it takes part in the status exchange with that error instead of loading."""
    group = process_group if process_group is not None else dist.group.WORLD
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    device = _cuda_index(torch.device(device))
    if fanout not in ("broadcast", "all_gather"):
        raise ValueError(f"fanout: 'broadcast' or 'all_gather', not {fanout!r}")
    indices = sorted(indices)
    error = prior_error
    stats: Dict[str, float] = {"read_bytes": 0, "share_bytes": 0, "data_bytes": 0, "pinned_bytes": 0, "load_s": 0.0,
                               "status_s": 0.0, "fanout_s": 0.0}
    t0 = time.perf_counter()
    share = _Share(begin=[0] * (world + 1))
    if error is None and indices:  # else failed already, or nothing to partition
        try:
            share = _read_share(reader, indices, rank, world, device, fanout, stats,
                                verify=verify, readers=readers, decryption=decryption)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
    stats["load_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    entries = reader.entries
    _exchange_status(group, error, _fingerprint(entries, indices))
    stats["status_s"] = time.perf_counter() - t1

    t1 = time.perf_counter()
    if share.begin[world] == 0:  # nothing stored: zero-size tensors only, or no tensors
        return {i: torch.zeros(entries[i].deserialized_bytes, dtype=torch.uint8, device=device) for i in indices}, stats
    place = _fan_out(share, group, rank, world, device, fanout)
    stats["fanout_s"] = time.perf_counter() - t1
    out: Dict[int, torch.Tensor] = {}
    for i in indices:
        n = entries[i].deserialized_bytes
        out[i] = place(share.flat_of[i], n) if n else torch.empty(0, dtype=torch.uint8, device=device)
    return out, stats


@dataclasses.dataclass
class _Share:
    """A rank's part of a partitioned load, ready for the fan-out: where each rank's share begins
    in the flat data (begin[world] = all of it), each tensor's flat offset, and the fan-out's
    buffers (broadcast: `flat`, the whole data with this rank's share in place; all_gather:
    `mine`, this share padded to `most` bytes, and `gathered`, world blocks of `most`)."""

    begin: List[int]
    flat_of: Dict[int, int] = dataclasses.field(default_factory=dict)
    flat: Optional[torch.Tensor] = None
    mine: Optional[torch.Tensor] = None
    gathered: Optional[torch.Tensor] = None
    most: int = 1


def _read_share(reader, indices: List[int], rank: int, world: int, device: torch.device, fanout: str,
                stats: Dict[str, float], *, verify: bool, readers: int, decryption) -> _Share:
    """Plans the partition, reads this rank's share and places it in the fan-out's buffers on
    `device`. Everything local to this rank (device memory, the copy of the share into it)
    happens here, before the status exchange, so that its failure (out of memory, say) is
    reported too rather than leaving the other ranks waiting in a collective."""
    plan = _C.plan_partition(
        reader, world, indices, whole_tensors=bool(verify),
        align=CIPHER_CHUNK_BYTES if reader.encrypted else PLAIN_ALIGN_BYTES,
    )
    s = _Share(begin=plan["begin"], flat_of=dict(zip(plan["tensors"], plan["flat_offset"])))
    lo, hi, total = s.begin[rank], s.begin[rank + 1], s.begin[world]
    # The share lands in its place in the fan-out's buffer on `device`, read there by the engine
    # (device memory: through its pinned ring), with no staging buffer and no copy.
    if fanout == "broadcast":
        s.flat = torch.empty(max(total, 1), dtype=torch.uint8, device=device)
        dest, at = s.flat, 0
    else:  # one all-gather of equal (padded) per-rank buffers
        s.most = max(1, max(s.begin[r + 1] - s.begin[r] for r in range(world)))
        s.mine = torch.zeros(s.most, dtype=torch.uint8, device=device)
        s.gathered = torch.empty(world * s.most, dtype=torch.uint8, device=device)
        dest, at = s.mine, lo
    extents = [(i, b, n, s.flat_of[i] + b - at) for i, b, n in plan["parts"][rank]]
    got = _load_into(reader, extents, dest, verify=verify, readers=readers, decryption=decryption)
    stats["read_bytes"] = got["read_bytes"]
    stats["share_bytes"] = hi - lo
    stats["data_bytes"] = total
    stats["pinned_bytes"] = got.get("ring_bytes", 0)
    return s


def _fan_out(s: _Share, group, rank: int, world: int, device: torch.device, fanout: str):
    """The collectives that give every rank all shares; returns place(flat offset, size), the
    bytes of a tensor. DistributedLoadError where a collective fails (a rank died or timed out)."""
    try:
        if fanout == "broadcast":
            flat, begin = s.flat, s.begin
            for r in range(world):
                if begin[r + 1] > begin[r]:
                    dist.broadcast(flat[begin[r] : begin[r + 1]], src=_global_rank(group, r), group=group)
            place = lambda off, n: flat[off : off + n]  # noqa: E731
        else:
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.1x
            gather(s.gathered, s.mine, group=group)
            place = lambda off, n: _assemble(s.gathered, s.begin, s.most, off, n)  # noqa: E731
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as e:
        raise DistributedLoadError(f"rank {rank}: the fan-out failed (a rank died or timed out): {e}", cause=str(e)) from e
    return place


def _assemble(gathered: torch.Tensor, begin: List[int], stride: int, off: int, n: int) -> torch.Tensor:
    """Flat bytes [off, off + n) from the padded per-rank blocks of an all-gather: a view when one
    rank holds them all, else a copy of the pieces."""
    pieces = []
    for r in range(len(begin) - 1):
        a, b = max(off, begin[r]), min(off + n, begin[r + 1])
        if a < b:
            pieces.append(gathered[r * stride + a - begin[r] : r * stride + b - begin[r]])
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


# ---- slices ---------------------------------------------------------------------------------


def load_slices(
    reader,
    requests: Mapping[int, Slice],
    *,
    rank: Optional[int] = None,
    world: Optional[int] = None,
    device: Union[str, torch.device] = "cpu",
    verify: bool = False,
    decryption=None,
    readers: int = 0,
    gap_merge: int = 64 << 10,
) -> Tuple[Dict[int, Tuple[torch.Tensor, Tuple[int, ...]]], Dict[str, float]]:
    """Reads each requested slice of `reader`'s tensors (entry index -> Slice) in one engine call.
    Returns (entry index -> (1-D uint8 tensor of the slice's dense bytes on `device`, its shape)),
    stats (``read_bytes``, ``data_bytes``, ``pinned_bytes``, ``load_s``). On a CUDA device the
    slices land in device memory through the engine's bounded pinned ring."""
    device = _cuda_index(torch.device(device))
    entries = reader.entries
    extents = []
    layout = {}
    at = 0
    for i, s in sorted(requests.items()):
        e = entries[i]
        shape = list(e.shape)
        if not -len(shape) <= s.dim < len(shape) or not shape:
            raise ValueError(f"slice of {e.display}: dimension {s.dim} of a {len(shape)}-d tensor")
        dim = s.dim % len(shape)
        start, stop = s.bounds(shape[dim], rank, world)
        shape[dim] = max(0, stop - start)
        nbytes = e.itemsize
        for d in shape:
            nbytes *= d
        for idx, b, n, o in _C.plan_slice(reader, i, dim, start, stop):
            extents.append((idx, b, n, at + o))
        layout[i] = (at, nbytes, tuple(shape))
        at += (nbytes + 63) // 64 * 64  # each slice 64-byte aligned, so typed views need no copy
    t0 = time.perf_counter()
    buf = torch.empty(max(at, 1), dtype=torch.uint8, device=device)
    got = _load_into(reader, extents, buf, verify=verify, readers=readers, decryption=decryption, gap_merge=gap_merge)
    out = {i: (buf[a : a + n], shape) for i, (a, n, shape) in layout.items()}
    return out, {"read_bytes": got["read_bytes"], "data_bytes": got["data_bytes"],
                 "pinned_bytes": got.get("ring_bytes", 0), "load_s": time.perf_counter() - t0}


def typed(flat: torch.Tensor, dtype: torch.dtype, shape: Iterable[int]) -> torch.Tensor:
    """A uint8 buffer as `dtype` of `shape`: a view when its offset suits the dtype, else a copy."""
    shape = tuple(shape)
    if dtype.itemsize > 1 and flat.storage_offset() % dtype.itemsize != 0:
        flat = flat.clone()
    return flat.view(dtype).reshape(shape)

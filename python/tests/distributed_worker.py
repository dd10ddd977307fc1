"""One rank of the distributed-load tests (test_distributed.py) and benchmark: joins a gloo group on
loopback (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment), loads the file the JSON
argument names with a TensorDeserializer on that group, and saves what it got (tensors, stats, or
the error and how long it took to arrive) to OUT/rank{R}.pt.

argv[1]: JSON {"spec": str|list, "out": dir, "verify": bool, "key": hex|None, "slices": {pattern:
[dim]|[dim, start, stop]}, "fail": None|"bad_file"|"wrong_key"|"die"|"die_in_fanout", "fail_rank": int,
"timeout_s": float, "fanout": None|"broadcast"|"all_gather" (load_partitioned directly), "backend": "gloo"|"nccl", "device": "cpu"|"cuda:{rank}"}
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist


class _Done(Exception):
    pass


def main() -> None:
    args = json.loads(sys.argv[1])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = args.get("device", "cpu").replace("{rank}", str(rank))
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(args.get("backend", "gloo"), rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=float(args.get("timeout_s", 20))))
    from tensorizer import DecryptionParams, TensorDeserializer
    from tensorizer.distributed import DistributedLoadError, Slice

    spec = args["spec"]
    key = bytes.fromhex(args["key"]) if args.get("key") else None
    failing = args.get("fail") is not None and rank == args.get("fail_rank", 1)
    if failing and args["fail"] == "bad_file":
        spec = spec + ".missing" if isinstance(spec, str) else [s + ".missing" for s in spec]
    if failing and args["fail"] == "wrong_key":
        key = bytes(32)
    if failing and args["fail"] == "die":
        os._exit(3)
    if failing and args["fail"] == "die_in_fanout":  # after the status exchange, before any data moves
        import tensorizer.distributed as td

        td._fan_out = lambda *a, **k: os._exit(3)
    slices = {p: (Slice(dim=v[0]) if len(v) == 1 else Slice(dim=v[0], start=v[1], stop=v[2]))
              for p, v in (args.get("slices") or {}).items()}
    out = {"rank": rank}
    t0 = time.monotonic()
    try:
        if args.get("fanout"):  # tensorizer.distributed.load_partitioned itself, with this fan-out
            from tensorizer import _C
            from tensorizer.distributed import load_partitioned, typed
            from tensorizer.serialization import _entry_torch_dtype

            reader = _C.Reader.open_checkpoint([spec])
            flat, stats = load_partitioned(reader, range(len(reader.entries)), process_group=dist.group.WORLD,
                                           device=device, fanout=args["fanout"])
            out["tensors"] = {e.display: typed(flat[e.index], _entry_torch_dtype(e), e.shape).cpu().clone()
                              for e in reader.entries}
            out["stats"] = stats
            raise _Done()
        d = TensorDeserializer(spec, device=device, verify_hash=bool(args.get("verify")),
                               encryption=DecryptionParams.from_key(key) if key else None,
                               process_group=dist.group.WORLD, slices=slices)
        out["tensors"] = {k: v.detach().cpu().clone() for k, v in d.items()}
        out["stats"] = dict(d.distributed_stats, device=str(next(iter(d.values())).device))
    except _Done:
        pass
    except DistributedLoadError as e:
        out["error"] = str(e)
        out["error_rank"] = e.rank
    out["elapsed_s"] = time.monotonic() - t0
    torch.save(out, os.path.join(args["out"], f"rank{rank}.pt"))
    if "error" not in out:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

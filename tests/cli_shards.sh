#!/usr/bin/env bash
# Sharded safetensors checkpoints through the CLI, locally: a synthesized model converted to shards
# (transformers' names and index), then load / inspect / hash / verify of the index, the directory
# and the files equal the single file; the way back is byte-identical; mismatches fail clearly.
# usage: cli_shards.sh CLI
set -euo pipefail
cli=${1:?usage: cli_shards.sh CLI}
work=$(mktemp -d "${TMPDIR:-/tmp}/tz-cli-shards-XXXXXX")
trap 'rm -rf "$work"' EXIT
step() { printf 'cli_shards: %s\n' "$*"; }
fail() { step "FAIL: $*"; exit 1; }
expect_error() {
  local want=$1; shift
  if "$@" > "$work/err.out" 2>&1; then fail "'$*' succeeded, expected $want"; fi
  grep -qF -- "$want" "$work/err.out" || { cat "$work/err.out"; fail "'$*' did not report $want"; }
  step "expected error: $(head -c 300 "$work/err.out")"
}
# hashes MODEL...: "sha256  name" per tensor, sorted (shards hold tensors in another order).
hashes() { "$cli" hash "$@" | sort; }

"$cli" synth "$work/model.tensors" --size-mib 12 --seed 5 > /dev/null
hashes "$work/model.tensors" > "$work/single.hash"

step "convert to shards of at most 3MB"
"$cli" convert "$work/model.tensors" "$work/ckpt/" --max-shard-size 3MB
ls "$work/ckpt" > "$work/ls"
shards=$(grep -c '^model-[0-9]\{5\}-of-[0-9]\{5\}\.safetensors$' "$work/ls" || true)
[[ $shards -ge 4 ]] || { cat "$work/ls"; fail "expected at least 4 shards, got $shards"; }
grep -qx model.safetensors.index.json "$work/ls" || fail "no model.safetensors.index.json"
python3 - "$work/ckpt" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
total = 0
for shard in sorted(set(index["weight_map"].values())):
    with open(os.path.join(d, shard), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__")
    assert meta["format"] == "pt", meta
    names = {k for k, v in index["weight_map"].items() if v == shard}
    assert set(header) == names, (shard, set(header) ^ names)
    sizes = [v["data_offsets"][1] - v["data_offsets"][0] for v in header.values()]
    assert sum(sizes) <= 3_000_000 or len(sizes) == 1, (shard, sum(sizes))
    total += sum(sizes)
assert index["metadata"]["total_size"] == total, (index["metadata"], total)
PY

step "hash / verify / load / inspect of the index, the directory and the files"
idx=$work/ckpt/model.safetensors.index.json
hashes "$idx" > "$work/idx.hash"; cmp "$work/single.hash" "$work/idx.hash" || fail "hash of the index differs"
hashes "$work/ckpt" > "$work/dir.hash"; cmp "$work/single.hash" "$work/dir.hash" || fail "hash of the directory differs"
hashes "$work/ckpt/"model-*.safetensors > "$work/files.hash"; cmp "$work/single.hash" "$work/files.hash" || fail "hash of the files differs"
"$cli" verify "$idx" | grep -q "the index checked against the shards" || fail "verify did not say what it checked"
"$cli" load --json "$work/model.tensors" | grep -o '"bytes":[0-9]*' > "$work/single.load"
"$cli" load --json "$idx" | grep -o '"bytes":[0-9]*' > "$work/sharded.load"
cmp "$work/single.load" "$work/sharded.load" || fail "a sharded load delivered other byte counts"
"$cli" load --direct --verify "$work/ckpt" > /dev/null
"$cli" inspect --json "$idx" > "$work/inspect.json"
python3 - "$work/inspect.json" "$shards" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["format"] == "safetensors" and len(doc["shards"]) == int(sys.argv[2]), doc["shards"]
assert all(t["shard"].startswith("model-") for t in doc["tensors"])
PY

step "the way back is byte-identical; so is a re-shard and a single safetensors file"
"$cli" convert "$idx" "$work/back.tensors"
cmp "$work/model.tensors" "$work/back.tensors" || fail "shards -> .tensors is not byte-identical"
"$cli" convert "$work/ckpt" "$work/re/" --max-shard-size 5MiB
"$cli" convert "$work/re" "$work/back2.tensors"
cmp "$work/model.tensors" "$work/back2.tensors" || fail "re-sharded -> .tensors is not byte-identical"
"$cli" convert "$idx" "$work/one.safetensors"
"$cli" convert "$work/one.safetensors" "$work/back3.tensors"
cmp "$work/model.tensors" "$work/back3.tensors" || fail "shards -> one safetensors -> .tensors is not byte-identical"
"$cli" convert "$work/model.tensors" "$work/whole/"   # 5GB default: one shard, no index
[[ $(ls "$work/whole") == model.safetensors ]] || fail "a one-shard checkpoint is not model.safetensors alone"

step "index and shards that disagree"
cp -r "$work/ckpt" "$work/bad"
python3 - "$work/bad/model.safetensors.index.json" <<'PY'
import json, sys
p = sys.argv[1]; index = json.load(open(p))
name, shard = next(iter(sorted(index["weight_map"].items())))
other = next(s for s in sorted(set(index["weight_map"].values())) if s != shard)
index["weight_map"][name] = other
json.dump(index, open(p, "w"), indent=2)
print(name, shard, other, file=open(p + ".moved", "w"))
PY
read -r name from to < "$work/bad/model.safetensors.index.json.moved"
expect_error "tensor \"$name\" is in $from, but the index lists it in $to" "$cli" load "$work/bad"
rm "$work/bad/$from"
expect_error "(not_found)" "$cli" hash "$work/bad/model.safetensors.index.json"
expect_error "(not_found)" "$cli" load "$work/no-such-model"
mkdir "$work/empty"
expect_error "holds no model.safetensors.index.json" "$cli" load "$work/empty"
expect_error "--max-shard-size expects" "$cli" convert "$work/model.tensors" "$work/x/" --max-shard-size 0
step "OK"

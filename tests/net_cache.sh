#!/usr/bin/env bash
# The node-local cache (backends/CACHE.md) through the CLI against a real store (http = nginx,
# s3 = Ceph RGW): a first load fills the cache with a byte-identical copy, the next loads (and
# hash/verify) read that copy, a changed object (new ETag) is fetched again and replaces it, three
# processes loading at once download once, the environment variables work, bad sizes are refused.
# usage: net_cache.sh http|s3 CLI   (env TZ_NET_WORKDIR, TZ_NET_PORT_BASE, TZ_NET_SCRIPTS; exit 77 = no server)
set -euo pipefail
suite=${1:?usage: net_cache.sh http|s3 CLI}; cli=${2:?CLI}
top=${TZ_NET_WORKDIR:?}; base=${TZ_NET_PORT_BASE:?}; scripts=${TZ_NET_SCRIPTS:-$(dirname "$0")/../scripts/servers}
server=nginx; [[ $suite == s3 ]] && server=rgw
rc=0; "$scripts/$server.sh" start "$top" "$base" || rc=$?
[[ $rc == 77 ]] && { echo "net_cache: $server not installed: skipping"; exit 77; }
[[ $rc == 0 ]] || { echo "net_cache: could not start $server"; exit 1; }

work=$top/cache-sh-$suite; rm -rf "$work"; mkdir -p "$work"
cache=$work/cache
step() { printf 'net_cache %s: %s\n' "$suite" "$*"; }
fail() { step "FAIL: $*"; exit 1; }
# cache_field FILE: the "cache" value of a load --json report.
cache_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cache"])' "$1"; }
expect_cache() {  # expect_cache REPORT PREFIX
  local got; got=$(cache_field "$1")
  [[ $got == "$2"* ]] || fail "expected the cache to report '$2...', got '$got'"
  step "cache: $got"
}

# publish LOCAL: puts LOCAL where $url serves it.
if [[ $suite == http ]]; then
  www=$top/nginx/www/cache-sh; mkdir -p "$www"
  url="http://127.0.0.1:$((base + 80))/cache-sh/model.tensors"; opts=()
  publish() { cp "$1" "$www/model.tensors.tmp" && mv "$www/model.tensors.tmp" "$www/model.tensors"; }
else
  export AWS_ACCESS_KEY_ID=TESTKEY AWS_SECRET_ACCESS_KEY=TESTSECRET
  url=s3://tz-test/cache-sh/model.tensors; opts=(--s3-endpoint "http://127.0.0.1:$((base + 480))")
  publish() { "$cli" copy "${opts[@]}" "$1" "$url"; }
fi

"$cli" synth "$work/v1.tensors" --size-mib 24 --seed 5 > /dev/null
# A different size too: nginx's ETag is mtime (whole seconds) + size, and this may run within a second.
"$cli" synth "$work/v2.tensors" --size-mib 20 --seed 6 > /dev/null
"$cli" hash --json "$work/v1.tensors" > "$work/v1.hash"
"$cli" hash --json "$work/v2.tensors" > "$work/v2.hash"
publish "$work/v1.tensors"

step "first load fills the cache with a byte-identical copy"
"$cli" load --json "${opts[@]}" --cache-dir "$cache" "$url" > "$work/first.json"
expect_cache "$work/first.json" "filled"
copy=$(cache_field "$work/first.json"); copy=${copy##*: }
cmp "$copy" "$work/v1.tensors" || fail "the cached copy differs from the object"

step "the next load, hash and verify read the copy"
"$cli" load --json "${opts[@]}" --cache-dir "$cache" "$url" > "$work/second.json"
expect_cache "$work/second.json" "hit: $copy"
"$cli" hash --json "${opts[@]}" --cache-dir "$cache" "$url" > "$work/hit.hash"
cmp "$work/hit.hash" "$work/v1.hash" || fail "hash through the cache differs from the local file"
"$cli" verify "${opts[@]}" --cache-dir "$cache" "$url" > /dev/null
TENSORIZER_CACHE_DIR=$cache "$cli" load --json "${opts[@]}" "$url" > "$work/env.json"
expect_cache "$work/env.json" "hit: $copy"

step "a changed object (new ETag) is fetched again and replaces the old copy"
publish "$work/v2.tensors"
"$cli" load --json "${opts[@]}" --cache-dir "$cache" "$url" > "$work/changed.json"
expect_cache "$work/changed.json" "filled"
"$cli" hash --json "${opts[@]}" --cache-dir "$cache" "$url" > "$work/changed.hash"
cmp "$work/changed.hash" "$work/v2.hash" || fail "after the change, hashes differ from the new object"
[[ -e $copy ]] && fail "the stale copy $copy was not removed"
[[ $(ls "$cache/tensorizer-cache-v1/objects" | wc -l) == 1 ]] || fail "expected one copy: $(ls "$cache"/*/objects)"

step "three processes at once: one downloads, the others read its copy"
rm -rf "$cache"
for i in 1 2 3; do "$cli" load --json "${opts[@]}" --cache-dir "$cache" "$url" > "$work/par$i.json" & done
wait
filled=0; hits=0
for i in 1 2 3; do
  c=$(cache_field "$work/par$i.json")
  [[ $c == filled* ]] && filled=$((filled + 1))
  [[ $c == hit* ]] && hits=$((hits + 1))
  step "process $i: $c"
done
[[ $filled == 1 && $hits == 2 ]] || fail "expected 1 download and 2 hits, got $filled and $hits"

step "a sharded checkpoint: every shard and the index cached, the next load reads the copies"
shards=${url%/model.tensors}/shards/
if [[ $suite == http ]]; then "$cli" convert "$work/v1.tensors" "$www/shards/" --max-shard-size 8MB
else "$cli" convert "${opts[@]}" "$work/v1.tensors" "$shards" --max-shard-size 8MB; fi
"$cli" load --json "${opts[@]}" --cache-dir "$work/shard-cache" "$shards" > "$work/shards1.json"
expect_cache "$work/shards1.json" "model-00001-of-"
"$cli" load --json "${opts[@]}" --cache-dir "$work/shard-cache" "$shards" > "$work/shards2.json"
got=$(cache_field "$work/shards2.json")
n=$(grep -o 'safetensors: hit: ' <<< "$got" | wc -l)
[[ $n -ge 3 && $got != *filled* ]] || fail "expected every shard to be a hit, got '$got'"
step "cache: $n shards hit"

step "bounds and bad values"
"$cli" load --json "${opts[@]}" --cache-dir "$work/small" --cache-max-size 1M "$url" > "$work/small.json"
expect_cache "$work/small.json" "bypassed: "
if "$cli" load "${opts[@]}" --cache-dir "$cache" --cache-max-size lots "$url" > "$work/err" 2>&1; then
  fail "--cache-max-size lots was accepted"
fi
grep -q "cache-max-size" "$work/err" || fail "no clear error for --cache-max-size lots: $(cat "$work/err")"
step "OK"

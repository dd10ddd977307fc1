#!/usr/bin/env bash
# `tensorizer load --device` end to end on the host emulation of the CUDA runtime (tensorizer_emulated):
# whole, filtered, verified, small-ring, encrypted (key file), O_DIRECT and sharded loads put on the
# device, tensor for tensor, the bytes `tensorizer hash` reports for the model (read back with
# --device-sha256), and report the tensor and byte counts of a host load; a missing device, a corrupt
# tensor and a wrong key fail with messages naming them. With `http`, the same load comes from nginx
# (the net_nginx fixture of tests/net.cmake). Works in a temporary directory of its own, removed at exit.
# usage: cli_device_emulated.sh local|http CLI_EMULATED   (http: env TZ_NET_WORKDIR, TZ_NET_PORT_BASE)
set -euo pipefail
mode=${1:?usage: cli_device_emulated.sh local|http CLI}; cli=${2:?CLI}
work=$(mktemp -d "${TMPDIR:-/tmp}/tz-cli-device-$mode.XXXXXX")
trap 'rm -rf "$work"' EXIT
step() { printf 'cli_device %s: %s\n' "$mode" "$*"; }
fail() { step "FAIL: $*"; exit 1; }
# field FILE KEY...: a value of the JSON object in FILE (nested keys allowed).
field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: v=v[k]
print(str(v).lower() if isinstance(v,bool) else v)' "$@"; }
expect_error() {
  local want=$1; shift
  if "$@" > "$work/err.out" 2>&1; then fail "'$*' succeeded, expected $want"; fi
  grep -qF -- "$want" "$work/err.out" || { cat "$work/err.out"; fail "'$*' did not report $want"; }
  step "expected error: $(head -c 300 "$work/err.out")"
}
# same_bytes JSON [NAME]: the SHA-256 of every tensor read back from the device (load --device-sha256)
# equals its SHA-256 in `hash --json` of the model ($work/hashes.json), by name; the load holds every
# tensor of the model, or only NAME when given.
same_bytes() {
  python3 - "$1" "$work/hashes.json" "${2:-}" <<'PY' || fail "$1: the bytes on the device differ from the model's"
import json, sys
report, hashes, only = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
want = {t["name"]: t["sha256"] for t in hashes["tensors"]}
got = {t["name"]: t["sha256"] for t in report.get("device_sha256", [])}
names = [only] if only else list(want)
if sorted(got) != sorted(names):
    sys.exit(f"tensors read back: {sorted(got)[:5]}... ({len(got)}), expected {sorted(names)[:5]}... ({len(names)})")
bad = [n for n in names if got[n] != want[n]]
if bad:
    sys.exit(f"{len(bad)} of {len(names)} tensors differ on the device, first {bad[0]}: {got[bad[0]]} != {want[bad[0]]}")
print(f"  {len(names)} tensors read back from the device equal the model's")
PY
}
# same_as_host JSON TENSORS BYTES: a device load's report matches the host's counts, and its bytes the model's.
same_as_host() {
  [[ $(field "$1" tensors) == "$2" ]] || fail "$1: $(field "$1" tensors) tensors, the host load has $2"
  [[ $(field "$1" bytes) == "$3" ]] || fail "$1: $(field "$1" bytes) bytes, the host load has $3"
  [[ $(field "$1" device) == cuda:0 ]] || fail "$1: not on cuda:0"
  same_bytes "$1"
}

"$cli" synth "$work/model.tensors" --size-mib 24 --seed 5 > /dev/null
"$cli" load --json "$work/model.tensors" > "$work/host.json"
"$cli" hash --json "$work/model.tensors" > "$work/hashes.json"
tensors=$(field "$work/host.json" tensors); bytes=$(field "$work/host.json" bytes)
step "host load: $tensors tensors, $bytes bytes"

if [[ $mode == http ]]; then
  top=${TZ_NET_WORKDIR:?}; base=${TZ_NET_PORT_BASE:?}
  www=$top/nginx/www/cli-device; mkdir -p "$www"; cp "$work/model.tensors" "$www/model.tensors"
  uri="http://127.0.0.1:$((base + 80))/cli-device/model.tensors"
  step "load --device cuda:0 --verify from $uri"
  "$cli" load --device cuda:0 --verify --json --device-sha256 --connections 2 "$uri" > "$work/http.json"
  same_as_host "$work/http.json" "$tensors" "$bytes"
  [[ $(field "$work/http.json" verify) == true ]] || fail "verify not reported"
  expect_error "(not_found)" "$cli" load --device cuda:0 "http://127.0.0.1:$((base + 80))/cli-device/missing.tensors"
  step "passed"
  exit 0
fi

step "whole file, verified, as JSON and as text"
"$cli" load --device cuda:0 --verify --json --device-sha256 "$work/model.tensors" > "$work/dev.json"
same_as_host "$work/dev.json" "$tensors" "$bytes"
for stage in open_s prepare_s transfer_s total_s read_s verify_s decrypt_s upload_s wait_s; do
  field "$work/dev.json" stages "$stage" > /dev/null || fail "stage $stage missing"
done
[[ $(python3 -c "print($(field "$work/dev.json" stages verify_s) > 0)") == True ]] || fail "verify_s is 0 for a verified load"
(( $(field "$work/dev.json" readers) > 0 )) || fail "a device load reports $(field "$work/dev.json" readers) readers"
# The set-up before the first load holds the open and the GPU's context made beside it: at least each.
setup=$(field "$work/dev.json" setup_s) context=$(field "$work/dev.json" context_s) opened=$(field "$work/dev.json" stages open_s)
[[ $(python3 -c "print(0 < $context <= $setup and $opened <= $setup)") == True ]] ||
  fail "set-up $setup s does not hold the context ($context s) and the open ($opened s)"
"$cli" load --device cuda:0 "$work/model.tensors" > "$work/dev.txt"
grep -qF -- "-> cuda:0: $tensors tensors" "$work/dev.txt" || { cat "$work/dev.txt"; fail "text report"; }
grep -q "worker-seconds: read" "$work/dev.txt" || fail "no stage timings in the text report"
grep -q "before the first load: .*GPU's context: .* made beside the open)" "$work/dev.txt" || fail "no set-up line in the text report"
# Identical in form to the host load's report: every line the host prints, the device prints too
# (by its words up to the first figure), in the same order.
"$cli" load "$work/model.tensors" > "$work/host.txt"
grep -qF -- "-> host: $tensors tensors" "$work/host.txt" || { cat "$work/host.txt"; fail "host text report"; }
grep -q "before the first load: .* (the workers, the open)" "$work/host.txt" || fail "no set-up line in the host report"
shape() { sed -E 's/-> [a-z]+(:[0-9]+)?:/-> SINK:/; s/[0-9].*//' "$1"; }
shape "$work/dev.txt" | grep -vxF -f <(shape "$work/host.txt") | grep -qvE "^  (device setup|pinned staging)" &&
  { shape "$work/dev.txt"; fail "the device report has lines the host's lacks (beyond device setup, pinned staging)"; }
shape "$work/dev.txt" | grep -xF -f <(shape "$work/host.txt") | diff -q - <(shape "$work/host.txt") > /dev/null ||
  { diff <(shape "$work/dev.txt") <(shape "$work/host.txt"); fail "the device report lacks host lines or orders them otherwise"; }

step "small ring, one stream, O_DIRECT"
"$cli" load --device cuda:0 --json --device-sha256 --slots 2 --slot-mib 1 --streams 1 --direct "$work/model.tensors" \
  > "$work/small.json"
same_as_host "$work/small.json" "$tensors" "$bytes"
ring=$(field "$work/small.json" ring_bytes); held=$(field "$work/small.json" pinned_max_bytes)
(( ring < 3 * 1048576 )) || fail "ring of $ring bytes for 2 x 1 MiB slots"
(( held <= ring )) || fail "$held pinned bytes held, more than the $ring-byte ring"
# The report gives the reads the load kept in flight: for --readers 0, 3/4 of 2 slots is 1.
[[ $(field "$work/small.json" readers) == 1 ]] || fail "readers $(field "$work/small.json" readers) for 2 slots, not 1"

step "a sharded checkpoint (shards of at most 3MB), small ring, O_DIRECT"
"$cli" convert "$work/model.tensors" "$work/shards/" --max-shard-size 3MB
"$cli" load --device cuda:0 --json --device-sha256 --slots 2 --slot-mib 1 --direct "$work/shards" > "$work/shards.json"
same_as_host "$work/shards.json" "$tensors" "$bytes"
[[ $(field "$work/shards.json" format) == safetensors ]] || fail "the sharded load is not reported as safetensors"

step "filtered"
name=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tensors"][1]["name"])' \
  <("$cli" inspect --json "$work/model.tensors"))
"$cli" load --device cuda:0 --json --device-sha256 --only "$name" "$work/model.tensors" > "$work/one.json"
[[ $(field "$work/one.json" tensors) == 1 ]] || fail "--only $name loaded $(field "$work/one.json" tensors) tensors"
same_bytes "$work/one.json" "$name"
expect_error "no tensor named 'no.such.tensor'" "$cli" load --device cuda:0 --only no.such.tensor "$work/model.tensors"

step "encrypted with a key file"
"$cli" keygen "$work/key"
"$cli" copy --encrypt-key-file "$work/key" "$work/model.tensors" "$work/enc.tensors"
"$cli" load --device cuda:0 --verify --json --device-sha256 --decrypt-key-file "$work/key" "$work/enc.tensors" \
  > "$work/enc.json"
same_as_host "$work/enc.json" "$tensors" "$bytes"
"$cli" keygen "$work/wrong"
expect_error "(crypto)" "$cli" load --device cuda:0 --decrypt-key-file "$work/wrong" "$work/enc.tensors"
grep -q "$(od -An -tx1 "$work/wrong" | tr -d ' \n' | head -c 16)" "$work/err.out" && fail "the key was printed"

step "errors: missing device, corrupt tensor"
expect_error "cuda:3" "$cli" load --device cuda:3 "$work/model.tensors"
cp "$work/model.tensors" "$work/corrupt.tensors"
size=$(stat -c %s "$work/corrupt.tensors")
printf '\x5a' | dd of="$work/corrupt.tensors" bs=1 seek=$((size - 4096)) conv=notrunc status=none
expect_error "(hash_mismatch)" "$cli" load --device cuda:0 --verify "$work/corrupt.tensors"
step "passed"

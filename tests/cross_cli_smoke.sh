#!/usr/bin/env bash
# Smoke test of the CLI on a file it writes itself: synth, inspect, verify, hash, copy, load (no Python needed).
# usage: cross_cli_smoke.sh CLI
set -euo pipefail
cli=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/tz-cross-smoke-XXXXXX")
trap 'rm -rf "$work"' EXIT

step() { printf 'cross_cli_smoke: %s\n' "$*"; }

step "synth 8 MiB"
"$cli" synth "$work/a.tensors" --size-mib 8
size_bytes=$(stat -c %s "$work/a.tensors")
if [ "$size_bytes" -lt $((6 << 20)) ] || [ "$size_bytes" -gt $((10 << 20)) ]; then
  step "FAIL: synth --size-mib 8 wrote $size_bytes bytes"; exit 1
fi

step "synth is deterministic"
"$cli" synth "$work/b.tensors" --size-mib 8
cmp "$work/a.tensors" "$work/b.tensors"

step "inspect --json, verify, load"
"$cli" inspect --json "$work/a.tensors" > "$work/inspect.json"
grep -q '"tensors"' "$work/inspect.json" || { step "FAIL: inspect --json printed no tensors"; exit 1; }
"$cli" verify "$work/a.tensors"
"$cli" load "$work/a.tensors"
runs=$("$cli" load --json --repeat 3 "$work/a.tensors" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["runs_gb_per_s"]))')
[ "$runs" = 3 ] || { step "FAIL: load --repeat 3 reported $runs runs"; exit 1; }

step "copy keeps every tensor's hash"
"$cli" copy "$work/a.tensors" "$work/c.tensors"
"$cli" hash --json "$work/a.tensors" > "$work/a.hash"
"$cli" hash --json "$work/c.tensors" > "$work/c.hash"
cmp "$work/a.hash" "$work/c.hash"

step "a flipped data byte fails verify"
# 100 bytes before the end: inside the last tensor's data (the end marker is only 8 bytes).
offset=$(($(stat -c %s "$work/c.tensors") - 100))
old=$(dd if="$work/c.tensors" bs=1 skip="$offset" count=1 status=none | od -An -tu1 | tr -d ' ')
printf '%b' "\\0$(printf %o $((old ^ 0x40)))" | dd of="$work/c.tensors" bs=1 seek="$offset" conv=notrunc status=none
cmp -s "$work/a.tensors" "$work/c.tensors" && { step "FAIL: the corruption did not change the file"; exit 1; }
set +e
"$cli" verify "$work/c.tensors" > "$work/verify.out" 2>&1
rc=$?
set -e
if [ "$rc" -eq 0 ] || [ "$rc" -gt 125 ]; then
  step "FAIL: verify of a corrupt file exited $rc (expected a clean failure)"; cat "$work/verify.out"; exit 1
fi
step "all steps passed"

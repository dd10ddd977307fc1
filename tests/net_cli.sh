#!/usr/bin/env bash
# The CLI over one remote store (http = nginx HTTP+HTTPS, s3 = Ceph RGW, redis = redis-server): a synthesized
# model is published there by `tensorizer copy`, then hash/inspect/verify/load from the URI equal the local
# file, downloads are byte-identical, and wrong credentials / missing objects fail with clear messages.
# usage: net_cli.sh http|s3|redis CLI   (env TZ_NET_WORKDIR, TZ_NET_PORT_BASE, TZ_NET_SCRIPTS; exit 77 = no server)
set -euo pipefail
suite=${1:?usage: net_cli.sh http|s3|redis CLI}; cli=${2:?CLI}
top=${TZ_NET_WORKDIR:?}; base=${TZ_NET_PORT_BASE:?}; scripts=${TZ_NET_SCRIPTS:-$(dirname "$0")/../scripts/servers}
server=$suite; [[ $suite == http ]] && server=nginx; [[ $suite == s3 ]] && server=rgw
rc=0; "$scripts/$server.sh" start "$top" "$base" || rc=$?
[[ $rc == 77 ]] && { echo "net_cli: $server not installed: skipping"; exit 77; }
[[ $rc == 0 ]] || { echo "net_cli: could not start $server"; exit 1; }

work=$top/cli-sh-$suite; rm -rf "$work"; mkdir -p "$work/tmp"
export TMPDIR=$work/tmp   # the CLI's temporary upload/download files must all be gone afterwards
step() { printf 'net_cli %s: %s\n' "$suite" "$*"; }
fail() { step "FAIL: $*"; exit 1; }
same() { cmp -s "$1" "$2" || { diff <(head -c 600 "$1") <(head -c 600 "$2") || true; fail "$3"; }; }
# expect_error WANT CMD...: the command must exit non-zero and print WANT (e.g. "(not_found)") on stderr.
expect_error() {
  local want=$1; shift
  if "$@" > "$work/err.out" 2>&1; then fail "'$*' succeeded, expected $want"; fi
  grep -qF -- "$want" "$work/err.out" || { cat "$work/err.out"; fail "'$*' did not report $want"; }
  step "expected error: $(head -c 300 "$work/err.out")"
}
no_temp_left() { [[ -z $(ls -A "$TMPDIR") ]] || fail "temporary files left behind: $(ls -A "$TMPDIR")"; }

size_mib=8; [[ $suite == s3 ]] && size_mib=72   # > 64 MiB: the S3 upload goes multipart
"$cli" synth "$work/model.tensors" --size-mib $size_mib --seed 3 > /dev/null
"$cli" hash --json "$work/model.tensors" > "$work/local.hash"
"$cli" inspect --json "$work/model.tensors" > "$work/local.inspect"

# check_uri URI [options...]: hash/inspect/verify through URI equal the local file; a download is identical.
check_uri() {
  local uri=$1; shift
  step "hash, inspect, verify, download from $uri"
  "$cli" hash --json "$@" "$uri" > "$work/remote.hash"
  same "$work/local.hash" "$work/remote.hash" "hash --json from $uri differs from the local file"
  "$cli" inspect --json "$@" "$uri" > "$work/remote.inspect"
  same "$work/local.inspect" "$work/remote.inspect" "inspect --json from $uri differs"
  "$cli" verify "$@" "$uri" > /dev/null
  "$cli" copy "$@" "$uri" "$work/down.tensors"
  same "$work/model.tensors" "$work/down.tensors" "copy $uri -> local is not byte-identical"
  rm -f "$work/down.tensors"
  "$cli" load --json "$work/model.tensors" | grep -o '"bytes":[0-9]*' > "$work/local.load"
  "$cli" load --json "$@" "$uri" | grep -o '"bytes":[0-9]*' > "$work/remote.load"
  same "$work/local.load" "$work/remote.load" "load from $uri delivered other byte counts"
  no_temp_left
}

# check_shards URI [options...]: a sharded checkpoint's tensors hash (sorted) as the local file's,
# and a load delivers as many bytes.
"$cli" hash "$work/model.tensors" | sort > "$work/local.sorted.hash"
check_shards() {
  local uri=$1; shift
  step "hash, verify, load of the sharded checkpoint $uri"
  "$cli" hash "$@" "$uri" | sort > "$work/shards.hash"
  same "$work/local.sorted.hash" "$work/shards.hash" "hash of the shards at $uri differs from the local file"
  "$cli" verify "$@" "$uri" > /dev/null
  "$cli" load --json "$work/model.tensors" | grep -o '"bytes":[0-9]*' > "$work/local.load"
  "$cli" load --json "$@" "$uri" | grep -o '"bytes":[0-9]*' > "$work/shards.load"
  same "$work/local.load" "$work/shards.load" "load of the shards at $uri delivered other byte counts"
}

case $suite in
  http)
    www=$top/nginx/www/cli-sh; mkdir -p "$www"; cp "$work/model.tensors" "$www/model.tensors"
    check_uri "http://127.0.0.1:$((base + 80))/cli-sh/model.tensors"
    check_uri "https://localhost:$((base + 443))/cli-sh/model.tensors" --ca-file "$top/ca/ca.pem"
    check_uri "https://localhost:$((base + 443))/cli-sh/model.tensors" --insecure --connections 2
    step "a sharded checkpoint under an HTTP prefix and through its index URI"
    "$cli" convert "$work/model.tensors" "$www/shards/" --max-shard-size 2MB
    check_shards "http://127.0.0.1:$((base + 80))/cli-sh/shards/"
    check_shards "https://localhost:$((base + 443))/cli-sh/shards/model.safetensors.index.json" --ca-file "$top/ca/ca.pem"
    rm "$www/shards/model-00002-of-"*.safetensors
    expect_error "(not_found)" "$cli" load "http://127.0.0.1:$((base + 80))/cli-sh/shards/"
    expect_error "(not_found)" "$cli" load "http://127.0.0.1:$((base + 80))/cli-sh/no-such-dir/"
    expect_error "(auth)" "$cli" hash "https://localhost:$((base + 443))/cli-sh/model.tensors"
    expect_error "(not_found)" "$cli" hash "http://127.0.0.1:$((base + 80))/cli-sh/missing.tensors"
    expect_error "(unsupported)" "$cli" copy "$work/model.tensors" "http://127.0.0.1:$((base + 80))/cli-sh/up.tensors"
    step "encrypted file over HTTP with --decrypt-key-file"
    "$cli" keygen "$work/key" > /dev/null
    "$cli" copy --encrypt-key-file "$work/key" "$work/model.tensors" "$www/enc.tensors"
    "$cli" hash --json --decrypt-key-file "$work/key" "http://127.0.0.1:$((base + 80))/cli-sh/enc.tensors" > "$work/enc.hash"
    same "$work/local.hash" "$work/enc.hash" "decrypted hashes over HTTP differ from the plaintext file"
    "$cli" copy --decrypt-key-file "$work/key" "http://127.0.0.1:$((base + 80))/cli-sh/enc.tensors" "$work/dec.tensors"
    same "$work/model.tensors" "$work/dec.tensors" "decrypting copy over HTTP is not byte-identical"
    expect_error "decrypt" "$cli" hash "http://127.0.0.1:$((base + 80))/cli-sh/enc.tensors"
    step "time limits: a server that accepts and never answers"
    python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(16); print(s.getsockname()[1], flush=True); held=[]
while True: held.append(s.accept()[0])' > "$work/silent.port" &
    silent=$!; trap 'kill $silent 2>/dev/null || true' EXIT
    for _ in $(seq 50); do [[ -s $work/silent.port ]] && break; sleep 0.1; done
    silent_url="http://127.0.0.1:$(cat "$work/silent.port")/x.tensors"
    expect_error "give-up limit (2.5 s lost to failed attempts) reached" "$cli" load "$silent_url" --first-byte-timeout 1 --give-up-after 2.5
    expect_error "(timeout)" "$cli" hash "$silent_url" --first-byte-timeout 0.5 --give-up-after 1
    expect_error "option --stall-timeout" "$cli" load "$silent_url" --stall-timeout 0
    help_text=$("$cli" load --help) && grep -q -- "--give-up-after" <<<"$help_text" || fail "load --help does not list --give-up-after"
    kill $silent; trap - EXIT
    ;;
  s3)
    export AWS_ACCESS_KEY_ID=TESTKEY AWS_SECRET_ACCESS_KEY=TESTSECRET
    ep=(--s3-endpoint "http://127.0.0.1:$((base + 480))")
    step "upload (multipart) with copy"
    "$cli" copy "${ep[@]}" "$work/model.tensors" s3://tz-test/cli-sh/model.tensors
    no_temp_left
    check_uri s3://tz-test/cli-sh/model.tensors "${ep[@]}"
    step "a sharded checkpoint written under an S3 prefix by convert, read back from the prefix"
    "$cli" convert "${ep[@]}" "$work/model.tensors" s3://tz-test/cli-sh/shards/ --max-shard-size 20MB
    no_temp_left
    check_shards s3://tz-test/cli-sh/shards/ "${ep[@]}"
    "$cli" convert "${ep[@]}" s3://tz-test/cli-sh/shards/ "$work/back.tensors"
    same "$work/model.tensors" "$work/back.tensors" "S3 shards -> .tensors is not byte-identical"
    step "S3 -> S3 copy, and synth straight to S3"
    "$cli" copy "${ep[@]}" s3://tz-test/cli-sh/model.tensors s3://tz-test/cli-sh/copy.tensors
    check_uri s3://tz-test/cli-sh/copy.tensors "${ep[@]}"
    "$cli" synth "${ep[@]}" s3://tz-test/cli-sh/synth.tensors --size-mib $size_mib --seed 3 > /dev/null
    check_uri s3://tz-test/cli-sh/synth.tensors "${ep[@]}"
    check_uri s3://tz-test/cli-sh/model.tensors --s3-endpoint "https://localhost:$((base + 482))" --ca-file "$top/ca/ca.pem"
    expect_error "(not_found)" "$cli" hash "${ep[@]}" s3://tz-test/cli-sh/missing.tensors
    expect_error "(not_found)" "$cli" hash "${ep[@]}" s3://no-such-bucket-tz/model.tensors
    AWS_SECRET_ACCESS_KEY=wrong expect_error "(auth)" "$cli" hash "${ep[@]}" s3://tz-test/cli-sh/model.tensors
    AWS_SECRET_ACCESS_KEY=wrong expect_error "(auth)" "$cli" copy "${ep[@]}" "$work/model.tensors" s3://tz-test/cli-sh/denied.tensors
    no_temp_left
    expect_error "(not_found)" "$cli" hash "${ep[@]}" s3://tz-test/cli-sh/denied.tensors
    ;;
  redis)
    url=redis://127.0.0.1:$((base + 379))/cli-sh-model
    step "upload with copy"
    "$cli" copy "$work/model.tensors" "$url"
    no_temp_left
    check_uri "$url"
    check_uri "$url" --connections 1
    step "the key layout of format/FORMAT.md §13"
    first=$(grep -o '"header_offset":[0-9]*' "$work/local.inspect" | head -1 | cut -d: -f2)
    len=$(redis-cli -p $((base + 379)) STRLEN "cli-sh-model:header:0")
    [[ $len == "$first" ]] || fail "header:0 holds $len bytes, expected $first"
    keys=$(redis-cli -p $((base + 379)) --scan --pattern 'cli-sh-model:*' | wc -l)
    tensors=$(grep -o '"header_offset"' "$work/local.inspect" | wc -l)
    [[ $keys == $((1 + 2 * tensors)) ]] || fail "$keys keys, expected $((1 + 2 * tensors))"
    expect_error "(not_found)" "$cli" hash "redis://127.0.0.1:$((base + 379))/cli-sh-missing"
    "$cli" convert "$work/model.tensors" "$work/model.safetensors"
    expect_error "(unsupported)" "$cli" convert "$work/model.tensors" "redis://127.0.0.1:$((base + 379))/x.safetensors"
    no_temp_left
    ;;
  *) echo "unknown suite $suite" >&2; exit 2 ;;
esac
step "OK"

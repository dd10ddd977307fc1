#!/usr/bin/env bash
# Driver of remote_load_bench: starts nginx, redis and RGW (scripts/servers), synthesizes a SIZE_MIB model,
# publishes it with the CLI (nginx root, S3 multipart, Redis keys), then runs the benchmark and the
# tensorizer peer on the same servers in one run.
# usage: remote_load_bench.sh [--json FILE] BUILD_DIR [SIZE_MIB=1024] [CONNECTIONS=4] [REPEAT=5] [--no-peer]
# --json: every run in bench/README.md's schema, with this script's command line as the command.
# env: TZ_NET_WORKDIR (default BUILD_DIR/net-servers), TZ_NET_PORT_BASE (default 18000). Exit 77: no servers.
set -euo pipefail
json=()
if [[ ${1:-} == --json ]]; then
  json=(--json "$(realpath -m "${2:?--json needs a FILE}")")
  export TZ_BENCH_COMMAND=${TZ_BENCH_COMMAND:-"bench/remote_load_bench.sh $*"}  # a caller may name its own
  shift 2
fi
build=$(realpath "${1:?usage: remote_load_bench.sh BUILD_DIR [SIZE_MIB] [CONNECTIONS] [REPEAT] [--no-peer]}")
size=${2:-1024}; n=${3:-4}; repeat=${4:-5}; peer=${5:-}
here=$(dirname "$(realpath "$0")"); scripts=$here/../scripts/servers
top=${TZ_NET_WORKDIR:-$build/net-servers}; base=${TZ_NET_PORT_BASE:-18000}
cli=$build/bin/tensorizer
for s in nginx redis rgw; do
  rc=0; "$scripts/$s.sh" start "$top" "$base" > /dev/null || rc=$?
  [[ $rc == 77 ]] && { echo "remote_load_bench: $s not installed: skipping"; exit 77; }
  [[ $rc == 0 ]] || { echo "remote_load_bench: could not start $s"; exit 1; }
done
export AWS_ACCESS_KEY_ID=TESTKEY AWS_SECRET_ACCESS_KEY=TESTSECRET
endpoint=http://127.0.0.1:$((base + 480))
name=bench-$size.tensors; www=$top/nginx/www/bench; mkdir -p "$www"
[[ -s $www/$name ]] || "$cli" synth "$www/$name" --size-mib "$size" > /dev/null
"$cli" copy --s3-endpoint "$endpoint" "$www/$name" "s3://tz-test/bench/$name"
"$cli" copy "$www/$name" "redis://127.0.0.1:$((base + 379))/bench-$size"
args=(--http "http://127.0.0.1:$((base + 80))/bench/$name" --s3 "s3://tz-test/bench/$name" --s3-endpoint "$endpoint"
      --redis "redis://127.0.0.1:$((base + 379))/bench-$size" --connections "$n" --repeat "$repeat" "${json[@]}")
[[ $peer == --no-peer ]] || args+=(--peer "$here/peers/tensorizer_peer.py")
echo "file: $(stat -c %s "$www/$name") bytes, $(grep -c ^processor /proc/cpuinfo) cores"
"$build/bin/remote_load_bench" "${args[@]}"

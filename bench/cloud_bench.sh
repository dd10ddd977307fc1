#!/usr/bin/env bash
# Question (issue 32): how do our loaders compare with parallel curl, the real tensorizer and Run:ai's
# Model Streamer when the link looks like a cloud (latency per response, a rate cap per connection, maybe
# a cap on the whole link) rather than loopback? Each profile puts two shaping_proxy instances
# (bench/shaping_proxy.cpp) in front of nginx and Ceph RGW (scripts/servers) and, in ONE run, measures
# every loader REPEAT times in alternating rounds, each time in a fresh process; the tables give medians.
# usage: cloud_bench.sh [--json FILE] [--smoke] BUILD_DIR [SIZE_MIB=256] [REPEAT=3] [PROFILES="loopback cloud far"]
#
# Rows (HTTP = nginx through the proxy, S3 = RGW through the proxy, path style, SigV4):
#   curl N ranges http|s3    the references: N parallel range GETs (N = 8, 32, 64) covering the file
#   ours cli http|s3         `tensorizer load URL` at its defaults (+ "--readers 16/32 (knob)" rows)
#   ours python http|s3      build/venv/bin/python: TensorDeserializer(open_stream(url, ...), device="cpu")
#   tensorizer 2.11.1 http|s3   the same program under python3 with the real tensorizer 2.11.1
#   runai s3 defaults / concurrency=N   Run:ai Model Streamer 0.17 (bench/peers/runai_peer.py) streaming
#                            the object as raw bytes; N: the best of a 16/32/64 sweep run in the same rounds
# Numbers: "wall GB/s" = file bytes / the whole fresh process's wall time (start-up, imports, exit: what a
# user waits for) is the PRIMARY figure and "wall ratio" the primary ratio; "GB/s" is each tool's own
# timing (curl: its slowest range's time_total; ours cli: its load call; Python: the deserializer call;
# Run:ai: FileStreamer start to last byte). Ratios divide by the best curl row of the same protocol (by
# wall GB/s), HTTP rows by an HTTP curl row, S3 rows by an S3 curl row. "peak RSS MiB": median max RSS of
# the process (largest single curl for the curl rows: they write to /dev/null).
# Digests: before the rounds, per profile and untimed, `tensorizer load --verify` of each source, the
# Python loaders' per-tensor SHA-256s against `tensorizer hash` of the local file, and Run:ai's SHA-256
# of the bytes it streamed against the file's: any mismatch stops the bench (exit 1).
# The proxy's ceiling (loopback): curl through the loopback-profile proxy against the same direct to nginx.
# --json: one JSON object per line: a row per profile and loader, then the proxy's ceiling.
# --smoke (CI, tests/net.cmake): curl N=8 only, ours cli and python; no 2.11.1, Run:ai or knob rows.
# Peers missing (build/venv, tensorizer 2.11.1 in python3, /opt/tz-peers/runai-0.17 from scripts/setup.sh):
# their rows are left out with a line saying so. A peer that is present but cannot read the source
# (2.11.1 over S3, Run:ai) is reported and its rows skipped; a mismatch is never skipped.
# env: TZ_CLOUD_ONLY (a regular expression: time only the loaders it matches, e.g. "curl 8|ours cli"),
# TZ_CLOUD_KNOBS (the knob rows' --readers values, default 16,32), TZ_NET_WORKDIR (default BUILD_DIR/net-servers), TZ_NET_PORT_BASE (default 18000),
# TZ_RUNAI_PYTHON (default /opt/tz-peers/runai-0.17/bin/python). Exit 77: no servers.
set -euo pipefail
json="" smoke=0
while [[ ${1:-} == --* ]]; do
  case $1 in
    --json) json=$(realpath -m "${2:?--json needs a FILE}"); shift 2 ;;
    --smoke) smoke=1; shift ;;
    *) echo "cloud_bench: unknown option $1" >&2; exit 2 ;;
  esac
done
build=$(realpath "${1:?usage: cloud_bench.sh [--json FILE] [--smoke] BUILD_DIR [SIZE_MIB] [REPEAT] [PROFILES]}")
size=${2:-256}; repeat=${3:-3}; profiles=${4:-loopback cloud far}
here=$(dirname "$(realpath "$0")"); scripts=$here/../scripts/servers
top=${TZ_NET_WORKDIR:-$build/net-servers}; base=${TZ_NET_PORT_BASE:-18000}
cli=$build/bin/tensorizer; proxy=$build/bin/shaping_proxy
[[ -x $cli && -x $proxy ]] || { echo "cloud_bench: build $cli and $proxy first" >&2; exit 1; }
for s in nginx rgw; do
  rc=0; "$scripts/$s.sh" start "$top" "$base" > /dev/null || rc=$?
  [[ $rc == 77 ]] && { echo "cloud_bench: $s not installed: skipping"; exit 77; }
  [[ $rc == 0 ]] || { echo "cloud_bench: could not start $s"; exit 1; }
done
export AWS_ACCESS_KEY_ID=TESTKEY AWS_SECRET_ACCESS_KEY=TESTSECRET
nginx_port=$((base + 80)); rgw_port=$((base + 480))
name=bench-$size.tensors; www=$top/nginx/www/bench; mkdir -p "$www"
[[ -s $www/$name ]] || "$cli" synth "$www/$name" --size-mib "$size" > /dev/null
"$cli" copy --s3-endpoint "http://127.0.0.1:$rgw_port" "$www/$name" "s3://tz-test/bench/$name" > /dev/null
file_bytes=$(stat -c %s "$www/$name")
tmp=$(mktemp -d); proxy_pids=()
trap 'for p in "${proxy_pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT

# The loaders this machine has. Each absent peer is named, so a table without its rows is never a surprise.
py_args=()
venv_python=$build/venv/bin/python
if "$venv_python" -c 'import tensorizer._deserializer' 2> /dev/null; then py_args+=(--venv-python "$venv_python")
else echo "ours python: $venv_python cannot import our tensorizer: rows left out"; venv_python=""; fi
if ((smoke)); then
  py_args+=(--smoke --curl-n 8)
else
  if python3 -c 'import sys, tensorizer; sys.exit(tensorizer.__version__ != "2.11.1")' 2> /dev/null; then
    py_args+=(--peer-python "$(command -v python3)")
  else echo "tensorizer 2.11.1: not importable by python3 (scripts/setup.sh): rows left out"; fi
  runai_python=${TZ_RUNAI_PYTHON:-/opt/tz-peers/runai-0.17/bin/python}
  if [[ -x $runai_python ]] && "$runai_python" -c 'import runai_model_streamer, runai_model_streamer_s3' 2> /dev/null
  then py_args+=(--runai-python "$runai_python")
  else echo "runai: $runai_python has no runai_model_streamer 0.17 (scripts/setup.sh): rows left out"; fi
fi
echo "file: $file_bytes bytes, $(nproc) cores, profiles: $profiles, repeat $repeat"
python3 "$here/cloud_bench.py" reference "$www/$name" "$tmp/reference.json" --cli "$cli" \
  ${venv_python:+--python "$venv_python"}

# Starts a proxy in front of 127.0.0.1:$1 with profile $2 on a free port, waits for its startup line
# and sets proxy_port to the port it took.
start_proxy() {
  local log=$tmp/proxy-$2-$1.log
  "$proxy" --listen 0 --upstream "127.0.0.1:$1" --profile "$2" --stats-file "$tmp/stats-$2-$1.json" > "$log" 2>&1 &
  proxy_pids+=($!)
  for _ in $(seq 1 100); do grep -qs "^shaping_proxy: listening" "$log" && break; sleep 0.05; done
  proxy_port=$(sed -n 's/^shaping_proxy: listening on 127.0.0.1:\([0-9]*\) .*/\1/p' "$log")
  [[ -n $proxy_port ]] || { echo "cloud_bench: shaping_proxy did not start:" >&2; cat "$log" >&2; exit 1; }
  head -1 "$log"
}

stop_proxies() {
  for p in "${proxy_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  proxy_pids=()
}

# One profile: its two proxies, then cloud_bench.py's checked loads and rounds through them.
run_profile() {
  local profile=$1 hp sp direct=()
  start_proxy "$nginx_port" "$profile"; hp=$proxy_port
  start_proxy "$rgw_port" "$profile"; sp=$proxy_port
  [[ $profile == loopback ]] && direct=(--direct "http://127.0.0.1:$nginx_port/bench/$name")
  python3 "$here/cloud_bench.py" profile --profile "$profile" --repeat "$repeat" --results "$tmp/results.jsonl" \
    --reference "$tmp/reference.json" --cli "$cli" --bytes "$file_bytes" --http "http://127.0.0.1:$hp/bench/$name" \
    --s3-endpoint "http://127.0.0.1:$sp" --s3-uri "s3://tz-test/bench/$name" "${direct[@]}" "${py_args[@]}" \
    ${TZ_CLOUD_ONLY:+--only "$TZ_CLOUD_ONLY"} ${TZ_CLOUD_KNOBS:+--knobs "$TZ_CLOUD_KNOBS"}
  stop_proxies
  echo "proxy stats ($profile): nginx $(cat "$tmp/stats-$profile-$nginx_port.json") rgw $(cat "$tmp/stats-$profile-$rgw_port.json")"
}

for profile in $profiles; do run_profile "$profile"; done
python3 "$here/cloud_bench.py" table "$tmp/results.jsonl" --bytes "$file_bytes" ${json:+--json "$json"}

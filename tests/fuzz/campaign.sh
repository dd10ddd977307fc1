#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang++, TZ_FUZZ=ON) and runs each for SECONDS under nice, from
# its corpus, seeds and dictionary; prints executions, coverage and findings per harness.
#
# Usage: tests/fuzz/campaign.sh SECONDS [HARNESS...]   (default: every harness)
# Environment:
#   TZ_FUZZ_BUILD_DIR  build directory (default build-fuzz)
#   TZ_FUZZ_WORK       corpora, artifacts, logs, summary.tsv (default $TZ_FUZZ_BUILD_DIR/campaign);
#                      a corpus grows there from run to run
#   TZ_FUZZ_FRESH=1    start from the seeds alone (the work directory is emptied first)
#   TZ_FUZZ_ARGS       more libFuzzer flags (e.g. -jobs=2 -workers=2)
# Exit status: 0 when no harness found anything, 1 when one did (its input is under artifacts/),
# 2 on a usage or build error.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

all_harnesses=(tensors_file tensors_prefix crypt_info safetensors shard_index s3_xml redis_reply http_response)
if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 SECONDS [HARNESS...] (harnesses: ${all_harnesses[*]})" >&2
  exit 2
fi
seconds=$1
shift
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all_harnesses[@]}")

build=${TZ_FUZZ_BUILD_DIR:-build-fuzz}
work=${TZ_FUZZ_WORK:-$build/campaign}
fuzz_src=tests/fuzz

command -v clang++ >/dev/null || { echo "campaign: clang++ not found (scripts/setup.sh installs it)" >&2; exit 2; }
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DTZ_FUZZ=ON \
    -DTZ_BUILD_BENCH=OFF -DTZ_CUDA=OFF -DPython3_EXECUTABLE="$(command -v python3)" >"$build.configure.log" 2>&1 ||
    { cat "$build.configure.log" >&2; exit 2; }
fi
targets=(fuzz_make_seeds)
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
nice -n 19 cmake --build "$build" --target "${targets[@]}" -j"$(nproc)" >/dev/null || exit 2

[ "${TZ_FUZZ_FRESH:-0}" = 1 ] && rm -rf "$work"
mkdir -p "$work"
rm -rf "$work/seeds"
ASAN_OPTIONS=detect_leaks=0 "$build/bin/fuzz_make_seeds" "$work/seeds" >/dev/null

summary="$work/summary.tsv"
printf 'harness\tseconds\texecutions\texec_per_s\tedges\tfeatures\tcorpus\tfindings\n' >"$summary"
found=0
for h in "${harnesses[@]}"; do
  corpus="$work/corpus/$h" artifacts="$work/artifacts/$h/" log="$work/$h.log"
  mkdir -p "$corpus" "$artifacts"
  before=$(find "$artifacts" -type f | wc -l)
  inputs=("$corpus" "$work/seeds/$h")
  for d in "$fuzz_src/seeds/$h" "$fuzz_src/regressions/$h"; do [ -d "$d" ] && inputs+=("$d"); done
  # libFuzzer exits non-zero on a finding; the summary below reports it.
  # shellcheck disable=SC2086
  nice -n 19 "$build/bin/fuzz_$h" "${inputs[@]}" \
    -dict="$fuzz_src/dicts/$h.dict" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -max_len=16384 -print_final_stats=1 -artifact_prefix="$artifacts" \
    ${TZ_FUZZ_ARGS:-} >"$log" 2>&1 || true
  execs=$(awk '/stat::number_of_executed_units:/ {s += $2} END {print s + 0}' "$log")
  rate=$(awk '/stat::average_exec_per_sec:/ {s += $2} END {print s + 0}' "$log")
  edges=$(awk '{for (i = 1; i < NF; ++i) if ($i == "cov:") v = $(i + 1)} END {print v + 0}' "$log")
  features=$(awk '{for (i = 1; i < NF; ++i) if ($i == "ft:") v = $(i + 1)} END {print v + 0}' "$log")
  findings=$(( $(find "$artifacts" -type f | wc -l) - before ))
  [ "$findings" -eq 0 ] || found=1
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$h" "$seconds" "$execs" "$rate" "${edges:-0}" "${features:-0}" \
    "$(find "$corpus" -type f | wc -l)" "$findings" >>"$summary"
done
column -t -s $'\t' "$summary"
if [ "$found" -ne 0 ]; then
  echo "campaign: findings under $work/artifacts (logs: $work/*.log)" >&2
  exit 1
fi

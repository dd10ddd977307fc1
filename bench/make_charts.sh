#!/usr/bin/env bash
# Runs the benchmarks behind docs/benchmarks.md's tables with --json, then bench/charts.py on their output:
# OUT/NAME.json (every run), OUT/NAME.txt (what the bench printed), OUT/NAME.png (the chart, with
# the command under it). Run it from a quiet machine; the charts are only as good as the runs.
# usage: bench/make_charts.sh [BUILD_DIR=build] [OUT=bench/charts]
# env: SIZE_MIB (1024), RUNS (7), BENCHES ("load encrypted remote cache python": any subset),
#      PYTHON (python3: runs charts.py).
# A bench that cannot run here (exit 77: no servers, no Python package) is skipped and said so.
set -euo pipefail
cd "$(dirname "$(realpath "$0")")/.."
build=${1:-build}; out=${2:-bench/charts}
size=${SIZE_MIB:-1024}; runs=${RUNS:-7}; python=${PYTHON:-python3}
mkdir -p "$out"
skipped=() made=()

# run NAME ENV... -- COMMAND...: the command line (with its environment) becomes the chart's caption.
run() {
  local name=$1; shift
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  local line="${env[*]}${env:+ }$*"
  echo "make_charts: $line"
  local rc=0
  env "${env[@]}" TZ_BENCH_COMMAND="$line" "$@" > "$out/$name.txt" 2>&1 || rc=$?
  if [[ $rc == 77 ]]; then
    skipped+=("$name ($(tail -n 1 "$out/$name.txt"))"); rm -f "$out/$name.json"
  elif [[ $rc != 0 ]]; then
    echo "make_charts: $name failed (exit $rc); its output:"; tail -n 20 "$out/$name.txt"; exit 1
  else
    made+=("$out/$name.json")
  fi
}

for bench in ${BENCHES:-load encrypted remote cache python}; do
  case $bench in
    load) run load_bench -- "$build/bin/load_bench" --size-mib "$size" --runs "$runs" \
            --json "$out/load_bench.json" ;;
    encrypted) run encrypted_load_bench TZ_BENCH_RUNS="$runs" -- "$build/bin/encrypted_load_bench" "$size" \
                 --json "$out/encrypted_load_bench.json" ;;
    remote) run remote_load_bench -- bench/remote_load_bench.sh --json "$out/remote_load_bench.json" "$build" \
              "$size" 4 "$runs" ;;
    cache) run cache_bench -- "$python" bench/cache_bench.py "$build" --size-mib "$size" --runs "$runs" \
             --json "$out/cache_bench.json" ;;
    python) [[ -x $build/venv/bin/python ]] || { skipped+=("python_load_bench (no $build/venv: scripts/python_build.sh)"); continue; }
            run python_load_bench -- "$build/venv/bin/python" bench/python_load_bench.py --size "$size" \
              --rounds 3 --runs 3 --cli "$build/bin/tensorizer" --ours-python "$build/venv/bin/python" \
              --json "$out/python_load_bench.json" ;;
    *) echo "make_charts: unknown bench '$bench' (load, encrypted, remote, cache, python)"; exit 2 ;;
  esac
done
(( ${#made[@]} )) || { echo "make_charts: no bench ran"; exit 1; }
"$python" bench/charts.py --out "$out" "${made[@]}"
for s in "${skipped[@]}"; do echo "make_charts: skipped $s"; done

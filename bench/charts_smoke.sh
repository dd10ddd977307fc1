#!/usr/bin/env bash
# CTest charts_smoke: a smoke-size load_bench writes --json, bench/charts.py draws it, and the PNG
# must exist with a PNG signature. Exit 77 (skipped) only when matplotlib cannot be imported.
# usage: charts_smoke.sh LOAD_BENCH PYTHON WORKDIR
set -euo pipefail
bench=${1:?usage: charts_smoke.sh LOAD_BENCH PYTHON WORKDIR}; python=${2:?}; work=${3:?}
here=$(dirname "$(realpath "$0")")
if ! "$python" -c 'import matplotlib' 2> /dev/null; then
  echo "charts_smoke: SKIP: $python cannot import matplotlib (scripts/setup.sh installs it)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
"$bench" --smoke --json "$work/load_bench.json" > "$work/load_bench.txt"
"$python" "$here/charts.py" --out "$work/png" "$work/load_bench.json"
png=$work/png/load_bench.png
[[ -s $png ]] || { echo "charts_smoke: FAIL: $png missing or empty"; exit 1; }
# The 8-byte PNG signature: \x89 P N G \r \n \x1a \n.
[[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || { echo "charts_smoke: FAIL: $png is not a PNG"; exit 1; }
echo "charts_smoke: $(stat -c %s "$png") bytes of PNG from $(grep -o '"group"' "$work/load_bench.json" | wc -l) results"

#!/usr/bin/env bash
# Demo: set up, build the CLI, write a ~1 GiB sample model once, then load it in one process
# 1 + TZ_LOADS times and print GB/s of the first load and the median of the loads after it.
#
# Two figures because they answer different questions. The first load of a fresh process meets
# memory the process never touched; on VMs that hand freed memory back to their host (these do,
# see docs/benchmarks.md) each first touch costs ~1.7 s per GiB, whatever the loader, so that
# figure is mostly the machine's. The loads after it find the memory backed and the page cache
# warm: their median is what the engine itself does.
#
# Environment: TZ_BUILD_DIR (default build), TZ_SAMPLE (default /tmp/tz-sample.tensors),
# TZ_SAMPLE_MIB (default 1024), TZ_LOADS (default 5: loads after the first).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${TZ_BUILD_DIR:-build}
sample=${TZ_SAMPLE:-/tmp/tz-sample.tensors}
sample_mib=${TZ_SAMPLE_MIB:-1024}
loads=${TZ_LOADS:-5}
(( loads >= 1 )) || { echo "main.sh: TZ_LOADS must be at least 1" >&2; exit 2; }
python=$(python3 -c 'import sys; print(sys.executable)')

scripts/setup.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE="$python"
cmake --build "$build_dir" --parallel "$(nproc)" --target tensorizer
cli="$build_dir/bin/tensorizer"

if [ -f "$sample" ]; then
  echo "main.sh: using the existing sample $sample ($(du -h "$sample" | cut -f1))"
else
  echo "main.sh: writing a ${sample_mib} MiB sample model to $sample"
  # Written under a temporary name so an interrupted run never leaves a half file that looks done.
  "$cli" synth "$sample.partial" --size-mib "$sample_mib"
  mv "$sample.partial" "$sample"
fi
echo "main.sh: $cli load --json --repeat $((loads + 1)) $sample"
report=$("$cli" load --json --repeat $((loads + 1)) "$sample")
# --repeat reports every run's rate in order (runs_gb_per_s); the first is this process's first load.
"$python" - "$report" <<'PY'
import json, statistics, sys
r = json.loads(sys.argv[1])
rates = r["runs_gb_per_s"]
print(f"main.sh: {r['tensors']} tensors, {r['bytes'] / 1e9:.2f} GB of tensor data, {r['threads']} worker threads, "
      f"{r['readers']} readers, {len(rates)} loads in one process")
print("  GB/s = tensor data bytes / seconds from the load call until every tensor is in place")
print(f"  {'first load, fresh process (memory it never touched)':<60} {rates[0]:6.2f} GB/s")
print(f"  {f'median of the {len(rates) - 1} loads after it (memory and page cache warm)':<60} "
      f"{statistics.median(rates[1:]):6.2f} GB/s")
print("  every load, in order, GB/s: " + " ".join(f"{g:.2f}" for g in rates))
PY

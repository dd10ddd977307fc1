#!/usr/bin/env bash
# Demo: set up, build the CLI, write a ~1 GiB sample model once, then load it and print GB/s.
#
# Environment: TZ_BUILD_DIR (default build), TZ_SAMPLE (default /tmp/tz-sample.tensors),
# TZ_SAMPLE_MIB (default 1024).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${TZ_BUILD_DIR:-build}
sample=${TZ_SAMPLE:-/tmp/tz-sample.tensors}
sample_mib=${TZ_SAMPLE_MIB:-1024}
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
echo "main.sh: $cli load $sample"
"$cli" load "$sample"

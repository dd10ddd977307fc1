#!/usr/bin/env bash
# Makes the bundle that bench/gpu_run.sh runs on a bare GPU machine (docs/gpu.md#running-on-a-bare-gpu-machine: nvcc,
# torch and Python 3.12 there; no Boost, liburing, libsodium, hiredis or ISA-L, no registry):
# stripped binaries (CLI, benches, the GPU suites), the shared libraries that image lacks, our
# Python package built for its interpreter, and the peers as wheels.
#
# Usage: bench/gpu_bundle.sh OUT [BUILD_DIR]   (BUILD_DIR: a normal build, default build). The Python
# module is built in BUILD_DIR-py312 with the same flags (ccache makes the engine's objects hits).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=$1
build=${2:-build}
py312=${TZ_PY312:-/root/.pyenv/versions/3.12.1/bin/python}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/ours/tensorizer" "$out/whl"

bins=(tensorizer gpu_load_bench c_load_bench cuda_test device_load_test api_test secretbox_gpu_test crc32_gpu_test)
cmake --build "$build" --target "${bins[@]}" tensorizer_shared
for b in "${bins[@]}"; do strip --strip-debug -o "$out/bin/$b" "$build/bin/$b"; done
# libtensorizer under its soname (what c_load_bench and api_test ask the loader for).
soname=$(objdump -p "$build/lib/libtensorizer.so" | awk '$1 == "SONAME" {print $2}')
strip --strip-debug -o "$out/lib/$soname" "$(readlink -f "$build/lib/libtensorizer.so")"
# What the binaries need that the GPU image lacks (libcudart comes from there for C++ programs too,
# but the bundled one keeps them independent of where the image keeps it).
for lib in liburing.so.2 libhiredis.so.0.14 libsodium.so.23 libisal.so.2 libcudart.so.13 libssl.so.3 libcrypto.so.3; do
  path=$(ldd "$build/bin/tensorizer" | awk -v l="$lib" '$1 == l {print $3}')
  [ -n "$path" ] && cp -L "$path" "$out/lib/"
done

# tensorizer._C for Python 3.12, from a build beside BUILD_DIR with the same flags.
export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache} CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
cmake -S . -B "$build-py312" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTZ_BUILD_PYTHON=ON -DTZ_BUILD_TESTS=OFF \
  -DTZ_BUILD_BENCH=OFF -DTZ_BUILD_PACKAGE=OFF -DPython_EXECUTABLE="$py312" -DPython3_EXECUTABLE="$py312" \
  -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" >/dev/null
cmake --build "$build-py312" --target _C
cp python/tensorizer/*.py "$out/ours/tensorizer/"
for f in "$build-py312"/python/tensorizer/_C*.so; do strip --strip-debug -o "$out/ours/tensorizer/$(basename "$f")" "$f"; done

python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$out/whl" tensorizer==2.11.1 runai-model-streamer fastsafetensors boto3 \
  botocore s3transfer jmespath redis hiredis libnacl 2>&1 | { grep -v "^WARNING: Location" || true; }
cp bench/gpu_table.py bench/bench_json.py bench/gpu_run.sh bench/python_load_phases.py bench/distributed_bench.py "$out/"
# The Python CUDA tests (test_cuda.py and the helpers it imports), run there against our package.
mkdir -p "$out/pytests" && cp python/tests/*.py "$out/pytests/"
du -sh "$out"

#!/usr/bin/env bash
# The whole test suite: set up, configure, build with every core, run CTest; exits non-zero on any failure.
#
# Environment: TZ_BUILD_DIR (default build) picks the build directory; TZ_SANITIZE_PASS=address (or
# thread) adds a second build and CTest run in "$TZ_BUILD_DIR-<sanitizer>" with that sanitizer.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${TZ_BUILD_DIR:-build}
jobs=$(nproc)
# CMake must run the cross tests with the interpreter setup.sh installed the Python peers into.
python=$(python3 -c 'import sys; print(sys.executable)')

phase() { printf '\ntest.sh: == %s (%d s so far)\n' "$*" "$SECONDS"; }

# configure_build_test DIR [CMAKE ARGS...]: one configure, full build and CTest run in DIR.
configure_build_test() {
  local dir=$1
  shift
  phase "configure $dir"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE="$python" "$@"
  phase "build $dir with $jobs jobs"
  cmake --build "$dir" --parallel "$jobs"
  phase "ctest $dir"
  ctest --test-dir "$dir" --output-on-failure -j2 --no-tests=error
}

phase "setup"
scripts/setup.sh
configure_build_test "$build_dir"
# The Python package: one `pip install` of the repository into build/venv, then its pytest suite
# (API, real tensorizer cross checks, the real-model proof, README examples).
phase "python package: build and install into build/venv"
TZ_VENV="$build_dir/venv" PYTHON="$python" scripts/python_build.sh
phase "python tests"
"$build_dir/venv/bin/python" -m pytest python/tests -q -p no:cacheprovider
phase "python benchmark (smoke)"
"$build_dir/venv/bin/python" bench/python_load_bench.py --smoke --cli "$build_dir/bin/tensorizer" \
  --ours-python "$build_dir/venv/bin/python"
if [ -n "${TZ_SANITIZE_PASS:-}" ]; then
  configure_build_test "$build_dir-$TZ_SANITIZE_PASS" -DTZ_SANITIZE="$TZ_SANITIZE_PASS" -DTZ_BUILD_BENCH=OFF
fi
phase "all passed"

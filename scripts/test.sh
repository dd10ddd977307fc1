#!/usr/bin/env bash
# The whole test suite: set up, configure, build with every core, run CTest; exits non-zero on any failure.
#
# Environment: TZ_BUILD_DIR (default build) picks the build directory. TZ_SANITIZE_PASS (default
# "address thread"; any subset, or none) adds one build and CTest run per sanitizer in
# "$TZ_BUILD_DIR-<sanitizer>" over the suites named below (address: ASan+UBSan; thread: TSan).
# TZ_FUZZ_SMOKE_S (default 5) is the seconds each libFuzzer harness runs on its seeds (0 skips).
#
# The sanitizer builds depend on nothing that runs before their CTest runs, so they start in the
# background (nice 19) once the main build is done and take the CPU time that the main CTest run,
# the Python suite, the benchmarks and the fuzz smoke leave idle. Their output goes to
# "$TZ_BUILD_DIR-<sanitizer>.build.log", whose tail is printed when one fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${TZ_BUILD_DIR:-build}
jobs=$(nproc)
# CMake must run the cross tests with the interpreter setup.sh installed the Python peers into.
python=$(python3 -c 'import sys; print(sys.executable)')
# ... and the tests against tensorizer 2.12.1 with the venv setup.sh makes for it.
tensorizer_2121_python=${TZ_TENSORIZER_2121_VENV:-/opt/tz-peers/tensorizer-2.12.1}/bin/python

# Rebuilds of unchanged sources (the sanitizer pass, a second clone on the same machine) hit ccache.
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
fi

# What the ASan+UBSan pass covers: the code that parses untrusted bytes and moves them (base,
# crypto, format with its malformed-input cases, safetensors, the fuzz-regression replays, the
# scheduler, the engine's host and emulated-device pipelines with fault injection, the node-local
# cache, the network clients against the real servers). Not covered: the Python package, the
# benchmarks and the CLI shell tests, which run the same code from outside.
address_targets=(base_test crypto_test secretbox_test crc32_kernel_test crc32_emulation_test hash_test format_test safetensors_test shards_test engine_test loader_test partial_load_test cache_test
                 device_load_emulated_test cuda_emulation_test cuda_emulation_crypt_test cuda_emulation_extents_test cuda_emulation_ready_test ready_test signing_test net_test
                 fuzz_replay_tensors_file fuzz_replay_tensors_prefix fuzz_replay_crypt_info fuzz_replay_safetensors fuzz_replay_shard_index
                 fuzz_replay_s3_xml fuzz_replay_redis_reply fuzz_replay_http_response)
address_tests='^(base_test|crypto_test|secretbox_test|crc32_kernel_test|crc32_emulation_test|hash_test|format_test|safetensors_test|shards_test|engine_test|loader_test|partial_load_test|cache_test|device_load_emulated_test|cuda_emulation_test|cuda_emulation_crypt_test|cuda_emulation_extents_test|cuda_emulation_ready_test|ready_test|signing_test|net_test_.*|fuzz_replay_.*)(_reference|_reference_2121)?$'
# What the TSan pass covers: the code with threads of its own (the scheduler and its io_uring
# service, the host pipeline's readers and turnstile, the cache's concurrent fill and publisher,
# the emulated device sink's uploader and completion threads, the network clients' Asio and
# hiredis threads). The single-threaded parsers
# are left to the pass above.
thread_targets=(base_test engine_test loader_test partial_load_test shards_test cache_test device_load_emulated_test cuda_emulation_test cuda_emulation_crypt_test cuda_emulation_extents_test cuda_emulation_ready_test ready_test signing_test crc32_emulation_test net_test)
thread_tests='^(base_test|engine_test|loader_test|partial_load_test|shards_test|cache_test|device_load_emulated_test|cuda_emulation_test|cuda_emulation_crypt_test|cuda_emulation_extents_test|cuda_emulation_ready_test|ready_test|signing_test|crc32_emulation_test|net_test_.*)(_reference)?$'

phase() { printf '\ntest.sh: == %s (%d s so far)\n' "$*" "$SECONDS"; }

# configure DIR [CMAKE ARGS...]: configures a RelWithDebInfo build in DIR.
configure() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE="$python" \
    -DTZ_TENSORIZER_2121_PYTHON="$tensorizer_2121_python" "$@"
}

sanitize_passes=()
for sanitize in ${TZ_SANITIZE_PASS:-address thread}; do
  [ "$sanitize" = none ] && continue
  tests_var="${sanitize}_tests"
  [ -n "${!tests_var:-}" ] || { echo "test.sh: unknown sanitizer '$sanitize' in TZ_SANITIZE_PASS" >&2; exit 2; }
  sanitize_passes+=("$sanitize")
done

# sanitizer_builds: the background job. Configures and builds each pass's targets in turn, writing
# the output to DIR.build.log and, when done, the exit status to DIR.build.rc.
sanitizer_builds() {
  renice -n 19 -p "$BASHPID" >/dev/null
  local sanitize dir targets_var rc
  for sanitize in "${sanitize_passes[@]}"; do
    dir="$build_dir-$sanitize" targets_var="${sanitize}_targets[@]" rc=0
    { configure "$dir" -DTZ_SANITIZE="$sanitize" -DTZ_BUILD_BENCH=OFF &&
        cmake --build "$dir" --parallel "$jobs" --target "${!targets_var}"; } >"$dir.build.log" 2>&1 || rc=$?
    echo "$rc" >"$dir.build.rc"
  done
}

# wait_build DIR: waits for the background build of DIR; exits with its log's tail if it failed.
wait_build() {
  local dir=$1 rc
  while [ ! -e "$dir.build.rc" ] && kill -0 "$sanitizer_job" 2>/dev/null; do sleep 2; done
  rc=$(cat "$dir.build.rc" 2>/dev/null || echo "killed")
  if [ "$rc" != 0 ]; then
    tail -n 100 "$dir.build.log" >&2 || true
    echo "test.sh: the build of $dir failed ($rc; whole log: $dir.build.log)" >&2
    exit 1
  fi
}

phase "setup"
scripts/setup.sh
phase "configure $build_dir"
configure "$build_dir"
phase "build $build_dir with $jobs jobs"
cmake --build "$build_dir" --parallel "$jobs"
if [ ${#sanitize_passes[@]} -gt 0 ]; then
  phase "background (nice 19): configure and build ${sanitize_passes[*]/#/$build_dir-}"
  for sanitize in "${sanitize_passes[@]}"; do rm -f "$build_dir-$sanitize.build.rc"; done
  # Job control for this one job: its own process group, which the trap stops with everything in it
  # (cmake, ninja, the compilers) when this script exits early.
  set -m
  sanitizer_builds &
  sanitizer_job=$!
  set +m
  trap 'kill -- -"$sanitizer_job" 2>/dev/null || true' EXIT
fi
phase "ctest $build_dir"
ctest --test-dir "$build_dir" --output-on-failure -j2 --no-tests=error
# The Python package: one `pip install` of the repository into build/venv, then its pytest suite
# (API, real tensorizer cross checks, the real-model proof, README examples).
phase "python package: build and install into build/venv"
TZ_VENV="$build_dir/venv" PYTHON="$python" scripts/python_build.sh
phase "python tests"
"$build_dir/venv/bin/python" -m pytest python/tests -q -p no:cacheprovider
phase "python benchmark (smoke)"
"$build_dir/venv/bin/python" bench/python_load_bench.py --smoke --cli "$build_dir/bin/tensorizer" \
  --ours-python "$build_dir/venv/bin/python"
phase "python load phases (smoke: host, 64 MiB)"
"$build_dir/venv/bin/python" bench/python_load_phases.py --smoke --cli "$build_dir/bin/tensorizer"
"$build_dir/venv/bin/python" bench/python_load_phases.py --smoke --verify --cli "$build_dir/bin/tensorizer"
phase "cloud benchmark (smoke: 16 MiB through the shaping proxy, loopback and cloud profiles)"
# After the Python build (its rows load through build/venv); it starts nginx and RGW itself (exit 77:
# not installed) and asserts only that every load is exact. The servers are stopped after it.
cloud_rc=0
TZ_NET_PORT_BASE=19000 TZ_NET_WORKDIR="$build_dir/cloud-servers" bench/cloud_bench.sh --smoke "$build_dir" 16 1 "loopback cloud" ||
  cloud_rc=$?
for s in nginx rgw; do scripts/servers/$s.sh stop "$build_dir/cloud-servers" >/dev/null 2>&1 || true; done
case $cloud_rc in 0) ;; 77) echo "test.sh: cloud benchmark smoke skipped (servers not installed)" ;; *) exit "$cloud_rc" ;; esac
phase "streaming benchmark (smoke: 8 layers run as their tensors land)"
"$build_dir/venv/bin/python" bench/stream_bench.py --smoke --python "$build_dir/venv/bin/python"
phase "distributed benchmark (smoke: gloo, world 1/2/4, 16 MiB)"
"$build_dir/venv/bin/python" bench/distributed_bench.py --smoke
fuzz_smoke_s=${TZ_FUZZ_SMOKE_S:-5}
if [ "$fuzz_smoke_s" != 0 ]; then
  phase "fuzz smoke: every libFuzzer harness ${fuzz_smoke_s} s on its seeds (clang, build-fuzz)"
  TZ_FUZZ_BUILD_DIR="$build_dir-fuzz" tests/fuzz/smoke.sh "$fuzz_smoke_s"
fi
for sanitize in "${sanitize_passes[@]}"; do
  dir="$build_dir-$sanitize" tests_var="${sanitize}_tests"
  phase "wait for the build of $dir (TZ_SANITIZE=$sanitize)"
  wait_build "$dir"
  phase "ctest $dir (${!tests_var})"
  # tests/tsan.supp: the one known false report (exception_ptr counts inside uninstrumented libstdc++).
  TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp ${TSAN_OPTIONS:-}" \
    ctest --test-dir "$dir" --output-on-failure -j2 --no-tests=error -R "${!tests_var}"
done
phase "all passed"

#!/usr/bin/env bash
# Runs on a bare GPU machine from a bundle made by bench/gpu_bundle.sh: the GPU suites (from a
# directory outside any build tree), test_cuda.py and the CUDA cases of test_distributed.py (NCCL at
# world 1, gloo with CUDA tensors at world 2 on one GPU), then bench/gpu_table.py,
# bench/python_load_phases.py (plain and verified loads) and bench/distributed_bench.py on the GPU
# (per-rank share rate beside a single load, pinned memory per rank). Every output goes under OUT.
# Usage: gpu_run.sh BUNDLE OUT [gpu_table.py options...]
set -uo pipefail
bundle=$(cd "$1" && pwd)
out=$2
shift 2
mkdir -p "$out" /tmp/peers
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/peers "$bundle"/whl/*.whl >"$out/pip.log" 2>&1
# C++ programs take the bundled libraries; Python processes get all but libcudart (torch loads its own).
mkdir -p /tmp/pylib && cp "$bundle"/lib/lib{uring,hiredis,sodium,isal,ssl,crypto}* /tmp/pylib/ 2>/dev/null
ln -sf libsodium.so.23 /tmp/pylib/libsodium.so  # libnacl (tensorizer 2.11.1) asks for the unversioned name
export LD_LIBRARY_PATH=$bundle/lib
cd "$(mktemp -d)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
for t in cuda_test device_load_test api_test secretbox_gpu_test crc32_gpu_test; do
  timeout 120 "$bundle/bin/$t" --test-suite-exclude=reference,reference_2121,http >"$out/$t.log" 2>&1
  echo "$t: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' "$out/$t.log" | tr '\n' ' '))"
done
# Python's device path on the GPU (the reference-vector case skips: no tensorizer 2.11.1 there).
PYTHONPATH=$bundle/ours LD_LIBRARY_PATH=/tmp/pylib timeout 100 python3 -m pytest "$bundle/pytests/test_cuda.py" -q \
  -p no:cacheprovider -rs >"$out/pytest_cuda.log" 2>&1
echo "test_cuda.py: exit $? ($(tail -1 "$out/pytest_cuda.log"))"
# Shares and slices through the device sink, fanned out as CUDA tensors (issue 33 §2).
PYTHONPATH=$bundle/ours LD_LIBRARY_PATH=/tmp/pylib timeout 240 python3 -m pytest "$bundle/pytests/test_distributed.py" -q \
  -p no:cacheprovider -rs -k cuda >"$out/pytest_distributed_cuda.log" 2>&1
echo "test_distributed.py -k cuda: exit $? ($(tail -1 "$out/pytest_distributed_cuda.log"))"
LD_LIBRARY_PATH=/tmp/pylib timeout 500 python3 "$bundle/gpu_table.py" --bin "$bundle/bin" --lib "$bundle/lib" --ours "$bundle/ours" \
  --peers /tmp/peers --json "$out/gpu_table.json" "$@" 2>&1 | tee "$out/gpu_table.txt"
# Where Python's first and later loads spend their time (bench/python_load_phases.py).
PYTHONPATH=$bundle/ours LD_LIBRARY_PATH=/tmp/pylib timeout 120 python3 "$bundle/python_load_phases.py" \
  --cli "$bundle/bin/tensorizer" --lib "$bundle/lib" --json "$out/python_phases.json" 2>&1 | tee "$out/python_phases.txt"
# The same for verified loads (Python's were 0.71x of the hash limit in run 5, the CLI's 0.80x).
PYTHONPATH=$bundle/ours LD_LIBRARY_PATH=/tmp/pylib timeout 120 python3 "$bundle/python_load_phases.py" --verify --procs 2 \
  --loads 3 --cli "$bundle/bin/tensorizer" --lib "$bundle/lib" --json "$out/python_phases_verified.json" 2>&1 \
  | tee "$out/python_phases_verified.txt"
# Partitioned loads onto the GPU: NCCL at world 1, gloo with CUDA tensors at worlds 1 and 2.
for backend in nccl gloo; do
  worlds=1; [[ $backend == gloo ]] && worlds=1,2
  PYTHONPATH=$bundle/ours LD_LIBRARY_PATH=/tmp/pylib timeout 150 python3 "$bundle/distributed_bench.py" --device cuda \
    --backend $backend --worlds $worlds --size-mib 512 --repeat 3 --json "$out/distributed_$backend.json" 2>&1 \
    | tee "$out/distributed_$backend.txt"
done

#!/usr/bin/env bash
# Builds and installs our `tensorizer` Python package (python/, with the C++ engine as tensorizer._C)
# into the virtual environment build/venv with one `pip install` of the repository.
#
# The venv sees the system site-packages (torch, numpy, pytest) but its own site-packages come first,
# so `import tensorizer` there is ours while the system interpreter keeps the real tensorizer 2.11.1
# for the cross tests and benchmarks. Incremental: scikit-build-core keeps its CMake build in
# build/pip/. Environment: TZ_VENV (default build/venv), PYTHON (the base interpreter, python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${TZ_VENV:-build/venv}
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  echo "python_build: creating $venv"
  "$python" -m venv --system-site-packages "$venv"
fi
# Build requirements come from the system site-packages (setup.sh installs them); no downloads.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
"$venv/bin/python" -m pip install --quiet --no-build-isolation --no-deps . 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }
"$venv/bin/python" - <<'PY'
import tensorizer, tensorizer._C as C
print(f"python_build: tensorizer {getattr(tensorizer, '__version__', '?')} from {tensorizer.__file__} (_C {C.version})")
PY

#!/usr/bin/env bash
# Runs tensorizer 2.11.1's own test suite (its PyPI sdist's tests/) against our package, the real
# 2.11.1, or both, offline: moto's in-process mock and moto server stand in for S3 (as the suite
# expects), and upstream_conftest.py for GitHub and the Hugging Face hub (see there).
#
# Usage: tests/python/run_upstream_suite.sh [ours|real|both] [pytest args...]
# Environment: TZ_UPSTREAM_SDIST (tensorizer-2.11.1.tar.gz; default build/upstream/, fetch it with
#   pip download --no-binary :all: --no-deps tensorizer==2.11.1 -d build/upstream),
#   OURS_PYTHON (default build/venv/bin/python, from scripts/python_build.sh), REAL_PYTHON (python3,
#   with the real tensorizer 2.11.1 installed). Needs moto<5 (the suite uses moto.mock_s3),
#   werkzeug, boto3, redis (python) and redis-server. Exit 77 (skipped) when the sdist or moto<5 is
#   absent; otherwise 0 when every selected run passed, else 1. The summary line of each run is
#   printed last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
which=${1:-both}
shift || true
sdist=${TZ_UPSTREAM_SDIST:-build/upstream/tensorizer-2.11.1.tar.gz}
ours=${OURS_PYTHON:-build/venv/bin/python}
real=${REAL_PYTHON:-python3}

if [ ! -f "$sdist" ]; then
  echo "run_upstream_suite: skipped: $sdist not found (pip download --no-binary :all: --no-deps tensorizer==2.11.1 -d build/upstream)" >&2
  exit 77
fi
check_moto='import moto, moto.server, werkzeug, boto3, redis; moto.mock_s3'
work=$(mktemp -d /tmp/tz_upstream_suite.XXXXXX)
trap 'rm -rf "$work"' EXIT
tar -xzf "$sdist" -C "$work" --wildcards '*/tests/*'
# Only tests/ is run, from a folder without the sdist's tensorizer/ beside it.
mv "$work"/tensorizer-*/tests "$work/tests"
cp "$root/tests/python/upstream_conftest.py" "$work/tests/conftest.py"

status=0
summaries=()
run_one() {  # NAME PYTHON [pytest args]
  local name=$1 python=$2
  shift 2
  case $python in /*) ;; */*) python=$root/$python ;; esac  # the suite runs from another folder
  if ! "$python" -c "$check_moto" 2>/dev/null; then
    echo "run_upstream_suite: skipped $name: $python lacks moto<5 (moto.mock_s3), werkzeug, boto3 or redis" >&2
    return 77
  fi
  local where
  where=$("$python" -c 'import tensorizer, os; print(os.path.dirname(tensorizer.__file__))')
  echo "== $name: tensorizer from $where"
  (cd "$work/tests" && "$python" -m pytest -q -p no:cacheprovider -rfE "$@" .) | tee "$work/$name.log"
  local rc=${PIPESTATUS[0]}
  summaries+=("$name: $(tail -n 1 "$work/$name.log")")
  return "$rc"
}

ran=0
for name in ours real; do
  [ "$which" = both ] || [ "$which" = "$name" ] || continue
  python=$ours
  [ "$name" = real ] && python=$real
  run_one "$name" "$python" "$@"
  rc=$?
  [ $rc -eq 77 ] && continue
  ran=1
  [ $rc -ne 0 ] && status=1
done
[ $ran -eq 1 ] || exit 77
printf '%s\n' "${summaries[@]}"
exit $status

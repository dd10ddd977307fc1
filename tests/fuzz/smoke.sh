#!/usr/bin/env bash
# CI smoke for the fuzz harnesses: builds them with clang++ and runs each for SECONDS (default 5)
# from its seeds alone (a fresh work directory); fails on any finding. Needs scripts/setup.sh's clang.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${TZ_FUZZ_BUILD_DIR:-build-fuzz}
TZ_FUZZ_BUILD_DIR=$build TZ_FUZZ_WORK="$build/smoke" TZ_FUZZ_FRESH=1 exec tests/fuzz/campaign.sh "${1:-5}"

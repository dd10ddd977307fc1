#!/bin/bash
# api_exports.sh LIB: libtensorizer.so exports the public API only (api/exports.map): C++
# symbols of namespace tensorizer (and their type information) and the C functions tz_*.
set -euo pipefail
lib=$1
symbols=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | c++filt)
leaked=$(grep -vE '^(tensorizer::|tz_|typeinfo for tensorizer::|typeinfo name for tensorizer::|vtable for tensorizer::|TENSORIZER_0$)' <<<"$symbols" || true)
if [[ -n $leaked ]]; then
  echo "symbols outside the public API:"
  echo "$leaked" | head -40
  exit 1
fi
grep -qx 'tz_model_open' <<<"$symbols"
grep -q '^tensorizer::model::open(' <<<"$symbols"
echo "$(wc -l <<<"$symbols") exported symbols, all public"

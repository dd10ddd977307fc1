#!/bin/bash
# install_consumer.sh BUILD SOURCE FILES: installs the package from BUILD into a temporary prefix,
# then builds and runs the out-of-tree consumers of tools/examples/consumer/ against it, as an
# embedder would: the C++ one with find_package(tensorizer) (CMake), the C one with pkg-config.
# FILES holds the models of tests/api_test_files.hpp (the tz_api_files fixture).
set -euo pipefail
build=$1 source=$2 files=$3
consumer=$source/tools/examples/consumer
work=$(mktemp -d "${TMPDIR:-/tmp}/tz_consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; exit 1; }
for f in include/tensorizer-0/tensorizer.h include/tensorizer-0/tensorizer/tensorizer.hpp \
         include/tensorizer-0/tensorizer/version.h lib/cmake/tensorizer/tensorizerConfig.cmake \
         lib/cmake/tensorizer/tensorizerConfigVersion.cmake lib/pkgconfig/tensorizer.pc bin/tensorizer; do
  [[ -e $prefix/$f ]] || { echo "not installed: $f"; exit 1; }
done
# The public headers name nothing but the standard library.
if grep -rnE '#include [<"](boost|tz/|asio)' "$prefix/include"; then echo "internal header in the public API"; exit 1; fi
# Every dynamic dependency of the installed library and CLI resolves (libcudart through the RUNPATH).
for bin in "$prefix"/lib/libtensorizer.so "$prefix/bin/tensorizer"; do
  if ldd "$bin" | grep 'not found'; then echo "unresolved dependency of $bin"; exit 1; fi
done

# C++: find_package + target_link_libraries, nothing else.
cmake -S "$consumer" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
if ldd "$work/build/app" | grep 'not found'; then echo "the consumer does not find its libraries"; exit 1; fi
out=$("$work/build/app" "$files/plain.tensors")
echo "$out"
grep -qx 'a float32 24 bytes, first 0' <<<"$out"
grep -qx 'b float32 16 bytes, first 10' <<<"$out"
grep -qx 'layer.0.weight float32 4000 bytes, first 0' <<<"$out"
# Errors arrive as values with their kind: the corrupted file fails verification, naming "b".
if err=$("$work/build/app" "$files/corrupt.tensors" 2>&1); then echo "corrupt file loaded"; exit 1; fi
echo "$err"
grep -q "^hash_mismatch: .*tensor 'b'" <<<"$err"

# C: pkg-config --cflags --libs tensorizer.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$consumer/main_c.c" $(pkg-config --cflags --libs tensorizer) -o "$work/capp"
out=$(LD_LIBRARY_PATH=$prefix/lib "$work/capp" "$files/model.safetensors")
echo "$out"
grep -qx 'layer.0.weight float32 4000 bytes' <<<"$out"
[[ $(pkg-config --modversion tensorizer) == $(grep -o '"[0-9.]*"' "$prefix/include/tensorizer-0/tensorizer/version.h" | tr -d '"') ]]
echo "install_consumer: ok"

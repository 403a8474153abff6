#!/usr/bin/env bash
# The consumer test: installs cpattn into a fresh prefix, then builds and runs this folder's
# programs against the installed package only, once through find_package(cpattn) (CMake) and once
# through pkg-config (plain g++), each including a shared object that carries cpattn.
# Usage: run.sh BUILD_DIR WORK_DIR      install an existing build of cpattn
#        run.sh --shared SRC_DIR WORK_DIR
#                                       configure and build cpattn from SRC_DIR as shared libraries
#                                       (the C++ libraries only: no CLI, tests, benchmarks or
#                                       PyTorch package), then install that
# MPIRUN (environment, optional): the mpirun command line; with it the MPI consumer runs too.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ $1 == --shared ]]; then
  src=$2 work=$3
  rm -rf "$work" && mkdir -p "$work"
  echo "consumer: building cpattn as shared libraries"
  cmake -S "$src" -B "$work/cpattn-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DCPATTN_BUILD_CLI=OFF -DCPATTN_BUILD_TESTS=OFF -DCPATTN_BUILD_BENCHMARKS=OFF \
    -DCPATTN_TORCH=OFF >/dev/null
  cmake --build "$work/cpattn-build" >/dev/null
  build=$work/cpattn-build
else
  build=$1 work=$2
  rm -rf "$work" && mkdir -p "$work"
fi
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
echo "consumer: installed into $prefix:"
(cd "$prefix" && find . -type f | sort | sed 's/^/  /')
[[ -f $prefix/include/cpattn/attention.h && -f $prefix/include/cpattn/version.h ]]

echo "consumer: find_package(cpattn)"
cmake -S "$here" -B "$work/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" | grep 'consumer:'
cmake --build "$work/cmake" >/dev/null
export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$work/cmake/consumer"
"$work/cmake/plugin_main"
if [[ -x $work/cmake/consumer_mpi && -n ${MPIRUN:-} ]]; then
  $MPIRUN -n 2 "$work/cmake/consumer_mpi"
fi

echo "consumer: pkg-config cpattn"
pc_dir=$(dirname "$(find "$prefix" -name cpattn.pc | head -n 1)")
export PKG_CONFIG_PATH=$pc_dir
echo "  cflags: $(pkg-config --cflags cpattn)  libs: $(pkg-config --libs cpattn)"
mkdir -p "$work/pc"
# shellcheck disable=SC2046  # pkg-config prints several words on purpose
g++ -std=c++20 -O2 "$here/consumer.cpp" -o "$work/pc/consumer" $(pkg-config --cflags --libs cpattn)
# shellcheck disable=SC2046
g++ -std=c++20 -O2 -shared -fPIC "$here/plugin.cpp" -o "$work/pc/libconsumer_plugin.so" \
  $(pkg-config --cflags --libs cpattn)
g++ -std=c++20 -O2 "$here/plugin_main.cpp" -o "$work/pc/plugin_main" -L"$work/pc" -lconsumer_plugin \
  -Wl,-rpath,"$work/pc"
"$work/pc/consumer"
"$work/pc/plugin_main"
echo "consumer: all ok"

#!/usr/bin/env bash
# Regenerates ffm-cuda's jextract bindings (packages dev.gatun.cuda.ffi.*) from args/*.args.
# Needs jextract (openjdk/jextract, JDK 25 build) on the PATH.
# Usage: regenerate.sh [CUDA_INCLUDE_DIR] [NCCL_INCLUDE_DIR]
#   defaults: CUDA_INCLUDE=${CUDA_INCLUDE:-${CUDA_HOME:-/usr/local/cuda}/include}
#             NCCL_INCLUDE=${NCCL_INCLUDE:-/usr/include}   (the folder holding nccl.h)
# Output replaces ffm-cuda/src/main/java/dev/gatun/cuda/ffi/. Never edit the generated files by hand.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../src/main/java" && pwd)
CUDA_INCLUDE=${1:-${CUDA_INCLUDE:-${CUDA_HOME:-/usr/local/cuda}/include}}
NCCL_INCLUDE=${2:-${NCCL_INCLUDE:-/usr/include}}
command -v jextract >/dev/null || { echo "jextract is not on the PATH" >&2; exit 1; }
[ -f "$CUDA_INCLUDE/cuda.h" ] || { echo "no cuda.h in $CUDA_INCLUDE" >&2; exit 1; }
[ -f "$NCCL_INCLUDE/nccl.h" ] || { echo "no nccl.h in $NCCL_INCLUDE" >&2; exit 1; }

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
gen() { # package header-class args-file header [extra include dirs...]
    local pkg=$1 cls=$2 args=$3 header=$4; shift 4
    local inc=(-I "$CUDA_INCLUDE")
    for d in "$@"; do inc+=(-I "$d"); done
    echo "jextract $pkg.$cls <- $header"
    jextract "${inc[@]}" --output "$OUT" -t "$pkg" --header-class-name "$cls" "@$HERE/args/$args" "$header"
}
gen dev.gatun.cuda.ffi.cudart cudart cudart.args "$CUDA_INCLUDE/cuda_runtime_api.h"
gen dev.gatun.cuda.ffi.driver driver driver.args "$CUDA_INCLUDE/cuda.h"
gen dev.gatun.cuda.ffi.nvrtc nvrtc nvrtc.args "$CUDA_INCLUDE/nvrtc.h"
# cublas_v2.h and cublasLt.h in one header class: a small umbrella header
UMBRELLA="$OUT/cublas_all.h"
printf '#include <cublas_v2.h>\n#include <cublasLt.h>\n' > "$UMBRELLA"
gen dev.gatun.cuda.ffi.cublas cublas cublas.args "$UMBRELLA"
rm -f "$UMBRELLA"
gen dev.gatun.cuda.ffi.nccl nccl nccl.args "$NCCL_INCLUDE/nccl.h" "$NCCL_INCLUDE"

rm -rf "$SRC/dev/gatun/cuda/ffi"
mkdir -p "$SRC/dev/gatun/cuda"
cp -r "$OUT/dev/gatun/cuda/ffi" "$SRC/dev/gatun/cuda/"
echo "bindings regenerated in $SRC/dev/gatun/cuda/ffi"

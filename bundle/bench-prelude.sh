# Sourced by bundle/train-bench.sh and bundle/moe-bench.sh: the part both start with.
#   bench_prelude NAME DEFAULT_WORLD "$@"
# sets W (--world, else DEFAULT_WORLD) and ARGS (every other argument, passed on to both systems), refuses to run
# (exit 2) unless NVLink multicast is switched off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
# NVSHMEM_DISABLE_NVLS=1), exports GATUN_BUNDLE_DIR and PYTHONUNBUFFERED, and writes the GPUs to $OUT/machine.txt.
bench_prelude() {
  local name=$1
  W=$2
  shift 2
  ARGS=()
  while [ $# -gt 0 ]; do
    case $1 in
      --world) W=$2; shift 2 ;;
      *) ARGS+=("$1"); shift ;;
    esac
  done
  if [ "${NCCL_NVLS_ENABLE:-}" != 0 ] || [ "${TORCH_SYMM_MEM_DISABLE_MULTICAST:-}" != 1 ] || [ "${NVSHMEM_DISABLE_NVLS:-}" != 1 ]; then
    echo "$name: refusing to run: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 must be set" >&2
    exit 2
  fi
  export GATUN_BUNDLE_DIR=${GATUN_BUNDLE_DIR:-/tmp/gatun-bundle} PYTHONUNBUFFERED=1
  nvidia-smi -L | tee "$OUT/machine.txt"
}

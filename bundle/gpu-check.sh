#!/usr/bin/env bash
# Runs Gatun's GPU checks and benchmarks from a built bundle on a GPU host (no JDK needed there).
#   bundle/gpu-check.sh [stage...]   stages: tests backend multi vmm threads fault trap nccl-net bench-pointwise launch
#                                    shared shared-processes
#   trap: index_select, update_slice, attention, gather and scatter_add stopping a call on one GPU (a process each): the message names the step and values.
#   (default: tests multi bench-pointwise; on a single-GPU host, multi runs as shared). The benchmark suite against
#   PyTorch is bundle/gpu-suite.sh.
#   shared: the whole MultiGpuCheck with 2, 3 and 4 ranks as threads sharing GPU 0 (SHARED_RANKS="2 3 4").
#   shared-processes: 2 ranks as processes on one GPU (gatun-run --ranks-per-gpu 2); without MPS the check expects the
#   collectives refused at compile time.
# Logs go to $OUT (or ./gpu-check-out). NVLink multicast stays off: the environment passes through unchanged.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}; mkdir -p "$OUT"
B=.bundle/run-gpu-tests.sh
export GATUN_TEST_REPORTS=/tmp/gatun-reports GATUN_BUNDLE_DIR=/tmp/gatun-bundle
NPROC=${NPROC:-$(nvidia-smi -L 2>/dev/null | wc -l)}
JOPT=(--jvm-opt --enable-native-access=ALL-UNNAMED)
stages=("$@"); [ ${#stages[@]} -eq 0 ] && stages=(tests multi bench-pointwise)
echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-unset} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-unset} NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-unset}"
nvidia-smi -L
if [ "$NPROC" -lt 2 ]; then
  for i in "${!stages[@]}"; do [ "${stages[$i]}" = multi ] && { echo "one GPU: the multi stage runs as shared (ranks as threads on GPU 0)"; stages[$i]=shared; }; done
fi
for s in "${stages[@]}"; do
  echo "=== $s"
  case $s in
    tests) timeout 420 $B 2>&1 | tee "$OUT/gpu-tests.log" | grep -E "tests (successful|failed|skipped|found)|MethodSource|=> |Exception" | tail -40 ;;
    backend) timeout 200 $B --include-package dev.gatun.runtime.cuda 2>&1 | tee "$OUT/backend-tests.log" | grep -E "tests (successful|failed|found)|=> |MethodSource" | tail -30 ;;
    shared) for n in ${SHARED_RANKS:-2 3 4}; do echo "--- $n ranks as threads on GPU 0"; timeout 400 $B --main dev.gatun.runtime.cuda.MultiGpuCheck --threads "$n" --ranks-per-gpu "$n" ${MULTI_ARGS:-20 200} 2>&1 | tee "$OUT/shared-$n.log" | tail -8; done ;;
    shared-processes) timeout 120 $B --main dev.gatun.runtime.distributed.Launcher --nproc 2 --ranks-per-gpu 2 "${JOPT[@]}" --main dev.gatun.runtime.cuda.MultiGpuCheck 2 10 2>&1 | tee "$OUT/shared-processes.log" | tail -6 ;;
    multi) timeout 280 $B --main dev.gatun.runtime.distributed.Launcher --nproc "$NPROC" "${JOPT[@]}" --main dev.gatun.runtime.cuda.MultiGpuCheck ${MULTI_ARGS:-20 200} 2>&1 | tee "$OUT/multi.log" | tail -25 ;;
    bench-pointwise) timeout 80 $B --main dev.gatun.runtime.cuda.PointwiseBenchmark 24 200 2>&1 | tee "$OUT/pointwise.log" | tail -12 ;;
    fault) timeout 90 $B --main dev.gatun.runtime.distributed.Launcher --nproc 2 "${JOPT[@]}" --main dev.gatun.runtime.cuda.FaultCheck 2>&1 | tee "$OUT/fault.log" | grep -E "GATUN_BARRIER_TIMEOUT|FAULT|first call|stayed|stopped after|exited" | cut -c1-400 ;;
    nccl-net) NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout 150 $B --main dev.gatun.runtime.distributed.Launcher --nproc "$NPROC" "${JOPT[@]}" --main dev.gatun.runtime.cuda.MultiGpuCheck 6 40 nccl-only 2>&1 | tee "$OUT/nccl-net.log" | tail -8 ;;
    trap) for op in index_select update_slice attention gather scatter_add; do timeout 60 $B --main dev.gatun.runtime.cuda.TrapCheck "$op" 2>&1 | tee -a "$OUT/trap.log" | grep -E "TRAP CHECK|failed with|closed|closing" | cut -c1-400; done ;;
    threads) timeout 120 $B --main dev.gatun.runtime.cuda.ThreadsCheck 2>&1 | tee "$OUT/threads.log" | tail -8 ;;
    vmm) GATUN_SYMMETRIC_HANDLES=vmm timeout 150 $B --main dev.gatun.runtime.distributed.Launcher --nproc "$NPROC" "${JOPT[@]}" --main dev.gatun.runtime.cuda.MultiGpuCheck 6 60 2>&1 | tee "$OUT/vmm.log" | tail -6 ;;
    launch) timeout 60 $B --main dev.gatun.cuda.LaunchOverhead 2000 2>&1 | tee "$OUT/launch.log" | tail -5 ;;
  esac
done

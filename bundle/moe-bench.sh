#!/usr/bin/env bash
# Expert parallelism's dispatch+combine and a Mixtral-shape MoE layer beside PyTorch, in one command, on the GPUs of
# this machine (issue 38's acceptance):
#   bundle/moe-bench.sh [--world W] [more MoeBench options, passed to both systems]
# e.g. bundle/moe-bench.sh --world 2                      (both workloads at their defaults: bf16, 128 tokens of hidden
#                                                           4096, top-2 of 8 experts; the layer at 1, 8, 128 tokens a rank)
#      bundle/moe-bench.sh --world 2 --only dispatch --iters 500
#      bundle/moe-bench.sh --world 2 --iters 1000 --warmup 10000   (both systems warmed the same. Without --warmup,
#                                                           MoeBench warms 10000 calls, the JVM's steady state: after
#                                                           200 its call path is not yet compiled by C2 and one call
#                                                           holds some 25 us more of host time; PyTorch warms 200)
# Gatun's MoeBench (the ranks threads of one process, rank r on GPU r; EP over all W ranks) writes $OUT/gatun-moe.json,
# then bench/moe_torch.py under torchrun (W processes) runs the same workloads on the same inputs (formulas both
# compute), eager (all_to_all_single with the counts read on the host) and captured (a fixed-capacity padded
# all_to_all_single in a CUDA graph), checks its outputs against Gatun's JSON, prints the side-by-side table and writes
# $OUT/moe.md and $OUT/torch-moe.json.
# The options both take: --dtype --tokens --hidden --experts --intermediate --layer-tokens --only --iters --warmup.
# Gatun's own (--ranks-per-gpu, --plan): GATUN_ARGS. Needs the bundle (bundle/build.sh -pl cuda-backend), python3 with
# PyTorch and torchrun; no network. NVLink multicast stays off: the script refuses to run unless it is switched off.
# Env: OUT (default ./moe-bench-out), GATUN (1: run Gatun), TORCH (1: run PyTorch). Files in $OUT: machine.txt,
# moe.log, gatun-moe.json, torch-moe.json, moe.md.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/moe-bench-out}; mkdir -p "$OUT"
. bundle/bench-prelude.sh
bench_prelude moe-bench 2 "$@"
G="$OUT/gatun-moe.json" T="$OUT/torch-moe.json" L="$OUT/moe.log"
if [ "${GATUN:-1}" = 1 ]; then
  rm -f "$G"
  echo "=== Gatun: MoeBench --world $W ${ARGS[*]} ${GATUN_ARGS:-}" | tee -a "$L"
  # shellcheck disable=SC2086
  timeout 300 .bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.MoeBench --world "$W" "${ARGS[@]}" ${GATUN_ARGS:-} --out "$G" 2>&1 \
    | tee -a "$L" | grep -v "^WARNING\|INFO: \|compileKernels"
fi
if [ "${TORCH:-1}" = 1 ]; then
  EXTRA=()
  [ -f "$G" ] && EXTRA+=(--gatun "$G")
  echo "=== PyTorch ($W processes): ${ARGS[*]}" | tee -a "$L"
  timeout 300 torchrun --standalone --nproc_per_node "$W" bench/moe_torch.py "${ARGS[@]}" "${EXTRA[@]}" --out "$T" --md "$OUT/moe.md" 2>&1 \
    | tee -a "$L" | grep -v "^W1\|^\*\*\*\|OMP_NUM_THREADS\|^\s*warnings.warn"
fi

#!/usr/bin/env bash
# The Llama training step beside PyTorch FSDP2, in one command, on the GPUs of this machine:
#   bundle/train-bench.sh [--world W] [more LlamaTrainBench options, passed to both systems]
# e.g. bundle/train-bench.sh --world 2 --config 1b --seq 2048 --batch 1 --compute bf16 --steps 10 --warmup 3
#      bundle/train-bench.sh --world 2 --config 1b --compute f32 --steps 100 --warmup 0 --lr 1e-6   (the loss curves in float32:
#      the batch is the same every step, so at a larger rate the model memorises it within the 100 steps and the
#      losses, a few thousandths, differ by more than 1e-4 relative though by less than 3e-6 absolute)
# Gatun's LlamaTrainBench (the ranks threads of one process, rank r on GPU r; FSDP over W ranks) writes
# $OUT/gatun-train-wW.json, then bench/llama_train_torch.py under torchrun (W processes; eager and torch.compile
# unless TORCH_MODES says otherwise) runs the same shape, data and initial weights, compares each step's loss with
# Gatun's and prints both systems' step time, tokens/s, MFU and memory side by side (and writes $OUT/torch-train-wW.json).
# The options both take: --config --layers --hidden --heads --kv-heads --intermediate --vocab --seq --batch --compute
# --steps --warmup --lr --seed --peak-tflops. Gatun's own (--mode, --recompute, --ranks-per-gpu, --plan): GATUN_ARGS.
# Needs the bundle (bundle/build.sh), python3 with PyTorch and torchrun; no network. NVLink multicast stays off: the
# script refuses to run unless it is switched off.
# The first Gatun run compiles the plan's kernels with NVRTC (about 1,300 for the 1b shape: minutes; cached on disk in
# later runs on the same machine): try --layers 2 first.
# Env: OUT (default ./train-bench-out), TORCH_MODES (eager,compile), GATUN (1: run Gatun), TORCH (1: run PyTorch).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/train-bench-out}; mkdir -p "$OUT"
. bundle/bench-prelude.sh
bench_prelude train-bench 1 "$@"
G="$OUT/gatun-train-w$W.json" T="$OUT/torch-train-w$W.json" L="$OUT/train.log"
if [ "${GATUN:-1}" = 1 ]; then
  rm -f "$G"
  echo "=== Gatun: LlamaTrainBench --world $W ${ARGS[*]} ${GATUN_ARGS:-}" | tee -a "$L"
  # shellcheck disable=SC2086
  timeout 900 .bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.LlamaTrainBench --world "$W" "${ARGS[@]}" ${GATUN_ARGS:-} --out "$G" 2>&1 \
    | tee -a "$L" | grep -v "^WARNING\|INFO: \|compileKernels"
fi
if [ "${TORCH:-1}" = 1 ]; then
  EXTRA=()
  [ -f "$G" ] && EXTRA+=(--gatun "$G")
  echo "=== PyTorch FSDP2 ($W processes): ${ARGS[*]} modes ${TORCH_MODES:-eager,compile}" | tee -a "$L"
  timeout 1200 torchrun --standalone --nproc_per_node "$W" bench/llama_train_torch.py "${ARGS[@]}" --modes "${TORCH_MODES:-eager,compile}" "${EXTRA[@]}" --out "$T" 2>&1 \
    | tee -a "$L" | grep -v "^W1\|^\*\*\*\|OMP_NUM_THREADS\|^\s*warnings.warn"
fi

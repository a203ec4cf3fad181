#!/usr/bin/env bash
# The GPU benchmark suite: Gatun and PyTorch on the same GPUs, in one command, side by side.
#   bundle/gpu-suite.sh [--worlds 2,4] [--iters 200] [--only all_reduce,seeds,mlp,ar_norm,input_path,host_overhead,norms]
#                       (the default --only; llama and archs are added by name: --only llama, --only archs or --only ...,llama)
#                       [--gatun 0|1] [--torch 0|1] [--gatun-args "..."] [--modes replay,eager]
# norms (LayerNorm, RMSNorm, softmax, the loop-ordering seed; or some of them by name: layernorm, rmsnorm, softmax,
# loop_order) runs on one GPU at world 1 only: requested with other worlds, it gets a world-1 pass of its own first
# (bundle/gpu-suite.sh --worlds 1 --only norms runs just that). --modes replay measures under CUDA graphs only (both
# systems; for PyTorch's seeds, MLP and norms: only the processes of mode replay), which halves the PyTorch processes.
# Needs the bundle (bundle/build.sh, no JDK on the GPU host), python3 with PyTorch and torchrun.
# Writes to $OUT (default ./gpu-suite-out): rows.jsonl (every measurement of both systems), results.csv,
# results.json, results.md (the table for docs/BENCHMARKS.md) and the logs; prints the table last.
# NVLink multicast stays off: the script refuses to run unless it is switched off, and passes that on.
# llama (not in the default --only; bundle/gpu-suite.sh --worlds 2 --only llama runs just it, about 2-3 minutes on
# two GPUs): at each world W, the Llama decoder at tensor parallelism W (W = 1: one GPU, beside transformers) on a
# random checkpoint of
# Llama-3.2-1B's shape (bf16, 2.5 GB, written once to $LLAMA_DIR, default /tmp/gatun-llama-1b, by one process before
# any rank reads it), Gatun's LlamaBench under Gatun's launcher (--nproc W --tp W) and then bench/llama_torch.py --tp W
# under torchrun (a hand-written Megatron-style TP Llama, decode eager and as one CUDA graph), which compares tokens,
# first-step logits and times with Gatun's JSON and, with LLAMA_CHECK=1 (default), checks its own logits against
# transformers on one GPU. Env: LLAMA_PROMPT (512), LLAMA_NEW (32), LLAMA_RUNS (11: one warm-up, then ten timed: the
# GPU's clocks are still rising over the first two), LLAMA_WARMUP (16: generations before the timed ones, the first
# of LLAMA_RUNS among them, for both systems; on a machine just started the same step read 1.04 to 1.13 ms after 4), LLAMA_BATCH (1),
# LLAMA_DIR, LLAMA_CHECK, LLAMA_CONFIG (1b; tiny for a quick try), LLAMA_GATUN_ARGS (more LlamaBench options, e.g.
# "--profile 20"), LLAMA_VARIANTS (Gatun runs one after another with these environment settings, e.g.
# "default GATUN_PROGRAMMATIC_LAUNCH=0 GATUN_PROGRAMMATIC_LAUNCH=1,GATUN_VERBOSE=1": a comma joins the settings of
# one variant; PyTorch compares with the last), LLAMA_FP32=1 (one GPU: also score both systems'
# tokens with the float32 model, to tell near ties from errors), LLAMA_DTYPE (bf16; f32 at world 1: both systems run
# the checkpoint in float32, where two correct computations agree token for token). Writes $OUT/llama.log, gatun-llama-tpW.json
# (and one JSON per variant) and torch-llama-tpW.json (not rows.jsonl).
# archs (not in the default --only; bundle/gpu-suite.sh --worlds 1 --only archs; one GPU, about 5-6 minutes on an H200):
# the bandwidth-fraction table of the decoder family. Each architecture of ARCHS (default all ten: llama, mistral,
# qwen2, qwen3, gemma, gemma2, phi3, mixtral, qwen2_moe, qwen3_moe) at about a billion parameters (ArchShapes says which
# shape), a random bf16 checkpoint written by Gatun (ArchBench --write, ARCH_THREADS at once, default 6) under ARCH_ROOT
# (default /tmp/gatun-archs; written once, kept), its decode step at batch 1 measured by Gatun's ArchBench (a process
# each; a model the backend refuses to compile is a row that says so) and then by transformers (bench/arch_torch.py
# measure, eager, bf16, one process for all, on the same files), then bench/arch_torch.py table: Gatun's and
# transformers' ms/token, the weight bytes a step reads, each one's fraction of 4.8 TB/s, Gatun's fraction over its
# llama one. Env: ARCH_PROMPT (128), ARCH_NEW (32), ARCH_RUNS (6: the first a warm-up), ARCH_WARMUP (2). Writes
# $OUT/archs.log, gatun-arch-NAME.json, torch-arch-NAME.json and archs.md (not rows.jsonl). Needs no network.
# nccl_symmetric (not in the default --only; at worlds of 2 or more): NCCL's all-reduce on cudaMalloc'd buffers and in
# a symmetric NCCL window (NCCL's symmetric kernels), through Gatun's NCCL bindings, ranks as threads of one process
# (NcclSymmetricBench: f32 and bf16, 8 B to 64 MiB, in place and out of place, --iters ignored: 2,000 calls a cell).
# Writes $OUT/nccl-symmetric.log and nccl-symmetric-wW.jsonl (not rows.jsonl).
# TORCH_DEADLINE_S (420): the PyTorch all-reduce and ar_norm processes start no new cell after this many seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-suite-out}; mkdir -p "$OUT"
ITERS=200 ONLY=all_reduce,seeds,mlp,ar_norm,input_path,host_overhead,norms GATUN=1 TORCH=1 GATUN_ARGS="" WORLDS="" MODES=replay,eager
while [ $# -gt 0 ]; do
  case $1 in
    --worlds) WORLDS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --gatun) GATUN=$2; shift 2 ;;
    --torch) TORCH=$2; shift 2 ;;
    --gatun-args) GATUN_ARGS=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    *) echo "gpu-suite: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ "${NCCL_NVLS_ENABLE:-}" != 0 ] || [ "${TORCH_SYMM_MEM_DISABLE_MULTICAST:-}" != 1 ] || [ "${NVSHMEM_DISABLE_NVLS:-}" != 1 ]; then
  echo "gpu-suite: refusing to run: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 must be set" >&2
  exit 2
fi
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ -z "$WORLDS" ]; then WORLDS=2; [ "$NGPU" -ge 4 ] && WORLDS=2,4; fi
ROWS=$OUT/rows.jsonl
LLAMA_PROMPT=${LLAMA_PROMPT:-512} LLAMA_NEW=${LLAMA_NEW:-32} LLAMA_RUNS=${LLAMA_RUNS:-11} LLAMA_BATCH=${LLAMA_BATCH:-1} LLAMA_WARMUP=${LLAMA_WARMUP:-16}
LLAMA_CONFIG=${LLAMA_CONFIG:-1b} LLAMA_CHECK=${LLAMA_CHECK:-1} LLAMA_GATUN_ARGS=${LLAMA_GATUN_ARGS:-} LLAMA_DTYPE=${LLAMA_DTYPE:-bf16}
LLAMA_DIR=${LLAMA_DIR:-/tmp/gatun-llama-$LLAMA_CONFIG}
ARCHS=${ARCHS:-llama,mistral,qwen2,qwen3,gemma,gemma2,phi3,mixtral,qwen2_moe,qwen3_moe} ARCH_ROOT=${ARCH_ROOT:-/tmp/gatun-archs}
ARCH_PROMPT=${ARCH_PROMPT:-128} ARCH_NEW=${ARCH_NEW:-32} ARCH_RUNS=${ARCH_RUNS:-6} ARCH_WARMUP=${ARCH_WARMUP:-2}
B=.bundle/run-gpu-tests.sh
export GATUN_BUNDLE_DIR=${GATUN_BUNDLE_DIR:-/tmp/gatun-bundle} PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$OUT/machine.txt"
nvidia-smi topo -m >> "$OUT/machine.txt" 2>&1

# Passes "world:workloads": the one-GPU workloads only at world 1 (a pass of their own when 1 is not among the worlds).
ONE_GPU=,norms,layernorm,rmsnorm,softmax,loop_order,archs,
ONLY_ONE="" ONLY_MULTI=""
for w in ${ONLY//,/ }; do
  if [[ $ONE_GPU == *,$w,* ]]; then ONLY_ONE+=${ONLY_ONE:+,}$w; else ONLY_MULTI+=${ONLY_MULTI:+,}$w; fi
done
PASSES=()
if [ -n "$ONLY_ONE" ] && [[ ,$WORLDS, != *,1,* ]]; then PASSES+=("1:$ONLY_ONE"); fi
for W in ${WORLDS//,/ }; do
  ONLY_W=$ONLY
  [ "$W" = 1 ] || ONLY_W=$ONLY_MULTI
  [ -n "$ONLY_W" ] && PASSES+=("$W:$ONLY_W")
done

# The Llama decoder at tensor parallelism W (the llama workload): Gatun under its launcher, then PyTorch under torchrun.
llama() {
  local W=$1 L="$OUT/llama.log" G="$OUT/gatun-llama-tp$1.json" T="$OUT/torch-llama-tp$1.json"
  local SHAPE=(--prompt "$LLAMA_PROMPT" --new "$LLAMA_NEW" --runs "$LLAMA_RUNS" --warmup "$LLAMA_WARMUP" --batch "$LLAMA_BATCH")
  if [ ! -f "$LLAMA_DIR/config.json" ] || [ ! -f "$LLAMA_DIR/model.safetensors" ]; then
    # written by one process into a directory of its own, then moved into place: no rank reads a half-written one
    echo "=== Llama: writing a random $LLAMA_CONFIG checkpoint to $LLAMA_DIR" | tee -a "$L"
    rm -rf "$LLAMA_DIR.partial" "$LLAMA_DIR"
    timeout 300 $B --main dev.gatun.runtime.cuda.LlamaBench --write-only --config "$LLAMA_CONFIG" --dir "$LLAMA_DIR.partial" 2>&1 | tee -a "$L" | grep -v "^WARNING"
    if [ -f "$LLAMA_DIR.partial/model.safetensors" ]; then mv "$LLAMA_DIR.partial" "$LLAMA_DIR"
    else echo "gpu-suite: llama skipped: the checkpoint was not written" | tee -a "$L"; return; fi
  fi
  rm -f "$G" "$T"
  if [ "$GATUN" = 1 ]; then
    # LLAMA_VARIANTS: Gatun runs with these environment settings, one after the other (the last one's JSON is compared)
    for V in ${LLAMA_VARIANTS:-default}; do
      local ENVV=() GV="$G"
      [ "$V" != default ] && IFS=, read -ra ENVV <<< "$V" && GV="${G%.json}-${V//[^A-Za-z0-9_]/_}.json"
      echo "=== Gatun, Llama $LLAMA_CONFIG at TP $W: prompt $LLAMA_PROMPT, $LLAMA_NEW new tokens, batch $LLAMA_BATCH ($V)" | tee -a "$L"
      if [ "$W" = 1 ]; then
        env "${ENVV[@]}" timeout 300 $B --main dev.gatun.runtime.cuda.LlamaBench --dir "$LLAMA_DIR" "${SHAPE[@]}" --dtype "$LLAMA_DTYPE" $LLAMA_GATUN_ARGS --out "$GV" 2>&1 \
          | tee -a "$L" | grep -v "^WARNING\|INFO: \|compileKernels"
      else
        env "${ENVV[@]}" timeout 300 $B --main dev.gatun.runtime.distributed.Launcher --nproc "$W" --timeout 280 --jvm-opt --enable-native-access=ALL-UNNAMED \
          --main dev.gatun.runtime.cuda.LlamaBench --dir "$LLAMA_DIR" --tp "$W" "${SHAPE[@]}" $LLAMA_GATUN_ARGS --out "$GV" 2>&1 \
          | tee -a "$L" | grep -v "^WARNING\|INFO: \|compileKernels"
      fi
      [ "$GV" != "$G" ] && [ -f "$GV" ] && cp "$GV" "$G"
    done
  fi
  if [ "$TORCH" = 1 ]; then
    local EXTRA=()
    [ -f "$G" ] && EXTRA+=(--gatun "$G")
    if [ "$W" = 1 ]; then
      # one GPU: Hugging Face transformers (eager, KV cache) on the same checkpoint
      echo "=== PyTorch, Llama $LLAMA_CONFIG on one GPU (transformers)" | tee -a "$L"
      [ "${LLAMA_FP32:-0}" = 1 ] && [ -f "$G" ] && EXTRA+=(--fp32)   # each system's tokens scored by the float32 model: near ties
      [ "$LLAMA_DTYPE" = f32 ] && EXTRA+=(--dtype float32)
      timeout 300 python3 bench/llama_torch.py --dir "$LLAMA_DIR" "${SHAPE[@]}" "${EXTRA[@]}" --out "$T" 2>&1 \
        | tee -a "$L" | grep -v "^\s*warnings.warn"
    else
      echo "=== PyTorch, Llama $LLAMA_CONFIG at TP $W (torchrun)" | tee -a "$L"
      [ "$LLAMA_CHECK" = 1 ] && EXTRA+=(--check)
      timeout 300 torchrun --standalone --nproc_per_node "$W" bench/llama_torch.py --tp "$W" --dir "$LLAMA_DIR" "${SHAPE[@]}" "${EXTRA[@]}" --out "$T" 2>&1 \
        | tee -a "$L" | grep -v "^W1\|^\*\*\*\|OMP_NUM_THREADS\|^\s*warnings.warn"
    fi
  fi
}

# The bandwidth-fraction table (the archs workload): the checkpoints, Gatun a process an architecture, transformers, the table.
archs() {
  local L="$OUT/archs.log" SHAPE=(--prompt "$ARCH_PROMPT" --new "$ARCH_NEW" --runs "$ARCH_RUNS" --warmup "$ARCH_WARMUP") T0=$SECONDS
  echo "=== archs: the random bf16 checkpoints of $ARCHS under $ARCH_ROOT (those missing are written)" | tee -a "$L"
  timeout 600 $B --main dev.gatun.runtime.cuda.ArchBench --write "$ARCH_ROOT" --archs "$ARCHS" --threads "${ARCH_THREADS:-6}" 2>&1 \
    | tee -a "$L" | grep -v "^WARNING"
  for A in ${ARCHS//,/ }; do
    rm -f "$OUT/gatun-arch-$A.json" "$OUT/torch-arch-$A.json"
    [ "$GATUN" = 1 ] || continue
    if [ ! -f "$ARCH_ROOT/$A/model.safetensors" ]; then echo "archs: $A skipped: no checkpoint in $ARCH_ROOT/$A" | tee -a "$L"; continue; fi
    echo "=== Gatun, $A: prompt $ARCH_PROMPT, $ARCH_NEW new tokens, batch 1, bf16 ($((SECONDS - T0)) s into archs)" | tee -a "$L"
    timeout 300 $B --main dev.gatun.runtime.cuda.ArchBench --arch "$A" --dir "$ARCH_ROOT/$A" "${SHAPE[@]}" --out "$OUT/gatun-arch-$A.json" 2>&1 \
      | tee -a "$L" | grep -v "^WARNING\|INFO: \|compileKernels"
  done
  if [ "$TORCH" = 1 ]; then
    echo "=== transformers, $ARCHS (eager, bf16, one process; $((SECONDS - T0)) s into archs)" | tee -a "$L"
    timeout 900 python3 bench/arch_torch.py measure --root "$ARCH_ROOT" --out-dir "$OUT" --archs "$ARCHS" "${SHAPE[@]}" 2>&1 \
      | tee -a "$L" | grep -v "^\s*warnings.warn"
  fi
  echo "=== the bandwidth-fraction table ($((SECONDS - T0)) s for archs)" | tee -a "$L"
  python3 bench/arch_torch.py table --out-dir "$OUT" --archs "$ARCHS" --md "$OUT/archs.md" 2>&1 | tee -a "$L"
}

for P in "${PASSES[@]}"; do
  W=${P%%:*} ONLY_W=${P#*:}
  if [ "$W" -gt "$NGPU" ]; then echo "gpu-suite: world $W skipped: $NGPU GPU(s)"; continue; fi
  # llama and archs run by themselves (not through GpuSuite or torch_suite.py)
  REST=""
  for w in ${ONLY_W//,/ }; do
    if [ "$w" = llama ]; then llama "$W"
    elif [ "$w" = archs ]; then archs
    elif [ "$w" = nccl_symmetric ]; then
      echo "=== NCCL's all-reduce, ordinary and symmetric kernels, $W GPU(s)" | tee -a "$OUT/nccl-symmetric.log"
      timeout 600 $B --main dev.gatun.runtime.cuda.NcclSymmetricBench --world "$W" --out "$OUT/nccl-symmetric-w$W.jsonl" 2>&1 \
        | tee -a "$OUT/nccl-symmetric.log" | grep -v "^WARNING"
    else REST+=${REST:+,}$w; fi
  done
  ONLY_W=$REST
  [ -n "$ONLY_W" ] || continue
  [ "$GATUN" = 1 ] && echo "=== Gatun, $W GPU(s): $ONLY_W" && timeout 1200 $B --main dev.gatun.runtime.distributed.Launcher --nproc "$W" --jvm-opt --enable-native-access=ALL-UNNAMED \
    --main dev.gatun.runtime.cuda.GpuSuite --out "$ROWS" --iters "$ITERS" --only "$ONLY_W" --modes "$MODES" $GATUN_ARGS 2>&1 | tee -a "$OUT/gatun.log" \
    | grep -v "^WARNING"
  # PyTorch: the all-reduce in one process; torch.compile needs one process per shape and mode
  [ "$TORCH" = 1 ] || continue
  echo "=== PyTorch, $W GPU(s): $ONLY_W"
  torch() { timeout "${1}" torchrun --standalone --nproc_per_node "$W" bench/torch_suite.py "${@:2}" --out "$ROWS" --iters "$ITERS" 2>&1 \
    | tee -a "$OUT/torch.log" | grep -v "^W1\|^\*\*\*\|OMP_NUM_THREADS\|^\s*warnings.warn"; }
  [[ ,$ONLY_W, == *,all_reduce,* ]] && torch 600 --workload all_reduce --deadline-s "${TORCH_DEADLINE_S:-420}"
  [[ ,$ONLY_W, == *,ar_norm,* ]] && torch 600 --workload ar_norm --deadline-s "${TORCH_DEADLINE_S:-420}"
  python3 bench/torch_suite.py --workload list-jobs --world "$W" | while read -r job; do
    wl=$(sed -n 's/.*--workload \([a-z_]*\).*/\1/p' <<< "$job")
    op=$(sed -n 's/.*--op \([a-z_]*\).*/\1/p' <<< "$job")  # norms jobs: one op each, selectable by name
    mode=$(sed -n 's/.*--mode \([a-z]*\).*/\1/p' <<< "$job")  # replay or eager, as --modes asks
    [ -n "$mode" ] && [[ ,$MODES, != *,$mode,* ]] && continue  # --modes replay: no torch.compile default-mode or eager process
    if [[ ,$ONLY_W, == *,$wl,* ]] || { [ -n "$op" ] && [[ ,$ONLY_W, == *,$op,* ]]; }; then torch 240 $job < /dev/null; fi
  done
done
[ -s "$ROWS" ] && python3 bench/report.py "$ROWS" --csv "$OUT/results.csv" --json "$OUT/results.json" --md "$OUT/results.md"

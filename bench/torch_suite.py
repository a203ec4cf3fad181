#!/usr/bin/env python3
"""PyTorch peer of Gatun's benchmark suite: the same workloads, one JSON row per measured cell.

Run on one machine with W GPUs (NVLink), through torchrun:

    torchrun --nproc_per_node W bench/torch_suite.py --workload all_reduce --out FILE [--iters N] [--dtypes f32,bf16]
    torchrun --nproc_per_node W bench/torch_suite.py --workload ar_norm --out FILE [--iters N]
    torchrun --nproc_per_node W bench/torch_suite.py --workload seeds --shape S --mode replay|eager --out FILE
    torchrun --nproc_per_node W bench/torch_suite.py --workload mlp --tokens T --mode replay|eager --out FILE
    torchrun --nproc_per_node 1 bench/torch_suite.py --workload norms --op OP --shape RxC --dtype f32|bf16
             --mode replay|eager --out FILE                          # OP: layernorm, rmsnorm, softmax, loop_order
    python3 bench/torch_suite.py --workload list-jobs --world W     # the seeds/mlp/norms argument lists, one a line

Other options: --warmup N (default 50, at least 20), --deadline-s S (default 120), --grace-s S (default 60).

Workloads
  all_reduce  sides 8, 64, 256, 512, 1024, 4096 (side x side), per dtype: nccl (torch.distributed.all_reduce),
              symm_one_shot (torch.ops.symm_mem.one_shot_all_reduce), symm_two_shot
              (torch.ops.symm_mem.two_shot_all_reduce_), each eager and captured in a torch.cuda.CUDAGraph.
  ar_norm     bf16 [T, H], T 1, 8, 64, 256, H 4096 and 8192: h = all_reduce(x) + residual;
              y = h * rsqrt(mean(h * h, -1) + 1e-6) * w (RMSNorm in float32, as Llama's), unfused eager after
              NCCL's all_reduce (nccl+eager) or symm_mem's one-shot on a symmetric input (symm_one_shot+eager),
              each eager and captured in a torch.cuda.CUDAGraph; checked against float64.
  seeds       x [S, S] float32; a = ar(x+1), b = ar(x+2), c = ar(x+3), d = ar(a+b+c), ar = all-reduce (sum),
              written with functional collectives; compile_auto_select (torch.compile with
              torch._inductor.config._collective.auto_select = True; mode replay = mode="reduce-overhead",
              mode eager = the default mode) and, in the eager process only, eager (uncompiled).
  mlp         bfloat16 tensor-parallel MLP block, H = 4096, F = 4H split over W ranks (W1 column-parallel
              [H, F/W], W2 row-parallel [F/W, H]); y = all_reduce(gelu(x @ W1) @ W2) with erf gelu;
              x [T, H] the same on every rank. Same variants as seeds.
  norms       one GPU (world 1 only; list-jobs lists them for --world 1), one process per op, shape, dtype and
              mode; ops written from primitives exactly as Gatun's NormWorkloads writes them:
                layernorm   d = x - x.mean(-1, keepdim=True); y = d * rsqrt((d * d).mean(-1, keepdim=True) + 1e-5) * w + b
                rmsnorm     y = x * rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w
                softmax     e = exp(x - x.amax(-1, keepdim=True)); y = e / e.sum(-1, keepdim=True)
              each at [4096, 4096] and [32768, 1024], f32 and bf16 (the functions take the dtype's tensors; eager
              bf16 ops round every intermediate to bf16, inductor computes in float32 inside its kernels);
                loop_order  y = sum(sum(x, -1)); z = x / 10; z_t = z.t().contiguous().t(), returns (y, z_t),
              4096x4096 f32. Variants: eager (the primitives), compile (torch.compile of the primitives),
              eager_nn and compile_nn (torch.nn.functional.layer_norm / rms_norm / softmax, the stronger peer;
              not for loop_order), and d2d_copy, the floor: dst.copy_(src) of uint8 tensors moving as many bytes
              (half read, half written) as the cell must. Mode eager: calls one by one; torch.compile in its
              default mode. Mode replay: eager and eager_nn captured in a torch.cuda.CUDAGraph; torch.compile
              with mode="reduce-overhead", the inputs marked static (torch._dynamo.mark_static_address: read in
              place, as Gatun reads device inputs, rather than copied into cudagraph trees' buffers each call);
              d2d_copy uncaptured in both. Every result is checked against float64 (from the inputs as held)
              once before timing; a wrong one is a FAILED row ("WrongResult: ...") with its error, not timed.
              Extra fields: moved_bytes (bytes read once + written once), gbps (moved_bytes / pipelined time),
              copy_gbps (this process's d2d_copy) and of_copy (gbps / copy_gbps); event_median_us (median GPU
              time of one call, CUDA events around each of `calls` calls back to back) and event_pipelined_us
              (CUDA events around the pipelined loop, divided by `calls`).

Row schema (one JSON object a line, appended to --out by rank 0 only; Gatun's rows have the same fields):
  system "pytorch"; workload (norms: the op); variant; mode "replay"|"eager"; dtype "f32"|"bf16"; shape "SxS",
  "Tx4096" or (norms) "RxC";
  bytes (one rank's all-reduce input; seeds: x; mlp: the all-reduced [T, 4096] tensor); world;
  median_us, p10_us, p90_us (per-call host wall time, enqueue to completion, torch.cuda.synchronize() after
  every call, over `calls` timed calls after the warm-ups; rank 0's clock); pipelined_us (`calls` calls back
  to back, one synchronize at the end, divided by `calls`); calls; correct (every rank within tolerance;
  null if not checked); max_rel_err (||out - ref|| / ||ref|| against a float64 reference, max over ranks);
  chosen (for compile variants: the collectives found in inductor's generated code, e.g. "one_shot x4");
  error (null, or "ExceptionType: message" for a FAILED row; then the timings are null); device; versions.

What each cell includes (say so when comparing):
  nccl            a copy of the fresh input into the all-reduce buffer plus the in-place all_reduce, per call
                  (in the replay variant the copy is captured in the graph too).
  symm_one_shot   the input already lives in the symmetric buffer (out of place: no copy per call).
  symm_two_shot   a copy of the fresh input into the symmetric buffer plus the in-place two_shot_all_reduce_.
  compile_*       whatever the compiled program does, including cudagraph trees' copy of the input x into its
                  static input buffer under mode="reduce-overhead" (weights are static parameters).

Never hangs silently: a variant that would start after --deadline-s is recorded as an error row ("Deadline:
..."); if the process is still running --grace-s after the deadline (a hung collective), a watchdog records
the variant in progress and the ones not run as error rows and exits the process (exit status 3).
Failures and wrong results are recorded as rows, never skipped.

Safety: NVLink multicast stays off. The script refuses to run (exit 2) unless NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1, and it never changes them. It calls only
one_shot_all_reduce, two_shot_all_reduce_ and plain NCCL, and refuses to run any compiled code that mentions
multimem.

--device cpu (gloo) exists only to test this script's control flow on a machine without a GPU.
"""
import argparse
import json
import math
import os
import re
import sys
import threading
import time
import traceback
import warnings

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

ALL_REDUCE_SIDES = [8, 64, 256, 512, 1024, 4096]
ALL_REDUCE_VARIANTS = [("nccl", "eager"), ("nccl", "replay"),
                       ("symm_one_shot", "eager"), ("symm_one_shot", "replay"),
                       ("symm_two_shot", "eager"), ("symm_two_shot", "replay")]
SEEDS_SIDES = [4, 64, 256, 1024]
AR_NORM_TOKENS = [1, 8, 64, 256]
AR_NORM_HIDDEN = [4096, 8192]
AR_NORM_EPS = 1e-6
AR_NORM_VARIANTS = [("nccl+eager", "eager"), ("nccl+eager", "replay"),
                    ("symm_one_shot+eager", "eager"), ("symm_one_shot+eager", "replay")]
MLP_TOKENS = [8, 128]
HIDDEN = 4096
FFN = 4 * HIDDEN
MLP_CHECK_ROWS = 4
TOLERANCE = {"f32": 1e-5, "bf16": 1e-2}
NORM_OPS = ["layernorm", "rmsnorm", "softmax"]
NORM_SHAPES = [(4096, 4096), (32768, 1024)]
NORM_DTYPES = ["f32", "bf16"]
LOOP_ORDER_SHAPE = (4096, 4096)
NORM_EPS = {"layernorm": 1e-5, "rmsnorm": 1e-6}
NORM_VARIANTS = ["d2d_copy", "eager", "compile", "eager_nn", "compile_nn"]
LOOP_ORDER_VARIANTS = ["d2d_copy", "eager", "compile"]
DTYPE_BYTES = {"f32": 4, "bf16": 2}
# fields some workloads add to the schema's (passed from a cell's result to its row when present)
EXTRA_FIELDS = ["gbps", "copy_gbps", "of_copy", "event_median_us", "event_pipelined_us", "floor"]
MLP_TOLERANCE = 2e-2
ROW_FIELDS = ["system", "workload", "variant", "mode", "dtype", "shape", "bytes", "world",
              "median_us", "p10_us", "p90_us", "pipelined_us", "calls", "correct", "max_rel_err",
              "chosen", "error", "device", "versions"]
MULTIMEM = re.compile(r"multimem", re.IGNORECASE)


def check_env():
    bad = [f"{k}={os.environ.get(k)!r} (must be {v!r})" for k, v in SAFE_ENV.items() if os.environ.get(k) != v]
    if bad:
        print("torch_suite.py: refusing to run, NVLink multicast must stay off: " + ", ".join(bad)
              + ". Set NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1.",
              file=sys.stderr)
        sys.exit(2)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", required=True, choices=["all_reduce", "ar_norm", "seeds", "mlp", "norms", "list-jobs"])
    p.add_argument("--out", help="JSON-lines file the rows are appended to (rank 0)")
    p.add_argument("--iters", type=int, default=200, help="timed calls per cell (default 200)")
    p.add_argument("--warmup", type=int, default=50, help="warm-up calls per cell (default 50, at least 20)")
    p.add_argument("--dtypes", default="f32,bf16", help="all_reduce dtypes (default f32,bf16)")
    p.add_argument("--shape", help="seeds: the side S of x [S, S]; norms: RxC, x [R, C]")
    p.add_argument("--op", choices=NORM_OPS + ["loop_order"], help="norms: the op")
    p.add_argument("--dtype", choices=NORM_DTYPES, help="norms: f32 or bf16")
    p.add_argument("--tokens", type=int, help="mlp: tokens T of x [T, 4096]")
    p.add_argument("--mode", choices=["replay", "eager"], help="seeds, mlp, norms: replay or eager")
    p.add_argument("--world", type=int, help="list-jobs: the number of GPUs")
    p.add_argument("--deadline-s", type=float, default=120.0,
                   help="no variant starts after this many seconds from the start (default 120)")
    p.add_argument("--grace-s", type=float, default=60.0,
                   help="a variant still running this long after the deadline is recorded as timed out "
                        "and the process exits (default 60)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu (gloo) only tests this script's control flow; the measurements need cuda")
    a = p.parse_args(argv)
    if a.workload == "list-jobs":
        if a.world is None:
            p.error("list-jobs needs --world W")
        return a
    if not a.out:
        p.error("--out FILE is required")
    if a.workload == "seeds":
        if a.shape is None or a.mode is None:
            p.error("seeds needs --shape S and --mode replay|eager")
        try:
            a.shape = int(a.shape)
        except ValueError:
            p.error(f"seeds: --shape must be one number S, got {a.shape!r}")
    if a.workload == "norms":
        if a.op is None or a.shape is None or a.dtype is None or a.mode is None:
            p.error("norms needs --op OP --shape RxC --dtype f32|bf16 --mode replay|eager")
        m = re.fullmatch(r"(\d+)x(\d+)", a.shape)
        if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
            p.error(f"norms: --shape must be RxC, got {a.shape!r}")
        a.dims = (int(m.group(1)), int(m.group(2)))
        a.shape = f"{a.dims[0]}x{a.dims[1]}"
    if a.workload == "mlp" and (a.tokens is None or a.mode is None):
        p.error("mlp needs --tokens T and --mode replay|eager")
    if a.iters < 1:
        p.error("--iters must be at least 1")
    if a.warmup < 20:
        p.error("--warmup must be at least 20")
    for d in a.dtypes.split(","):
        if d not in TOLERANCE:
            p.error(f"unknown dtype {d!r} (f32, bf16)")
    return a


def list_jobs(world):
    jobs = []
    for s in SEEDS_SIDES:
        for mode in ("replay", "eager"):
            jobs.append(f"--workload seeds --shape {s} --mode {mode}")
    if FFN % world == 0:
        for t in MLP_TOKENS:
            for mode in ("replay", "eager"):
                jobs.append(f"--workload mlp --tokens {t} --mode {mode}")
    else:
        print(f"# mlp skipped: F = {FFN} is not divisible by world {world}", file=sys.stderr)
    jobs += norm_jobs(world)
    return jobs


def norm_jobs(world):
    """The norms processes: one per op, shape, dtype and mode, on one GPU (world 1) only."""
    if world != 1:
        return []
    jobs = []
    for op in NORM_OPS:
        for r, c in NORM_SHAPES:
            for dt in NORM_DTYPES:
                for mode in ("replay", "eager"):
                    jobs.append(f"--workload norms --op {op} --shape {r}x{c} --dtype {dt} --mode {mode} --deadline-s 150")
    r, c = LOOP_ORDER_SHAPE
    for mode in ("replay", "eager"):
        jobs.append(f"--workload norms --op loop_order --shape {r}x{c} --dtype f32 --mode {mode} --deadline-s 150")
    return jobs


def moved_bytes(op, rows, cols, dt):
    """Bytes read once plus bytes written once: the least any implementation of the op moves."""
    s = DTYPE_BYTES[dt]
    x, v = rows * cols * s, cols * s
    return {"layernorm": 2 * x + 2 * v, "rmsnorm": 2 * x + v, "softmax": 2 * x, "loop_order": 2 * x + s}[op]


def plan(args, world):
    """Every row this process will write, in order: (workload, variant, mode, dtype, shape, bytes)."""
    specs = []
    if args.workload == "all_reduce":
        for side in ALL_REDUCE_SIDES:
            for dt in args.dtypes.split(","):
                for variant, mode in ALL_REDUCE_VARIANTS:
                    specs.append(dict(workload="all_reduce", variant=variant, mode=mode, dtype=dt,
                                      shape=f"{side}x{side}", bytes=side * side * (4 if dt == "f32" else 2)))
    elif args.workload == "ar_norm":
        for hidden in AR_NORM_HIDDEN:
            for tokens in AR_NORM_TOKENS:
                for variant, mode in AR_NORM_VARIANTS:
                    specs.append(dict(workload="ar_norm", variant=variant, mode=mode, dtype="bf16",
                                      shape=f"{tokens}x{hidden}", bytes=tokens * hidden * 2))
    elif args.workload == "norms":
        rows, cols = args.dims
        for variant in (LOOP_ORDER_VARIANTS if args.op == "loop_order" else NORM_VARIANTS):
            specs.append(dict(workload=args.op, variant=variant, mode=args.mode, dtype=args.dtype, shape=args.shape,
                              bytes=rows * cols * DTYPE_BYTES[args.dtype],
                              moved_bytes=moved_bytes(args.op, rows, cols, args.dtype)))
    else:
        if args.workload == "seeds":
            dt, shape, nbytes = "f32", f"{args.shape}x{args.shape}", args.shape * args.shape * 4
        else:
            dt, shape, nbytes = "bf16", f"{args.tokens}x{HIDDEN}", args.tokens * HIDDEN * 2
        specs.append(dict(workload=args.workload, variant="compile_auto_select", mode=args.mode, dtype=dt,
                          shape=shape, bytes=nbytes))
        # "compile" (without auto_select) is added at run time only if this PyTorch lacks the config.
        if args.mode == "eager":
            specs.append(dict(workload=args.workload, variant="eager", mode="eager", dtype=dt, shape=shape,
                              bytes=nbytes))
    return specs


def short(e):
    msg = " ".join(str(e).split())
    msg = msg.split(" Set TORCHDYNAMO_VERBOSE=1")[0]  # dynamo's boilerplate
    return f"{type(e).__name__}: {msg[:300]}"


def quantile(sorted_values, q):
    """Linear interpolation between closest ranks."""
    if not sorted_values:
        return None
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class WrongResult(Exception):
    """A result outside tolerance, found before timing: the row is FAILED with its error, and not timed."""

    def __init__(self, err, message):
        super().__init__(message)
        self.err = err


class Suite:
    def __init__(self, args):
        self.args = args
        self.t_start = time.monotonic()
        self.soft_deadline = self.t_start + args.deadline_s
        self.hard_deadline = self.soft_deadline + args.grace_s
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", str(self.rank)))
        self.specs = plan(args, self.world)
        self.pending = list(self.specs)  # not yet written
        self.current = None
        self.lock = threading.Lock()
        self.finished = False
        self.written = set()
        self.seq = 0
        self.store = None
        self.device_name = "unknown"
        self.versions = "unknown"

    # ---------- rows ----------

    def emit(self, spec, _force=False, **fields):
        """Writes spec's row once (rank 0 only); after the watchdog took over, only the watchdog writes."""
        with self.lock:
            if (self.finished and not _force) or id(spec) in self.written:
                return
            self.written.add(id(spec))
            self.pending = [s for s in self.pending if s is not spec]
            if self.rank != 0:
                return
            row = {k: None for k in ROW_FIELDS}
            row.update(system="pytorch", world=self.world, device=self.device_name, versions=self.versions)
            row.update(spec)
            row.update(fields)
            # strict JSON, as Gatun writes it: a non-finite number (an infinite error) becomes null
            row = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
            line = json.dumps(row)
            try:
                with open(self.args.out, "a") as f:
                    f.write(line + "\n")
                    f.flush()
            except OSError as e:
                print(f"[pytorch] could not append to {self.args.out}: {short(e)}; the row: {line}",
                      file=sys.stderr, flush=True)
            self.print_row(row)

    @staticmethod
    def print_row(row):
        head = f"[pytorch] {row['workload']} {row['variant']}/{row['mode']} {row['dtype']} {row['shape']} W={row['world']}"
        if row["error"]:
            print(f"{head}: FAILED {row['error']}", flush=True)
            return
        ok = "floor" if row.get("floor") else {True: "ok", False: "WRONG", None: "unchecked"}[row["correct"]]
        err = f"{row['max_rel_err']:.2e}" if row["max_rel_err"] is not None else "-"
        chosen = f" chosen={row['chosen']}" if row["chosen"] else ""
        bw = ""
        if row.get("gbps") is not None:
            bw = f", {row['gbps']:.0f} GB/s" + (f" ({row['of_copy']:.2f} of copy)" if row.get("of_copy") is not None else "")
        print(f"{head}: median {row['median_us']:.1f} us (p10 {row['p10_us']:.1f}, p90 {row['p90_us']:.1f}), "
              f"pipelined {row['pipelined_us']:.1f} us/call{bw}, {row['calls']} calls, {ok} (rel err {err}){chosen}",
              flush=True)

    # ---------- control plane: the c10d store, never a collective that can hang ----------

    def agree(self, payload):
        """Posts this rank's payload and returns every rank's, in rank order."""
        self.seq += 1
        prefix = f"torch_suite/{self.seq}/"
        self.store.set(prefix + str(self.rank), payload)
        keys = [prefix + str(r) for r in range(self.world)]
        from datetime import timedelta
        wait_s = max(1.0, self.hard_deadline - time.monotonic() + 30.0)
        try:
            self.store.wait(keys, timedelta(seconds=wait_s))
        except Exception:
            # A peer is stuck; the watchdog records the rows and ends the process.
            time.sleep(max(0.0, self.hard_deadline - time.monotonic()) + 60.0)
            os._exit(3)
        return [self.store.get(k).decode() for k in keys]

    def peek_peers(self):
        """Errors peers posted for the agreement after the cell in progress, read without waiting."""
        notes = []
        for seq in (self.seq, self.seq + 1):
            prefix = f"torch_suite/{seq}/"
            for r in range(self.world):
                if r == self.rank:
                    continue
                try:
                    if self.store.check([prefix + str(r)]):
                        p = json.loads(self.store.get(prefix + str(r)).decode())
                        if isinstance(p, dict) and p.get("error"):
                            notes.append(f"rank {r}: {p['error']}")
                except Exception:
                    pass
        return notes

    def watchdog(self):
        while True:
            left = self.hard_deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, 1.0))
        with self.lock:
            done = self.finished  # every row written already: only the shutdown hung
            self.finished = True  # stops further emission by the main thread
            current, pending = self.current, list(self.pending)
            self.pending.clear()
        if done:
            print(f"[pytorch rank {self.rank}] watchdog: shutdown still running at the deadline; exiting",
                  file=sys.stderr, flush=True)
            os._exit(0)
        if self.rank == 0:
            peers = self.peek_peers() if self.store is not None else []
            limit = self.args.deadline_s + self.args.grace_s
            for spec in pending:
                if spec is current:
                    msg = f"Timeout: still running {limit:.0f} s after the start (hung or too slow); process ended"
                    if peers:
                        msg += "; " + "; ".join(peers)
                else:
                    msg = f"Deadline: not run, the process was ended at {limit:.0f} s"
                self.emit(spec, _force=True, error=msg[:500])
            print(f"[pytorch] watchdog: process ended after {limit:.0f} s", file=sys.stderr, flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)

    # ---------- running one cell ----------

    def run(self, spec, body):
        """Runs body() on every rank as one row. body returns dict(timing..., max_rel_err, correct, chosen)."""
        late = time.monotonic() > self.soft_deadline
        flags = self.agree("late" if late else "ok")
        if "late" in flags:
            self.emit(spec, error=f"Deadline: not run, the process's {self.args.deadline_s:.0f} s deadline had passed")
            return
        self.current = spec
        result, error = {}, None
        try:
            result = body() or {}
        except WrongResult as e:
            error = short(e)
            result = {"max_rel_err": e.err, "correct": False}
            print(f"[pytorch rank {self.rank}] {spec['variant']}/{spec['mode']} {spec['shape']} {spec['dtype']}: "
                  f"{error}", file=sys.stderr, flush=True)
        except Exception as e:
            error = short(e)
            print(f"[pytorch rank {self.rank}] {spec['variant']}/{spec['mode']} {spec['shape']} {spec['dtype']}: "
                  f"{error}\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        payload = {"error": error, "max_rel_err": result.get("max_rel_err"), "correct": result.get("correct")}
        answers = [json.loads(a) for a in self.agree(json.dumps(payload))]
        self.current = None
        errors = [(r, a["error"]) for r, a in enumerate(answers) if a["error"]]
        errs = [a["max_rel_err"] for a in answers if a["max_rel_err"] is not None]
        if errors:
            r, msg = errors[0]
            if self.world > 1:
                msg += f" (rank {r}" + (f"; {len(errors)} of {self.world} ranks failed" if len(errors) > 1 else "") + ")"
            wrong = {}
            if any(a["correct"] is False for a in answers):  # a wrong result found before timing
                wrong = dict(correct=False, max_rel_err=max(errs) if errs else None)
            self.emit(spec, error=msg[:500], **wrong)
            return
        corr = [a["correct"] for a in answers]
        fields = {k: result.get(k) for k in ("median_us", "p10_us", "p90_us", "pipelined_us", "calls", "chosen")}
        fields.update({k: result[k] for k in EXTRA_FIELDS if k in result})
        fields["max_rel_err"] = max(errs) if errs else None
        fields["correct"] = None if any(c is None for c in corr) else all(corr)
        self.emit(spec, **fields)

    # ---------- measurement helpers ----------

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def barrier(self):
        dist = self.dist
        if self.cuda:
            dist.barrier(device_ids=[self.local_rank])
        else:
            dist.barrier()
        self.sync()

    def time_calls(self, fn, events=False):
        """Latency (synchronize after every call) and pipelined (one synchronize at the end) timings of fn.

        With events (CUDA only), also GPU times from CUDA events: event_pipelined_us (events around the pipelined
        loop, divided by the calls; two event records added to that loop) and event_median_us (a further loop of
        the same calls back to back, an event pair around each)."""
        for _ in range(self.args.warmup):
            fn()
        self.sync()
        self.barrier()
        calls = self.args.iters
        lat = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            self.sync()
            lat.append((time.perf_counter() - t0) * 1e6)
        self.barrier()
        events = events and self.cuda
        if events:
            torch = self.torch
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        if events:
            start.record()
        for _ in range(calls):
            fn()
        if events:
            end.record()
        self.sync()
        pipelined = (time.perf_counter() - t0) * 1e6 / calls
        lat.sort()
        out = dict(median_us=quantile(lat, 0.5), p10_us=quantile(lat, 0.1), p90_us=quantile(lat, 0.9),
                   pipelined_us=pipelined, calls=calls)
        if events:
            out["event_pipelined_us"] = start.elapsed_time(end) * 1e3 / calls
            pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
            for a, b in pairs:
                a.record()
                fn()
                b.record()
            self.sync()
            out["event_median_us"] = quantile(sorted(a.elapsed_time(b) * 1e3 for a, b in pairs), 0.5)
        return out

    def rel_err(self, out, ref):
        torch = self.torch
        d = out.detach().to(torch.float64).reshape(ref.shape) - ref
        den = torch.linalg.vector_norm(ref).item()
        num = torch.linalg.vector_norm(d).item()
        if not math.isfinite(num):
            return float("inf")
        return num / den if den > 0 else num

    def verdict(self, out, ref, tol):
        e = self.rel_err(out, ref)
        return dict(max_rel_err=e, correct=bool(e <= tol))

    def capture(self, fn):
        """Warms fn up on a side stream, then captures one call in a CUDA graph; returns (graph, output)."""
        torch = self.torch
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn()
        torch.cuda.synchronize()
        return g, out

    # ---------- setup ----------

    def setup(self):
        import torch
        import torch.distributed as dist
        self.torch, self.dist = torch, dist
        self.cuda = self.args.device == "cuda"
        if self.cuda:
            if not torch.cuda.is_available():
                raise RuntimeError("no CUDA device visible")
            torch.cuda.set_device(self.local_rank)
            self.dev = torch.device("cuda", self.local_rank)
            dist.init_process_group("nccl", device_id=self.dev)
            self.device_name = torch.cuda.get_device_name()
            try:
                nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
            except Exception as e:
                nccl = f"unknown ({type(e).__name__})"
            self.versions = f"torch {torch.__version__}, nccl {nccl}"
        else:
            self.dev = torch.device("cpu")
            dist.init_process_group("gloo")
            self.device_name = "cpu (control-flow test only)"
            self.versions = f"torch {torch.__version__}, gloo"
        assert dist.get_world_size() == self.world and dist.get_rank() == self.rank
        self.group = dist.group.WORLD
        self.group_name = self.group.group_name
        self.store = dist.distributed_c10d._get_default_store()

    def enable_symm_mem(self):
        """Imports symmetric memory and registers the group (needed up to at least 2.13 for inductor's
        is_symm_mem_enabled_for_group, though deprecated). Returns (module, None) or (None, error)."""
        try:
            import torch.distributed._symmetric_memory as symm_mem
            if hasattr(symm_mem, "enable_symm_mem_for_group"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    symm_mem.enable_symm_mem_for_group(self.group_name)
            return symm_mem, None
        except Exception as e:
            return None, short(e)

    # ---------- workloads ----------

    def all_reduce(self):
        torch, dist = self.torch, self.dist
        symm_mem, symm_error = self.enable_symm_mem()
        if self.rank == 0:
            backend = None
            if symm_mem is not None and hasattr(symm_mem, "get_backend") and self.cuda:
                try:
                    backend = symm_mem.get_backend(self.dev)
                except Exception as e:
                    backend = short(e)
            print(f"[pytorch] all_reduce: {self.versions}, {self.device_name}, world {self.world}, "
                  f"symmetric memory backend {backend}, {self.args.warmup} warm-ups, {self.args.iters} calls",
                  flush=True)
        dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
        ops = torch.ops.symm_mem if symm_mem is not None else None
        specs = iter(list(self.specs))
        for side in ALL_REDUCE_SIDES:
            n = side * side
            # every rank regenerates every rank's input from its seed, on the CPU
            base = [torch.randn(side, side, generator=torch.Generator().manual_seed(1000 + r)) for r in range(self.world)]
            for dt in self.args.dtypes.split(","):
                dtype = dtypes[dt]
                tol = TOLERANCE[dt]
                rounded = [b.to(dtype) for b in base]  # the reference sums the inputs as the ranks hold them
                ref = torch.stack([b.double() for b in rounded]).sum(0).to(self.dev)
                x = rounded[self.rank].to(self.dev)
                del rounded

                def nccl_eager(x=x, ref=ref, tol=tol):
                    buf = torch.empty_like(x)

                    def call():
                        buf.copy_(x)  # all_reduce is in place: every call reduces a fresh copy of the input
                        dist.all_reduce(buf)
                    t = self.time_calls(call)
                    buf.zero_()
                    call()
                    self.sync()
                    return {**t, **self.verdict(buf, ref, tol)}

                def nccl_replay(x=x, ref=ref, tol=tol):
                    if not self.cuda:
                        raise RuntimeError("CUDA graphs need --device cuda")
                    buf = torch.empty_like(x)

                    def call():
                        # In place, so the copy of the fresh input into the buffer is captured in the graph
                        # too: every replay reduces the input again rather than the previous result.
                        buf.copy_(x)
                        dist.all_reduce(buf)
                    g, _ = self.capture(call)
                    t = self.time_calls(g.replay)
                    buf.zero_()
                    g.replay()
                    self.sync()
                    return {**t, **self.verdict(buf, ref, tol)}

                shared = {}

                def symm_buffer(x=x, shared=shared):
                    """One symmetric buffer per shape and dtype, shared by the four symm variants; every
                    variant starts from a fresh copy of the input."""
                    if symm_mem is None:
                        raise RuntimeError(f"symmetric memory unavailable: {symm_error}")
                    if not self.cuda:
                        raise RuntimeError("symmetric memory needs --device cuda")
                    if "error" in shared:
                        raise RuntimeError(f"symmetric buffer setup failed: {shared['error']}")
                    if "t" not in shared:
                        try:
                            t = symm_mem.empty(n, dtype=x.dtype, device=self.dev)
                            symm_mem.rendezvous(t, self.group_name)
                        except Exception as e:
                            shared["error"] = short(e)
                            raise
                        shared["t"] = t
                    t = shared["t"]
                    t.copy_(x.reshape(-1))
                    self.sync()
                    self.barrier()
                    return t

                def one_shot_eager(ref=ref, tol=tol):
                    t = symm_buffer()

                    def call():  # out of place: the input stays in the symmetric buffer
                        return ops.one_shot_all_reduce(t, "sum", self.group_name)
                    tm = self.time_calls(call)
                    out = call()
                    self.sync()
                    return {**tm, **self.verdict(out, ref, tol)}

                def one_shot_replay(ref=ref, tol=tol):
                    t = symm_buffer()

                    def call():
                        return ops.one_shot_all_reduce(t, "sum", self.group_name)
                    g, out = self.capture(call)
                    tm = self.time_calls(g.replay)
                    out.zero_()
                    g.replay()
                    self.sync()
                    return {**tm, **self.verdict(out, ref, tol)}

                def two_shot_eager(x=x, ref=ref, tol=tol):
                    t = symm_buffer()
                    xf = x.reshape(-1)

                    def call():
                        t.copy_(xf)  # two_shot_all_reduce_ is in place: reduce a fresh copy every call
                        ops.two_shot_all_reduce_(t, "sum", self.group_name)
                    tm = self.time_calls(call)
                    t.zero_()
                    call()
                    self.sync()
                    return {**tm, **self.verdict(t, ref, tol)}

                def two_shot_replay(x=x, ref=ref, tol=tol):
                    t = symm_buffer()
                    xf = x.reshape(-1)

                    def call():
                        # In place, so the copy of the fresh input is captured in the graph too.
                        t.copy_(xf)
                        ops.two_shot_all_reduce_(t, "sum", self.group_name)
                    g, _ = self.capture(call)
                    tm = self.time_calls(g.replay)
                    t.zero_()
                    g.replay()
                    self.sync()
                    return {**tm, **self.verdict(t, ref, tol)}

                bodies = {("nccl", "eager"): nccl_eager, ("nccl", "replay"): nccl_replay,
                          ("symm_one_shot", "eager"): one_shot_eager, ("symm_one_shot", "replay"): one_shot_replay,
                          ("symm_two_shot", "eager"): two_shot_eager, ("symm_two_shot", "replay"): two_shot_replay}
                for variant, mode in ALL_REDUCE_VARIANTS:
                    spec = next(specs)
                    assert (spec["variant"], spec["mode"], spec["dtype"]) == (variant, mode, dt)
                    self.run(spec, bodies[(variant, mode)])
                del x, ref, shared, bodies
            del base
            if self.cuda:
                torch.cuda.empty_cache()

    def ar_norm(self):
        """all-reduce + residual add + RMSNorm, unfused eager PyTorch after NCCL's or symm_mem's one-shot all-reduce:
        h = all_reduce(x) + residual; y = h * rsqrt(mean(h * h, -1) + eps) * w, in bf16 (the peer of Gatun's ar_norm)."""
        torch, dist = self.torch, self.dist
        symm_mem, symm_error = self.enable_symm_mem()
        ops = torch.ops.symm_mem if symm_mem is not None else None
        specs = iter(list(self.specs))
        for hidden in AR_NORM_HIDDEN:
            for tokens in AR_NORM_TOKENS:
                n = tokens * hidden
                gen = lambda seed: torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(seed))
                parts = [gen(3000 + r).to(torch.bfloat16) for r in range(self.world)]
                residual = gen(2999).to(torch.bfloat16)
                w = torch.randn(hidden, generator=torch.Generator().manual_seed(2998)).to(torch.bfloat16)
                h64 = torch.stack([p.double() for p in parts]).sum(0) + residual.double()
                ref = (h64 * torch.rsqrt((h64 * h64).mean(-1, keepdim=True) + AR_NORM_EPS) * w.double()).to(self.dev)
                x, residual, w = parts[self.rank].to(self.dev), residual.to(self.dev), w.to(self.dev)
                del parts, h64

                def tail(s):
                    h = s.view(tokens, hidden) + residual
                    hf = h.float()
                    return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + AR_NORM_EPS)).to(torch.bfloat16) * w

                def measure(call, replay, ref=ref):
                    """Times call eagerly or replayed from a CUDA graph, then checks one more call's result."""
                    if replay:
                        if not self.cuda:
                            raise RuntimeError("CUDA graphs need --device cuda")
                        g, out = self.capture(call)
                        tm = self.time_calls(g.replay)
                        g.replay()
                    else:
                        tm = self.time_calls(call)
                        out = call()
                    self.sync()
                    return {**tm, **self.verdict(out, ref, TOLERANCE["bf16"])}

                def nccl(replay, x=x):
                    buf = torch.empty_like(x)

                    def call():
                        buf.copy_(x)  # in place: every call reduces a fresh copy of the input
                        dist.all_reduce(buf)
                        return tail(buf)
                    return measure(call, replay)

                shared = {}

                def one_shot(replay, x=x, shared=shared):
                    if symm_mem is None:
                        raise RuntimeError(f"symmetric memory unavailable: {symm_error}")
                    if not self.cuda:
                        raise RuntimeError("symmetric memory needs --device cuda")
                    if "t" not in shared:  # one symmetric buffer per shape, for both modes
                        shared["t"] = symm_mem.empty(n, dtype=x.dtype, device=self.dev)
                        symm_mem.rendezvous(shared["t"], self.group_name)
                    t = shared["t"]
                    t.copy_(x.reshape(-1))  # the input lives in the symmetric buffer: out of place, no copy per call
                    self.sync()
                    self.barrier()

                    def call():
                        return tail(ops.one_shot_all_reduce(t, "sum", self.group_name))
                    return measure(call, replay)

                bodies = {("nccl+eager", "eager"): lambda: nccl(False), ("nccl+eager", "replay"): lambda: nccl(True),
                          ("symm_one_shot+eager", "eager"): lambda: one_shot(False),
                          ("symm_one_shot+eager", "replay"): lambda: one_shot(True)}
                for variant, mode in AR_NORM_VARIANTS:
                    spec = next(specs)
                    assert (spec["variant"], spec["mode"], spec["shape"]) == (variant, mode, f"{tokens}x{hidden}")
                    self.run(spec, bodies[(variant, mode)])
                del x, ref, residual, w, bodies, shared, measure
                if self.cuda:
                    torch.cuda.empty_cache()

    def compiled_variants(self, make_fn, inputs, check):
        """Runs the planned compile_auto_select (and eager) rows of a seeds/mlp process.

        make_fn() returns a fresh callable (function or module) written with functional collectives;
        check(out) returns dict(max_rel_err, correct)."""
        torch = self.torch
        mode = self.args.mode
        auto_spec = next(s for s in self.specs if s["variant"] == "compile_auto_select")
        import torch._inductor.config as inductor_config
        has_auto = hasattr(inductor_config, "_collective") and hasattr(inductor_config._collective, "auto_select")

        def compiled(auto_select):
            def body():
                import torch._dynamo
                from torch._dynamo.utils import counters
                from torch._inductor.graph import GraphLowering
                from unittest import mock
                torch._dynamo.reset()
                counters.clear()
                if has_auto:
                    inductor_config._collective.auto_select = auto_select
                codes = []

                def save_output_code(code):
                    if MULTIMEM.search(code):
                        raise RuntimeError("refusing to run compiled code that uses multimem (NVLink multicast)")
                    codes.append(code)
                fn = torch.compile(make_fn(), mode="reduce-overhead" if mode == "replay" else None)
                with mock.patch.object(GraphLowering, "save_output_code", save_output_code):
                    with torch.no_grad():
                        tm = self.time_calls(lambda: fn(*inputs))
                        out = fn(*inputs).clone()  # clone: cudagraph trees reuse the output buffer
                        self.sync()
                chosen = describe_collectives(codes)
                skips = counters["inductor"].get("cudagraph_skips", 0)
                if mode == "replay" and skips:
                    chosen = f"{chosen}; cudagraphs skipped x{skips}"
                if not codes:
                    chosen = f"{chosen} (no generated code seen)"
                return {**tm, **check(out), "chosen": chosen}
            return body

        if has_auto:
            self.run(auto_spec, compiled(True))
        else:
            self.emit(auto_spec, error="AttributeError: torch._inductor.config._collective.auto_select does not "
                                       f"exist in torch {torch.__version__}; see the 'compile' row")
            spec = dict(auto_spec, variant="compile")
            self.specs.append(spec)
            self.pending.append(spec)
            self.run(spec, compiled(False))
        if mode == "eager":
            spec = next(s for s in self.specs if s["variant"] == "eager")

            def eager_body():
                f = make_fn()
                with torch.no_grad():
                    tm = self.time_calls(lambda: f(*inputs))
                    out = f(*inputs)
                    self.sync()
                return {**tm, **check(out)}
            self.run(spec, eager_body)

    def all_reduce_fn(self):
        """ar(t): a sum all-reduce through functional collectives, traceable by torch.compile."""
        c10d_functional = self.torch.ops._c10d_functional
        group_name = self.group_name

        def ar(t):
            return c10d_functional.wait_tensor(c10d_functional.all_reduce(t, "sum", group_name))
        return ar

    def seeds(self):
        torch = self.torch
        s = self.args.shape
        self.enable_symm_mem()  # auto_select lowers to one-shot only where symmetric memory is enabled for the group
        ar = self.all_reduce_fn()

        def make_fn():
            def seeds_graph(x):
                a = ar(x + 1)
                b = ar(x + 2)
                c = ar(x + 3)
                return ar(a + b + c)
            return seeds_graph

        xs = [(r + 1) + 0.01 * torch.randn(s, s, generator=torch.Generator().manual_seed(2000 + r))
              for r in range(self.world)]
        xd = [x.double() for x in xs]
        w = self.world
        a = sum(x + 1 for x in xd)
        b = sum(x + 2 for x in xd)
        c = sum(x + 3 for x in xd)
        ref = (w * (a + b + c)).to(self.dev)
        x = xs[self.rank].to(self.dev)
        self.compiled_variants(make_fn, (x,), lambda out: self.verdict(out, ref, TOLERANCE["f32"]))

    def mlp(self):
        torch = self.torch
        t = self.args.tokens
        w = self.world
        if FFN % w:
            raise RuntimeError(f"F = {FFN} is not divisible by world {w}")
        fs = FFN // w
        self.enable_symm_mem()
        ar = self.all_reduce_fn()
        # Full weights from fixed seeds, generated on this rank's device (same GPU model on every rank, so
        # every rank can rebuild every rank's shard); then sliced Megatron-style.
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(3001)
        w1 = (torch.randn(HIDDEN, FFN, generator=gen, device=self.dev) / math.sqrt(HIDDEN)).to(torch.bfloat16)
        gen.manual_seed(3002)
        w2 = (torch.randn(FFN, HIDDEN, generator=gen, device=self.dev) / math.sqrt(FFN)).to(torch.bfloat16)
        x = torch.randn(t, HIDDEN, generator=torch.Generator().manual_seed(3003)).to(torch.bfloat16).to(self.dev)
        # reference: the first rows of the unsharded product in float64
        rows = min(MLP_CHECK_ROWS, t)
        h = x[:rows].double() @ w1.double()
        h = torch.nn.functional.gelu(h)
        ref_rows = h @ w2.double()
        del h
        w1s = w1[:, self.rank * fs:(self.rank + 1) * fs].contiguous()
        w2s = w2[self.rank * fs:(self.rank + 1) * fs, :].contiguous()
        del w1, w2
        if self.cuda:
            torch.cuda.empty_cache()

        class TPMLP(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w1 = torch.nn.Parameter(w1s, requires_grad=False)  # [H, F/W], column-parallel
                self.w2 = torch.nn.Parameter(w2s, requires_grad=False)  # [F/W, H], row-parallel

            def forward(self, x):
                h = torch.nn.functional.gelu(x @ self.w1)  # exact (erf) gelu
                return ar(h @ self.w2)

        # compared on the checked rows only
        self.compiled_variants(TPMLP, (x,), lambda out: self.verdict(out[:rows], ref_rows, MLP_TOLERANCE))

    def norms(self):
        """One norms process: op, shape, dtype and mode from the arguments; the d2d_copy floor, then each variant."""
        torch = self.torch
        args = self.args
        op, (rows, cols), dt, mode = args.op, args.dims, args.dtype, args.mode
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dt]
        tol = TOLERANCE[dt]
        # seeded inputs, made on the CPU: x normal (loop_order: uniform in [0, 2), so its sum is far from 0),
        # w in [0.5, 1.5), b in [-0.5, 0.5)
        if op == "loop_order":
            inputs = [torch.rand(rows, cols, generator=torch.Generator().manual_seed(4100)) * 2]
        else:
            inputs = [torch.randn(rows, cols, generator=torch.Generator().manual_seed(4000))]
        if op in ("layernorm", "rmsnorm"):
            inputs.append(torch.rand(cols, generator=torch.Generator().manual_seed(4001)) + 0.5)
        if op == "layernorm":
            inputs.append(torch.rand(cols, generator=torch.Generator().manual_seed(4002)) - 0.5)
        inputs = [t.to(dtype).to(self.dev) for t in inputs]
        # float64 references from the inputs as held (after rounding to the dtype)
        refs = norm_reference(torch, op, [t.double() for t in inputs])
        prims, nn = norm_functions(torch, op, cols)
        moved = moved_bytes(op, rows, cols, dt)
        copy_gbps = [None]

        def bandwidth(tm):
            gbps = moved / (tm["pipelined_us"] * 1e-6) / 1e9 if tm.get("pipelined_us") else None
            of = gbps / copy_gbps[0] if gbps and copy_gbps[0] else None
            return dict(gbps=gbps, copy_gbps=copy_gbps[0], of_copy=of)

        def check(out):
            outs = out if isinstance(out, (tuple, list)) else (out,)
            names = ("y", "z_t") if op == "loop_order" else ("y",)
            errs = [self.rel_err(o, r) for o, r in zip(outs, refs)]
            worst = max(range(len(errs)), key=lambda i: errs[i] if math.isfinite(errs[i]) else math.inf)
            err = errs[worst] if math.isfinite(errs[worst]) else float("inf")
            if len(outs) != len(refs) or not err <= tol:
                raise WrongResult(err, f"output {names[worst]!r} relative error {err:.3g} > {tol:.0e} against "
                                       f"float64 (checked before timing; not timed)")
            note = f"z_t strides {tuple(outs[1].stride())}" if op == "loop_order" else None
            return dict(max_rel_err=err, correct=True), note

        def copy_floor():
            n = (moved + 1) // 2
            src = torch.ones(n, dtype=torch.uint8, device=self.dev)
            dst = torch.empty_like(src)
            tm = self.time_calls(lambda: dst.copy_(src), events=True)
            copy_gbps[0] = 2 * n / (tm["pipelined_us"] * 1e-6) / 1e9
            return {**tm, **bandwidth(tm), "floor": True,
                    "chosen": f"dst.copy_(src) device to device of {n / 1048576:.1f} MiB: the floor"}

        def uncompiled(fn):
            def body():
                with torch.no_grad():
                    if mode == "replay":
                        if not self.cuda:
                            raise RuntimeError("CUDA graphs need --device cuda")
                        g, out = self.capture(lambda: fn(*inputs))
                        call = g.replay
                        call()
                        self.sync()
                        verdict, note = check(out)
                        note = "captured in a torch.cuda.CUDAGraph" + (f"; {note}" if note else "")
                    else:
                        def call():
                            return fn(*inputs)
                        verdict, note = check(call())
                    tm = self.time_calls(call, events=True)
                return {**tm, **verdict, **bandwidth(tm), "chosen": note}
            return body

        def compiled(fn):
            def body():
                import torch._dynamo
                from torch._dynamo.utils import counters
                from torch._inductor.graph import GraphLowering
                from unittest import mock
                torch._dynamo.reset()
                counters.clear()
                codes = []

                def save_output_code(code):
                    codes.append(code)
                if mode == "replay":
                    for t in inputs:  # read in place, as Gatun reads device inputs: no copy into cudagraph trees' buffers
                        torch._dynamo.mark_static_address(t)
                f = torch.compile(fn, mode="reduce-overhead" if mode == "replay" else None)
                with mock.patch.object(GraphLowering, "save_output_code", save_output_code), torch.no_grad():
                    for _ in range(3):  # compiles; under reduce-overhead the third call is the first replay
                        out = f(*inputs)
                    out = tuple(o.clone() for o in out) if isinstance(out, tuple) else out.clone()  # cudagraph trees reuse the outputs
                    self.sync()
                    verdict, note = check(out)
                    del out
                    tm = self.time_calls(lambda: f(*inputs), events=True)
                chosen = describe_kernels(codes)
                skips = counters["inductor"].get("cudagraph_skips", 0)
                if mode == "replay":
                    chosen += "; inputs marked static"
                    if skips:
                        chosen += f"; cudagraphs skipped x{skips}"
                if note:
                    chosen += f"; {note}"
                return {**tm, **verdict, **bandwidth(tm), "chosen": chosen}
            return body

        bodies = {"d2d_copy": copy_floor, "eager": uncompiled(prims), "compile": compiled(prims)}
        if nn is not None:
            bodies.update(eager_nn=uncompiled(nn), compile_nn=compiled(nn))
        for spec in list(self.specs):
            self.run(spec, bodies[spec["variant"]])
            if self.cuda:
                torch.cuda.empty_cache()

    # ---------- main ----------

    def main(self):
        threading.Thread(target=self.watchdog, daemon=True).start()
        try:
            self.setup()
        except Exception as e:
            err = "setup failed: " + short(e)
            print(f"[pytorch rank {self.rank}] {err}\n{traceback.format_exc()}", file=sys.stderr, flush=True)
            for spec in list(self.pending):
                self.emit(spec, error=err[:500])
            return 1
        try:
            getattr(self, self.args.workload)()
        except Exception as e:  # a failure outside a cell: record every row not written yet
            err = short(e)
            print(f"[pytorch rank {self.rank}] {err}\n{traceback.format_exc()}", file=sys.stderr, flush=True)
            for spec in list(self.pending):
                self.emit(spec, error=err[:500])
        try:
            self.barrier()
        except Exception:
            pass
        with self.lock:
            self.finished = True
        try:
            self.dist.destroy_process_group()
        except Exception as e:
            print(f"[pytorch rank {self.rank}] destroy_process_group: {short(e)}", file=sys.stderr)
        return 0


def norm_functions(torch, op, cols):
    """(primitives, torch.nn.functional) versions of a norms op; the second is None for loop_order.

    The primitives are written as Gatun's NormWorkloads writes them, op for op."""
    F = torch.nn.functional
    if op == "layernorm":
        eps = NORM_EPS[op]

        def layernorm(x, w, b):
            d = x - x.mean(-1, keepdim=True)
            var = (d * d).mean(-1, keepdim=True)
            return d * torch.rsqrt(var + eps) * w + b

        def layernorm_nn(x, w, b):
            return F.layer_norm(x, (cols,), w, b, eps)
        return layernorm, layernorm_nn
    if op == "rmsnorm":
        eps = NORM_EPS[op]

        def rmsnorm(x, w):
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

        def rmsnorm_nn(x, w):
            return F.rms_norm(x, (cols,), w, eps)
        return rmsnorm, rmsnorm_nn
    if op == "softmax":
        def softmax(x):
            e = torch.exp(x - x.amax(-1, keepdim=True))
            return e / e.sum(-1, keepdim=True)

        def softmax_nn(x):
            return F.softmax(x, -1)
        return softmax, softmax_nn
    if op == "loop_order":
        def loop_order(x):
            y = torch.sum(torch.sum(x, -1))
            z = x / 10
            z_t = z.t().contiguous().t()
            return y, z_t
        return loop_order, None
    raise ValueError(f"unknown norms op {op!r}")


def norm_reference(torch, op, xs):
    """The op's outputs in float64 from float64 inputs, by the textbook formulas (a tuple, in output order)."""
    x = xs[0]
    if op == "layernorm":
        w, b = xs[1], xs[2]
        d = x - x.mean(-1, keepdim=True)
        return (d / torch.sqrt((d * d).mean(-1, keepdim=True) + NORM_EPS[op]) * w + b,)
    if op == "rmsnorm":
        return (x / torch.sqrt((x * x).mean(-1, keepdim=True) + NORM_EPS[op]) * xs[1],)
    if op == "softmax":
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return (e / e.sum(-1, keepdim=True),)
    if op == "loop_order":
        return x.sum(), x / 10
    raise ValueError(f"unknown norms op {op!r}")


def describe_kernels(codes):
    """The kernels in inductor's generated code, e.g. "2 triton kernels"."""
    text = "\n".join(codes)
    if not codes:
        return "no generated code seen"
    triton = set(re.findall(r"(\w+) = async_compile\.triton\(", text))
    cpp = set(re.findall(r"(\w+) = async_compile\.cpp(?:_pybinding)?\(", text))
    extern = len(re.findall(r"extern_kernels\.\w+\(", text))
    parts = []
    if triton:
        parts.append(f"{len(triton)} triton kernel{'s' if len(triton) != 1 else ''}")
    if cpp:
        parts.append(f"{len(cpp)} cpp kernel{'s' if len(cpp) != 1 else ''}")
    if extern:
        parts.append(f"{extern} extern call{'s' if extern != 1 else ''}")
    return " + ".join(parts) if parts else "no kernel found in the generated code"


def describe_collectives(codes):
    """The all-reduce implementations in inductor's generated code, e.g. "one_shot x4" or "nccl x2 + one_shot x2"."""
    text = "\n".join(codes)
    counts = [("one_shot", len(re.findall(r"symm_mem\.one_shot_all_reduce\b", text))),
              ("two_shot", len(re.findall(r"symm_mem\.two_shot_all_reduce", text))),
              ("nccl", len(re.findall(r"_c10d_functional\.all_reduce_?\.", text))
               + len(re.findall(r"_c10d_functional\.all_reduce_?\(", text)))]
    parts = [f"{name} x{n}" for name, n in counts if n]
    return " + ".join(parts) if parts else "no all-reduce found in the generated code"


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    check_env()
    if args.workload == "list-jobs":
        for job in list_jobs(args.world):
            print(job)
        return 0
    return Suite(args).main()


if __name__ == "__main__":
    sys.exit(main())

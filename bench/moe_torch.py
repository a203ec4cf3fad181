"""PyTorch peer of Gatun's MoeBench: expert parallelism's dispatch and combine, and a Mixtral-shape MoE layer, over
all_to_all_single, on the same inputs, beside Gatun's times.

    torchrun --nproc_per_node W bench/moe_torch.py [--dtype bf16|f32] [--tokens 128] [--hidden 4096] [--experts 8]
        [--intermediate 14336] [--layer-tokens 1,8,128] [--only dispatch|layer] [--iters 200] [--warmup 200]
        [--gatun gatun-moe.json] [--out torch-moe.json] [--md moe.md]
    python3 bench/moe_torch.py --selftest     # the input formulas on Python integers (no torch): MoeBenchTest pins them

The inputs are MoeInputs' formulas (cuda-backend tests), computed here on int64 tensors with the same operations:
mix(v) = h ^ (h >> 16) of h = ((h0 ^ (h0 >> 15)) * 73244475) mod 2^32, h0 = v * 2654435761 mod 2^32;
hash(salt, i) = mix((mix(i) + salt) mod 2^31); value = (((hash >> 8) & 255) - 128) * 2^-shift. Tokens of rank r:
salt 1000 + r, shift 7; the router: salt 2000, shift 12; global expert e's gate|up [2F, H]: salt 3000 + e, its down
[H, F]: salt 4000 + e, shift 13; the dispatch routing of rank r, token n: u = hash(5000 + r, n), first expert u mod E
(skewed: 0 unless (u >> 20) mod 4 == 0), second (first + 1 + (u >> 8) mod (E - 1)) mod E, weights
(8 + (u >> 4) mod 8) / 16 and one minus it.

Workloads (each rank holds E / W experts, rank r experts [r E / W, (r + 1) E / W)):
- dispatch+combine: T tokens a rank, top-2, the trivial expert (local expert i scales its rows by i + 1), the
  weighted sum of the two choices; uniform and skewed routings.
- layer: the router (x @ router^T in the dtype, softmax in float32, top-2, renormalised, cast to the dtype), SwiGLU
  experts (gate|up and down as matmuls per local expert), tokens 1, 8, 128 a rank.
Two ways each:
- eager: real EP code: the pairs sorted by destination, the counts exchanged with all_to_all_single and read on the
  host (a synchronisation) to size the buffers, all_to_all_single of the rows and of the local expert ids by those
  splits, the experts (eager layer: each local expert's rows found with nonzero, another synchronisation), the results
  sent back by the reverse splits, unsorted, weighted, summed.
- captured: fixed capacity, no host synchronisation, so torch.cuda.graphs can capture it: each rank sends every peer a
  block of T * 2 rows (room for all its pairs), the pairs placed by a device-side cumsum, even all_to_all_single of
  rows and ids, the experts on every row of the padded buffer (the layer: each local expert on all of them, kept where
  the row is its), even all_to_all_single back, gathered, weighted, summed; captured in a CUDA graph and replayed. If
  capture fails the error is recorded and the eager times stand alone.
Times: latency (a torch.cuda.synchronize after every call; median and p10 of --iters, rank 0's clock) and pipelined
(--iters calls back to back, one synchronize, divided). Each rank compares its outputs with Gatun's JSON (--gatun), over
the tokens Gatun lists (the layer's without a near-tie in the router, which either top-k may break its own way): the
sum of magnitudes within 2% and the sampled rows (64 values of the first and last of them) within 3% of their largest
(bf16; 0.1% in f32). Rank 0 prints the side-by-side table with the issue's ratios and writes --md and --out.
Refuses to run unless NVLink multicast is off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1), as the rest of the suite does.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
M31, M32 = 0x7FFFFFFF, 0xFFFFFFFF
TOKEN_SALT, ROUTER_SALT, GATE_UP_SALT, DOWN_SALT, ROUTING_SALT = 1000, 2000, 3000, 4000, 5000
TOKEN_SHIFT, ROUTER_SHIFT, EXPERT_SHIFT = 7, 12, 13
K = 2


# ---------------------------------------------------------------- the inputs (Python ints or torch int64 tensors)

def mix(v):
    h = (v * 2654435761) & M32
    h = h ^ (h >> 15)
    h = (h * 73244475) & M32
    return h ^ (h >> 16)


def hash_(salt, i):
    return mix((mix(i & M31) + salt) & M31)


def value(salt, i, shift):
    """Element i of the tensor with salt, for a Python int i."""
    return (((hash_(salt, i) >> 8) & 255) - 128) * 2.0 ** -shift


def tensor(torch, salt, shift, shape, dtype, dev):
    n = 1
    for s in shape:
        n *= s
    out = torch.empty(n, dtype=dtype, device=dev)
    step = 1 << 24
    for a in range(0, n, step):   # in pieces: the int64 temporaries of a whole expert would take gigabytes
        i = torch.arange(a, min(n, a + step), dtype=torch.int64, device=dev)
        out[a:a + i.numel()] = ((((hash_(salt, i) >> 8) & 255) - 128).to(torch.float32) * 2.0 ** -shift).to(dtype)
    return out.view(*shape)


def routing(torch, rank, tokens, experts, skewed, dev):
    """The dispatch workload's ids [T, 2] (int64) and weights [T, 2] (float32) of rank r."""
    u = hash_(ROUTING_SALT + rank, torch.arange(tokens, dtype=torch.int64, device=dev))
    first = u % experts
    if skewed:
        first = torch.where((u >> 20) % 4 != 0, torch.zeros_like(first), first)
    second = (first + 1 + (u >> 8) % (experts - 1)) % experts
    w0 = (8 + (u >> 4) % 8).to(torch.float32) / 16
    return torch.stack([first, second], 1), torch.stack([w0, 1 - w0], 1)


def selftest():
    print(mix(12345), hash_(3001, 777), value(2000, 4097, 12))


# ---------------------------------------------------------------- the two ways to route

def a2a(torch, dist, out, inp, out_splits=None, in_splits=None):
    """all_to_all_single; gloo (--cpu) has no bfloat16, so there its bytes travel as float16 (copied, never added)."""
    if inp.dtype == torch.bfloat16 and dist.get_backend() == "gloo":
        out, inp = out.view(torch.float16), inp.view(torch.float16)
    dist.all_to_all_single(out, inp, out_splits, in_splits)


def eager_route(torch, dist, x, ids, w, world, local, expert):
    """Real EP code: counts exchanged and read on the host, uneven all_to_all_single by them."""
    t, h = x.shape
    flat = ids.reshape(-1)
    dest = flat // local
    order = torch.argsort(dest, stable=True)
    send = torch.bincount(dest, minlength=world)
    recv = torch.empty_like(send)
    a2a(torch, dist, recv, send)
    send_splits, recv_splits = send.tolist(), recv.tolist()   # the host synchronisation that sizes the buffers
    rows = x.repeat_interleave(K, dim=0)[order]
    lid = (flat - dest * local)[order]
    n = sum(recv_splits)
    got, got_ids = x.new_empty(n, h), lid.new_empty(n)
    a2a(torch, dist, got, rows, recv_splits, send_splits)
    a2a(torch, dist, got_ids, lid, recv_splits, send_splits)
    done = expert(got, got_ids, False)
    back = x.new_empty(t * K, h)
    a2a(torch, dist, back, done, send_splits, recv_splits)
    pairs = torch.empty_like(back)
    pairs[order] = back
    return (pairs.view(t, K, h) * w.to(x.dtype).view(t, K, 1)).sum(1)


def padded_route(torch, dist, x, ids, w, world, local, expert):
    """Fixed capacity (T * 2 rows for each peer), no host synchronisation: even all_to_all_single."""
    t, h = x.shape
    cap = t * K
    flat = ids.reshape(-1)
    dest = flat // local
    onehot = (dest[:, None] == torch.arange(world, device=x.device)[None, :]).to(torch.int64)
    slot = dest * cap + (onehot.cumsum(0) - 1).gather(1, dest[:, None]).squeeze(1)
    rows = x.new_zeros(world * cap, h)
    rows[slot] = x.repeat_interleave(K, dim=0)
    lid = torch.zeros(world * cap, dtype=torch.int64, device=x.device)
    lid[slot] = flat - dest * local
    got, got_ids = torch.empty_like(rows), torch.empty_like(lid)
    a2a(torch, dist, got, rows)
    a2a(torch, dist, got_ids, lid)
    done = expert(got, got_ids, True)
    back = torch.empty_like(done)
    a2a(torch, dist, back, done)
    return (back[slot].view(t, K, h) * w.to(x.dtype).view(t, K, 1)).sum(1)


def scale_expert(torch):
    return lambda rows, lid, padded: rows * (1 + lid).to(rows.dtype)[:, None]


def swiglu_expert(torch, gate_up, down, f):
    import torch.nn.functional as F

    def run(rows, lid, padded):
        out = torch.zeros_like(rows)
        for e in range(gate_up.shape[0]):
            if padded:   # every row through expert e, kept where it is e's: no data-dependent shape
                a = rows @ gate_up[e].t()
                y = (F.silu(a[:, :f]) * a[:, f:]) @ down[e].t()
                out = torch.where((lid == e)[:, None], y, out)
            else:
                idx = (lid == e).nonzero().squeeze(1)   # a host synchronisation per expert
                if idx.numel():
                    a = rows[idx] @ gate_up[e].t()
                    out[idx] = (F.silu(a[:, :f]) * a[:, f:]) @ down[e].t()
        return out
    return run


def router(torch, x, weight):
    p = torch.softmax((x @ weight.t()).float(), -1)
    top, idx = torch.topk(p, K)
    return idx, top / top.sum(-1, keepdim=True)


# ---------------------------------------------------------------- timing, capture, comparison

def sync(torch):
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def timed(torch, dist, fn, warmup, iters):
    for _ in range(warmup):
        fn()
    sync(torch)
    dist.barrier()
    lat = []
    for _ in range(iters):
        a = time.perf_counter()
        fn()
        sync(torch)
        lat.append((time.perf_counter() - a) * 1e6)
    dist.barrier()
    a = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(torch)
    pipelined = (time.perf_counter() - a) * 1e6 / iters
    lat.sort()
    return {"latency_us": statistics.median(lat), "latency_p10_us": lat[int(0.1 * (iters - 1))], "pipelined_us": pipelined}


def capture(torch, fn):
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
    g.replay()   # capture records the work; the first replay computes out
    torch.cuda.synchronize()
    return g, out


def compare(y, case, rank, f32):
    """This rank's output against Gatun's fingerprint of the same case: None where it agrees, else why not. Over the
    tokens Gatun compared (the layer's leave out those whose router choice a rounding may flip: top-k ties)."""
    if case is None:
        return "no Gatun case"
    v = y.float().cpu()
    tokens = case["tokens_compared"][rank]
    if not tokens:
        return None
    h = v.shape[1]
    n = min(64, h)
    mine = v[tokens[0], :n].tolist() + v[tokens[-1], :n].tolist()
    theirs = case["samples"][rank]
    big = max(max(abs(a) for a in theirs), 1e-30)
    worst = max(abs(a - b) for a, b in zip(mine, theirs)) / big
    s, gs = float(v[tokens].abs().double().sum()), case["abs_sum"][rank]
    ds = abs(s - gs) / max(gs, 1e-30)
    if worst > (1e-3 if f32 else 3e-2) or ds > (1e-3 if f32 else 2e-2):
        return f"rank {rank}: differs from Gatun: samples {worst:.3g} of their largest, sum of magnitudes {ds:.3g}"
    return None


def gatun_case(g, workload, variant, tokens):
    for c in (g or {}).get("cases", []):
        if c["workload"] == workload and c["variant"] == variant and c["tokens"] == tokens:
            return c
    return None


def run_case(torch, dist, a, rank, world, g, workload, variant, tokens, make):
    """Eager and captured ways of one case; each failure recorded, the rest goes on."""
    row = {"workload": workload, "variant": variant, "tokens": tokens}
    case = gatun_case(g, workload, variant, tokens)
    f32 = a.dtype == "f32"
    for way, route in (("eager", eager_route), ("captured", padded_route)):
        try:
            fn = make(route)
            if way == "captured" and not a.cpu:
                graph, out = capture(torch, fn)
                step = graph.replay
            else:   # eager, or --cpu: the padded route run as it is (no CUDA graph on a CPU)
                out, step = fn(), fn
            sync(torch)
            problems = [p for p in gather(dist, world, compare(out, case, rank, f32)) if p]
            row[way] = timed(torch, dist, step, a.warmup, a.iters)
            row[way]["check"] = "; ".join(problems) if problems else ("matches Gatun" if case else "no Gatun case")
        except Exception as e:   # noqa: BLE001 -- one failing way must not stop the others
            traceback.print_exc()
            row[way] = {"error": f"{type(e).__name__}: {e}"[:300]}
            try:
                sync(torch)
            except Exception:   # noqa: BLE001
                pass
    return row


def gather(dist, world, obj):
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


# ---------------------------------------------------------------- the report

def cell(r):
    if r is None:
        return "—"
    if "error" in r:
        return "FAILED"
    wrong = "WRONG " if "differs" in r.get("check", "") else ""
    return f"{wrong}{r['latency_us']:.1f} / {r['pipelined_us']:.1f}"


def report(a, world, rows, g):
    lines = [f"# MoE expert parallelism, {world} ranks, {a.dtype}, hidden {a.hidden}, top-{K} of {a.experts} experts", "",
             "Each cell: latency (median, synchronised) / pipelined, microseconds; rank 0's clock.", "",
             "| workload | routing | tokens a rank | Gatun | PyTorch eager | PyTorch captured | Gatun / eager | Gatun / captured | check |",
             "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for r in rows:
        c = gatun_case(g, r["workload"], r["variant"], r["tokens"])
        gc = None if c is None else {"latency_us": c["latency_us"], "pipelined_us": c["pipelined_us"]}
        ratios = []
        for way in ("eager", "captured"):
            t = r.get(way)
            if gc and t and "error" not in t:
                ratios.append(f"{gc['latency_us'] / t['latency_us']:.2f} / {gc['pipelined_us'] / t['pipelined_us']:.2f}")
            else:
                ratios.append("—")
            if t and "error" in t:
                notes.append(f"- {r['workload']} {r['variant']} {r['tokens']} tokens, PyTorch {way}: {t['error']}")
        checks = [r[w]["check"] for w in ("eager", "captured") if r.get(w) and "check" in r[w]]
        lines.append(f"| {r['workload']} | {r['variant']} | {r['tokens']} | {cell(gc)} | {cell(r.get('eager'))} | {cell(r.get('captured'))} | "
                     f"{ratios[0]} | {ratios[1]} | {'; '.join(dict.fromkeys(checks)) or '—'} |")
    lines += ["", "Targets (issue 38): dispatch+combine at most 0.5x PyTorch; the layer faster than PyTorch captured (ratio below 1).",
              "PyTorch captured routes through a fixed capacity of T * 2 rows a peer and runs each local expert on every row of it."]
    if g:
        lines += ["", "Gatun: " + ", ".join(f"{c['workload']} {c['variant']} {c['tokens']}: all_to_all {c['algorithm']}, capacity {c['capacity']}, "
                                            f"{c['partitions']} partition(s)" for c in g["cases"])]
    if notes:
        lines += ["", "Failures:"] + notes
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--selftest", action="store_true")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=14336)
    p.add_argument("--layer-tokens", default="1,8,128")
    p.add_argument("--only", default="all", choices=["all", "dispatch", "layer"])
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--gatun")
    p.add_argument("--out", default="torch-moe.json")
    p.add_argument("--md", default="moe.md")
    p.add_argument("--cpu", action="store_true", help="gloo on the CPU: tries the script without a GPU (the captured way runs uncaptured)")
    a = p.parse_args()
    if a.selftest:
        return selftest()
    bad = {k: os.environ.get(k) for k, v in SAFE_ENV.items() if os.environ.get(k) != v}
    if bad:
        sys.exit(f"moe_torch: refusing to run: set {', '.join(f'{k}={v}' for k, v in SAFE_ENV.items())} (now {bad})")
    import torch
    import torch.distributed as dist
    rank, world, lr = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_RANK", "0"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29518")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    if a.cpu:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        dev = torch.device("cuda", lr)
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
    if a.experts % world:
        sys.exit(f"moe_torch: --experts {a.experts} is no multiple of the world {world}")
    g = None
    if a.gatun and os.path.exists(a.gatun):
        with open(a.gatun) as fh:
            g = json.load(fh)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    local, h, f = a.experts // world, a.hidden, a.intermediate
    rows = []
    if a.only in ("all", "dispatch"):
        x = tensor(torch, TOKEN_SALT + rank, TOKEN_SHIFT, (a.tokens, h), dt, dev)
        for variant in ("uniform", "skewed"):
            ids, w = routing(torch, rank, a.tokens, a.experts, variant == "skewed", dev)
            rows.append(run_case(torch, dist, a, rank, world, g, "dispatch+combine", variant, a.tokens,
                                 lambda route, ids=ids, w=w: (lambda: route(torch, dist, x, ids, w, world, local, scale_expert(torch)))))
            if rank == 0:
                print(json.dumps(rows[-1]), flush=True)
    if a.only in ("all", "layer"):
        rw = tensor(torch, ROUTER_SALT, ROUTER_SHIFT, (a.experts, h), dt, dev)
        gate_up = torch.stack([tensor(torch, GATE_UP_SALT + rank * local + e, EXPERT_SHIFT, (2 * f, h), dt, dev) for e in range(local)])
        down = torch.stack([tensor(torch, DOWN_SALT + rank * local + e, EXPERT_SHIFT, (h, f), dt, dev) for e in range(local)])
        expert = swiglu_expert(torch, gate_up, down, f)
        for t in sorted(int(s) for s in a.layer_tokens.split(",")):
            x = tensor(torch, TOKEN_SALT + rank, TOKEN_SHIFT, (t, h), dt, dev)

            def make(route, x=x):
                def step():
                    ids, w = router(torch, x, rw)
                    return route(torch, dist, x, ids, w, world, local, expert)
                return step
            rows.append(run_case(torch, dist, a, rank, world, g, "layer", "mixtral", t, make))
            if rank == 0:
                print(json.dumps(rows[-1]), flush=True)
    if rank == 0:
        md = report(a, world, rows, g)
        print(md)
        with open(a.md, "w") as fh:
            fh.write(md)
        with open(a.out, "w") as fh:
            json.dump({"system": "pytorch", "torch": torch.__version__, "world": world, "dtype": a.dtype, "cases": rows}, fh, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

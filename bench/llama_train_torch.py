"""PyTorch peer of Gatun's LlamaTrainBench: the same Llama-shape training step in plain torch, sharded with FSDP2
(fully_shard, one unit per decoder layer and the root), eager and with torch.compile (each layer compiled), on the
same shape, data and initial weights.

    torchrun --nproc_per_node N bench/llama_train_torch.py [--config 1b|tiny] [--layers ...] [--seq 2048] [--batch 1]
        [--compute bf16|f32] [--steps 10] [--warmup 3] [--lr 1e-4] [--seed 0] [--modes eager,compile]
        [--gatun gatun-train.json] [--out torch-train.json] [--peak-tflops 989]

One process per GPU (N = 1 works too: FSDP2 over a mesh of one). The model is LlamaTraining's graph written in torch:
the embedding (its rows looked up), per layer RMSNorm (x * rsqrt(mean(x^2) + eps) * w, in the compute dtype), q/k/v
projections without bias, rotary embeddings in the half-split layout from tables of float32 angles (position *
inv_freq, cos and sin rounded to the compute dtype), causal grouped-query attention (scaled_dot_product_attention,
scale 1/sqrt(head size)), o_proj, the residual, RMSNorm, the gated SiLU MLP, the residual; the final norm, the head
(the embedding itself where tied), the logits cast to float32 and the mean cross-entropy of each position's next
token. The weights are float32 masters; with --compute bf16 FSDP2 gathers bf16 copies and reduce-scatters bf16
gradients (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16)), as Gatun's graph casts each shard to bf16
before its all-gather. AdamW (betas 0.9, 0.999, eps 1e-8, weight decay 0.01) after clip_grad_norm_(1.0): Gatun's
optimizer has torch.optim.AdamW's and clip_grad_norm_'s formulas.

Initial weights and data by LlamaTrainBench's formulas (TrainInit): element i of weight NAME is std * sqrt(3) *
(2u - 1), std 0.02, u the top 53 bits of splitmix64(base + (i + 1) * 0x9E3779B97F4A7C15) over 2^53, base =
fnv1a64(NAME) ^ seed; norm weights are ones; each rank computes only its block of dimension 0. Token i of sequence s
is ((i + 31 s) * 7919 + 13) mod vocab; rank r takes sequences r * batch to r * batch + batch - 1.

Each step is timed on rank 0 until the loss is on the host (median of the timed steps); the peak is
torch.cuda.max_memory_allocated over the timed steps. With --gatun (LlamaTrainBench's JSON of the same shape) rank 0
compares each step's loss (the largest relative difference; within 1e-4 is the acceptance in float32) and sets the
times, tokens/s, MFU and memory side by side. Refuses to run unless NVLink multicast is off (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1), as the rest of the suite does.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
GOLDEN = 0x9E3779B97F4A7C15
MASK = (1 << 64) - 1
CONFIGS = {
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=256, rope_theta=10000.0, eps=1e-5, tied=False),
    "1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, intermediate=8192, vocab=128256, rope_theta=500000.0, eps=1e-5, tied=True),
}


def fnv1a64(s):
    h = 0xcbf29ce484222325
    for b in s.encode("utf-8"):
        h = ((h ^ b) * 0x100000001b3) & MASK
    return h


def elements(np, name, seed, std, first, n):
    """Elements first .. first + n - 1 of weight NAME as float32, as TrainInit.elements makes them."""
    if name.endswith("norm.weight"):
        return np.ones(n, dtype=np.float32)
    base = np.uint64((fnv1a64(name) ^ seed) & MASK)
    out = np.empty(n, dtype=np.float32)
    scale = std * math.sqrt(3)
    chunk = 1 << 24
    with np.errstate(over="ignore"):
        for a in range(0, n, chunk):
            i = np.arange(first + a + 1, first + min(n, a + chunk) + 1, dtype=np.uint64)
            z = base + i * np.uint64(GOLDEN)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            u = (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
            out[a:a + len(i)] = (scale * (2 * u - 1)).astype(np.float32)
    return out


def token(c, s, i):
    return ((i + 31 * s) * 7919 + 13) % c["vocab"]


def build(torch, c, compute):
    nn, F = torch.nn, torch.nn.functional
    h, nh, kv = c["hidden"], c["heads"], c["kv_heads"]
    d = h // nh

    def rms(x, w):
        return x * torch.rsqrt(x.mul(x).mean(-1, keepdim=True) + c["eps"]) * w

    def rope(x, cos, sin):
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        c1, c2, s1, s2 = cos[..., : d // 2], cos[..., d // 2:], sin[..., : d // 2], sin[..., d // 2:]
        return torch.cat([x1 * c1 - x2 * s1, x2 * c2 + x1 * s2], -1)

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj = nn.Linear(h, nh * d, bias=False), nn.Linear(h, kv * d, bias=False)
            self.v_proj, self.o_proj = nn.Linear(h, kv * d, bias=False), nn.Linear(nh * d, h, bias=False)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            ff = c["intermediate"]
            self.gate_proj, self.up_proj, self.down_proj = nn.Linear(h, ff, bias=False), nn.Linear(h, ff, bias=False), nn.Linear(ff, h, bias=False)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = nn.Module(), nn.Module()
            self.input_layernorm.weight = nn.Parameter(torch.empty(h))
            self.post_attention_layernorm.weight = nn.Parameter(torch.empty(h))
            self.self_attn, self.mlp = Attn(), Mlp()

        def forward(self, x, cos, sin, b, t):
            a = self.self_attn
            xn = rms(x, self.input_layernorm.weight)
            q = rope(a.q_proj(xn).view(b, t, nh, d), cos, sin).transpose(1, 2)
            k = rope(a.k_proj(xn).view(b, t, kv, d), cos, sin).transpose(1, 2)
            v = a.v_proj(xn).view(b, t, kv, d).transpose(1, 2)
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(d), enable_gqa=True)
            x = x + a.o_proj(att.transpose(1, 2).reshape(b * t, nh * d))
            xn = rms(x, self.post_attention_layernorm.weight)
            m = self.mlp
            return x + m.down_proj(F.silu(m.gate_proj(xn)) * m.up_proj(xn))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = nn.Module()
            self.model.embed_tokens = nn.Module()
            self.model.embed_tokens.weight = nn.Parameter(torch.empty(c["vocab"], h))
            self.model.layers = nn.ModuleList([Layer() for _ in range(c["layers"])])
            self.model.norm = nn.Module()
            self.model.norm.weight = nn.Parameter(torch.empty(h))
            if not c["tied"]:
                self.lm_head = nn.Module()
                self.lm_head.weight = nn.Parameter(torch.empty(c["vocab"], h))

        def forward(self, ids, targets, cos, sin, b, t):
            x = F.embedding(ids, self.model.embed_tokens.weight)
            for layer in self.model.layers:
                x = layer(x, cos, sin, b, t)
            hn = rms(x, self.model.norm.weight)
            head = self.model.embed_tokens.weight if c["tied"] else self.lm_head.weight
            return F.cross_entropy(F.linear(hn, head).float(), targets)

    return Llama()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="1b", choices=sorted(CONFIGS))
    for k in ("layers", "hidden", "heads", "kv-heads", "intermediate", "vocab"):
        p.add_argument("--" + k, type=int)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--compute", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--gatun")
    p.add_argument("--out", default="torch-train.json")
    a = p.parse_args()
    bad = {k: os.environ.get(k) for k, v in SAFE_ENV.items() if os.environ.get(k) != v}
    if bad:
        sys.exit(f"llama_train_torch: refusing to run: set {', '.join(f'{k}={v}' for k, v in SAFE_ENV.items())} (now {bad})")
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    c = dict(CONFIGS[a.config])
    for k in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab"):
        if getattr(a, k) is not None:
            c[k] = getattr(a, k)
    rank, world, local = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    dist.init_process_group("nccl", device_id=dev)
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cuda", (world,))
    dt = torch.bfloat16 if a.compute == "bf16" else torch.float32
    b, t, h, d = a.batch, a.seq, c["hidden"], c["hidden"] // c["heads"]
    # the data: rank r's sequences, and the rotary tables of float32 angles rounded to the compute dtype
    seqs = [[token(c, rank * b + s, i) for i in range(t + 1)] for s in range(b)]
    ids = torch.tensor([q[:t] for q in seqs], dtype=torch.long, device=dev).reshape(-1)
    targets = torch.tensor([q[1:] for q in seqs], dtype=torch.long, device=dev).reshape(-1)
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    ang = torch.arange(t, dtype=torch.float32)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos().to(dt).to(dev).view(1, t, 1, d), ang.sin().to(dt).to(dev).view(1, t, 1, d)
    flops_token = 6.0 * (c["layers"] * (h * c["heads"] * d * 2 + 2 * h * c["kv_heads"] * d + 3 * h * c["intermediate"]) + c["vocab"] * h) \
        + 12.0 * c["layers"] * c["heads"] * d * t
    results = {}
    for mode in [m for m in a.modes.split(",") if m]:
        try:
            results[mode] = run(torch, np, dist, fully_shard, MixedPrecisionPolicy, mesh, c, a, dt, mode, rank, world, ids, targets, cos, sin, b, t)
        except Exception as e:  # torch.compile where it runs: a failure is a row that says so
            if rank == 0:
                print(f"torch {mode}: failed: {type(e).__name__}: {e}", flush=True)
            results[mode] = {"error": f"{type(e).__name__}: {e}"}
        torch.cuda.empty_cache()
    if rank == 0:
        report(a, c, results, world, b, t, flops_token)
    dist.destroy_process_group()


def run(torch, np, dist, fully_shard, MixedPrecisionPolicy, mesh, c, a, dt, mode, rank, world, ids, targets, cos, sin, b, t):
    with torch.device("meta"):
        model = build(torch, c, dt)
    if mode == "compile":
        for layer in model.model.layers:
            layer.compile()   # in place: the parameters keep their names
    policy = MixedPrecisionPolicy(param_dtype=dt, reduce_dtype=dt) if dt != torch.float32 else MixedPrecisionPolicy()
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    model.to_empty(device="cuda")
    with torch.no_grad():
        for name, p in model.named_parameters():
            name = name.replace("._orig_mod", "")
            local = p.to_local()
            block = elements(np, name, a.seed, 0.02, rank * local.numel(), local.numel())
            local.copy_(torch.from_numpy(block).view(local.shape))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses, times = [], []
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(ids, targets, cos, sin, b, t)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = loss.detach().float()
        dist.all_reduce(value, op=dist.ReduceOp.AVG)
        losses.append(float(value.item()))
        if step >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    peak = torch.cuda.max_memory_allocated()
    del model, opt
    return {"losses": losses, "step_ms": statistics.median(times), "step_ms_all": times, "peak_bytes": peak}


def report(a, c, results, world, b, t, flops_token):
    tokens = world * b * t
    gatun = None
    if a.gatun and os.path.exists(a.gatun):
        with open(a.gatun) as f:
            gatun = json.load(f)
    print(f"llama training step: {c}, {world} rank(s), {b} x {t} tokens a rank, {a.compute} compute over f32 masters")
    rows = []
    for mode, r in results.items():
        if "error" in r:
            rows.append((f"torch {mode}", None, None, None, None, r["error"]))
            continue
        tps = tokens / (r["step_ms"] / 1e3)
        r["tokens_per_s"], r["mfu"] = tps, tps * flops_token / (world * a.peak_tflops * 1e12)
        note = ""
        if gatun is not None:
            n = min(len(gatun["losses"]), len(r["losses"]))
            diff = max(abs(g - q) / abs(q) for g, q in zip(gatun["losses"][:n], r["losses"][:n]))
            r["max_rel_loss_diff_vs_gatun"] = diff
            note = f"losses vs Gatun's over {n} steps: largest relative difference {diff:.2e}"
        rows.append((f"torch {mode}", r["step_ms"], tps, r["mfu"], r["peak_bytes"], note))
        print(f"torch {mode} losses: {r['losses']}")
    if gatun is not None:
        rows.append(("gatun", gatun["step_ms"], gatun["tokens_per_s"], gatun["mfu"], gatun.get("pool_bytes"), "pool bytes (the plan's pools, states included)"))
        print(f"gatun losses: {gatun['losses']}")
    print(f"{'system':<16}{'step ms':>10}{'tokens/s':>12}{'MFU':>8}{'peak GB':>9}  note")
    for name, ms, tps, mfu, peak, note in rows:
        if ms is None:
            print(f"{name:<16}{'-':>10}{'-':>12}{'-':>8}{'-':>9}  {note}")
        else:
            print(f"{name:<16}{ms:>10.2f}{tps:>12.0f}{100 * mfu:>7.1f}%{(peak or 0) / 1e9:>9.2f}  {note}")
    best = [r["step_ms"] for r in results.values() if "step_ms" in r]
    if gatun is not None and best:
        print(f"gatun / torch's best step time: {gatun['step_ms'] / min(best):.3f} (the acceptance asks at most 0.8)")
    with open(a.out, "w") as f:
        json.dump({"system": "torch", "config": c, "seq": t, "batch": b, "world": world, "compute": a.compute, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()

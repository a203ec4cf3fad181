"""PyTorch peer of Gatun's LlamaBench: the same checkpoint directory through Hugging Face transformers, on the GPU,
or at tensor parallelism under torchrun.

    python3 bench/llama_torch.py --dir DIR [--prompt 512] [--new 32] [--runs 5] [--warmup 1] [--batch 1] [--gatun gatun-llama.json [--fp32]] [--out torch-llama.json]
    torchrun --nproc_per_node N bench/llama_torch.py --tp N --dir DIR [same options] [--check] [--no-graphs]

Loads config.json and model.safetensors with LlamaForCausalLM in bfloat16, runs the same prompt (token i is
(i * 7919 + 13) mod vocab, as LlamaBench makes it), and measures, like LlamaBench, the prefill call and each
decode call (with the model's KV cache) until its greedy token is on the host, medians over runs after one
warm-up. With --gatun it compares Gatun's tokens and first-step logits with its own and prints both systems' times
side by side. Run it with the machine's python3 (the one with torch and transformers) on the GPU host; it refuses
to run unless NVLink multicast is off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1), as the rest of the suite does.

--tp N (N > 1, one process per GPU under torchrun) runs a hand-written Megatron-style Llama in plain torch instead of
transformers, sharded as Gatun's LlamaDecoder shards it: each rank loads its rows of q|k|v and gate|up
(column-parallel, one fused product each) and its columns of o and down (row-parallel, each followed by an NCCL
all-reduce of the residual branch); the embedding, the norms and the output projection are whole on every rank. A
static KV cache of prompt + new positions; the prefill uses scaled_dot_product_attention (causal, grouped-query), a
decode step one grouped product per key-value head over the cache with a mask up to its position. Decode is timed
eagerly and, unless --no-graphs, replaying one CUDA graph of the whole step (NCCL all-reduces captured in it).
Rank 0 prints and writes the JSON and compares with --gatun (LlamaBench's JSON at the same --tp). --check: rank 0
also runs the checkpoint through transformers on its GPU, in bfloat16 and in float32, and checks that the TP
first-step logits are as close to float32's as transformers' bfloat16 ones are (exit status 1 if not).
"""
import argparse
import json
import os
import statistics
import sys
import time

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def prompt_ids(n, vocab, b=0):
    """Sequence b's prompt: token i is ((i + 31 b) * 7919 + 13) mod vocab, as LlamaBench makes it."""
    return [((i + 31 * b) * 7919 + 13) % vocab for i in range(n)]


def generate(model, torch, ids, new):
    """Each sequence's greedy tokens after ids [batch, prompt]; the first sequence's first logits; the prefill's and
    each step's host wall time (ms) until the tokens are on the host."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model(ids, use_cache=True, logits_to_keep=1)   # the last position's logits only, as Gatun computes them
    past = out.past_key_values
    nxt = out.logits[:, -1].argmax(-1)
    tokens = [[int(t)] for t in nxt.cpu()]
    prefill_ms = (time.perf_counter() - t0) * 1e3
    first_logits = out.logits[0, -1].float().cpu()
    steps = []
    for _ in range(new - 1):
        t0 = time.perf_counter()
        out = model(nxt[:, None], past_key_values=past, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1)
        host = nxt.cpu()
        steps.append((time.perf_counter() - t0) * 1e3)
        for seq, t in zip(tokens, host):
            seq.append(int(t))
    return tokens, first_logits, prefill_ms, steps


def main(argv):
    for k, v in SAFE_ENV.items():
        if os.environ.get(k) != v:
            print(f"llama_torch.py: refusing to run: {k} must be {v!r}", file=sys.stderr)
            return 2
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1, help="generations before the timed ones (the first of --runs counts as one)")
    p.add_argument("--batch", type=int, default=1, help="sequences at once, each with its own prompt (as LlamaBench --batch)")
    p.add_argument("--gatun", help="Gatun's LlamaBench JSON, to compare tokens, logits and times")
    p.add_argument("--out", default="torch-llama.json")
    p.add_argument("--fp32", action="store_true", help="with --gatun: score both systems' tokens with the float32 model")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                   help="the model's type on one GPU (float32: compare with LlamaBench --dtype f32, token for token)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks: N > 1 under torchrun --nproc_per_node N")
    p.add_argument("--check", action="store_true", help="with --tp: compare the first-step logits with transformers' (rank 0)")
    p.add_argument("--no-graphs", action="store_true", help="with --tp: time the decode eagerly only")
    a = p.parse_args(argv)
    if a.tp > 1:
        return run_tp(a)
    if a.check or a.no_graphs:
        print("llama_torch.py: --check and --no-graphs are for --tp N > 1", file=sys.stderr)
        return 2
    if a.dtype == "float32" and a.fp32:
        print("llama_torch.py: --fp32 scores a bfloat16 run; with --dtype float32 the run is the float32 model", file=sys.stderr)
        return 2
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(a.dir, torch_dtype=getattr(torch, a.dtype)).to("cuda").eval()
    vocab = model.config.vocab_size
    ids = torch.tensor([prompt_ids(a.prompt, vocab, b) for b in range(a.batch)], device="cuda")
    with torch.no_grad():
        sequences, first_logits, _, _ = generate(model, torch, ids, a.new)
        tokens = sequences[0]
        for _ in range(a.warmup - 1):
            generate(model, torch, ids, a.new)
        prefill, decode = [], []
        for _ in range(max(1, a.runs - 1)):
            t, _, pm, steps = generate(model, torch, ids, a.new)
            if t != sequences:
                # batched bf16 kernels may pick other reduction orders from run to run: a near tie can flip
                print("pytorch: a later run gave other tokens (its own run-to-run variation); the first run's are compared")
            prefill.append(pm)
            decode.append(statistics.median(steps) if steps else float("nan"))
    result = {"system": "pytorch", "device": torch.cuda.get_device_name(), "versions": f"torch {torch.__version__}",
              "dtype": a.dtype, "prompt": a.prompt, "new": a.new, "batch": a.batch, "tokens": tokens, "sequences": sequences,
              "prefill_ms": statistics.median(prefill), "decode_ms": statistics.median(decode)}
    print(f"pytorch: batch {a.batch}, tokens {tokens}; prefill of {a.prompt} tokens {result['prefill_ms']:.3f} ms, "
          f"decode {result['decode_ms']:.3f} ms a token (eager, KV cache)")
    if a.gatun:
        with open(a.gatun) as f:
            g = json.load(f)
        if g.get("prompt") != a.prompt or g.get("batch", 1) != a.batch or g.get("new") != a.new or g.get("dtype", "bfloat16") != a.dtype:
            print(f"llama_torch.py: {a.gatun} was made with prompt {g.get('prompt')}, batch {g.get('batch', 1)}, new {g.get('new')},"
                  f" dtype {g.get('dtype', 'bfloat16')}; run with the same", file=sys.stderr)
            return 2
        agreement(torch, g, first_logits, tokens, sequences, result, " (the float32 scoring below is of sequence 0)", "")
        if a.fp32:
            # the same weights in float32: how far each bf16 system is from it, and whether a differing greedy choice
            # was a near tie (each system's sequence scored by the float32 model, teacher-forced)
            del model
            torch.cuda.empty_cache()
            ref = LlamaForCausalLM.from_pretrained(a.dir, torch_dtype=torch.float32).to("cuda").eval()
            with torch.no_grad():
                def scored(seq):
                    full = torch.tensor([prompt_ids(a.prompt, vocab) + seq[:-1]], device="cuda")
                    return ref(full).logits[0, a.prompt - 1:].double().cpu()
                lg, lt = scored(g["tokens"]), scored(tokens)
            fl = lg[0]
            result["gatun_rel_err_fp32"] = rel_err(torch, torch.tensor(g["first_logits"], dtype=torch.float64), fl)
            result["torch_rel_err_fp32"] = rel_err(torch, first_logits, fl)
            def agree(lgs, seq):
                # per step: the float32 model's best token, and how far below it the system's choice scores
                return [(int(l.argmax()), float(l.max() - l[t])) for l, t in zip(lgs, seq)]
            result["gatun_vs_fp32"] = agree(lg, g["tokens"])
            result["torch_vs_fp32"] = agree(lt, tokens)
            top2 = fl.topk(2).values
            print(f"against float32 (same weights): first-step logits relative error Gatun {result['gatun_rel_err_fp32']:.3g}, "
                  f"PyTorch bf16 {result['torch_rel_err_fp32']:.3g}; float32's top-2 gap {float(top2[0] - top2[1]):.3g}")
            for name, rows in (("Gatun", result["gatun_vs_fp32"]), ("PyTorch bf16", result["torch_vs_fp32"])):
                miss = [(k, round(gap, 4)) for k, (best, gap) in enumerate(rows) if gap > 0]
                print(f"{name}: {len(rows) - len(miss)} of {len(rows)} greedy choices are float32's best on its own prefix; "
                      f"the others (step, logit below the best): {miss}")
        print("| system | prefill ms | decode ms/token |\n| --- | --- | --- |")
        print(f"| Gatun | {g['prefill_ms']:.3f} | {g['decode_ms']:.3f} |")
        print(f"| PyTorch eager | {result['prefill_ms']:.3f} | {result['decode_ms']:.3f} |")
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


# ---------------------------------------------------------------------------------------------------------------------
# Tensor parallelism (--tp N > 1, under torchrun): a hand-written Llama, one rank's shard per process


def rope_inv_freq(torch, cfg, d):
    """The rotary frequencies in float32 as transformers computes them (rope_theta; llama3 scaling where configured)."""
    import math
    params = cfg.get("rope_parameters") or {}
    theta = float(cfg.get("rope_theta", params.get("rope_theta", 10000.0)))
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = cfg.get("rope_scaling") or (params if params.get("rope_type", "default") != "default" else None)
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return inv
    if kind != "llama3":
        raise SystemExit(f"llama_torch.py --tp: rope_scaling {kind!r} is not implemented (default and llama3 are)")
    factor, low, high = float(scaling["factor"]), float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) * ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)


class TPLlama:
    """Rank `rank` of `tp`: its shard of the checkpoint on `dev` (bf16), a static KV cache of `max_len` positions for
    `batch` sequences, a prefill and a decode step; the residual branches are summed over the ranks with `all_reduce`."""

    def __init__(self, torch, dist, directory, tp, rank, dev, batch, max_len):
        from safetensors import safe_open
        self.torch, self.dist, self.dev, self.batch, self.max_len = torch, dist, dev, batch, max_len
        with open(os.path.join(directory, "config.json")) as f:
            cfg = json.load(f)
        self.cfg = cfg
        h, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        inter, self.layers = cfg["intermediate_size"], cfg["num_hidden_layers"]
        d = cfg.get("head_dim") or h // heads
        if heads % tp or inter % tp or (kv % tp and tp % kv):
            raise SystemExit(f"llama_torch.py --tp {tp}: heads {heads}, key-value heads {kv}, intermediate {inter} do not shard {tp} ways")
        hl, kl, fl = heads // tp, max(1, kv // tp), inter // tp
        group = hl // kl
        # this rank's key-value heads: a share, or the one its query heads use (as Gatun's LlamaPrefill.shard)
        kv_first = rank * kl if kv >= tp else rank * hl // (heads // kv)
        self.d, self.hl, self.kl, self.fl, self.group, self.eps = d, hl, kl, fl, group, float(cfg.get("rms_norm_eps", 1e-6))
        bf = torch.bfloat16
        w = {}
        with safe_open(os.path.join(directory, "model.safetensors"), framework="pt", device="cpu") as f:
            def get(name, rows=None, cols=None):
                sl = f.get_slice(name)
                t = sl[rows[0]:rows[1]] if rows else sl[:, cols[0]:cols[1]] if cols else sl[:]
                return t.to(device=dev, dtype=bf).contiguous()
            w["embed"] = get("model.embed_tokens.weight")
            for l in range(self.layers):
                p = f"model.layers.{l}."
                w[p + "in"] = get(p + "input_layernorm.weight")
                w[p + "qkv"] = torch.cat([get(p + "self_attn.q_proj.weight", rows=(rank * hl * d, (rank + 1) * hl * d)),
                                          get(p + "self_attn.k_proj.weight", rows=(kv_first * d, (kv_first + kl) * d)),
                                          get(p + "self_attn.v_proj.weight", rows=(kv_first * d, (kv_first + kl) * d))])
                w[p + "o"] = get(p + "self_attn.o_proj.weight", cols=(rank * hl * d, (rank + 1) * hl * d))
                w[p + "post"] = get(p + "post_attention_layernorm.weight")
                w[p + "gate_up"] = torch.cat([get(p + "mlp.gate_proj.weight", rows=(rank * fl, (rank + 1) * fl)),
                                              get(p + "mlp.up_proj.weight", rows=(rank * fl, (rank + 1) * fl))])
                w[p + "down"] = get(p + "mlp.down_proj.weight", cols=(rank * fl, (rank + 1) * fl))
            w["norm"] = get("model.norm.weight")
            tied = cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in f.keys()
            w["lm_head"] = w["embed"] if tied else get("lm_head.weight")
        self.w = w
        self.weight_bytes = sum(t.numel() * t.element_size() for t in {id(t): t for t in w.values()}.values())
        self.inv_freq = rope_inv_freq(torch, cfg, d).to(dev)
        self.k = [torch.zeros(batch, kl, max_len, d, dtype=bf, device=dev) for _ in range(self.layers)]
        self.v = [torch.zeros(batch, kl, max_len, d, dtype=bf, device=dev) for _ in range(self.layers)]
        self.positions = torch.arange(max_len, device=dev)
        # the decode step's inputs and outputs, fixed tensors so that a CUDA graph of the step can be replayed
        self.tok = torch.zeros(batch, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.graph = None

    def norm(self, x, weight):
        """transformers' LlamaRMSNorm: in float32, the weight applied to the result rounded back."""
        t = self.torch
        xf = x.float()
        return weight * (xf * t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def rotary(self, positions):
        """cos and sin [positions, d] in bf16: the float32 angles, as transformers computes them."""
        angle = positions.float()[:, None] * self.inv_freq[None, :]
        emb = self.torch.cat((angle, angle), dim=-1)
        return emb.cos().to(self.torch.bfloat16), emb.sin().to(self.torch.bfloat16)

    @staticmethod
    def rope(torch, x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def reduce(self, x):
        self.dist.all_reduce(x)
        return x

    def prefill(self, ids):
        """ids [batch, t]: fills the caches' first t positions; the last position's logits [batch, vocab] and tokens."""
        t, F = self.torch, self.torch.nn.functional
        b, n = ids.shape
        d, hl, kl = self.d, self.hl, self.kl
        cos, sin = self.rotary(self.positions[:n])
        x = F.embedding(ids, self.w["embed"])                                      # [b, n, hidden]
        for l in range(self.layers):
            p = f"model.layers.{l}."
            qkv = (self.norm(x, self.w[p + "in"]) @ self.w[p + "qkv"].T).view(b, n, hl + 2 * kl, d).transpose(1, 2)
            q = self.rope(t, qkv[:, :hl], cos, sin)
            k = self.rope(t, qkv[:, hl:hl + kl], cos, sin)
            v = qkv[:, hl + kl:]
            self.k[l][:, :, :n] = k
            self.v[l][:, :, :n] = v
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)   # [b, hl, n, d]
            x = x + self.reduce(a.transpose(1, 2).reshape(b, n, hl * d) @ self.w[p + "o"].T)
            gu = self.norm(x, self.w[p + "post"]) @ self.w[p + "gate_up"].T
            x = x + self.reduce((F.silu(gu[..., :self.fl]) * gu[..., self.fl:]) @ self.w[p + "down"].T)
        logits = self.norm(x[:, -1], self.w["norm"]) @ self.w["lm_head"].T
        return logits, logits.argmax(-1)

    def step(self):
        """One decode step of self.tok at self.pos (tensors on the device): logits [batch, vocab] and tokens."""
        t, F = self.torch, self.torch.nn.functional
        b, d, hl, kl, g = self.batch, self.d, self.hl, self.kl, self.group
        cos, sin = self.rotary(self.pos)                                            # [1, d]
        visible = (self.positions <= self.pos).view(1, 1, 1, self.max_len)
        x = F.embedding(self.tok, self.w["embed"])                                  # [b, hidden]
        for l in range(self.layers):
            p = f"model.layers.{l}."
            qkv = (self.norm(x, self.w[p + "in"]) @ self.w[p + "qkv"].T).view(b, hl + 2 * kl, d)
            q = self.rope(t, qkv[:, :hl], cos, sin)                                 # [b, hl, d]
            k = self.rope(t, qkv[:, hl:hl + kl], cos, sin)                          # [b, kl, d]
            self.k[l].index_copy_(2, self.pos, k.unsqueeze(2))
            self.v[l].index_copy_(2, self.pos, qkv[:, hl + kl:].unsqueeze(2))
            # the query heads sharing a key-value head are one batch of rows: [b, kl, g, d] @ [b, kl, d, max_len]
            scores = (q.view(b, kl, g, d) @ self.k[l].transpose(2, 3)) * (d ** -0.5)
            probs = t.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1, dtype=t.float32).to(t.bfloat16)
            a = (probs @ self.v[l]).reshape(b, hl * d)
            x = x + self.reduce(a @ self.w[p + "o"].T)
            gu = self.norm(x, self.w[p + "post"]) @ self.w[p + "gate_up"].T
            x = x + self.reduce((F.silu(gu[:, :self.fl]) * gu[:, self.fl:]) @ self.w[p + "down"].T)
        logits = self.norm(x, self.w["norm"]) @ self.w["lm_head"].T
        return logits, logits.argmax(-1)

    def capture(self):
        """Captures self.step as one CUDA graph (after warm-ups on a side stream); self.out its fixed outputs."""
        t = self.torch
        self.pos.fill_(self.max_len - 1)   # the warm-ups write that position of the caches; a step writes before it reads
        s = t.cuda.Stream()
        s.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(s):
            for _ in range(3):
                self.step()
        t.cuda.current_stream().wait_stream(s)
        t.cuda.synchronize()
        g = t.cuda.CUDAGraph()
        # thread_local: the NCCL watchdog's own CUDA calls on its thread do not invalidate the capture
        with t.cuda.graph(g, capture_error_mode="thread_local"):
            self.out = self.step()
        t.cuda.synchronize()
        self.graph = g

    def generate(self, ids, new, graph):
        """Greedy tokens as in generate(): each sequence's tokens, the first step's logits (sequence 0), the prefill's
        and each step's host wall time (ms) until the tokens are on the host; the decode eager or replaying the graph."""
        t = self.torch
        t.cuda.synchronize()
        t0 = time.perf_counter()
        logits, nxt = self.prefill(ids)
        tokens = [[int(x)] for x in nxt.cpu()]
        prefill_ms = (time.perf_counter() - t0) * 1e3
        first_logits = logits[0].float().cpu()
        steps = []
        for k in range(new - 1):
            t0 = time.perf_counter()
            self.tok.copy_(nxt)
            self.pos.fill_(ids.shape[1] + k)
            if graph:
                self.graph.replay()
                nxt = self.out[1]
            else:
                _, nxt = self.step()
            host = nxt.cpu()
            steps.append((time.perf_counter() - t0) * 1e3)
            for seq, x in zip(tokens, host):
                seq.append(int(x))
        return tokens, first_logits, prefill_ms, steps


def agreement(torch, g, first_logits, tokens, sequences, result, sequences_note, logits_note):
    """How Gatun's run (its LlamaBench JSON, g) agrees with this one: first-step logits, greedy tokens, sequences."""
    rel = rel_err(torch, torch.tensor(g["first_logits"], dtype=torch.float64), first_logits)
    same = g["tokens"] == tokens
    if "sequences" in g:
        agree = sum(x == y for x, y in zip(g["sequences"], sequences))
        print(f"sequences with the same greedy tokens: {agree} of {len(sequences)}{sequences_note}")
        result["same_sequences"] = agree
    first_diff = next((i for i, (x, y) in enumerate(zip(g["tokens"], tokens)) if x != y), None)
    result.update({"gatun_tokens": g["tokens"], "same_tokens": same, "first_different_token": first_diff,
                   "first_logits_rel_err": rel, "gatun_prefill_ms": g["prefill_ms"], "gatun_decode_ms": g["decode_ms"],
                   "gatun_machine": g.get("machine")})
    print(f"first-step logits: relative error {rel:.3g} (Gatun against PyTorch{logits_note}); greedy tokens "
          + ("the same" if same else f"differ from token {first_diff}"))


def rel_err(torch, a, b):
    """|a - b| / |b| of two logit vectors, in float64."""
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def run_tp(a):
    import torch
    import torch.distributed as dist
    tp = a.tp
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != tp:
        print(f"llama_torch.py: --tp {tp} needs {tp} processes (torchrun --nproc_per_node {tp}); WORLD_SIZE is {world}", file=sys.stderr)
        return 2
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    leader = rank == 0
    model = None
    try:
        model = TPLlama(torch, dist, a.dir, tp, rank, dev, a.batch, a.prompt + a.new)
        vocab = model.cfg["vocab_size"]
        ids = torch.tensor([prompt_ids(a.prompt, vocab, b) for b in range(a.batch)], device=dev)
        result = {"system": "pytorch", "device": torch.cuda.get_device_name(dev),
                  "machine": f"{tp} x {torch.cuda.get_device_name(dev)}",
                  "versions": f"torch {torch.__version__}, nccl {torch.cuda.nccl.version()}",
                  "implementation": "hand-written Megatron-style tensor parallelism in plain torch (bench/llama_torch.py TPLlama)",
                  "prompt": a.prompt, "new": a.new, "batch": a.batch, "tp": tp}
        with torch.inference_mode():
            dist.all_reduce(torch.ones(1, device=dev))   # the communicator made before any timing or capture
            sequences, first_logits, _, _ = model.generate(ids, a.new, graph=False)   # warm-up
            tokens = sequences[0]
            for _ in range(a.warmup - 1):
                model.generate(ids, a.new, graph=False)
            times = {}
            graphs = not a.no_graphs
            if graphs:
                try:
                    model.capture()
                except Exception as e:   # noqa: BLE001 - reported, and the decode is then timed eagerly only
                    print(f"pytorch rank {rank}: capturing the decode step as a CUDA graph failed: {e!r}", file=sys.stderr)
                    graphs = False
                ok = torch.tensor([1 if graphs else 0], device=dev)
                dist.all_reduce(ok, op=dist.ReduceOp.MIN)   # every rank replays, or none
                graphs = bool(ok.item())
            for mode in ["eager"] + (["graph"] if graphs else []):
                if mode == "graph":
                    t, _, _, _ = model.generate(ids, a.new, graph=True)   # the graph's own warm-up
                    if t != sequences:
                        print(f"pytorch rank {rank}: the CUDA graph's tokens differ from the eager ones: {t[0]} against {tokens}")
                prefill, decode = [], []
                for _ in range(max(1, a.runs - 1)):
                    t, _, pm, steps = model.generate(ids, a.new, graph=mode == "graph")
                    if t != sequences:
                        print(f"pytorch rank {rank}: a later {mode} run gave other tokens (its own run-to-run variation); the first run's are compared")
                    prefill.append(pm)
                    decode.append(statistics.median(steps) if steps else float("nan"))
                times[mode] = (statistics.median(prefill), statistics.median(decode))
            every = [None] * tp
            dist.all_gather_object(every, sequences)
            if any(s != sequences for s in every):
                raise SystemExit(f"llama_torch.py: the ranks generated different tokens: {every}")
        result.update({"tokens": tokens, "sequences": sequences, "prefill_ms": times["eager"][0], "decode_ms": times["eager"][1],
                       "decode_graph_ms": times["graph"][1] if "graph" in times else None,
                       "prefill_ms_graph_run": times["graph"][0] if "graph" in times else None,
                       "weight_bytes_per_rank": model.weight_bytes,
                       "device_bytes_per_rank": torch.cuda.memory_allocated(dev)})
        status = 0
        if leader:
            print(f"pytorch TP {tp}: batch {a.batch}, tokens {tokens}; prefill of {a.prompt} tokens {times['eager'][0]:.3f} ms, "
                  f"decode {times['eager'][1]:.3f} ms a token eager"
                  + (f", {times['graph'][1]:.3f} ms replaying a CUDA graph" if "graph" in times else "") + " (static KV cache)")
        if a.check:
            status = check_tp(a, torch, dev, ids, first_logits, result) if leader else 0
            dist.barrier()
            st = torch.tensor([status], device=dev)
            dist.broadcast(st, 0)
            status = int(st.item())
        if leader:
            if a.gatun and compare_gatun(a, torch, first_logits, tokens, sequences, result, times) != 0:
                return 2
            with open(a.out, "w") as f:
                json.dump(result, f, indent=1)
        return status
    finally:
        # a live CUDA graph with captured NCCL kernels can make the communicator's destruction wait for ever (seen under
        # torchrun: the results written, then no exit until the suite's timeout): the graph is released first
        if model is not None and model.graph is not None:
            torch.cuda.synchronize(dev)
            model.graph.reset()
            model.graph = model.out = None
        dist.destroy_process_group()


def check_tp(a, torch, dev, ids, first_logits, result):
    """Rank 0: the first-step logits of sequence 0 from transformers' LlamaForCausalLM (one GPU) in bfloat16 and in
    float32, against the tensor-parallel ones. Returns 1 when the TP logits are much further from float32's than
    transformers' bfloat16 logits are (a sharding or layer bug moves them by a relative 0.5 or more)."""
    from transformers import LlamaForCausalLM
    out = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        hf = LlamaForCausalLM.from_pretrained(a.dir, torch_dtype=dtype).to(dev).eval()
        with torch.inference_mode():
            out[name] = hf(ids[:1], logits_to_keep=1).logits[0, -1].float().cpu()
        del hf
        torch.cuda.empty_cache()
    tp_hf, tp_fp32, hf_fp32 = rel_err(torch, first_logits, out["bf16"]), rel_err(torch, first_logits, out["fp32"]), rel_err(torch, out["bf16"], out["fp32"])
    ok = tp_fp32 <= 2 * hf_fp32 + 0.02
    result.update({"check_tp_vs_hf_bf16": tp_hf, "check_tp_vs_fp32": tp_fp32, "check_hf_bf16_vs_fp32": hf_fp32, "check_ok": ok,
                   "check_same_first_token": int(first_logits.argmax()) == int(out["bf16"].argmax())})
    print(f"check (--tp {a.tp} against transformers on one GPU, first-step logits): relative error to transformers bf16 {tp_hf:.3g}; "
          f"to float32: TP {tp_fp32:.3g}, transformers bf16 {hf_fp32:.3g} -> {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


def compare_gatun(a, torch, first_logits, tokens, sequences, result, times):
    """Rank 0: Gatun's LlamaBench JSON beside this run, as the one-GPU mode compares them."""
    with open(a.gatun) as f:
        g = json.load(f)
    if g.get("prompt") != a.prompt or g.get("batch", 1) != a.batch or g.get("new") != a.new or g.get("tp", 1) != a.tp:
        print(f"llama_torch.py: {a.gatun} was made with prompt {g.get('prompt')}, batch {g.get('batch', 1)}, new {g.get('new')}, "
              f"tp {g.get('tp', 1)}; run with the same", file=sys.stderr)
        return 2
    agreement(torch, g, first_logits, tokens, sequences, result, "", f", both at TP {a.tp}")
    print(f"| system, TP {a.tp} | prefill ms | decode ms/token |\n| --- | --- | --- |")
    print(f"| Gatun | {g['prefill_ms']:.3f} | {g['decode_ms']:.3f} |")
    print(f"| PyTorch eager (hand-written TP) | {times['eager'][0]:.3f} | {times['eager'][1]:.3f} |")
    if "graph" in times:
        print(f"| PyTorch, decode step as one CUDA graph | {times['graph'][0]:.3f} | {times['graph'][1]:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

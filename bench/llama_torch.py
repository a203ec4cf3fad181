"""PyTorch peer of Gatun's LlamaBench: the same checkpoint directory through Hugging Face transformers, on the GPU.

    python3 bench/llama_torch.py --dir DIR [--prompt 512] [--new 32] [--runs 5] [--batch 1] [--gatun gatun-llama.json [--fp32]] [--out torch-llama.json]

Loads config.json and model.safetensors with LlamaForCausalLM in bfloat16, runs the same prompt (token i is
(i * 7919 + 13) mod vocab, as LlamaBench makes it), and measures, like LlamaBench, the prefill call and each
decode call (with the model's KV cache) until its greedy token is on the host, medians over runs after one
warm-up. With --gatun it compares Gatun's tokens and first-step logits with its own and prints both systems' times
side by side. Run it with the machine's python3 (the one with torch and transformers) on the GPU host; it refuses
to run unless NVLink multicast is off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1), as the rest of the suite does.
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
    p.add_argument("--batch", type=int, default=1, help="sequences at once, each with its own prompt (as LlamaBench --batch)")
    p.add_argument("--gatun", help="Gatun's LlamaBench JSON, to compare tokens, logits and times")
    p.add_argument("--out", default="torch-llama.json")
    p.add_argument("--fp32", action="store_true", help="with --gatun: score both systems' tokens with the float32 model")
    a = p.parse_args(argv)
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(a.dir, torch_dtype=torch.bfloat16).to("cuda").eval()
    vocab = model.config.vocab_size
    ids = torch.tensor([prompt_ids(a.prompt, vocab, b) for b in range(a.batch)], device="cuda")
    with torch.no_grad():
        sequences, first_logits, _, _ = generate(model, torch, ids, a.new)
        tokens = sequences[0]
        prefill, decode = [], []
        for _ in range(max(1, a.runs - 1)):
            t, _, pm, steps = generate(model, torch, ids, a.new)
            if t != sequences:
                # batched bf16 kernels may pick other reduction orders from run to run: a near tie can flip
                print("pytorch: a later run gave other tokens (its own run-to-run variation); the first run's are compared")
            prefill.append(pm)
            decode.append(statistics.median(steps) if steps else float("nan"))
    result = {"system": "pytorch", "device": torch.cuda.get_device_name(), "versions": f"torch {torch.__version__}",
              "prompt": a.prompt, "new": a.new, "batch": a.batch, "tokens": tokens, "sequences": sequences,
              "prefill_ms": statistics.median(prefill), "decode_ms": statistics.median(decode)}
    print(f"pytorch: batch {a.batch}, tokens {tokens}; prefill of {a.prompt} tokens {result['prefill_ms']:.3f} ms, "
          f"decode {result['decode_ms']:.3f} ms a token (eager, KV cache)")
    if a.gatun:
        with open(a.gatun) as f:
            g = json.load(f)
        if g.get("prompt") != a.prompt or g.get("batch", 1) != a.batch or g.get("new") != a.new:
            print(f"llama_torch.py: {a.gatun} was made with prompt {g.get('prompt')}, batch {g.get('batch', 1)}, new {g.get('new')};"
                  f" run with the same", file=sys.stderr)
            return 2
        gl = torch.tensor(g["first_logits"], dtype=torch.float64)
        tl = first_logits.double()
        rel = float((gl - tl).norm() / tl.norm())
        same = g["tokens"] == tokens
        if "sequences" in g:
            agree = sum(x == y for x, y in zip(g["sequences"], sequences))
            print(f"sequences with the same greedy tokens: {agree} of {len(sequences)} (the float32 scoring below is of sequence 0)")
            result["same_sequences"] = agree
        first_diff = next((i for i, (x, y) in enumerate(zip(g["tokens"], tokens)) if x != y), None)
        result.update({"gatun_tokens": g["tokens"], "same_tokens": same, "first_different_token": first_diff,
                       "first_logits_rel_err": rel, "gatun_prefill_ms": g["prefill_ms"], "gatun_decode_ms": g["decode_ms"]})
        print(f"first-step logits: relative error {rel:.3g} (Gatun against PyTorch); greedy tokens "
              + ("the same" if same else f"differ from token {first_diff}"))
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
            result["gatun_rel_err_fp32"] = float((gl - fl).norm() / fl.norm())
            result["torch_rel_err_fp32"] = float((tl - fl).norm() / fl.norm())
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The transformers side of Gatun's bandwidth-fraction table, and the table itself.

    python3 bench/arch_torch.py measure --root ROOT --out-dir OUT [--archs llama,...] [--prompt 128] [--new 32]
                                        [--runs 6] [--warmup 2] [--dry-run]
    python3 bench/arch_torch.py table --out-dir OUT [--archs llama,...] [--peak-tbps 4.8] [--md FILE]

measure: in one process, for each architecture NAME, loads ROOT/NAME (the random bf16 checkpoint Gatun's ArchBench
wrote: config.json and model.safetensors) with transformers' AutoModelForCausalLM in bfloat16, eager attention, on
the GPU, and refuses it unless every tensor of the file is one of the model's and every parameter of the model comes
from the file (so that both systems run the same weights). Where Gatun's row OUT/gatun-arch-NAME.json is there, the
model's parameter count must be its total weight bytes / 2. Then the prompt Gatun uses (token i is (i * 7919 + 13)
mod vocab), greedy decoding with the model's KV cache at batch 1, each decode call timed until its token is on the
host; --warmup generations (the first of --runs among them) and --runs - 1 timed ones, the median step of each, and
the median of those. Writes OUT/torch-arch-NAME.json; an architecture that fails gets a row with its error and the
next one goes on. --dry-run prints the plan (each architecture's directory and the settings) as JSON and stops,
without importing torch.

table: reads both systems' rows of each architecture and prints one line each: Gatun's and transformers' decode
milliseconds a token; the weight bytes a step reads (ArchBench's step_weight_bytes: every weight once, but one row
of an untied embedding, and of a mixture's experts the top-k the one token is routed to); each system's bandwidth
(those bytes over its step time) as a fraction of --peak-tbps (4.8 TB/s, one H200's HBM3e); Gatun's fraction over
Gatun's llama fraction (the template rule asks at least 0.90); and how many of the new tokens agree (bf16 greedy
decoding of random weights has near ties; a mismatch late in the sequence is not an error). A Gatun refusal (an op
the backend has no kernel for) or failure, or a transformers failure, is shown in place of the numbers and its words
below the table; --md also writes the table as Markdown.
"""
import argparse
import json
import os
import statistics
import sys
import time

ARCHS = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "mixtral", "qwen2_moe", "qwen3_moe"]
PEAK_TBPS = 4.8


def prompt_ids(n, vocab):
    """The prompt's tokens: token i is (i * 7919 + 13) mod vocab, as Gatun's LlamaBench and ArchBench make it."""
    return [(i * 7919 + 13) % vocab for i in range(n)]


def arch_list(text):
    """A comma-separated list of architectures, each one of ARCHS, in the order given, none twice."""
    names = [a for a in text.split(",") if a]
    bad = [a for a in names if a not in ARCHS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown architecture(s) {bad or text!r}; the architectures are {','.join(ARCHS)}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"an architecture is named twice in {text!r}")
    return names


def at_least(low):
    def parse(text):
        v = int(text)
        if v < low:
            raise argparse.ArgumentTypeError(f"{v} is under {low}")
        return v
    return parse


def positive_float(text):
    v = float(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return v


def parser():
    p = argparse.ArgumentParser(prog="arch_torch.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="transformers' decode step of each architecture's checkpoint")
    m.add_argument("--root", required=True, help="the directory holding one checkpoint directory per architecture")
    m.add_argument("--out-dir", required=True, help="where the rows are written (and Gatun's are read)")
    m.add_argument("--archs", type=arch_list, default=list(ARCHS))
    m.add_argument("--prompt", type=at_least(1), default=128)
    m.add_argument("--new", type=at_least(2), default=32)
    m.add_argument("--runs", type=at_least(2), default=6, help="generations timed, the first a warm-up")
    m.add_argument("--warmup", type=at_least(1), default=2, help="generations before the timed ones (the first of --runs among them)")
    m.add_argument("--dry-run", action="store_true", help="print the plan as JSON and stop")
    t = sub.add_parser("table", help="the bandwidth-fraction table of both systems' rows")
    t.add_argument("--out-dir", required=True)
    t.add_argument("--archs", type=arch_list, default=list(ARCHS))
    t.add_argument("--peak-tbps", type=positive_float, default=PEAK_TBPS, help="the HBM bandwidth the fractions are of, TB/s")
    t.add_argument("--md", help="also write the table as Markdown to this file")
    return p


# ---------------------------------------------------------------------------------------------------------------------
# measure


def generate(model, torch, ids, new):
    """Greedy tokens after ids [1, prompt] and each decode step's host wall time (ms) until its token is on the host."""
    out = model(ids, use_cache=True, logits_to_keep=1)
    past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1)
    tokens, steps = [int(nxt[0])], []
    for _ in range(new - 1):
        t0 = time.perf_counter()
        out = model(nxt[:, None], past_key_values=past, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1)
        tokens.append(int(nxt.cpu()[0]))
        steps.append((time.perf_counter() - t0) * 1e3)
    return tokens, steps


def load(transformers, torch, directory):
    """The checkpoint as transformers loads it, refused unless the file's tensors and the model's parameters match."""
    model, info = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16, attn_implementation="eager",
                                                                    output_loading_info=True)
    problems = {k: list(v)[:5] for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs") and v}
    if problems:
        raise RuntimeError(f"transformers does not load {directory} as the same weights: {problems}")
    return model.to("cuda").eval()


def measure_one(a, name, transformers, torch):
    directory = os.path.join(a.root, name)
    model = load(transformers, torch, directory)
    params = sum(p.numel() for p in model.parameters())
    row = {"system": "transformers", "arch": name, "model_type": model.config.model_type, "params": params, "prompt": a.prompt,
           "new": a.new, "runs": a.runs, "warmup": a.warmup, "dtype": "bfloat16", "batch": 1,
           "device": torch.cuda.get_device_name(), "versions": f"transformers {transformers.__version__}, torch {torch.__version__}"}
    gatun = os.path.join(a.out_dir, f"gatun-arch-{name}.json")
    if os.path.exists(gatun):
        with open(gatun) as f:
            g = json.load(f)
        if g.get("total_weight_bytes") != 2 * params:
            raise RuntimeError(f"transformers' {name} has {params} parameters, Gatun's {g.get('total_weight_bytes')} bytes of bf16 weights: "
                               "not the same model")
    ids = torch.tensor([prompt_ids(a.prompt, model.config.vocab_size)], device="cuda")
    with torch.no_grad():
        tokens, _ = generate(model, torch, ids, a.new)
        for _ in range(a.warmup - 1):
            generate(model, torch, ids, a.new)
        runs = [statistics.median(generate(model, torch, ids, a.new)[1]) for _ in range(a.runs - 1)]
    row.update(tokens=tokens, decode_runs_ms=runs, decode_ms=statistics.median(runs))
    print(f"archs: transformers {name}: decode {row['decode_ms']:.3f} ms a token (eager, KV cache; median of {a.runs - 1} runs), "
          f"{params / 1e9:.3f} B parameters; tokens {tokens}", flush=True)
    del model
    torch.cuda.empty_cache()
    return row


def measure(a):
    plan = {"archs": {n: os.path.join(a.root, n) for n in a.archs}, "prompt": a.prompt, "new": a.new, "runs": a.runs,
            "warmup": a.warmup, "out_dir": a.out_dir}
    if a.dry_run:
        print(json.dumps(plan, indent=1))
        return 0
    import torch
    import transformers
    os.makedirs(a.out_dir, exist_ok=True)
    failed = 0
    for name in a.archs:
        try:
            row = measure_one(a, name, transformers, torch)
        except Exception as e:   # one architecture's failure is its row; the others go on
            failed += 1
            row = {"system": "transformers", "arch": name, "error": f"{type(e).__name__}: {e}"}
            print(f"archs: transformers {name} failed: {row['error']}", flush=True)
            torch.cuda.empty_cache()
        with open(os.path.join(a.out_dir, f"torch-arch-{name}.json"), "w") as f:
            json.dump(row, f, indent=1)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------------------------------
# table


def read_row(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def fraction(step_bytes, ms, peak_tbps):
    """The bandwidth step_bytes / (ms / 1e3) as a fraction of peak_tbps (10^12 bytes a second)."""
    return step_bytes / (ms * 1e-3) / (peak_tbps * 1e12)


def agreement(g, t):
    """How many of the new tokens agree from the first on, as 'k/n'; '' where a side has none."""
    a, b = (g or {}).get("tokens"), (t or {}).get("tokens")
    if not a or not b:
        return ""
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return f"{k}/{min(len(a), len(b))}"


def rows(out_dir, archs, peak):
    """One dict a row: the numbers of the table, or the reason a side has none."""
    out = []
    for name in archs:
        g = read_row(os.path.join(out_dir, f"gatun-arch-{name}.json"))
        t = read_row(os.path.join(out_dir, f"torch-arch-{name}.json"))
        r = {"arch": name, "step_bytes": (g or {}).get("step_weight_bytes"), "dense_bytes": (g or {}).get("dense_weight_bytes"),
             "gatun_ms": None, "torch_ms": None, "gatun_frac": None, "torch_frac": None, "vs_llama": None, "tokens": agreement(g, t)}
        r["refused"], r["failed"] = (g or {}).get("refused"), (g or {}).get("failed")
        r["gatun_note"] = ("no row" if g is None else "refused (below)" if r["refused"] else "failed (below)" if r["failed"]
                           else "" if g.get("decode_ms") is not None else "no decode time")
        r["torch_note"] = "no row" if t is None else "failed: " + t["error"] if "error" in t else ""
        r["torch_cell"] = "failed (below)" if r["torch_note"].startswith("failed") else r["torch_note"]
        if g is not None and g.get("decode_ms") is not None:
            r["gatun_ms"] = g["decode_ms"]
            r["gatun_frac"] = fraction(r["step_bytes"], g["decode_ms"], peak)
        if t is not None and t.get("decode_ms") is not None:
            r["torch_ms"] = t["decode_ms"]
            if r["step_bytes"] is not None:
                r["torch_frac"] = fraction(r["step_bytes"], t["decode_ms"], peak)
        out.append(r)
    llama = next((r for r in out if r["arch"] == "llama"), None)
    base = llama["gatun_frac"] if llama else None
    for r in out:
        if r["gatun_frac"] is not None and base:
            r["vs_llama"] = r["gatun_frac"] / base
    return out


def cells(r):
    def ms(v, note):
        return f"{v:.3f}" if v is not None else note or "-"

    def frac(v):
        return f"{v:.3f}" if v is not None else "-"
    gb = f"{r['step_bytes'] / 1e9:.3f}" if r["step_bytes"] is not None else "-"
    return [r["arch"], ms(r["gatun_ms"], r["gatun_note"]), ms(r["torch_ms"], r["torch_cell"]), gb, frac(r["gatun_frac"]),
            frac(r["torch_frac"]), frac(r["vs_llama"]), r["tokens"] or "-"]


def table(a):
    rs = rows(a.out_dir, a.archs, a.peak_tbps)
    head = ["arch", "Gatun ms/token", "transformers ms/token", "weight GB/step", f"Gatun of {a.peak_tbps:g} TB/s",
            f"transformers of {a.peak_tbps:g} TB/s", "Gatun / llama's", "same tokens"]
    body = [cells(r) for r in rs]
    notes = [f"{r['arch']}: Gatun computes every expert (MixtureOfExperts): its step reads {r['dense_bytes'] / 1e9:.3f} GB, "
             f"{fraction(r['dense_bytes'], r['gatun_ms'], a.peak_tbps):.3f} of {a.peak_tbps:g} TB/s at its time"
             for r in rs if r["dense_bytes"] and r["step_bytes"] and r["dense_bytes"] != r["step_bytes"] and r["gatun_ms"]]
    notes += [f"{r['arch']}: Gatun refused: {r['refused']}" for r in rs if r["refused"]]
    notes += [f"{r['arch']}: Gatun failed: {r['failed']}" for r in rs if r["failed"]]
    notes += [f"{r['arch']}: transformers {r['torch_note']}" for r in rs if r["torch_note"].startswith("failed")]
    widths = [max(len(h), *(len(c[i]) for c in body)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for c in body:
        print("  ".join(x.ljust(w) for x, w in zip(c, widths)))
    for n in notes:
        print(n)
    if a.md:
        with open(a.md, "w") as f:
            f.write("| " + " | ".join(head) + " |\n|" + " --- |" * len(head) + "\n")
            for c in body:
                f.write("| " + " | ".join(x.replace("|", "\\|") for x in c) + " |\n")
            for n in notes:
                f.write(f"\n{n}\n")
    return 0


def main(argv):
    a = parser().parse_args(argv)
    return measure(a) if a.command == "measure" else table(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

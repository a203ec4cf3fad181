"""Makes the reference data Gatun's tests compare against, with another implementation: Hugging Face transformers
(decoder checkpoints and their logits) and the tokenizers library (tokenizer.json files and their encodings).

    python3 bench/make_references.py --out DIR [--only NAME[,NAME]]

Run it with the GPU machine's python3 (the one with torch, transformers and tokenizers); it needs no GPU. It writes:

  DIR/decoders/NAME/   a tiny checkpoint of one architecture (config.json, model.safetensors or shards with
                       model.safetensors.index.json, generation_config.json), random weights from the config's
                       initializer and then every parameter perturbed (norm weights and biases too), and
                       reference.json: the prompt (it holds token 0 twice), transformers' float32 eager logits at
                       every prompt position (logits.npy, float32 [prompt, vocab]), the 16 greedy tokens that
                       generate() gives with an explicit attention mask, and each greedy step's top-1 minus top-2
                       margin (a margin under 1e-4 marks a near tie that another correct computation may break the
                       other way).
  DIR/tokenizers/NAME/ tokenizer.json trained offline on a small multilingual corpus (and tokenizer_config.json with
                       a chat template where the style has one), and cases.json: every test string's ids with and
                       without special tokens, and the decoded text of those ids with and without special tokens;
                       chats.json: conversations rendered by transformers' apply_chat_template.

Every section runs on its own: one that fails prints its error and the rest go on (exit status 1 at the end).
"""
import argparse
import json
import os
import sys
import traceback

PROMPT = [1, 0, 37, 201, 5, 0, 99, 142, 8, 250, 17, 64]
NEW_TOKENS = 16
VOCAB = 256

BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, initializer_range=0.08,
            bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)


def decoder_specs():
    """NAME -> (model_type, config kwargs, save options)."""
    s = {}
    s["llama"] = ("llama", dict(BASE, rope_theta=50000.0), {})
    s["llama_tied"] = ("llama", dict(BASE, tie_word_embeddings=True), {})
    s["llama_head_dim"] = ("llama", dict(BASE, head_dim=32), {})
    s["llama_bias"] = ("llama", dict(BASE, attention_bias=True, mlp_bias=True), {})
    s["llama_rope_llama3"] = ("llama", dict(BASE, rope_theta=500000.0, rope_scaling=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=16)), {})
    s["llama_rope_linear"] = ("llama", dict(BASE, rope_scaling=dict(rope_type="linear", factor=2.0)), {})
    s["llama_rope_dynamic"] = ("llama", dict(BASE, max_position_embeddings=16,
                                             rope_scaling=dict(rope_type="dynamic", factor=2.0)), {})
    s["llama_rope_yarn"] = ("llama", dict(BASE, rope_scaling=dict(rope_type="yarn", factor=4.0,
                                                                  original_max_position_embeddings=16)), {})
    s["llama_sharded"] = ("llama", dict(BASE), {"max_shard_size": "100KB"})
    s["llama_bf16"] = ("llama", dict(BASE), {"dtype": "bfloat16"})
    s["llama_f16"] = ("llama", dict(BASE), {"dtype": "float16"})
    s["mistral"] = ("mistral", dict(BASE, sliding_window=8, head_dim=16), {})
    s["qwen2"] = ("qwen2", dict(BASE, sliding_window=None, use_sliding_window=False), {})
    s["qwen3"] = ("qwen3", dict(BASE, head_dim=32, use_sliding_window=False), {})
    s["gemma"] = ("gemma", dict(BASE, head_dim=32, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True), {})
    s["gemma2"] = ("gemma2", dict(BASE, num_hidden_layers=4, head_dim=32, hidden_activation="gelu_pytorch_tanh",
                                  query_pre_attn_scalar=24, sliding_window=8, final_logit_softcapping=3.0,
                                  attn_logit_softcapping=5.0, tie_word_embeddings=True), {})
    s["phi3"] = ("phi3", dict(BASE), {})
    s["phi3_partial_rotary"] = ("phi3", dict(BASE, partial_rotary_factor=0.5), {})
    s["mixtral"] = ("mixtral", dict(BASE, num_local_experts=4, num_experts_per_tok=2, sliding_window=None), {})
    s["qwen2_moe"] = ("qwen2_moe", dict(BASE, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                        shared_expert_intermediate_size=48, norm_topk_prob=False,
                                        decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False), {})
    s["qwen3_moe"] = ("qwen3_moe", dict(BASE, head_dim=32, num_experts=4, num_experts_per_tok=2,
                                        moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1,
                                        mlp_only_layers=[], use_sliding_window=False), {})
    return s


def perturb(model, torch, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if p.dim() == 1:   # norm weights and biases: away from their initial 1 or 0
                p.add_(0.1 * noise.to(p.dtype))
            else:
                p.add_(0.02 * noise.to(p.dtype))


def make_decoder(name, spec, out, torch, transformers):
    model_type, kwargs, save = spec
    d = os.path.join(out, "decoders", name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(1234)
    config = transformers.AutoConfig.for_model(model_type, **kwargs)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    perturb(model, torch, 4321)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.generation_config.bos_token_id = 1
    dtype = save.get("dtype")
    if dtype:
        model = model.to(getattr(torch, dtype))
    model.save_pretrained(d, safe_serialization=True, **({"max_shard_size": save["max_shard_size"]} if "max_shard_size" in save else {}))
    # The reference runs the float32 model of what was saved (a bf16/f16 file's weights rounded, then computed in f32).
    model = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    ids = torch.tensor([PROMPT])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[0].float()
        gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False, output_scores=True, return_dict_in_generate=True,
                             eos_token_id=None, pad_token_id=0)
    tokens = gen.sequences[0, len(PROMPT):].tolist()
    margins = []
    for sc in gen.scores:
        top = torch.topk(sc[0].float(), 2).values
        margins.append(float(top[0] - top[1]))
    import numpy as np
    np.save(os.path.join(d, "logits.npy"), logits.numpy().astype(np.float32))
    ref = dict(name=name, model_type=model_type, prompt=PROMPT, tokens=tokens, margins=margins,
               logits="logits.npy", logits_shape=list(logits.shape), dtype_saved=dtype or "float32",
               transformers=transformers.__version__, torch=torch.__version__,
               note="float32 eager logits of every prompt position; greedy tokens from generate() with an explicit "
                    "attention mask of ones")
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"decoder {name}: {model_type}, tokens {tokens}, min margin {min(margins):.4g}, "
          f"files {sorted(os.listdir(d))}", flush=True)


CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 12:45, and we'll be late!",
    "I can't believe they've done it again; you'd think they'd learn. Don't you?",
    "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Übermut, Äpfel.",
    "Le cœur a ses raisons que la raison ne connaît point. Où est la bibliothèque ?",
    "El niño pidió una piña y un café con leche en la mañana.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε!",
    "我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧。",
    "私はガラスを食べられます。それは私を傷つけません。東京は大きい都市です。",
    "나는 유리를 먹을 수 있어요. 그래도 아프지 않아요. 안녕하세요!",
    "أنا قادر على أكل الزجاج و هذا لا يؤلمني. مرحبا بالعالم",
    "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती। नमस्ते दुनिया",
    "def main(args):\n    for i in range(10):\n        print(f\"{i:03d}\", args[i])\n    return 0\n",
    "public static void main(String[] args) { System.out.println(\"Hello, world\"); }",
    "Numbers: 3.14159 2718281828 1,000,000 42 007 -17 +3e-8 0xDEADBEEF",
    "Whitespace   runs\tand\ttabs\n\nand blank lines\n\n\n  indented  ",
    "Emoji 😀 🎉 👍🏽 👨‍👩‍👧‍👦 🇯🇵 and symbols © ® ™ € £ ¥ § ¶ † ‡ • …",
    "https://example.com/path?query=value&other=1 and user@example.org",
    "Once upon a time, in a land far, far away, there lived a small tokenizer.",
    "Machine learning models read tokens; tokens are pieces of words.",
    "She sells sea shells by the sea shore; the shells she sells are sea shells.",
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer.",
    "Καλό ταξίδι, καλή τύχη. Привет, как дела? Ça va bien, merci.",
    "数学和物理是科学的基础。日本語の文章も少し入れます。한국어 문장도 조금.",
    "JSON: {\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "SELECT name, count(*) FROM users WHERE age >= 18 GROUP BY name;",
    "Mr. O'Neil's dog's bone isn't his; it's the cat's. They're here, we've gone.",
    "ALL CAPS SENTENCE WITH SHOUTING AND 'S SUFFIXES LIKE JOHN'S AND WE'LL.",
]

TESTS = [
    "",
    " ",
    "Hello world",
    " Hello world",
    "Hello  world  ",
    "hello\nworld\n\n",
    "It's a dog's life; they'll say we'd've known.",
    "IT'S SHOUTING, WE'LL SEE",
    "Über naïve café façade coöperate",
    "Быстрая лиса и ленивая собака",
    "機械学習はとても面白いです。",
    "人工智能正在改变世界",
    "한국어 토크나이저 테스트",
    "مرحبا بكم في عالم البرمجة",
    "नमस्ते, आप कैसे हैं?",
    "🤖 robots 🦾 and 🧠 brains 👩🏿‍🔬",
    "12345678901234567890 and 3.14159265",
    "tabs\tand\u00a0non-breaking\u3000spaces\u2003em",
    "   leading and trailing   ",
    "x = [i**2 for i in range(100) if i % 3 == 0]",
    "<|im_start|>user\nHi there<|im_end|>",
    "<s>[INST] inline special [/INST]</s>",
    "rare chars: ǅ ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u0301 combining e\u0301 vs é",
    "a" * 50,
    "The end.",
]

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3_CHAT = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
               "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
INST_CHAT = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
             "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
             "{{ message['content'] + eos_token }}{% endif %}{% endfor %}")

CHATS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "  And 3+3?  "}],
    [{"role": "user", "content": "Übersetze: 猫"}, {"role": "assistant", "content": "Katze 🐱"}],
]

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level(style):
    from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders, normalizers, processors, Regex
    if style == "gpt2":
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    elif style == "llama3":
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    else:
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        if style == "qwen2":
            tok.normalizer = normalizers.NFC()
        pat = LLAMA3_PATTERN if style == "llama3" else QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer)
    if style == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok, specials


def sentencepiece_like(style):
    """A BPE over '▁'-marked text with byte fallback, as Llama 2, Mistral and Gemma tokenizer.json files have it."""
    from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders, normalizers, processors
    if style == "gemma":
        specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
        bos_tok, unk = "<bos>", "<unk>"
        norm = normalizers.Replace(" ", "▁")
    else:
        specials = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
        bos_tok, unk = "<s>", "<unk>"
        norm = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tmp = Tokenizer(models.BPE(unk_token=unk))
    tmp.normalizer = norm if style != "metaspace" else None
    if style == "metaspace":
        tmp.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=specials, limit_alphabet=150, show_progress=False)
    tmp.train_from_iterator(CORPUS * 3, trainer)
    d = json.loads(tmp.to_str())
    trained = d["model"]["vocab"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in d["model"]["merges"]]
    vocab = {}
    for t in specials:
        vocab[t] = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in sorted(trained.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, byte_fallback=True, fuse_unk=True))
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    if style == "metaspace":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)])
    else:
        tok.normalizer = norm
        steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
        if style != "gemma":
            steps.append(decoders.Strip(" ", 1, 0))
        tok.decoder = decoders.Sequence(steps)
    bos = vocab[bos_tok]
    tok.post_processor = processors.TemplateProcessing(single=f"{bos_tok} $A", pair=f"{bos_tok} $A {bos_tok} $B:1",
                                                       special_tokens=[(bos_tok, bos)])
    return tok, specials


def make_tokenizer(name, out, transformers):
    kind, style, chat, bos, eos = TOKENIZERS[name]
    tok, specials = byte_level(style) if kind == "byte_level" else sentencepiece_like(style)
    d = os.path.join(out, "tokenizers", name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    cases = []
    for s in TESTS:
        row = {"text": s}
        for add in (True, False):
            enc = tok.encode(s, add_special_tokens=add)
            key = "with_special" if add else "without_special"
            row[key] = {"ids": enc.ids, "tokens": enc.tokens,
                        "decoded": tok.decode(enc.ids, skip_special_tokens=False),
                        "decoded_skip_special": tok.decode(enc.ids, skip_special_tokens=True)}
        cases.append(row)
    with open(os.path.join(d, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizers": __import__("tokenizers").__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
    if chat:
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos)
        fast.chat_template = chat
        fast.save_pretrained(d)
        rendered = []
        for msgs in CHATS:
            for gen in (False, True):
                text = fast.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
                ids = fast.apply_chat_template(msgs, tokenize=True, add_generation_prompt=gen)
                if isinstance(ids, dict) or hasattr(ids, "keys"):
                    ids = ids["input_ids"]
                rendered.append({"messages": msgs, "add_generation_prompt": gen, "text": text, "ids": list(ids)})
        with open(os.path.join(d, "chats.json"), "w", encoding="utf-8") as f:
            json.dump({"template": chat, "bos_token": bos, "eos_token": eos, "chats": rendered}, f,
                      ensure_ascii=False, indent=1)
    print(f"tokenizer {name}: vocab {tok.get_vocab_size()}, files {sorted(os.listdir(d))}", flush=True)


TOKENIZERS = {
    "gpt2_bytelevel": ("byte_level", "gpt2", CHATML, None, "<|endoftext|>"),
    "llama3_bytelevel": ("byte_level", "llama3", LLAMA3_CHAT, "<|begin_of_text|>", "<|eot_id|>"),
    "qwen2_bytelevel": ("byte_level", "qwen2", CHATML, None, "<|im_end|>"),
    "llama2_sentencepiece": ("sentencepiece", "llama2", INST_CHAT, "<s>", "</s>"),
    "mistral_metaspace": ("sentencepiece", "metaspace", INST_CHAT, "<s>", "</s>"),
    "gemma_sentencepiece": ("sentencepiece", "gemma", None, "<bos>", "<eos>"),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(x for x in a.only.split(",") if x)
    import torch
    import transformers
    torch.set_grad_enabled(False)
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    failed = []
    for name, spec in decoder_specs().items():
        if only and name not in only:
            continue
        try:
            make_decoder(name, spec, a.out, torch, transformers)
        except Exception:
            failed.append(name)
            print(f"decoder {name} FAILED", flush=True)
            traceback.print_exc()
    for name in TOKENIZERS:
        if only and name not in only:
            continue
        try:
            make_tokenizer(name, a.out, transformers)
        except Exception:
            failed.append(name)
            print(f"tokenizer {name} FAILED", flush=True)
            traceback.print_exc()
    print("failed:", failed, flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Train Kapitsa's bundled demo models (a Qwen3.5-architecture target with its MTP head, and a draft).

What it is: one script that, on one NVIDIA GPU with PyTorch + transformers 5.17 + tokenizers,
  1. collects text that is on the machine anyway (the installed Python packages' *.py/*.md/*.rst),
  2. reuses the first edition's tokenizer (--tokenizer) or trains a ~16k byte-level BPE one with the
     Qwen pre-tokenizer and the Qwen special tokens,
  3. trains a ~29M-parameter hybrid target (Gated DeltaNet + gated attention, 3:1) jointly with a
     one-layer MTP head, the last steps on its 4-bit weights (quantization-aware), and a ~3M draft,
  4. ships the target as MLX affine 4-bit in the released Qwen3.5 layout (model_type "qwen3_5",
     nested text_config, tensors "model.language_model.*", mtp.* in model-mtp.safetensors, tied
     embeddings) and the draft as bf16 (with a tiny untrained vision tower, as the released class has),
  5. writes reference logits with transformers (float32, eager attention, CPU) from the weights exactly
     as shipped (the target's dequantized), held-out perplexities, greedy agreement, MTP agreement,
     and the share of held-out function stubs whose greedy completion parses.
What it is not: a recipe for a useful assistant. These are demonstration models.
Invariants: seeded; the step counts printed as TARGET_STEPS/DRAFT_STEPS reproduce a run
  (pass them back with --target-steps/--draft-steps); --smoke runs every stage on tiny data.
"""
import argparse
import hashlib
import json
import math
import os
import random
import shutil
import site
import sys
import sysconfig
import time
from array import array
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

T_START = time.time()

# ----------------------------------------------------------------------------------------------
# Tokenizer definition. The pipeline is copied verbatim from the Qwen3 tokenizer.json
# (shared/tokenizers/qwen3/tokenizer.json): NFC, the Qwen Split regex, byte-level.
# ----------------------------------------------------------------------------------------------
QWEN_PIPELINE = json.loads(r'''{
 "normalizer": {"type": "NFC"},
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
 "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
 "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
}''')

# The Qwen3.5 added tokens, in Qwen's order (ids follow the learned vocabulary, as in Qwen).
# The second field is the "special" flag as Qwen sets it (<think>, <tool_call>... are not special).
ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False),
    ("<|audio_start|>", True), ("<|audio_end|>", True), ("<tts_pad>", True), ("<tts_text_bos>", True),
    ("<tts_text_eod>", True), ("<tts_text_bos_single>", True), ("<|audio_pad|>", True),
]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # gdn_chunked.py, affine.py, stubs.py
from stubs import function_stubs  # noqa: E402
CHAT_TEMPLATE_PATH = HERE / "qwen3.5.jinja"

# ----------------------------------------------------------------------------------------------
# Model shapes. layer_types: three Gated DeltaNet layers then one gated full-attention layer.
# ----------------------------------------------------------------------------------------------
TARGET_SHAPE = dict(hidden_size=384, intermediate_size=1152, num_hidden_layers=12,
                    num_attention_heads=6, num_key_value_heads=2, head_dim=64,
                    linear_num_key_heads=3, linear_key_head_dim=64,
                    linear_num_value_heads=6, linear_value_head_dim=64)
# The draft keeps the first edition's shape and stays bf16 (5.9 MB): tests quantize it as a trained
# model with real margins.
DRAFT_SHAPE = dict(hidden_size=128, intermediate_size=320, num_hidden_layers=4,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                   linear_num_key_heads=2, linear_key_head_dim=32,
                   linear_num_value_heads=4, linear_value_head_dim=32)

# The fixed reference prompt: a chat turn rendered exactly as the Qwen3.5 template renders it
# with add_generation_prompt=True (thinking on). About 80 tokens, so it crosses one GDN chunk (64).
REF_USER = (
    "Complete the following code:\n\n"
    "```python\n"
    "import os\n\n\n"
    "def list_python_files(root):\n"
    "    \"\"\"Return the paths of all .py files under root, sorted.\"\"\"\n"
    "    result = []\n"
    "    for dirpath, dirnames, filenames in os.walk(root):\n"
    "```"
)

INSTRUCTIONS_CODE = ["Continue this code:", "Complete the following code:",
                     "Here is the start of a file. Write the rest.", "What comes next?",
                     "Finish this Python file:"]
INSTRUCTIONS_DOC = ["Continue this document:", "Complete the following text:",
                    "Here is the start of a document. Write the rest.", "What comes next?"]
SYSTEM_PROMPT = "You are a helpful assistant."
# Short reasoning for some answers: the template's default generation prompt ends in "<think>\n"
# (a lone newline token), which an empty think block ("<think>", "\n\n", "</think>") never shows.
REASONING_CODE = ["The user gave me the start of a Python file. I will continue the code.",
                  "This is Python code. I will write what comes next.",
                  "The user wants the rest of this file. I will continue it from where it stops."]
REASONING_DOC = ["The user gave me the start of a document. I will continue the text.",
                 "This is documentation. I will write what comes next."]


def log(*a):
    print(f"[{time.time() - T_START:7.1f}s]", *a, flush=True)


def sha1(s):
    return hashlib.sha1(s.encode("utf-8") if isinstance(s, str) else s).hexdigest()


# ----------------------------------------------------------------------------------------------
# Chat formatting (mirrors shared/templates/qwen3.5.jinja for one user turn and one answer).
# ----------------------------------------------------------------------------------------------
def render_user_prompt(user, system=None, thinking=True):
    s = ""
    if system is not None:
        s += "<|im_start|>system\n" + system.strip() + "<|im_end|>\n"
    s += "<|im_start|>user\n" + user.strip() + "<|im_end|>\n<|im_start|>assistant\n"
    s += "<think>\n" if thinking else "<think>\n\n</think>\n\n"
    return s


def chat_sample(text, ext, rng):
    """A user turn holding the start of a file, the assistant turn its continuation."""
    lines = text.splitlines(keepends=True)
    if len(lines) < 4:
        return None
    want_user = rng.randint(150, 1200)
    k, acc = 0, 0
    while k < len(lines) - 2 and acc + len(lines[k]) <= want_user:
        acc += len(lines[k])
        k += 1
    k = max(k, 1)
    want_answer = rng.randint(300, 2000)
    answer, acc = [], 0
    for line in lines[k:]:
        if answer and acc + len(line) > want_answer:
            break
        answer.append(line)
        acc += len(line)
    user = "".join(lines[:k]).strip()
    assistant = "".join(answer).lstrip("\r\n").rstrip()
    if not user or not assistant.strip():
        return None
    if ext == ".py":
        # Code goes in fences: the template trims each message, and a fence keeps the first
        # line's indentation.
        assistant = "```python\n" + assistant + "\n```"
        if rng.random() < 0.6:
            user = rng.choice(INSTRUCTIONS_CODE) + "\n\n```python\n" + "".join(lines[:k]).rstrip() + "\n```"
    else:
        assistant = assistant.strip()
        if rng.random() < 0.5:
            user = rng.choice(INSTRUCTIONS_DOC) + "\n\n" + user
    system = SYSTEM_PROMPT if rng.random() < 0.1 else None
    s = ""
    if system is not None:
        s += "<|im_start|>system\n" + system + "<|im_end|>\n"
    s += "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"
    # The template renders an answer without a think block; its generation prompt opens one
    # ("<think>\n", or "<think>\n\n</think>\n\n" with thinking off). Most samples carry a think
    # block, empty or with a short reasoning, so that both generation prompts lead to an answer.
    r = rng.random()
    if r < 0.55:
        s += "<think>\n\n</think>\n\n"
    elif r < 0.85:
        s += "<think>\n" + rng.choice(REASONING_CODE if ext == ".py" else REASONING_DOC) + "\n</think>\n\n"
    s += assistant + "<|im_end|>\n"
    return s


# ----------------------------------------------------------------------------------------------
# Data: the installed Python packages and the standard library.
# ----------------------------------------------------------------------------------------------
def source_roots():
    roots = []
    paths = sysconfig.get_paths()
    cand = [("site", paths.get("purelib")), ("site", paths.get("platlib"))]
    try:
        cand += [("site", p) for p in site.getsitepackages()]
    except Exception:
        pass
    cand.append(("stdlib", paths.get("stdlib")))
    seen = set()
    for label, p in cand:
        if not p:
            continue
        rp = os.path.realpath(p)
        if os.path.isdir(rp) and rp not in seen:
            seen.add(rp)
            roots.append((label, rp))
    return roots


def list_files(roots):
    files = {}
    root_set = {r for _, r in roots}
    for label, root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames
                                 if d not in ("__pycache__", ".git", "node_modules", "site-packages",
                                              "dist-packages")
                                 and os.path.join(dirpath, d) not in root_set)
            for fn in filenames:
                ext = os.path.splitext(fn)[1]
                if ext not in (".py", ".md", ".rst"):
                    continue
                full = os.path.join(dirpath, fn)
                try:
                    size = os.path.getsize(full)
                except OSError:
                    continue
                if 256 <= size <= 200_000:
                    key = label + "/" + os.path.relpath(full, root)
                    files.setdefault(key, (full, ext))
    return files


def usable(raw):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\x00" in text or not text.strip():
        return None
    if (len(raw) - len(text)) > 0.2 * len(text):
        return None  # mostly non-ASCII: data tables, not code or prose
    if max(map(len, text.split("\n"))) > 1000:
        return None  # minified or generated
    return text


def collect_docs(train_cap, heldout_cap):
    """Deterministic: files ordered by sha1 of their path relative to the package root."""
    roots = source_roots()
    log("source roots:", roots)
    files = list_files(roots)
    order = sorted(files, key=sha1)
    log(f"candidate files: {len(order)}")
    train, heldout, seen = [], [], set()
    tb = hb = 0
    for key in order:
        if tb >= train_cap and hb >= heldout_cap:
            break
        h = int(sha1(key), 16)
        is_heldout = h % 50 == 0
        if (is_heldout and hb >= heldout_cap) or (not is_heldout and tb >= train_cap):
            continue
        full, ext = files[key]
        try:
            with open(full, "rb") as f:
                raw = f.read()
        except OSError:
            continue
        text = usable(raw)
        if text is None:
            continue
        ch = sha1(raw)
        if ch in seen:
            continue
        seen.add(ch)
        as_chat = (h >> 64) % 4 == 0
        doc = (key, ext, text, as_chat)
        if is_heldout:
            heldout.append(doc)
            hb += len(raw)
        else:
            train.append(doc)
            tb += len(raw)
    for name, docs in (("train", train), ("heldout", heldout)):
        by_ext = {}
        for _, ext, text, _ in docs:
            n, b = by_ext.get(ext, (0, 0))
            by_ext[ext] = (n + 1, b + len(text))
        log(f"{name}: {len(docs)} files, {sum(b for _, b in by_ext.values()) / 1e6:.1f}M chars, by ext {by_ext}")
    return train, heldout


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------
def build_tokenizer(texts, vocab_size, out_dir):
    from tokenizers import AddedToken, Tokenizer, pre_tokenizers, trainers

    base = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            **QWEN_PIPELINE,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": {}, "merges": []}}
    tok = Tokenizer.from_str(json.dumps(base))
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(ADDED_TOKENS), min_frequency=2,
                                  show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    n_learned = tok.get_vocab_size(with_added_tokens=False)
    for content, special in ADDED_TOKENS:
        at = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False,
                        special=special)
        if special:
            tok.add_special_tokens([at])
        else:
            tok.add_tokens([at])
    j = json.loads(tok.to_str())
    j.update(json.loads(json.dumps(QWEN_PIPELINE)))  # exactly Qwen's pipeline, whatever training wrote
    for k, v in base["model"].items():
        if k not in ("vocab", "merges"):
            j["model"][k] = v
    ids = [a["id"] for a in j["added_tokens"]]
    assert ids == list(range(n_learned, n_learned + len(ADDED_TOKENS))), ids
    assert [a["content"] for a in j["added_tokens"]] == [c for c, _ in ADDED_TOKENS]
    tok = Tokenizer.from_str(json.dumps(j))
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    j2 = json.load(open(out_dir / "tokenizer.json"))
    for k in QWEN_PIPELINE:
        assert j2[k] == QWEN_PIPELINE[k], (k, j2[k])

    template = CHAT_TEMPLATE_PATH.read_text()
    decoder = {}
    for a in j["added_tokens"]:
        decoder[str(a["id"])] = {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                   "single_word", "special")}
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [c for c, s in ADDED_TOKENS if s and c != "<|endoftext|>"],
        "bos_token": None,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "TokenizersBackend",
        "unk_token": None,
    }
    with open(out_dir / "tokenizer_config.json", "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")
    log(f"tokenizer: {n_learned} learned tokens + {len(ADDED_TOKENS)} added = {tok.get_vocab_size()}")
    return tok


def token_ids(tok):
    return {c: tok.token_to_id(c) for c, _ in ADDED_TOKENS}


def encode_docs(tok, texts, eot, batch=2000):
    enc = getattr(tok, "encode_batch_fast", None) or tok.encode_batch
    out = array("i")
    for i in range(0, len(texts), batch):
        for e in enc(texts[i:i + batch], add_special_tokens=False):
            out.extend(e.ids)
            out.append(eot)
    return out


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------
def text_config_dict(shape, vocab_size, special, max_pos):
    n = shape["num_hidden_layers"]
    assert n % 4 == 0
    layer_types = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(n)]
    rot = int(shape["head_dim"] * 0.25) // 2  # rotary frequencies; mrope sections must sum to it
    d = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "eos_token_id": special["<|im_end|>"],
        "head_dim": shape["head_dim"],
        "hidden_act": "silu",
        "hidden_size": shape["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": shape["intermediate_size"],
        "layer_types": layer_types,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": shape["linear_key_head_dim"],
        "linear_num_key_heads": shape["linear_num_key_heads"],
        "linear_num_value_heads": shape["linear_num_value_heads"],
        "linear_value_head_dim": shape["linear_value_head_dim"],
        "max_position_embeddings": max_pos,
        "model_type": "qwen3_5_text",
        "num_attention_heads": shape["num_attention_heads"],
        "num_hidden_layers": n,
        "num_key_value_heads": shape["num_key_value_heads"],
        "pad_token_id": special["<|endoftext|>"],
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": [(rot + 2) // 3, (rot + 1) // 3, rot // 3],
            "partial_rotary_factor": 0.25,
            "rope_theta": 10000000.0,
            "rope_type": "default",
        },
        "tie_word_embeddings": True,
        "use_cache": True,
        "vocab_size": vocab_size,
    }
    assert sum(d["rope_parameters"]["mrope_section"]) == rot
    return d


def new_causal_lm(cfg_dict, seed, device):
    import torch
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(**{k: v for k, v in cfg_dict.items() if k != "model_type"})
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    except Exception as e:  # older keyword handling: fall back to the plain constructor
        log("from_config(attn_implementation=sdpa) failed:", repr(e))
        from transformers import Qwen3_5ForCausalLM
        model = Qwen3_5ForCausalLM(cfg)
    model.config.use_cache = False
    return model.to(device=device, dtype=torch.float32)


def count_params(model):
    seen, total, emb = set(), 0, 0
    for n, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        if "embed_tokens" in n:
            emb += p.numel()
    return total, emb


def lr_at(step, total, peak, warmup, min_ratio=0.1):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t)))




# ----------------------------------------------------------------------------------------------
# Training. The target trains with its MTP head (joint loss) and, for the last steps, on the weights
# it will ship with (quantization-aware: the forward pass sees dequantize(quantize(w)), the update
# goes to the float weights: a straight-through estimator).
# ----------------------------------------------------------------------------------------------
GDN = {"original": None, "calls": 0}


def use_chunked_gdn():
    """Routes every Qwen3.5 Gated DeltaNet layer through gdn_chunked: transformers 5.17's layer calls
    the module-level torch_chunk_gated_delta_rule of modeling_qwen3_5 (flash-linear-attention when
    installed), so that name is what is replaced. Counts the calls."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as q35
    from gdn_chunked import chunk_gated_delta_rule
    if GDN["original"] is None:
        GDN["original"] = q35.torch_chunk_gated_delta_rule

    def counted(*a, **k):
        import torch
        if not torch.compiler.is_compiling():  # a traced counter would be a guard that recompiles every call
            GDN["calls"] += 1
        return chunk_gated_delta_rule(*a, **k)
    q35.torch_chunk_gated_delta_rule = counted
    return counted


class TransformersGdn:
    """Within the block, transformers' own gated delta rule (for reference outputs and the check)."""

    def __enter__(self):
        from transformers.models.qwen3_5 import modeling_qwen3_5 as q35
        self.patched = q35.torch_chunk_gated_delta_rule
        q35.torch_chunk_gated_delta_rule = GDN["original"]

    def __exit__(self, *exc):
        from transformers.models.qwen3_5 import modeling_qwen3_5 as q35
        q35.torch_chunk_gated_delta_rule = self.patched


def check_chunked_gdn(model, vocab, dev):
    """The patched model must call gdn_chunked once per GDN layer and give transformers' own logits."""
    import torch
    layers = sum(t == "linear_attention" for t in model.config.layer_types)
    x = torch.randint(0, vocab, (2, 200), generator=torch.Generator().manual_seed(1)).to(dev)
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        before = GDN["calls"]
        fast = model(input_ids=x, use_cache=False).logits.float()
        used = GDN["calls"] - before
        with TransformersGdn():
            slow = model(input_ids=x, use_cache=False).logits.float()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    err = rel_err(fast, slow)
    log(f"chunked GDN: {used} calls for {layers} GDN layers; logits vs transformers' own rel. err {err:.2e}")
    if used != layers or not err < 1e-4:
        raise RuntimeError("the chunked gated delta rule is not in use or does not match transformers")
    return {"calls_per_forward": used, "gdn_layers": layers, "logits_rel_err_vs_transformers": err}


def quantizable(name, p):
    """What kapitsa quantize (and mlx-lm) quantize: 2-D weights that are not norms (conv1d is 3-D)."""
    return p.dim() == 2 and name.endswith("weight") and "norm" not in name.rsplit(".", 2)[-2]


class ShippedWeights:
    """Within the block, the parameters hold what the checkpoint will hold: quantizable ones
    dequantize(quantize(w)), the rest (norms, conv1d, A_log, dt_bias) rounded to bf16 when all=True.
    The float weights come back on exit."""

    def __init__(self, named_params, bits, group_size, all=True):
        self.items = [(n, p) for n, p in named_params if quantizable(n, p) or all]
        self.bits, self.group_size = bits, group_size
        self.saved = None

    def __enter__(self):
        import torch
        from affine import fake_quant
        self.saved = [p.detach().clone() for _, p in self.items]
        with torch.no_grad():
            for n, p in self.items:
                p.copy_(fake_quant(p, self.group_size, self.bits) if quantizable(n, p) else p.to(torch.bfloat16).float())
        return self

    def __exit__(self, *exc):
        import torch
        with torch.no_grad():
            for (_, p), s in zip(self.items, self.saved):
                p.copy_(s)
        self.saved = None


def unique_named_params(*modules_and_lists):
    """(name, parameter) over modules and MtpHead objects, each tied parameter once."""
    seen, out = set(), []
    for obj in modules_and_lists:
        pairs = obj.named_parameters() if hasattr(obj, "named_parameters") else obj
        for n, p in pairs:
            if id(p) not in seen:
                seen.add(id(p))
                out.append((n, p))
    return out


def train_model(name, model, data, hp, steps, budget_s, seed, mtp=None, qat=None, state_path=None, stop_after_s=None):
    """Trains for `steps` steps, or, when steps is None, for as many as fit in budget_s (the count is
    fixed after `calib` steps, before the warmup ends, so passing it back reproduces the run).
    mtp: an MtpHead trained jointly (loss + hp["mtp_weight"] · its loss on token t+2).
    qat: (bits, group_size, fraction): the last fraction of the steps run on the shipped weights.
    state_path, stop_after_s: one run split over several device calls (each at most 10 minutes): a call
    that reaches stop_after_s seconds of training saves the weights, the optimizer, the step and the
    sampler to state_path and returns {"stopped": True, ...}; the next call, finding the file, goes on
    from there (same schedule, same total; `steps` must be given)."""
    import torch
    import torch.nn.functional as F

    B, T = hp["batch"], hp["seq"]
    V = model.config.vocab_size
    named = unique_named_params(model, mtp.named_parameters() if mtp else [])
    params = [p for _, p in named]
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": hp["wd"]},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=hp["lr"], betas=(0.9, 0.95), eps=1e-8, fused=True)
    warmup = max(hp["warmup"], hp["calib"] + 1)
    gen = torch.Generator().manual_seed(seed)
    ar = torch.arange(T + 2, device=data.device)
    n = data.numel()
    model.train()
    total = steps
    step, t0 = 0, time.time()
    t_cal = None
    tokens = 0
    last = {}
    qat_steps = 0
    shipped_weights = ShippedWeights(named, qat[0], qat[1], all=False) if qat is not None else None

    def losses(seq):  # seq [B, T+2] -> (loss, the model's, the head's or None)
        x, y = seq[:, :T], seq[:, 1:T + 1]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = model.model(input_ids=x, use_cache=False).last_hidden_state   # [B, T, H], final-normed
            logits = model.lm_head(h)
        main_loss = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))
        if mtp is None:
            return main_loss, main_loss, None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lg2 = mtp.logits(seq[:, 1:T + 1], h)                      # row i: guess for token i+2
        mtp_loss = F.cross_entropy(lg2.float().reshape(-1, V), seq[:, 2:T + 2].reshape(-1))
        return main_loss + hp["mtp_weight"] * mtp_loss, main_loss, mtp_loss
    # hp["compile"]: torch.compile the forward and loss (the profile of an eager step is ~60% elementwise
    # kernels that Inductor fuses); the optimizer and the quantization-aware swap stay eager.
    forward = torch.compile(losses) if hp.get("compile") else losses
    resumed_from = 0
    if state_path is not None and os.path.exists(state_path):
        st = torch.load(state_path, map_location=data.device, weights_only=False)
        if st["name"] != name or st["total"] != total or [n for n, _ in named] != st["names"]:
            raise RuntimeError(f"{state_path}: a state of {st['name']} ({st['total']} steps), not of this run")
        with torch.no_grad():
            for (_, p), v in zip(named, st["params"]):
                p.copy_(v)
        opt.load_state_dict(st["optimizer"])
        gen.set_state(st["generator"])
        step = resumed_from = st["step"]
        tokens, qat_steps = st["tokens"], st["qat_steps"]
        log(f"{name}: resumed at step {step}/{total} from {state_path}")
    while total is None or step < total:
        if stop_after_s is not None and step > resumed_from and time.time() - t0 > stop_after_s:
            torch.save({"name": name, "total": total, "names": [n for n, _ in named],
                        "params": [p.detach() for _, p in named], "optimizer": opt.state_dict(),
                        "generator": gen.get_state(), "step": step, "tokens": tokens, "qat_steps": qat_steps},
                       state_path)
            log(f"{name}: stopped at step {step}/{total} after {time.time() - t0:.0f}s; state in {state_path}")
            return {"stopped": True, "step": step, "total": total}
        lr = lr_at(step, total if total is not None else 10**9, hp["lr"], warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        off = torch.randint(0, n - T - 2, (B,), generator=gen).to(data.device)
        seq = data[off[:, None] + ar[None, :]].long()                 # [B, T+2]
        shipped = None
        if qat is not None and total is not None and step >= int(total * (1 - qat[2])):
            shipped = shipped_weights.__enter__()
            qat_steps += 1
        loss, main_loss, mtp_loss = forward(seq)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if shipped is not None:
            shipped.__exit__(None, None, None)                         # the update goes to the float weights
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        tokens += B * T
        if step == resumed_from + 3:
            torch.cuda.synchronize()
            t_cal = time.time()
        if total is None and step == hp["calib"]:
            torch.cuda.synchronize()
            now = time.time()
            per_step = (now - t_cal) / (hp["calib"] - 3)
            left = budget_s - (now - t0)
            total = max(step + 1, min(hp["max_steps"], step + int(left / per_step)))
            log(f"{name}: {per_step * 1000:.1f} ms/step over steps 3..{step}; budget {budget_s:.0f}s "
                f"-> {total} steps")
            print(f"{name.upper()}_STEPS={total}", flush=True)
        if step % hp["log_every"] == 0 or step == total:
            last = {"loss": main_loss.item()}
            if mtp is not None:
                last["mtp_loss"] = mtp_loss.item()
            if not all(math.isfinite(v) for v in last.values()):
                raise RuntimeError(f"{name}: loss is {last} at step {step}")
            el = time.time() - t0
            log(f"{name} step {step}/{total} {' '.join(f'{k} {v:.4f}' for k, v in last.items())} "
                f"gnorm {gnorm.item():.3f} lr {lr:.2e}{' qat' if shipped is not None else ''} "
                f"{(step - resumed_from) * B * T / el / 1e3:.0f}k tok/s epoch {tokens / n:.2f}")
    torch.cuda.synchronize()
    el = time.time() - t0
    log(f"{name}: trained {step} steps ({qat_steps} on the shipped weights), {tokens / 1e6:.1f}M tokens in {el:.1f}s")
    model.eval()
    return {"steps": step, "qat_steps": qat_steps, "tokens": tokens, "epochs": round(tokens / n, 2),
            "seconds": round(el, 1), "resumed_from_step": resumed_from,
            "steady_ms_per_step": round((time.time() - t_cal) / (step - resumed_from - 3) * 1000, 1)
            if t_cal is not None and step > resumed_from + 3 else None, "final_loss": last.get("loss"), "final_mtp_loss": last.get("mtp_loss"),
            "batch": B, "seq": T, "lr": hp["lr"], "warmup": warmup, "weight_decay": hp["wd"],
            "mtp_weight": hp.get("mtp_weight") if mtp is not None else None, "compiled": bool(hp.get("compile"))}


def windows(ids, T, max_windows):
    import torch
    n = min(max_windows, (ids.numel() - 1) // T)
    if n == 0:
        T = ids.numel() - 1
        n = 1
    x = torch.stack([ids[i * T:i * T + T] for i in range(n)]).long()
    y = torch.stack([ids[i * T + 1:i * T + T + 1] for i in range(n)]).long()
    return x, y


def eval_ppl(model, ids, T, max_windows, B=16):
    import torch
    import torch.nn.functional as F
    x, y = windows(ids, T, max_windows)
    tot, cnt = 0.0, 0
    with torch.no_grad():
        for i in range(0, x.shape[0], B):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                lg = model(input_ids=x[i:i + B], use_cache=False).logits
            tot += F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), y[i:i + B].reshape(-1),
                                   reduction="sum").item()
            cnt += y[i:i + B].numel()
    return math.exp(tot / cnt), cnt


def eval_agreement(target, draft, ids, T, max_windows, B=16):
    import torch
    x, y = windows(ids, T, max_windows)
    same = t_ok = d_ok = cnt = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], B):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                a = target(input_ids=x[i:i + B], use_cache=False).logits.argmax(-1)
                b = draft(input_ids=x[i:i + B], use_cache=False).logits.argmax(-1)
            yy = y[i:i + B]
            same += (a == b).sum().item()
            t_ok += (a == yy).sum().item()
            d_ok += (b == yy).sum().item()
            cnt += yy.numel()
    return {"agreement": same / cnt, "target_top1": t_ok / cnt, "draft_top1": d_ok / cnt,
            "positions": cnt}



# ----------------------------------------------------------------------------------------------
# Export in the released Qwen3.5 layout, and the reference logits
# ----------------------------------------------------------------------------------------------
def export_checkpoint(causal, text_cfg, special, tok_dir, out_dir, seed, dtype=None):
    """The released Qwen3.5 layout, bf16 (dtype float32: the quantized target's reference copy)."""
    import torch
    from transformers import GenerationConfig, Qwen3_5Config, Qwen3_5ForConditionalGeneration

    hidden = text_cfg["hidden_size"]
    vision = {"depth": 1, "hidden_size": 32, "hidden_act": "gelu_pytorch_tanh", "intermediate_size": 64,
              "num_heads": 2, "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2,
              "temporal_patch_size": 2, "out_hidden_size": hidden, "num_position_embeddings": 64,
              "initializer_range": 0.02, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "axial"}}
    cfg = Qwen3_5Config(text_config=dict(text_cfg), vision_config=vision,
                        image_token_id=special["<|image_pad|>"], video_token_id=special["<|video_pad|>"],
                        vision_start_token_id=special["<|vision_start|>"],
                        vision_end_token_id=special["<|vision_end|>"], tie_word_embeddings=True)
    torch.manual_seed(seed)
    cg = Qwen3_5ForConditionalGeneration(cfg)
    sd = {}
    for k, v in causal.state_dict().items():
        if k.startswith("model."):
            sd["model.language_model." + k[len("model."):]] = v.detach().float().cpu()
        elif k == "lm_head.weight":
            sd[k] = v.detach().float().cpu()
        else:
            raise RuntimeError(f"unexpected tensor {k}")
    missing, unexpected = cg.load_state_dict(sd, strict=False)
    bad = [k for k in missing if not k.startswith("model.visual.")]
    if bad or unexpected:
        raise RuntimeError(f"state dict mapping: missing {bad} unexpected {list(unexpected)}")
    emb = cg.model.language_model.embed_tokens.weight
    tied = cg.lm_head.weight.data_ptr() == emb.data_ptr()
    log(f"export: lm_head tied to embed_tokens in memory: {tied}")
    if not tied:  # still a valid checkpoint (lm_head.weight is then stored, equal to the embedding)
        log("WARNING: lm_head is not tied to embed_tokens in Qwen3_5ForConditionalGeneration")
    cg = cg.to(dtype or torch.bfloat16)
    gen = GenerationConfig(bos_token_id=None, eos_token_id=[special["<|im_end|>"], special["<|endoftext|>"]],
                           pad_token_id=special["<|endoftext|>"], do_sample=True, temperature=0.7,
                           top_k=20, top_p=0.95)
    cg.generation_config = gen
    out_dir.mkdir(parents=True, exist_ok=True)
    cg.save_pretrained(str(out_dir))
    gen.save_pretrained(str(out_dir))
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / fn, out_dir / fn)
    # What was written: tensor names and dtypes.
    from safetensors import safe_open
    names, dtypes = [], set()
    with safe_open(str(out_dir / "model.safetensors"), framework="pt") as f:
        for k in f.keys():
            names.append(k)
            dtypes.add(str(f.get_slice(k).get_dtype()))
    n_text = sum(1 for k in names if k.startswith("model.language_model."))
    log(f"export: {out_dir}: {len(names)} tensors ({n_text} text), dtypes {sorted(dtypes)}, "
        f"lm_head.weight stored: {'lm_head.weight' in names}, files {sorted(os.listdir(out_dir))}, "
        f"first names {sorted(names)[:3]}")
    c = json.load(open(out_dir / "config.json"))
    log(f"export: config architectures {c.get('architectures')} model_type {c.get('model_type')} "
        f"dtype {c.get('dtype')} text layer_types {c['text_config']['layer_types']}")
    return {"tensors": len(names), "lm_head_stored": "lm_head.weight" in names, "dtypes": sorted(dtypes)}


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def make_reference(model_dir, dest_dir, causal, prompt_text, tok, n_greedy, name, seed, tmp_dir, round_bf16):
    """Reference outputs from the saved checkpoint in model_dir, float32, eager attention, on the CPU,
    written to dest_dir. causal: the model as trained (round_bf16: its weights are compared after
    rounding to bf16; False when they already hold the shipped values)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, Qwen3_5ForConditionalGeneration

    torch.set_num_threads(min(16, os.cpu_count() or 1))
    prompt_ids = tok.encode(prompt_text, add_special_tokens=False).ids
    ids = torch.tensor([prompt_ids])
    m = Qwen3_5ForConditionalGeneration.from_pretrained(str(model_dir), dtype=torch.float32,
                                                        attn_implementation="eager").eval()
    checks = {}
    with torch.no_grad():
        hs = None
        try:
            out = m(input_ids=ids, use_cache=False, output_hidden_states=True)
            if out.hidden_states:
                hs = torch.stack([h[0].float() for h in out.hidden_states]).contiguous()
        except Exception as e:
            checks["hidden_states_error"] = repr(e)[:300]
            out = m(input_ids=ids, use_cache=False)
        logits = out.logits[0].float().contiguous()
        if hs is not None:
            checks["hidden_states_layers"] = int(hs.shape[0])
            checks["lm_head_of_last_hidden_rel_err"] = rel_err(m.lm_head(hs[-1]), logits)
        seq = ids
        g_ids, g_logits, g_hidden, margins = [], [], [], []
        for _ in range(n_greedy):
            step = m(input_ids=seq, use_cache=False, output_hidden_states=hs is not None)
            lo = step.logits[0, -1].float()
            if hs is not None:
                g_hidden.append(step.hidden_states[-1][0, -1].float())  # final-normed: lm_head reads it
            top2 = lo.topk(2).values
            margins.append(float(top2[0] - top2[1]))
            nxt = int(lo.argmax())
            g_ids.append(nxt)
            g_logits.append(lo)
            seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
        g_logits = torch.stack(g_logits).contiguous()
        if g_hidden:
            # The tests rebuild greedy_logits from these rows (scripts/pack-data.sh drops the logits).
            g_hidden = torch.stack(g_hidden).contiguous()
            checks["lm_head_of_greedy_hidden_rel_err"] = rel_err(m.lm_head(g_hidden), g_logits)
        checks["greedy_min_margin"] = min(margins)
        # The cached path (recurrent + KV state carried step by step) must choose the same tokens.
        try:
            gout = m.generate(ids, max_new_tokens=n_greedy, do_sample=False, top_k=None, top_p=None,
                              temperature=None, return_dict_in_generate=True, output_logits=True,
                              eos_token_id=None, pad_token_id=tok.token_to_id("<|endoftext|>"))
            cached_ids = gout.sequences[0, ids.shape[1]:].tolist()
            cached_logits = torch.stack([l[0].float() for l in gout.logits])
            checks["cached_greedy_ids_equal"] = cached_ids == g_ids
            checks["cache_vs_nocache_rel_err"] = rel_err(cached_logits, g_logits)
        except Exception as e:
            checks["cached_generate_error"] = repr(e)[:300]
    tensors = {"prompt_ids": torch.tensor(prompt_ids, dtype=torch.int32),
               "prompt_logits": logits,
               "greedy_ids": torch.tensor(g_ids, dtype=torch.int32),
               "greedy_logits": g_logits}
    if hs is not None:
        tensors["hidden_states"] = hs
        tensors["greedy_hidden"] = g_hidden
    ref_path = dest_dir / "reference.safetensors"
    save_file(tensors, str(ref_path))

    # 1. The saved config.json + weights, loaded again, reproduce the saved reference exactly.
    back = load_file(str(ref_path))
    m2 = Qwen3_5ForConditionalGeneration.from_pretrained(str(model_dir), dtype=torch.float32,
                                                         attn_implementation="eager").eval()
    with torch.no_grad():
        l2 = m2(input_ids=back["prompt_ids"].long()[None], use_cache=False).logits[0].float()
    checks["reload_vs_reference_max_abs"] = float((l2 - back["prompt_logits"]).abs().max())
    # 2. The trained model itself (plain causal LM, model.* names), bf16-rounded, float32, eager.
    try:
        tmp = tmp_dir / f"{name}_causal"
        causal.save_pretrained(str(tmp))
        c2 = AutoModelForCausalLM.from_pretrained(str(tmp), dtype=torch.float32,
                                                  attn_implementation="eager").eval()
        with torch.no_grad():
            if round_bf16:
                for p in c2.parameters():
                    p.copy_(p.to(torch.bfloat16).float())
            l3 = c2(input_ids=ids, use_cache=False).logits[0].float()
        checks["trained_causal_lm_vs_reference_rel_err"] = rel_err(l3, logits)
        shutil.rmtree(tmp, ignore_errors=True)
    except Exception as e:
        checks["trained_causal_lm_check_error"] = repr(e)[:300]
    # 3. Whatever AutoModelForCausalLM makes of the exported folder (information only).
    try:
        a = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32,
                                                 attn_implementation="eager").eval()
        with torch.no_grad():
            l4 = a(input_ids=ids, use_cache=False).logits[0].float()
        checks["automodelforcausallm_class"] = type(a).__name__
        checks["automodelforcausallm_vs_reference_rel_err"] = rel_err(l4, logits)
    except Exception as e:
        checks["automodelforcausallm_error"] = repr(e)[:300]

    import tokenizers
    import transformers
    info = {"name": name, "seed": seed, "transformers": transformers.__version__,
            "torch": torch.__version__, "tokenizers": tokenizers.__version__,
            "computed_with": "Qwen3_5ForConditionalGeneration.from_pretrained(dtype=float32, "
                             "attn_implementation='eager') on the CPU, no cache",
            "prompt_text": prompt_text, "prompt_len": len(prompt_ids), "prompt_ids": prompt_ids,
            "generated": n_greedy,
            "greedy_text": tok.decode(g_ids, skip_special_tokens=False),
            "logits_std": float(logits.std()),
            "tensors": {k: [str(v.dtype).replace("torch.", ""), list(v.shape)] for k, v in tensors.items()},
            "checks": checks}
    with open(dest_dir / "reference.json", "w") as f:
        json.dump(info, f, indent=1, ensure_ascii=False)
        f.write("\n")
    log(f"reference {name}: T={len(prompt_ids)} checks {json.dumps(checks)}")
    return info


def check_autotokenizer(tok_dir, tok, samples):
    """transformers' AutoTokenizer on the saved files must agree with the tokenizer we trained."""
    res = {}
    try:
        from transformers import AutoTokenizer
        at = AutoTokenizer.from_pretrained(str(tok_dir))
        res["class"] = type(at).__name__
        res["encode_equal"] = all(at.encode(s, add_special_tokens=False) ==
                                  tok.encode(s, add_special_tokens=False).ids for s in samples)
        rendered = at.apply_chat_template([{"role": "user", "content": REF_USER}],
                                          add_generation_prompt=True, tokenize=False)
        res["chat_template_matches_reference_prompt"] = rendered == render_user_prompt(REF_USER)
        if not res["chat_template_matches_reference_prompt"]:
            res["rendered"] = rendered
        res["eos_token"] = at.eos_token
        res["pad_token"] = at.pad_token
    except Exception as e:
        res["error"] = repr(e)[:400]
    log("AutoTokenizer check:", json.dumps(res))
    return res


# ----------------------------------------------------------------------------------------------
# ----------------------------------------------------------------------------------------------
# MTP head (--mtp-head): a Qwen3.5-style multi-token-prediction head for the trained target.
# ----------------------------------------------------------------------------------------------
def rms_norm_1w(x, w, eps):
    """Qwen3.5's zero-centred RMSNorm, in float32: x / rms(x) * (1 + w)."""
    import torch
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())


class MtpHead:
    """mtp.* of a Qwen3.5 checkpoint, written out here (transformers drops mtp.* on load):
        x = fc(concat(norm_emb(embed(t_{i+1})), norm_hidden(h_i)))    [.., 2H] -> [.., H]
        y = norm(layer(x))                                             one full-attention layer
        logits = lm_head(y)                                            the target's (tied) head
    h_i is the target's final-normed hidden state at position i (what its head reads; vLLM feeds the
    model's output after model.norm), and row i runs at position i. The layer and mtp.norm are a
    one-layer Qwen3.5 text model (its own layer code, so conventions match the target), run on
    inputs_embeds; fc and the two pre-norms are the lines below."""

    def __init__(self, target, cfg_dict, dev):
        import torch
        from transformers import AutoModelForCausalLM, Qwen3_5TextConfig
        H = cfg_dict["hidden_size"]
        c = {k: v for k, v in cfg_dict.items() if k != "model_type"}
        c.update(num_hidden_layers=1, layer_types=["full_attention"])
        self.body = AutoModelForCausalLM.from_config(Qwen3_5TextConfig(**c), attn_implementation="sdpa")
        self.body = self.body.to(device=dev, dtype=torch.float32)
        self.body.config.use_cache = False
        # Start from the target's last full-attention layer and final norm; fc passes the hidden half.
        last_full = max(i for i, t in enumerate(cfg_dict["layer_types"]) if t == "full_attention")
        with torch.no_grad():
            self.body.model.layers[0].load_state_dict(target.model.layers[last_full].state_dict())
            self.body.model.norm.weight.copy_(target.model.norm.weight)
        g = torch.Generator().manual_seed(7)
        fc = torch.cat([torch.randn(H, H, generator=g) * 0.02, torch.eye(H)], dim=1)
        self.fc = torch.nn.Parameter(fc.to(dev))
        self.norm_emb = torch.nn.Parameter(torch.zeros(H, device=dev))
        self.norm_hidden = torch.nn.Parameter(torch.zeros(H, device=dev))
        self.eps = cfg_dict["rms_norm_eps"]
        self.target = target

    def named_parameters(self):
        return [("mtp.fc.weight", self.fc), ("mtp.pre_fc_norm_embedding.weight", self.norm_emb),
                ("mtp.pre_fc_norm_hidden.weight", self.norm_hidden), ("mtp.norm.weight", self.body.model.norm.weight)] + \
            [("mtp.layers.0." + k, v) for k, v in self.body.model.layers[0].named_parameters()]

    def hidden(self, next_ids, h):
        """next_ids [B, T] (token i+1 for row i), h [B, T, H] -> y [B, T, H] (after mtp.norm)."""
        import torch
        e = self.target.model.embed_tokens(next_ids)
        x = torch.cat([rms_norm_1w(e, self.norm_emb, self.eps), rms_norm_1w(h, self.norm_hidden, self.eps)], -1)
        x = x @ self.fc.t()
        return self.body.model(inputs_embeds=x, use_cache=False).last_hidden_state

    def logits(self, next_ids, h):
        return self.target.lm_head(self.hidden(next_ids, h))




def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> (torch tensor, safetensors dtype). A plain writer, because torch has no
    uint32 to hand to safetensors: packed codes are int32 tensors written as "U32" (same bits)."""
    import struct
    import torch
    header, blobs, at = {}, [], 0
    for name in sorted(tensors):
        t, dt = tensors[name]
        raw = t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def quantized_tensors(named, prefix_map, bits, group_size):
    """(name, float weight) pairs -> the checkpoint's tensors: MLX affine for quantizable weights
    (codes as "U32", scales and biases bf16), bf16 for the rest. Checks that what it writes
    dequantizes to exactly what ShippedWeights computes with."""
    import torch
    import affine
    out, n_quant = {}, 0
    for k, v in named:
        name = prefix_map(k)
        if name is None:
            continue
        v = v.detach().float()
        if quantizable(k, v):
            packed, scales, biases = affine.quantize(v.cpu(), group_size, bits)
            if not torch.equal(affine.dequantize(packed, scales, biases, group_size, bits),
                               affine.fake_quant(v.cpu(), group_size, bits)):
                raise RuntimeError(f"{name}: packed codes do not dequantize to the trained weights")  # both on the CPU: the GPU fuses multiply-adds
            module = name[:-len(".weight")]
            out[name] = (packed, "U32")
            out[module + ".scales"] = (scales, "BF16")
            out[module + ".biases"] = (biases, "BF16")
            n_quant += 1
        else:
            out[name] = (v.to(torch.bfloat16), "BF16")
    return out, n_quant


def export_quantized(causal, mtp, fp32_dir, out_dir, bits, group_size):
    """The shipped target: fp32_dir's config (plus the MLX "quantization" keys), its tokenizer and
    generation config, and the weights as MLX affine (model.safetensors: the text model, names
    model.language_model.*, no vision tower, no lm_head: tied; model-mtp.safetensors: mtp.*)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = json.load(open(fp32_dir / "config.json"))
    q = {"group_size": group_size, "bits": bits, "mode": "affine"}
    cfg["quantization"] = q
    cfg["quantization_config"] = q
    cfg["dtype"] = "bfloat16"
    with open(out_dir / "config.json", "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    for fn in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(fp32_dir / fn, out_dir / fn)

    def trunk(k):
        return None if k == "lm_head.weight" else "model.language_model." + k[len("model."):]
    sd = [(k, v) for k, v in causal.state_dict().items()]
    tensors, nq = quantized_tensors(sd, trunk, bits, group_size)
    write_safetensors(out_dir / "model.safetensors", tensors, {"format": "mlx"})
    info = {"tensors": len(tensors), "quantized_modules": nq, "bits": bits, "group_size": group_size}
    if mtp is not None:
        mt, mq = quantized_tensors(list(mtp.named_parameters()), lambda k: k, bits, group_size)
        write_safetensors(out_dir / "model-mtp.safetensors", mt, {"format": "mlx"})
        info.update(mtp_tensors=len(mt), mtp_quantized_modules=mq)
    info["files"] = {fn: os.path.getsize(out_dir / fn) for fn in sorted(os.listdir(out_dir))}
    log(f"export quantized: {out_dir}: {json.dumps(info)}")
    return info


def read_safetensors(raw):
    """name -> float32 tensor from a safetensors file's bytes (BF16, F16, F32; U32 packed codes stay int32)."""
    import struct
    import torch
    n = struct.unpack("<Q", raw[:8])[0]
    header, base = json.loads(raw[8:8 + n]), 8 + n
    kinds = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "U32": torch.int32}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        t = torch.frombuffer(bytearray(raw[base + a:base + b]), dtype=kinds[e["dtype"]]).reshape(e["shape"])
        out[name] = t if e["dtype"] == "U32" else t.float()
    return out


def dequantized(sd, q):
    """A checkpoint's tensors with each MLX affine module (weight + scales + biases) as its float weight,
    bits and group size from the config's "quantization" q (a module's own entry first)."""
    import affine
    out = {}
    for k, v in sd.items():
        if k.endswith((".scales", ".biases")):
            continue
        module = k[:-len(".weight")]
        if module + ".scales" in sd:
            own = q.get(module) or q
            v = affine.dequantize(v, sd[module + ".scales"], sd[module + ".biases"], own["group_size"], own["bits"])
        out[k] = v
    return out


def read_packed(path):
    """The bytes of path, or of path.xz unpacked when the plain file is missing or older (a warm device
    machine keeps the checkout's git-ignored unpacked copy from an earlier call: session 36 trained from
    stale weights that way)."""
    import lzma
    xz = path.with_name(path.name + ".xz")
    if path.exists() and (not xz.exists() or path.stat().st_mtime >= xz.stat().st_mtime):
        return path.read_bytes()
    return lzma.decompress(xz.read_bytes())


def load_text_state(folder):
    """The text model's float weights of a folder this script wrote (model.safetensors or its tracked
    .xz), names as Qwen3_5ForCausalLM's; MLX affine modules dequantized (bits and group from config.json).
    Returns (state dict, text config)."""
    folder = Path(folder)
    top = json.load(open(folder / "config.json"))
    q = top.get("quantization") or {}
    raw = read_packed(folder / "model.safetensors")
    sd = dequantized(read_safetensors(raw), q)
    out = {"model." + k[len("model.language_model."):]: v for k, v in sd.items() if k.startswith("model.language_model.")}
    return out, dict(top["text_config"])


def load_mtp_state(folder):
    """mtp.* of a target folder this script wrote (model-mtp.safetensors or its .xz), float, MLX affine
    modules dequantized: names as MtpHead.named_parameters()."""
    folder = Path(folder)
    q = json.load(open(folder / "config.json")).get("quantization") or {}
    raw = read_packed(folder / "model-mtp.safetensors")
    return dequantized(read_safetensors(raw), q)


def start_from(folder, model, head=None):
    """Loads an earlier edition's shipped weights (dequantized where 4-bit) into `model` and, for a
    target, its MTP head: the run then continues that model's training (its optimizer state is not
    kept; the schedule warms up again)."""
    import torch
    sd, _ = load_text_state(folder)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(f"{folder}: state dict: missing {missing} unexpected {unexpected}")
    n_head = 0
    if head is not None:
        mt = load_mtp_state(folder)
        names = dict(head.named_parameters())
        if set(mt) != set(names):
            raise RuntimeError(f"{folder}: MTP tensors {sorted(set(mt) ^ set(names))} do not match the head")
        with torch.no_grad():
            for k, p in names.items():
                p.copy_(mt[k].to(p.device).reshape(p.shape))
        n_head = len(mt)
    log(f"started from {folder}: {len(sd)} tensors, {n_head} of the MTP head")
    return {"folder": str(folder), "tensors": len(sd), "mtp_tensors": n_head}


def load_text_model(folder, dev, seed=0):
    """An earlier target of this script (bf16, or MLX affine as the second edition ships) as the causal LM
    it was trained as, on its shipped weights: the baseline measured in the same run."""
    sd, cfg = load_text_state(folder)
    m = new_causal_lm(cfg, seed, dev)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(f"{folder}: state dict: missing {missing} unexpected {unexpected}")
    return m.eval(), cfg


def mtp_reference(target, head, prompt_ids, out_dir):
    """The head's float32 forward on the first 17 tokens of the target's reference prompt (GPU, no
    TF32), for Kapitsa's MtpHead test: row i is token ids[i+1] with the target's hidden[i]."""
    import torch
    from safetensors.torch import save_file
    dev = next(target.parameters()).device
    ids = torch.tensor(prompt_ids[:17], device=dev)[None]
    with torch.no_grad():
        h = target.model(input_ids=ids[:, :16], use_cache=False).last_hidden_state.float()   # [1, 16, H]
        y = head.hidden(ids[:, 1:17], h)                                                       # [1, 16, H]
        lg = target.lm_head(y).float()
    save_file({"ids": ids[0].to(torch.int32).cpu().contiguous(), "hidden": h[0].cpu().contiguous(),
               "mtp_hidden": y[0].float().cpu().contiguous(), "logits": lg[0].cpu().contiguous()},
              str(out_dir / "mtp_reference.safetensors"),
              metadata={"about": "row i: token ids[i+1] with the target's final-normed hidden[i] at position i; "
                                 "float32 PyTorch (tools/demo_model/train.py), the shipped (dequantized) weights"})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="models/demo", help="output folder (target/ and draft/ go in it)")
    ap.add_argument("--seed", type=int, default=20261)
    ap.add_argument("--smoke", action="store_true", help="every stage on tiny data and tiny models, a few steps")
    ap.add_argument("--target-steps", type=int, default=None, help="fixed step count (reproduces a run)")
    ap.add_argument("--draft-steps", type=int, default=None)
    ap.add_argument("--target-budget", type=float, default=360.0, help="seconds, when no step count given")
    ap.add_argument("--draft-budget", type=float, default=50.0)
    ap.add_argument("--target-batch", type=int, default=64, help="sequences of 1024 tokens per step")
    ap.add_argument("--train-mb", type=float, default=1000.0, help="training text cap, MB (default: all there is)")
    ap.add_argument("--heldout-mb", type=float, default=4.8,
                    help="held-out text, MB (4.8: the first edition's held-out set, so perplexities compare)")
    ap.add_argument("--tokenizer", default=None,
                    help="folder with tokenizer.json/tokenizer_config.json to reuse (default: train one)")
    ap.add_argument("--tokenizer-mb", type=float, default=20.0, help="tokenizer training text, MB")
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--bits", type=int, default=4, help="the shipped target's MLX affine bits")
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--qat-fraction", type=float, default=0.2,
                    help="last fraction of the target's steps trained on its quantized weights")
    ap.add_argument("--mtp-weight", type=float, default=0.3, help="weight of the MTP head's loss")
    ap.add_argument("--baseline", default=None, help="an earlier target folder to measure beside (same held-out set)")
    ap.add_argument("--stubs", type=int, default=20, help="held-out function stubs for the parse rate")
    ap.add_argument("--probe-batches", default=None, help="e.g. 32,64: time 12 target steps at each batch first")
    ap.add_argument("--target-shape", default=None,
                    help='JSON over the target\'s default shape, e.g. \'{"hidden_size": 512, "num_hidden_layers": 16}\'')
    ap.add_argument("--state", default=None,
                    help="a file for one run over several device calls: with --stop-after, the target's training "
                         "stops there and saves its state; a later call with the same arguments goes on from it")
    ap.add_argument("--stop-after", type=float, default=None, help="seconds of target training in this call")
    ap.add_argument("--compile", action="store_true", help="torch.compile the training forward (probe_speed.py --compile measures it)")
    ap.add_argument("--target-lr", type=float, default=1.5e-3, help="the target's peak learning rate")
    ap.add_argument("--draft-lr", type=float, default=3e-3, help="the draft's peak learning rate")
    ap.add_argument("--init-from", default=None,
                    help="a target folder this script wrote (models/demo/target): start from its shipped weights "
                         "and MTP head instead of random ones (training goes on across device sessions)")
    ap.add_argument("--draft-init-from", default=None, help="the same for the draft (models/demo/draft)")
    args = ap.parse_args()

    import torch
    import tokenizers
    import transformers

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp_dir = out / "tmp"
    tmp_dir.mkdir(exist_ok=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True   # training; switched off before any reference output
    torch.backends.cudnn.allow_tf32 = True
    log(f"torch {torch.__version__} transformers {transformers.__version__} tokenizers "
        f"{tokenizers.__version__} python {sys.version.split()[0]} gpu {torch.cuda.get_device_name(0)}")
    metrics = {"seed": args.seed, "smoke": args.smoke, "argv": sys.argv[1:],
               "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                            "tokenizers": tokenizers.__version__, "python": sys.version.split()[0],
                            "gpu": torch.cuda.get_device_name(0)}}
    phases = {}

    target_shape, draft_shape = TARGET_SHAPE, DRAFT_SHAPE
    if args.target_shape:
        target_shape = dict(TARGET_SHAPE, **json.loads(args.target_shape))
    if args.state and args.target_steps is None:
        ap.error("--state needs --target-steps (every call must agree on the schedule)")
    if args.smoke:
        args.train_mb, args.heldout_mb, args.tokenizer_mb = 3.0, 0.3, 3.0
        if args.tokenizer is None:
            args.vocab = 2048
        target_shape = dict(TARGET_SHAPE, hidden_size=128, intermediate_size=256, num_hidden_layers=4)
        hp_t = dict(batch=4, seq=256, lr=2e-3, warmup=100, wd=0.1, calib=6, max_steps=12, log_every=2)
        eval_windows, n_greedy, args.stubs = 4, 4, 3
        if args.target_steps is None:
            args.target_budget = 3.0
        if args.draft_steps is None:
            args.draft_budget = 2.0
    else:
        hp_t = dict(batch=args.target_batch, seq=1024, lr=args.target_lr, warmup=150, wd=0.1, calib=30,
                    max_steps=50000, log_every=100)
        eval_windows, n_greedy = 128, 16
    hp_t["mtp_weight"] = args.mtp_weight
    hp_t["compile"] = args.compile
    hp_d = dict(hp_t, lr=args.draft_lr, warmup=150, compile=False)  # its 50 s would go to compiling
    if not args.smoke:
        hp_d["batch"] = 64
    qat = (args.bits, args.group_size, args.qat_fraction) if args.qat_fraction > 0 else None

    # 1. data -------------------------------------------------------------------------------
    t = time.time()
    train_docs, held_docs = collect_docs(int(args.train_mb * 1e6), int(args.heldout_mb * 1e6))
    phases["collect_s"] = round(time.time() - t, 1)
    rng = random.Random(args.seed)
    train_texts, n_chat = [], 0
    for key, ext, text, as_chat in train_docs:
        if as_chat:
            s = chat_sample(text, ext, random.Random(args.seed ^ int(sha1(key)[:12], 16)))
            if s is not None:
                train_texts.append(s)
                n_chat += 1
                continue
        train_texts.append(text)
    rng.shuffle(train_texts)
    # The held-out chat samples keep the first edition's seed (20260), so that set is the same too.
    held = {"code": [d[2] for d in held_docs if d[1] == ".py"],
            "docs": [d[2] for d in held_docs if d[1] != ".py"],
            "chat": [s for s in (chat_sample(d[2], d[1], random.Random(20260 ^ int(sha1(d[0])[:12], 16)))
                                 for d in held_docs) if s is not None]}
    metrics["data"] = {"train_files": len(train_docs), "train_chars": sum(len(d[2]) for d in train_docs),
                       "train_chat_samples": n_chat, "heldout_files": len(held_docs),
                       "heldout_code_files": len(held["code"]), "heldout_doc_files": len(held["docs"]),
                       "heldout_sha1": sha1("\0".join(d[0] for d in held_docs))}

    # 2. tokenizer --------------------------------------------------------------------------
    t = time.time()
    tok_dir = out / "tokenizer"
    if args.tokenizer:
        from tokenizers import Tokenizer
        tok_dir.mkdir(parents=True, exist_ok=True)
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(Path(args.tokenizer) / fn, tok_dir / fn)
        tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
        log(f"tokenizer: reused {args.tokenizer} ({tok.get_vocab_size()} tokens)")
    else:
        tok_texts, acc = [], 0
        for _, _, text, _ in train_docs:
            if acc >= args.tokenizer_mb * 1e6:
                break
            tok_texts.append(text)
            acc += len(text)
        tok = build_tokenizer(tok_texts, args.vocab, tok_dir)
    special = token_ids(tok)
    eot = special["<|endoftext|>"]
    vocab_size = (tok.get_vocab_size() + 63) // 64 * 64  # the embedding rows; equal to the vocabulary at 16384
    phases["tokenizer_s"] = round(time.time() - t, 1)

    t = time.time()
    train_ids = encode_docs(tok, train_texts, eot)
    held_ids = {k: encode_docs(tok, v, eot) for k, v in held.items()}
    code_chars = sum(len(s) for s in held["code"])
    metrics["tokenizer"] = {"vocab_size": tok.get_vocab_size(), "model_vocab_size": vocab_size,
                            "special_ids": special, "reused_from": args.tokenizer,
                            "heldout_code_chars_per_token": code_chars / max(1, len(held_ids["code"]))}
    metrics["data"]["train_tokens"] = len(train_ids)
    metrics["data"]["heldout_tokens"] = {k: len(v) for k, v in held_ids.items()}
    log(f"encoded: train {len(train_ids) / 1e6:.1f}M tokens, held-out "
        f"{ {k: len(v) for k, v in held_ids.items()} }, code chars/token "
        f"{metrics['tokenizer']['heldout_code_chars_per_token']:.2f}")
    data = torch.frombuffer(train_ids, dtype=torch.int32).to(dev)
    held_t = {k: torch.frombuffer(v, dtype=torch.int32).to(dev) for k, v in held_ids.items() if len(v) > 1}
    phases["encode_s"] = round(time.time() - t, 1)
    metrics["autotokenizer"] = check_autotokenizer(
        tok_dir, tok, [held["code"][0][:2000] if held["code"] else "x = 1", render_user_prompt(REF_USER),
                       "Ünïcödé text — with «quotes» and 中文 and emoji 🙂\r\n\tend"])

    # 3. models -----------------------------------------------------------------------------
    max_pos = 32768
    cfgs = {"target": text_config_dict(target_shape, vocab_size, special, max_pos),
            "draft": text_config_dict(draft_shape, vocab_size, special, max_pos)}
    cfgs["target"]["mtp_num_hidden_layers"] = 1
    cfgs["target"]["mtp_use_dedicated_embeddings"] = False
    models, train_info, gdn_checks, init_info = {}, {}, {}, {}
    use_chunked_gdn()
    for B in [int(b) for b in args.probe_batches.split(",")] if args.probe_batches else []:
        m = new_causal_lm(cfgs["target"], 0, dev)
        info = train_model("probe", m, data, dict(hp_t, batch=B, log_every=10**9), 12, None, 0,
                           mtp=MtpHead(m, cfgs["target"], dev), qat=None)
        log(f"probe: batch {B}: {info['tokens'] / info['seconds'] / 1e3:.0f}k tokens/s over 12 steps (incl. the first)")
        del m
    head = None
    for i, name in enumerate(("target", "draft")):
        m = new_causal_lm(cfgs[name], args.seed + 1 + i, dev)
        gdn_checks[name] = check_chunked_gdn(m, vocab_size, dev)
        total, emb = count_params(m)
        extra = ""
        if name == "target":
            head = MtpHead(m, cfgs[name], dev)
            mtp_params = sum(p.numel() for _, p in head.named_parameters())
            extra = f", MTP head {mtp_params / 1e6:.2f}M"
        init = args.init_from if name == "target" else args.draft_init_from
        if init and args.smoke:
            log(f"{name}: smoke run: not starting from {init} (other shapes)")
        elif init:
            init_info[name] = start_from(init, m, head if name == "target" else None)
        log(f"{name}: {total / 1e6:.2f}M parameters ({emb / 1e6:.2f}M embedding, tied with lm_head){extra}")
        t = time.time()
        steps = args.target_steps if name == "target" else args.draft_steps
        budget = args.target_budget if name == "target" else args.draft_budget
        resumable = dict(state_path=args.state, stop_after_s=args.stop_after) if name == "target" else {}
        train_info[name] = train_model(name, m, data, hp_t if name == "target" else hp_d, steps, budget,
                                       args.seed + 10 + i, mtp=head if name == "target" else None,
                                       qat=qat if name == "target" else None, **resumable)
        if train_info[name].get("stopped"):
            print(f"STOPPED_AT={train_info[name]['step']}", flush=True)
            return
        train_info[name]["parameters"] = total
        train_info[name]["embedding_parameters"] = emb
        if name == "target":
            train_info[name]["mtp_parameters"] = mtp_params
        phases[f"train_{name}_s"] = round(time.time() - t, 1)
        models[name] = m
    metrics["training"] = train_info
    metrics["started_from"] = init_info
    metrics["configs"] = cfgs
    metrics["chunked_gdn_checks"] = gdn_checks
    target, draft = models["target"], models["draft"]
    shipped = ShippedWeights(unique_named_params(target, head.named_parameters()), args.bits, args.group_size)

    # 4. evaluation: the target as trained (float) and as shipped (quantized), the draft, the baseline --
    t = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    baseline = None
    if args.baseline:
        baseline, _ = load_text_model(args.baseline, dev)
    T = hp_t["seq"]

    def perplexities(m):
        return {k: {"perplexity": round(p, 3), "tokens": c} for k, (p, c) in
                ((k, eval_ppl(m, ids, T, eval_windows)) for k, ids in held_t.items())}
    ppl = {"target_float": perplexities(target), "draft": perplexities(draft)}
    with shipped:
        ppl["target"] = perplexities(target)
    if baseline is not None:
        ppl["baseline"] = perplexities(baseline)
    for k, v in ppl.items():
        log(f"held-out perplexity {k}: {json.dumps(v)}")
    metrics["heldout_perplexity"] = ppl
    # The stubs are completed later by Kapitsa (eval_stubs.py): greedy decoding here, through
    # transformers' cached path, took minutes of the GPU's time.
    metrics["stubs"] = [{"function": name, "stub": stub} for stub, name in function_stubs(held["code"], args.stubs)]
    with shipped:
        if "code" in held_t:
            metrics["agreement_heldout_code"] = eval_agreement(target, draft, held_t["code"], T, eval_windows)
            metrics["mtp_heldout_code"] = eval_mtp(target, head, held_t["code"], 16 if args.smoke else 64)
            log(f"draft/target greedy agreement on held-out code: {json.dumps(metrics['agreement_heldout_code'])}")
            log(f"MTP head on held-out code: {json.dumps(metrics['mtp_heldout_code'])}")
        if "chat" in held_t:
            metrics["agreement_heldout_chat"] = eval_agreement(target, draft, held_t["chat"], T, eval_windows)
    phases["eval_s"] = round(time.time() - t, 1)

    # 5. export + reference -----------------------------------------------------------------
    t = time.time()
    refs = {}
    fp32_dir = tmp_dir / "target_fp32"
    (out / "target").mkdir(parents=True, exist_ok=True)
    with shipped:
        metrics.setdefault("export", {})["target_float32"] = export_checkpoint(
            target, cfgs["target"], special, tok_dir, fp32_dir, args.seed + 100, dtype=torch.float32)
        with TransformersGdn():
            refs["target"] = make_reference(fp32_dir, out / "target", target, render_user_prompt(REF_USER), tok,
                                            n_greedy, "target", args.seed, tmp_dir, round_bf16=False)
        mtp_reference(target, head, refs["target"]["prompt_ids"], out / "target")
    metrics["export"]["target"] = export_quantized(target, head, fp32_dir, out / "target", args.bits, args.group_size)
    d = out / "draft"
    metrics["export"]["draft"] = export_checkpoint(draft, cfgs["draft"], special, tok_dir, d, args.seed + 101)
    with TransformersGdn():
        refs["draft"] = make_reference(d, d, draft, render_user_prompt(REF_USER), tok, n_greedy, "draft", args.seed,
                                       tmp_dir, round_bf16=True)
    metrics["export"]["draft"]["files"] = {fn: os.path.getsize(d / fn) for fn in sorted(os.listdir(d))}
    metrics["reference_checks"] = {k: v["checks"] for k, v in refs.items()}
    phases["export_s"] = round(time.time() - t, 1)
    shutil.rmtree(tmp_dir, ignore_errors=True)

    phases["total_s"] = round(time.time() - T_START, 1)
    metrics["phases"] = phases
    with open(out / "metrics.json", "w") as f:
        json.dump(metrics, f, indent=1, ensure_ascii=False)
        f.write("\n")
    log(f"phases {json.dumps(phases)}")
    print(f"TOTAL_WALL_S={phases['total_s']}", flush=True)
    (out / "DONE").write_text("ok\n")


def eval_mtp(target, head, held, n_windows, Te=512):
    """How often the head's argmax is the target's own greedy choice two ahead (what speculation
    accepts), and the text's token two ahead."""
    import torch
    agree = top1 = cnt = 0
    with torch.no_grad():
        n = min(n_windows, (held.numel() - 2) // Te)
        for i in range(n):
            seq = held[i * Te:(i + 1) * Te + 2].long()[None]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                o = target.model(input_ids=seq[:, :Te + 1], use_cache=False).last_hidden_state
                tgt = target.lm_head(o).argmax(-1)                   # [1, Te+1]: the target's greedy next token
                g = head.logits(tgt[:, :Te], o[:, :Te]).argmax(-1)    # following the target's own choice
            agree += (g[:, :Te - 1] == tgt[:, 1:Te]).sum().item()
            top1 += (g[:, :Te - 1] == seq[:, 2:Te + 1]).sum().item()
            cnt += Te - 1
    return {"positions": cnt, "greedy_agreement_with_target": agree / max(1, cnt), "top1_vs_text": top1 / max(1, cnt)}


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from the repository's own data:
real configs, templates and tokenizer, plus small hand-made files. Run from the repository root after
changing a format; the seeds are committed so CI needs no Python."""
import json, os, struct

root = os.getcwd()
out = os.path.join(root, "tests/fuzz/corpus")

def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

def read(path):
    with open(os.path.join(root, path), "rb") as f:
        return f.read()

# safetensors: header length, JSON header, data (F32, BF16, U32 + metadata, an empty file's header)
def safetensors(tensors, metadata=None):
    header, blob = {}, b""
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + blob
put("safetensors", "f32", safetensors({"w": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4))}))
put("safetensors", "mixed", safetensors({"a.weight": ("BF16", [3], b"\x80\x3f" * 3),
                                         "a.scales": ("U32", [1, 2], struct.pack("<2I", 7, 9)),
                                         "b": ("F16", [0], b"")}, {"format": "mlx"}))
put("safetensors", "empty", safetensors({}))

# config: every fixture's and the demo model's config.json, and a quantized one
for name in sorted(os.listdir(os.path.join(root, "tests/fixtures"))):
    p = os.path.join("tests/fixtures", name, "config.json")
    if os.path.exists(os.path.join(root, p)):
        put("config", name, read(p))
put("config", "demo", read("models/demo/target/config.json"))
cfg = json.loads(read("models/demo/target/config.json"))
cfg["quantization"] = {"group_size": 64, "bits": 4, "model.layers.0.mlp.gate": {"group_size": 64, "bits": 8}}
put("config", "demo-quantized", json.dumps(cfg))

# tokenizer: text the encoder finds interesting (specials, code, unicode, invalid UTF-8)
samples = ["Hello, world!", "<|im_start|>user\nhi<|im_end|>\n", "def f(x):\n\treturn x ** 2  # 🙂",
           "naïve café — 東京 Ελλάδα", "\xff\xfe bad \xc3", "   \n\n\t  spaces", "<think>\n</think>\n<tool_call>"]
for i, s in enumerate(samples):
    put("tokenizer", f"s{i}", bytes([i % 4]) + s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s)

# tokenizer_json: the demo tokenizer cut to its first 300 tokens and the merges among them
t = json.loads(read("models/demo/target/tokenizer.json"))
vocab = {k: v for k, v in t["model"]["vocab"].items() if v < 300}
merges = [m for m in t["model"]["merges"] if "".join(m if isinstance(m, list) else m.split(" ")) in vocab][:200]
t["model"]["vocab"], t["model"]["merges"] = vocab, merges
for i, a in enumerate(t["added_tokens"][:4]):
    a["id"] = 300 + i
t["added_tokens"] = t["added_tokens"][:4]
put("tokenizer_json", "bpe", json.dumps(t))
t2 = dict(t, normalizer=None, pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "use_regex": True})
put("tokenizer_json", "bytelevel", json.dumps(t2))

# jinja: the real chat templates
for name in sorted(os.listdir(os.path.join(root, "tests/text/data/templates"))):
    if name.endswith(".jinja"):
        put("jinja", name, read(os.path.join("tests/text/data/templates", name)))

# output_parser: replies in each format (first byte: the parser configuration)
replies = {
    "qwen_xml": (0x05 | 0x80, "<think>plan</think>Sure.<tool_call>\n<function=edit>\n<parameter=path>\na.c\n</parameter>\n"
                               "<parameter=line>\n12\n</parameter>\n<parameter=meta>\n{\"k\": [1]}\n</parameter>\n</function>\n</tool_call>"),
    "hermes": (0x09, "<tool_call>\n{\"name\": \"edit\", \"arguments\": {\"path\": \"a\"}}\n</tool_call>"),
    "nemotron": (0x0f, "thinking</think>\n<TOOLCALL>[{\"name\": \"edit\", \"arguments\": {}}]</TOOLCALL>"),
    "plain": (0x31, "Just text with </think> and <tool_call> inside"),
}
for name, (config, text) in replies.items():
    put("output_parser", name, bytes([config]) + text.encode())

# grammar: GBNF (first byte even) and JSON schemas (odd)
put("grammar", "gbnf-short", b"\x00" + read("tests/agents/short_reply.gbnf"))
put("grammar", "gbnf-json", b"\x00" + b'root ::= obj\nobj ::= "{" ws (pair ("," ws pair)*)? "}"\n'
    b'pair ::= str ":" ws val\nval ::= str | [0-9]+ | obj | "true" | "null"\nstr ::= "\\"" [^"\\\\]* "\\""\nws ::= [ \\t\\n]*\n')
schemas = [{"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}, "a": {"type": "array", "items": {"type": "number"}}},
            "required": ["name"]},
           {"anyOf": [{"type": "integer", "minimum": -3}, {"enum": ["x", None, True]}]},
           {"type": "object", "additionalProperties": {"$ref": "#/$defs/v"}, "$defs": {"v": {"type": ["string", "boolean"]}}}]
for i, s in enumerate(schemas):
    put("grammar", f"schema{i}", b"\x01" + json.dumps(s).encode())

# http: one request per endpoint (first byte: endpoint index in the low nibble, template in the high)
tool = {"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
requests = [
    (0x00, {"model": "kapitsa", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "stream": True,
            "tools": [tool], "temperature": 0.5, "stop": ["\n\n"], "logprobs": True, "top_logprobs": 2}),
    (0x10, {"model": "kapitsa", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "x"}]}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": {"type": "object"}}}}),
    (0x01, {"model": "kapitsa", "prompt": "Once upon", "max_tokens": 5, "seed": 7}),
    (0x22, {"model": "kapitsa", "input": [{"role": "user", "content": "hi"}], "stream": True, "tools": [{"type": "function", "name": "ls", "parameters": {}}]}),
    (0x03, {"model": "kapitsa", "max_tokens": 30, "system": "s", "stream": True, "thinking": {"type": "enabled", "budget_tokens": 100},
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "ls", "input": {}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}],
            "tools": [{"name": "ls", "input_schema": {"type": "object"}}]}),
    (0x04, {"model": "kapitsa", "messages": [{"role": "user", "content": "count me"}]}),
]
for i, (b, body) in enumerate(requests):
    put("http", f"r{i}", bytes([b]) + json.dumps(body).encode())

# gguf: small GGUF v3/v2 files — every metadata value type, tensors of several block types — and one
# with a Qwen3.5 model's metadata (from the converter-made fixture) and tiny tensors under its names.
GG_U32, GG_I32, GG_F32, GG_BOOL, GG_STR, GG_ARR, GG_U64, GG_F64 = 4, 5, 6, 7, 8, 9, 10, 12
def gg_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b
def gg_value(t, v):
    if t == GG_STR: return gg_str(v)
    if t == GG_ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gg_value(et, x) for x in items)
    return struct.pack({GG_U32: "<I", GG_I32: "<i", GG_F32: "<f", GG_BOOL: "<?", GG_U64: "<Q", GG_F64: "<d"}[t], v)
def gguf(kvs, tensors, version=3, align=32):
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    head += b"".join(gg_str(k) + struct.pack("<I", t) + gg_value(t, v) for k, t, v in kvs)
    blob = b""
    for name, shape, gtype, data in tensors:  # shape as ggml writes it: innermost first
        blob += b"\0" * (-len(blob) % align)
        head += gg_str(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        head += struct.pack("<IQ", gtype, len(blob))
        blob += data
    return head + b"\0" * (-len(head) % align) + blob
q8_block = struct.pack("<e", 0.5) + bytes(range(32))
q4k_block = struct.pack("<ee", 0.25, 0.125) + bytes(range(12)) + bytes(range(128))
kinds = [("general.architecture", GG_STR, "llama"), ("general.alignment", GG_U32, 32), ("a.i32", GG_I32, -3),
         ("a.f32", GG_F32, 1.5), ("a.bool", GG_BOOL, True), ("a.u64", GG_U64, 7), ("a.f64", GG_F64, 2.5),
         ("a.strs", GG_ARR, (GG_STR, ["x", "yz"])), ("a.ints", GG_ARR, (GG_I32, [1, -2, 3]))]
blocks = [("f32", [4, 2], 0, struct.pack("<8f", *range(8))), ("q8_0", [32, 2], 8, q8_block * 2),
          ("q4_k", [256, 1], 12, q4k_block), ("bf16", [2], 30, b"\x80\x3f\x00\x40")]
put("gguf", "kinds_v3", gguf(kinds, blocks))
put("gguf", "kinds_v2", gguf(kinds[:4], blocks[:2], version=2))
put("gguf", "empty", gguf([], []))

def gguf_metadata(data):
    """(key, type, value) of a GGUF file's metadata, long arrays (the vocabulary) left out."""
    pos = 24
    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v
    def value(t):
        nonlocal pos
        if t == GG_STR:
            n = take("<Q")
            pos += n
            return data[pos - n: pos].decode()
        if t == GG_ARR:
            et, n = take("<I"), take("<Q")
            return (et, [value(et) for _ in range(n)])
        return take({0: "<B", 1: "<b", 2: "<H", 3: "<h", GG_U32: "<I", GG_I32: "<i", GG_F32: "<f", GG_BOOL: "<?",
                     GG_U64: "<Q", 11: "<q", GG_F64: "<d"}[t])
    out = []
    for _ in range(struct.unpack_from("<Q", data, 16)[0]):
        key, t = value(GG_STR), take("<I")
        v = value(t)
        writable = t in (GG_U32, GG_I32, GG_F32, GG_BOOL, GG_U64, GG_F64, GG_STR) or (
            t == GG_ARR and v[0] in (GG_U32, GG_I32, GG_F32, GG_BOOL, GG_STR) and len(v[1]) <= 64)
        if writable: out.append((key, t, v))
    return out
import lzma
model = lzma.decompress(read("tests/fixtures/gguf/qwen35-dense-tiny-Q8_0.gguf.xz"))
meta = gguf_metadata(model)
names = ["token_embd.weight", "output_norm.weight", "blk.0.attn_qkv.weight", "blk.0.attn_norm.weight",
         "blk.0.ssm_a", "blk.0.ssm_conv1d.weight", "blk.0.ffn_down.weight"]
put("gguf", "qwen35_meta", gguf(meta, [(n, [32, 2], 8, q8_block * 2) for n in names]))

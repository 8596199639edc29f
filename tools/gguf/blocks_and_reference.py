"""Second half of tools/gguf/make_test_files.sh: one matrix of each block type into OUT/blocks.gguf
(see below) and OUT/reference.json:
for every tensor of the converted fixture files and of blocks.gguf, gguf-py's numpy dequantization
summarised as count, sum, sum of squares (float64) and the values at 16 fixed indices
(k * 7919 mod count). The reference Kapitsa's GGUF reader and dequantization are tested against."""
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize

work, out = sys.argv[1], sys.argv[2]
# Q4_0 … Q8_0, MXFP4: gguf-py's own numpy quantization of a fixture matrix; K types: tensors
# llama-quantize wrote (its Q4_K_M / Q5_K_M mixes; gguf-py cannot quantize them); Q2_K, Q3_K, IQ4_NL,
# IQ4_XS: the same matrix as llama-quantize wrote it when told `--tensor-type ffn_down=TYPE`.
legacy = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.MXFP4]
k_types = [Q.Q4_K, Q.Q5_K, Q.Q6_K]
override_types = [Q.Q2_K, Q.Q3_K, Q.IQ4_NL, Q.IQ4_XS]
source = next(t for t in GGUFReader(os.path.join(work, "qwen35-dense-tiny-BF16.gguf")).tensors
              if t.name == "blk.0.ffn_down.weight")
matrix = dequantize(np.array(source.data), source.tensor_type).reshape(-1, int(source.shape[0]))
blocks = {q: (f"{q.name}.{source.name}", quantize(matrix, q)) for q in legacy}
if os.environ.get("SKIP_K") != "1":
    for f in ["Q4_K_M", "Q5_K_M"]:
        for t in GGUFReader(os.path.join(work, f"q-{f}.gguf")).tensors:
            if t.tensor_type in k_types and t.tensor_type not in blocks and len(t.shape) == 2:
                blocks[t.tensor_type] = (f"{t.tensor_type.name}.{t.name}", np.array(t.data))
    for q in override_types:
        for t in GGUFReader(os.path.join(work, f"q-{q.name.lower()}.gguf")).tensors:
            if t.name == source.name and t.tensor_type == q:
                blocks[q] = (f"{q.name}.{t.name}", np.array(t.data))
    missing = [q.name for q in k_types + override_types if q not in blocks]
    if missing:
        sys.exit(f"no tensor of type {missing} in the llama-quantize outputs")

w = GGUFWriter(os.path.join(out, "blocks.gguf"), "blocks")
for q, (name, data) in blocks.items():
    w.add_tensor(name, data, raw_dtype=q)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()


def summary(t):
    v = dequantize(np.array(t.data), t.tensor_type).astype(np.float64).reshape(-1)
    n = v.size
    idx = [(k * 7919) % n for k in range(16)]
    return {"type": t.tensor_type.name, "count": int(n), "sum": float(v.sum()), "sumsq": float((v * v).sum()),
            "index": idx, "values": [float(v[i]) for i in idx]}


ref = {}
for f in ["qwen35-dense-tiny-BF16.gguf", "qwen35-dense-tiny-Q8_0.gguf"]:
    ref[f] = {t.name: summary(t) for t in GGUFReader(os.path.join(work, f)).tensors}
ref["blocks.gguf"] = {t.name: summary(t) for t in GGUFReader(os.path.join(out, "blocks.gguf")).tensors}
with open(os.path.join(out, "reference.json"), "w") as fp:
    json.dump(ref, fp, sort_keys=True)
    fp.write("\n")

#!/usr/bin/python3
"""Checkpoint folders with a multi-token-prediction head, for llama.cpp's converter (make_test_files.sh).

  mtp_folders.py WORK   writes WORK/qwen35-dense-tiny-mtp/ and WORK/nemotron-h-tiny-mtp/: the fixture's
                        config (declaring one MTP layer) and weights, and model-mtp.safetensors.

qwen35-dense-tiny-mtp, qwen3-next-tiny-mtp: a head made of copies of the fixture's own tensors, so that
the GGUF's zstd patch against the fixture stays small (no new bytes but the converter's norm + 1):
  mtp.layers.0.*                  the trunk's first full-attention layer (3), every tensor (Qwen3-Next's
                                  MoE MLP: router, experts, shared expert and its gate)
  mtp.fc.weight [H, 2H]           that layer's self_attn.o_proj [H, heads * head_dim] (= [128, 256])
  mtp.pre_fc_norm_embedding       layer 0's input_layernorm
  mtp.pre_fc_norm_hidden          layer 1's input_layernorm
  mtp.norm                        layer 2's input_layernorm
tests/models/test_gguf_model.cpp builds the same head for its folder (folder_with_copied_head); change both.
nemotron-h-tiny-mtp: nemotron-h-tiny with the tracked random head of tests/fixtures/nemotron-h-tiny-mtp.
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "fixtures"))
from nemotron_mtp_reference import read_safetensors, write_safetensors  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def qwen_head_from_trunk(work, fixture, prefix, text_config):
    src, out = os.path.join(FIXTURES, fixture), os.path.join(work, fixture + "-mtp")
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    (cfg["text_config"] if text_config else cfg)["mtp_num_hidden_layers"] = 1
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    shutil.copy(os.path.join(src, "model.safetensors"), out)
    trunk = read_safetensors(os.path.join(src, "model.safetensors"))
    p = prefix + "layers."
    head = {"mtp.layers.0." + n[len(p + "3."):]: ("BF16", v) for n, v in trunk.items() if n.startswith(p + "3.")}
    head["mtp.fc.weight"] = ("BF16", trunk[p + "3.self_attn.o_proj.weight"])
    head["mtp.pre_fc_norm_embedding.weight"] = ("BF16", trunk[p + "0.input_layernorm.weight"])
    head["mtp.pre_fc_norm_hidden.weight"] = ("BF16", trunk[p + "1.input_layernorm.weight"])
    head["mtp.norm.weight"] = ("BF16", trunk[p + "2.input_layernorm.weight"])
    write_safetensors(os.path.join(out, "model-mtp.safetensors"), head)


def nemotron(work):
    out = os.path.join(work, "nemotron-h-tiny-mtp")
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(FIXTURES, "nemotron-h-tiny", "model.safetensors"), out)
    for f in ("config.json", "model-mtp.safetensors"):
        shutil.copy(os.path.join(FIXTURES, "nemotron-h-tiny-mtp", f), out)


if __name__ == "__main__":
    qwen_head_from_trunk(sys.argv[1], "qwen35-dense-tiny", "model.language_model.", text_config=True)
    qwen_head_from_trunk(sys.argv[1], "qwen3-next-tiny", "model.", text_config=False)
    nemotron(sys.argv[1])

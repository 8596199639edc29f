"""llama.cpp's convert_hf_to_gguf.py, unmodified, for the test checkpoints (same arguments), with one of:
  GGUF_NO_VOCAB=1     every converter class's set_vocab is a no-op: the fixtures have no tokenizer, so
                      the GGUF has the weights and hyper-parameters but no tokenizer.* keys;
  GGUF_PRE=qwen2      the pre-tokenizer name written for a tokenizer.json whose hash the converter does
                      not know (the demo model's 16k-token Qwen-style BPE uses Qwen2's split regex);
                      everything else of the vocabulary is written by the converter's own code.
Run with PYTHONPATH=<hfshim> and LLAMA_CPP_DIR set (tools/gguf/make_test_files.sh does)."""
import os
import sys

sys.path.insert(0, os.environ["LLAMA_CPP_DIR"])
import convert_hf_to_gguf  # noqa: E402
import conversion  # noqa: E402
from conversion import base  # noqa: E402


def no_vocab(self):
    pass


def patch(cls):
    for sub in cls.__subclasses__():
        if "set_vocab" in sub.__dict__:
            sub.set_vocab = no_vocab
        patch(sub)


if os.environ.get("GGUF_NO_VOCAB") == "1":
    conversion.load_all_models()  # model classes register on import: patch them all, not only those loaded yet
    base.ModelBase.set_vocab = no_vocab
    patch(base.ModelBase)
if os.environ.get("GGUF_PRE"):
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: os.environ["GGUF_PRE"]
sys.argv[0] = "convert_hf_to_gguf.py"
convert_hf_to_gguf.main()

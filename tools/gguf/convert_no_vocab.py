"""llama.cpp's convert_hf_to_gguf.py, unmodified, for a checkpoint folder without a tokenizer (the test
fixtures): every converter class's set_vocab is replaced by a no-op, so the GGUF has the weights and
hyper-parameters but no tokenizer.ggml.* keys. Same arguments as convert_hf_to_gguf.py.
Run with PYTHONPATH=<hfshim> and LLAMA_CPP_DIR set (tools/gguf/make_test_files.sh does)."""
import os
import sys

sys.path.insert(0, os.environ["LLAMA_CPP_DIR"])
import convert_hf_to_gguf  # noqa: E402
from conversion import base  # noqa: E402


def no_vocab(self):
    pass


def patch(cls):
    for sub in cls.__subclasses__():
        if "set_vocab" in sub.__dict__:
            sub.set_vocab = no_vocab
        patch(sub)


base.ModelBase.set_vocab = no_vocab
patch(base.ModelBase)
sys.argv[0] = "convert_hf_to_gguf.py"
convert_hf_to_gguf.main()

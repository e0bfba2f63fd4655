"""quantize_demo.py — the Q8_0 variant of the demo model from its F16 GGUF.

    /usr/bin/python3 tools/train/quantize_demo.py [models/demo.gguf] [models/demo-q8_0.gguf]

Reads the F16 file with qwen35.load_gguf (exact dequantisation) and writes it again with every
matrix in Q8_0 (blocks of 32 along ne0, scale = max|x| / 127, round to nearest); norms,
ssm_conv1d, ssm_a and ssm_dt.bias stay F32, and the tokenizer and chat template are copied.
Deterministic: the same input gives the same bytes.
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from make_fixture import tokenizer_from_gguf   # noqa: E402
from qwen35 import load_gguf, write_gguf       # noqa: E402


def main(argv):
    src = argv[0] if argv else "models/demo.gguf"
    dst = argv[1] if len(argv) > 1 else "models/demo-q8_0.gguf"
    torch.set_num_threads(1)
    model, g = load_gguf(src, torch.float64)
    tok = tokenizer_from_gguf(g)
    write_gguf(model, tok, dst, name=g.kv.get("general.name", "deltad-demo"),
               chat_template=g.kv.get("tokenizer.chat_template"), matrix_type="q8_0")
    print(f"wrote {dst} ({os.path.getsize(dst) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

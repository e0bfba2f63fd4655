"""make_fixture.py — golden logits of the demo model from the PyTorch implementation, for
tests/golden/test_demo.sh.

    /usr/bin/python3 tools/train/make_fixture.py [models/demo.gguf] [tests/fixtures/demo]

Loads the GGUF's tensors (F16 matrices dequantised exactly, as the engine does) into qwen35.py
in float64, runs the sequential GDN recurrence (docs §5.4) over a fixed ChatML dialogue, and
writes:

  logits.bin   little-endian, no padding:
                 magic "DDMO", u32 version 1, u32 n_tokens, u32 n_vocab,
                 64 ASCII hex chars: SHA-256 of the model file,
                 i32 tokens[n_tokens],
                 f32 trunk logits [n_tokens x n_vocab]   (row p predicts token p+1)
                 f32 MTP logits   [n_tokens x n_vocab]   (row p: token x_p, trunk hidden h_{p-1},
                                                          zeros at p = 0; MTP KV over all rows)
  prompt.txt   the dialogue text; the engine's tokenizer must produce the same ids.

It also checks the chunked GDN form against the sequential one and prints the argmaxes.
"""

import hashlib
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bpe                      # noqa: E402
from qwen35 import load_gguf    # noqa: E402

DIALOGUE = ("<|im_start|>user\nRepeat after me: the quick brown fox<|im_end|>\n"
            "<|im_start|>assistant\nthe quick brown fox<|im_end|>\n"
            "<|im_start|>user\nWhat is 47 + 38?<|im_end|>\n"
            "<|im_start|>assistant\n47 + 38 = 85<|im_end|>")


def tokenizer_from_gguf(g):
    merges = [tuple(m.split(" ")) for m in g.kv["tokenizer.ggml.merges"]]
    toks = list(g.kv["tokenizer.ggml.tokens"])
    tok = bpe.Tokenizer(merges, len(toks))
    if tok.tokens != toks:
        raise SystemExit("tokenizer in the GGUF does not match bpe.Tokenizer's layout")
    return tok


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def reference_logits(model, ids, mode="seq"):
    x = torch.tensor([ids])
    with torch.no_grad():
        h = model.trunk(x, mode)
        hm = model.mtp_hidden(x, h, mode)
        return model.head(h)[0].numpy(), model.head(hm)[0].numpy()


def main(argv):
    path = argv[0] if argv else "models/demo.gguf"
    out = argv[1] if len(argv) > 1 else "tests/fixtures/demo"
    torch.set_num_threads(1)
    model, g = load_gguf(path, torch.float64)
    tok = tokenizer_from_gguf(g)
    ids = tok.encode(DIALOGUE)
    lo, lm = reference_logits(model, ids, "seq")
    lo_c, lm_c = reference_logits(model, ids, "chunk")
    d = max(np.abs(lo - lo_c).max(), np.abs(lm - lm_c).max())
    print(f"{len(ids)} tokens; sequential vs chunked GDN: max |dlogit| {d:.3g}")
    if d > 1e-9:
        raise SystemExit("chunked and sequential GDN disagree")
    V = lo.shape[1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "logits.bin"), "wb") as f:
        f.write(b"DDMO" + struct.pack("<III", 1, len(ids), V))
        f.write(sha256(path).encode("ascii"))
        f.write(np.asarray(ids, dtype="<i4").tobytes())
        f.write(lo.astype("<f4").tobytes())
        f.write(lm.astype("<f4").tobytes())
    with open(os.path.join(out, "prompt.txt"), "w") as f:
        f.write(DIALOGUE)
    am, amm = lo.argmax(-1), lm.argmax(-1)
    print("next-token argmax:", tok.decode(am.tolist()).replace("\n", "\\n"))
    agree = (am == amm)[1:].mean()
    print(f"MTP top-1 agreement with the trunk on this dialogue: {agree:.3f}")
    print(f"wrote {out}/logits.bin, {out}/prompt.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

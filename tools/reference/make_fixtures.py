"""make_fixtures.py MODEL_DIR OUT_DIR — golden logits for the C engine from the float64 reference.

For each of tiny-qwen3.gguf, tiny-qwen35.gguf, tiny-qwen35moe.gguf, tiny-qwen3next.gguf found in
MODEL_DIR (made by `build/cpu/tools/mkmodel --tiny-all build/cpu/models`), runs model.py's
forward pass over a fixed token sequence and writes OUT_DIR/golden-<arch>.bin:

    little-endian, no padding:
    u32 magic 0x4C474444 ("DDGL"), u32 version 1, u32 n_tokens, u32 n_vocab,
    u32 flags (bit 0: MTP logits present), u64 model_fnv (FNV-1a 64 of the whole model file),
    i32 tokens[n_tokens],
    f32 logits[n_tokens * n_vocab]          (row p = trunk logits at position p),
    f32 mtp_logits[n_tokens * n_vocab]      (only with flag bit 0; row p = MTP logits for input
                                             token x_p with trunk hidden h_{p-1}, zeros at p = 0)

Token sequence: TOKENS below, 80 ids (i*37 + 11) % 264. Ids below 264 are the 256 byte tokens
and the 8 merge tokens of the tiny vocab (docs §9.2), never special tokens, so no tokenizer is
involved. 80 > 64 also makes the chunked GDN form use two chunks, one of them padded.

It also prints, per arch: the argmax sequences, the sequential-vs-chunked GDN difference, and
ablations (each branch switched off must move the logits by more than 1 %) to show the tiny
models are not degenerate. Exit status is non-zero when a check fails.
"""

import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_read import fnv1a64_file  # noqa: E402
from model import Model, GDN_ARCHS  # noqa: E402

ARCHS = ("qwen3", "qwen35", "qwen35moe", "qwen3next")
TOKENS = [(i * 37 + 11) % 264 for i in range(80)]
MAGIC, VERSION, FLAG_MTP = 0x4C474444, 1, 1
HEADER = struct.Struct("<5IQ")
MIN_EFFECT = 0.01
CHUNK_TOL = 1e-11


def write_golden(path, tokens, logits, mtp_logits, model_fnv):
    T, V = logits.shape
    flags = FLAG_MTP if mtp_logits is not None else 0
    with open(path, "wb") as f:
        f.write(HEADER.pack(MAGIC, VERSION, T, V, flags, model_fnv))
        f.write(np.asarray(tokens, dtype="<i4").tobytes())
        f.write(logits.astype("<f4").tobytes())
        if mtp_logits is not None:
            f.write(mtp_logits.astype("<f4").tobytes())


def read_golden(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, ver, T, V, flags, fnv = HEADER.unpack_from(data, 0)
    assert magic == MAGIC and ver == VERSION
    off = HEADER.size
    toks = np.frombuffer(data, "<i4", T, off)
    off += 4 * T
    lg = np.frombuffer(data, "<f4", T * V, off).reshape(T, V)
    off += 4 * T * V
    mtp = None
    if flags & FLAG_MTP:
        mtp = np.frombuffer(data, "<f4", T * V, off).reshape(T, V)
        off += 4 * T * V
    assert off == len(data), "trailing bytes"
    return toks, lg, mtp, fnv


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def ablations(arch):
    ab = ["no_rope", "no_qk_norm"]
    if arch in GDN_ARCHS:
        ab += ["no_attn_gate", "no_gdn_update", "no_decay", "no_conv_history", "swap_head_map"]
    if arch in ("qwen35moe", "qwen3next"):
        ab += ["no_routed_experts", "no_shared_expert"]
    return ab


def fmt_ids(ids):
    return " ".join(str(int(x)) for x in ids)


def do_arch(arch, path, out_dir):
    ok = True
    m = Model(path)
    print(f"== {arch}: {path}")
    print("   " + m.describe())
    logits, hidden = m.forward(TOKENS)
    mtp = m.mtp(TOKENS, hidden)
    if m.moe:
        print(f"   smallest router logit gap at the top-k boundary: {m.min_router_gap:.3g}")
    fnv = fnv1a64_file(path)
    print(f"   model fnv1a64 {fnv:016x}")
    print(f"   max |logit| {np.abs(logits).max():.6g}")
    print(f"   argmax      {fmt_ids(logits.argmax(-1))}")
    if mtp is not None:
        print(f"   max |mtp logit| {np.abs(mtp).max():.6g}")
        print(f"   mtp argmax  {fmt_ids(mtp.argmax(-1))}")
    if arch in GDN_ARCHS:
        lc, hc = Model(path, gdn="chunk").forward(TOKENS)
        d = float(np.abs(lc - logits).max())
        good = d < CHUNK_TOL
        ok &= good
        print(f"   seq vs chunked GDN: max |dlogit| {d:.3g} "
              f"(hidden {np.abs(hc - hidden).max():.3g}) {'ok' if good else 'FAIL'}")
    # causality: a prefix run must reproduce the leading rows
    lp, hp = m.forward(TOKENS[:37])
    d = float(np.abs(lp - logits[:37]).max())
    good = d < 1e-11
    ok &= good
    print(f"   prefix(37) vs full: max |dlogit| {d:.3g} {'ok' if good else 'FAIL'}")
    for ab in ablations(arch):
        la, _ = Model(path, **{ab: True}).forward(TOKENS)
        e = rel(la, logits)
        good = e > MIN_EFFECT
        ok &= good
        print(f"   ablation {ab:<18} rel change {e:.3g} {'ok' if good else 'FAIL (degenerate)'}")
    if mtp is not None:
        mz = Model(path, mtp_zero_hidden=True)
        ma = mz.mtp(TOKENS, hidden)
        e = rel(ma, mtp)
        good = e > MIN_EFFECT
        ok &= good
        print(f"   ablation {'mtp_zero_hidden':<18} rel change (mtp) {e:.3g} "
              f"{'ok' if good else 'FAIL (degenerate)'}")
    out = os.path.join(out_dir, f"golden-{arch}.bin")
    write_golden(out, TOKENS, logits, mtp, fnv)
    toks, lg, mt, f2 = read_golden(out)
    assert list(toks) == TOKENS and f2 == fnv
    assert np.array_equal(lg, logits.astype(np.float32))
    assert (mt is None) == (mtp is None)
    print(f"   wrote {out} ({os.path.getsize(out)} bytes)")
    return ok


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    model_dir, out_dir = argv
    os.makedirs(out_dir, exist_ok=True)
    ok, n = True, 0
    for arch in ARCHS:
        path = os.path.join(model_dir, f"tiny-{arch}.gguf")
        if not os.path.exists(path):
            print(f"== {arch}: {path} not found, skipped")
            continue
        n += 1
        ok &= do_arch(arch, path, out_dir)
    if n == 0:
        print("no models found")
        return 1
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

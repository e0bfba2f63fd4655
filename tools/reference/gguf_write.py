"""gguf_write.py — a small GGUF v3 writer plus the tiny test models of docs/models.md §9.

Only used to self-test the reference implementation (and the reader) without the C generator
`mkmodel`; the golden fixtures are always computed from mkmodel's files.

    python3 gguf_write.py OUT_DIR [--seed N] [--qtype f32|f16|bf16|q8_0]

writes OUT_DIR/tiny-{qwen3,qwen35,qwen35moe,qwen3next}.gguf. With --qtype, 2-D and 3-D
matrices other than the always-F32 ones (docs §4.9) are stored in that type (for reader tests).
"""

import struct

import numpy as np

from gguf_read import (T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY,
                       T_U64, T_I64, T_F64, GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0, QK8_0)

_SCALAR = {
    T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
    T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d",
}


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v, etype=None):
    if vtype in _SCALAR:
        return struct.pack(_SCALAR[vtype], v)
    if vtype == T_STRING:
        return _str(v)
    if vtype == T_ARRAY:
        out = struct.pack("<IQ", etype, len(v))
        return out + b"".join(_value(etype, e) for e in v)
    raise ValueError(vtype)


def encode_tensor(a, ggml_type):
    """NumPy array (any float) -> bytes of the given ggml type, blocks along the last axis."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if ggml_type == GGML_F32:
        return a.astype("<f4").tobytes()
    if ggml_type == GGML_F16:
        return a.astype("<f2").tobytes()
    if ggml_type == GGML_BF16:
        u = a.view(np.uint32).astype(np.uint64)
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
        return u.astype("<u2").tobytes()
    if ggml_type == GGML_Q8_0:
        blk = a.reshape(-1, QK8_0)
        amax = np.abs(blk).max(axis=1)
        d = (amax / 127.0).astype(np.float32)
        inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0).astype(np.float32)
        q = np.clip(np.rint(blk * inv[:, None]), -127, 127).astype(np.int8)
        out = np.empty((blk.shape[0], 2 + QK8_0), dtype=np.uint8)
        out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
        out[:, 2:] = q.view(np.uint8)
        return out.tobytes()
    raise ValueError(ggml_type)


class GGUFWriter:
    def __init__(self, arch=None, alignment=32):
        self.kvs = []       # (key, vtype, value, etype)
        self.tensors = []   # (name, ne, ggml_type, bytes)
        self.alignment = alignment
        if arch is not None:
            self.add("general.architecture", T_STRING, arch)
        if alignment != 32:
            self.add("general.alignment", T_U32, alignment)

    def add(self, key, vtype, value, etype=None):
        self.kvs.append((key, vtype, value, etype))

    def add_array(self, key, etype, values):
        self.add(key, T_ARRAY, list(values), etype)

    def add_tensor(self, name, arr, ggml_type=GGML_F32):
        arr = np.asarray(arr)
        ne = list(reversed(arr.shape))
        self.tensors.append((name, ne, ggml_type, encode_tensor(arr, ggml_type)))

    def write(self, path):
        a = self.alignment
        head = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kvs))
        for key, vtype, value, etype in self.kvs:
            head += _str(key) + struct.pack("<I", vtype) + _value(vtype, value, etype)
        off = 0
        offsets = []
        for name, ne, t, data in self.tensors:
            offsets.append(off)
            off = (off + len(data) + a - 1) // a * a
        for (name, ne, t, data), o in zip(self.tensors, offsets):
            head += _str(name) + struct.pack("<I", len(ne))
            head += b"".join(struct.pack("<Q", d) for d in ne)
            head += struct.pack("<IQ", t, o)
        pad = (-len(head)) % a
        with open(path, "wb") as f:
            f.write(head + b"\0" * pad)
            for (name, ne, t, data), o in zip(self.tensors, offsets):
                f.write(data)
                f.write(b"\0" * ((-len(data)) % a))


# ---------------------------------------------------------------------------------------------
# Tiny models (docs §9)

def gpt2_byte_chars():
    """The GPT-2 byte-to-unicode table: printable Latin-1 bytes map to themselves, the others to
    U+0100 + n in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return [table[b] for b in range(256)]


MERGES = ["Ġ t", "h e", "Ġt he", "i n", "e r", "Ġ a", "o n", "Ġ s"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
N_VOCAB = 272
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def add_tokenizer(w, pre):
    toks = gpt2_byte_chars() + [m.replace(" ", "") for m in MERGES] + SPECIALS
    toks += [f"[PAD{i}]" for i in range(len(toks), N_VOCAB)]
    types = [1] * 264 + [3] * len(SPECIALS) + [5] * (N_VOCAB - 264 - len(SPECIALS))
    w.add("tokenizer.ggml.model", T_STRING, "gpt2")
    w.add("tokenizer.ggml.pre", T_STRING, pre)
    w.add_array("tokenizer.ggml.tokens", T_STRING, toks)
    w.add_array("tokenizer.ggml.token_type", T_I32, types)
    w.add_array("tokenizer.ggml.merges", T_STRING, MERGES)
    w.add("tokenizer.ggml.bos_token_id", T_U32, 264)
    w.add("tokenizer.ggml.eos_token_id", T_U32, 266)
    w.add("tokenizer.ggml.padding_token_id", T_U32, 264)
    w.add("tokenizer.ggml.add_bos_token", T_BOOL, False)
    w.add("tokenizer.chat_template", T_STRING, CHATML)


ALWAYS_F32 = ("ssm_conv1d", "ffn_gate_inp", "ssm_a", "ssm_dt")


def make_tiny(arch, seed=1234, qtype=GGML_F32):
    rng = np.random.default_rng(seed)
    w = GGUFWriter(arch)
    w.add("general.name", T_STRING, f"tiny-{arch}")
    w.add("general.file_type", T_U32, 0)
    E, V = 128, N_VOCAB

    def norm(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    def mat(n_out, n_in, *lead):
        return rng.standard_normal((*lead, n_out, n_in)) / np.sqrt(n_in)

    def put(name, arr):
        t = GGML_F32
        if arr.ndim >= 2 and not any(s in name for s in ALWAYS_F32):
            t = qtype
        w.add_tensor(name, arr, t)

    p = arch + "."
    if arch == "qwen3":
        H, Hkv, D, n_ff, L = 4, 2, 32, 256, 2
        for k, v in [("context_length", 2048), ("embedding_length", E), ("block_count", L),
                     ("feed_forward_length", n_ff), ("attention.head_count", H),
                     ("attention.head_count_kv", Hkv), ("attention.key_length", D),
                     ("attention.value_length", D), ("rope.dimension_count", D)]:
            w.add(p + k, T_U32, v)
        w.add(p + "rope.freq_base", T_F32, 1e6)
        w.add(p + "attention.layer_norm_rms_epsilon", T_F32, 1e-6)
        add_tokenizer(w, "qwen2")
        put("token_embd.weight", rng.standard_normal((V, E)))
        put("output_norm.weight", norm(E))
        for i in range(L):
            b = f"blk.{i}."
            put(b + "attn_norm.weight", norm(E))
            put(b + "attn_q.weight", mat(H * D, E))
            put(b + "attn_k.weight", mat(Hkv * D, E))
            put(b + "attn_v.weight", mat(Hkv * D, E))
            put(b + "attn_output.weight", mat(E, H * D))
            put(b + "attn_q_norm.weight", norm(D))
            put(b + "attn_k_norm.weight", norm(D))
            put(b + "ffn_norm.weight", norm(E))
            put(b + "ffn_gate.weight", mat(n_ff, E))
            put(b + "ffn_up.weight", mat(n_ff, E))
            put(b + "ffn_down.weight", mat(E, n_ff))
        return w

    H, Hkv, D, R = 4, 2, 64, 16
    S, Hk, Hv, K = 32, 2, 4, 4
    C = 2 * Hk * S + Hv * S
    n_ff, Nx, k, n_exp, n_sh = 256, 8, 2, 64, 128
    n_layer, n_all = 4, 5
    moe = arch in ("qwen35moe", "qwen3next")
    for key, v in [("context_length", 2048), ("embedding_length", E), ("block_count", n_all),
                   ("nextn_predict_layers", 1), ("feed_forward_length", n_ff),
                   ("attention.head_count", H), ("attention.head_count_kv", Hkv),
                   ("attention.key_length", D), ("attention.value_length", D),
                   ("rope.dimension_count", R), ("full_attention_interval", 4),
                   ("ssm.conv_kernel", K), ("ssm.state_size", S), ("ssm.group_count", Hk),
                   ("ssm.time_step_rank", Hv), ("ssm.inner_size", Hv * S)]:
        w.add(p + key, T_U32, v)
    w.add(p + "rope.freq_base", T_F32, 1e7)
    w.add(p + "attention.layer_norm_rms_epsilon", T_F32, 1e-6)
    if arch != "qwen3next":
        w.add_array(p + "rope.dimension_sections", T_I32, [3, 3, 2, 0])
    if moe:
        for key, v in [("expert_count", Nx), ("expert_used_count", k),
                       ("expert_feed_forward_length", n_exp),
                       ("expert_shared_feed_forward_length", n_sh)]:
            w.add(p + key, T_U32, v)
    add_tokenizer(w, "qwen2" if arch == "qwen3next" else "qwen35")
    put("token_embd.weight", rng.standard_normal((V, E)))
    put("output_norm.weight", norm(E))
    put("output.weight", mat(V, E))
    for i in range(n_all):
        b = f"blk.{i}."
        put(b + "attn_norm.weight", norm(E))
        put(b + "post_attention_norm.weight", norm(E))
        if i < n_layer and (i + 1) % 4 != 0:
            put(b + "attn_qkv.weight", mat(C, E))
            put(b + "attn_gate.weight", mat(Hv * S, E))
            put(b + "ssm_conv1d.weight", 0.5 * rng.standard_normal((C, K)))
            put(b + "ssm_dt.bias", 0.5 * rng.standard_normal(Hv))
            put(b + "ssm_a", -rng.uniform(1, 16, Hv))
            if arch == "qwen3next":
                put(b + "ssm_ba.weight", mat(2 * Hv, E))
            else:
                put(b + "ssm_beta.weight", mat(Hv, E))
                put(b + "ssm_alpha.weight", mat(Hv, E))
            put(b + "ssm_norm.weight", norm(S))
            put(b + "ssm_out.weight", mat(E, Hv * S))
        else:
            put(b + "attn_q.weight", mat(2 * H * D, E))
            put(b + "attn_k.weight", mat(Hkv * D, E))
            put(b + "attn_v.weight", mat(Hkv * D, E))
            put(b + "attn_output.weight", mat(E, H * D))
            put(b + "attn_q_norm.weight", norm(D))
            put(b + "attn_k_norm.weight", norm(D))
        if moe:
            put(b + "ffn_gate_inp.weight", mat(Nx, E))
            put(b + "ffn_gate_exps.weight", mat(n_exp, E, Nx))
            put(b + "ffn_up_exps.weight", mat(n_exp, E, Nx))
            put(b + "ffn_down_exps.weight", mat(E, n_exp, Nx))
            put(b + "ffn_gate_inp_shexp.weight", rng.standard_normal(E) / np.sqrt(E))
            put(b + "ffn_gate_shexp.weight", mat(n_sh, E))
            put(b + "ffn_up_shexp.weight", mat(n_sh, E))
            put(b + "ffn_down_shexp.weight", mat(E, n_sh))
        else:
            put(b + "ffn_gate.weight", mat(n_ff, E))
            put(b + "ffn_up.weight", mat(n_ff, E))
            put(b + "ffn_down.weight", mat(E, n_ff))
        if i == n_layer:
            put(b + "nextn.eh_proj.weight", mat(E, 2 * E))
            put(b + "nextn.enorm.weight", norm(E))
            put(b + "nextn.hnorm.weight", norm(E))
            put(b + "nextn.shared_head_norm.weight", norm(E))
    return w


ARCHS = ("qwen3", "qwen35", "qwen35moe", "qwen3next")
QTYPES = {"f32": GGML_F32, "f16": GGML_F16, "bf16": GGML_BF16, "q8_0": GGML_Q8_0}

if __name__ == "__main__":
    import argparse
    import os
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--qtype", default="f32", choices=sorted(QTYPES))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for a in ARCHS:
        path = os.path.join(args.out_dir, f"tiny-{a}.gguf")
        make_tiny(a, args.seed, QTYPES[args.qtype]).write(path)
        print(path)

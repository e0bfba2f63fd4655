"""selftest.py [MODEL_DIR] — self-checks of the reference (no C engine involved).

1. GGUF reader round trip for F32 / F16 / BF16 / Q8_0 through gguf_write.py, with Q8_0 also
   checked against a per-block decode written out longhand.
2. Gated delta rule: sequential (§5.4) vs closed form M <- e^g (I - b k k^T) M + b k v^T vs
   chunked (§6), random inputs, T = 150 (three chunks, the last one padded).
3. On the tiny models (MODEL_DIR, or fresh ones from gguf_write.py): sequential vs chunked
   logits, legacy qwen3next `ssm_in` == split attn_qkv/attn_gate (bit-identical per docs §9.4),
   fused ffn_gate_up_exps == split gate/up experts, and a Q8_0 copy of the model giving close
   logits.
"""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_read import GGUFFile, GGUFArray, T_ARRAY, GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0  # noqa: E402
from gguf_write import GGUFWriter, make_tiny, ARCHS  # noqa: E402
from model import Model, gdn_sequential, gdn_chunked  # noqa: E402

TOKENS = [(i * 37 + 11) % 264 for i in range(80)]
failures = []


def check(name, cond, detail=""):
    print(f"{'ok  ' if cond else 'FAIL'} {name} {detail}")
    if not cond:
        failures.append(name)


def test_reader(tmp):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 5, 64)).astype(np.float32)
    w = GGUFWriter("test", alignment=64)
    w.add_array("test.arr", 5, [1, -2, 3])
    w.add_array("test.nested", T_ARRAY, [])
    for t in (GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0):
        w.add_tensor(f"t{t}", a, t)
    p = os.path.join(tmp, "rt.gguf")
    w.write(p)
    g = GGUFFile(p)
    check("reader: alignment/keys", g.alignment == 64 and g.kv["test.arr"] == [1, -2, 3]
          and g.data_offset % 64 == 0)
    check("reader: ne order", g.tensors["t0"].ne == (64, 5, 3) and g.tensor("t0").shape == a.shape)
    check("reader: F32 exact", np.array_equal(g.tensor("t0"), a))
    check("reader: F16", np.array_equal(g.tensor("t1"), a.astype(np.float16).astype(np.float64)))
    b = g.tensor("t30")
    check("reader: BF16", np.abs(b - a).max() <= np.abs(a).max() * 2 ** -8)
    q = g.tensor("t8")
    # longhand Q8_0 decode: every 34-byte block = f16 d + 32 int8
    raw = bytes(g.raw("t8"))
    ref = []
    for off in range(0, len(raw), 34):
        d = float(np.frombuffer(raw[off:off + 2], "<f2")[0])
        ref += [d * x for x in np.frombuffer(raw[off + 2:off + 34], np.int8)]
    ref = np.array(ref).reshape(a.shape)
    check("reader: Q8_0 vs longhand", np.array_equal(q, ref))
    blk = np.abs(a.reshape(-1, 32)).max(axis=1) / 127
    err = np.abs(q - a).reshape(-1, 32).max(axis=1)
    # d itself is rounded to f16: allow 127 * |d - f16(d)| on top of d/2
    d16 = blk.astype(np.float16).astype(np.float64)
    check("reader: Q8_0 error bound", np.all(err <= blk * 0.5 + 127 * np.abs(d16 - blk) + 1e-12))
    g.close()


def test_gdn():
    rng = np.random.default_rng(3)
    T, Hv, S = 150, 3, 32
    q = rng.standard_normal((T, Hv, S))
    k = rng.standard_normal((T, Hv, S))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((T, Hv, S))
    g = -rng.uniform(0, 2, (T, Hv))
    beta = rng.uniform(0, 1, (T, Hv))
    o1 = gdn_sequential(q, k, v, g, beta)
    # closed form, longhand per head
    o2 = np.zeros_like(o1)
    for h in range(Hv):
        M = np.zeros((S, S))
        for t in range(T):
            kk = k[t, h][:, None]
            M = np.exp(g[t, h]) * (np.eye(S) - beta[t, h] * kk @ kk.T) @ M + \
                beta[t, h] * kk @ v[t, h][None, :]
            o2[t, h] = M.T @ q[t, h] / np.sqrt(S)
    o3 = gdn_chunked(q, k, v, g, beta)
    d12, d13 = np.abs(o1 - o2).max(), np.abs(o1 - o3).max()
    check("gdn: sequential vs closed form", d12 < 1e-13, f"{d12:.3g}")
    check("gdn: sequential vs chunked", d13 < 1e-13, f"{d13:.3g}")


def copy_model(src, dst, edit):
    """Rewrite a GGUF with edit(name, array) -> list of (name, array) per tensor."""
    g = GGUFFile(src)
    w = GGUFWriter(None)
    for key, val in g.kv.items():
        if isinstance(val, GGUFArray):
            w.add_array(key, val.etype, list(val))
        else:
            w.add(key, g.kv_type[key], val)
    for name in g.tensors:
        for n2, arr, t in edit(name, g.tensor(name), g.tensors[name].type):
            w.add_tensor(n2, arr, t)
    w.write(dst)


def test_models(model_dir, tmp):
    for arch in ARCHS:
        path = os.path.join(model_dir, f"tiny-{arch}.gguf")
        if not os.path.exists(path):
            continue
        m = Model(path)
        lg, h = m.forward(TOKENS)
        if arch != "qwen3":
            lc, _ = Model(path, gdn="chunk").forward(TOKENS)
            d = np.abs(lg - lc).max()
            check(f"{arch}: seq vs chunked logits", d < 1e-11, f"{d:.3g}")
        if arch == "qwen3next":
            S, Hk, r = m.S, m.Hk, m.r
            store = {}

            def to_ssm_in(name, arr, t):
                if name.endswith("attn_qkv.weight") or name.endswith("attn_gate.weight"):
                    store[name] = arr
                    blk = name.rsplit(".", 2)[0]
                    if blk + ".attn_qkv.weight" in store and blk + ".attn_gate.weight" in store:
                        qkv = store[blk + ".attn_qkv.weight"]
                        z = store[blk + ".attn_gate.weight"]
                        E = qkv.shape[1]
                        qq = qkv[:Hk * S].reshape(Hk, S, E)
                        kk = qkv[Hk * S:2 * Hk * S].reshape(Hk, S, E)
                        vv = qkv[2 * Hk * S:].reshape(Hk, r * S, E)
                        zz = z.reshape(Hk, r * S, E)
                        w = np.concatenate([qq, kk, vv, zz], axis=1).reshape(-1, E)
                        return [(blk + ".ssm_in.weight", w, t)]
                    return []
                return [(name, arr, t)]
            p2 = os.path.join(tmp, "legacy.gguf")
            copy_model(path, p2, to_ssm_in)
            l2, _ = Model(p2).forward(TOKENS)
            check(f"{arch}: legacy ssm_in bit-identical", np.array_equal(l2, lg),
                  f"{np.abs(l2 - lg).max():.3g}")
        if arch in ("qwen35moe", "qwen3next"):
            store = {}

            def fuse(name, arr, t):
                if name.endswith("ffn_gate_exps.weight") or name.endswith("ffn_up_exps.weight"):
                    store[name] = arr
                    blk = name.rsplit(".", 2)[0]
                    gk, uk = blk + ".ffn_gate_exps.weight", blk + ".ffn_up_exps.weight"
                    if gk in store and uk in store:
                        w = np.concatenate([store[gk], store[uk]], axis=1)
                        return [(blk + ".ffn_gate_up_exps.weight", w, t)]
                    return []
                return [(name, arr, t)]
            p3 = os.path.join(tmp, "fused.gguf")
            copy_model(path, p3, fuse)
            l3, _ = Model(p3).forward(TOKENS)
            check(f"{arch}: fused gate_up experts identical", np.array_equal(l3, lg))

        # quantised copies: only a smoke test of the reader on whole models. MoE routing
        # flips make the tiny random models sensitive, so the bounds are loose.
        for qt, lim in ((GGML_F16, 0.05), (GGML_BF16, 0.25), (GGML_Q8_0, 0.25)):
            def quant(name, arr, t):
                big = arr.ndim >= 2 and not any(s in name for s in
                                                ("ssm_conv1d", "ffn_gate_inp", "token_embd"))
                return [(name, arr, qt if big else t)]
            p4 = os.path.join(tmp, "q.gguf")
            copy_model(path, p4, quant)
            l4, _ = Model(p4).forward(TOKENS)
            e = np.linalg.norm(l4 - lg) / np.linalg.norm(lg)
            agree = np.mean(l4.argmax(-1) == lg.argmax(-1))
            check(f"{arch}: type {qt} copy close", e < lim and agree > 0.8,
                  f"rel {e:.3g}, argmax agree {agree:.2f}")


def main(argv):
    with tempfile.TemporaryDirectory() as tmp:
        test_reader(tmp)
        test_gdn()
        model_dir = argv[0] if argv else None
        if model_dir is None:
            model_dir = os.path.join(tmp, "models")
            os.makedirs(model_dir)
            for a in ARCHS:
                make_tiny(a).write(os.path.join(model_dir, f"tiny-{a}.gguf"))
        test_models(model_dir, tmp)
    print("selftest:", "all ok" if not failures else f"{len(failures)} FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""model.py — float64 NumPy reference forward pass for qwen3, qwen35, qwen35moe and qwen3next.

Written from docs/models.md (§2 keys, §4 tensors, §5 forward, §6 chunked gated delta rule,
§5.8 MTP head) only, independently of the C engine. Everything is computed in float64 over a
whole token sequence of one sequence starting at position 0 (prefill == the token-by-token
decode in exact arithmetic: the GDN recurrence is run token by token, attention uses a causal
mask).

    m = Model("tiny-qwen35moe.gguf")            # options: see Model.OPTIONS
    logits, hidden = m.forward(tokens)          # [T, V], [T, E] (hidden = post output_norm)
    mtp_logits = m.mtp(tokens, hidden)          # [T, V]; row p uses x_p and hidden[p-1]

Command line: python3 model.py MODEL.gguf [TOKEN ...] prints argmaxes and the
sequential-vs-chunked GDN check.
"""

import sys

import numpy as np

from gguf_read import GGUFFile, GGUFArray, INT_TYPES, T_F32, T_F64, T_STRING

ARCHS = ("qwen3", "qwen35", "qwen35moe", "qwen3next")
GDN_ARCHS = ("qwen35", "qwen35moe", "qwen3next")
CHUNK = 64          # docs §6: chunk length for the scalar-gate gated delta rule
ROUTER_EPS = 6.1e-5  # docs §5.6: renormalisation floor of the top-k weights


class ModelError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# elementwise helpers (float64)

def rmsnorm(u, w, eps):
    """RMSNorm over the last axis: u / sqrt(mean(u^2) + eps) * w."""
    return u / np.sqrt(np.mean(u * u, axis=-1, keepdims=True) + eps) * w


def sigmoid(u):
    return 1.0 / (1.0 + np.exp(-u))


def silu(u):
    return u * sigmoid(u)


def softplus(u):
    # ggml returns u itself above 20 (docs §5.1)
    return np.where(u > 20.0, u, np.log1p(np.exp(np.minimum(u, 20.0))))


def l2norm(u, eps):
    """u / max(||u||_2, eps) over the last axis (llama.cpp's form, docs §5.4 step 6)."""
    return u / np.maximum(np.sqrt(np.sum(u * u, axis=-1, keepdims=True)), eps)


def rope_neox(x, pos, n_rot, base):
    """Partial NEOX RoPE on the first n_rot dims of the last axis of x [T, heads, D].
    Pair (n, n + n_rot/2), angle pos * base^(-2n/n_rot). Dims n_rot.. are unchanged."""
    half = n_rot // 2
    n = np.arange(half, dtype=np.float64)
    inv = base ** (-2.0 * n / n_rot)
    th = pos[:, None].astype(np.float64) * inv[None, :]       # [T, half]
    c, s = np.cos(th)[:, None, :], np.sin(th)[:, None, :]
    out = x.copy()
    a, b = x[..., :half], x[..., half:n_rot]
    out[..., :half] = a * c - b * s
    out[..., half:n_rot] = a * s + b * c
    return out


# ---------------------------------------------------------------------------------------------
# gated delta rule, two independent forms

def gdn_sequential(q, k, v, g, beta, opts=None):
    """Docs §5.4 step 7, token by token. q, k, v [T, Hv, S] (q, k L2-normalised and already
    mapped to value heads; q NOT yet scaled), g, beta [T, Hv]. Returns o [T, Hv, S].
    State M[h] is [key i][value j]."""
    opts = opts or {}
    T, Hv, S = v.shape
    M = np.zeros((Hv, S, S))
    o = np.empty_like(v)
    scale = 1.0 / np.sqrt(S)
    for t in range(T):
        M *= np.exp(g[t])[:, None, None]                              # decay first
        read = np.einsum("hij,hi->hj", M, k[t])                        # M^T k
        delta = beta[t][:, None] * (v[t] - read)                       # [Hv, S]
        if not opts.get("no_gdn_update"):
            M += k[t][:, :, None] * delta[:, None, :]                  # rank-1 update
        o[t] = np.einsum("hij,hi->hj", M, q[t]) * scale                # read updated state
    return o


def gdn_chunked(q, k, v, g, beta, L=CHUNK):
    """Docs §6: chunked form, chunk length L, zero-step padding. Same inputs as
    gdn_sequential. Returns o [T, Hv, S]."""
    T, Hv, S = v.shape
    Tp = (T + L - 1) // L * L
    pad = Tp - T

    def padded(a):
        return np.concatenate([a, np.zeros((pad,) + a.shape[1:])], axis=0)

    q, k, v, g, beta = (padded(a) for a in (q / np.sqrt(S), k, v, g, beta))
    o = np.zeros((Tp, Hv, S))
    lower_incl = np.tril(np.ones((L, L), dtype=bool))
    eye = np.eye(L)
    for h in range(Hv):
        M = np.zeros((S, S))
        for c0 in range(0, Tp, L):
            sl = slice(c0, c0 + L)
            Q, K, V, gg, b = q[sl, h], k[sl, h], v[sl, h], g[sl, h], beta[sl, h]
            gam = np.cumsum(gg)
            Gam = np.exp(gam)
            diff = gam[:, None] - gam[None, :]
            Dm = np.where(lower_incl, np.exp(np.where(lower_incl, diff, 0.0)), 0.0)
            A = np.tril(b[:, None] * (K @ K.T) * Dm, -1)
            # P = (I + A)^-1 by forward substitution: P[i] = e_i - sum_{j<i} A[i,j] P[j]
            P = np.zeros((L, L))
            for i in range(L):
                P[i] = eye[i] - A[i, :i] @ P[:i]
            W = P @ (b[:, None] * V)
            Kc = P @ ((b * Gam)[:, None] * K)
            U = W - Kc @ M
            o[sl, h] = Gam[:, None] * (Q @ M) + (np.where(lower_incl, Q @ K.T, 0.0) * Dm) @ U
            M = Gam[-1] * M + (np.exp(gam[-1] - gam)[:, None] * K).T @ U
    return o[:T]


# ---------------------------------------------------------------------------------------------

class Model:
    """Options (all off by default; the non-default ones are ablations for sanity checks):
        gdn               "seq" (default) or "chunk"
        no_gdn_update     drop the rank-1 state update (state stays zero)
        no_decay          g = 0
        no_conv_history   only the current-token conv tap
        swap_head_map     use the other arch family's value->key head mapping
        no_attn_gate      sigmoid(gate) -> 1 in gated attention
        no_rope, no_qk_norm
        no_shared_expert, no_routed_experts
        mtp_zero_hidden   feed zeros instead of h_{p-1} to the MTP head
    """
    OPTIONS = ("gdn", "no_gdn_update", "no_decay", "no_conv_history", "swap_head_map",
               "no_attn_gate", "no_rope", "no_qk_norm", "no_shared_expert",
               "no_routed_experts", "mtp_zero_hidden")

    def __init__(self, path, **opts):
        for o in opts:
            if o not in self.OPTIONS:
                raise ValueError(f"unknown option {o}")
        self.opts = opts
        self.path = path
        self.min_router_gap = np.inf  # smallest router-logit gap at the top-k boundary seen
        self.g = GGUFFile(path)
        self._used = set()
        self.arch = self._str("general.architecture", required=True)
        if self.arch not in ARCHS:
            raise ModelError(f"unsupported architecture {self.arch!r}")
        self._load_hparams()
        self._load_weights()
        extra = sorted(set(self.g.tensors) - self._used)
        if extra:
            raise ModelError(f"wrong number of tensors: unused {extra[:5]} ({len(extra)})")

    # -- metadata -----------------------------------------------------------------------------
    def _raw(self, key, required, default):
        if key not in self.g.kv:
            if required:
                raise ModelError(f"missing key {key}")
            return None
        return self.g.kv[key]

    def _str(self, key, required=False, default=None):
        v = self._raw(key, required, default)
        if v is None:
            return default
        if self.g.kv_type[key] != T_STRING:
            raise ModelError(f"key {key} has wrong type")
        return v

    def _int(self, key, required=False, default=None, per_layer=False):
        """Integer key; arrays (i32/u32) allowed only where per_layer is set."""
        v = self._raw(key, required, default)
        if v is None:
            return default
        t = self.g.kv_type[key]
        if isinstance(v, GGUFArray):
            if not per_layer or v.etype not in INT_TYPES:
                raise ModelError(f"key {key} has wrong type")
            return [int(x) for x in v]
        if t not in INT_TYPES:
            raise ModelError(f"key {key} has wrong type")
        return int(v)

    def _float(self, key, required=False, default=None):
        v = self._raw(key, required, default)
        if v is None:
            return default
        if self.g.kv_type[key] not in (T_F32, T_F64):
            raise ModelError(f"key {key} has wrong type")
        return float(v)

    def _load_hparams(self):
        a = self.arch + "."
        self.E = self._int(a + "embedding_length", required=True)
        self.n_ctx_train = self._int(a + "context_length", required=True)
        self.n_layer_all = self._int(a + "block_count", required=True)
        self.n_nextn = self._int(a + "nextn_predict_layers", default=0)
        self.n_layer = self.n_layer_all - self.n_nextn
        if self.n_nextn not in (0, 1):
            raise ModelError("nextn_predict_layers must be 0 or 1")
        self.eps = self._float(a + "attention.layer_norm_rms_epsilon", required=True)
        self.n_head = self._int(a + "attention.head_count", required=True, per_layer=True)
        self.n_head_kv = self._int(a + "attention.head_count_kv", default=None, per_layer=True)
        if self.n_head_kv is None:
            self.n_head_kv = self.n_head
        self.n_ff = self._int(a + "feed_forward_length", required=(self.arch in ("qwen3",)),
                              default=0, per_layer=True)
        h0 = self.n_head[0] if isinstance(self.n_head, list) else self.n_head
        self.D = self._int(a + "attention.key_length", default=self.E // h0)
        Dv = self._int(a + "attention.value_length", default=self.E // h0)
        if Dv != self.D:
            raise ModelError("key_length must equal value_length")
        self.n_rot = self._int(a + "rope.dimension_count", default=self.D)
        self.rope_base = self._float(a + "rope.freq_base", default=10000.0)
        st = self._str(a + "rope.scaling.type", default="none")
        if st not in ("none",):
            raise ModelError(f"rope scaling {st!r} not supported by the reference")
        sc = self._float(a + "attention.scale", default=0.0)
        self.attn_scale = sc if sc != 0.0 else 1.0 / np.sqrt(self.D)
        if self.n_rot % 2 or self.n_rot > self.D:
            raise ModelError("bad rope.dimension_count")
        if self.arch in ("qwen35", "qwen35moe"):
            sec = self._int(a + "rope.dimension_sections", required=True, per_layer=True)
            if not isinstance(sec, list) or len(sec) != 4:
                raise ModelError("rope.dimension_sections must be an array of 4")
            self.rope_sections = sec
            # IMROPE: for text positions (p, p, p, 0) every pair uses p; identical to NEOX.
        if self.arch in GDN_ARCHS:
            self.interval = self._int(a + "full_attention_interval", default=4)
            self.K = self._int(a + "ssm.conv_kernel", required=True)
            self.S = self._int(a + "ssm.state_size", required=True)
            self.Hk = self._int(a + "ssm.group_count", required=True)
            self.Hv = self._int(a + "ssm.time_step_rank", required=True)
            inner = self._int(a + "ssm.inner_size", required=True)
            if inner != self.Hv * self.S or self.Hv % self.Hk:
                raise ModelError("inconsistent ssm sizes")
            self.r = self.Hv // self.Hk
            self.C = 2 * self.Hk * self.S + self.Hv * self.S
            rl = self._raw(a + "attention.recurrent_layers", False, None)
            if rl is not None:
                self.recr = [bool(x) and i < self.n_layer for i, x in enumerate(rl)]
            else:
                self.recr = [i < self.n_layer and (i + 1) % self.interval != 0
                             for i in range(self.n_layer_all)]
        else:
            self.recr = [False] * self.n_layer_all
        self.moe = self.arch in ("qwen35moe", "qwen3next")
        if self.moe:
            self.Nx = self._int(a + "expert_count", required=True)
            if self.Nx <= 0:
                raise ModelError("expert_count must be > 0")
            self.k_used = self._int(a + "expert_used_count", required=True)
            ff0 = self.n_ff[0] if isinstance(self.n_ff, list) else self.n_ff
            self.n_ff_exp = self._int(a + "expert_feed_forward_length",
                                      default=ff0 // self.k_used if self.k_used else 0)
            self.n_ff_shexp = self._int(a + "expert_shared_feed_forward_length", default=ff0)

    def _layer_val(self, v, i):
        return v[i] if isinstance(v, list) else v

    # -- weights ------------------------------------------------------------------------------
    def _t(self, name, shape=None, optional=False):
        if name not in self.g.tensors:
            if optional:
                return None
            raise ModelError(f"missing tensor {name}")
        self._used.add(name)
        x = self.g.tensor(name)
        if shape is not None:
            if x.size == int(np.prod(shape)) and len(shape) == 1:
                x = x.reshape(shape)  # e.g. ffn_gate_inp_shexp stored as [E, 1]
            if tuple(x.shape) != tuple(shape):
                raise ModelError(f"{name}: shape {x.shape}, expected {tuple(shape)} "
                                 f"(numpy order)")
        return x

    def _load_weights(self):
        E = self.E
        self.tok_embd = self._t("token_embd.weight")
        if self.tok_embd.shape[1] != E:
            raise ModelError("token_embd width != n_embd")
        self.n_vocab = self.tok_embd.shape[0]
        toks = self.g.get("tokenizer.ggml.tokens")
        if toks is not None and len(toks) != self.n_vocab:
            raise ModelError("tokenizer token count != token_embd rows")
        self.output_norm = self._t("output_norm.weight", (E,))
        self.output = self._t("output.weight", (self.n_vocab, E), optional=True)
        self.tied = self.output is None
        if self.tied:
            self.output = self.tok_embd
        self.layers = [self._load_layer(i) for i in range(self.n_layer)]
        self.mtp_layer = None
        if self.n_nextn == 1 and f"blk.{self.n_layer}.nextn.eh_proj.weight" in self.g.tensors:
            self.mtp_layer = self._load_layer(self.n_layer)

    def _load_layer(self, i):
        E, b = self.E, f"blk.{i}."
        L = {"recr": self.recr[i]}
        L["attn_norm"] = self._t(b + "attn_norm.weight", (E,))
        if self.arch == "qwen3":
            L["ffn_norm"] = self._t(b + "ffn_norm.weight", (E,))
        else:
            L["ffn_norm"] = self._t(b + "post_attention_norm.weight", (E,))
        if L["recr"]:
            S, Hk, Hv, C, K = self.S, self.Hk, self.Hv, self.C, self.K
            if b + "attn_qkv.weight" in self.g.tensors or b + "ssm_in.weight" not in self.g.tensors:
                L["wqkv"] = self._t(b + "attn_qkv.weight", (C, E))
                L["wz"] = self._t(b + "attn_gate.weight", (Hv * S, E))
            else:
                # legacy qwen3next ssm_in: per key head g [q_g S | k_g S | v_g rS | z_g rS]
                if self.arch != "qwen3next":
                    raise ModelError("ssm_in only exists for qwen3next")
                w = self._t(b + "ssm_in.weight", (2 * Hk * S + 2 * Hv * S, E))
                r = self.r
                w = w.reshape(Hk, 2 * S + 2 * r * S, E)
                q = w[:, :S].reshape(Hk * S, E)
                k = w[:, S:2 * S].reshape(Hk * S, E)
                v = w[:, 2 * S:2 * S + r * S].reshape(Hv * S, E)
                z = w[:, 2 * S + r * S:].reshape(Hv * S, E)
                L["wqkv"] = np.concatenate([q, k, v], axis=0)
                L["wz"] = z
            L["conv"] = self._t(b + "ssm_conv1d.weight", (C, K))   # [channel, tap]
            L["dt_bias"] = self._t(b + "ssm_dt.bias", (Hv,))
            L["ssm_a"] = self._t(b + "ssm_a", (Hv,))
            if self.arch == "qwen3next":
                L["wba"] = self._t(b + "ssm_ba.weight", (2 * Hv, E))
            else:
                L["wbeta"] = self._t(b + "ssm_beta.weight", (Hv, E))
                L["walpha"] = self._t(b + "ssm_alpha.weight", (Hv, E))
            L["ssm_norm"] = self._t(b + "ssm_norm.weight", (S,))
            L["ssm_out"] = self._t(b + "ssm_out.weight", (E, Hv * S))
        else:
            H = self._layer_val(self.n_head, i)
            Hkv = self._layer_val(self.n_head_kv, i)
            D = self.D
            if H % Hkv:
                raise ModelError("head_count % head_count_kv != 0")
            L["H"], L["Hkv"] = H, Hkv
            L["gated"] = self.arch != "qwen3"
            L["wq"] = self._t(b + "attn_q.weight", ((2 if L["gated"] else 1) * H * D, E))
            L["wk"] = self._t(b + "attn_k.weight", (Hkv * D, E))
            L["wv"] = self._t(b + "attn_v.weight", (Hkv * D, E))
            L["wo"] = self._t(b + "attn_output.weight", (E, H * D))
            L["q_norm"] = self._t(b + "attn_q_norm.weight", (D,))
            L["k_norm"] = self._t(b + "attn_k_norm.weight", (D,))
        if self.moe:
            Nx, nfe, nsh = self.Nx, self.n_ff_exp, self.n_ff_shexp
            L["router"] = self._t(b + "ffn_gate_inp.weight", (Nx, E))
            if b + "ffn_gate_up_exps.weight" in self.g.tensors:
                gu = self._t(b + "ffn_gate_up_exps.weight", (Nx, 2 * nfe, E))
                L["exp_gate"], L["exp_up"] = gu[:, :nfe], gu[:, nfe:]
            else:
                L["exp_gate"] = self._t(b + "ffn_gate_exps.weight", (Nx, nfe, E))
                L["exp_up"] = self._t(b + "ffn_up_exps.weight", (Nx, nfe, E))
            L["exp_down"] = self._t(b + "ffn_down_exps.weight", (Nx, E, nfe))
            L["sh_gate_inp"] = self._t(b + "ffn_gate_inp_shexp.weight", (E,))
            L["sh_gate"] = self._t(b + "ffn_gate_shexp.weight", (nsh, E))
            L["sh_up"] = self._t(b + "ffn_up_shexp.weight", (nsh, E))
            L["sh_down"] = self._t(b + "ffn_down_shexp.weight", (E, nsh))
        else:
            nff = self._layer_val(self.n_ff, i)
            if not nff:
                raise ModelError("feed_forward_length required for a dense FFN")
            L["ffn_gate"] = self._t(b + "ffn_gate.weight", (nff, E))
            L["ffn_up"] = self._t(b + "ffn_up.weight", (nff, E))
            L["ffn_down"] = self._t(b + "ffn_down.weight", (E, nff))
        if i >= self.n_layer:  # MTP block
            L["eh_proj"] = self._t(b + "nextn.eh_proj.weight", (E, 2 * E))
            L["enorm"] = self._t(b + "nextn.enorm.weight", (E,))
            L["hnorm"] = self._t(b + "nextn.hnorm.weight", (E,))
            L["head_norm"] = self._t(b + "nextn.shared_head_norm.weight", (E,), optional=True)
            L["embed"] = self._t(b + "nextn.embed_tokens.weight", (self.n_vocab, E),
                                 optional=True)
            L["head"] = self._t(b + "nextn.shared_head_head.weight", (self.n_vocab, E),
                                optional=True)
        return L

    # -- blocks -------------------------------------------------------------------------------
    def attention(self, L, a, pos):
        """Docs §5.3 (gated) / §5.9 (qwen3). a [T, E] normalised input, pos [T]."""
        T, D, H, Hkv = a.shape[0], self.D, L["H"], L["Hkv"]
        qg = a @ L["wq"].T
        if L["gated"]:
            qg = qg.reshape(T, H, 2 * D)
            q, gate = qg[:, :, :D], qg[:, :, D:]
        else:
            q, gate = qg.reshape(T, H, D), None
        k = (a @ L["wk"].T).reshape(T, Hkv, D)
        v = (a @ L["wv"].T).reshape(T, Hkv, D)
        if not self.opts.get("no_qk_norm"):
            q = rmsnorm(q, L["q_norm"], self.eps)
            k = rmsnorm(k, L["k_norm"], self.eps)
        if not self.opts.get("no_rope"):
            q = rope_neox(q, pos, self.n_rot, self.rope_base)
            k = rope_neox(k, pos, self.n_rot, self.rope_base)
        grp = H // Hkv
        kh = np.repeat(k, grp, axis=1)              # query head h uses kv head h // grp
        vh = np.repeat(v, grp, axis=1)
        s = np.einsum("thd,shd->hts", q, kh) * self.attn_scale
        mask = pos[None, :] <= pos[:, None]         # key position <= query position
        s = np.where(mask[None], s, -np.inf)
        s -= s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", p, vh)
        if gate is not None and not self.opts.get("no_attn_gate"):
            o = o * sigmoid(gate)
        return o.reshape(T, H * D) @ L["wo"].T

    def head_map(self):
        """Value head h -> key head (docs §4.3)."""
        h = np.arange(self.Hv)
        nxt = self.arch == "qwen3next"
        if self.opts.get("swap_head_map"):
            nxt = not nxt
        return h // self.r if nxt else h % self.Hk

    def gdn(self, L, a):
        """Docs §5.4 for a whole sequence starting from zero state. a [T, E]."""
        T, S, Hk, Hv, K, r = a.shape[0], self.S, self.Hk, self.Hv, self.K, self.r
        u = a @ L["wqkv"].T                                  # [T, C]
        z = (a @ L["wz"].T).reshape(T, Hv, S)
        if self.arch == "qwen3next":
            w = (a @ L["wba"].T).reshape(T, Hk, 2 * r)       # per key head [b (r) | a (r)]
            bl = w[:, :, :r].reshape(T, Hv)
            al = w[:, :, r:].reshape(T, Hv)
        else:
            bl = a @ L["wbeta"].T
            al = a @ L["walpha"].T
        beta = sigmoid(bl)
        g = L["ssm_a"] * softplus(al + L["dt_bias"])         # [T, Hv], <= 0
        if self.opts.get("no_decay"):
            g = np.zeros_like(g)
        # causal depthwise conv with zero initial state; tap K-1 is the current token
        up = np.concatenate([np.zeros((K - 1, self.C)), u], axis=0)
        w_conv = L["conv"]
        if self.opts.get("no_conv_history"):
            w_conv = w_conv.copy()
            w_conv[:, :K - 1] = 0.0
        y = np.zeros_like(u)
        for j in range(K):
            y += w_conv[:, j] * up[j:j + T]
        y = silu(y)
        q = y[:, :Hk * S].reshape(T, Hk, S)
        k = y[:, Hk * S:2 * Hk * S].reshape(T, Hk, S)
        v = y[:, 2 * Hk * S:].reshape(T, Hv, S)
        q = l2norm(q, self.eps)
        k = l2norm(k, self.eps)
        kap = self.head_map()
        qh, kh = q[:, kap], k[:, kap]
        if self.opts.get("gdn", "seq") == "chunk":
            if self.opts.get("no_gdn_update"):
                raise ModelError("no_gdn_update only with the sequential form")
            o = gdn_chunked(qh, kh, v, g, beta)
        else:
            o = gdn_sequential(qh, kh, v, g, beta, self.opts)
        o = rmsnorm(o, L["ssm_norm"], self.eps) * silu(z)
        return o.reshape(T, Hv * S) @ L["ssm_out"].T

    def ffn(self, L, f):
        if not self.moe:
            return (silu(f @ L["ffn_gate"].T) * (f @ L["ffn_up"].T)) @ L["ffn_down"].T
        T = f.shape[0]
        out = np.zeros_like(f)
        if not self.opts.get("no_routed_experts"):
            lg = f @ L["router"].T                              # [T, Nx]
            pi = np.exp(lg - lg.max(axis=-1, keepdims=True))
            pi /= pi.sum(axis=-1, keepdims=True)                # softmax over all experts
            for t in range(T):
                order = np.argsort(-pi[t], kind="stable")
                top = order[:self.k_used]
                if self.k_used < self.Nx:  # closest top-k decision, for tie diagnostics
                    gap = lg[t, order[self.k_used - 1]] - lg[t, order[self.k_used]]
                    self.min_router_gap = min(self.min_router_gap, gap)
                wsum = max(pi[t, top].sum(), ROUTER_EPS)
                for e in top:
                    hdn = silu(L["exp_gate"][e] @ f[t]) * (L["exp_up"][e] @ f[t])
                    out[t] += (pi[t, e] / wsum) * (L["exp_down"][e] @ hdn)
        if not self.opts.get("no_shared_expert"):
            sh = (silu(f @ L["sh_gate"].T) * (f @ L["sh_up"].T)) @ L["sh_down"].T
            out += sigmoid(f @ L["sh_gate_inp"])[:, None] * sh
        return out

    def block(self, L, x, pos):
        a = rmsnorm(x, L["attn_norm"], self.eps)
        x = x + (self.gdn(L, a) if L["recr"] else self.attention(L, a, pos))
        f = rmsnorm(x, L["ffn_norm"], self.eps)
        return x + self.ffn(L, f)

    # -- public -------------------------------------------------------------------------------
    def check_tokens(self, tokens):
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or len(tokens) == 0:
            raise ModelError("need a non-empty 1-D token list")
        if tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ModelError("token id out of range")
        return tokens

    def forward(self, tokens):
        """Trunk over tokens at positions 0..T-1. Returns (logits [T, V], hidden [T, E]) where
        hidden is the post-output_norm state (the MTP input)."""
        tokens = self.check_tokens(tokens)
        pos = np.arange(len(tokens))
        x = self.tok_embd[tokens]
        for L in self.layers:
            x = self.block(L, x, pos)
        h = rmsnorm(x, self.output_norm, self.eps)
        return h @ self.output.T, h

    def mtp(self, tokens, hidden):
        """Docs §5.8: row p = MTP logits for token x_p with the trunk hidden h_{p-1} (zeros at
        p = 0), MTP KV cache over all positions. Returns [T, V] or None without an MTP head."""
        L = self.mtp_layer
        if L is None:
            return None
        tokens = self.check_tokens(tokens)
        T = len(tokens)
        pos = np.arange(T)
        hprev = np.zeros((T, self.E))
        if not self.opts.get("mtp_zero_hidden"):
            hprev[1:] = hidden[:-1]
        emb = (L["embed"] if L["embed"] is not None else self.tok_embd)[tokens]
        c = np.concatenate([rmsnorm(emb, L["enorm"], self.eps),
                            rmsnorm(hprev, L["hnorm"], self.eps)], axis=-1)
        x = c @ L["eh_proj"].T
        x = self.block(L, x, pos)
        hn = L["head_norm"] if L["head_norm"] is not None else self.output_norm
        h = rmsnorm(x, hn, self.eps)
        head = L["head"] if L["head"] is not None else self.output
        return h @ head.T

    def describe(self):
        s = f"{self.arch}: E={self.E} layers={self.n_layer}+{self.n_nextn} V={self.n_vocab}"
        s += f" H={self.n_head}/{self.n_head_kv} D={self.D} R={self.n_rot} base={self.rope_base:g}"
        if self.arch in GDN_ARCHS:
            s += f" GDN S={self.S} Hk={self.Hk} Hv={self.Hv} K={self.K}"
            s += " recr=" + "".join("G" if x else "A" for x in self.recr[:self.n_layer])
        if self.moe:
            s += f" MoE {self.Nx}x{self.n_ff_exp} top{self.k_used} shared {self.n_ff_shexp}"
        s += " tied" if self.tied else ""
        return s


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    path = argv[0]
    tokens = [int(t) for t in argv[1:]] or [(i * 37 + 11) % 264 for i in range(80)]
    m = Model(path)
    print(m.describe())
    lg, h = m.forward(tokens)
    print("argmax:", " ".join(str(int(x)) for x in lg.argmax(-1)))
    print(f"max |logit| {np.abs(lg).max():.6g}")
    if m.arch in GDN_ARCHS:
        lc, _ = Model(path, gdn="chunk").forward(tokens)
        print(f"seq vs chunk: max |dlogit| {np.abs(lg - lc).max():.3g}")
    ml = m.mtp(tokens, h)
    if ml is not None:
        print("mtp argmax:", " ".join(str(int(x)) for x in ml.argmax(-1)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""qwen35.py — PyTorch implementation of the qwen35 architecture (dense Qwen3.5) with its MTP
head, written from docs/models.md §4-§6, plus GGUF export/import for the demo model.

Parameters are kept exactly as the GGUF stores them, so export is a rename:
- every RMSNorm weight is the plain multiplier (HF's "+1" already folded, §4.9), initialised
  to 1; `ssm_norm` is the gated-norm weight (also a plain multiplier);
- GDN value heads are in the converter's tiled order: value head h reads key head h mod Hk
  (§4.3), so no permutation is needed on export;
- `attn_q` packs [q_h (D) | gate_h (D)] per head (§4.4);
- the SSM decay is parametrised as A_log (exported as ssm_a = -exp(A_log)) and dt_bias.

Forward (§5.2): x = embed(t); per layer x += mixer(RMSNorm(x)); x += FFN(RMSNorm(x)); h =
RMSNorm(x); logits = W_out h. Layer i is gated full attention iff (i+1) % 4 == 0, else Gated
DeltaNet. MTP (§5.8): row p = block(eh_proj [enorm(embed(x_p)) | hnorm(h_{p-1})]) ->
shared_head_norm -> W_out, predicting x_{p+1}.

GDN recurrence: `gdn_sequential` is the token-by-token rule of §5.4 (decay, read, delta,
rank-1 update, read-out); `gdn_chunked` is the chunked form of §6 used for training. They
agree to rounding (make_fixture.py checks it in float64 on every fixture it writes).
"""

import math
import os
import sys
from dataclasses import dataclass, asdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))


@dataclass
class Config:
    n_vocab: int = 2048
    E: int = 256          # n_embd
    n_layer: int = 4      # trunk layers (the MTP block comes on top)
    n_ff: int = 768
    H: int = 4            # attention query heads
    Hkv: int = 2
    D: int = 64           # attention head dim
    R: int = 16           # rotary dims (0.25 D)
    rope_base: float = 1e7
    Hk: int = 2           # GDN key heads
    Hv: int = 4           # GDN value heads
    S: int = 64           # GDN head dim
    K: int = 4            # conv kernel
    interval: int = 4     # full_attention_interval
    eps: float = 1e-6
    ctx: int = 2048
    tied: bool = False    # LM head = token_embd (no output.weight in the GGUF)

    @property
    def C(self):
        return 2 * self.Hk * self.S + self.Hv * self.S

    def is_recr(self, i):
        return i < self.n_layer and (i + 1) % self.interval != 0


# ---------------------------------------------------------------------------------------------
# helpers

def _up(t):
    """f32 for half types, unchanged otherwise (the float64 reference stays float64)."""
    return t if t.dtype == torch.float64 else t.float()


def silu(x):
    """SiLU; half types go through f32 (PyTorch's bf16 SiLU backward is slow on CPU)."""
    if x.dtype in (torch.bfloat16, torch.float16):
        return F.silu(x.float()).to(x.dtype)
    return F.silu(x)


def rmsnorm(x, w, eps):
    xf = _up(x)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * w).to(x.dtype) if x.dtype != w.dtype and x.dtype != torch.float64 else y * w


def rope_neox(x, pos, R, base):
    """Partial NEOX RoPE on the first R dims of x [B, T, heads, D]; pairs (n, n + R/2)."""
    half = R // 2
    n = torch.arange(half, dtype=torch.float64)
    inv = base ** (-2.0 * n / R)
    th = pos.to(torch.float64)[:, None] * inv[None, :]            # [T, half]
    c = torch.cos(th).to(x.dtype)[None, :, None, :]
    s = torch.sin(th).to(x.dtype)[None, :, None, :]
    a, b, rest = x[..., :half], x[..., half:R], x[..., R:]
    return torch.cat([a * c - b * s, a * s + b * c, rest], dim=-1)


def gdn_sequential(q, k, v, g, beta):
    """Docs §5.4 step 7, token by token. q, k, v [B, T, Hv, S] with q, k L2-normalised and
    mapped to value heads (q not yet scaled); g, beta [B, T, Hv]. Returns o [B, T, Hv, S].
    State M [B, Hv, S(key), S(value)]."""
    B, T, Hv, S = v.shape
    M = torch.zeros(B, Hv, S, S, dtype=v.dtype)
    out = []
    scale = 1.0 / math.sqrt(S)
    for t in range(T):
        M = M * torch.exp(g[:, t])[..., None, None]                          # decay first
        read = torch.einsum("bhij,bhi->bhj", M, k[:, t])                     # M^T k
        delta = beta[:, t][..., None] * (v[:, t] - read)
        M = M + k[:, t][..., :, None] * delta[..., None, :]                  # rank-1 update
        out.append(torch.einsum("bhij,bhi->bhj", M, q[:, t]) * scale)       # read updated
    return torch.stack(out, dim=1)


def gdn_chunked(q, k, v, g, beta, L=32):
    """Docs §6, chunk length L, zero-step padding, zero initial state. Same inputs and output
    as gdn_sequential. The (I + A)^-1 solve and the decay factors are computed in f32; the
    GEMMs run in the ambient (autocast) precision."""
    B, T, Hv, S = v.shape
    Tp = (T + L - 1) // L * L
    N = Tp // L

    def prep(a):   # [B, T, Hv, ...] -> [B, Hv, N, L, ...]
        a = a.transpose(1, 2)
        if Tp != T:
            pad = [0, 0] * (a.dim() - 3) + [0, Tp - T]
            a = F.pad(a, pad)
        return a.reshape(B, Hv, N, L, *a.shape[3:])

    q = prep(q * (1.0 / math.sqrt(S)))
    k, v = prep(k), prep(v)
    g, beta = prep(_up(g)), prep(_up(beta))
    gam = torch.cumsum(g, dim=-1)                                       # [B, Hv, N, L]
    lower = torch.tril(torch.ones(L, L, dtype=torch.bool))
    diff = gam[..., :, None] - gam[..., None, :]
    Dm = torch.exp(diff.masked_fill(~lower, float("-inf")))             # incl. diagonal
    kk = _up(k @ k.transpose(-1, -2))
    A = (beta[..., :, None] * kk * Dm).tril(-1)
    eye = torch.eye(L, dtype=A.dtype)
    Gam = torch.exp(gam)
    # P = (I + A)^-1 (an L x L solve, f32), then W = P diag(beta) V, Kc = P diag(beta Gam) K
    P = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False, unitriangular=True)
    rhs = torch.cat([beta[..., None] * _up(v), (beta * Gam)[..., None] * _up(k)], -1)
    W, Kc = torch.split(_up(P.to(q.dtype) @ rhs.to(q.dtype)), [S, S], dim=-1)
    qk = (_up(q @ k.transpose(-1, -2)) * Dm).to(q.dtype)        # lower incl. diag
    kdec = (torch.exp(gam[..., -1:] - gam)[..., None] * _up(k)).to(k.dtype)
    # per-chunk views via unbind (their backward is one stack, not a zero-filled scatter each)
    Wn, Kcn, qn, qkn, kdn = (t.unbind(2) for t in (W, Kc, q, qk, kdec))
    Gn, GLn = Gam.unbind(2), Gam[..., -1].unbind(2)
    M = None
    outs = []
    for n in range(N):
        if M is None:
            U = Wn[n].to(q.dtype)
            o = qkn[n] @ U
            M = _up(kdn[n].transpose(-1, -2) @ U)
        else:
            Mc = M.to(q.dtype)
            U = (Wn[n] - _up(Kcn[n].to(q.dtype) @ Mc)).to(q.dtype)
            o = Gn[n][..., None].to(q.dtype) * (qn[n] @ Mc) + qkn[n] @ U
            M = GLn[n][..., None, None] * M + _up(kdn[n].transpose(-1, -2) @ U)
        outs.append(o)
    o = torch.stack(outs, dim=2).reshape(B, Hv, Tp, S)[:, :, :T]
    return o.transpose(1, 2)


# ---------------------------------------------------------------------------------------------
# modules

class GDN(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        E, S, Hv, C = c.E, c.S, c.Hv, c.C
        self.attn_qkv = nn.Linear(E, C, bias=False)
        self.attn_gate = nn.Linear(E, Hv * S, bias=False)
        self.ssm_beta = nn.Linear(E, Hv, bias=False)
        self.ssm_alpha = nn.Linear(E, Hv, bias=False)
        self.ssm_conv1d = nn.Parameter(torch.empty(C, c.K))          # [channel, tap]
        self.ssm_dt = nn.Parameter(torch.empty(Hv))
        self.A_log = nn.Parameter(torch.empty(Hv))
        self.ssm_norm = nn.Parameter(torch.ones(S))
        self.ssm_out = nn.Linear(Hv * S, E, bias=False)

    def forward(self, a, mode="chunk"):
        c = self.c
        B, T, _ = a.shape
        S, Hk, Hv, K = c.S, c.Hk, c.Hv, c.K
        u = self.attn_qkv(a)                                             # [B, T, C]
        z = self.attn_gate(a).reshape(B, T, Hv, S)
        beta = torch.sigmoid(_up(self.ssm_beta(a)))
        ssm_a = -torch.exp(_up(self.A_log))
        g = ssm_a * F.softplus(_up(self.ssm_alpha(a)) + _up(self.ssm_dt))  # <= 0
        # causal depthwise conv, tap K-1 on the current token, then SiLU
        w = self.ssm_conv1d.to(u.dtype)[:, None, :]
        y = F.conv1d(F.pad(u.transpose(1, 2), (K - 1, 0)), w, groups=c.C).transpose(1, 2)
        y = silu(y)
        q, k, v = torch.split(y, [Hk * S, Hk * S, Hv * S], dim=-1)
        q = q.reshape(B, T, Hk, S)
        k = k.reshape(B, T, Hk, S)
        v = v.reshape(B, T, Hv, S)
        q = F.normalize(_up(q), dim=-1, eps=c.eps)
        k = F.normalize(_up(k), dim=-1, eps=c.eps)
        r = Hv // Hk
        q = q.repeat(1, 1, r, 1)      # value head h reads key head h mod Hk (qwen35, §4.3)
        k = k.repeat(1, 1, r, 1)
        if mode == "seq":
            o = gdn_sequential(q.to(v.dtype), k.to(v.dtype), v, g.to(v.dtype),
                               beta.to(v.dtype))
        else:
            o = gdn_chunked(q.to(v.dtype), k.to(v.dtype), v, g, beta)
        o = rmsnorm(o, self.ssm_norm, c.eps) * silu(z)
        return self.ssm_out(o.reshape(B, T, Hv * S))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        E, H, Hkv, D = c.E, c.H, c.Hkv, c.D
        self.attn_q = nn.Linear(E, 2 * H * D, bias=False)
        self.attn_k = nn.Linear(E, Hkv * D, bias=False)
        self.attn_v = nn.Linear(E, Hkv * D, bias=False)
        self.attn_q_norm = nn.Parameter(torch.ones(D))
        self.attn_k_norm = nn.Parameter(torch.ones(D))
        self.attn_output = nn.Linear(H * D, E, bias=False)

    def forward(self, a, mode=None):
        c = self.c
        B, T, _ = a.shape
        H, Hkv, D = c.H, c.Hkv, c.D
        qg = self.attn_q(a).reshape(B, T, H, 2 * D)
        q, gate = qg[..., :D], qg[..., D:]
        k = self.attn_k(a).reshape(B, T, Hkv, D)
        v = self.attn_v(a).reshape(B, T, Hkv, D)
        q = rmsnorm(q, self.attn_q_norm, c.eps)
        k = rmsnorm(k, self.attn_k_norm, c.eps)
        pos = torch.arange(T)
        q = rope_neox(q, pos, c.R, c.rope_base)
        k = rope_neox(k, pos, c.R, c.rope_base)
        grp = H // Hkv
        k = k.repeat_interleave(grp, dim=2)          # query head h uses kv head h // grp
        v = v.repeat_interleave(grp, dim=2)
        s = torch.einsum("bthd,bshd->bhts", q, k) * (1.0 / math.sqrt(D))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        s = _up(s).masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, dim=-1).to(v.dtype)
        o = torch.einsum("bhts,bshd->bthd", p, v)
        o = o * torch.sigmoid(gate)
        return self.attn_output(o.reshape(B, T, H * D))


class FFN(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ffn_gate = nn.Linear(c.E, c.n_ff, bias=False)
        self.ffn_up = nn.Linear(c.E, c.n_ff, bias=False)
        self.ffn_down = nn.Linear(c.n_ff, c.E, bias=False)

    def forward(self, f):
        return self.ffn_down(silu(self.ffn_gate(f)) * self.ffn_up(f))


class Block(nn.Module):
    def __init__(self, c, recr):
        super().__init__()
        self.c = c
        self.recr = recr
        self.attn_norm = nn.Parameter(torch.ones(c.E))
        self.post_attention_norm = nn.Parameter(torch.ones(c.E))
        self.mixer = GDN(c) if recr else Attention(c)
        self.ffn = FFN(c)

    def forward(self, x, mode="chunk"):
        x = x + self.mixer(rmsnorm(x, self.attn_norm, self.c.eps), mode)
        return x + self.ffn(rmsnorm(x, self.post_attention_norm, self.c.eps))


class MTP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.enorm = nn.Parameter(torch.ones(c.E))
        self.hnorm = nn.Parameter(torch.ones(c.E))
        self.eh_proj = nn.Linear(2 * c.E, c.E, bias=False)
        self.block = Block(c, recr=False)
        self.shared_head_norm = nn.Parameter(torch.ones(c.E))


class Qwen35(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.token_embd = nn.Embedding(c.n_vocab, c.E)
        self.blocks = nn.ModuleList([Block(c, c.is_recr(i)) for i in range(c.n_layer)])
        self.output_norm = nn.Parameter(torch.ones(c.E))
        self.output = None if c.tied else nn.Linear(c.E, c.n_vocab, bias=False)
        self.mtp = MTP(c)
        self.twin_tok = self.twin_embd = self.twin_out = None   # see set_twins

    def set_twins(self, pairs):
        """Training-time reparametrisation for twin tokens (" word" and "word", pairs of ids):
        each pair's embedding and LM-head rows are its own row plus one row the two share, so
        what either spelling learns reaches the other. Only the sums (embed_weight,
        head_weight) are exported; the GGUF and the engine never see the split. Call before
        init_weights."""
        n = len(pairs)
        self.twin_tok = torch.tensor([a for a, _ in pairs] + [b for _, b in pairs])
        self.twin_row = torch.arange(n).repeat(2)
        self.twin_embd = nn.Parameter(torch.zeros(n, self.c.E))
        self.twin_out = None if self.c.tied else nn.Parameter(torch.zeros(n, self.c.E))

    def _with_twins(self, w, shared):
        if self.twin_tok is None:
            return w
        return w.index_add(0, self.twin_tok, shared[self.twin_row])

    def embed_weight(self):
        return self._with_twins(self.token_embd.weight, self.twin_embd)

    def head_weight(self):
        if self.c.tied:
            return self.embed_weight()
        return self._with_twins(self.output.weight, self.twin_out)

    def head(self, h):
        """Logits of normed hidden states: output.weight, or token_embd when tied."""
        return F.linear(h, self.head_weight())

    def init_weights(self, seed, shift_heads=0, bigram_heads=0, trigram_heads=0):
        gen = torch.Generator().manual_seed(seed)
        c = self.c
        depth_scale = 1.0 / math.sqrt(2 * (c.n_layer + 1))
        for name, p in self.named_parameters():
            if p.dim() == 2 and "ssm_conv1d" not in name:
                std = 1.0 / math.sqrt(p.shape[1])
                if name.endswith(("ssm_out.weight", "attn_output.weight", "ffn_down.weight")):
                    std *= depth_scale
                if name in ("token_embd.weight", "twin_embd"):
                    std = 1.0
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=gen) * std)
        if self.twin_tok is not None:   # twins: half their variance shared, half their own
            with torch.no_grad():
                for p in (self.twin_embd, self.twin_out):
                    if p is not None:
                        p.mul_(math.sqrt(0.5))
                for w in (self.token_embd.weight, None if c.tied else self.output.weight):
                    if w is not None:
                        w[self.twin_tok] *= math.sqrt(0.5)
        if c.tied:   # unit-variance embeddings as the head: start the logits at std ~1, not sqrt(E)
            with torch.no_grad():
                self.output_norm.fill_(1.0 / math.sqrt(c.E))
                self.mtp.shared_head_norm.fill_(1.0 / math.sqrt(c.E))
        for b in list(self.blocks) + [self.mtp.block]:
            if b.recr:
                m = b.mixer
                with torch.no_grad():
                    m.ssm_conv1d.copy_((torch.rand(m.ssm_conv1d.shape, generator=gen) * 2 - 1)
                                       / math.sqrt(c.K))
                    m.A_log.copy_(torch.log(torch.rand(c.Hv, generator=gen) * 15 + 1))
                    dt = torch.exp(torch.rand(c.Hv, generator=gen) *
                                   (math.log(0.1) - math.log(0.001)) + math.log(0.001))
                    m.ssm_dt.copy_(dt + torch.log(-torch.expm1(-dt)))   # inverse softplus
        # the first, second and third GDN layers (0, 1, 2 at full_attention_interval 4)
        recr = [self.blocks[i].mixer for i in range(c.n_layer) if c.is_recr(i)]
        for span, n in enumerate((shift_heads, bigram_heads, trigram_heads), 1):
            if n and span <= len(recr):
                self._induction_init(recr[span - 1], n, span=span)

    def _induction_init(self, m, n_key_heads, span=1):
        """Start GDN key heads 0 .. n_key_heads-1 of a layer (and the value heads that read
        them) as an induction memory, the in-context recall the delta rule is built for:
        query and key share one projection, the query's conv taps read the current token and
        the key's the previous token, the value's the current token; the decay is slow. At
        step t the state then stores "after x_{t-1} came x_t", and a query with the current
        token x_s reads out what followed x_s before: the copy circuit that repeat / reverse /
        passage answers need, present from step 0 instead of found late by the optimiser.
        Everything stays trainable; only the starting point differs from random."""
        c = self.c
        S, Hk, K = c.S, c.Hk, c.K
        assert span < K, f"a span-{span} key needs a conv kernel of at least {span + 1} taps"
        with torch.no_grad():
            w = m.attn_qkv.weight                      # [C, E]: q (Hk S) | k (Hk S) | v (Hv S)
            conv = m.ssm_conv1d                        # [C, K]; tap K-1 = current token
            for gk in range(n_key_heads):
                q = slice(gk * S, (gk + 1) * S)
                k = slice(Hk * S + gk * S, Hk * S + (gk + 1) * S)
                w[q] = w[k]
                conv[q] = 0.0
                conv[k] = 0.0
                for j in range(span):                  # span 2 (3): keyed on a bigram (trigram)
                    conv[q, K - 1 - j] = 1.0
                    conv[k, K - 2 - j] = 1.0
                for h in range(gk, c.Hv, Hk):          # value heads reading key head gk
                    v = slice(2 * Hk * S + h * S, 2 * Hk * S + (h + 1) * S)
                    conv[v] = 0.0
                    conv[v, K - 1] = 1.0
                    m.A_log[h] = 0.0                   # A = 1
                    m.ssm_dt[h] = -7.0                 # softplus(-7) ~ 1e-3: decay ~ e^-0.001

    def trunk(self, tokens, mode="chunk"):
        x = F.embedding(tokens, self.embed_weight())
        for b in self.blocks:
            x = b(x, mode)
        return rmsnorm(x, self.output_norm, self.c.eps)

    def mtp_hidden(self, tokens, h, mode="chunk"):
        """Row p: token x_p and trunk hidden h_{p-1} (zeros at p = 0)."""
        m = self.mtp
        hprev = F.pad(h[:, :-1], (0, 0, 1, 0))
        e = F.embedding(tokens, self.embed_weight())
        x = torch.cat([rmsnorm(e, m.enorm, self.c.eps), rmsnorm(hprev, m.hnorm, self.c.eps)], -1)
        x = m.block(m.eh_proj(x), mode)
        return rmsnorm(x, m.shared_head_norm, self.c.eps)

    def forward(self, tokens, mode="chunk"):
        h = self.trunk(tokens, mode)
        hm = self.mtp_hidden(tokens, h, mode)
        return self.head(h), self.head(hm)


# ---------------------------------------------------------------------------------------------
# GGUF export / import

def gguf_tensors(model):
    """[(gguf name, numpy array in numpy order, is_matrix)] for the whole model."""
    c = model.c
    out = []

    def put(name, t, matrix=False):
        out.append((name, t.detach().to(torch.float64).cpu().numpy(), matrix))

    put("token_embd.weight", model.embed_weight(), True)
    put("output_norm.weight", model.output_norm)
    if not c.tied:
        put("output.weight", model.head_weight(), True)
    blocks = list(model.blocks) + [model.mtp.block]
    for i, b in enumerate(blocks):
        p = f"blk.{i}."
        put(p + "attn_norm.weight", b.attn_norm)
        put(p + "post_attention_norm.weight", b.post_attention_norm)
        m = b.mixer
        if b.recr:
            put(p + "attn_qkv.weight", m.attn_qkv.weight, True)
            put(p + "attn_gate.weight", m.attn_gate.weight, True)
            put(p + "ssm_conv1d.weight", m.ssm_conv1d)
            put(p + "ssm_dt.bias", m.ssm_dt)
            put(p + "ssm_a", -torch.exp(m.A_log.detach().double()))
            put(p + "ssm_beta.weight", m.ssm_beta.weight, True)
            put(p + "ssm_alpha.weight", m.ssm_alpha.weight, True)
            put(p + "ssm_norm.weight", m.ssm_norm)
            put(p + "ssm_out.weight", m.ssm_out.weight, True)
        else:
            put(p + "attn_q.weight", m.attn_q.weight, True)
            put(p + "attn_k.weight", m.attn_k.weight, True)
            put(p + "attn_v.weight", m.attn_v.weight, True)
            put(p + "attn_output.weight", m.attn_output.weight, True)
            put(p + "attn_q_norm.weight", m.attn_q_norm)
            put(p + "attn_k_norm.weight", m.attn_k_norm)
        put(p + "ffn_gate.weight", b.ffn.ffn_gate.weight, True)
        put(p + "ffn_up.weight", b.ffn.ffn_up.weight, True)
        put(p + "ffn_down.weight", b.ffn.ffn_down.weight, True)
        if i == c.n_layer:
            mt = model.mtp
            put(p + "nextn.eh_proj.weight", mt.eh_proj.weight, True)
            put(p + "nextn.enorm.weight", mt.enorm)
            put(p + "nextn.hnorm.weight", mt.hnorm)
            put(p + "nextn.shared_head_norm.weight", mt.shared_head_norm)
    return out


def write_gguf(model, tok, path, name="deltad-demo", chat_template=None, matrix_type="f16"):
    """Matrices in F16 (matrix_type "f16", file_type 1) or Q8_0 ("q8_0", file_type 7); norms,
    ssm_conv1d, ssm_a and ssm_dt.bias always F32."""
    from gguf_read import T_U32, T_F32, T_I32, T_STRING, T_BOOL, GGML_F32, GGML_F16, GGML_Q8_0
    from gguf_write import GGUFWriter
    mtype, ftype = {"f16": (GGML_F16, 1), "q8_0": (GGML_Q8_0, 7)}[matrix_type]
    c = model.c
    w = GGUFWriter("qwen35")
    w.add("general.name", T_STRING, name)
    w.add("general.file_type", T_U32, ftype)
    a = "qwen35."
    for key, v in [("context_length", c.ctx), ("embedding_length", c.E),
                   ("block_count", c.n_layer + 1), ("nextn_predict_layers", 1),
                   ("feed_forward_length", c.n_ff), ("attention.head_count", c.H),
                   ("attention.head_count_kv", c.Hkv), ("attention.key_length", c.D),
                   ("attention.value_length", c.D), ("rope.dimension_count", c.R),
                   ("full_attention_interval", c.interval), ("ssm.conv_kernel", c.K),
                   ("ssm.state_size", c.S), ("ssm.group_count", c.Hk),
                   ("ssm.time_step_rank", c.Hv), ("ssm.inner_size", c.Hv * c.S)]:
        w.add(a + key, T_U32, v)
    w.add(a + "rope.freq_base", T_F32, c.rope_base)
    w.add(a + "attention.layer_norm_rms_epsilon", T_F32, c.eps)
    s = c.R // 2   # IMROPE sections [t, h, w, e], sum R/2 (for R = 64: [11, 11, 10, 0])
    sec = [(s + 2) // 3, (s + 1) // 3, s // 3, 0]
    w.add_array(a + "rope.dimension_sections", T_I32, sec)
    w.add("tokenizer.ggml.model", T_STRING, "gpt2")
    w.add("tokenizer.ggml.pre", T_STRING, "qwen35")
    w.add_array("tokenizer.ggml.tokens", T_STRING, tok.tokens)
    w.add_array("tokenizer.ggml.token_type", T_I32, tok.token_type)
    w.add_array("tokenizer.ggml.merges", T_STRING, [f"{x} {y}" for x, y in tok.merges])
    w.add("tokenizer.ggml.bos_token_id", T_U32, tok.bos)
    w.add("tokenizer.ggml.eos_token_id", T_U32, tok.eos)
    w.add("tokenizer.ggml.padding_token_id", T_U32, tok.pad)
    w.add("tokenizer.ggml.add_bos_token", T_BOOL, False)
    if chat_template:
        w.add("tokenizer.chat_template", T_STRING, chat_template)
    for name_, arr, matrix in gguf_tensors(model):
        w.add_tensor(name_, arr, mtype if matrix else GGML_F32)
    w.write(path)


def config_from_gguf(g):
    a = "qwen35."
    kv = g.kv
    return Config(n_vocab=len(kv["tokenizer.ggml.tokens"]), E=kv[a + "embedding_length"],
                  n_layer=kv[a + "block_count"] - kv.get(a + "nextn_predict_layers", 0),
                  n_ff=kv[a + "feed_forward_length"], H=kv[a + "attention.head_count"],
                  Hkv=kv[a + "attention.head_count_kv"], D=kv[a + "attention.key_length"],
                  R=kv[a + "rope.dimension_count"], rope_base=float(kv[a + "rope.freq_base"]),
                  Hk=kv[a + "ssm.group_count"], Hv=kv[a + "ssm.time_step_rank"],
                  S=kv[a + "ssm.state_size"], K=kv[a + "ssm.conv_kernel"],
                  interval=kv.get(a + "full_attention_interval", 4),
                  eps=float(kv[a + "attention.layer_norm_rms_epsilon"]),
                  ctx=kv[a + "context_length"], tied="output.weight" not in g.tensors)


def load_gguf(path, dtype=torch.float64):
    """A Qwen35 module whose weights are the (dequantised) tensors of a GGUF written by
    write_gguf, in `dtype`."""
    from gguf_read import GGUFFile
    g = GGUFFile(path)
    c = config_from_gguf(g)
    model = Qwen35(c).to(dtype)
    names = {n for n, _, _ in gguf_tensors(model)}
    if names != set(g.tensors):
        raise ValueError(f"tensor set mismatch: {sorted(names ^ set(g.tensors))[:5]}")
    blocks = list(model.blocks) + [model.mtp.block]
    with torch.no_grad():
        def set_(p, name):
            p.copy_(torch.from_numpy(np.array(g.tensor(name), dtype=np.float64)).reshape(p.shape))
        set_(model.token_embd.weight, "token_embd.weight")
        set_(model.output_norm, "output_norm.weight")
        if not c.tied:
            set_(model.output.weight, "output.weight")
        for i, b in enumerate(blocks):
            p = f"blk.{i}."
            set_(b.attn_norm, p + "attn_norm.weight")
            set_(b.post_attention_norm, p + "post_attention_norm.weight")
            m = b.mixer
            if b.recr:
                for attr, n in [("attn_qkv", "attn_qkv"), ("attn_gate", "attn_gate"),
                                ("ssm_beta", "ssm_beta"), ("ssm_alpha", "ssm_alpha"),
                                ("ssm_out", "ssm_out")]:
                    set_(getattr(m, attr).weight, p + n + ".weight")
                set_(m.ssm_conv1d, p + "ssm_conv1d.weight")
                set_(m.ssm_dt, p + "ssm_dt.bias")
                a = torch.from_numpy(np.array(g.tensor(p + "ssm_a"), dtype=np.float64))
                m.A_log.copy_(torch.log(-a))
                set_(m.ssm_norm, p + "ssm_norm.weight")
            else:
                for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
                    set_(getattr(m, n).weight, p + n + ".weight")
                set_(m.attn_q_norm, p + "attn_q_norm.weight")
                set_(m.attn_k_norm, p + "attn_k_norm.weight")
            for n in ("ffn_gate", "ffn_up", "ffn_down"):
                set_(getattr(b.ffn, n).weight, p + n + ".weight")
        mt = model.mtp
        p = f"blk.{c.n_layer}.nextn."
        set_(mt.eh_proj.weight, p + "eh_proj.weight")
        set_(mt.enorm, p + "enorm.weight")
        set_(mt.hnorm, p + "hnorm.weight")
        set_(mt.shared_head_norm, p + "shared_head_norm.weight")
    return model, g


def config_dict(c):
    return asdict(c)

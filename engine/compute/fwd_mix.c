/*
 * fwd_mix — the two token mixers of one device's forward pass: gated attention (qwen35 /
 * qwen3next, docs/models.md 5.3) or plain qwen3 attention (5.9), and the Gated DeltaNet (5.4,
 * 5.7). Each takes the normalised input xn [T][E] of a block and leaves its output projection
 * in mix [T][E] (partial over a tensor-parallel group; fwd.c reduces it).
 *
 * Attention: the q/k/v projections in one device call, per-row q/k norm + RoPE and the K/V
 * store, then each (row, KV head) item attends over its sequence's rows 0..pos. GDN: all input
 * projections in one call, the gates, the causal conv + L2 norm per (run, channel block), the
 * conv-state snapshots, then the sequential f32 delta rule per (run, value head) token by token
 * (so a verify-sized batch gives exactly what one token at a time gives); the first token of a
 * run reads snapshot group rs_idx, later ones update group 0, and the last min(T, n_groups)
 * states are kept for rollback.
 *
 * Every step is a device op (device.h) on device addresses; the CPU device's versions are in
 * dev_cpu_ops.c.
 * Thread: the engine thread (or a group's host thread), driving its device.
 */
#include "fwd_impl.h" // defines: struct fwd_dev, fwd__mm, fwd__matmul

/* ============================================================================================
 * Gated attention (docs 5.3) and plain qwen3 attention (5.9)
 * ========================================================================================== */

/* The attention op arguments of layer il over the step's batch (q NULL: K/V only). */
static struct dev_attn attn_args(struct fwd_dev *f, int64_t il, float *q)
{
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[il];
    return (struct dev_attn){.b = &f->db,
                             .q = q,
                             .k = f->big1,
                             .v = f->big2,
                             .out = f->big3,
                             .q_ld = l->n_head * hp->head_dim * (hp->attn_gated ? 2 : 1),
                             .n_head = l->n_head,
                             .n_head_kv = l->n_head_kv,
                             .head_dim = hp->head_dim,
                             .n_rot = hp->n_rot,
                             .q_norm = l->q_norm.data,
                             .k_norm = l->k_norm.data,
                             .cs = f->rope,
                             .gated = hp->attn_gated,
                             .eps = hp->eps,
                             .scale = hp->attn_scale,
                             .kv = cache_kv(&f->cache, il)};
}

/* q/k/v projections (one device call), norm + RoPE + store, attend, gate, project:
 * xn [T][E] -> mix [T][E]. */
void fwd__attn_layer(struct fwd_dev *f, int64_t il, const float *xn, float *mix)
{
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens;
    struct dev_attn a = attn_args(f, il, f->big0);
    struct dev_mm mm[3] = {fwd__mm(&l->wq, xn, T, a.q), /* [T][H * (2)D] */
                           fwd__mm(&l->wk, xn, T, a.k), /* [T][Hkv * D] */
                           fwd__mm(&l->wv, xn, T, a.v)};
    dev_matmul_multi(f->dev, mm, 3);
    dev_attn_store(f->dev, &a);
    dev_attn(f->dev, &a);
    fwd__matmul(f, &l->wo, a.out, T, mix);
}

/* Only the K/V rows of the batch into the cache: the k/v projections, k norm + RoPE, store. */
void fwd__attn_kv(struct fwd_dev *f, int64_t il, const float *xn)
{
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens;
    if (l->n_head_kv == 0)
        return; /* a zero-size shard */
    struct dev_attn a = attn_args(f, il, NULL);
    struct dev_mm mm[2] = {fwd__mm(&l->wk, xn, T, a.k), fwd__mm(&l->wv, xn, T, a.v)};
    dev_matmul_multi(f->dev, mm, 2);
    dev_attn_store(f->dev, &a);
}

/* ============================================================================================
 * Gated DeltaNet (docs 5.4, 5.7)
 * ========================================================================================== */

/* All input projections in one device call, gates, conv + L2 norm (+ conv-state snapshots),
 * the recurrence with the gated norm (+ state snapshots), the output projection:
 * xn [T][E] -> mix [T][E]. */
void fwd__gdn_layer(struct fwd_dev *f, int64_t il, const float *xn, float *mix)
{
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens, Hv = l->ssm_hv;
    float *bl = f->small, *al = f->small + T * Hv;             /* [T][Hv] each, or ba [T][2Hv] */
    struct dev_mm mm[4] = {fwd__mm(&l->qkv, xn, T, f->big0),   /* [T][C] */
                           fwd__mm(&l->gate, xn, T, f->big2)}; /* [T][Hv*S] */
    const bool ba = hp->arch == ARCH_QWEN3NEXT;
    if (ba)
        mm[2] = fwd__mm(&l->ba, xn, T, bl);
    else
        mm[2] = fwd__mm(&l->beta, xn, T, bl), mm[3] = fwd__mm(&l->alpha, xn, T, al);
    dev_matmul_multi(f->dev, mm, ba ? 3 : 4);
    struct dev_gdn g = {.b = &f->db,
                        .u = f->big0,
                        .y = f->big1,
                        .z = f->big2,
                        .o = f->big3,
                        .bl = bl,
                        .al = al,
                        .ba = ba ? bl : NULL,
                        .beta = f->beta,
                        .decay = f->decay,
                        .a_log = l->ssm_a.data,
                        .dt_bias = l->dt_bias.data,
                        .conv_w = l->conv.data,
                        .norm_w = l->ssm_norm.data,
                        .C = l->conv_ch,
                        .S = hp->ssm_s,
                        .Hk = l->ssm_hk,
                        .Hv = Hv,
                        .conv_k = hp->conv_k,
                        .kmap_mod = hp->kmap_mod,
                        .eps = hp->eps,
                        .st = cache_gdn(&f->cache, il)};
    dev_gdn_gates(f->dev, &g);
    dev_conv1d(f->dev, &g);
    dev_gdn(f->dev, &g);
    fwd__matmul(f, &l->ssm_out, g.o, T, mix);
}

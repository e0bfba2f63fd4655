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
 * Invariants: a row's arithmetic never depends on the rest of the batch or on the split.
 * Thread: the engine thread (or a group's host thread); items run on the device's workers.
 */
#include <math.h>
#include <string.h>

#include "fwd_impl.h"        // defines: struct fwd_dev, fwd__mm, fwd__matmul, fwd__par_items
#include "kernels/cpu/kop.h" // defines: kop_rmsnorm, kop_rope_neox_cs, kop_attn_group, kop_gdn_step, ...

/* ============================================================================================
 * Gated attention (docs 5.3) and plain qwen3 attention (5.9)
 * ========================================================================================== */

struct attn_arg {
    int64_t il;
    float *q, *k, *v; /* [T][q_ld], [T][kvd], [T][kvd]; q NULL: K/V only */
    int64_t q_ld;
    float *out; /* [T][H*D] */
};

struct attn_task {
    struct fwd_dev *f;
    const struct attn_arg *a;
};

/* Per row: q/k norm and RoPE on the new rows (one rotation table per row), then store K/V. */
static void qk_items(struct fwd_dev *f, const void *arg, int64_t t0, int64_t t1)
{
    const struct attn_arg *a = arg;
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[a->il];
    const int64_t D = hp->head_dim, kvd = l->n_head_kv * D;
    const int64_t qstride = hp->attn_gated ? 2 * D : D;
    for (int64_t t = t0; t < t1; t++) {
        const float *cs = f->rope + t * hp->n_rot;
        for (int64_t h = 0; a->q && h < l->n_head; h++) {
            float *qh = a->q + t * a->q_ld + h * qstride;
            kop_rmsnorm(qh, l->q_norm.data, qh, D, hp->eps);
            kop_rope_neox_cs(qh, hp->n_rot, cs);
        }
        for (int64_t j = 0; j < l->n_head_kv; j++) {
            float *kj = a->k + t * kvd + j * D;
            kop_rmsnorm(kj, l->k_norm.data, kj, D, hp->eps);
            kop_rope_neox_cs(kj, hp->n_rot, cs);
        }
        const int64_t s = f->b->seq[t], pos = f->b->pos[t];
        const size_t row = (size_t)kvd * sizeof(float);
        memcpy(cache_k(&f->cache, a->il, s) + pos * kvd, a->k + t * kvd, row);
        memcpy(cache_v(&f->cache, a->il, s) + pos * kvd, a->v + t * kvd, row);
    }
}

/*
 * Items = (row, KV head): the group of query heads sharing that KV head attends over the
 * sequence's rows 0..pos (each K/V row read once for the group), then the output gate. Items
 * are dealt round-robin: later rows of a prompt see more positions, so contiguous shares would
 * leave the first threads idle.
 */
static void attn_worker(void *ctx, int ith, int nth)
{
    const struct attn_task *c = ctx;
    struct fwd_dev *f = c->f;
    const struct attn_arg *a = c->a;
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[a->il];
    const int64_t Hkv = l->n_head_kv, D = hp->head_dim, grp = l->n_head / Hkv;
    const int64_t qstride = hp->attn_gated ? 2 * D : D, kvd = Hkv * D;
    float *scratch = f->attn_scratch + (size_t)ith * f->attn_scratch_n;
    for (int64_t i = ith; i < f->b->n_tokens * Hkv; i += nth) {
        const int64_t t = i / Hkv, j = i % Hkv, s = f->b->seq[t], n_kv = f->b->pos[t] + 1;
        /* as many heads at a time as the scratch holds scores for (kop_attn_group gives each
         * head the same result whatever their number) */
        const int64_t step = f->attn_scratch_n / n_kv < grp ? f->attn_scratch_n / n_kv : grp;
        for (int64_t g0 = 0; g0 < grp; g0 += step) {
            const int64_t ng = grp - g0 < step ? grp - g0 : step;
            const float *q = a->q + t * a->q_ld + (j * grp + g0) * qstride;
            float *o = a->out + t * l->n_head * D + (j * grp + g0) * D;
            kop_attn_group(q, qstride, ng, cache_k(&f->cache, a->il, s) + j * D,
                           cache_v(&f->cache, a->il, s) + j * D, kvd, n_kv, D, hp->attn_scale,
                           scratch, o, D);
            for (int64_t g = 0; hp->attn_gated && g < ng; g++)
                kop_mul_sigmoid(o + g * D, q + g * qstride + D, D);
        }
    }
}

/* q/k/v projections (one device call), norm + RoPE + store, attend, gate, project:
 * xn [T][E] -> mix [T][E]. */
void fwd__attn_layer(struct fwd_dev *f, int64_t il, const float *xn, float *mix)
{
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens, D = hp->head_dim;
    struct attn_arg a = {.il = il,
                         .q = f->big0,
                         .k = f->big1,
                         .v = f->big2,
                         .out = f->big3,
                         .q_ld = l->n_head * D * (hp->attn_gated ? 2 : 1)};
    struct dev_mm mm[3] = {fwd__mm(&l->wq, xn, T, a.q), /* [T][H * (2)D] */
                           fwd__mm(&l->wk, xn, T, a.k), /* [T][Hkv * D] */
                           fwd__mm(&l->wv, xn, T, a.v)};
    dev_matmul_multi(f->dev, mm, 3);
    fwd__par_items(f, T, (l->n_head + l->n_head_kv) * D, qk_items, &a);
    struct attn_task c = {f, &a};
    dev_parallel(f->dev, attn_worker, &c);
    fwd__matmul(f, &l->wo, a.out, T, mix);
}

/* Only the K/V rows of the batch into the cache: the k/v projections, k norm + RoPE, store. */
void fwd__attn_kv(struct fwd_dev *f, int64_t il, const float *xn)
{
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens;
    if (l->n_head_kv == 0)
        return; /* a zero-size shard */
    struct attn_arg a = {.il = il, .k = f->big1, .v = f->big2};
    struct dev_mm mm[2] = {fwd__mm(&l->wk, xn, T, a.k), fwd__mm(&l->wv, xn, T, a.v)};
    dev_matmul_multi(f->dev, mm, 2);
    fwd__par_items(f, T, l->n_head_kv * f->m->hp.head_dim, qk_items, &a);
}

/* ============================================================================================
 * Gated DeltaNet (docs 5.4, 5.7)
 * ========================================================================================== */

struct gdn_arg {
    int64_t il;
    const float *u; /* [T][C] qkv projection */
    float *y;       /* [T][C] conv output: q | k | v, q and k L2-normalised */
    const float *z; /* [T][Hv*S] output gate */
    float *o;       /* [T][Hv*S] */
};

struct gdn_task {
    struct fwd_dev *f;
    const struct gdn_arg *a;
};

/* Items = (run, block of S channels): the causal conv of the block over the run's rows, then
 * the L2 norm of the block's q or k head in every row (the v blocks have none). */
static void conv_items(struct fwd_dev *f, const void *arg, int64_t i0, int64_t i1)
{
    const struct gdn_arg *a = arg;
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[a->il];
    const int64_t C = l->conv_ch, S = hp->ssm_s, nb = C / S;
    for (int64_t i = i0; i < i1; i++) {
        const struct fwd_run *ru = &f->runs[i / nb];
        const int64_t blk = i % nb, c0 = blk * S, T = ru->t1 - ru->t0;
        const float *src = cache_conv(&f->cache, a->il, f->cache.rs_idx[ru->seq], ru->seq);
        kop_conv1d_silu(src, a->u + ru->t0 * C, l->conv.data, T, C, hp->conv_k, c0, c0 + S,
                        a->y + ru->t0 * C);
        for (int64_t t = ru->t0; blk < 2 * l->ssm_hk && t < ru->t1; t++)
            kop_l2norm(a->y + t * C + c0, S, hp->eps);
    }
}

/* The conv-state snapshot windows of every run: groups other than the source first, the
 * source group last, so every window still reads an intact source. */
static void conv_snapshots(struct fwd_dev *f, int64_t il, const float *u)
{
    const struct model_layer *l = &f->m->layers[il];
    const int64_t C = l->conv_ch, K = f->m->hp.conv_k, G = f->cache.n_groups;
    for (int64_t ri = 0; ri < f->n_runs; ri++) {
        const struct fwd_run *ru = &f->runs[ri];
        const int64_t T = ru->t1 - ru->t0, src_g = f->cache.rs_idx[ru->seq];
        const float *src = cache_conv(&f->cache, il, src_g, ru->seq);
        int64_t n_snap = T < G ? T : G;
        for (int64_t pass = 0; pass < 2; pass++)
            for (int64_t g = n_snap - 1; g >= 0; g--) {
                if ((g == src_g) != (pass == 1))
                    continue;
                kop_conv_state_window(src, u + ru->t0 * C, T, C, K, g,
                                      cache_conv(&f->cache, il, g, ru->seq));
            }
    }
}

/* Items = (run, value head); each runs the recurrence over its run's tokens, then the gated
 * norm of each output row. */
static void gdn_worker(void *ctx, int ith, int nth)
{
    const struct gdn_task *c = ctx;
    struct fwd_dev *f = c->f;
    const struct gdn_arg *a = c->a;
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[a->il];
    const int64_t Hv = l->ssm_hv, Hk = l->ssm_hk, S = hp->ssm_s, C = l->conv_ch;
    const int64_t r = Hv / Hk;
    const float scale = 1.0f / sqrtf((float)S);
    int64_t lo, hi;
    dev_split(f->n_runs * Hv, ith, nth, 1, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        const struct fwd_run *ru = &f->runs[i / Hv];
        const int64_t h = i % Hv, kh = hp->kmap_mod ? h % Hk : h / r;
        const int64_t src_g = f->cache.rs_idx[ru->seq];
        float *M = cache_ssm(&f->cache, a->il, 0, ru->seq) + h * S * S;
        const float *M_in = cache_ssm(&f->cache, a->il, src_g, ru->seq) + h * S * S;
        for (int64_t t = ru->t0; t < ru->t1; t++) {
            const float *yt = a->y + t * C;
            float *ot = a->o + t * Hv * S + h * S;
            kop_gdn_step(M, t == ru->t0 ? M_in : M, yt + kh * S, yt + Hk * S + kh * S,
                         yt + 2 * Hk * S + h * S, f->decay[t * Hv + h], f->beta[t * Hv + h], scale,
                         S, ot);
            kop_rmsnorm_gate(ot, l->ssm_norm.data, a->z + t * Hv * S + h * S, S, hp->eps);
            int64_t back = ru->t1 - 1 - t; /* this state is `back` tokens before the end */
            if (back >= 1 && back < f->cache.n_groups)
                memcpy(cache_ssm(&f->cache, a->il, back, ru->seq) + h * S * S, M,
                       (size_t)(S * S) * sizeof(float));
        }
    }
}

/* beta and decay per (row, value head) from the b / alpha logits (qwen3next: one ba matrix,
 * grouped per key head as [b (r) | a (r)]). */
static void gdn_gates(struct fwd_dev *f, const struct model_layer *l, const float *bl,
                      const float *al, const float *ba)
{
    const int64_t T = f->b->n_tokens, Hv = l->ssm_hv, r = Hv / l->ssm_hk;
    const float *a_log = l->ssm_a.data, *dt = l->dt_bias.data;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hv; h++) {
            const int64_t i = t * Hv + h, gk = h / r, j = h % r;
            const float b = ba ? ba[t * 2 * Hv + 2 * r * gk + j] : bl[i];
            const float al_ = ba ? ba[t * 2 * Hv + 2 * r * gk + r + j] : al[i];
            f->beta[i] = kop_sigmoid(b);
            f->decay[i] = expf(a_log[h] * kop_softplus(al_ + dt[h]));
        }
}

/* All input projections in one device call, gates, conv + L2 norm, the recurrence with the
 * gated norm, the output projection: xn [T][E] -> mix [T][E]. */
void fwd__gdn_layer(struct fwd_dev *f, int64_t il, const float *xn, float *mix)
{
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens, C = l->conv_ch, S = hp->ssm_s, Hv = l->ssm_hv;
    struct gdn_arg a = {.il = il, .u = f->big0, .y = f->big1, .z = f->big2, .o = f->big3};
    float *bl = f->small, *al = f->small + T * Hv;             /* [T][Hv] each, or ba [T][2Hv] */
    struct dev_mm mm[4] = {fwd__mm(&l->qkv, xn, T, f->big0),   /* [T][C] */
                           fwd__mm(&l->gate, xn, T, f->big2)}; /* [T][Hv*S] */
    const bool ba = hp->arch == ARCH_QWEN3NEXT;
    if (ba)
        mm[2] = fwd__mm(&l->ba, xn, T, bl);
    else
        mm[2] = fwd__mm(&l->beta, xn, T, bl), mm[3] = fwd__mm(&l->alpha, xn, T, al);
    dev_matmul_multi(f->dev, mm, ba ? 3 : 4);
    gdn_gates(f, l, bl, al, ba ? bl : NULL);
    const int64_t run_len = (T + f->n_runs - 1) / f->n_runs; /* rows per run, on average */
    fwd__par_items(f, f->n_runs * (C / S), run_len * S * hp->conv_k, conv_items, &a);
    conv_snapshots(f, il, a.u);
    struct gdn_task c = {f, &a};
    dev_parallel(f->dev, gdn_worker, &c);
    fwd__matmul(f, &l->ssm_out, a.o, T, mix);
}

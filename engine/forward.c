/*
 * forward — batched forward pass of qwen3 / qwen35 / qwen35moe / qwen3next and the MTP block
 * (math: docs/models.md section 5; state rules: docs/parallelism-and-speculation.md section 2).
 *
 * Shape of one step: every projection runs over all T rows of the batch, and the projections
 * that read the same input go to the device as one matmul_multi (q/k/v; qkv/z/beta/alpha;
 * gate/up; router + shared expert; all routed experts' gate/up, then all downs), so the input
 * is quantised once and the device splits the rows of all of them in one dispatch. The
 * sequence-dependent parts (attention over each sequence's KV rows, the causal conv and the
 * gated delta rule over each sequence's run) loop over runs; they and the per-row elementwise
 * work (norms, RoPE, gates, SwiGLU, the MoE sum) run on the device's threads when a step has
 * enough of it (par_items), and on the calling thread for decode-sized steps. The GDN
 * recurrence is the sequential f32 form, token by token, so a verify-sized batch gives exactly
 * what feeding the tokens one by one gives. The first token of a run reads its state from
 * snapshot group rs_idx, later tokens update group 0 in place; the last min(T, n_groups)
 * states are kept as snapshot groups for rollback.
 *
 * Invariants: a row's arithmetic in every op here is the same whatever else is in the batch
 * and however the work is split (the matmul kernels have their own rules, see quant.h);
 * fwd_decode/fwd_mtp allocate nothing, all buffers come from fwd__dev_create.
 * Thread: the engine thread; parallel parts run on the device's workers over disjoint slices.
 */
#include "forward_impl.h" // defines: struct fwd_dev, struct fwd_run, fwd__dev_*

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h" // defines: comm_allreduce
#include "ops.h"  // defines: kop_rmsnorm, kop_gdn_step, ...
#include "util.h" // defines: xcalloc, xaligned_alloc, dd_errf


struct fwd_dev {
    const struct model *m; /* the whole model, or this device's shard of it */
    struct dev *dev;
    struct fwd_params p;
    struct cache cache;
    struct comm *comm; /* NULL for a single device */
    int rank;
    /* per-step batch view (borrowed from the group for the duration of a step) */
    const struct fwd_batch *b;
    const struct fwd_run *runs;
    int64_t n_runs;
    bool mix_pending; /* mix holds a block output not yet added to x */
    /* activations, rows of the batch */
    float *x;      /* [T][E] residual stream */
    float *xn;     /* [T][2E] normalised input of a block (2E for the MTP concat) */
    float *mix;    /* [T][E] block output */
    float *big0;   /* [T][w0] q+gate | GDN qkv | FFN gate | shared expert gate */
    float *big1;   /* [T][w1] k | conv out | FFN up | shared expert up */
    float *big2;   /* [T][w2] v | GDN z | shared expert down */
    float *big3;   /* [T][w3] attention / GDN output before o_proj */
    float *small;  /* [T][ws] beta/alpha (or ba) logits, router logits */
    float *beta;   /* [T][Hv] */
    float *decay;  /* [T][Hv] */
    float *rope;   /* [T][n_rot] the rotation table of each row's position */
    /* MoE: the rows routed to each expert, gathered in expert order ("slots") */
    float *route_w;   /* [T][k] routing weights */
    int32_t *route_e; /* [T][k] routing experts, ascending per row */
    int32_t *slot;    /* [T][k] the slot of (row, i) */
    int32_t *e_off;   /* [Nx + 1] first slot of each expert */
    int32_t *e_row;   /* [T * k] the row of each slot */
    float *gath;      /* [T * k][E] xn rows by slot (T > 1) */
    float *eg, *eu;   /* [T * k][ff_exp] expert gate / up (then SwiGLU) by slot */
    float *eout;      /* [T * k][E] expert down projections by slot */
    float *sh_gate;   /* [T] sigmoid gate of the shared expert */
    float *hidden; /* [T][E] post-output_norm hidden of every row */
    float *hsel;   /* [T][E] rows that want logits */
    float *logits; /* [T][V] */
    int64_t n_logits;
    float *attn_scratch;    /* [n_threads][attn_scratch_n] attention scores */
    int64_t attn_scratch_n; /* n_ctx <= it <= grp * n_ctx, at most ATTN_SCRATCH when n_ctx is */
    int n_threads;
};

/* ============================================================================================
 * Helpers
 * ========================================================================================== */

static struct dev_mat mat_of(const struct model_w *w)
{
    return (struct dev_mat){.data = w->data, .type = w->type, .n_in = w->ne[0], .n_out = w->ne[1],
                            .row_bytes = w->nb1};
}

/* Expert e of a 3-D expert tensor as a matrix. */
static struct dev_mat mat_expert(const struct model_w *w, int64_t e)
{
    struct dev_mat d = mat_of(w);
    d.data = (const char *)w->data + (size_t)e * w->nb2;
    return d;
}

static struct dev_mm mm_of(const struct model_w *w, const float *x, int64_t T, float *y)
{
    return (struct dev_mm){.w = mat_of(w), .x = x, .T = T, .y = y};
}

static void matmul(struct fwd_dev *f, const struct model_w *w, const float *x, int64_t T, float *y)
{
    struct dev_mat d = mat_of(w);
    dev_matmul(f->dev, &d, x, T, y);
}

/*
 * Parallel loops over items. fn(f, arg, i0, i1) runs on each thread's contiguous share of
 * [0, n), or on the calling thread alone when the loop's work (n * work, in elements) is below
 * PAR_MIN_WORK, where a dispatch would cost more than it saves (decode-sized elementwise work).
 * What fn computes per item never depends on the split.
 */
#define PAR_MIN_WORK (1 << 15)

typedef void (*items_fn)(struct fwd_dev *f, const void *arg, int64_t i0, int64_t i1);

struct items_task {
    struct fwd_dev *f;
    items_fn fn;
    const void *arg;
    int64_t n;
};

static void items_worker(void *ctx, int ith, int nth)
{
    const struct items_task *t = ctx;
    int64_t lo, hi;
    dev_split(t->n, ith, nth, 1, &lo, &hi);
    if (lo < hi)
        t->fn(t->f, t->arg, lo, hi);
}

static void par_items(struct fwd_dev *f, int64_t n, int64_t work, items_fn fn, const void *arg)
{
    if (f->n_threads == 1 || n * work < PAR_MIN_WORK) {
        fn(f, arg, 0, n);
        return;
    }
    struct items_task t = {.f = f, .fn = fn, .arg = arg, .n = n};
    dev_parallel(f->dev, items_worker, &t);
}

/* y rows = rmsnorm(x rows) * w: rows of n elements at strides ld_x, ld_y. */
struct norm_arg {
    const float *x;
    const float *w; /* NULL: no weight */
    float *y;
    int64_t n, ld_x, ld_y;
    bool add_mix; /* first x += mix (x is f->x) */
};

static void norm_items(struct fwd_dev *f, const void *arg, int64_t t0, int64_t t1)
{
    const struct norm_arg *a = arg;
    for (int64_t t = t0; t < t1; t++) {
        if (a->add_mix)
            kop_add(f->x + t * a->n, f->mix + t * a->n, a->n);
        kop_rmsnorm(a->x + t * a->ld_x, a->w, a->y + t * a->ld_y, a->n, f->m->hp.eps);
    }
}

static void rmsnorm_rows(struct fwd_dev *f, const float *x, const struct model_w *w, float *y,
                         int64_t n, int64_t ld_x, int64_t ld_y)
{
    struct norm_arg a = {.x = x, .w = w ? w->data : NULL, .y = y, .n = n, .ld_x = ld_x,
                         .ld_y = ld_y};
    par_items(f, f->b->n_tokens, n, norm_items, &a);
}

/* The residual add of a pending block output, then y = rmsnorm(x) * w (one pass per row). */
static void add_norm(struct fwd_dev *f, const struct model_w *w, float *y)
{
    const int64_t E = f->m->hp.n_embd;
    struct norm_arg a = {.x = f->x, .w = w->data, .y = y, .n = E, .ld_x = E, .ld_y = E,
                         .add_mix = f->mix_pending};
    par_items(f, f->b->n_tokens, E, norm_items, &a);
    f->mix_pending = false;
}

static void embed_items(struct fwd_dev *f, const void *arg, int64_t t0, int64_t t1)
{
    const struct model_w *w = &f->m->tok_embd;
    float *x = (float *)arg;
    for (int64_t t = t0; t < t1; t++)
        kq_dequantize_row(w->type, (const char *)w->data + (size_t)f->b->token[t] * w->nb1,
                          x + t * w->ne[0], w->ne[0]);
}

static void embed_rows(struct fwd_dev *f, float *x)
{
    par_items(f, f->b->n_tokens, f->m->hp.n_embd, embed_items, x);
}

/* SwiGLU of n rows: g = silu(g) * u, rows of w elements. */
struct glu_arg {
    float *g;
    const float *u;
    int64_t w;
};

static void glu_items(struct fwd_dev *f, const void *arg, int64_t t0, int64_t t1)
{
    const struct glu_arg *a = arg;
    for (int64_t t = t0; t < t1; t++)
        kop_swiglu(a->g + t * a->w, a->u + t * a->w, a->w);
}

static void swiglu_rows(struct fwd_dev *f, float *g, const float *u, int64_t n, int64_t w)
{
    struct glu_arg a = {.g = g, .u = u, .w = w};
    par_items(f, n, w, glu_items, &a);
}

/* ============================================================================================
 * Gated attention (docs 5.3) and plain qwen3 attention (5.9)
 * ========================================================================================== */

struct attn_arg {
    int64_t il;
    float *q, *k, *v; /* [T][q_ld], [T][kvd], [T][kvd] */
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
        for (int64_t h = 0; h < l->n_head; h++) {
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
static void attn_layer(struct fwd_dev *f, int64_t il, const float *xn, float *mix)
{
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens, D = hp->head_dim;
    struct attn_arg a = {.il = il, .q = f->big0, .k = f->big1, .v = f->big2, .out = f->big3,
                         .q_ld = l->n_head * D * (hp->attn_gated ? 2 : 1)};
    struct dev_mm mm[3] = {mm_of(&l->wq, xn, T, a.q), /* [T][H * (2)D] */
                           mm_of(&l->wk, xn, T, a.k), /* [T][Hkv * D] */
                           mm_of(&l->wv, xn, T, a.v)};
    dev_matmul_multi(f->dev, mm, 3);
    par_items(f, T, (l->n_head + l->n_head_kv) * D, qk_items, &a);
    struct attn_task c = {f, &a};
    dev_parallel(f->dev, attn_worker, &c);
    matmul(f, &l->wo, a.out, T, mix);
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
                         yt + 2 * Hk * S + h * S, f->decay[t * Hv + h], f->beta[t * Hv + h],
                         scale, S, ot);
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
static void gdn_layer(struct fwd_dev *f, int64_t il, const float *xn, float *mix)
{
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens, C = l->conv_ch, S = hp->ssm_s, Hv = l->ssm_hv;
    struct gdn_arg a = {.il = il, .u = f->big0, .y = f->big1, .z = f->big2, .o = f->big3};
    float *bl = f->small, *al = f->small + T * Hv; /* [T][Hv] each, or ba [T][2Hv] */
    struct dev_mm mm[4] = {mm_of(&l->qkv, xn, T, f->big0),  /* [T][C] */
                           mm_of(&l->gate, xn, T, f->big2)}; /* [T][Hv*S] */
    const bool ba = hp->arch == ARCH_QWEN3NEXT;
    if (ba)
        mm[2] = mm_of(&l->ba, xn, T, bl);
    else
        mm[2] = mm_of(&l->beta, xn, T, bl), mm[3] = mm_of(&l->alpha, xn, T, al);
    dev_matmul_multi(f->dev, mm, ba ? 3 : 4);
    gdn_gates(f, l, bl, al, ba ? bl : NULL);
    const int64_t run_len = (T + f->n_runs - 1) / f->n_runs; /* rows per run, on average */
    par_items(f, f->n_runs * (C / S), run_len * S * hp->conv_k, conv_items, &a);
    conv_snapshots(f, il, a.u);
    struct gdn_task c = {f, &a};
    dev_parallel(f->dev, gdn_worker, &c);
    matmul(f, &l->ssm_out, a.o, T, mix);
}

/* ============================================================================================
 * FFN: dense SwiGLU (5.5) and MoE with a gated shared expert (5.6)
 * ========================================================================================== */

static void dense_ffn(struct fwd_dev *f, const struct model_layer *l, const float *xn, float *out)
{
    const int64_t T = f->b->n_tokens, ff = l->ffn_gate.ne[1];
    struct dev_mm mm[2] = {mm_of(&l->ffn_gate, xn, T, f->big0), mm_of(&l->ffn_up, xn, T, f->big1)};
    dev_matmul_multi(f->dev, mm, 2);
    swiglu_rows(f, f->big0, f->big1, T, ff);
    matmul(f, &l->ffn_down, f->big0, T, out);
}

/* Softmax over all experts, top-k (ties to the lower index), renormalised weights; then each
 * row's choices sorted by expert, and the slots: the rows of expert e are slots
 * e_off[e] .. e_off[e + 1] - 1, in row order. */
static void moe_route(struct fwd_dev *f, const float *logits, int64_t T)
{
    const int64_t Nx = f->m->hp.n_expert, k = f->m->hp.n_expert_used;
    for (int64_t t = 0; t < T; t++) {
        const float *lg = logits + t * Nx;
        float mx = lg[0];
        for (int64_t e = 1; e < Nx; e++)
            mx = lg[e] > mx ? lg[e] : mx;
        double sum = 0.0;
        for (int64_t e = 0; e < Nx; e++)
            sum += exp((double)lg[e] - mx);
        int32_t *sel = f->route_e + t * k;
        float *w = f->route_w + t * k;
        double wsum = 0.0;
        for (int64_t i = 0; i < k; i++) {
            int64_t best = -1;
            for (int64_t e = 0; e < Nx; e++) {
                bool taken = false;
                for (int64_t j = 0; j < i; j++)
                    taken |= sel[j] == e;
                if (!taken && (best < 0 || lg[e] > lg[best]))
                    best = e;
            }
            sel[i] = (int32_t)best;
            w[i] = (float)(exp((double)lg[best] - mx) / sum);
            wsum += w[i];
        }
        float denom = (float)(wsum > 6.1e-5 ? wsum : 6.1e-5);
        for (int64_t i = 0; i < k; i++)
            w[i] /= denom;
        for (int64_t i = 1; i < k; i++) /* insertion sort by expert, weights alongside */
            for (int64_t j = i; j > 0 && sel[j - 1] > sel[j]; j--) {
                int32_t te = sel[j];
                float tw = w[j];
                sel[j] = sel[j - 1], w[j] = w[j - 1];
                sel[j - 1] = te, w[j - 1] = tw;
            }
    }
    memset(f->e_off, 0, (size_t)(Nx + 1) * sizeof *f->e_off);
    for (int64_t i = 0; i < T * k; i++)
        f->e_off[f->route_e[i] + 1]++;
    for (int64_t e = 0; e < Nx; e++)
        f->e_off[e + 1] += f->e_off[e];
    for (int64_t t = 0; t < T; t++) /* rows in order: each expert's slots follow row order */
        for (int64_t i = 0; i < k; i++) {
            int32_t s = f->e_off[f->route_e[t * k + i]]++;
            f->slot[t * k + i] = s;
            f->e_row[s] = (int32_t)t;
        }
    for (int64_t e = Nx; e > 0; e--) /* the increments moved every start to the next one's */
        f->e_off[e] = f->e_off[e - 1];
    f->e_off[0] = 0;
}

static void gather_items(struct fwd_dev *f, const void *arg, int64_t s0, int64_t s1)
{
    const float *xn = arg;
    const int64_t E = f->m->hp.n_embd;
    for (int64_t s = s0; s < s1; s++)
        memcpy(f->gath + s * E, xn + f->e_row[s] * E, (size_t)E * sizeof(float));
}

/* Per row: the shared expert's output times its sigmoid gate, then the routed experts'
 * outputs by weight, in expert order. */
static void combine_items(struct fwd_dev *f, const void *arg, int64_t t0, int64_t t1)
{
    const int64_t E = f->m->hp.n_embd, k = f->m->hp.n_expert_used;
    float *out = (float *)arg;
    for (int64_t t = t0; t < t1; t++) {
        const float s = f->sh_gate[t];
        float *o = out + t * E;
        const float *sh = f->big2 + t * E;
        for (int64_t i = 0; i < E; i++)
            o[i] = sh[i] * s;
        for (int64_t i = 0; i < k; i++)
            kop_axpy(o, f->route_w[t * k + i], f->eout + f->slot[t * k + i] * E, E);
    }
}

/* The products of every expert with rows: gate and up from its gathered slots (down = false;
 * a decode row reads xn itself), or down from its SwiGLU rows plus the shared expert's down
 * (down = true); in calls of at most DEV_MM_MAX products. */
static void moe_experts(struct fwd_dev *f, const struct model_layer *l, const float *xn,
                        bool down)
{
    const int64_t E = f->m->hp.n_embd, ff = l->gate_exps.ne[1], T = f->b->n_tokens;
    struct dev_mm mm[DEV_MM_MAX];
    int n = 0;
    for (int64_t e = 0; e < f->m->hp.n_expert; e++) {
        const int64_t s0 = f->e_off[e], ns = f->e_off[e + 1] - s0;
        if (ns == 0)
            continue;
        if (n + 2 > DEV_MM_MAX) {
            dev_matmul_multi(f->dev, mm, n);
            n = 0;
        }
        if (down) {
            mm[n++] = (struct dev_mm){mat_expert(&l->down_exps, e), f->eg + s0 * ff, ns,
                                      f->eout + s0 * E};
        } else {
            const float *x = T == 1 ? xn : f->gath + s0 * E; /* decode: every expert reads xn */
            mm[n++] = (struct dev_mm){mat_expert(&l->gate_exps, e), x, ns, f->eg + s0 * ff};
            mm[n++] = (struct dev_mm){mat_expert(&l->up_exps, e), x, ns, f->eu + s0 * ff};
        }
    }
    if (down && n + 1 > DEV_MM_MAX) {
        dev_matmul_multi(f->dev, mm, n);
        n = 0;
    }
    if (down) /* the shared expert's down projection rides along */
        mm[n++] = mm_of(&l->down_shexp, f->big0, T, f->big2);
    dev_matmul_multi(f->dev, mm, n);
}

/*
 * Router and the shared expert's gate/up in one device call; routing; the routed rows
 * gathered by expert; every active expert's gate/up in one call, SwiGLU, every down (and the
 * shared down) in one call; then the weighted sum per row. Only routed experts are read.
 */
static void moe_ffn(struct fwd_dev *f, const struct model_layer *l, const float *xn, float *out)
{
    const struct model_hparams *hp = &f->m->hp;
    const int64_t T = f->b->n_tokens, E = hp->n_embd, k = hp->n_expert_used;
    const int64_t ffs = l->gate_shexp.ne[1], ff = l->gate_exps.ne[1];
    struct dev_mm mm[3] = {mm_of(&l->gate_inp, xn, T, f->small), /* [T][Nx] router logits */
                           mm_of(&l->gate_shexp, xn, T, f->big0),
                           mm_of(&l->up_shexp, xn, T, f->big1)};
    dev_matmul_multi(f->dev, mm, 3);
    moe_route(f, f->small, T);
    const float *wsh = l->gate_inp_shexp.data;
    for (int64_t t = 0; t < T; t++) {
        double dot = 0.0;
        for (int64_t i = 0; i < E; i++)
            dot += (double)wsh[i] * xn[t * E + i];
        f->sh_gate[t] = kop_sigmoid((float)dot);
    }
    if (T > 1)
        par_items(f, T * k, E, gather_items, xn);
    moe_experts(f, l, xn, false);
    swiglu_rows(f, f->eg, f->eu, T * k, ff);
    swiglu_rows(f, f->big0, f->big1, T, ffs);
    moe_experts(f, l, xn, true);
    par_items(f, T, E * (k + 1), combine_items, out);
}

static void ffn(struct fwd_dev *f, const struct model_layer *l, const float *xn, float *out)
{
    if (f->m->hp.n_expert)
        moe_ffn(f, l, xn, out);
    else
        dense_ffn(f, l, xn, out);
}

/* ============================================================================================
 * The spine of one device's step
 * ========================================================================================== */

/* Sum a partial [T][E] block over the devices of the group (no-op on a single device). */
static void reduce(struct fwd_dev *f, float *buf, int64_t n)
{
    if (f->comm)
        comm_allreduce(f->comm, f->rank, buf, n);
}

/* The rotation table of every row's position, shared by all attention layers of the step. */
static void rope_tables(struct fwd_dev *f)
{
    const struct model_hparams *hp = &f->m->hp;
    for (int64_t t = 0; t < f->b->n_tokens; t++)
        kop_rope_table(hp->n_rot, f->b->pos[t], hp->rope_base, f->rope + t * hp->n_rot);
}

/* Final norm (every row, kept as the MTP input) and the LM head for the rows asked for. */
static void output_head(struct fwd_dev *f, const struct model_w *norm)
{
    const struct fwd_batch *b = f->b;
    const int64_t E = f->m->hp.n_embd;
    add_norm(f, norm, f->hidden);
    f->n_logits = 0;
    for (int64_t t = 0; t < b->n_tokens; t++) {
        bool last = t + 1 == b->n_tokens || b->seq[t + 1] != b->seq[t];
        bool want = b->logits ? b->logits[t] != 0 : last;
        if (want)
            memcpy(f->hsel + f->n_logits++ * E, f->hidden + t * E, (size_t)E * sizeof(float));
    }
    if (f->n_logits)
        matmul(f, &f->m->output, f->hsel, f->n_logits, f->logits);
}

/* One decoder block on the residual stream f->x: mixer then FFN, both pre-normed. The FFN's
 * output is left in f->mix (mix_pending) for the next norm to add. */
static void block(struct fwd_dev *f, int64_t il)
{
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens, E = f->m->hp.n_embd;
    add_norm(f, &l->attn_norm, f->xn);
    bool empty = l->recurrent ? l->ssm_hk == 0 : l->n_head_kv == 0; /* a zero-size shard */
    if (empty)
        memset(f->mix, 0, (size_t)(T * E) * sizeof(float));
    else if (l->recurrent)
        gdn_layer(f, il, f->xn, f->mix);
    else
        attn_layer(f, il, f->xn, f->mix);
    reduce(f, f->mix, T * E); /* allreduce #1: after the mixer's output projection */
    f->mix_pending = true;
    add_norm(f, &l->ffn_norm, f->xn);
    ffn(f, l, f->xn, f->mix);
    reduce(f, f->mix, T * E); /* allreduce #2: after the FFN (MoE: after the weighted sum) */
    f->mix_pending = true;
}

void fwd__dev_decode(struct fwd_dev *f, const struct fwd_batch *b, const struct fwd_run *runs,
                     int64_t n_runs)
{
    f->b = b;
    f->runs = runs;
    f->n_runs = n_runs;
    f->mix_pending = false;
    embed_rows(f, f->x);
    rope_tables(f);
    for (int64_t il = 0; il < f->m->hp.n_layer; il++)
        block(f, il);
    output_head(f, &f->m->output_norm);
    for (int64_t r = 0; r < f->n_runs; r++)
        cache_seq_advanced(&f->cache, f->runs[r].seq, f->runs[r].t1 - f->runs[r].t0);
    f->b = NULL;
}

void fwd__dev_mtp(struct fwd_dev *f, const struct fwd_batch *b, const struct fwd_run *runs,
                  int64_t n_runs, const float *h_prev)
{
    const struct model_hparams *hp = &f->m->hp;
    f->b = b;
    f->runs = runs;
    f->n_runs = n_runs;
    f->mix_pending = false;
    const int64_t T = b->n_tokens, E = hp->n_embd, il = hp->n_layer;
    const struct model_layer *l = &f->m->layers[il];
    /* c = [enorm(embed(x_p)) | hnorm(h_{p-1})] -> eh_proj -> one decoder block */
    embed_rows(f, f->mix);
    rope_tables(f);
    rmsnorm_rows(f, f->mix, &l->enorm, f->xn, E, E, 2 * E);
    rmsnorm_rows(f, h_prev, &l->hnorm, f->xn + E, E, E, 2 * E);
    matmul(f, &l->eh_proj, f->xn, T, f->x);
    block(f, il);
    output_head(f, l->shared_head_norm.data ? &l->shared_head_norm : &f->m->output_norm);
    f->b = NULL;
}

/* ============================================================================================
 * Lifecycle
 * ========================================================================================== */

/* Attention scores per thread (floats): a whole query-head group at the usual depths, one head
 * at a time at the longest ones. */
#define ATTN_SCRATCH (256 << 10)

static int64_t max3(int64_t a, int64_t b, int64_t c)
{
    int64_t m = a > b ? a : b;
    return m > c ? m : c;
}

/* Activation scratch the matmul_multi calls of a step of T rows need at most: the products
 * that read xn (each with T rows, one list per layer kind), and MoE's expert calls (T * k
 * routed rows of gate/up, each counted twice as gate and up could differ in format, and of
 * down plus the shared expert's T rows; 64 bytes of alignment per product). */
static size_t multi_act_bytes(const struct model *m, int64_t T)
{
    const struct model_hparams *hp = &m->hp;
    const int64_t k = hp->n_expert_used;
    size_t need = 0;
    for (int64_t il = 0; il < hp->n_layer_all; il++) {
        const struct model_layer *l = &m->layers[il];
        const struct model_w *xn_mats[] = {&l->wq, &l->wk, &l->wv, &l->qkv, &l->gate, &l->beta,
                                           &l->alpha, &l->ba, &l->ffn_gate, &l->ffn_up,
                                           &l->gate_inp, &l->gate_shexp, &l->up_shexp};
        struct dev_mm mm[13];
        int n = 0;
        for (size_t i = 0; i < sizeof xn_mats / sizeof xn_mats[0]; i++)
            if (xn_mats[i]->data)
                mm[n++] = mm_of(xn_mats[i], NULL, T, NULL);
        size_t b = dev_mm_act_bytes(mm, n);
        if (hp->n_expert && l->gate_exps.data) {
            size_t up = 2 * (size_t)(T * k) * kq_act_row_bytes(l->gate_exps.type, hp->n_embd);
            size_t down =
                (size_t)(T * k) * kq_act_row_bytes(l->down_exps.type, l->down_exps.ne[0]) +
                (size_t)T * kq_act_row_bytes(l->down_shexp.type, l->down_shexp.ne[0]);
            up = up > down ? up : down;
            b = b > up + 64 * DEV_MM_MAX ? b : up + 64 * DEV_MM_MAX;
        }
        need = need > b ? need : b;
    }
    return need;
}

int fwd__dev_create(const struct model *m, struct dev *d, const struct fwd_params *p,
                    struct comm *comm, int rank, struct fwd_dev **out, char *err, size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    if (p->max_tokens < 1 || p->n_seq < 1 || p->n_ctx < 1 || p->draft_max < 0 ||
        p->draft_max > 64) {
        dd_errf(err, errlen, "invalid forward parameters (max_tokens %lld, n_seq %lld, n_ctx "
                "%lld, draft_max %lld)", (long long)p->max_tokens, (long long)p->n_seq,
                (long long)p->n_ctx, (long long)p->draft_max);
        return DD_EINVAL;
    }
    struct fwd_dev *f = xcalloc(1, sizeof *f);
    f->m = m;
    f->dev = d;
    f->p = *p;
    f->comm = comm;
    f->rank = rank;
    int rc = cache_create(&f->cache, m, p->n_seq, p->n_ctx, p->draft_max, err, errlen);
    if (rc) {
        free(f);
        return rc;
    }
    const int64_t T = p->max_tokens, E = hp->n_embd, Hv = hp->ssm_hv, S = hp->ssm_s;
    const int64_t q_out = hp->n_head * hp->head_dim * 2, kv = hp->n_head_kv * hp->head_dim;
    const int64_t ff = max3(hp->n_ff, hp->n_ff_exp, hp->n_ff_shexp);
    const int64_t w0 = max3(q_out, hp->conv_ch, ff), w1 = max3(kv, hp->conv_ch, ff);
    const int64_t w2 = max3(max3(kv, Hv * S, 2 * Hv), hp->n_expert ? E : 1, 1);
    const int64_t w3 = max3(hp->n_head * hp->head_dim, Hv * S, 1);
    const int64_t ws = max3(2 * Hv, hp->n_expert, 1), k = hp->n_expert_used ? hp->n_expert_used : 1;
    const int64_t Tk = hp->n_expert ? T * k : 1, ffx = hp->n_expert ? hp->n_ff_exp : 1;
    const int64_t grp = hp->n_head_kv ? hp->n_head / hp->n_head_kv : 1;
    f->n_threads = dev_n_threads(d);
    f->x = xaligned_alloc((size_t)(T * E) * sizeof(float));
    f->xn = xaligned_alloc((size_t)(T * 2 * E) * sizeof(float));
    f->mix = xaligned_alloc((size_t)(T * E) * sizeof(float));
    f->big0 = xaligned_alloc((size_t)(T * w0) * sizeof(float));
    f->big1 = xaligned_alloc((size_t)(T * w1) * sizeof(float));
    f->big2 = xaligned_alloc((size_t)(T * w2) * sizeof(float));
    f->big3 = xaligned_alloc((size_t)(T * w3) * sizeof(float));
    f->small = xaligned_alloc((size_t)(T * ws) * sizeof(float));
    f->beta = xaligned_alloc((size_t)(T * (Hv ? Hv : 1)) * sizeof(float));
    f->decay = xaligned_alloc((size_t)(T * (Hv ? Hv : 1)) * sizeof(float));
    f->rope = xaligned_alloc((size_t)(T * hp->n_rot) * sizeof(float));
    f->route_w = xcalloc((size_t)(T * k), sizeof(float));
    f->route_e = xcalloc((size_t)(T * k), sizeof(int32_t));
    f->slot = xcalloc((size_t)(T * k), sizeof(int32_t));
    f->e_off = xcalloc((size_t)(hp->n_expert + 1), sizeof(int32_t));
    f->e_row = xcalloc((size_t)(T * k), sizeof(int32_t));
    f->gath = xaligned_alloc((size_t)(Tk * E) * sizeof(float));
    f->eg = xaligned_alloc((size_t)(Tk * ffx) * sizeof(float));
    f->eu = xaligned_alloc((size_t)(Tk * ffx) * sizeof(float));
    f->eout = xaligned_alloc((size_t)(Tk * E) * sizeof(float));
    f->sh_gate = xaligned_alloc((size_t)T * sizeof(float));
    f->hidden = xaligned_alloc((size_t)(T * E) * sizeof(float));
    f->hsel = xaligned_alloc((size_t)(T * E) * sizeof(float));
    f->logits = xaligned_alloc((size_t)(T * hp->n_vocab) * sizeof(float));
    f->attn_scratch_n = grp * p->n_ctx < ATTN_SCRATCH ? grp * p->n_ctx : ATTN_SCRATCH;
    f->attn_scratch_n = f->attn_scratch_n > p->n_ctx ? f->attn_scratch_n : p->n_ctx;
    f->attn_scratch = xaligned_alloc((size_t)(f->n_threads * f->attn_scratch_n) * sizeof(float));
    int64_t max_in = max3(2 * E, ff, max3(hp->n_head * hp->head_dim, Hv * S, 1));
    rc = dev_reserve(d, T, max_in);
    rc = rc ? rc : dev_reserve_multi(d, multi_act_bytes(m, T));
    if (rc) {
        dd_errf(err, errlen, "device: cannot reserve scratch for %lld tokens", (long long)T);
        fwd__dev_destroy(f);
        return rc;
    }
    *out = f;
    return 0;
}

void fwd__dev_destroy(struct fwd_dev *f)
{
    if (!f)
        return;
    cache_destroy(&f->cache);
    void *bufs[] = {f->x,      f->xn,      f->mix,     f->big0,  f->big1,   f->big2,
                    f->big3,   f->small,   f->beta,    f->decay, f->rope,   f->route_w,
                    f->route_e, f->slot,   f->e_off,   f->e_row, f->gath,   f->eg,
                    f->eu,     f->eout,    f->sh_gate, f->hidden, f->hsel,  f->logits,
                    f->attn_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(f);
}

struct cache *fwd__dev_cache(struct fwd_dev *f)
{
    return &f->cache;
}

const float *fwd__dev_logits(const struct fwd_dev *f, int64_t *n_rows)
{
    *n_rows = f->n_logits;
    return f->logits;
}

const float *fwd__dev_hidden(const struct fwd_dev *f)
{
    return f->hidden;
}

const struct model *fwd__dev_model(const struct fwd_dev *f)
{
    return f->m;
}

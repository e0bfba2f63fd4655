/*
 * forward — batched forward pass of qwen3 / qwen35 / qwen35moe / qwen3next and the MTP block
 * (math: docs/models.md section 5; state rules: docs/parallelism-and-speculation.md section 2).
 *
 * Shape of one step: every projection is one device matmul over all T rows of the batch; the
 * sequence-dependent parts (attention over each sequence's KV rows, the causal conv and the
 * gated delta rule over each sequence's run) loop over runs. The GDN recurrence is the
 * sequential f32 form, token by token, so a verify-sized batch gives exactly what feeding the
 * tokens one by one gives. The first token of a run reads its state from snapshot group
 * rs_idx, later tokens update group 0 in place; the last min(T, n_groups) states are kept as
 * snapshot groups for rollback.
 *
 * Invariant: fwd_decode/fwd_mtp allocate nothing; all buffers come from fwd_create.
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
    /* activations, rows of the batch */
    float *x;      /* [T][E] residual stream */
    float *xn;     /* [T][2E] normalised input of a block (2E for the MTP concat) */
    float *mix;    /* [T][E] block output */
    float *big0;   /* [T][w0] q+gate | GDN qkv | FFN gate | expert gate */
    float *big1;   /* [T][w1] k | conv out | FFN up | expert up */
    float *big2;   /* [T][w2] v | GDN z */
    float *big3;   /* [T][w3] attention / GDN output before o_proj */
    float *small;  /* [T][ws] beta/alpha logits, router logits */
    float *beta;   /* [T][Hv] */
    float *decay;  /* [T][Hv] */
    float *gath;   /* [T][E] MoE rows gathered for one expert */
    float *eout;   /* [T][E] one expert's down projection */
    float *route_w; /* [T][k] routing weights */
    int32_t *route_e; /* [T][k] routing experts */
    int32_t *erows;   /* [T] rows routed to the current expert */
    float *erw;       /* [T] their weights */
    float *hidden; /* [T][E] post-output_norm hidden of every row */
    float *hsel;   /* [T][E] rows that want logits */
    float *logits; /* [T][V] */
    int64_t n_logits;
    float *attn_scratch; /* [n_threads][n_ctx] */
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

static void matmul(struct fwd_dev *f, const struct model_w *w, const float *x, int64_t T, float *y)
{
    struct dev_mat d = mat_of(w);
    dev_matmul(f->dev, &d, x, T, y);
}

static void rmsnorm_rows(const float *x, const struct model_w *w, float *y, int64_t T, int64_t n,
                         int64_t ld_x, int64_t ld_y, float eps)
{
    for (int64_t t = 0; t < T; t++)
        kop_rmsnorm(x + t * ld_x, w ? (const float *)w->data : NULL, y + t * ld_y, n, eps);
}

static void add_rows(float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}

static void embed_rows(struct fwd_dev *f, const int32_t *tokens, int64_t T, float *x)
{
    const struct model_w *w = &f->m->tok_embd;
    for (int64_t t = 0; t < T; t++)
        kq_dequantize_row(w->type, (const char *)w->data + (size_t)tokens[t] * w->nb1,
                          x + t * w->ne[0], w->ne[0]);
}

/* ============================================================================================
 * Gated attention (docs 5.3) and plain qwen3 attention (5.9)
 * ========================================================================================== */

struct attn_task {
    struct fwd_dev *f;
    int64_t il;
    const float *q;  /* [T][q_ld] q rows (gate interleaved when gated) */
    int64_t q_ld;
    float *out;      /* [T][H*D] */
};

static void attn_worker(void *ctx, int ith, int nth)
{
    struct attn_task *a = ctx;
    struct fwd_dev *f = a->f;
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[a->il];
    const int64_t H = l->n_head, D = hp->head_dim, grp = hp->n_head / hp->n_head_kv;
    const int64_t qstride = hp->attn_gated ? 2 * D : D;
    const int64_t kvd = f->cache.kv_dim[a->il];
    float *scratch = f->attn_scratch + (size_t)ith * f->p.n_ctx;
    int64_t lo, hi;
    dev_split(f->b->n_tokens * H, ith, nth, 1, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        int64_t t = i / H, h = i % H, j = h / grp;
        int64_t s = f->b->seq[t], pos = f->b->pos[t];
        const float *k = cache_k(&f->cache, a->il, s) + j * D;
        const float *v = cache_v(&f->cache, a->il, s) + j * D;
        kop_attn_head(a->q + t * a->q_ld + h * qstride, k, v, kvd, pos + 1, D, hp->attn_scale,
                      scratch, a->out + t * H * D + h * D);
    }
}

/* q/k norm + RoPE on the new rows, store K/V, attend, gate, project: xn [T][E] -> mix [T][E]. */
static void attn_layer(struct fwd_dev *f, int64_t il, const float *xn, float *mix)
{
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens, H = l->n_head, Hkv = l->n_head_kv, D = hp->head_dim;
    const int64_t q_ld = H * D * (hp->attn_gated ? 2 : 1), kvd = Hkv * D;
    const int64_t qstride = hp->attn_gated ? 2 * D : D;
    float *q = f->big0, *k = f->big1, *v = f->big2, *o = f->big3;
    matmul(f, &l->wq, xn, T, q); /* [T][H * (2)D] */
    matmul(f, &l->wk, xn, T, k); /* [T][Hkv * D] */
    matmul(f, &l->wv, xn, T, v); /* [T][Hkv * D] */
    for (int64_t t = 0; t < T; t++) {
        int64_t pos = f->b->pos[t], s = f->b->seq[t];
        for (int64_t h = 0; h < H; h++) {
            float *qh = q + t * q_ld + h * qstride;
            kop_rmsnorm(qh, l->q_norm.data, qh, D, hp->eps);
            kop_rope_neox(qh, hp->n_rot, pos, hp->rope_base);
        }
        for (int64_t j = 0; j < Hkv; j++) {
            float *kj = k + t * kvd + j * D;
            kop_rmsnorm(kj, l->k_norm.data, kj, D, hp->eps);
            kop_rope_neox(kj, hp->n_rot, pos, hp->rope_base);
        }
        memcpy(cache_k(&f->cache, il, s) + pos * kvd, k + t * kvd, (size_t)kvd * sizeof(float));
        memcpy(cache_v(&f->cache, il, s) + pos * kvd, v + t * kvd, (size_t)kvd * sizeof(float));
    }
    struct attn_task task = {.f = f, .il = il, .q = q, .q_ld = q_ld, .out = o};
    dev_parallel(f->dev, attn_worker, &task);
    if (hp->attn_gated) {
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                const float *g = q + t * q_ld + h * 2 * D + D;
                float *oh = o + t * H * D + h * D;
                for (int64_t d = 0; d < D; d++)
                    oh[d] *= kop_sigmoid(g[d]);
            }
    }
    matmul(f, &l->wo, o, T, mix);
}

/* ============================================================================================
 * Gated DeltaNet (docs 5.4, 5.7)
 * ========================================================================================== */

struct gdn_task {
    struct fwd_dev *f;
    int64_t il;
    const float *y; /* [T][C] conv output: q | k | v, q and k already L2-normalised */
    float *o;       /* [T][Hv*S] */
};

/* Items = (run, value head); each runs the recurrence over its run's tokens. */
static void gdn_worker(void *ctx, int ith, int nth)
{
    struct gdn_task *g = ctx;
    struct fwd_dev *f = g->f;
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[g->il];
    const int64_t Hv = l->ssm_hv, Hk = l->ssm_hk, S = hp->ssm_s, C = l->conv_ch;
    const int64_t r = Hv / Hk;
    const float scale = 1.0f / sqrtf((float)S);
    int64_t lo, hi;
    dev_split(f->n_runs * Hv, ith, nth, 1, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        const struct fwd_run *ru = &f->runs[i / Hv];
        const int64_t h = i % Hv, kh = hp->kmap_mod ? h % Hk : h / r;
        const int64_t src_g = f->cache.rs_idx[ru->seq];
        float *M = cache_ssm(&f->cache, g->il, 0, ru->seq) + h * S * S;
        const float *M_in = cache_ssm(&f->cache, g->il, src_g, ru->seq) + h * S * S;
        for (int64_t t = ru->t0; t < ru->t1; t++) {
            const float *yt = g->y + t * C;
            kop_gdn_step(M, t == ru->t0 ? M_in : M, yt + kh * S, yt + Hk * S + kh * S,
                         yt + 2 * Hk * S + h * S, f->decay[t * Hv + h], f->beta[t * Hv + h],
                         scale, S, g->o + t * Hv * S + h * S);
            int64_t back = ru->t1 - 1 - t; /* this state is `back` tokens before the end */
            if (back >= 1 && back < f->cache.n_groups)
                memcpy(cache_ssm(&f->cache, g->il, back, ru->seq) + h * S * S, M,
                       (size_t)(S * S) * sizeof(float));
        }
    }
}

/* beta and decay per (row, value head) from the b / alpha projections. */
static void gdn_gates(struct fwd_dev *f, const struct model_layer *l, const float *xn)
{
    const struct model_hparams *hp = &f->m->hp;
    const int64_t T = f->b->n_tokens, Hv = l->ssm_hv, r = Hv / l->ssm_hk;
    float *bl = f->small, *al = f->small + T * Hv; /* [T][Hv] each */
    if (hp->arch == ARCH_QWEN3NEXT) {
        float *ba = f->big2; /* [T][2Hv], grouped per key head: [b (r) | a (r)] */
        matmul(f, &l->ba, xn, T, ba);
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < Hv; h++) {
                int64_t gk = h / r, j = h % r;
                bl[t * Hv + h] = ba[t * 2 * Hv + 2 * r * gk + j];
                al[t * Hv + h] = ba[t * 2 * Hv + 2 * r * gk + r + j];
            }
    } else {
        matmul(f, &l->beta, xn, T, bl);
        matmul(f, &l->alpha, xn, T, al);
    }
    const float *a_log = l->ssm_a.data, *dt = l->dt_bias.data;
    for (int64_t i = 0; i < T * Hv; i++) {
        int64_t h = i % Hv;
        f->beta[i] = kop_sigmoid(bl[i]);
        f->decay[i] = expf(a_log[h] * kop_softplus(al[i] + dt[h]));
    }
}

/* Causal conv over each run, then the conv-state snapshot windows. u [T][C] -> y [T][C]. */
static void gdn_conv(struct fwd_dev *f, int64_t il, const struct model_layer *l, const float *u,
                     float *y)
{
    const struct model_hparams *hp = &f->m->hp;
    const int64_t C = l->conv_ch, K = hp->conv_k, G = f->cache.n_groups;
    for (int64_t ri = 0; ri < f->n_runs; ri++) {
        const struct fwd_run *ru = &f->runs[ri];
        const int64_t T = ru->t1 - ru->t0, src_g = f->cache.rs_idx[ru->seq];
        const float *src = cache_conv(&f->cache, il, src_g, ru->seq);
        kop_conv1d_silu(src, u + ru->t0 * C, l->conv.data, T, C, K, 0, C, y + ru->t0 * C);
        /* snapshot windows: groups other than the source first, the source group last, so
         * every window still reads an intact source */
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

static void gdn_layer(struct fwd_dev *f, int64_t il, const float *xn, float *mix)
{
    const struct model_hparams *hp = &f->m->hp;
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens, C = l->conv_ch, S = hp->ssm_s;
    const int64_t Hk = l->ssm_hk, Hv = l->ssm_hv;
    float *u = f->big0, *y = f->big1, *z = f->big2, *o = f->big3;
    matmul(f, &l->qkv, xn, T, u); /* [T][C] */
    gdn_gates(f, l, xn);          /* uses big2 as scratch before z is computed */
    matmul(f, &l->gate, xn, T, z); /* [T][Hv*S] */
    gdn_conv(f, il, l, u, y);
    for (int64_t t = 0; t < T; t++)
        for (int64_t g = 0; g < 2 * Hk; g++) /* q heads then k heads */
            kop_l2norm(y + t * C + g * S, S, hp->eps);
    struct gdn_task task = {.f = f, .il = il, .y = y, .o = o};
    dev_parallel(f->dev, gdn_worker, &task);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hv; h++) {
            float *oh = o + t * Hv * S + h * S;
            const float *zh = z + t * Hv * S + h * S;
            kop_rmsnorm(oh, l->ssm_norm.data, oh, S, hp->eps);
            for (int64_t d = 0; d < S; d++)
                oh[d] *= kop_silu(zh[d]);
        }
    matmul(f, &l->ssm_out, o, T, mix);
}

/* ============================================================================================
 * FFN: dense SwiGLU (5.5) and MoE with a gated shared expert (5.6)
 * ========================================================================================== */

static void swiglu_mlp(struct fwd_dev *f, const struct dev_mat *gate, const struct dev_mat *up,
                       const struct dev_mat *down, const float *x, int64_t T, float *out)
{
    float *g = f->big0, *u = f->big1;
    dev_matmul(f->dev, gate, x, T, g);
    dev_matmul(f->dev, up, x, T, u);
    for (int64_t t = 0; t < T; t++)
        kop_swiglu(g + t * gate->n_out, u + t * gate->n_out, gate->n_out);
    dev_matmul(f->dev, down, g, T, out);
}

/* Softmax over all experts, top-k (ties to the lower index), renormalised weights. */
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
    }
}

static void moe_ffn(struct fwd_dev *f, const struct model_layer *l, const float *xn, float *out)
{
    const struct model_hparams *hp = &f->m->hp;
    const int64_t T = f->b->n_tokens, E = hp->n_embd, Nx = hp->n_expert, k = hp->n_expert_used;
    matmul(f, &l->gate_inp, xn, T, f->small); /* [T][Nx] router logits */
    moe_route(f, f->small, T);
    /* shared expert first: it writes out, routed experts accumulate into it */
    struct dev_mat sg = mat_of(&l->gate_shexp), su = mat_of(&l->up_shexp);
    struct dev_mat sd = mat_of(&l->down_shexp);
    swiglu_mlp(f, &sg, &su, &sd, xn, T, out);
    const float *wsh = l->gate_inp_shexp.data;
    for (int64_t t = 0; t < T; t++) {
        double dot = 0.0;
        for (int64_t i = 0; i < E; i++)
            dot += (double)wsh[i] * xn[t * E + i];
        float s = kop_sigmoid((float)dot);
        for (int64_t i = 0; i < E; i++)
            out[t * E + i] *= s;
    }
    /* routed experts: gather the rows of each expert, run it once over them */
    for (int64_t e = 0; e < Nx; e++) {
        int64_t n = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < k; i++)
                if (f->route_e[t * k + i] == e) {
                    f->erows[n] = (int32_t)t;
                    f->erw[n] = f->route_w[t * k + i];
                    memcpy(f->gath + n * E, xn + t * E, (size_t)E * sizeof(float));
                    n++;
                }
        if (n == 0)
            continue;
        struct dev_mat g = mat_expert(&l->gate_exps, e), u = mat_expert(&l->up_exps, e);
        struct dev_mat d = mat_expert(&l->down_exps, e);
        swiglu_mlp(f, &g, &u, &d, f->gath, n, f->eout);
        for (int64_t i = 0; i < n; i++)
            kop_axpy(out + f->erows[i] * E, f->erw[i], f->eout + i * E, E);
    }
}

static void ffn(struct fwd_dev *f, const struct model_layer *l, const float *xn, float *out)
{
    if (f->m->hp.n_expert) {
        moe_ffn(f, l, xn, out);
        return;
    }
    struct dev_mat g = mat_of(&l->ffn_gate), u = mat_of(&l->ffn_up), d = mat_of(&l->ffn_down);
    swiglu_mlp(f, &g, &u, &d, xn, f->b->n_tokens, out);
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

/* Final norm (every row, kept as the MTP input) and the LM head for the rows asked for. */
static void output_head(struct fwd_dev *f, const struct model_w *norm)
{
    const struct fwd_batch *b = f->b;
    const int64_t E = f->m->hp.n_embd;
    rmsnorm_rows(f->x, norm, f->hidden, b->n_tokens, E, E, E, f->m->hp.eps);
    f->n_logits = 0;
    for (int64_t t = 0; t < b->n_tokens; t++) {
        bool want = b->logits ? b->logits[t] != 0 : (t + 1 == b->n_tokens || b->seq[t + 1] != b->seq[t]);
        if (want)
            memcpy(f->hsel + f->n_logits++ * E, f->hidden + t * E, (size_t)E * sizeof(float));
    }
    if (f->n_logits)
        matmul(f, &f->m->output, f->hsel, f->n_logits, f->logits);
}

/* One decoder block on the residual stream f->x: mixer then FFN, both pre-normed. */
static void block(struct fwd_dev *f, int64_t il)
{
    const struct model_layer *l = &f->m->layers[il];
    const int64_t T = f->b->n_tokens, E = f->m->hp.n_embd;
    rmsnorm_rows(f->x, &l->attn_norm, f->xn, T, E, E, E, f->m->hp.eps);
    bool empty = l->recurrent ? l->ssm_hk == 0 : l->n_head_kv == 0; /* a zero-size shard */
    if (empty)
        memset(f->mix, 0, (size_t)(T * E) * sizeof(float));
    else if (l->recurrent)
        gdn_layer(f, il, f->xn, f->mix);
    else
        attn_layer(f, il, f->xn, f->mix);
    reduce(f, f->mix, T * E); /* allreduce #1: after the mixer's output projection */
    add_rows(f->x, f->mix, T * E);
    rmsnorm_rows(f->x, &l->ffn_norm, f->xn, T, E, E, E, f->m->hp.eps);
    ffn(f, l, f->xn, f->mix);
    reduce(f, f->mix, T * E); /* allreduce #2: after the FFN (MoE: after the weighted sum) */
    add_rows(f->x, f->mix, T * E);
}

void fwd__dev_decode(struct fwd_dev *f, const struct fwd_batch *b, const struct fwd_run *runs,
                     int64_t n_runs)
{
    f->b = b;
    f->runs = runs;
    f->n_runs = n_runs;
    embed_rows(f, b->token, b->n_tokens, f->x);
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
    const int64_t T = b->n_tokens, E = hp->n_embd, il = hp->n_layer;
    const struct model_layer *l = &f->m->layers[il];
    /* c = [enorm(embed(x_p)) | hnorm(h_{p-1})] -> eh_proj -> one decoder block */
    embed_rows(f, b->token, T, f->mix);
    rmsnorm_rows(f->mix, &l->enorm, f->xn, T, E, E, 2 * E, hp->eps);
    rmsnorm_rows(h_prev, &l->hnorm, f->xn + E, T, E, E, 2 * E, hp->eps);
    matmul(f, &l->eh_proj, f->xn, T, f->x);
    block(f, il);
    output_head(f, l->shared_head_norm.data ? &l->shared_head_norm : &f->m->output_norm);
    f->b = NULL;
}

/* ============================================================================================
 * Lifecycle
 * ========================================================================================== */

static int64_t max3(int64_t a, int64_t b, int64_t c)
{
    int64_t m = a > b ? a : b;
    return m > c ? m : c;
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
    const int64_t w2 = max3(kv, Hv * S, 2 * Hv), w3 = max3(hp->n_head * hp->head_dim, Hv * S, 1);
    const int64_t ws = max3(2 * Hv, hp->n_expert, 1), k = hp->n_expert_used ? hp->n_expert_used : 1;
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
    f->gath = xaligned_alloc((size_t)(T * E) * sizeof(float));
    f->eout = xaligned_alloc((size_t)(T * E) * sizeof(float));
    f->route_w = xcalloc((size_t)(T * k), sizeof(float));
    f->route_e = xcalloc((size_t)(T * k), sizeof(int32_t));
    f->erows = xcalloc((size_t)T, sizeof(int32_t));
    f->erw = xcalloc((size_t)T, sizeof(float));
    f->hidden = xaligned_alloc((size_t)(T * E) * sizeof(float));
    f->hsel = xaligned_alloc((size_t)(T * E) * sizeof(float));
    f->logits = xaligned_alloc((size_t)(T * hp->n_vocab) * sizeof(float));
    f->attn_scratch = xaligned_alloc((size_t)(f->n_threads * p->n_ctx) * sizeof(float));
    int64_t max_in = max3(2 * E, ff, max3(hp->n_head * hp->head_dim, Hv * S, 1));
    rc = dev_reserve(d, T, max_in);
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
    void *bufs[] = {f->x,       f->xn,      f->mix,    f->big0,  f->big1,
                    f->big2,   f->big3,    f->small,   f->beta,   f->decay, f->gath,
                    f->eout,   f->route_w, f->route_e, f->erows,  f->erw,   f->hidden,
                    f->hsel,   f->logits,  f->attn_scratch};
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

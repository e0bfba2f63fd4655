/*
 * dev_cpu_ops — the forward ops of the CPU device (contracts in device.h), on the kernels of
 * kernels/cpu and the device's thread pool. The per-row elementwise ops (norms, gates, SwiGLU,
 * the MoE gather and sum) split rows across the threads when a step has enough of them
 * (dev_cpu__par_items) and run on the calling thread for decode-sized steps; attention and the
 * gated delta rule always dispatch; the causal conv carries its conv-state snapshots (each
 * item its channel block's columns); the small sequential parts (rope tables, routing) run on
 * the calling thread.
 *
 * Every parallel op is a chunked dispatch (tpool_run_chunks): threads claim items as they go.
 *
 * Invariants: a row's arithmetic in every op is the same whatever else is in the batch and
 * however the work is split or which thread claims it (the GDN recurrence is the sequential f32
 * form, token by token, so a verify-sized batch gives exactly what one token at a time gives).
 * Nothing here allocates. Thread: the thread driving the device; items run on its workers over
 * disjoint slices.
 */
#include <math.h>
#include <string.h>

#include "dev_cpu_impl.h" // defines: struct cpu_dev, dev_cpu__*
#include "kernels/cpu/kop.h" // defines: kop_rmsnorm, kop_rope_neox_cs, kop_attn_group, kop_gdn_step, ...
#include "kernels/cpu/kq.h" // defines: kq_dequantize_row

/* ============================================================================================
 * The parallel loop over items
 * ========================================================================================== */

/* Below this much work (elements) a dispatch costs more than it saves. */
#define PAR_MIN_WORK (1 << 15)

/* Chunks per thread of an items loop (claimed dynamically, see tpool_run_chunks). */
#define ITEM_CHUNKS 8

struct items_task {
    dev_cpu__items_fn fn;
    const void *arg;
    int64_t n, per; /* items, items per chunk */
};

static void items_chunk(void *ctx, int64_t c, int ith)
{
    (void)ith;
    const struct items_task *t = ctx;
    const int64_t lo = c * t->per, hi = lo + t->per < t->n ? lo + t->per : t->n;
    t->fn(t->arg, lo, hi);
}

void dev_cpu__par_items(struct cpu_dev *cd, int64_t n, int64_t work, dev_cpu__items_fn fn,
                        const void *arg)
{
    if (cd->n_threads == 1 || n * work < PAR_MIN_WORK) {
        fn(arg, 0, n);
        return;
    }
    const int64_t chunks = ITEM_CHUNKS * (int64_t)cd->n_threads;
    struct items_task t = {.fn = fn, .arg = arg, .n = n, .per = (n + chunks - 1) / chunks};
    tpool_run_chunks(cd->pool, items_chunk, &t, (n + t.per - 1) / t.per, 0);
}

/* ============================================================================================
 * Embedding, RoPE tables, norms, SwiGLU, row moves
 * ========================================================================================== */

struct embed_arg {
    const struct dev_mat *w;
    const int32_t *tok;
    float *x;
};

static void embed_items(const void *arg, int64_t t0, int64_t t1)
{
    const struct embed_arg *a = arg;
    const struct dev_mat *w = a->w;
    for (int64_t t = t0; t < t1; t++)
        kq_dequantize_row(w->type, (const char *)w->data + (size_t)a->tok[t] * w->row_bytes,
                          a->x + t * w->n_in, w->n_in);
}

void dev_cpu__embed(struct dev *d, const struct dev_mat *w, const struct dev_batch *b, float *x)
{
    struct embed_arg a = {.w = w, .tok = b->token, .x = x};
    dev_cpu__par_items(dev_cpu__of(d), b->T, w->n_in, embed_items, &a);
}

void dev_cpu__rope_table(struct dev *d, const struct dev_batch *b, int64_t n_rot, float base,
                         float *cs)
{
    (void)d;
    for (int64_t t = 0; t < b->T; t++)
        kop_rope_table(n_rot, b->pos[t], base, cs + t * n_rot);
}

static void norm_items(const void *arg, int64_t t0, int64_t t1)
{
    const struct dev_norm *a = arg;
    for (int64_t t = t0; t < t1; t++) {
        if (a->add)
            kop_add(a->x + t * a->ld_x, a->add + t * a->ld_x, a->n);
        kop_rmsnorm(a->x + t * a->ld_x, a->w, a->y + t * a->ld_y, a->n, a->eps);
    }
}

void dev_cpu__rmsnorm(struct dev *d, const struct dev_norm *a)
{
    dev_cpu__par_items(dev_cpu__of(d), a->T, a->n, norm_items, a);
}

struct glu_arg {
    float *g;
    const float *u;
    int64_t w;
};

static void glu_items(const void *arg, int64_t t0, int64_t t1)
{
    const struct glu_arg *a = arg;
    for (int64_t t = t0; t < t1; t++)
        kop_swiglu(a->g + t * a->w, a->u + t * a->w, a->w);
}

void dev_cpu__swiglu(struct dev *d, float *g, const float *u, int64_t n, int64_t w)
{
    struct glu_arg a = {.g = g, .u = u, .w = w};
    dev_cpu__par_items(dev_cpu__of(d), n, w, glu_items, &a);
}

void dev_cpu__gather_rows(struct dev *d, float *dst, const float *src, const int32_t *idx,
                          int64_t n, int64_t w)
{
    (void)d;
    for (int64_t i = 0; i < n; i++)
        memmove(dst + i * w, src + (int64_t)idx[i] * w, (size_t)w * sizeof(float));
}

void dev_cpu__scatter_rows(struct dev *d, float *dst, const float *src, const int32_t *idx,
                           int64_t n, int64_t w)
{
    (void)d;
    for (int64_t i = n - 1; i >= 0; i--)
        memmove(dst + (int64_t)idx[i] * w, src + i * w, (size_t)w * sizeof(float));
}

void dev_cpu__argmax(struct dev *d, const float *x, int64_t rows, int64_t n, int32_t *out,
                     float *mass)
{
    (void)d;
    kop_argmax_rows(x, rows, n, out, mass);
}

/* ============================================================================================
 * Attention
 * ========================================================================================== */

/* Per row: q/k norm and RoPE on the new rows (one rotation table per row), then store K/V. */
static void qk_items(const void *arg, int64_t t0, int64_t t1)
{
    const struct dev_attn *a = arg;
    const int64_t D = a->head_dim, kvd = a->n_head_kv * D, qstride = a->gated ? 2 * D : D;
    for (int64_t t = t0; t < t1; t++) {
        const float *cs = a->cs + t * a->n_rot;
        for (int64_t h = 0; a->q && h < a->n_head; h++) {
            float *qh = a->q + t * a->q_ld + h * qstride;
            kop_rmsnorm(qh, a->q_norm, qh, D, a->eps);
            kop_rope_neox_cs(qh, a->n_rot, cs);
        }
        for (int64_t j = 0; j < a->n_head_kv; j++) {
            float *kj = a->k + t * kvd + j * D;
            kop_rmsnorm(kj, a->k_norm, kj, D, a->eps);
            kop_rope_neox_cs(kj, a->n_rot, cs);
        }
        const int64_t at = a->b->seq[t] * a->kv.seq_stride + a->b->pos[t] * a->kv.kv_dim;
        const size_t row = (size_t)kvd * sizeof(float);
        memcpy(a->kv.k + at, a->k + t * kvd, row);
        memcpy(a->kv.v + at, a->v + t * kvd, row);
    }
}

void dev_cpu__attn_store(struct dev *d, const struct dev_attn *a)
{
    const int64_t work = ((a->q ? a->n_head : 0) + a->n_head_kv) * a->head_dim;
    dev_cpu__par_items(dev_cpu__of(d), a->b->T, work, qk_items, a);
}

struct attn_task {
    const struct cpu_dev *cd;
    const struct dev_attn *a;
};

/*
 * Chunks = items (row, KV head): the group of query heads sharing that KV head attends over the
 * sequence's rows 0..pos (each K/V row read once for the group), then the output gate. Items
 * are claimed one at a time: later rows of a prompt see more positions, so contiguous shares
 * would leave the first threads idle.
 */
static void attn_chunk(void *ctx, int64_t i, int ith)
{
    const struct attn_task *c = ctx;
    const struct dev_attn *a = c->a;
    const int64_t Hkv = a->n_head_kv, D = a->head_dim, grp = a->n_head / Hkv;
    const int64_t qstride = a->gated ? 2 * D : D, kvd = Hkv * D, cap = c->cd->attn_scratch_n;
    float *scratch = c->cd->attn_scratch + (size_t)ith * cap;
    const int64_t t = i / Hkv, j = i % Hkv, n_kv = a->b->pos[t] + 1;
    const int64_t at = a->b->seq[t] * a->kv.seq_stride + j * D;
    /* as many heads at a time as the scratch holds scores for (kop_attn_group gives each
     * head the same result whatever their number) */
    const int64_t step = cap / n_kv < grp ? cap / n_kv : grp;
    for (int64_t g0 = 0; g0 < grp; g0 += step) {
        const int64_t ng = grp - g0 < step ? grp - g0 : step;
        const float *q = a->q + t * a->q_ld + (j * grp + g0) * qstride;
        float *o = a->out + t * a->n_head * D + (j * grp + g0) * D;
        kop_attn_group(q, qstride, ng, a->kv.k + at, a->kv.v + at, kvd, n_kv, D, a->scale, scratch,
                       o, D);
        for (int64_t g = 0; a->gated && g < ng; g++)
            kop_mul_sigmoid(o + g * D, q + g * qstride + D, D);
    }
}

void dev_cpu__attn(struct dev *d, const struct dev_attn *a)
{
    struct cpu_dev *cd = dev_cpu__of(d);
    ASSERT(cd->attn_scratch_n >= a->kv.seq_stride / (a->kv.kv_dim ? a->kv.kv_dim : 1));
    struct attn_task c = {cd, a};
    tpool_run_chunks(cd->pool, attn_chunk, &c, a->b->T * a->n_head_kv, 0);
}

/* ============================================================================================
 * Gated DeltaNet
 * ========================================================================================== */

static float *gdn_conv(const struct dev_gdn_state *st, int64_t g, int64_t s)
{
    return st->base + g * st->group_stride + s * st->seq_stride;
}

static float *gdn_ssm(const struct dev_gdn_state *st, int64_t g, int64_t s)
{
    return gdn_conv(st, g, s) + st->conv_elems;
}

void dev_cpu__gdn_gates(struct dev *d, const struct dev_gdn *g)
{
    (void)d;
    const int64_t T = g->b->T, Hv = g->Hv, r = Hv / g->Hk;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hv; h++) {
            const int64_t i = t * Hv + h, gk = h / r, j = h % r;
            const float b = g->ba ? g->ba[t * 2 * Hv + 2 * r * gk + j] : g->bl[i];
            const float al = g->ba ? g->ba[t * 2 * Hv + 2 * r * gk + r + j] : g->al[i];
            g->beta[i] = kop_sigmoid(b);
            g->decay[i] = expf(g->a_log[h] * kop_softplus(al + g->dt_bias[h]));
        }
}

/* The conv-state snapshot windows of run ru over channels [c0, c1): groups other than the
 * source first, the source group last, so every window still reads an intact source. */
static void conv_snapshots(const struct dev_gdn *g, const struct dev_run *ru, int64_t c0,
                           int64_t c1)
{
    const int64_t C = g->C, K = g->conv_k, G = g->st.n_groups;
    const int64_t T = ru->t1 - ru->t0, src_g = ru->src;
    const float *src = gdn_conv(&g->st, src_g, ru->seq);
    const int64_t n_snap = T < G ? T : G;
    for (int64_t pass = 0; pass < 2; pass++)
        for (int64_t k = n_snap - 1; k >= 0; k--) {
            if ((k == src_g) != (pass == 1))
                continue;
            kop_conv_state_window_cols(src, g->u + ru->t0 * C, T, C, K, k, c0, c1,
                                       gdn_conv(&g->st, k, ru->seq));
        }
}

/* Items = (run, block of S channels): the causal conv of the block over the run's rows, the
 * L2 norm of the block's q or k head in every row (the v blocks have none), then the block's
 * columns of the run's conv-state snapshots. An item reads and writes only its run's state and
 * its block's columns, and reads the source state before it writes it, so the items need no
 * order among themselves. */
static void conv_items(const void *arg, int64_t i0, int64_t i1)
{
    const struct dev_gdn *g = arg;
    const int64_t C = g->C, S = g->S, nb = C / S;
    for (int64_t i = i0; i < i1; i++) {
        const struct dev_run *ru = &g->b->runs[i / nb];
        const int64_t blk = i % nb, c0 = blk * S, T = ru->t1 - ru->t0;
        const float *src = gdn_conv(&g->st, ru->src, ru->seq);
        if (i + 1 < i1) { /* the next item's state rows: short runs of lines, 32 KiB apart */
            const struct dev_run *rn = &g->b->runs[(i + 1) / nb];
            const float *ns = gdn_conv(&g->st, rn->src, rn->seq) + (i + 1) % nb * S;
            for (int64_t j = 0; j + 1 < g->conv_k; j++)
                for (int64_t l = 0; l < S; l += 16)
                    __builtin_prefetch(ns + j * C + l, 1, 3);
        }
        kop_conv1d_silu(src, g->u + ru->t0 * C, g->conv_w, T, C, g->conv_k, c0, c0 + S,
                        g->y + ru->t0 * C);
        for (int64_t t = ru->t0; blk < 2 * g->Hk && t < ru->t1; t++)
            kop_l2norm(g->y + t * C + c0, S, g->eps);
        conv_snapshots(g, ru, c0, c0 + S);
    }
}

void dev_cpu__conv1d(struct dev *d, const struct dev_gdn *g)
{
    const int64_t T = g->b->T, n_runs = g->b->n_runs;
    const int64_t run_len = (T + n_runs - 1) / n_runs; /* rows per run, on average */
    /* work per item: the conv's multiply-adds plus the snapshot copies */
    const int64_t work = run_len * g->S * g->conv_k + (g->conv_k - 1) * g->S;
    dev_cpu__par_items(dev_cpu__of(d), n_runs * (g->C / g->S), work, conv_items, g);
}

/* Chunks = items (run, value head); each runs the recurrence over its run's tokens, then the
 * gated norm of each output row. */
static void gdn_chunk(void *ctx, int64_t i, int ith)
{
    (void)ith;
    const struct dev_gdn *g = ctx;
    const int64_t Hv = g->Hv, Hk = g->Hk, S = g->S, C = g->C, r = Hv / Hk;
    const float scale = 1.0f / sqrtf((float)S);
    const struct dev_run *ru = &g->b->runs[i / Hv];
    const int64_t h = i % Hv, kh = g->kmap_mod ? h % Hk : h / r;
    float *M = gdn_ssm(&g->st, 0, ru->seq) + h * S * S;
    const float *M_in = gdn_ssm(&g->st, ru->src, ru->seq) + h * S * S;
    for (int64_t t = ru->t0; t < ru->t1; t++) {
        const float *yt = g->y + t * C;
        float *ot = g->o + t * Hv * S + h * S;
        kop_gdn_step(M, t == ru->t0 ? M_in : M, yt + kh * S, yt + Hk * S + kh * S,
                     yt + 2 * Hk * S + h * S, g->decay[t * Hv + h], g->beta[t * Hv + h], scale, S,
                     ot);
        kop_rmsnorm_gate(ot, g->norm_w, g->z + t * Hv * S + h * S, S, g->eps);
        int64_t back = ru->t1 - 1 - t; /* this state is `back` tokens before the end */
        if (back >= 1 && back < g->st.n_groups)
            memcpy(gdn_ssm(&g->st, back, ru->seq) + h * S * S, M, (size_t)(S * S) * sizeof(float));
    }
}

void dev_cpu__gdn(struct dev *d, const struct dev_gdn *g)
{
    tpool_run_chunks(dev_cpu__of(d)->pool, gdn_chunk, (void *)g, g->b->n_runs * g->Hv, 0);
}

/* ============================================================================================
 * Mixture of experts
 * ========================================================================================== */

void dev_cpu__shexp_gate(struct dev *d, const float *w, const float *x, int64_t T, int64_t E,
                         float *out)
{
    (void)d;
    for (int64_t t = 0; t < T; t++) {
        double dot = 0.0;
        for (int64_t i = 0; i < E; i++)
            dot += (double)w[i] * x[t * E + i];
        out[t] = kop_sigmoid((float)dot);
    }
}

/* Softmax over all experts, top-k (ties to the lower index), renormalised weights; then each
 * row's choices sorted by expert, and the slots in row order per expert. */
void dev_cpu__moe_route(struct dev *d, const struct dev_moe *m)
{
    (void)d;
    const int64_t T = m->T, Nx = m->n_expert, k = m->k;
    for (int64_t t = 0; t < T; t++)
        kop_moe_route(m->logits + t * Nx, Nx, k, m->route_e + t * k, m->route_w + t * k);
    memset(m->e_off, 0, (size_t)(Nx + 1) * sizeof *m->e_off);
    for (int64_t i = 0; i < T * k; i++)
        m->e_off[m->route_e[i] + 1]++;
    for (int64_t e = 0; e < Nx; e++)
        m->e_off[e + 1] += m->e_off[e];
    for (int64_t t = 0; t < T; t++) /* rows in order: each expert's slots follow row order */
        for (int64_t i = 0; i < k; i++) {
            int32_t s = m->e_off[m->route_e[t * k + i]]++;
            m->slot[t * k + i] = s;
            m->e_row[s] = (int32_t)t;
        }
    for (int64_t e = Nx; e > 0; e--) /* the increments moved every start to the next one's */
        m->e_off[e] = m->e_off[e - 1];
    m->e_off[0] = 0;
}

static void gather_items(const void *arg, int64_t s0, int64_t s1)
{
    const struct dev_moe *m = arg;
    for (int64_t s = s0; s < s1; s++)
        memcpy(m->gath + s * m->E, m->xn + m->e_row[s] * m->E, (size_t)m->E * sizeof(float));
}

void dev_cpu__moe_gather(struct dev *d, const struct dev_moe *m)
{
    dev_cpu__par_items(dev_cpu__of(d), m->T * m->k, m->E, gather_items, m);
}

/* Per row: the shared expert's output times its sigmoid gate, then the routed experts'
 * outputs by weight, in expert order. */
static void combine_items(const void *arg, int64_t t0, int64_t t1)
{
    const struct dev_moe *m = arg;
    const int64_t E = m->E, k = m->k;
    for (int64_t t = t0; t < t1; t++) {
        const float s = m->sh_gate[t];
        float *o = m->out + t * E;
        const float *sh = m->sh + t * E;
        for (int64_t i = 0; i < E; i++)
            o[i] = sh[i] * s;
        for (int64_t i = 0; i < k; i++)
            kop_axpy(o, m->route_w[t * k + i], m->eout + m->slot[t * k + i] * E, E);
    }
}

void dev_cpu__moe_combine(struct dev *d, const struct dev_moe *m)
{
    dev_cpu__par_items(dev_cpu__of(d), m->T, m->E * (m->k + 1), combine_items, m);
}

/* matmul_id's routed rows prepared once per row (dev_mm_id.slot) in each activation format
 * the experts' tensors read: fmt[f] is every slot's rows in one format. */
struct id_rows {
    const struct dev_mm_id *p;
    struct dev_cpu__src fmt[2]; /* x, n_slots rows */
    int n_fmt;
};

/* Items = rows t: the row (x at its first slot) quantised into that slot's place in each
 * format, then copied to its k - 1 other slots' places. */
static void id_rows_items(const void *arg, int64_t t0, int64_t t1)
{
    const struct id_rows *r = arg;
    const int64_t k = r->p->k;
    for (int64_t t = t0; t < t1; t++)
        for (int f = 0; f < r->n_fmt; f++) {
            const struct dev_cpu__src *q = &r->fmt[f];
            const int32_t *sl = r->p->slot + t * k;
            char *a0 = q->act + (size_t)sl[0] * q->act_stride;
            kq_quantize_act(q->w, q->x + sl[0] * q->n_in, a0, q->n_in);
            for (int64_t i = 1; i < k; i++)
                memcpy(q->act + (size_t)sl[i] * q->act_stride, a0, q->act_stride);
        }
}

/* With slot given (and rows per slot, x_ld > 0): every slot's rows in each distinct activation
 * format of the n_w tensors, at the start of the device's scratch, each row quantised once;
 * returns the bytes they take (0: nothing prepared, the products quantise their own rows). */
static size_t id_prepare(struct cpu_dev *cd, const struct dev_mm_id *p, struct id_rows *r)
{
    *r = (struct id_rows){.p = p};
    if (!p->slot || p->x_ld == 0 || p->k < 1)
        return 0;
    size_t bytes = 0;
    for (int i = 0; i < p->n_w; i++) {
        const struct dev_mat *w = &p->w[i];
        int f = 0;
        while (f < r->n_fmt && kq_act_type(r->fmt[f].w) != kq_act_type(w->type))
            f++;
        if (f < r->n_fmt)
            continue;
        ASSERT(w->n_in == p->x_ld); /* matmul_multi's rows are n_in apart */
        struct dev_cpu__src *q = &r->fmt[r->n_fmt++];
        *q = (struct dev_cpu__src){.x = p->x,
                                   .T = p->n_slots,
                                   .n_in = w->n_in,
                                   .w = w->type,
                                   .act = (char *)cd->act + bytes,
                                   .act_stride = kq_act_row_bytes(w->type, w->n_in)};
        bytes += dev_cpu__src_bytes(p->n_slots, q->act_stride);
    }
    ASSERT(bytes <= cd->act_cap); /* fwd's reserve_multi counts every slot's rows twice */
    dev_cpu__par_items(cd, p->n_slots / p->k, p->x_ld * r->n_fmt, id_rows_items, r);
    return bytes;
}

/* The products of every expert with rows, in matmul_multi calls of at most DEV_MM_MAX
 * products and prepared inputs; with slot, the rows come prepared (id_prepare) and each
 * expert's products read its slots' part of them. The experts with slots are counted in the
 * device's stats. */
void dev_cpu__matmul_id(struct dev *d, const struct dev_mm_id *p)
{
    struct cpu_dev *cd = dev_cpu__of(d);
    struct dev_mm mm[DEV_MM_MAX];
    struct dev_cpu__src pre[DEV_MM_MAX];
    struct id_rows r;
    const size_t pre_bytes = id_prepare(cd, p, &r);
    int n = 0, n_pre = 0;
    cd->moe.calls++;
    for (int64_t e = 0; e < p->n_expert; e++) {
        const int64_t s0 = p->e_off[e], ns = p->e_off[e + 1] - s0;
        if (ns == 0)
            continue;
        cd->moe.experts++;
        for (int i = 0; i < p->n_w; i++)
            cd->moe.bytes += (double)p->w[i].row_bytes * (double)p->w[i].n_out;
        if (n + n_pre + p->n_w + r.n_fmt > DEV_MM_MAX) {
            dev_cpu__matmul_multi_pre(d, mm, n, pre, n_pre, pre_bytes);
            n = n_pre = 0;
        }
        for (int f = 0; f < r.n_fmt; f++) {
            pre[n_pre] = r.fmt[f];
            pre[n_pre].x += s0 * p->x_ld;
            pre[n_pre].T = ns;
            pre[n_pre++].act += (size_t)s0 * r.fmt[f].act_stride;
        }
        for (int i = 0; i < p->n_w; i++) {
            struct dev_mat w = p->w[i];
            w.data = (const char *)w.data + (size_t)e * p->expert_bytes[i];
            mm[n++] = (struct dev_mm){w, p->x + s0 * p->x_ld, ns, p->y[i] + s0 * w.n_out};
        }
    }
    for (int i = 0; i < p->n_extra; i++) {
        if (n + n_pre + 1 > DEV_MM_MAX) {
            dev_cpu__matmul_multi_pre(d, mm, n, pre, n_pre, pre_bytes);
            n = n_pre = 0;
        }
        mm[n++] = p->extra[i];
    }
    dev_cpu__matmul_multi_pre(d, mm, n, pre, n_pre, pre_bytes);
}

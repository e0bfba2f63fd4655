/*
 * fwd — batched forward pass of qwen3 / qwen35 / qwen35moe / qwen3next and the MTP block
 * on one device (math: docs/models.md section 5; state rules:
 * docs/parallelism-and-speculation.md section 2). This file holds the shared helpers, the
 * spine of a step (embed, blocks, output head) and the lifecycle; the mixers live in
 * fwd_mix.c and the FFNs in fwd_ffn.c.
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
 * and however the work is split (the matmul kernels have their own rules, see kq.h);
 * fwd_decode/fwd_mtp allocate nothing, all buffers come from fwd__dev_create.
 * Thread: the engine thread; parallel parts run on the device's workers over disjoint slices.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"            // defines: comm_allreduce
#include "engine/util.h"     // defines: xcalloc, xaligned_alloc, dd_errf
#include "fwd_impl.h"        // defines: struct fwd_dev, struct fwd_run, fwd__dev_*
#include "kernels/cpu/kop.h" // defines: kop_rmsnorm, kop_add, kop_rope_table

/* ============================================================================================
 * Helpers
 * ========================================================================================== */

void fwd__matmul(struct fwd_dev *f, const struct model_w *w, const float *x, int64_t T, float *y)
{
    struct dev_mat d = fwd__mat(w);
    dev_matmul(f->dev, &d, x, T, y);
}

/*
 * Parallel loops over items. fn(f, arg, i0, i1) runs on each thread's contiguous share of
 * [0, n), or on the calling thread alone when the loop's work (n * work, in elements) is below
 * PAR_MIN_WORK, where a dispatch would cost more than it saves (decode-sized elementwise work).
 * What fn computes per item never depends on the split.
 */
#define PAR_MIN_WORK (1 << 15)

struct items_task {
    struct fwd_dev *f;
    fwd__items_fn fn;
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

void fwd__par_items(struct fwd_dev *f, int64_t n, int64_t work, fwd__items_fn fn, const void *arg)
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
    struct norm_arg a = {
        .x = x, .w = w ? w->data : NULL, .y = y, .n = n, .ld_x = ld_x, .ld_y = ld_y};
    fwd__par_items(f, f->b->n_tokens, n, norm_items, &a);
}

/* The residual add of a pending block output, then y = rmsnorm(x) * w (one pass per row). */
static void add_norm(struct fwd_dev *f, const struct model_w *w, float *y)
{
    const int64_t E = f->m->hp.n_embd;
    struct norm_arg a = {
        .x = f->x, .w = w->data, .y = y, .n = E, .ld_x = E, .ld_y = E, .add_mix = f->mix_pending};
    fwd__par_items(f, f->b->n_tokens, E, norm_items, &a);
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
    fwd__par_items(f, f->b->n_tokens, f->m->hp.n_embd, embed_items, x);
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

/* Does row t of batch b produce a logits row (b->logits, or by default the last of its run)? */
static bool wants_logits(const struct fwd_batch *b, int64_t t)
{
    bool last = t + 1 == b->n_tokens || b->seq[t + 1] != b->seq[t];
    return b->logits ? b->logits[t] != 0 : last;
}

/* Final norm (every row, kept as the MTP input) and the LM head for the rows asked for. */
static void output_head(struct fwd_dev *f, const struct model_w *norm)
{
    const struct fwd_batch *b = f->b;
    const int64_t E = f->m->hp.n_embd;
    add_norm(f, norm, f->hidden);
    f->n_logits = 0;
    for (int64_t t = 0; t < b->n_tokens; t++) {
        if (wants_logits(b, t))
            memcpy(f->hsel + f->n_logits++ * E, f->hidden + t * E, (size_t)E * sizeof(float));
    }
    if (f->n_logits)
        fwd__matmul(f, &f->m->output, f->hsel, f->n_logits, f->logits);
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
        fwd__gdn_layer(f, il, f->xn, f->mix);
    else
        fwd__attn_layer(f, il, f->xn, f->mix);
    reduce(f, f->mix, T * E); /* allreduce #1: after the mixer's output projection */
    f->mix_pending = true;
    add_norm(f, &l->ffn_norm, f->xn);
    fwd__ffn(f, l, f->xn, f->mix);
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

/*
 * The MTP block's rows that want no logits (the KV sync of accepted tokens) need only their K/V:
 * nothing reads their output. When the batch has such rows, store the K/V of every row
 * (attn_norm of the whole residual f->x, then the k/v projections), and gather the wanted rows,
 * their residual rows moved to the front of f->x, into f->sub for the full block. Returns
 * false (nothing done) when every row wants logits. The choice depends on the batch alone, so
 * every device of a group takes the same path (the block's allreduces stay matched).
 */
static bool kv_only_rows(struct fwd_dev *f)
{
    const struct fwd_batch *b = f->b;
    const int64_t T = b->n_tokens, E = f->m->hp.n_embd, il = f->m->hp.n_layer;
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++) {
        if (!wants_logits(b, t))
            continue;
        f->sub_tok[n] = b->token[t];
        f->sub_pos[n] = b->pos[t];
        f->sub_seq[n] = b->seq[t];
        f->sub_want[n] = 1;
        f->sub_row[n++] = t;
    }
    if (n == T)
        return false;
    add_norm(f, &f->m->layers[il].attn_norm, f->xn);
    fwd__attn_kv(f, il, f->xn);
    for (int64_t i = 0; i < n; i++) /* sub_row[i] >= i: each source row is read before it is
                                       overwritten */
        memmove(f->x + i * E, f->x + f->sub_row[i] * E, (size_t)E * sizeof(float));
    f->sub = (struct fwd_batch){.n_tokens = n,
                                .token = f->sub_tok,
                                .pos = f->sub_pos,
                                .seq = f->sub_seq,
                                .logits = f->sub_want};
    return true;
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
    fwd__matmul(f, &l->eh_proj, f->xn, T, f->x);
    const struct model_w *norm =
        l->shared_head_norm.data ? &l->shared_head_norm : &f->m->output_norm;
    if (!kv_only_rows(f)) {
        block(f, il);
        output_head(f, norm);
    } else if (f->sub.n_tokens == 0) {
        f->n_logits = 0;
    } else { /* the wanted rows' block; their hidden rows go back to their batch rows */
        f->b = &f->sub;
        rope_tables(f);
        block(f, il);
        output_head(f, norm);
        for (int64_t i = f->sub.n_tokens - 1; i >= 0; i--)
            memmove(f->hidden + f->sub_row[i] * E, f->hidden + i * E, (size_t)E * sizeof(float));
    }
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
        const struct model_w *xn_mats[] = {
            &l->wq, &l->wk,       &l->wv,     &l->qkv,      &l->gate,       &l->beta,    &l->alpha,
            &l->ba, &l->ffn_gate, &l->ffn_up, &l->gate_inp, &l->gate_shexp, &l->up_shexp};
        struct dev_mm mm[13];
        int n = 0;
        for (size_t i = 0; i < sizeof xn_mats / sizeof xn_mats[0]; i++)
            if (xn_mats[i]->data)
                mm[n++] = fwd__mm(xn_mats[i], NULL, T, NULL);
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
        dd_errf(err, errlen,
                "invalid forward parameters (max_tokens %lld, n_seq %lld, n_ctx "
                "%lld, draft_max %lld)",
                (long long)p->max_tokens, (long long)p->n_seq, (long long)p->n_ctx,
                (long long)p->draft_max);
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
    f->sub_tok = xcalloc((size_t)T, sizeof *f->sub_tok);
    f->sub_seq = xcalloc((size_t)T, sizeof *f->sub_seq);
    f->sub_pos = xcalloc((size_t)T, sizeof *f->sub_pos);
    f->sub_row = xcalloc((size_t)T, sizeof *f->sub_row);
    f->sub_want = xcalloc((size_t)T, sizeof *f->sub_want);
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
    void *bufs[] = {f->x,       f->xn,      f->mix,     f->big0,    f->big1,
                    f->big2,    f->big3,    f->small,   f->beta,    f->decay,
                    f->rope,    f->route_w, f->route_e, f->slot,    f->e_off,
                    f->e_row,   f->gath,    f->eg,      f->eu,      f->eout,
                    f->sh_gate, f->hidden,  f->hsel,    f->logits,  f->attn_scratch,
                    f->sub_tok, f->sub_seq, f->sub_pos, f->sub_row, f->sub_want};
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

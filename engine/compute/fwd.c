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
 * gated delta rule over each sequence's run) are device ops over the batch's runs, uploaded
 * with the tokens at the start of a step (struct dev_batch). Every op goes through the device
 * (device.h) on device addresses: this code never reads or writes an activation, cache row or
 * weight itself. The first token of a run reads its recurrent state from snapshot group
 * rs_idx, later tokens update group 0; the last min(T, n_groups) states are kept as snapshot
 * groups for rollback.
 *
 * Invariants: a row's arithmetic in every op is the same whatever else is in the batch and
 * however the work is split (the device's rule); fwd_decode/fwd_mtp allocate nothing, every
 * buffer is a part of the device's one allocation (fwd_plan, fwd__dev_create).
 * Thread: the engine thread (or a group's host thread), driving its device.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xcalloc, xaligned_alloc, dd_errf
#include "fwd_impl.h"    // defines: struct fwd_dev, struct fwd_run, fwd__dev_*

/* ============================================================================================
 * Helpers
 * ========================================================================================== */

void fwd__matmul(struct fwd_dev *f, const struct model_w *w, const float *x, int64_t T, float *y)
{
    struct dev_mat d = fwd__mat(w);
    dev_matmul(f->dev, &d, x, T, y);
}

/* y rows = rmsnorm(x rows) * w: rows of n elements at strides ld_x, ld_y. */
static void rmsnorm_rows(struct fwd_dev *f, float *x, const struct model_w *w, float *y, int64_t n,
                         int64_t ld_x, int64_t ld_y)
{
    struct dev_norm a = {.x = x,
                         .w = w ? w->data : NULL,
                         .y = y,
                         .T = f->db.T,
                         .n = n,
                         .ld_x = ld_x,
                         .ld_y = ld_y,
                         .eps = f->m->hp.eps};
    dev_rmsnorm(f->dev, &a);
}

/* The residual add of a pending block output, then y = rmsnorm(x) * w (one pass per row). */
static void add_norm(struct fwd_dev *f, const struct model_w *w, float *y)
{
    const int64_t E = f->m->hp.n_embd;
    struct dev_norm a = {.x = f->x,
                         .add = f->mix_pending ? f->mix : NULL,
                         .w = w->data,
                         .y = y,
                         .T = f->db.T,
                         .n = E,
                         .ld_x = E,
                         .ld_y = E,
                         .eps = f->m->hp.eps};
    dev_rmsnorm(f->dev, &a);
    f->mix_pending = false;
}

/* Upload batch b (and its runs, with the state group each starts from) for the ops. */
static void upload_batch(struct fwd_dev *f, const struct fwd_batch *b)
{
    const int64_t T = b->n_tokens;
    for (int64_t r = 0; r < f->n_runs; r++)
        f->runs_h[r] = (struct dev_run){.t0 = (int32_t)f->runs[r].t0,
                                        .t1 = (int32_t)f->runs[r].t1,
                                        .seq = (int32_t)f->runs[r].seq,
                                        .src = f->cache.rs_idx[f->runs[r].seq]};
    dev_upload(f->dev, f->d_tok, b->token, (size_t)T * sizeof *f->d_tok);
    dev_upload(f->dev, f->d_seq, b->seq, (size_t)T * sizeof *f->d_seq);
    dev_upload(f->dev, f->d_pos, b->pos, (size_t)T * sizeof *f->d_pos);
    dev_upload(f->dev, f->d_runs, f->runs_h, (size_t)f->n_runs * sizeof *f->d_runs);
    f->db = (struct dev_batch){.T = T,
                               .n_runs = f->n_runs,
                               .token = f->d_tok,
                               .seq = f->d_seq,
                               .pos = f->d_pos,
                               .runs = f->d_runs};
    f->b = b;
}

static void embed_rows(struct fwd_dev *f, float *x)
{
    struct dev_mat w = fwd__mat(&f->m->tok_embd);
    dev_embed(f->dev, &w, &f->db, x);
}

/* ============================================================================================
 * The spine of one device's step
 * ========================================================================================== */

/* Sum a partial [T][E] block over the devices of the group (no-op on a single device). */
static void reduce(struct fwd_dev *f, float *buf, int64_t n)
{
    if (f->comm)
        dev_allreduce(f->dev, f->comm, f->rank, buf, n);
}

/* The rotation table of every row's position, shared by all attention layers of the step. */
static void rope_tables(struct fwd_dev *f)
{
    const struct model_hparams *hp = &f->m->hp;
    dev_rope_table(f->dev, &f->db, hp->n_rot, hp->rope_base, f->rope);
}

/* Does row t of batch b produce a logits row (b->logits, or by default the last of its run)? */
static bool wants_logits(const struct fwd_batch *b, int64_t t)
{
    bool last = t + 1 == b->n_tokens || b->seq[t + 1] != b->seq[t];
    return b->logits ? b->logits[t] != 0 : last;
}

/* The rows that produce logits (b->logits, or the last of each run) to the device: f->d_rows,
 * f->n_logits. Outside output_head, so that a recorded step (a graph) holds no upload. */
static void select_rows(struct fwd_dev *f)
{
    const struct fwd_batch *b = f->b;
    f->n_logits = 0;
    for (int64_t t = 0; t < b->n_tokens; t++)
        if (wants_logits(b, t))
            f->rows_h[f->n_logits++] = (int32_t)t;
    dev_upload(f->dev, f->d_rows, f->rows_h, (size_t)f->n_logits * sizeof *f->d_rows);
}

/* Final norm into hid (every row: the trunk's are the MTP input) and the LM head for the rows
 * select_rows chose. */
static void output_head(struct fwd_dev *f, const struct model_w *norm, float *hid)
{
    const int64_t E = f->m->hp.n_embd;
    add_norm(f, norm, hid);
    dev_gather_rows(f->dev, f->hsel, hid, f->d_rows, f->n_logits, E);
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
        dev_memset(f->dev, f->mix, 0, (size_t)(T * E) * sizeof(float));
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

/* The trunk step's ops once its batch is on the device (upload_batch, select_rows): what a
 * graph records. */
static void trunk_ops(struct fwd_dev *f)
{
    f->mix_pending = false;
    embed_rows(f, f->x);
    rope_tables(f);
    for (int64_t il = 0; il < f->m->hp.n_layer; il++)
        block(f, il);
    output_head(f, &f->m->output_norm, f->hidden);
}

/*
 * The graph of this step's shape (rows, runs, logits rows: every other input is in device
 * buffers), least recently used one replaced; NULL when the step runs its ops directly: graphs
 * off, a device without graphs, or a run longer than FWD_GRAPH_RUN (a prefill chunk).
 */
static struct fwd_graph *graph_of(struct fwd_dev *f)
{
    if (!f->p.graphs || !dev_has_graphs(f->dev))
        return NULL;
    for (int64_t r = 0; r < f->n_runs; r++)
        if (f->runs[r].t1 - f->runs[r].t0 > FWD_GRAPH_RUN)
            return NULL;
    const int64_t T = f->db.T, R = f->n_runs, L = f->n_logits;
    struct fwd_graph *lru = &f->graphs[0];
    for (int i = 0; i < FWD_GRAPHS; i++) {
        struct fwd_graph *g = &f->graphs[i];
        if (g->state != FWD_G_FREE && g->T == T && g->n_runs == R && g->n_logits == L) {
            g->used = ++f->graph_clock;
            return g;
        }
        lru = g->used < lru->used ? g : lru;
    }
    dev_graph_destroy(f->dev, lru->g);
    *lru = (struct fwd_graph){
        .T = T, .n_runs = R, .n_logits = L, .used = ++f->graph_clock, .state = FWD_G_NEW};
    return lru;
}

/* A shape's first step runs directly (it may grow scratch, which a recording cannot), its second
 * is recorded and launched, later ones are launched; a recording the device spoiled (an op
 * needed the host) leaves the shape to direct steps. */
static void trunk_step(struct fwd_dev *f)
{
    struct fwd_graph *g = graph_of(f);
    if (g && g->state == FWD_G_SEEN) {
        dev_graph_begin(f->dev);
        trunk_ops(f);
        g->g = dev_graph_end(f->dev);
        g->state = g->g ? FWD_G_READY : FWD_G_DIRECT;
        f->n_captures += g->g != NULL;
    }
    if (g && g->state == FWD_G_READY) {
        dev_graph_launch(f->dev, g->g);
        f->n_replays++;
        return;
    }
    trunk_ops(f);
    if (g && g->state == FWD_G_NEW)
        g->state = FWD_G_SEEN;
}

void fwd__dev_decode(struct fwd_dev *f, const struct fwd_batch *b, const struct fwd_run *runs,
                     int64_t n_runs)
{
    f->runs = runs;
    f->n_runs = n_runs;
    upload_batch(f, b);
    select_rows(f);
    trunk_step(f);
    for (int64_t r = 0; r < f->n_runs; r++)
        cache_seq_advanced(&f->cache, f->runs[r].seq, f->runs[r].t1 - f->runs[r].t0);
    f->hid_last = f->hidden;
    f->n_hidden = b->n_tokens;
    f->hidden_fresh = false;
    f->b = NULL;
}

void fwd__dev_graph_stats(const struct fwd_dev *f, int64_t *captures, int64_t *replays)
{
    *captures = f->n_captures;
    *replays = f->n_replays;
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
        f->sub_row[n++] = (int32_t)t;
    }
    if (n == T)
        return false;
    add_norm(f, &f->m->layers[il].attn_norm, f->xn);
    fwd__attn_kv(f, il, f->xn);
    dev_upload(f->dev, f->d_sub_row, f->sub_row, (size_t)n * sizeof *f->d_sub_row);
    /* sub_row[i] >= i: each source row is read before it is overwritten */
    dev_gather_rows(f->dev, f->x, f->x, f->d_sub_row, n, E);
    f->sub = (struct fwd_batch){.n_tokens = n,
                                .token = f->sub_tok,
                                .pos = f->sub_pos,
                                .seq = f->sub_seq,
                                .logits = f->sub_want};
    return true;
}

void fwd__dev_mtp(struct fwd_dev *f, const struct fwd_batch *b, const struct fwd_run *runs,
                  int64_t n_runs, const float *h_prev, const int32_t *h_rows)
{
    const struct model_hparams *hp = &f->m->hp;
    f->runs = runs;
    f->n_runs = n_runs;
    f->mix_pending = false;
    const int64_t T = b->n_tokens, E = hp->n_embd, il = hp->n_layer;
    const struct model_layer *l = &f->m->layers[il];
    float *mhid = f->hidden + f->p.max_tokens * E; /* the MTP rows of the pool */
    upload_batch(f, b);
    if (h_rows) { /* rows of the pool, gathered on the device */
        dev_upload(f->dev, f->d_hidx, h_rows, (size_t)T * sizeof *f->d_hidx);
        dev_gather_rows(f->dev, f->h_prev, f->hidden, f->d_hidx, T, E);
    } else {
        dev_upload(f->dev, f->h_prev, h_prev, (size_t)(T * E) * sizeof(float));
    }
    /* c = [enorm(embed(x_p)) | hnorm(h_{p-1})] -> eh_proj -> one decoder block */
    embed_rows(f, f->mix);
    rope_tables(f);
    rmsnorm_rows(f, f->mix, &l->enorm, f->xn, E, E, 2 * E);
    rmsnorm_rows(f, f->h_prev, &l->hnorm, f->xn + E, E, E, 2 * E);
    fwd__matmul(f, &l->eh_proj, f->xn, T, f->x);
    const struct model_w *norm =
        l->shared_head_norm.data ? &l->shared_head_norm : &f->m->output_norm;
    if (!kv_only_rows(f)) {
        block(f, il);
        select_rows(f);
        output_head(f, norm, mhid);
    } else if (f->sub.n_tokens == 0) {
        f->n_logits = 0;
    } else { /* the wanted rows' block; their hidden rows go back to their batch rows */
        upload_batch(f, &f->sub);
        rope_tables(f);
        block(f, il);
        select_rows(f);
        output_head(f, norm, mhid);
        dev_scatter_rows(f->dev, mhid, mhid, f->d_sub_row, f->sub.n_tokens, E);
    }
    f->hid_last = mhid;
    f->n_hidden = T;
    f->hidden_fresh = false;
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

/* The activation widths of a step (see struct fwd_dev). */
struct widths {
    int64_t w0, w1, w2, w3, ws, hv, k, tk, ffx, ff;
};

static struct widths widths_of(const struct model *m, int64_t T)
{
    const struct model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, Hv = hp->ssm_hv, S = hp->ssm_s;
    const int64_t q_out = hp->n_head * hp->head_dim * 2, kv = hp->n_head_kv * hp->head_dim;
    struct widths w = {.ff = max3(hp->n_ff, hp->n_ff_exp, hp->n_ff_shexp)};
    w.w0 = max3(q_out, hp->conv_ch, w.ff);
    w.w1 = max3(kv, hp->conv_ch, w.ff);
    w.w2 = max3(max3(kv, Hv * S, 2 * Hv), hp->n_expert ? E : 1, 1);
    w.w3 = max3(hp->n_head * hp->head_dim, Hv * S, 1);
    w.ws = max3(2 * Hv, hp->n_expert, 1);
    w.hv = Hv ? Hv : 1;
    w.k = hp->n_expert_used ? hp->n_expert_used : 1;
    w.tk = hp->n_expert ? T * w.k : 1;
    w.ffx = hp->n_expert ? hp->n_ff_exp : 1;
    return w;
}

/* Every activation part: name, elements, element size. Parts are 64-byte aligned. */
#define ACT_PARTS(X, T, E, V, w, Nx, R, H)                                                         \
    X(x, T *E, float)                                                                              \
    X(xn, T * 2 * E, float)                                                                        \
    X(mix, T *E, float)                                                                            \
    X(big0, T *w.w0, float)                                                                        \
    X(big1, T *w.w1, float)                                                                        \
    X(big2, T *w.w2, float)                                                                        \
    X(big3, T *w.w3, float)                                                                        \
    X(small, T *w.ws, float)                                                                       \
    X(beta, T *w.hv, float)                                                                        \
    X(decay, T *w.hv, float)                                                                       \
    X(rope, T *R, float)                                                                           \
    X(route_w, T *w.k, float)                                                                      \
    X(route_e, T *w.k, int32_t)                                                                    \
    X(slot, T *w.k, int32_t)                                                                       \
    X(e_off, Nx + 1, int32_t)                                                                      \
    X(e_row, T *w.k, int32_t)                                                                      \
    X(gath, w.tk *E, float)                                                                        \
    X(eg, w.tk *w.ffx, float)                                                                      \
    X(eu, w.tk *w.ffx, float)                                                                      \
    X(eout, w.tk *E, float)                                                                        \
    X(sh_gate, T, float)                                                                           \
    X(hidden, (2 * T + H) * E, float)                                                              \
    X(h_prev, T *E, float)                                                                         \
    X(hsel, T *E, float)                                                                           \
    X(logits, T *V, float)                                                                         \
    X(d_amax, T, int32_t)                                                                          \
    X(d_mass, T, float)                                                                            \
    X(d_tok, T, int32_t)                                                                           \
    X(d_seq, T, int32_t)                                                                           \
    X(d_rows, T, int32_t)                                                                          \
    X(d_sub_row, T, int32_t)                                                                       \
    X(d_hidx, T, int32_t)                                                                          \
    X(d_pos, T, int64_t)                                                                           \
    X(d_runs, T, struct dev_run)

void fwd_plan(const struct model *m, const struct fwd_params *p, struct dev_plan *plan)
{
    const struct model_hparams *hp = &m->hp;
    const int64_t T = p->max_tokens, E = hp->n_embd, V = m->vocab_hi - m->vocab_lo;
    const struct widths w = widths_of(m, T);
    cache_plan(m, p->n_seq, p->n_ctx, p->draft_max, plan);
#define PLAN_ADD(nm, n, type) dev_plan_add(plan, #nm, (size_t)(n) * sizeof(type), 64);
    ACT_PARTS(PLAN_ADD, T, E, V, w, hp->n_expert, hp->n_rot, p->n_hrows)
#undef PLAN_ADD
}

/* The device addresses of the activation parts, carved from base. */
static void carve(struct fwd_dev *f, char *base)
{
    int i = 0;
    while (strcmp(f->plan.part[i].name, "x") != 0)
        i++;
#define CARVE(nm, n, type)                                                                         \
    ASSERT(strcmp(f->plan.part[i].name, #nm) == 0);                                                \
    f->nm = (type *)(void *)(base + f->plan.part[i++].offset);
    ACT_PARTS(CARVE, 0, 0, 0, (struct widths){0}, 0, 0, 0)
#undef CARVE
}

int fwd__dev_create(const struct model *m, struct dev *d, const struct fwd_params *p,
                    struct comm *comm, int rank, struct fwd_dev **out, char *err, size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    if (p->max_tokens < 1 || p->n_seq < 1 || p->n_ctx < 1 || p->draft_max < 0 ||
        p->draft_max > 64 || p->n_hrows < 0 || p->n_hrows > (1 << 24)) {
        dd_errf(err, errlen,
                "invalid forward parameters (max_tokens %lld, n_seq %lld, n_ctx "
                "%lld, draft_max %lld, n_hrows %lld)",
                (long long)p->max_tokens, (long long)p->n_seq, (long long)p->n_ctx,
                (long long)p->draft_max, (long long)p->n_hrows);
        return DD_EINVAL;
    }
    struct fwd_dev *f = xcalloc(1, sizeof *f);
    f->m = m;
    f->dev = d;
    f->p = *p;
    f->comm = comm;
    f->rank = rank;
    fwd_plan(m, p, &f->plan);
    char *base = NULL;
    int rc = dev_buf_alloc(d, f->plan.total, f->plan.align, &f->buf, (void **)&base);
    if (rc) {
        const size_t cache = cache_bytes_needed(m, p->n_seq, p->n_ctx, p->draft_max);
        char mem[96];
        dev_mem_note(d, mem, sizeof mem);
        dd_errf(err, errlen,
                "cannot allocate %.1f MiB on device %s%s: the cache %.1f MiB for %lld sequences "
                "x %lld tokens with %lld snapshot groups, activations %.1f MiB; lower slots, ctx "
                "or max_batch_tokens",
                f->plan.total / 1048576.0, d->ops->name, mem, cache / 1048576.0,
                (long long)p->n_seq, (long long)p->n_ctx, (long long)(1 + p->draft_max),
                (f->plan.total - cache) / 1048576.0);
        free(f);
        return DD_EFULL;
    }
    cache_init(&f->cache, m, d, p->n_seq, p->n_ctx, p->draft_max, &f->plan, base);
    carve(f, base);
    const int64_t T = p->max_tokens, E = hp->n_embd, Hv = hp->ssm_hv, S = hp->ssm_s;
    const int64_t grp = hp->n_head_kv ? hp->n_head / hp->n_head_kv : 1;
    f->runs_h = xcalloc((size_t)T, sizeof *f->runs_h);
    f->rows_h = xcalloc((size_t)T, sizeof *f->rows_h);
    f->sub_tok = xcalloc((size_t)T, sizeof *f->sub_tok);
    f->sub_seq = xcalloc((size_t)T, sizeof *f->sub_seq);
    f->sub_pos = xcalloc((size_t)T, sizeof *f->sub_pos);
    f->sub_row = xcalloc((size_t)T, sizeof *f->sub_row);
    f->sub_want = xcalloc((size_t)T, sizeof *f->sub_want);
    f->hidden_h = xaligned_alloc((size_t)(T * E) * sizeof(float));
    const int64_t ff = widths_of(m, T).ff;
    int64_t max_in = max3(2 * E, ff, max3(hp->n_head * hp->head_dim, Hv * S, 1));
    rc = dev_reserve(d, T, max_in);
    rc = rc ? rc : dev_reserve_multi(d, multi_act_bytes(m, T));
    rc = rc ? rc : dev_reserve_attn(d, p->n_ctx, grp);
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
    for (int i = 0; i < FWD_GRAPHS; i++)
        dev_graph_destroy(f->dev, f->graphs[i].g);
    cache_deinit(&f->cache);
    dev_buf_free(f->dev, f->buf);
    void *bufs[] = {f->runs_h,  f->rows_h,  f->sub_tok,  f->sub_seq,
                    f->sub_pos, f->sub_row, f->sub_want, f->hidden_h};
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

const int32_t *fwd__dev_argmax(struct fwd_dev *f, int64_t *n_rows, const float **mass)
{
    const int64_t w = f->m->vocab_hi - f->m->vocab_lo;
    ASSERT(w > 0);
    *n_rows = f->n_logits;
    dev_argmax(f->dev, f->logits, f->n_logits, w, f->d_amax, mass ? f->d_mass : NULL);
    if (mass)
        *mass = f->d_mass;
    return f->d_amax;
}

const float *fwd__dev_hidden(struct fwd_dev *f)
{
    if (!f->hidden_fresh) {
        dev_download(f->dev, f->hidden_h, f->hid_last ? f->hid_last : f->hidden,
                     (size_t)(f->n_hidden * f->m->hp.n_embd) * sizeof(float));
        dev_sync(f->dev);
        f->hidden_fresh = true;
    }
    return f->hidden_h;
}

float *fwd__dev_hrow(const struct fwd_dev *f, int32_t row)
{
    ASSERT(row >= 0 && row < 2 * f->p.max_tokens + f->p.n_hrows);
    return f->hidden + (int64_t)row * f->m->hp.n_embd;
}

struct dev *fwd__dev_device(const struct fwd_dev *f)
{
    return f->dev;
}

const struct model *fwd__dev_model(const struct fwd_dev *f)
{
    return f->m;
}

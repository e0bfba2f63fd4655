/*
 * cmd_bench — `deltad bench` (prefill and decode tokens/s against the memory-bandwidth
 * roofline, medians of repeated runs) and `deltad info` (topology, kernels, model, memory plan).
 *
 * Roofline: decode reads every weight a token touches once (for MoE only the routed experts'
 * share), plus the KV rows up to the current depth and the GDN state (read and written). The
 * bandwidth is a STREAM-like triad measured here on the device's own threads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h" // defines: cache_bytes_needed
#include "cmd.h"   // defines: cmd_engine_open, cmd_feed
#include "quant.h" // defines: kq_isa_name
#include "util.h"  // defines: dd_now, xaligned_alloc

/* ============================================================================================
 * Memory bandwidth: a = b + s*c over arrays far larger than the caches
 * ========================================================================================== */

struct triad {
    double *a, *b, *c;
    int64_t n;
};

static void triad_worker(void *ctx, int ith, int nth)
{
    struct triad *t = ctx;
    int64_t lo, hi;
    dev_split(t->n, ith, nth, 64, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        t->a[i] = t->b[i] + 3.0 * t->c[i];
}

static void init_worker(void *ctx, int ith, int nth)
{
    struct triad *t = ctx;
    int64_t lo, hi;
    dev_split(t->n, ith, nth, 64, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        t->a[i] = 0.0;
        t->b[i] = 1.0;
        t->c[i] = 2.0;
    }
}

/* Best of several passes, in GB/s, counting the three arrays (STREAM's convention). */
static double triad_gbs(struct dev *d)
{
    struct triad t = {.n = 32 << 20}; /* 256 MiB per array */
    t.a = xaligned_alloc((size_t)t.n * sizeof(double));
    t.b = xaligned_alloc((size_t)t.n * sizeof(double));
    t.c = xaligned_alloc((size_t)t.n * sizeof(double));
    dev_parallel(d, init_worker, &t); /* first touch on the threads that will read */
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = dd_now();
        dev_parallel(d, triad_worker, &t);
        double gbs = 3.0 * (double)t.n * sizeof(double) / (dd_now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    free(t.a);
    free(t.b);
    free(t.c);
    return best;
}

/* ============================================================================================
 * Bytes and FLOPs per token
 * ========================================================================================== */

static double mat_bytes(const struct model_w *w)
{
    return w->data ? (double)w->nb2 * (double)w->ne[2] : 0.0;
}

/* Weight bytes one decode token reads, and the multiply-adds it performs (params touched). */
static void per_token_cost(const struct model *m, double *bytes, double *params)
{
    const struct model_hparams *hp = &m->hp;
    double b = mat_bytes(&m->output), p = (double)hp->n_embd * hp->n_vocab;
    double frac = hp->n_expert ? (double)hp->n_expert_used / hp->n_expert : 1.0;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *l = &m->layers[il];
        const struct model_w *dense[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->qkv, &l->gate,
                                         &l->beta, &l->alpha, &l->ba, &l->ssm_out, &l->ffn_gate,
                                         &l->ffn_up, &l->ffn_down, &l->gate_inp, &l->gate_shexp,
                                         &l->up_shexp, &l->down_shexp};
        const struct model_w *experts[] = {&l->gate_exps, &l->up_exps, &l->down_exps};
        for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++) {
            b += mat_bytes(dense[i]);
            p += dense[i]->data ? (double)dense[i]->ne[0] * dense[i]->ne[1] : 0.0;
        }
        for (size_t i = 0; i < 3; i++) {
            b += frac * mat_bytes(experts[i]);
            p += experts[i]->data ? frac * experts[i]->ne[0] * experts[i]->ne[1] * experts[i]->ne[2]
                                  : 0.0;
        }
    }
    *bytes = b;
    *params = p;
}

/* KV rows read at depth d plus the GDN state read and written, per decode token. */
static double state_bytes(const struct model *m, int64_t depth)
{
    const struct model_hparams *hp = &m->hp;
    double kv = (double)model_n_attn_layers(m) * depth * hp->n_head_kv * hp->head_dim * 2 * 4;
    double ssm = 0.0;
    if (hp->arch != ARCH_QWEN3)
        ssm = (double)model_n_gdn_layers(m) * hp->ssm_hv * hp->ssm_s * hp->ssm_s * 4 * 2;
    return kv + ssm;
}

/* ============================================================================================
 * bench
 * ========================================================================================== */

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int64_t n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One repetition: prefill n_prompt tokens (timed), then decode n_gen tokens after `depth`
 * tokens of context (timed). */
static int bench_rep(struct cmd_engine *e, const struct cmd_opts *o, const int32_t *toks,
                     double *pp, double *tg)
{
    fwd_seq_clear(e->fwd, 0);
    double t0 = dd_now();
    if (cmd_feed(e, toks, o->n_prompt, 0, o->batch, NULL, NULL))
        return 1;
    *pp = o->n_prompt / (dd_now() - t0);
    fwd_seq_clear(e->fwd, 0);
    if (o->depth && cmd_feed(e, toks, o->depth, 0, o->batch, NULL, NULL))
        return 1;
    t0 = dd_now();
    for (int64_t i = 0; i < o->n_gen; i++)
        if (cmd_feed(e, toks + o->depth + i, 1, o->depth + i, 1, NULL, NULL))
            return 1;
    *tg = o->n_gen / (dd_now() - t0);
    return 0;
}

int cmd_bench(const struct cmd_opts *o)
{
    if (o->spec)
        return cmd_bench_spec(o);
    struct cmd_engine e;
    int64_t n_ctx = (o->n_prompt > o->depth + o->n_gen ? o->n_prompt : o->depth + o->n_gen) + 1;
    if (cmd_engine_open(&e, o) || cmd_engine_ready(&e, 1, n_ctx, o->batch)) {
        cmd_engine_close(&e);
        return 1;
    }
    const struct model *m = e.model;
    int32_t *toks = xmalloc((size_t)n_ctx * sizeof *toks);
    for (int64_t i = 0; i < n_ctx; i++) /* deterministic, ordinary (non-special) tokens */
        toks[i] = (int32_t)((i * 7919 + 13) % (m->hp.n_vocab < 256 ? m->hp.n_vocab : 256));
    /* the bandwidth of all the group's threads together, on a pool of the same size */
    int total = 0;
    for (int d = 0; d < e.n_dev; d++)
        total += dev_n_threads(e.devs[d]);
    struct dev *td = e.dev;
    char err[256];
    if (e.n_dev > 1 && dev_cpu_create(total, NULL, &td, err, sizeof err))
        td = e.dev;
    double gbs = triad_gbs(td);
    if (td != e.dev)
        dev_destroy(td);
    double *pp = xcalloc((size_t)o->reps, sizeof *pp), *tg = xcalloc((size_t)o->reps, sizeof *tg);
    /* one warm-up repetition (page tables of the mapping, caches, thread wake-up) not counted */
    int rc = bench_rep(&e, o, toks, &pp[0], &tg[0]);
    for (int64_t r = 0; r < o->reps && !rc; r++)
        rc = bench_rep(&e, o, toks, &pp[r], &tg[r]);
    if (!rc) {
        double bytes, params;
        per_token_cost(m, &bytes, &params);
        double tok_bytes = bytes + state_bytes(m, o->depth + o->n_gen / 2);
        double pp_med = median(pp, o->reps), tg_med = median(tg, o->reps);
        double roof = gbs * 1e9 / tok_bytes;
        printf("model        %s (%s, %.1f MiB weights, %.1f MiB read per decode token)\n",
               m->path, model_arch_name(m->hp.arch), m->weight_bytes / 1048576.0,
               tok_bytes / 1048576.0);
        double ar_s;
        int64_t ar_calls;
        fwd_comm_stats(e.fwd, &ar_s, &ar_calls);
        printf("devices      %d CPU x %d threads, kernels %s, reps %lld (medians)\n", e.n_dev,
               dev_n_threads(e.dev), kq_isa_name(kq_isa_active()), (long long)o->reps);
        if (e.n_dev > 1)
            printf("allreduce    %lld calls, %.1f us each on average\n", (long long)ar_calls,
                   ar_calls ? ar_s / ar_calls * 1e6 : 0.0);
        printf("bandwidth    %.1f GB/s (triad)\n", gbs);
        printf("prefill      %lld tokens: %.1f tok/s, %.1f GFLOP/s\n", (long long)o->n_prompt,
               pp_med, 2.0 * params * pp_med / 1e9);
        printf("decode       %lld tokens at depth %lld: %.2f tok/s\n", (long long)o->n_gen,
               (long long)o->depth, tg_med);
        printf("roofline     %.2f tok/s; reached %.1f%% (%.1f GB/s effective)\n", roof,
               100.0 * tg_med / roof, tg_med * tok_bytes / 1e9);
    }
    free(pp);
    free(tg);
    free(toks);
    cmd_engine_close(&e);
    return rc;
}

/* ============================================================================================
 * info
 * ========================================================================================== */

int cmd_info(const struct cmd_opts *o)
{
    char err[512];
    topo_t *topo = topo_create(err, sizeof err);
    if (!topo) {
        fprintf(stderr, "error: hwloc topology: %s\n", err);
        return 1;
    }
    topo_plan *plan = NULL;
    if (topo_split(topo, (int)(o->tp ? o->tp : 1), 0, &plan, err, sizeof err))
        fprintf(stderr, "warning: placement: %s\n", err);
    topo_print(topo, plan, stdout);
    printf("kernels: %s (best on this CPU: %s)\n", kq_isa_name(kq_isa_active()),
           kq_isa_name(kq_isa_best()));
    topo_plan_destroy(plan);
    topo_destroy(topo);
    if (!o->model)
        return 0;
    struct model *m;
    if (model_load(o->model, &m, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    model_print(m, stdout);
    int64_t ctx = o->ctx ? o->ctx : 4096;
    double bytes, params;
    per_token_cost(m, &bytes, &params);
    printf("memory plan (1 sequence, ctx %lld):\n", (long long)ctx);
    printf("  weights   %10.1f MiB  mmap, read in place (no copy)\n", m->weight_bytes / 1048576.0);
    printf("  cache     %10.1f MiB  KV f32 + GDN state, 1 snapshot group\n",
           cache_bytes_needed(m, 1, ctx, 0) / 1048576.0);
    printf("  per extra snapshot group: %.2f MiB\n",
           (cache_bytes_needed(m, 1, ctx, 1) - cache_bytes_needed(m, 1, ctx, 0)) / 1048576.0);
    printf("  decode reads %.1f MiB of weights per token (%.0f M parameters touched)\n",
           bytes / 1048576.0, params / 1e6);
    model_free(m);
    return 0;
}

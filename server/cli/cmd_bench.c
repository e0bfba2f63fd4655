/*
 * cmd_bench — `deltad bench` (prefill and decode tokens/s against the memory-bandwidth
 * roofline and the peak multiply-add rate, medians of repeated runs) and `deltad info`
 * (topology, kernels, model, memory plan).
 *
 * Roofline: decode reads every weight a token touches once (for MoE only the routed experts'
 * share), plus the KV rows up to the current depth and the GDN state (read and written). The
 * bandwidth is a STREAM-like triad measured here on the device's own threads, before every
 * decode repetition; the best of those measurements is the machine's bandwidth (on a shared
 * machine the others read low), and the fraction is the median decode rate against it. On a
 * GPU the bandwidth is a device-to-device copy of 512 MiB on the device's stream (read plus
 * write bytes, STREAM's copy convention), and there is no compute peak (reported as 0).
 * Prefill is set against the in-cache peak of the multiply-add instruction its activation type
 * runs on (kq_peak_ops), counting the matmul work only (the LM head once per prompt).
 *
 * The machine may also be busy with other work: with one thread the bench also reports each
 * rate by CPU time, which leaves out the time the thread was not running (the two agree on an
 * idle machine). With more threads CPU time says nothing useful (idle workers sleep), so only
 * the wall clock counts there.
 *
 * The last line of a run, "result ...", is one key=value record for tools/bench.sh.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd.h"                     // defines: cmd_engine_open, cmd_feed
#include "engine/compute/dev_cuda.h" // defines: dev_cuda_count, dev_cuda_info
#include "engine/compute/dist.h"     // defines: dist_allgather, dist_size
#include "engine/compute/shard.h"    // defines: shard_relayout_bytes
#include "engine/sched/cache.h"      // defines: cache_bytes_needed
#include "engine/util.h"             // defines: dd_now, xaligned_alloc
#include "kernels/cpu/kq.h"          // defines: kq_isa_name, kq_peak_ops, kq_repack_type

/* ============================================================================================
 * Memory bandwidth: a = b + s*c over arrays far larger than the caches
 * ========================================================================================== */

struct triad {
    double *a, *b, *c;
    int64_t n;
    struct dev *gpu; /* a GPU: a device copy instead (gbuf, two halves of copy_bytes) */
    struct dev_buf *gbuf;
    char *gmem;
    size_t copy_bytes;
};

static void triad_worker(void *ctx, int ith, int nth)
{
    struct triad *t = ctx;
    int64_t lo, hi;
    dev_split(t->n, ith, nth, 64, &lo, &hi);
    double *restrict a = t->a;
    const double *restrict b = t->b, *restrict c = t->c;
    for (int64_t i = lo; i < hi; i++)
        a[i] = b[i] + 3.0 * c[i];
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

/* 3 x 128 MiB, first touched by the threads that will read them; on a GPU 2 x 512 MiB of its
 * memory (none if it cannot spare them: the bandwidth then reads 0). */
static void triad_init(struct triad *t, struct dev *d)
{
    memset(t, 0, sizeof *t);
    if (dev_cuda_ordinal(d) >= 0) {
        t->gpu = d;
        t->copy_bytes = (size_t)512 << 20;
        if (dev_buf_alloc(d, 2 * t->copy_bytes, 256, &t->gbuf, (void **)&t->gmem))
            t->gbuf = NULL;
        return;
    }
    t->n = 16 << 20;
    t->a = xaligned_alloc((size_t)t->n * sizeof(double));
    t->b = xaligned_alloc((size_t)t->n * sizeof(double));
    t->c = xaligned_alloc((size_t)t->n * sizeof(double));
    dev_parallel(d, init_worker, t);
}

static void triad_free(struct triad *t)
{
    if (t->gpu) {
        dev_buf_free(t->gpu, t->gbuf);
        return;
    }
    free(t->a);
    free(t->b);
    free(t->c);
}

/* Best of `passes` passes, in GB/s, counting the three arrays (STREAM's convention). */
static double triad_gbs(struct triad *t, struct dev *d, int passes)
{
    double best = 0.0;
    for (int rep = 0; rep < passes && t->gpu; rep++) {
        if (!t->gbuf)
            break;
        dev_sync(t->gpu);
        double t0 = dd_now();
        dev_copy(t->gpu, t->gmem + t->copy_bytes, t->gmem, t->copy_bytes);
        dev_sync(t->gpu);
        double gbs = 2.0 * (double)t->copy_bytes / (dd_now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    for (int rep = 0; rep < passes && !t->gpu; rep++) {
        double t0 = dd_now();
        dev_parallel(d, triad_worker, t);
        double gbs = 3.0 * (double)t->n * sizeof(double) / (dd_now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    return best;
}

/* ============================================================================================
 * Peak multiply-add rate of the device's threads together
 * ========================================================================================== */

struct peak_job {
    enum kq_type w;
    int64_t n;   /* 0: the instruction's peak; else the kernel's, n inputs */
    double *ops; /* [n_threads] */
};

static void peak_worker(void *ctx, int ith, int nth)
{
    struct peak_job *j = ctx;
    j->ops[ith] = j->n ? kq_kernel_ops(j->w, j->n, 0.2) : kq_peak_ops(j->w, 0.2);
}

/* Operations per second (a multiply-add is 2) of all threads of d running at once: the peak of
 * w's multiply-add instruction (n == 0), or of its matmul kernel with n inputs, in cache. */
static double peak_ops(struct dev *d, enum kq_type w, int64_t n)
{
    if (dev_cuda_ordinal(d) >= 0)
        return 0.0; /* not measured on a GPU */
    struct peak_job j = {.w = w, .n = n, .ops = xcalloc((size_t)dev_n_threads(d), sizeof(double))};
    dev_parallel(d, peak_worker, &j);
    double sum = 0.0;
    for (int i = 0; i < dev_n_threads(d); i++)
        sum += j.ops[i];
    free(j.ops);
    return sum;
}

/* ============================================================================================
 * Bytes and FLOPs per token
 * ========================================================================================== */

static double mat_bytes(const struct model_w *w)
{
    return w->data ? (double)w->nb2 * (double)w->ne[2] : 0.0;
}

static double mat_params(const struct model_w *w)
{
    return w->data ? (double)w->ne[0] * (double)w->ne[1] * (double)w->ne[2] : 0.0;
}

/* Per decode token: the weight bytes read and the multiply-adds done (params touched) by the
 * trunk, and the same for the LM head. MoE counts the routed experts' share only (exp_bytes
 * of trunk_bytes: k of n_expert experts per layer, what one token reads). */
struct tok_cost {
    double trunk_bytes, trunk_params;
    double head_bytes, head_params;
    double exp_bytes;
    enum kq_type main_type; /* the file type of most of the trunk's bytes */
};

/* Adds w's bytes to by_type[its type] (file types are below 32). */
static void count_type(double *by_type, const struct model_w *w, double frac)
{
    if (w->data && (unsigned)w->type < 32)
        by_type[w->type] += frac * mat_bytes(w);
}

static struct tok_cost per_token_cost(const struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    struct tok_cost c = {.head_bytes = mat_bytes(&m->output),
                         .head_params = mat_params(&m->output)};
    double frac = hp->n_expert ? (double)hp->n_expert_used / hp->n_expert : 1.0, by_type[32] = {0};
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *l = &m->layers[il];
        const struct model_w *dense[] = {
            &l->wq,       &l->wk,       &l->wv,         &l->wo,       &l->qkv,       &l->gate,
            &l->beta,     &l->alpha,    &l->ba,         &l->ssm_out,  &l->ffn_gate,  &l->ffn_up,
            &l->ffn_down, &l->gate_inp, &l->gate_shexp, &l->up_shexp, &l->down_shexp};
        const struct model_w *experts[] = {&l->gate_exps, &l->up_exps, &l->down_exps};
        for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++) {
            c.trunk_bytes += mat_bytes(dense[i]);
            c.trunk_params += mat_params(dense[i]);
            count_type(by_type, dense[i], 1.0);
        }
        for (size_t i = 0; i < 3; i++) {
            c.trunk_bytes += frac * mat_bytes(experts[i]);
            c.exp_bytes += frac * mat_bytes(experts[i]);
            c.trunk_params += frac * mat_params(experts[i]);
            count_type(by_type, experts[i], frac);
        }
    }
    int best = 0;
    for (int t = 1; t < 32; t++)
        best = by_type[t] > by_type[best] ? t : best;
    c.main_type = by_type[best] > 0 ? (enum kq_type)best : m->output.type;
    return c;
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

/* 100 x / y, or 0 where y was not measured (a GPU's compute peak). */
static double pct(double x, double y)
{
    return y > 0 ? 100.0 * x / y : 0.0;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int64_t n)
{
    double *s = xmalloc((size_t)n * sizeof *s);
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_dbl);
    double r = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return r;
}

/* CPU seconds of the calling thread (the only one with a one-thread device). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What the repetitions measured, one entry per repetition (_c: by CPU time). */
struct bench_runs {
    int threads;
    double *pp, *pp_c; /* prefill tok/s */
    double *tg, *tg_c; /* decode tok/s */
    double *bw;        /* triad GB/s measured just before the decode repetition */
    /* allreduces inside the timed parts, summed over the repetitions: [0] seconds, [1] of
     * those waiting for the other devices, [2] calls; and the timed seconds themselves */
    double ar_pp[3], ar_tg[3];
    double pp_s, tg_s;
};

/* The group's allreduce totals so far: seconds, waiting seconds, calls. */
static void ar_snap(const struct cmd_engine *e, double v[3])
{
    int64_t calls;
    fwd_comm_stats(e->fwd, &v[0], &calls);
    v[1] = fwd_comm_wait_seconds(e->fwd);
    v[2] = (double)calls;
}

/* Add the allreduce totals since the snapshot `before` to acc. */
static void ar_add(const struct cmd_engine *e, const double before[3], double acc[3])
{
    double now[3];
    ar_snap(e, now);
    for (int i = 0; i < 3; i++)
        acc[i] += now[i] - before[i];
}

/* Prefill: n_prompt tokens from an empty sequence, `reps` times. */
static int bench_prefill(struct cmd_engine *e, const struct cmd_opts *o, const int32_t *toks,
                         struct bench_runs *b)
{
    for (int64_t r = 0; r < o->reps; r++) {
        fwd_seq_clear(e->fwd, 0);
        double ar0[3];
        ar_snap(e, ar0);
        double t0 = dd_now(), c0 = cpu_now();
        if (cmd_feed(e, toks, o->n_prompt, 0, o->batch, NULL, NULL))
            return 1;
        b->pp_s += dd_now() - t0;
        ar_add(e, ar0, b->ar_pp);
        b->pp[r] = o->n_prompt / (dd_now() - t0);
        b->pp_c[r] = o->n_prompt / (cpu_now() - c0);
    }
    return 0;
}

/*
 * Decode: fill `depth` tokens once and checkpoint the recurrent state (the KV rows past the
 * depth are overwritten by each repetition), then per repetition measure the bandwidth, restore
 * and decode n_gen tokens one by one. One untimed token first warms the decode path.
 */
static int bench_decode(struct cmd_engine *e, const struct cmd_opts *o, const int32_t *toks,
                        struct triad *tr, struct dev *td, struct bench_runs *b)
{
    fwd_seq_clear(e->fwd, 0);
    if (o->depth && cmd_feed(e, toks, o->depth, 0, o->batch, NULL, NULL))
        return 1;
    float *ckpt = xmalloc((fwd_ckpt_floats(e->fwd) + 1) * sizeof(float));
    fwd_seq_save(e->fwd, 0, ckpt);
    int rc = cmd_feed(e, toks + o->depth, 1, o->depth, 1, NULL, NULL);
    for (int64_t r = 0; r < o->reps && !rc; r++) {
        b->bw[r] = triad_gbs(tr, td, 3);
        fwd_seq_restore(e->fwd, 0, ckpt);
        double ar0[3];
        ar_snap(e, ar0);
        double t0 = dd_now(), c0 = cpu_now();
        for (int64_t i = 0; i < o->n_gen && !rc; i++)
            rc = cmd_feed(e, toks + o->depth + i, 1, o->depth + i, 1, NULL, NULL);
        b->tg_s += dd_now() - t0;
        ar_add(e, ar0, b->ar_tg);
        b->tg[r] = o->n_gen / (dd_now() - t0);
        b->tg_c[r] = o->n_gen / (cpu_now() - c0);
    }
    free(ckpt);
    return rc;
}

static void bench_print(const struct cmd_engine *e, const struct cmd_opts *o,
                        const struct bench_runs *b, double peak)
{
    const struct model *m = e->model;
    const struct model_hparams *hp = &m->hp;
    struct tok_cost c = per_token_cost(m);
    double tok_bytes = c.trunk_bytes + c.head_bytes + state_bytes(m, o->depth + o->n_gen / 2);
    const int64_t n = o->reps;
    double pp = median(b->pp, n), pp_c = median(b->pp_c, n), tg = median(b->tg, n);
    double tg_c = median(b->tg_c, n), bw = 0.0;
    for (int64_t r = 0; r < n; r++)
        bw = b->bw[r] > bw ? b->bw[r] : bw;
    const double roof = bw * 1e9 / tok_bytes, frac = tg / roof;
    double frac_c = tg_c / roof;
    /* prefill matmul work: the trunk for every token, the LM head for the last one */
    double op_tok = 2.0 * (c.trunk_params + c.head_params / o->n_prompt);
    printf("model        %s (%s, %.1f MiB weights)\n", m->path, model_arch_name(hp->arch),
           m->weight_bytes / 1048576.0);
    if (hp->n_expert)
        printf("experts      %lld of %lld per layer routed: decode reads only their share\n",
               (long long)hp->n_expert_used, (long long)hp->n_expert);
    if (dev_cuda_ordinal(e->dev) >= 0)
        printf("devices      %d GPU%s (cuda:%d first), reps %lld (medians)\n", e->n_dev,
               e->n_dev > 1 ? "s" : "", dev_cuda_ordinal(e->dev), (long long)o->reps);
    else
        printf("devices      %d CPU x %d threads, kernels %s, reps %lld (medians)\n", e->n_dev,
               dev_n_threads(e->dev), kq_isa_name(kq_isa_active()), (long long)o->reps);
    const int tp = fwd_n_devices(e->fwd);
    if (dist_size() > 1)
        printf("mpirun       %d ranks, %d devices in all; bandwidth, peak and roofline are rank "
               "0's alone\n",
               dist_size(), tp);
    /* per decode token / per prefill token: allreduce us, of which waiting, and calls */
    const double n_tg = (double)(n * o->n_gen), n_pp = (double)(n * o->n_prompt);
    const double ar_tg_us = b->ar_tg[0] / n_tg * 1e6, ar_tg_wait = b->ar_tg[1] / n_tg * 1e6;
    const double ar_pp_us = b->ar_pp[0] / n_pp * 1e6, ar_pp_wait = b->ar_pp[1] / n_pp * 1e6;
    if (tp > 1) {
        printf("allreduce    decode: %.0f calls per token, %.1f us per token = %.1f%% of its time "
               "(%.1f us of it waiting for the other devices to arrive)\n",
               b->ar_tg[2] / n_tg, ar_tg_us, 100.0 * b->ar_tg[0] / b->tg_s, ar_tg_wait);
        printf("allreduce    prefill: %.0f calls per prompt, %.1f us per prompt token = %.1f%% of "
               "its time (%.1f us waiting)\n",
               b->ar_pp[2] / n, ar_pp_us, 100.0 * b->ar_pp[0] / b->pp_s, ar_pp_wait);
    }
    const bool gpu = dev_cuda_ordinal(e->dev) >= 0;
    if (gpu)
        printf("peak         not measured on a GPU (prefill %% of peak reads 0)\n");
    else
        printf("peak         %.1f G%s/s (in-cache %s multiply-add, all threads)\n", peak / 1e9,
               kq_act_type(m->output.type) == KQ_F32 ? "FLOP" : "OP",
               kq_act_type(m->output.type) == KQ_F32 ? "f32" : "int8");
    char cpu_pp[64] = "", cpu_tg[64] = "", cpu_frac[64] = "";
    /* a GPU's host thread waits: its CPU time says nothing; nor does rank 0's of a job */
    if (b->threads == 1 && !gpu && dist_size() == 1) {
        snprintf(cpu_pp, sizeof cpu_pp, " (by CPU time: %.1f tok/s, %.1f%%)", pp_c,
                 pct(op_tok * pp_c, peak));
        snprintf(cpu_tg, sizeof cpu_tg, " (by CPU time: %.2f)", tg_c);
        snprintf(cpu_frac, sizeof cpu_frac, " (by CPU time: %.1f%%)", 100.0 * frac_c);
    } else {
        pp_c = tg_c = frac_c = 0.0; /* reported as 0: not measurable, see the top comment */
    }
    printf("prefill      %lld tokens: %.1f tok/s, matmul %.1f G/s = %.1f%% of peak%s\n",
           (long long)o->n_prompt, pp, op_tok * pp / 1e9, pct(op_tok * pp, peak), cpu_pp);
    printf("bandwidth    %.1f GB/s (%s, best of the measurements before each repetition)\n", bw,
           dev_cuda_ordinal(e->dev) >= 0 ? "device copy" : "triad");
    printf("decode       %lld tokens at depth %lld: %.2f tok/s%s, %.1f MiB read per token\n",
           (long long)o->n_gen, (long long)o->depth, tg, cpu_tg, tok_bytes / 1048576.0);
    printf("roofline     %.2f tok/s; reached %.1f%%%s, %.1f GB/s effective\n", roof, 100.0 * frac,
           cpu_frac, tg * tok_bytes / 1e9);
    printf("result arch=%s threads=%d tp=%d pp_tok=%.2f pp_tok_cpu=%.2f pp_pct=%.1f "
           "pp_pct_cpu=%.1f peak_gops=%.1f depth=%lld tg_tok=%.3f tg_tok_cpu=%.3f mib_tok=%.1f "
           "bw_gbs=%.2f roof_tok=%.3f roof_pct=%.1f roof_pct_cpu=%.1f ar_tg_us=%.1f "
           "ar_tg_wait_us=%.1f ar_tg_pct=%.1f ar_pp_us=%.1f ar_pp_pct=%.1f\n",
           model_arch_name(hp->arch), b->threads, tp, pp, pp_c, pct(op_tok * pp, peak),
           pct(op_tok * pp_c, peak), peak / 1e9, (long long)o->depth, tg, tg_c,
           tok_bytes / 1048576.0, bw, roof, 100.0 * frac, 100.0 * frac_c, ar_tg_us, ar_tg_wait,
           b->tg_s > 0 ? 100.0 * b->ar_tg[0] / b->tg_s : 0.0, ar_pp_us,
           b->pp_s > 0 ? 100.0 * b->ar_pp[0] / b->pp_s : 0.0);
}

/* ============================================================================================
 * --parallel: B sequences decoding together (llama.cpp's batched-bench)
 * ========================================================================================== */

#define PAR_MAX_B 256

/* "1,2,4,8" into bs[] (each 1..PAR_MAX_B, at most PAR_MAX_B entries); returns the count, or 0
 * after printing what is wrong. */
static int parse_parallel(const char *s, int64_t *bs)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 1 || v > PAR_MAX_B || (*end && *end != ',') ||
            n == PAR_MAX_B) {
            fprintf(stderr,
                    "error: --parallel: expected a comma-separated list of batch sizes in "
                    "[1, %d], got '%s'\n",
                    PAR_MAX_B, s);
            return 0;
        }
        bs[n++] = v;
        p = *end ? end + 1 : end;
        if (*end && !*p) { /* a trailing comma */
            fprintf(stderr, "error: --parallel: trailing ',' in '%s'\n", s);
            return 0;
        }
    }
    if (!n)
        fprintf(stderr, "error: --parallel: empty list\n");
    return n;
}

/* The expert reads of the timed steps (fwd_moe_stats): per step the bytes of the experts the
 * step's tokens routed to, and per MoE layer and step the distinct experts (their union). */
struct par_moe {
    bool on; /* a MoE model on devices that count them */
    double bytes_step, experts;
};

/* Fill sequences 0..B-1 with `depth` prompt tokens each (each its own copy, in batches), then
 * per repetition restore their recurrent state and decode n_gen steps of B tokens (one per
 * sequence, logits for every row), timed. tok_s[r] = B * n_gen / seconds; *moe: what the timed
 * steps read of the experts. */
static int par_run(struct cmd_engine *e, const struct cmd_opts *o, const int32_t *toks, int64_t B,
                   float *ckpt, double *tok_s, struct par_moe *moe)
{
    ASSERT(B >= 1 && B <= PAR_MAX_B);
    const int64_t nb = o->batch < B ? B : o->batch, nf = fwd_ckpt_floats(e->fwd) + 1;
    int64_t *pos = xmalloc((size_t)nb * sizeof *pos);
    int32_t *seq = xmalloc((size_t)nb * sizeof *seq), *tok = xmalloc((size_t)nb * sizeof *tok);
    uint8_t *want = xcalloc((size_t)nb, 1);
    char err[512];
    int rc = 0;
    for (int64_t s = 0; s < B && !rc; s++) {
        fwd_seq_clear(e->fwd, (int32_t)s);
        for (int64_t i = 0; i < o->depth && !rc; i += o->batch) {
            int64_t m = o->depth - i < o->batch ? o->depth - i : o->batch;
            for (int64_t j = 0; j < m; j++)
                pos[j] = i + j, seq[j] = (int32_t)s, want[j] = 0;
            struct fwd_batch b = {
                .n_tokens = m, .token = toks + i, .pos = pos, .seq = seq, .logits = want};
            rc = fwd_decode(e->fwd, &b, err, sizeof err);
        }
        fwd_seq_save(e->fwd, (int32_t)s, ckpt + s * nf);
    }
    memset(want, 1, (size_t)B);
    struct dev_moe_stats m0, m1;
    for (int64_t r = -1; r < o->reps && !rc; r++) { /* r = -1: an untimed warm-up pass */
        if (r == 0)
            moe->on = fwd_moe_stats(e->fwd, &m0) && e->model->hp.n_expert > 0;
        for (int64_t s = 0; s < B; s++)
            fwd_seq_restore(e->fwd, (int32_t)s, ckpt + s * nf);
        const int64_t steps = r < 0 ? 1 : o->n_gen;
        double t0 = dd_now();
        for (int64_t i = 0; i < steps && !rc; i++) {
            for (int64_t s = 0; s < B; s++) {
                pos[s] = o->depth + i, seq[s] = (int32_t)s;
                tok[s] = toks[(o->depth + i + 31 * s) % (o->depth + o->n_gen)];
            }
            struct fwd_batch b = {
                .n_tokens = B, .token = tok, .pos = pos, .seq = seq, .logits = want};
            rc = fwd_decode(e->fwd, &b, err, sizeof err);
        }
        if (r >= 0)
            tok_s[r] = (double)(B * o->n_gen) / (dd_now() - t0);
    }
    if (!rc && moe->on) {
        fwd_moe_stats(e->fwd, &m1);
        const int64_t calls = m1.calls - m0.calls;
        moe->bytes_step = (m1.bytes - m0.bytes) / (double)(o->reps * o->n_gen);
        moe->experts = calls > 0 ? (double)(m1.experts - m0.experts) / (double)calls : 0.0;
    }
    if (rc)
        fprintf(stderr, "error: forward: %s\n", err);
    free(pos);
    free(seq);
    free(tok);
    free(want);
    return rc;
}

/*
 * The table: per B the median aggregate and per-sequence tok/s, the efficiency against B times
 * the B = 1 rate, and the fractions of two limits. Bandwidth: a step reads the weights once for
 * all B tokens plus each sequence's KV and GDN state, so the roofline is B * bw / (weights +
 * B * state). For MoE "weights" are the dense ones plus the experts the step read, measured
 * (fwd_moe_stats): the union of the experts its B tokens routed to in each layer, which grows
 * from k towards all n_expert with B; the k / n_expert share of one token ("roof k/N", the
 * fixed estimate) is shown beside it for comparison. Compute: each token costs 2 * params
 * multiply-adds. Two rates are measured: the in-cache peak of the activation type's instruction
 * ("compute" column: the share of it used) and what the matmul kernel of the trunk's main weight
 * type reaches in cache with 64 tokens (kq_kernel_ops: the block scales' float work and the
 * loads come on top of the multiply-adds). Where the bandwidth roofline passes the kernel's rate,
 * decode is compute-bound, and the bench names that B. "cap" is the "vs B x B1" those limits
 * allow when B runs at the same fraction of them as B = 1: min(roofline, kernel) at B over B
 * times the same at 1. Past B = 1 it falls below 1 even while memory-bound, because every
 * sequence's KV and GDN state is read on top of the shared weights.
 */
static int bench_parallel(struct cmd_engine *e, const struct cmd_opts *o, const int64_t *bs,
                          int n_b, const int32_t *toks, struct triad *tr, struct dev *td,
                          double peak, int threads)
{
    const struct model *m = e->model;
    struct tok_cost c = per_token_cost(m);
    const double weights = c.trunk_bytes + c.head_bytes,
                 ops_tok = 2.0 * (c.trunk_params + c.head_params);
    const double state = state_bytes(m, o->depth + o->n_gen / 2);
    int64_t b_max = 1;
    for (int i = 0; i < n_b; i++)
        b_max = bs[i] > b_max ? bs[i] : b_max;
    float *ckpt = xmalloc((size_t)(b_max * (fwd_ckpt_floats(e->fwd) + 1)) * sizeof(float));
    double *runs = xmalloc((size_t)o->reps * sizeof *runs), bw = 0.0, rate1 = 0.0, lim1 = 0.0;
    for (int r = 0; r < 3; r++) { /* the best of three: other work on the machine reads low */
        double g = triad_gbs(tr, td, 3);
        bw = g > bw ? g : bw;
    }
    const double kernel = peak_ops(td, c.main_type, m->hp.n_embd);
    const double compute_tok = peak / ops_tok, kernel_tok = kernel / ops_tok; /* tok/s */
    /* B * bw / (weights + B * state) reaches kernel_tok at b_cross; as B grows the roofline
     * tends to bw / state, so where that is below the kernel's rate decode never binds on it */
    const double state_cap = bw * 1e9 / state,
                 b_cross = kernel_tok * weights / (bw * 1e9 - kernel_tok * state);
    char bound[96];
    if (kernel_tok <= 0)
        snprintf(bound, sizeof bound, "compute bound not measured here");
    else if (state_cap > kernel_tok)
        snprintf(bound, sizeof bound, "compute-bound from B = %.0f",
                 b_cross > 1 ? ceil(b_cross) : 1.0);
    else
        snprintf(bound, sizeof bound, "never compute-bound (state caps the roofline at %.1f tok/s)",
                 state_cap);
    printf("model        %s (%s, %.1f MiB weights, %.1f MiB read per decode step + %.2f MiB "
           "state per sequence)\n",
           m->path, model_arch_name(m->hp.arch), m->weight_bytes / 1048576.0, weights / 1048576.0,
           state / 1048576.0);
    printf("devices      %d CPU x %d threads, kernels %s, depth %lld, %lld steps, reps %lld "
           "(medians)\n",
           e->n_dev, dev_n_threads(e->dev), kq_isa_name(kq_isa_active()), (long long)o->depth,
           (long long)o->n_gen, (long long)o->reps);
    const char *unit = kq_act_type(m->output.type) == KQ_F32 ? "FLOP" : "OP";
    printf("limits       bandwidth %.1f GB/s (triad); compute %.1f G%s/s = %.1f tok/s; %s matmul "
           "kernel %.1f G%s/s = %.1f tok/s; %s\n",
           bw, peak / 1e9, unit, compute_tok, kq_type_name(c.main_type), kernel / 1e9, unit,
           kernel_tok, bound);
    const bool moe = m->hp.n_expert > 0;
    if (moe)
        printf("experts      roofline: dense weights + the experts each step read (measured: the "
               "union of its tokens' %lld of %lld per layer); roof k/N: %lld of %lld per token\n",
               (long long)m->hp.n_expert_used, (long long)m->hp.n_expert,
               (long long)m->hp.n_expert_used, (long long)m->hp.n_expert);
    printf("%5s %12s %12s %10s %6s", "B", "tok/s", "per seq", "vs B x B1", "cap");
    if (moe)
        printf(" %8s %10s", "experts", "MiB/step");
    printf(" %10s%s %10s\n", "roofline", moe ? "   roof k/N" : "", "compute");
    int rc = 0;
    for (int i = 0; i < n_b && !rc; i++) {
        const int64_t B = bs[i];
        struct par_moe pm = {0};
        rc = par_run(e, o, toks, B, ckpt, runs, &pm);
        if (rc)
            break;
        const double agg = median(runs, o->reps);
        /* the weights a step read: the k/N estimate, or the experts measured */
        const double read = pm.on ? weights - c.exp_bytes + pm.bytes_step : weights;
        const double roof = B * bw * 1e9 / (read + B * state);
        const double roof_kn = B * bw * 1e9 / (weights + B * state);
        /* what the limits allow: the roofline, or the kernel's rate where that is lower */
        const double lim = kernel_tok > 0 && kernel_tok < roof ? kernel_tok : roof;
        if (B == 1)
            rate1 = agg, lim1 = lim;
        char eff[32] = "-", cap[32] = "-";
        if (rate1 > 0)
            snprintf(eff, sizeof eff, "%.2f", agg / (B * rate1));
        if (lim1 > 0)
            snprintf(cap, sizeof cap, "%.2f", lim / (B * lim1));
        printf("%5lld %12.2f %12.2f %10s %6s", (long long)B, agg, agg / B, eff, cap);
        if (moe && pm.on)
            printf(" %8.1f %10.1f", pm.experts, read / 1048576.0);
        else if (moe)
            printf(" %8s %10s", "-", "-");
        printf(" %9.1f%%", 100.0 * agg / roof);
        if (moe)
            printf(" %9.1f%%", 100.0 * agg / roof_kn);
        printf(" %9.1f%%\n", pct(agg, compute_tok));
        printf("result parallel=%lld threads=%d tp=%d depth=%lld agg_tok=%.3f seq_tok=%.3f "
               "eff=%s cap=%s roof_pct=%.1f compute_pct=%.1f kernel_pct=%.1f bw_gbs=%.2f",
               (long long)B, threads, e->n_dev, (long long)o->depth, agg, agg / B, eff, cap,
               100.0 * agg / roof, pct(agg, compute_tok), pct(agg, kernel_tok), bw);
        if (pm.on)
            printf(" experts=%.2f mib_step=%.1f roof_kn_pct=%.1f", pm.experts, read / 1048576.0,
                   100.0 * agg / roof_kn);
        printf("\n");
        fflush(stdout);
    }
    free(runs);
    free(ckpt);
    return rc;
}

int cmd_bench(const struct cmd_opts *o)
{
    if (o->spec != CMD_SPEC_NONE)
        return cmd_bench_spec(o);
    if (*o->schema || *o->grammar)
        return cmd_bench_gram(o);
    int64_t bs[PAR_MAX_B];
    int n_b = 0;
    if (*o->parallel && !(n_b = parse_parallel(o->parallel, bs)))
        return 2;
    int64_t n_seq = 1;
    for (int i = 0; i < n_b; i++)
        n_seq = bs[i] > n_seq ? bs[i] : n_seq;
    struct cmd_engine e;
    int64_t n_ctx = (o->n_prompt > o->depth + o->n_gen ? o->n_prompt : o->depth + o->n_gen) + 1;
    if (cmd_engine_open(&e, o) ||
        cmd_engine_ready(&e, n_seq, n_ctx, o->batch > n_seq ? o->batch : n_seq)) {
        cmd_engine_close(&e);
        return 1;
    }
    const struct model *m = e.model;
    int32_t *toks = xmalloc((size_t)n_ctx * sizeof *toks);
    for (int64_t i = 0; i < n_ctx; i++) /* deterministic, ordinary (non-special) tokens */
        toks[i] = (int32_t)((i * 7919 + 13) % (m->hp.n_vocab < 256 ? m->hp.n_vocab : 256));
    /* bandwidth and peak of all the group's threads together, on a pool of the same size */
    int total = 0;
    for (int d = 0; d < e.n_dev; d++)
        total += dev_n_threads(e.devs[d]);
    struct dev *td = e.dev;
    char err[256];
    if (e.n_dev > 1 && dev_cuda_ordinal(e.dev) < 0 &&
        dev_cpu_create(total, NULL, &td, err, sizeof err))
        td = e.dev;
    struct triad tr;
    triad_init(&tr, td);
    double peak = peak_ops(td, m->output.type, 0);
    double *runs = xcalloc((size_t)(5 * o->reps), sizeof(double));
    struct bench_runs b = {.threads = total,
                           .pp = runs,
                           .pp_c = runs + o->reps,
                           .tg = runs + 2 * o->reps,
                           .tg_c = runs + 3 * o->reps,
                           .bw = runs + 4 * o->reps};
    /* warm-up, not counted: page tables of the mapping, caches, thread wake-up */
    int64_t n_warm = o->n_prompt < 32 ? o->n_prompt : 32;
    int rc = cmd_feed(&e, toks, n_warm, 0, o->batch, NULL, NULL);
    if (!rc && n_b) { /* --parallel: the batched table instead of prefill and decode */
        rc = bench_parallel(&e, o, bs, n_b, toks, &tr, td, peak, total);
    } else if (!rc) {
        rc = bench_prefill(&e, o, toks, &b);
        if (!rc)
            rc = bench_decode(&e, o, toks, &tr, td, &b);
        if (!rc)
            bench_print(&e, o, &b, peak);
    }
    if (!rc && dev_has_graphs(e.dev)) { /* a GPU: what cuda_graphs did */
        int64_t cap, rep;
        fwd_graph_stats(e.fwd, &cap, &rep);
        printf("graphs       %s: %lld batch shapes recorded, %lld steps replayed\n",
               e.graphs ? "on" : "off", (long long)cap, (long long)rep);
    }
    triad_free(&tr);
    if (td != e.dev)
        dev_destroy(td);
    free(runs);
    free(toks);
    cmd_engine_close(&e);
    return rc;
}

/* ============================================================================================
 * info
 * ========================================================================================== */

/* The layout a CPU device stores weights of type t in (dev_cpu's weight_layout). */
static enum kq_type cpu_layout(void *ctx, enum kq_type t)
{
    (void)ctx;
    return kq_repack_type(t);
}

/* Under mpirun: every rank's host and device count; rank 0 prints them, the others print
 * nothing. Returns true on a worker (which is then done). */
static bool info_ranks(const struct cmd_opts *o)
{
    if (dist_size() < 2)
        return false;
    struct rank_info {
        char host[64];
        int64_t devices, pid;
    } mine = {.devices = o->dev_spec.cuda && o->dev_spec.all ? -1 : o->dev_spec.n, .pid = getpid()},
      all[DIST_MAX_RANKS];
    snprintf(mine.host, sizeof mine.host, "%s", dist_host());
    if (dist_allgather(&mine, all, sizeof mine)) {
        fprintf(stderr, "error: rank %d: %s\n", dist_rank(), dist_failure());
        return dist_rank() != 0;
    }
    if (dist_rank() != 0)
        return true;
    int64_t total = 0;
    printf("mpirun job: %d ranks (rank 0 serves HTTP and schedules; each step runs on all)\n",
           dist_size());
    for (int r = 0; r < dist_size(); r++) {
        char n[24] = "all";
        if (all[r].devices >= 0)
            snprintf(n, sizeof n, "%lld", (long long)all[r].devices);
        printf("  rank %d: host %s, pid %lld, %s %s\n", r, all[r].host, (long long)all[r].pid, n,
               o->dev_spec.cuda ? "GPUs" : "CPU devices");
        total += all[r].devices;
    }
    printf("  tensor parallel over %lld devices in all\n", (long long)total);
    return false;
}

int cmd_info(const struct cmd_opts *o)
{
    char err[512];
    if (info_ranks(o))
        return 0;
    topo_t *topo = topo_create(err, sizeof err);
    if (!topo) {
        fprintf(stderr, "error: hwloc topology: %s\n", err);
        return 1;
    }
    topo_plan *plan = NULL;
    if (!o->dev_spec.cuda && topo_split(topo, o->dev_spec.n, 0, &plan, err, sizeof err))
        fprintf(stderr, "warning: placement: %s\n", err);
    topo_print(topo, plan, stdout);
    printf("kernels: %s (best on this CPU: %s)\n", kq_isa_name(kq_isa_active()),
           kq_isa_name(kq_isa_best()));
    const int n_gpu = dev_cuda_count();
    printf("CUDA GPUs: %d%s\n", n_gpu, n_gpu ? "" : " (none, or a build without CUDA)");
    for (int g = 0; g < n_gpu; g++) {
        char desc[256], busid[32];
        size_t fr, tot;
        dev_cuda_info(g, desc, sizeof desc, busid, sizeof busid, &fr, &tot);
        const int i = busid[0] ? topo_gpu_find(topo, busid) : -1;
        const int numa = i >= 0 ? topo_gpu_get(topo, i)->numa : -1;
        printf("  cuda:%d  %s; PCI %s; %.1f of %.1f GiB free; ", g, desc, busid[0] ? busid : "?",
               fr / 1073741824.0, tot / 1073741824.0);
        if (numa >= 0)
            printf("near NUMA node %d\n", numa);
        else
            printf("NUMA locality unknown\n");
    }
    topo_plan_destroy(plan);
    topo_destroy(topo);
    if (!*o->model)
        return 0;
    struct model *m;
    if (model_load(o->model, &m, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    model_print(m, stdout);
    int64_t ctx = o->ctx;
    struct tok_cost c = per_token_cost(m);
    double bytes = c.trunk_bytes + c.head_bytes, params = c.trunk_params + c.head_params;
    printf("memory plan (1 sequence, ctx %lld):\n", (long long)ctx);
    int n_re;
    const size_t re = shard_relayout_bytes(m, cpu_layout, NULL, &n_re);
    printf("  weights   %10.1f MiB  mmap, read in place\n", m->weight_bytes / 1048576.0);
    if (n_re)
        printf("            %10.1f MiB  of them (%d tensors) copied at start-up into the %s "
               "kernels' layout\n",
               re / 1048576.0, n_re, kq_isa_name(kq_isa_active()));
    printf("  cache     %10.1f MiB  KV f32 + GDN state, 1 snapshot group\n",
           cache_bytes_needed(m, 1, ctx, 0) / 1048576.0);
    printf("  per extra snapshot group: %.2f MiB\n",
           (cache_bytes_needed(m, 1, ctx, 1) - cache_bytes_needed(m, 1, ctx, 0)) / 1048576.0);
    printf("  decode reads %.1f MiB of weights per token (%.0f M parameters touched)\n",
           bytes / 1048576.0, params / 1e6);
    model_free(m);
    return 0;
}

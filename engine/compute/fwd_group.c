/*
 * fwd_group — the public forward API over a device group (contract in fwd.h).
 *
 * The group validates the batch once, splits it into per-sequence runs, and has every device
 * run the whole step on its shard at the same time: device d on host thread d of a small pool
 * (the caller is host thread 0). Devices meet inside the step at the allreduces (comm.c). The
 * logits slices of the devices are downloaded into one host [rows][n_vocab] buffer when asked.
 *
 * Weights: a device without host_weights (a GPU, the strict test device) gets its model (or
 * shard) uploaded into one buffer of its own at creation (shard_upload). A group of GPUs
 * reduces over NCCL (one communicator made here, at start-up), any other group over the host
 * communicator; CPU and GPU devices never share a group.
 *
 * Across processes (an mpirun job, dist.h): the group's devices are those of every process,
 * numbered process by process (process p's device d is global device dev0[p] + d, and gets that
 * shard). Rank 0 holds the fwd_ctx the engine drives; every call that touches the devices is
 * sent to the workers first as one command (struct dist_cmd plus one payload message: the
 * packed batch of a step, once per step), and each worker's fwd_worker_run executes the same
 * call on its own devices. The allreduces span the processes (comm_dist.c). The logits of a
 * step are gathered to rank 0 as part of the step (so a successful fwd_decode has them all);
 * checkpoints and KV rows are gathered and scattered whole, each process's part at its offset
 * in rank order. A process that fails to answer breaks the job (dist.h): the step returns
 * DD_EIO, cache operations become no-ops, and rank 0 is expected to fail its requests and exit.
 * The messages, the workers' side and the group's creation across processes are fwd_dist.c's.
 *
 * Invariants: every device's cache has the same per-sequence bookkeeping (rs_idx, valid),
 * because every cache operation goes to all of them. Thread: the engine thread (on a worker,
 * the main thread).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"            // defines: comm_create_host, comm_create, comm_create_dist
#include "dist.h"            // defines: dist_xfer, dist_rank, dist_size, struct dist_cmd
#include "engine/util.h"     // defines: xcalloc, dd_errf
#include "fwd_impl.h"        // defines: fwd__dev_*
#include "kernels/cpu/kop.h" // defines: kop_argmax_rows
#include "shard.h"           // defines: shard_build, shard_relayout
#include "tpool.h"           // defines: tpool_run

/* ============================================================================================
 * Steps
 * ========================================================================================== */

int fwd__check_batch(struct fwd_ctx *f, const struct fwd_batch *b, char *err, size_t errlen)
{
    const int64_t T = b->n_tokens;
    if (T < 1 || T > f->p.max_tokens) {
        dd_errf(err, errlen, "batch of %lld tokens (limit %lld)", (long long)T,
                (long long)f->p.max_tokens);
        return DD_EINVAL;
    }
    f->n_runs = 0;
    for (int64_t t = 0; t < T; t++) {
        int64_t s = b->seq[t], pos = b->pos[t];
        if (s < 0 || s >= f->p.n_seq || pos < 0 || pos >= f->p.n_ctx || b->token[t] < 0 ||
            b->token[t] >= f->m->hp.n_vocab) {
            dd_errf(err, errlen, "batch row %lld: seq %lld, pos %lld or token %d out of range",
                    (long long)t, (long long)s, (long long)pos, b->token[t]);
            return DD_EINVAL;
        }
        if (t > 0 && b->seq[t - 1] == s) {
            if (b->pos[t - 1] + 1 != pos) {
                dd_errf(err, errlen, "batch row %lld: positions of seq %lld not consecutive",
                        (long long)t, (long long)s);
                return DD_EINVAL;
            }
            f->runs[f->n_runs - 1].t1 = t + 1;
            continue;
        }
        for (int64_t r = 0; r < f->n_runs; r++)
            if (f->runs[r].seq == s) {
                dd_errf(err, errlen, "batch row %lld: seq %lld appears in two runs", (long long)t,
                        (long long)s);
                return DD_EINVAL;
            }
        f->runs[f->n_runs++] = (struct fwd_run){.t0 = t, .t1 = t + 1, .seq = s};
    }
    return 0;
}
static void host_step(void *ctx, int ith, int nth)
{
    struct fwd_ctx *f = ctx;
    (void)nth;
    if (!f->bound[ith]) { /* host thread ith always drives device ith */
        dev_bind_host(f->dev[ith]->dev);
        f->bound[ith] = true;
    }
    if (f->mtp)
        fwd__dev_mtp(f->dev[ith], f->b, f->runs, f->n_runs, f->h_prev, f->h_rows);
    else
        fwd__dev_decode(f->dev[ith], f->b, f->runs, f->n_runs);
}

/* This process's devices run the step (the runs of b are in f->runs). */
void fwd__local_step(struct fwd_ctx *f, const struct fwd_batch *b, bool mtp, const float *h_prev,
                     const int32_t *h_rows)
{
    f->b = b;
    f->mtp = mtp;
    f->h_prev = h_prev;
    f->h_rows = h_rows;
    if (f->n == 1)
        host_step(f, 0, 1);
    else
        tpool_run(f->hosts, host_step, f);
    f->logits_fresh = false;
    f->amax_fresh = f->prob_fresh = false;
    f->b = NULL;
}

/* Download every local device's vocab slice of the logits rows into the host buffer. */
static void local_logits(struct fwd_ctx *f)
{
    const int64_t V = f->m->hp.n_vocab;
    for (int d = 0; d < f->n; d++) {
        const struct model *sm = fwd__dev_model(f->dev[d]);
        struct dev *dv = fwd__dev_device(f->dev[d]);
        const int64_t w = sm->vocab_hi - sm->vocab_lo;
        int64_t rows;
        const float *src = fwd__dev_logits(f->dev[d], &rows);
        f->n_logits = rows;
        if (w == V)
            dev_download(dv, f->logits, src, (size_t)(rows * V) * sizeof(float));
        else
            for (int64_t r = 0; r < rows; r++)
                dev_download(dv, f->logits + r * V + sm->vocab_lo, src + r * w,
                             (size_t)w * sizeof(float));
        dev_sync(dv);
        f->sample_bytes += rows * w * (int64_t)sizeof(float);
    }
    f->logits_fresh = true;
}

/*
 * The argmax of every logits row on the devices. One device: its argmax op, then 4 bytes per
 * row come back. A group: every device takes the argmax of its vocab slice on its own host
 * thread (an empty slice takes no part), and the value at it comes back too (4 more bytes per
 * row and device); the largest value wins, the lowest token id on ties (smp_argmax's rule: the
 * first largest). With f->want_mass every device also sums exp(logit - its slice's largest)
 * (4 more bytes per row and device), and the softmax probability of the winner is
 * 1 / sum_d mass_d * exp(v_d - v_best).
 */
static void slice_argmax(void *ctx, int d, int nth)
{
    struct fwd_ctx *f = ctx;
    (void)nth;
    const struct model *sm = fwd__dev_model(f->dev[d]);
    struct dev *dv = fwd__dev_device(f->dev[d]);
    const int64_t w = sm->vocab_hi - sm->vocab_lo, T = f->p.max_tokens;
    if (w <= 0)
        return;
    int64_t rows;
    const float *mass = NULL;
    const int32_t *ids = fwd__dev_argmax(f->dev[d], &rows, f->want_mass ? &mass : NULL);
    int32_t *h = f->amax_d + d * T;
    dev_download(dv, h, ids, (size_t)rows * sizeof *h);
    if (mass)
        dev_download(dv, f->amax_m + d * T, mass, (size_t)rows * sizeof(float));
    dev_sync(dv);
    if (f->n == 1)
        return;
    const float *src = fwd__dev_logits(f->dev[d], &rows);
    for (int64_t r = 0; r < rows; r++) /* the values at the slice's maxima */
        dev_download(dv, f->amax_v + d * T + r, src + r * w + h[r], sizeof(float));
    dev_sync(dv);
}

/* Across processes the step already gathered every logits row to rank 0 (run_step): the
 * argmax (the first largest) and its softmax probability come from those host rows. */
static void host_argmax(struct fwd_ctx *f, bool mass)
{
    kop_argmax_rows(f->logits, f->n_logits, f->m->hp.n_vocab, f->amax, mass ? f->amax_m : NULL);
    for (int64_t r = 0; mass && r < f->n_logits; r++)
        f->prob[r] = (float)(1.0 / f->amax_m[r]);
    f->amax_fresh = true;
    f->prob_fresh = mass;
}

static void gather_argmax(struct fwd_ctx *f, bool mass)
{
    if (f->n_proc > 1) {
        host_argmax(f, mass);
        return;
    }
    const int64_t T = f->p.max_tokens, rows = fwd_n_logits(f);
    f->want_mass = mass;
    if (f->n == 1)
        slice_argmax(f, 0, 1);
    else
        tpool_run(f->hosts, slice_argmax, f);
    bool first = true;
    for (int d = 0; d < f->n; d++) {
        const struct model *sm = fwd__dev_model(f->dev[d]);
        if (sm->vocab_hi <= sm->vocab_lo)
            continue;
        f->sample_bytes += rows * (int64_t)((f->n == 1 ? 4 : 8) + (mass ? 4 : 0));
        float *best = f->amax_v + f->n * T;
        for (int64_t r = 0; r < rows; r++) {
            const int32_t id = f->amax_d[d * T + r] + (int32_t)sm->vocab_lo;
            const float v = f->amax_v[d * T + r];
            if (first || v > best[r] || (v == best[r] && id < f->amax[r])) {
                f->amax[r] = id;
                best[r] = v;
            }
        }
        first = false;
    }
    f->amax_fresh = true;
    f->prob_fresh = mass;
    for (int64_t r = 0; mass && r < rows; r++) {
        double sum = 0.0;
        const float best = f->n == 1 ? 0.0f : f->amax_v[f->n * T + r];
        for (int d = 0; d < f->n; d++) {
            const struct model *sm = fwd__dev_model(f->dev[d]);
            if (sm->vocab_hi > sm->vocab_lo)
                sum += f->amax_m[d * T + r] *
                       (f->n == 1 ? 1.0 : exp((double)f->amax_v[d * T + r] - best));
        }
        f->prob[r] = (float)(1.0 / sum);
    }
}

static int run_step(struct fwd_ctx *f, const struct fwd_batch *b, bool mtp, const float *h_prev,
                    const int32_t *h_rows, char *err, size_t errlen)
{
    int rc = fwd__check_batch(f, b, err, errlen);
    if (rc)
        return rc;
    if (mtp && f->m->hp.n_nextn < 1) {
        dd_errf(err, errlen, "the model has no MTP block");
        return DD_EUNSUPPORTED;
    }
    const int64_t n_pool = 2 * f->p.max_tokens + f->p.n_hrows;
    for (int64_t t = 0; h_rows && t < b->n_tokens; t++)
        if (h_rows[t] < 0 || h_rows[t] >= n_pool) {
            dd_errf(err, errlen, "batch row %lld: hidden row %d outside the pool of %lld",
                    (long long)t, h_rows[t], (long long)n_pool);
            return DD_EINVAL;
        }
    if (f->n_proc > 1) { /* the step to the workers, then the same step here */
        if (dist_broken())
            return fwd__broken(err, errlen);
        if (h_rows) { /* the workers get host rows: rank 0's pool rows, downloaded */
            const int64_t E = f->m->hp.n_embd;
            for (int64_t t = 0; t < b->n_tokens; t++)
                fwd_hrow_download(f, h_rows[t], f->h_host + t * E);
            h_prev = f->h_host;
            h_rows = NULL;
        }
        struct dist_cmd c = {.op = mtp ? OP_MTP : OP_DECODE,
                             .arg = {b->n_tokens, b->logits != NULL}};
        if (fwd__post(c, f->wire, fwd__wire_pack(f, b, h_prev)))
            return fwd__broken(err, errlen);
    }
    fwd__local_step(f, b, mtp, h_prev, h_rows);
    if (f->n_proc > 1) {
        local_logits(f);
        if (fwd__gather_logits(f) || dist_broken())
            return fwd__broken(err, errlen);
    }
    return 0;
}

int fwd_decode(struct fwd_ctx *f, const struct fwd_batch *b, char *err, size_t errlen)
{
    return run_step(f, b, false, NULL, NULL, err, errlen);
}

int fwd_mtp(struct fwd_ctx *f, const struct fwd_batch *b, const float *h_prev, char *err,
            size_t errlen)
{
    return run_step(f, b, true, h_prev, NULL, err, errlen);
}

int fwd_mtp_rows(struct fwd_ctx *f, const struct fwd_batch *b, const int32_t *h_rows, char *err,
                 size_t errlen)
{
    return run_step(f, b, true, NULL, h_rows, err, errlen);
}

/* ---- the hidden pool ---- */

int32_t fwd_hrow(const struct fwd_ctx *f, enum fwd_hset set, int64_t i)
{
    const int64_t T = f->p.max_tokens;
    ASSERT(i >= 0 && i < (set == FWD_H_KEPT ? f->p.n_hrows : T));
    return (int32_t)(set == FWD_H_TRUNK ? i : set == FWD_H_MTP ? T + i : 2 * T + i);
}

void fwd_hrow_copy(struct fwd_ctx *f, int32_t dst, int32_t src)
{
    const size_t bytes = (size_t)f->m->hp.n_embd * sizeof(float);
    for (int d = 0; d < f->n && dst != src; d++)
        dev_copy(fwd__dev_device(f->dev[d]), fwd__dev_hrow(f->dev[d], dst),
                 fwd__dev_hrow(f->dev[d], src), bytes);
}

void fwd_hrow_zero(struct fwd_ctx *f, int32_t row)
{
    const size_t bytes = (size_t)f->m->hp.n_embd * sizeof(float);
    for (int d = 0; d < f->n; d++)
        dev_memset(fwd__dev_device(f->dev[d]), fwd__dev_hrow(f->dev[d], row), 0, bytes);
}

void fwd_hrow_upload(struct fwd_ctx *f, int32_t row, const float *src)
{
    const size_t bytes = (size_t)f->m->hp.n_embd * sizeof(float);
    for (int d = 0; d < f->n; d++) { /* the host row may change once this returns */
        dev_upload(fwd__dev_device(f->dev[d]), fwd__dev_hrow(f->dev[d], row), src, bytes);
        dev_sync(fwd__dev_device(f->dev[d]));
    }
}

void fwd_hrow_download(struct fwd_ctx *f, int32_t row, float *dst)
{
    struct dev *dv = fwd__dev_device(f->dev[0]);
    dev_download(dv, dst, fwd__dev_hrow(f->dev[0], row), (size_t)f->m->hp.n_embd * sizeof(float));
    dev_sync(dv);
}

const float *fwd_logits(struct fwd_ctx *f)
{
    if (!f->logits_fresh)
        local_logits(f);
    return f->logits;
}

const int32_t *fwd_argmax(struct fwd_ctx *f)
{
    if (!f->amax_fresh)
        gather_argmax(f, false);
    return f->amax;
}

const float *fwd_top_prob(struct fwd_ctx *f)
{
    if (!f->prob_fresh)
        gather_argmax(f, true);
    return f->prob;
}

int64_t fwd_sample_bytes(const struct fwd_ctx *f)
{
    return f->sample_bytes;
}

int64_t fwd_n_logits(const struct fwd_ctx *f)
{
    int64_t rows;
    fwd__dev_logits(f->dev[0], &rows);
    return rows;
}

const float *fwd_hidden(struct fwd_ctx *f)
{
    return fwd__dev_hidden(f->dev[0]);
}

/* ============================================================================================
 * Cache operations over the group: this process's devices, then (rank 0) the same call on
 * every worker
 * ========================================================================================== */

struct cache *fwd_cache(struct fwd_ctx *f)
{
    return fwd__dev_cache(f->dev[0]);
}

size_t fwd__local_ckpt_floats(const struct fwd_ctx *f)
{
    size_t n = 0;
    for (int d = 0; d < f->n; d++)
        n += cache_ckpt_floats(fwd__dev_cache(f->dev[d]));
    return n;
}

size_t fwd__local_kv_floats(const struct fwd_ctx *f)
{
    size_t n = 0;
    for (int d = 0; d < f->n; d++)
        n += cache_kv_floats(fwd__dev_cache(f->dev[d]));
    return n;
}

void fwd__local_clear(struct fwd_ctx *f, int64_t s)
{
    for (int d = 0; d < f->n; d++)
        cache_seq_clear(fwd__dev_cache(f->dev[d]), s);
}

bool fwd__local_rollback(struct fwd_ctx *f, int64_t s, int64_t r)
{
    bool ok = true;
    for (int d = 0; d < f->n; d++)
        ok &= cache_seq_rollback(fwd__dev_cache(f->dev[d]), s, r);
    return ok;
}

void fwd__local_save(const struct fwd_ctx *f, int64_t s, float *dst)
{
    for (int d = 0; d < f->n; d++) {
        const struct cache *c = fwd__dev_cache(f->dev[d]);
        cache_seq_save(c, s, dst);
        dst += cache_ckpt_floats(c);
    }
}

void fwd__local_restore(struct fwd_ctx *f, int64_t s, const float *src)
{
    for (int d = 0; d < f->n; d++) {
        struct cache *c = fwd__dev_cache(f->dev[d]);
        cache_seq_restore(c, s, src);
        src += cache_ckpt_floats(c);
    }
}

void fwd__local_kv_copy(struct fwd_ctx *f, int64_t dst, int64_t src, int64_t r0, int64_t r1)
{
    for (int d = 0; d < f->n; d++)
        cache_seq_kv_copy(fwd__dev_cache(f->dev[d]), dst, src, r0, r1);
}

void fwd__local_kv_download(const struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
                            float *dst)
{
    for (int d = 0; d < f->n; d++) {
        const struct cache *c = fwd__dev_cache(f->dev[d]);
        cache_seq_kv_download(c, s, r0, r1, n, dst);
        dst += (size_t)n * cache_kv_floats(c);
    }
}

void fwd__local_kv_upload(struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
                          const float *src)
{
    for (int d = 0; d < f->n; d++) {
        struct cache *c = fwd__dev_cache(f->dev[d]);
        cache_seq_kv_upload(c, s, r0, r1, n, src);
        src += (size_t)n * cache_kv_floats(c);
    }
}

/* Rank 0 of a job: the command to the workers (a broken job sends nothing: see the top). */
static void tell(const struct fwd_ctx *f, int64_t op, int64_t a0, int64_t a1, int64_t a2,
                 int64_t a3)
{
    if (f->n_proc > 1)
        fwd__post((struct dist_cmd){.op = op, .arg = {a0, a1, a2, a3}}, NULL, 0);
}

void fwd_seq_clear(struct fwd_ctx *f, int64_t s)
{
    tell(f, OP_CLEAR, s, 0, 0, 0);
    fwd__local_clear(f, s);
}

bool fwd_seq_rollback(struct fwd_ctx *f, int64_t s, int64_t r)
{
    tell(f, OP_ROLLBACK, s, r, 0, 0);
    return fwd__local_rollback(f, s, r);
}

size_t fwd_ckpt_floats(const struct fwd_ctx *f)
{
    return f->n_proc > 1 ? (size_t)f->ckpt0[f->n_proc] : fwd__local_ckpt_floats(f);
}

void fwd_seq_save(const struct fwd_ctx *f, int64_t s, float *dst)
{
    tell(f, OP_SAVE, s, 0, 0, 0);
    fwd__local_save(f, s, dst);
    if (f->n_proc > 1)
        fwd__parts(f, dst, f->ckpt0, 1, false);
}

void fwd_seq_restore(struct fwd_ctx *f, int64_t s, const float *src)
{
    tell(f, OP_RESTORE, s, 0, 0, 0);
    if (f->n_proc > 1)
        fwd__parts(f, (float *)src, f->ckpt0, 1, true);
    fwd__local_restore(f, s, src);
}

size_t fwd_kv_floats(const struct fwd_ctx *f)
{
    return f->n_proc > 1 ? (size_t)f->kv0[f->n_proc] : fwd__local_kv_floats(f);
}

void fwd_seq_kv_copy(struct fwd_ctx *f, int64_t dst, int64_t src, int64_t r0, int64_t r1)
{
    tell(f, OP_KV_COPY, dst, src, r0, r1);
    fwd__local_kv_copy(f, dst, src, r0, r1);
}

void fwd_seq_kv_download(const struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
                         float *dst)
{
    tell(f, OP_KV_DOWN, s, r0, r1, n);
    fwd__local_kv_download(f, s, r0, r1, n, dst);
    if (f->n_proc > 1)
        fwd__parts(f, dst, f->kv0, n, false);
}

void fwd_seq_kv_upload(struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
                       const float *src)
{
    tell(f, OP_KV_UP, s, r0, r1, n);
    if (f->n_proc > 1)
        fwd__parts(f, (float *)src, f->kv0, n, true);
    fwd__local_kv_upload(f, s, r0, r1, n, src);
}

void fwd_comm_stats(const struct fwd_ctx *f, double *seconds, int64_t *calls)
{
    *seconds = 0.0;
    *calls = 0;
    if (f->comm)
        comm_stats(f->comm, seconds, calls);
}

double fwd_comm_wait_seconds(const struct fwd_ctx *f)
{
    return f->comm ? comm_wait_seconds(f->comm) : 0.0;
}

void fwd_device_bytes(const struct fwd_ctx *f, int d, size_t *owned, size_t *replicated)
{
    if (!f->shard[d]) {
        *owned = f->m->weight_bytes;
        *replicated = 0;
        return;
    }
    shard_bytes(f->shard[d], owned, replicated);
}

bool fwd_moe_stats(const struct fwd_ctx *f, struct dev_moe_stats *s)
{
    if (!dev_moe_stats(fwd__dev_device(f->dev[0]), s))
        return false;
    for (int d = 1; d < f->n; d++) {
        struct dev_moe_stats o;
        dev_moe_stats(fwd__dev_device(f->dev[d]), &o);
        s->bytes += o.bytes;
    }
    return true;
}

void fwd_graph_stats(const struct fwd_ctx *f, int64_t *captures, int64_t *replays)
{
    fwd__dev_graph_stats(f->dev[0], captures, replays);
}

int fwd_n_devices(const struct fwd_ctx *f)
{
    return f->n_total;
}

bool fwd_broken(const struct fwd_ctx *f)
{
    return f->n_proc > 1 && dist_broken();
}

void fwd_topology(const struct fwd_ctx *f, int *n_proc, int *per_proc)
{
    *n_proc = f->n_proc;
    for (int p = 0; p < f->n_proc; p++)
        per_proc[p] = (int)(f->dev0[p + 1] - f->dev0[p]);
}

/* ============================================================================================
 * Lifecycle
 * ========================================================================================== */

/* shard_relayout's callback: the layout device ctx wants for type t. */
static enum kq_type layout_of(void *ctx, enum kq_type t)
{
    return dev_weight_layout(ctx, t);
}

/* The group's communicator: across the processes of a job (CPU devices), else NCCL over the
 * GPUs' ordinals when every device is a GPU, the host one when none is. */
static int group_comm(struct fwd_ctx *f, struct dev **devs, char *err, size_t errlen)
{
    int gpu[FWD_MAX_DEV], n_gpu = 0;
    for (int d = 0; d < f->n; d++)
        if ((gpu[d] = dev_cuda_ordinal(devs[d])) >= 0)
            n_gpu++;
    if (n_gpu && n_gpu != f->n) {
        dd_errf(err, errlen, "a device group is all GPUs or all CPU devices (%d of %d are GPUs)",
                n_gpu, f->n);
        return DD_EINVAL;
    }
    if (f->n_proc > 1 && n_gpu)
        f->comm = comm_create(COMM_NCCL_DIST, f->n, gpu, err, errlen);
    else if (f->n_proc > 1)
        f->comm = comm_create_dist(f->n);
    else
        f->comm = n_gpu ? comm_create(COMM_NCCL, f->n, gpu, err, errlen) : comm_create_host(f->n);
    if (!f->comm)
        return DD_EUNSUPPORTED;
    comm_reserve(f->comm, f->p.max_tokens * f->m->hp.n_embd);
    return 0;
}

int fwd__group_create(const struct model *m, struct dev **devs, int n_dev,
                      const struct fwd_params *p, struct fwd_ctx **out, char *err, size_t errlen)
{
    int rc = 0;
    if (n_dev < 1 || n_dev > FWD_MAX_DEV || p->max_tokens < 1) {
        dd_errf(err, errlen, "invalid device group of %d devices (1..%d)", n_dev, FWD_MAX_DEV);
        if (dist_size() == 1)
            return DD_EINVAL;
        rc = DD_EINVAL;
        n_dev = 0;
    }
    struct fwd_ctx *f = xcalloc(1, sizeof *f);
    f->m = m;
    f->p = *p;
    f->n = n_dev;
    f->n_total = n_dev;
    f->n_proc = dist_size();
    f->me = dist_rank();
    f->dev0[1] = n_dev;
    if (f->n_proc > 1 && (rc = fwd__proc_layout(f, rc, err, errlen))) {
        fwd_destroy(f);
        return rc;
    }
    const int base = (int)f->dev0[f->me];
    f->runs = xcalloc((size_t)p->max_tokens, sizeof *f->runs);
    f->logits = xaligned_alloc((size_t)(p->max_tokens * m->hp.n_vocab) * sizeof(float));
    f->amax = xcalloc((size_t)p->max_tokens, sizeof *f->amax);
    f->amax_d = xcalloc((size_t)(n_dev * p->max_tokens), sizeof *f->amax_d);
    f->amax_v = xcalloc((size_t)((n_dev + 1) * p->max_tokens), sizeof *f->amax_v);
    f->amax_m = xcalloc((size_t)(n_dev * p->max_tokens), sizeof *f->amax_m);
    f->prob = xcalloc((size_t)p->max_tokens, sizeof *f->prob);
    if (f->n_proc > 1)
        f->h_host = xaligned_alloc((size_t)(p->max_tokens * m->hp.n_embd) * sizeof(float));
    if (f->n_total > 1)
        rc = group_comm(f, devs, err, errlen);
    if (!rc && n_dev > 1) {
        f->hosts = tpool_create(n_dev, NULL, "deltad-tp");
        if (!f->hosts) {
            dd_errf(err, errlen, "cannot create the device host threads");
            rc = DD_ENOMEM;
        }
    }
    for (int d = 0; d < n_dev && !rc; d++) {
        const struct model *dm = m;
        if (f->n_total > 1)
            rc = shard_build(m, f->n_total, base + d, &f->shard[d], err, errlen);
        if (!rc) {
            const size_t had = f->shard[d] ? f->shard[d]->owned_bytes : 0;
            const int n_re = shard_relayout(m, &f->shard[d], layout_of, devs[d]);
            if (n_re > 0)
                LOG_I("device %d (%s): %d weight tensors, %.1f MiB, copied into its kernels' "
                      "layout",
                      base + d, devs[d]->ops->name, n_re,
                      (double)(f->shard[d]->owned_bytes - had) / 1048576.0);
        }
        if (!rc && !dev_host_weights(devs[d])) {
            size_t bytes = 0;
            char label[64];
            snprintf(label, sizeof label, "device %d (%s)", d, devs[d]->ops->name);
            rc = shard_upload(m, &f->shard[d], devs[d], label, &f->wbuf[d], &bytes, err, errlen);
            f->wdev[d] = devs[d];
            if (!rc)
                LOG_I("device %d (%s): weights uploaded, %.1f MiB", base + d, devs[d]->ops->name,
                      (double)bytes / 1048576.0);
        }
        if (!rc)
            dm = f->shard[d] ? f->shard[d] : m;
        if (!rc)
            rc = fwd__dev_create(dm, devs[d], p, f->comm, d, &f->dev[d], err, errlen);
    }
    if (f->n_proc > 1) {
        int rc2 = fwd__proc_settle(f, rc, err, errlen);
        rc = rc ? rc : rc2;
    }
    if (rc) {
        fwd_destroy(f);
        return rc;
    }
    f->live = true;
    *out = f;
    return 0;
}

int fwd_create_group(const struct model *m, struct dev **devs, int n_dev,
                     const struct fwd_params *p, struct fwd_ctx **out, char *err, size_t errlen)
{
    if (dist_size() > 1 && dist_rank() == 0 &&
        fwd__post((struct dist_cmd){.op = OP_SETUP}, p, sizeof *p))
        return fwd__broken(err, errlen);
    return fwd__group_create(m, devs, n_dev, p, out, err, errlen);
}

int fwd_create(const struct model *m, struct dev *d, const struct fwd_params *p,
               struct fwd_ctx **out, char *err, size_t errlen)
{
    return fwd_create_group(m, &d, 1, p, out, err, errlen);
}

void fwd_destroy(struct fwd_ctx *f)
{
    if (!f)
        return;
    if (f->live && f->me == 0)
        tell(f, OP_DESTROY, 0, 0, 0, 0);
    for (int d = 0; d < FWD_MAX_DEV; d++) { /* after a failed create, whatever exists */
        fwd__dev_destroy(f->dev[d]);
        if (f->wbuf[d])
            dev_buf_free(f->wdev[d], f->wbuf[d]);
        shard_free(f->shard[d]);
    }
    tpool_destroy(f->hosts);
    comm_destroy(f->comm);
    free(f->runs);
    free(f->logits);
    free(f->wire);
    free(f->stage);
    free(f->amax);
    free(f->amax_d);
    free(f->amax_v);
    free(f->amax_m);
    free(f->prob);
    free(f->h_host);
    free(f);
}

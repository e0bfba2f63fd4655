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
#include <stdlib.h>
#include <string.h>

#include "comm.h"        // defines: comm_create_host, comm_create, comm_create_dist
#include "dist.h"        // defines: dist_xfer, dist_rank, dist_size, struct dist_cmd
#include "engine/util.h" // defines: xcalloc, dd_errf
#include "fwd_impl.h"    // defines: fwd__dev_*
#include "shard.h"       // defines: shard_build, shard_relayout
#include "tpool.h"       // defines: tpool_run

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
    if (f->h_prev)
        fwd__dev_mtp(f->dev[ith], f->b, f->runs, f->n_runs, f->h_prev);
    else
        fwd__dev_decode(f->dev[ith], f->b, f->runs, f->n_runs);
}

/* This process's devices run the step (the runs of b are in f->runs). */
void fwd__local_step(struct fwd_ctx *f, const struct fwd_batch *b, const float *h_prev)
{
    f->b = b;
    f->h_prev = h_prev;
    if (f->n == 1)
        host_step(f, 0, 1);
    else
        tpool_run(f->hosts, host_step, f);
    f->logits_fresh = false;
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
    }
    f->logits_fresh = true;
}

static int run_step(struct fwd_ctx *f, const struct fwd_batch *b, const float *h_prev, char *err,
                    size_t errlen)
{
    int rc = fwd__check_batch(f, b, err, errlen);
    if (rc)
        return rc;
    if (f->n_proc > 1) { /* the step to the workers, then the same step here */
        if (dist_broken())
            return fwd__broken(err, errlen);
        struct dist_cmd c = {.op = h_prev ? OP_MTP : OP_DECODE,
                             .arg = {b->n_tokens, b->logits != NULL}};
        if (fwd__post(c, f->wire, fwd__wire_pack(f, b, h_prev)))
            return fwd__broken(err, errlen);
    }
    fwd__local_step(f, b, h_prev);
    if (f->n_proc > 1) {
        local_logits(f);
        if (fwd__gather_logits(f) || dist_broken())
            return fwd__broken(err, errlen);
    }
    return 0;
}

int fwd_decode(struct fwd_ctx *f, const struct fwd_batch *b, char *err, size_t errlen)
{
    return run_step(f, b, NULL, err, errlen);
}

int fwd_mtp(struct fwd_ctx *f, const struct fwd_batch *b, const float *h_prev, char *err,
            size_t errlen)
{
    if (f->m->hp.n_nextn < 1) {
        dd_errf(err, errlen, "the model has no MTP block");
        return DD_EUNSUPPORTED;
    }
    return run_step(f, b, h_prev, err, errlen);
}

const float *fwd_logits(struct fwd_ctx *f)
{
    if (!f->logits_fresh)
        local_logits(f);
    return f->logits;
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
            rc = shard_upload(m, &f->shard[d], devs[d], &f->wbuf[d], &bytes, err, errlen);
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
    free(f);
}

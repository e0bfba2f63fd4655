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

#define MAX_DEV 64

struct fwd_ctx {
    const struct model *m; /* the whole model */
    struct fwd_params p;
    int n;
    struct fwd_dev *dev[MAX_DEV];
    struct model *shard[MAX_DEV];  /* owned shards (n > 1, relaid-out or uploaded weights) */
    struct dev *wdev[MAX_DEV];     /* the device holding wbuf[d] */
    struct dev_buf *wbuf[MAX_DEV]; /* device d's uploaded weights (no host_weights), else NULL */
    struct comm *comm;             /* n > 1 */
    tpool_t *hosts;                /* n > 1: one host thread per device */
    bool bound[MAX_DEV];           /* host thread d was bound near device d (its first step) */
    struct fwd_run *runs;          /* [max_tokens] */
    int64_t n_runs;
    float *logits; /* [max_tokens][n_vocab] host: the devices' rows, gathered on demand */
    int64_t n_logits;
    bool logits_fresh; /* logits holds the last step's rows */
    /* the step in flight, read by the host threads */
    const struct fwd_batch *b;
    const float *h_prev; /* NULL: trunk step; else an MTP step */
    /* across processes (n_proc > 1; see the top) */
    int n_proc, me;
    int n_total;                        /* devices of every process */
    int64_t dev0[DIST_MAX_RANKS + 1];   /* first global device of each process; [n_proc] total */
    int64_t ckpt0[DIST_MAX_RANKS + 1];  /* checkpoint floats before each process's part */
    int64_t kv0[DIST_MAX_RANKS + 1];    /* KV floats per position before each process's part */
    int64_t wpre[DIST_MAX_RANKS + 1];   /* logits columns (vocab) of the processes before each */
    int64_t vlo[MAX_DEV], vhi[MAX_DEV]; /* each global device's vocab slice */
    uint8_t *wire;                      /* [wire_cap] a step's packed batch */
    size_t wire_cap;
    float *stage; /* [stage_cap] worker: its parts; rank 0: the logits blocks of the processes */
    size_t stage_cap;
    bool live; /* created on every process: fwd_destroy tells the workers */
};

/* The commands of rank 0 to the workers (dist_cmd.op; arguments in arg[0..3], the payload's
 * bytes in arg[4]). */
enum {
    OP_SETUP = 1, /* payload struct fwd_params */
    OP_DECODE,    /* arg: n_tokens, has logits flags; payload: the packed batch */
    OP_MTP,       /* the same plus h_prev */
    OP_CLEAR,     /* s */
    OP_ROLLBACK,  /* s, r */
    OP_SAVE,      /* s; each worker sends its part */
    OP_RESTORE,   /* s; rank 0 sends each worker its part */
    OP_KV_COPY,   /* dst, src, r0, r1 */
    OP_KV_DOWN,   /* s, r0, r1, n; each worker sends its part */
    OP_KV_UP,     /* s, r0, r1, n; rank 0 sends each worker its part */
    OP_DESTROY,
};

/* ============================================================================================
 * Between processes (n_proc > 1)
 * ========================================================================================== */

/* Rank 0: command c, with bytes of payload when bytes > 0, to every worker. */
static int post(struct dist_cmd c, const void *payload, size_t bytes)
{
    struct dist_msg m[2 * DIST_MAX_RANKS];
    int k = 0;
    c.arg[4] = (int64_t)bytes;
    for (int p = 1; p < dist_size(); p++) {
        m[k++] = (struct dist_msg){p, DIST_TAG_CMD, true, &c, sizeof c};
        if (bytes)
            m[k++] = (struct dist_msg){p, DIST_TAG_DATA, true, (void *)payload, bytes};
    }
    return dist_xfer(m, k, false);
}

/* Rank 0: each worker's part p of base, floats [at[p] * mul, at[p + 1] * mul), sent (send) or
 * received (gather) in one call. */
static int parts(const struct fwd_ctx *f, float *base, const int64_t *at, int64_t mul, bool send)
{
    struct dist_msg m[DIST_MAX_RANKS];
    int k = 0;
    for (int p = 1; p < f->n_proc; p++)
        m[k++] = (struct dist_msg){p, DIST_TAG_DATA, send, base + at[p] * mul,
                                   (size_t)((at[p + 1] - at[p]) * mul) * sizeof(float)};
    return dist_xfer(m, k, false);
}

/* Worker: one message of bytes with rank 0 (its part, or the reply). */
static int with_root(void *buf, size_t bytes, bool send)
{
    struct dist_msg m = {0, DIST_TAG_DATA, send, buf, bytes};
    return dist_xfer(&m, 1, false);
}

/* Worker: the next command and its payload (into buf of cap bytes); waits without a deadline
 * (a daemon may be idle for hours). */
static int recv_cmd(struct dist_cmd *c, void *buf, size_t cap, char *err, size_t errlen)
{
    struct dist_msg m = {0, DIST_TAG_CMD, false, c, sizeof *c};
    if (dist_xfer(&m, 1, true)) {
        dd_errf(err, errlen, "%s", dist_failure());
        return DD_EIO;
    }
    const size_t bytes = (size_t)c->arg[4];
    if (bytes > cap) {
        dd_errf(err, errlen, "command %lld with %zu bytes of payload (room for %zu)",
                (long long)c->op, bytes, cap);
        return DD_EINVAL;
    }
    m = (struct dist_msg){0, DIST_TAG_DATA, false, buf, bytes};
    if (bytes && dist_xfer(&m, 1, false)) {
        dd_errf(err, errlen, "%s", dist_failure());
        return DD_EIO;
    }
    return 0;
}

/* Every process's k values: all [n_proc][k] := each process's mine [k] (dist_allgather). */
static int allgather(const int64_t *mine, int64_t *all, int k)
{
    return dist_allgather(mine, all, (size_t)k * sizeof *all);
}

/* The byte layout of a step's batch on the wire: pos [T] int64, then h_prev [T][E] f32 (MTP
 * steps), tok [T] int32, seq [T] int32, want [T] u8. */
static size_t wire_bytes(int64_t T, int64_t E, bool mtp)
{
    return (size_t)T * (8 + 4 + 4 + 1) + (mtp ? (size_t)(T * E) * sizeof(float) : 0);
}

/* Rank 0: pack batch b (and h_prev) into f->wire; returns its bytes. */
static size_t wire_pack(struct fwd_ctx *f, const struct fwd_batch *b, const float *h_prev)
{
    const int64_t T = b->n_tokens, E = f->m->hp.n_embd;
    uint8_t *w = f->wire;
    memcpy(w, b->pos, (size_t)T * 8);
    w += T * 8;
    if (h_prev) {
        memcpy(w, h_prev, (size_t)(T * E) * sizeof(float));
        w += T * E * (int64_t)sizeof(float);
    }
    memcpy(w, b->token, (size_t)T * 4);
    memcpy(w + T * 4, b->seq, (size_t)T * 4);
    if (b->logits)
        memcpy(w + T * 8, b->logits, (size_t)T);
    return wire_bytes(T, E, h_prev != NULL);
}

/* Worker: the batch view of f->wire (h_prev, for MTP steps, into *h). */
static struct fwd_batch wire_unpack(struct fwd_ctx *f, int64_t T, bool want, bool mtp,
                                    const float **h)
{
    const int64_t E = f->m->hp.n_embd;
    uint8_t *w = f->wire;
    struct fwd_batch b = {.n_tokens = T, .pos = (const int64_t *)w};
    w += T * 8;
    *h = mtp ? (const float *)w : NULL;
    w += mtp ? T * E * (int64_t)sizeof(float) : 0;
    b.token = (const int32_t *)w;
    b.seq = (const int32_t *)(w + T * 4);
    b.logits = want ? w + T * 8 : NULL;
    return b;
}

/* ============================================================================================
 * Steps
 * ========================================================================================== */

static int check_batch(struct fwd_ctx *f, const struct fwd_batch *b, char *err, size_t errlen)
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
static void local_step(struct fwd_ctx *f, const struct fwd_batch *b, const float *h_prev)
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

/* Rank 0: the workers' slices of the step's logits rows, received by process into stage
 * ([rows][width] per device, in device order) and copied into their columns. */
static int gather_logits(struct fwd_ctx *f)
{
    const int64_t V = f->m->hp.n_vocab, rows = f->n_logits;
    if (parts(f, f->stage, f->wpre, rows, false))
        return DD_EIO;
    for (int64_t g = f->dev0[1], at = rows * f->wpre[1]; g < f->n_total; g++) {
        const int64_t w = f->vhi[g] - f->vlo[g];
        for (int64_t r = 0; r < rows; r++)
            memcpy(f->logits + r * V + f->vlo[g], f->stage + at + r * w, (size_t)w * sizeof(float));
        at += rows * w;
    }
    return 0;
}

/* Worker: this process's slices of the step's logits rows to rank 0 (see gather_logits). */
static int send_logits(struct fwd_ctx *f)
{
    int64_t rows = 0, at = 0;
    for (int d = 0; d < f->n; d++) {
        const struct model *sm = fwd__dev_model(f->dev[d]);
        struct dev *dv = fwd__dev_device(f->dev[d]);
        const float *src = fwd__dev_logits(f->dev[d], &rows);
        const int64_t w = sm->vocab_hi - sm->vocab_lo;
        dev_download(dv, f->stage + at, src, (size_t)(rows * w) * sizeof(float));
        dev_sync(dv);
        at += rows * w;
    }
    return with_root(f->stage, (size_t)at * sizeof(float), true);
}

static int broken(char *err, size_t errlen)
{
    dd_errf(err, errlen, "the tensor-parallel job lost a process: %s", dist_failure());
    return DD_EIO;
}

static int run_step(struct fwd_ctx *f, const struct fwd_batch *b, const float *h_prev, char *err,
                    size_t errlen)
{
    int rc = check_batch(f, b, err, errlen);
    if (rc)
        return rc;
    if (f->n_proc > 1) { /* the step to the workers, then the same step here */
        if (dist_broken())
            return broken(err, errlen);
        struct dist_cmd c = {.op = h_prev ? OP_MTP : OP_DECODE,
                             .arg = {b->n_tokens, b->logits != NULL}};
        if (post(c, f->wire, wire_pack(f, b, h_prev)))
            return broken(err, errlen);
    }
    local_step(f, b, h_prev);
    if (f->n_proc > 1) {
        local_logits(f);
        if (gather_logits(f) || dist_broken())
            return broken(err, errlen);
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

static size_t local_ckpt_floats(const struct fwd_ctx *f)
{
    size_t n = 0;
    for (int d = 0; d < f->n; d++)
        n += cache_ckpt_floats(fwd__dev_cache(f->dev[d]));
    return n;
}

static size_t local_kv_floats(const struct fwd_ctx *f)
{
    size_t n = 0;
    for (int d = 0; d < f->n; d++)
        n += cache_kv_floats(fwd__dev_cache(f->dev[d]));
    return n;
}

static void local_clear(struct fwd_ctx *f, int64_t s)
{
    for (int d = 0; d < f->n; d++)
        cache_seq_clear(fwd__dev_cache(f->dev[d]), s);
}

static bool local_rollback(struct fwd_ctx *f, int64_t s, int64_t r)
{
    bool ok = true;
    for (int d = 0; d < f->n; d++)
        ok &= cache_seq_rollback(fwd__dev_cache(f->dev[d]), s, r);
    return ok;
}

static void local_save(const struct fwd_ctx *f, int64_t s, float *dst)
{
    for (int d = 0; d < f->n; d++) {
        const struct cache *c = fwd__dev_cache(f->dev[d]);
        cache_seq_save(c, s, dst);
        dst += cache_ckpt_floats(c);
    }
}

static void local_restore(struct fwd_ctx *f, int64_t s, const float *src)
{
    for (int d = 0; d < f->n; d++) {
        struct cache *c = fwd__dev_cache(f->dev[d]);
        cache_seq_restore(c, s, src);
        src += cache_ckpt_floats(c);
    }
}

static void local_kv_copy(struct fwd_ctx *f, int64_t dst, int64_t src, int64_t r0, int64_t r1)
{
    for (int d = 0; d < f->n; d++)
        cache_seq_kv_copy(fwd__dev_cache(f->dev[d]), dst, src, r0, r1);
}

static void local_kv_download(const struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
                              float *dst)
{
    for (int d = 0; d < f->n; d++) {
        const struct cache *c = fwd__dev_cache(f->dev[d]);
        cache_seq_kv_download(c, s, r0, r1, n, dst);
        dst += (size_t)n * cache_kv_floats(c);
    }
}

static void local_kv_upload(struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
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
        post((struct dist_cmd){.op = op, .arg = {a0, a1, a2, a3}}, NULL, 0);
}

void fwd_seq_clear(struct fwd_ctx *f, int64_t s)
{
    tell(f, OP_CLEAR, s, 0, 0, 0);
    local_clear(f, s);
}

bool fwd_seq_rollback(struct fwd_ctx *f, int64_t s, int64_t r)
{
    tell(f, OP_ROLLBACK, s, r, 0, 0);
    return local_rollback(f, s, r);
}

size_t fwd_ckpt_floats(const struct fwd_ctx *f)
{
    return f->n_proc > 1 ? (size_t)f->ckpt0[f->n_proc] : local_ckpt_floats(f);
}

void fwd_seq_save(const struct fwd_ctx *f, int64_t s, float *dst)
{
    tell(f, OP_SAVE, s, 0, 0, 0);
    local_save(f, s, dst);
    if (f->n_proc > 1)
        parts(f, dst, f->ckpt0, 1, false);
}

void fwd_seq_restore(struct fwd_ctx *f, int64_t s, const float *src)
{
    tell(f, OP_RESTORE, s, 0, 0, 0);
    if (f->n_proc > 1)
        parts(f, (float *)src, f->ckpt0, 1, true);
    local_restore(f, s, src);
}

size_t fwd_kv_floats(const struct fwd_ctx *f)
{
    return f->n_proc > 1 ? (size_t)f->kv0[f->n_proc] : local_kv_floats(f);
}

void fwd_seq_kv_copy(struct fwd_ctx *f, int64_t dst, int64_t src, int64_t r0, int64_t r1)
{
    tell(f, OP_KV_COPY, dst, src, r0, r1);
    local_kv_copy(f, dst, src, r0, r1);
}

void fwd_seq_kv_download(const struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
                         float *dst)
{
    tell(f, OP_KV_DOWN, s, r0, r1, n);
    local_kv_download(f, s, r0, r1, n, dst);
    if (f->n_proc > 1)
        parts(f, dst, f->kv0, n, false);
}

void fwd_seq_kv_upload(struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
                       const float *src)
{
    tell(f, OP_KV_UP, s, r0, r1, n);
    if (f->n_proc > 1)
        parts(f, (float *)src, f->kv0, n, true);
    local_kv_upload(f, s, r0, r1, n, src);
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
 * Workers (processes 1 .. n_proc - 1 of a job)
 * ========================================================================================== */

/* Run one command of rank 0 on this process's devices. */
static int worker_exec(struct fwd_ctx *f, const struct dist_cmd *c)
{
    const int64_t *a = c->arg;
    char err[256];
    switch (c->op) {
    case OP_DECODE:
    case OP_MTP: {
        const float *h;
        struct fwd_batch b = wire_unpack(f, a[0], a[1] != 0, c->op == OP_MTP, &h);
        if (check_batch(f, &b, err, sizeof err)) {
            LOG_E("rank %d: a step rank 0 sent: %s", f->me, err);
            return DD_EINVAL;
        }
        local_step(f, &b, h);
        return send_logits(f);
    }
    case OP_CLEAR:
        local_clear(f, a[0]);
        return 0;
    case OP_ROLLBACK:
        local_rollback(f, a[0], a[1]);
        return 0;
    case OP_SAVE:
        local_save(f, a[0], f->stage);
        return with_root(f->stage, local_ckpt_floats(f) * sizeof(float), true);
    case OP_RESTORE:
        if (with_root(f->stage, local_ckpt_floats(f) * sizeof(float), false))
            return DD_EIO;
        local_restore(f, a[0], f->stage);
        return 0;
    case OP_KV_COPY:
        local_kv_copy(f, a[0], a[1], a[2], a[3]);
        return 0;
    case OP_KV_DOWN:
    case OP_KV_UP: {
        const size_t n = (size_t)a[3] * local_kv_floats(f);
        if (n > f->stage_cap) {
            LOG_E("rank %d: KV rows of %lld positions exceed the context", f->me, (long long)a[3]);
            return DD_EINVAL;
        }
        if (c->op == OP_KV_DOWN) {
            local_kv_download(f, a[0], a[1], a[2], a[3], f->stage);
            return with_root(f->stage, n * sizeof(float), true);
        }
        if (with_root(f->stage, n * sizeof(float), false))
            return DD_EIO;
        local_kv_upload(f, a[0], a[1], a[2], a[3], f->stage);
        return 0;
    }
    }
    LOG_E("rank %d: unknown command %lld from rank 0", f->me, (long long)c->op);
    return DD_EINVAL;
}

/* Commands until rank 0 destroys the group (0) or ends the job (1). */
static int worker_serve(struct fwd_ctx *f, char *err, size_t errlen)
{
    for (;;) {
        struct dist_cmd c;
        int rc = recv_cmd(&c, f->wire, f->wire_cap, err, errlen);
        if (rc)
            return rc;
        if (c.op == OP_DESTROY)
            return 0;
        if (c.op == DIST_CMD_EXIT)
            return 1;
        if ((rc = worker_exec(f, &c))) {
            dd_errf(err, errlen, "command %lld failed: %s", (long long)c.op,
                    dist_broken() ? dist_failure() : dd_strerror(rc));
            return rc;
        }
    }
}

static int group_create(const struct model *m, struct dev **devs, int n_dev,
                        const struct fwd_params *p, struct fwd_ctx **out, char *err, size_t errlen);

int fwd_worker_run(const struct model *m, struct dev **devs, int n_dev, char *err, size_t errlen)
{
    for (;;) {
        struct dist_cmd c;
        struct fwd_params p;
        int rc = recv_cmd(&c, &p, sizeof p, err, errlen);
        if (rc)
            return rc;
        if (c.op == DIST_CMD_EXIT)
            return 0;
        if (c.op != OP_SETUP) {
            dd_errf(err, errlen, "command %lld from rank 0 before a group exists", (long long)c.op);
            return DD_EINVAL;
        }
        struct fwd_ctx *f = NULL;
        if ((rc = group_create(m, devs, n_dev, &p, &f, err, errlen))) {
            if (dist_broken())
                return rc;
            LOG_E("rank %d: %s", dist_rank(), err); /* rank 0 reports the failure too */
            continue;
        }
        LOG_I("rank %d: devices %lld..%lld of %d ready", f->me, (long long)f->dev0[f->me],
              (long long)f->dev0[f->me + 1] - 1, f->n_total);
        rc = worker_serve(f, err, errlen);
        fwd_destroy(f);
        if (rc)
            return rc < 0 ? rc : 0;
    }
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
    int gpu[MAX_DEV], n_gpu = 0;
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

/* A job: every process's device count (0 from one that cannot take part) numbers the devices
 * globally. The same answer on every process. */
static int proc_layout(struct fwd_ctx *f, int rc, char *err, size_t errlen)
{
    int64_t mine = rc ? 0 : f->n, all[DIST_MAX_RANKS];
    if (allgather(&mine, all, 1))
        return broken(err, errlen);
    for (int p = 0; p < f->n_proc; p++) {
        if (all[p] < 1) {
            if (!rc)
                dd_errf(err, errlen, "rank %d cannot build its device group", p);
            return DD_EINVAL;
        }
        f->dev0[p + 1] = f->dev0[p] + all[p];
    }
    f->n_total = (int)f->dev0[f->n_proc];
    if (f->n_total > MAX_DEV) {
        dd_errf(err, errlen, "%d devices over %d ranks; at most %d", f->n_total, f->n_proc,
                MAX_DEV);
        return DD_EINVAL;
    }
    return 0;
}

/* A job, after every process built its part (rc): whether all did, and the sizes of their
 * parts (checkpoints, KV rows, vocab slices) for the gathers. The same on every process. */
#define SETTLE_K (4 + 2 * MAX_DEV)
static int proc_settle(struct fwd_ctx *f, int rc, char *err, size_t errlen)
{
    int64_t mine[SETTLE_K] = {rc != 0}, all[DIST_MAX_RANKS * SETTLE_K];
    if (!rc) {
        mine[1] = (int64_t)local_ckpt_floats(f);
        mine[2] = (int64_t)local_kv_floats(f);
        for (int d = 0; d < f->n; d++) {
            mine[4 + 2 * d] = fwd__dev_model(f->dev[d])->vocab_lo;
            mine[5 + 2 * d] = fwd__dev_model(f->dev[d])->vocab_hi;
        }
    }
    if (allgather(mine, all, SETTLE_K))
        return broken(err, errlen);
    for (int p = 0; p < f->n_proc; p++) {
        const int64_t *a = all + p * SETTLE_K;
        if (a[0]) {
            if (!rc)
                dd_errf(err, errlen, "rank %d could not build its part of the group", p);
            return DD_EINVAL;
        }
        f->ckpt0[p + 1] = f->ckpt0[p] + a[1];
        f->kv0[p + 1] = f->kv0[p] + a[2];
        f->wpre[p + 1] = f->wpre[p];
        for (int64_t d = 0; d < f->dev0[p + 1] - f->dev0[p]; d++) {
            f->vlo[f->dev0[p] + d] = a[4 + 2 * d];
            f->vhi[f->dev0[p] + d] = a[5 + 2 * d];
            f->wpre[p + 1] += a[5 + 2 * d] - a[4 + 2 * d];
        }
    }
    const int64_t T = f->p.max_tokens, V = f->m->hp.n_vocab;
    f->wire_cap = wire_bytes(T, f->m->hp.n_embd, true);
    f->wire = xaligned_alloc(f->wire_cap);
    size_t st = (size_t)(T * (f->me ? f->wpre[f->me + 1] - f->wpre[f->me] : V));
    const size_t kv = (size_t)f->p.n_ctx * local_kv_floats(f), ck = local_ckpt_floats(f);
    if (f->me) /* a worker's parts: logits slices, checkpoint, KV rows of a sequence */
        st = st > kv ? (st > ck ? st : ck) : (kv > ck ? kv : ck);
    f->stage_cap = st;
    f->stage = xaligned_alloc((st ? st : 1) * sizeof(float));
    return 0;
}

static int group_create(const struct model *m, struct dev **devs, int n_dev,
                        const struct fwd_params *p, struct fwd_ctx **out, char *err, size_t errlen)
{
    int rc = 0;
    if (n_dev < 1 || n_dev > MAX_DEV || p->max_tokens < 1) {
        dd_errf(err, errlen, "invalid device group of %d devices (1..%d)", n_dev, MAX_DEV);
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
    if (f->n_proc > 1 && (rc = proc_layout(f, rc, err, errlen))) {
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
        int rc2 = proc_settle(f, rc, err, errlen);
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
        post((struct dist_cmd){.op = OP_SETUP}, p, sizeof *p))
        return broken(err, errlen);
    return group_create(m, devs, n_dev, p, out, err, errlen);
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
    for (int d = 0; d < MAX_DEV; d++) { /* after a failed create, whatever exists */
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

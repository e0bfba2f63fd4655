/*
 * fwd_dist — the part of a device group that spans the processes of an mpirun job (dist.h;
 * the group itself and the contract are fwd_group.c's and fwd.h's).
 *
 * Rank 0 sends each call on the group to the workers as one command (struct dist_cmd, the op
 * and its arguments) plus at most one payload message (a step's packed batch, or a worker's
 * part of a checkpoint / KV rows); the workers' replies (their logits slices within each step,
 * their checkpoint and KV parts) are gathered by rank 0 at their offsets in rank order. A worker
 * runs fwd_worker_run: it waits for the next command without a deadline (an idle daemon sends
 * none), builds the same group when rank 0 builds one (the parameters come with the command),
 * and executes every command on its own devices until rank 0 destroys the group or ends the
 * job. Messages inside a call use dist's deadline: a rank that does not answer breaks the job.
 *
 * Thread: rank 0's engine thread (its main thread while creating and destroying); a worker's
 * main thread.
 */
#include <string.h>

#include "dist.h"        // defines: dist_xfer, dist_allgather, struct dist_cmd
#include "engine/util.h" // defines: dd_errf, xaligned_alloc, LOG_E
#include "fwd_impl.h"    // defines: struct fwd_ctx, fwd__local_*, fwd__dev_*

/* ============================================================================================
 * Between processes (n_proc > 1)
 * ========================================================================================== */

/* Rank 0: command c, with bytes of payload when bytes > 0, to every worker. */
int fwd__post(struct dist_cmd c, const void *payload, size_t bytes)
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
int fwd__parts(const struct fwd_ctx *f, float *base, const int64_t *at, int64_t mul, bool send)
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
size_t fwd__wire_pack(struct fwd_ctx *f, const struct fwd_batch *b, const float *h_prev)
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

/* Rank 0: the workers' slices of the step's logits rows, received by process into stage
 * ([rows][width] per device, in device order) and copied into their columns. */
int fwd__gather_logits(struct fwd_ctx *f)
{
    const int64_t V = f->m->hp.n_vocab, rows = f->n_logits;
    if (fwd__parts(f, f->stage, f->wpre, rows, false))
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

int fwd__broken(char *err, size_t errlen)
{
    dd_errf(err, errlen, "the tensor-parallel job lost a process: %s", dist_failure());
    return DD_EIO;
}

/* A job: every process's device count (0 from one that cannot take part) numbers the devices
 * globally. The same answer on every process. */
int fwd__proc_layout(struct fwd_ctx *f, int rc, char *err, size_t errlen)
{
    int64_t mine = rc ? 0 : f->n, all[DIST_MAX_RANKS];
    if (allgather(&mine, all, 1))
        return fwd__broken(err, errlen);
    for (int p = 0; p < f->n_proc; p++) {
        if (all[p] < 1) {
            if (!rc)
                dd_errf(err, errlen, "rank %d cannot build its device group", p);
            return DD_EINVAL;
        }
        f->dev0[p + 1] = f->dev0[p] + all[p];
    }
    f->n_total = (int)f->dev0[f->n_proc];
    if (f->n_total > FWD_MAX_DEV) {
        dd_errf(err, errlen, "%d devices over %d ranks; at most %d", f->n_total, f->n_proc,
                FWD_MAX_DEV);
        return DD_EINVAL;
    }
    return 0;
}

/* A job, after every process built its part (rc): whether all did, and the sizes of their
 * parts (checkpoints, KV rows, vocab slices) for the gathers. The same on every process. */
#define SETTLE_K (4 + 2 * FWD_MAX_DEV)
int fwd__proc_settle(struct fwd_ctx *f, int rc, char *err, size_t errlen)
{
    int64_t mine[SETTLE_K] = {rc != 0}, all[DIST_MAX_RANKS * SETTLE_K];
    if (!rc) {
        mine[1] = (int64_t)fwd__local_ckpt_floats(f);
        mine[2] = (int64_t)fwd__local_kv_floats(f);
        for (int d = 0; d < f->n; d++) {
            mine[4 + 2 * d] = fwd__dev_model(f->dev[d])->vocab_lo;
            mine[5 + 2 * d] = fwd__dev_model(f->dev[d])->vocab_hi;
        }
    }
    if (allgather(mine, all, SETTLE_K))
        return fwd__broken(err, errlen);
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
    const size_t kv = (size_t)f->p.n_ctx * fwd__local_kv_floats(f), ck = fwd__local_ckpt_floats(f);
    if (f->me) /* a worker's parts: logits slices, checkpoint, KV rows of a sequence */
        st = st > kv ? (st > ck ? st : ck) : (kv > ck ? kv : ck);
    f->stage_cap = st;
    f->stage = xaligned_alloc((st ? st : 1) * sizeof(float));
    return 0;
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
        if (fwd__check_batch(f, &b, err, sizeof err)) {
            LOG_E("rank %d: a step rank 0 sent: %s", f->me, err);
            return DD_EINVAL;
        }
        fwd__local_step(f, &b, c->op == OP_MTP, h, NULL);
        return send_logits(f);
    }
    case OP_CLEAR:
        fwd__local_clear(f, a[0]);
        return 0;
    case OP_ROLLBACK:
        fwd__local_rollback(f, a[0], a[1]);
        return 0;
    case OP_SAVE:
        fwd__local_save(f, a[0], f->stage);
        return with_root(f->stage, fwd__local_ckpt_floats(f) * sizeof(float), true);
    case OP_RESTORE:
        if (with_root(f->stage, fwd__local_ckpt_floats(f) * sizeof(float), false))
            return DD_EIO;
        fwd__local_restore(f, a[0], f->stage);
        return 0;
    case OP_KV_COPY:
        fwd__local_kv_copy(f, a[0], a[1], a[2], a[3]);
        return 0;
    case OP_KV_DOWN:
    case OP_KV_UP: {
        const size_t n = (size_t)a[3] * fwd__local_kv_floats(f);
        if (n > f->stage_cap) {
            LOG_E("rank %d: KV rows of %lld positions exceed the context", f->me, (long long)a[3]);
            return DD_EINVAL;
        }
        if (c->op == OP_KV_DOWN) {
            fwd__local_kv_download(f, a[0], a[1], a[2], a[3], f->stage);
            return with_root(f->stage, n * sizeof(float), true);
        }
        if (with_root(f->stage, n * sizeof(float), false))
            return DD_EIO;
        fwd__local_kv_upload(f, a[0], a[1], a[2], a[3], f->stage);
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
        if ((rc = fwd__group_create(m, devs, n_dev, &p, &f, err, errlen))) {
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

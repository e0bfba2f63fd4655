/*
 * dev_strict — the strict test device (contract in device.h, dev_strict_create): the CPU
 * device's ops behind device memory the host cannot touch. Every buffer is its own anonymous
 * mapping, PROT_NONE except while one of this device's entries runs (then read-write), so any
 * read or write of an activation or cache address by host code between device calls faults
 * (SIGSEGV). The golden, speculation, TP and engine tests run through it in make test
 * (tests/golden/test_strict.sh), which proves the forward pass touches device memory only
 * through the device.
 *
 * Weights too: the strict device has no host_weights, so the group uploads them into one of
 * its buffers at start-up (shard_upload) and they are as untouchable as the activations.
 *
 * Thread: one driving thread per device, as for any device; a group's devices each open and
 * close their own mappings (the host allreduce reads the other ranks' buffers only while they
 * too are inside their allreduce entry).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "comm.h"        // defines: comm_allreduce
#include "device.h"      // defines: struct dev, struct dev_ops, dev_strict_create
#include "engine/util.h" // defines: xcalloc, dd_errf, ASSERT

#define MAX_BUFS 32

struct strict_buf {
    void *addr;
    size_t len;
};

struct strict_dev {
    struct dev base;
    struct dev *inner;
    struct strict_buf bufs[MAX_BUFS];
    int n_open; /* nesting depth of entries in flight */
};

static struct strict_dev *strict_of(struct dev *d)
{
    return (struct strict_dev *)d;
}

static void protect(struct strict_dev *sd, int prot)
{
    for (int i = 0; i < MAX_BUFS; i++)
        if (sd->bufs[i].addr)
            ASSERT(mprotect(sd->bufs[i].addr, sd->bufs[i].len, prot) == 0);
}

static struct dev *open_(struct dev *d)
{
    struct strict_dev *sd = strict_of(d);
    if (sd->n_open++ == 0)
        protect(sd, PROT_READ | PROT_WRITE);
    return sd->inner;
}

static void close_(struct dev *d)
{
    struct strict_dev *sd = strict_of(d);
    if (--sd->n_open == 0)
        protect(sd, PROT_NONE);
}

/* ---- buffers ---- */

static int strict_buf_alloc(struct dev *d, size_t bytes, size_t align, struct dev_buf **buf,
                            void **addr)
{
    struct strict_dev *sd = strict_of(d);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    ASSERT(align <= page);
    int i = 0;
    while (i < MAX_BUFS && sd->bufs[i].addr)
        i++;
    if (i == MAX_BUFS)
        return DD_ENOMEM;
    const size_t len = (bytes + page - 1) / page * page + page;
    void *p = mmap(NULL, len, sd->n_open ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return DD_ENOMEM;
    sd->bufs[i] = (struct strict_buf){.addr = p, .len = len};
    *buf = (struct dev_buf *)&sd->bufs[i];
    *addr = p;
    return 0;
}

static void strict_buf_free(struct dev *d, struct dev_buf *buf)
{
    (void)d;
    struct strict_buf *b = (struct strict_buf *)buf;
    munmap(b->addr, b->len);
    *b = (struct strict_buf){0};
}

static void strict_upload(struct dev *d, void *dst, const void *src, size_t bytes)
{
    struct dev *in = open_(d);
    in->ops->upload(in, dst, src, bytes);
    close_(d);
}

static void strict_download(struct dev *d, void *dst, const void *src, size_t bytes)
{
    struct dev *in = open_(d);
    in->ops->download(in, dst, src, bytes);
    close_(d);
}

static void strict_copy(struct dev *d, void *dst, const void *src, size_t bytes)
{
    struct dev *in = open_(d);
    in->ops->copy(in, dst, src, bytes);
    close_(d);
}

static void strict_memset(struct dev *d, void *dst, int byte, size_t bytes)
{
    struct dev *in = open_(d);
    in->ops->memset(in, dst, byte, bytes);
    close_(d);
}

static void strict_allreduce(struct dev *d, struct comm *c, int rank, float *buf, int64_t n)
{
    struct dev *in = open_(d);
    dev_sync(in);
    comm_allreduce(c, rank, buf, n);
    close_(d);
}

/* ---- entries passed through unopened (no device memory involved) ---- */

static bool strict_supports(const struct dev *d, enum dev_op op, enum kq_type t)
{
    return dev_supports(((const struct strict_dev *)d)->inner, op, t);
}

static int strict_reserve(struct dev *d, int64_t max_tokens, int64_t max_in)
{
    return dev_reserve(strict_of(d)->inner, max_tokens, max_in);
}

static int strict_reserve_multi(struct dev *d, size_t act_bytes)
{
    return dev_reserve_multi(strict_of(d)->inner, act_bytes);
}

static int strict_reserve_attn(struct dev *d, int64_t n_ctx, int64_t grp)
{
    return dev_reserve_attn(strict_of(d)->inner, n_ctx, grp);
}

static void strict_parallel(struct dev *d, dev_task_fn fn, void *ctx)
{
    dev_parallel(strict_of(d)->inner, fn, ctx);
}

static void strict_barrier(struct dev *d)
{
    dev_barrier(strict_of(d)->inner);
}

static int strict_n_threads(const struct dev *d)
{
    return dev_n_threads(((const struct strict_dev *)d)->inner);
}

static void strict_moe_stats(const struct dev *d, struct dev_moe_stats *s)
{
    dev_moe_stats(((const struct strict_dev *)d)->inner, s);
}

static void strict_bind_host(struct dev *d)
{
    dev_bind_host(strict_of(d)->inner);
}

static enum kq_type strict_weight_layout(const struct dev *d, enum kq_type t)
{
    return dev_weight_layout(((const struct strict_dev *)d)->inner, t);
}

/* ---- the forward ops: open, inner's op, close ---- */

#define WRAP(op, params, args)                                                                     \
    static void strict_##op params                                                                 \
    {                                                                                              \
        struct dev *in = open_(d);                                                                 \
        in->ops->op args;                                                                          \
        close_(d);                                                                                 \
    }

WRAP(matmul, (struct dev * d, const struct dev_mat *w, const float *x, int64_t T, float *y),
     (in, w, x, T, y))
WRAP(matmul_multi, (struct dev * d, const struct dev_mm *mm, int n), (in, mm, n))
WRAP(embed, (struct dev * d, const struct dev_mat *w, const struct dev_batch *b, float *x),
     (in, w, b, x))
WRAP(rope_table, (struct dev * d, const struct dev_batch *b, int64_t n_rot, float base, float *cs),
     (in, b, n_rot, base, cs))
WRAP(rmsnorm, (struct dev * d, const struct dev_norm *a), (in, a))
WRAP(attn_store, (struct dev * d, const struct dev_attn *a), (in, a))
WRAP(attn, (struct dev * d, const struct dev_attn *a), (in, a))
WRAP(gdn_gates, (struct dev * d, const struct dev_gdn *g), (in, g))
WRAP(conv1d, (struct dev * d, const struct dev_gdn *g), (in, g))
WRAP(gdn, (struct dev * d, const struct dev_gdn *g), (in, g))
WRAP(swiglu, (struct dev * d, float *g, const float *u, int64_t n, int64_t w), (in, g, u, n, w))
WRAP(shexp_gate, (struct dev * d, const float *w, const float *x, int64_t T, int64_t E, float *out),
     (in, w, x, T, E, out))
WRAP(moe_route, (struct dev * d, const struct dev_moe *m), (in, m))
WRAP(moe_gather, (struct dev * d, const struct dev_moe *m), (in, m))
WRAP(moe_combine, (struct dev * d, const struct dev_moe *m), (in, m))
WRAP(matmul_id, (struct dev * d, const struct dev_mm_id *p), (in, p))
WRAP(gather_rows,
     (struct dev * d, float *dst, const float *src, const int32_t *idx, int64_t n, int64_t w),
     (in, dst, src, idx, n, w))
WRAP(scatter_rows,
     (struct dev * d, float *dst, const float *src, const int32_t *idx, int64_t n, int64_t w),
     (in, dst, src, idx, n, w))
WRAP(argmax, (struct dev * d, const float *x, int64_t rows, int64_t n, int32_t *out, float *mass),
     (in, x, rows, n, out, mass))

#undef WRAP

static void strict_destroy(struct dev *d)
{
    struct strict_dev *sd = strict_of(d);
    for (int i = 0; i < MAX_BUFS; i++)
        if (sd->bufs[i].addr)
            munmap(sd->bufs[i].addr, sd->bufs[i].len);
    dev_destroy(sd->inner);
    free(sd);
}

static const struct dev_ops strict_ops = {
    .api_version = DEV_API_VERSION,
    .name = "strict",
    .host_weights = false,
    .destroy = strict_destroy,
    .buf_alloc = strict_buf_alloc,
    .buf_free = strict_buf_free,
    .upload = strict_upload,
    .download = strict_download,
    .copy = strict_copy,
    .memset = strict_memset,
    .supports = strict_supports,
    .reserve = strict_reserve,
    .matmul = strict_matmul,
    .matmul_multi = strict_matmul_multi,
    .reserve_multi = strict_reserve_multi,
    .parallel = strict_parallel,
    .barrier = strict_barrier,
    .n_threads = strict_n_threads,
    .bind_host = strict_bind_host,
    .weight_layout = strict_weight_layout,
    .reserve_attn = strict_reserve_attn,
    .embed = strict_embed,
    .rope_table = strict_rope_table,
    .rmsnorm = strict_rmsnorm,
    .attn_store = strict_attn_store,
    .attn = strict_attn,
    .gdn_gates = strict_gdn_gates,
    .conv1d = strict_conv1d,
    .gdn = strict_gdn,
    .swiglu = strict_swiglu,
    .shexp_gate = strict_shexp_gate,
    .moe_route = strict_moe_route,
    .moe_gather = strict_moe_gather,
    .moe_combine = strict_moe_combine,
    .matmul_id = strict_matmul_id,
    .gather_rows = strict_gather_rows,
    .scatter_rows = strict_scatter_rows,
    .argmax = strict_argmax,
    .moe_stats = strict_moe_stats,
    .allreduce = strict_allreduce,
};

int dev_strict_create(struct dev *inner, struct dev **out, char *err, size_t errlen)
{
    int rc = dev_check_api(&strict_ops, err, errlen);
    if (rc) {
        dev_destroy(inner);
        return rc;
    }
    struct strict_dev *sd = xcalloc(1, sizeof *sd);
    sd->base.ops = &strict_ops;
    sd->base.ctx = sd;
    sd->inner = inner;
    *out = &sd->base;
    return 0;
}

/*
 * dev_cpu — the CPU device: a persistent thread pool (tpool) bound to a core set, running the
 * kernels of kernels/cpu. A matmul is one dispatch with two phases separated by a barrier:
 * quantise the activation rows into the weight type's activation format (rows split across
 * threads), then compute output rows (rows split across threads, every thread over all tokens,
 * so each weight row is streamed from memory once per call).
 *
 * Memory: the activation scratch is sized by reserve() at start-up; matmul allocates nothing.
 * Thread: driven by one thread (the engine thread), which is thread 0 of every dispatch.
 */
#include <stdlib.h>
#include <string.h>

#include "device.h" // defines: struct dev, dev_cpu_create
#include "quant.h"  // defines: kq_matmul, kq_quantize_act
#include "topo.h"   // defines: topo_split, topo_bind_unit
#include "tpool.h"  // defines: tpool_run, tpool_barrier
#include "util.h"   // defines: xcalloc, xaligned_alloc, dd_errf

struct cpu_dev {
    struct dev base;
    tpool_t *pool;
    void *act;      /* activation scratch, act_cap bytes */
    size_t act_cap;
};

/* One matmul in flight: everything its workers need. */
struct mm_job {
    struct cpu_dev *cd;
    const struct dev_mat *w;
    const float *x; /* [T][n_in] */
    int64_t T;
    float *y;       /* [T][n_out] */
    size_t act_stride;
};

static struct cpu_dev *cpu_of(struct dev *d)
{
    return (struct cpu_dev *)d;
}

/* Row granularity of the output split: keeps every thread's rows on whole cache lines of y. */
#define ROW_ALIGN 16

static void mm_worker(void *ctx, int ith, int nth)
{
    struct mm_job *j = ctx;
    const struct dev_mat *w = j->w;
    int64_t lo, hi;
    tpool_split(j->T, ith, nth, 1, &lo, &hi);
    for (int64_t t = lo; t < hi; t++)
        kq_quantize_act(w->type, j->x + t * w->n_in, (char *)j->cd->act + t * j->act_stride,
                        w->n_in);
    tpool_barrier(j->cd->pool);
    tpool_split(w->n_out, ith, nth, ROW_ALIGN, &lo, &hi);
    if (lo < hi)
        kq_matmul(w->type, w->n_in, w->data, w->row_bytes, lo, hi, j->cd->act, j->act_stride,
                  j->T, j->y, w->n_out);
}

static void cpu_matmul(struct dev *d, const struct dev_mat *w, const float *x, int64_t T, float *y)
{
    struct cpu_dev *cd = cpu_of(d);
    size_t stride = kq_act_row_bytes(w->type, w->n_in);
    ASSERT(stride * (size_t)T <= cd->act_cap); /* reserve() sized it for the worst case */
    struct mm_job j = {.cd = cd, .w = w, .x = x, .T = T, .y = y, .act_stride = stride};
    tpool_run(cd->pool, mm_worker, &j);
}

static int cpu_reserve(struct dev *d, int64_t max_tokens, int64_t max_in)
{
    struct cpu_dev *cd = cpu_of(d);
    /* the widest activation format is f32 (F32/F16/BF16 weights) */
    size_t need = (size_t)max_tokens * (size_t)max_in * sizeof(float) + 64;
    if (need <= cd->act_cap)
        return 0;
    free(cd->act);
    cd->act = xaligned_alloc(need);
    cd->act_cap = need;
    return 0;
}

static void cpu_parallel(struct dev *d, dev_task_fn fn, void *ctx)
{
    tpool_run(cpu_of(d)->pool, fn, ctx);
}

static void cpu_barrier(struct dev *d)
{
    tpool_barrier(cpu_of(d)->pool);
}

static int cpu_n_threads(const struct dev *d)
{
    return tpool_size(((const struct cpu_dev *)d)->pool);
}

static void cpu_destroy(struct dev *d)
{
    struct cpu_dev *cd = cpu_of(d);
    tpool_destroy(cd->pool);
    free(cd->act);
    free(cd);
}

static const struct dev_ops cpu_ops = {
    .api_version = DEV_API_VERSION,
    .name = "cpu",
    .destroy = cpu_destroy,
    .reserve = cpu_reserve,
    .matmul = cpu_matmul,
    .parallel = cpu_parallel,
    .barrier = cpu_barrier,
    .n_threads = cpu_n_threads,
};

int dev_cpu_create(int n_threads, const topo_coreset *cores, struct dev **out, char *err,
                   size_t errlen)
{
    if (n_threads < 0 || n_threads > 1024) {
        dd_errf(err, errlen, "cpu device: thread count %d out of range 0..1024", n_threads);
        return DD_EINVAL;
    }
    struct cpu_dev *cd = xcalloc(1, sizeof *cd);
    cd->base.ops = &cpu_ops;
    cd->base.ctx = cd;
    cd->pool = tpool_create(n_threads, cores, "deltad-cpu");
    if (!cd->pool) {
        dd_errf(err, errlen, "cpu device: cannot create %d threads", n_threads);
        free(cd);
        return DD_ENOMEM;
    }
    *out = &cd->base;
    return 0;
}

/* Unbound devices: n_threads split evenly, at least one each. */
static int unbound_group(int n_dev, int n_threads, struct dev **devs, char *err, size_t errlen)
{
    for (int d = 0; d < n_dev; d++) {
        int t = n_threads / n_dev + (d < n_threads % n_dev);
        int rc = dev_cpu_create(t > 0 ? t : 1, NULL, &devs[d], err, errlen);
        if (rc) {
            while (d-- > 0)
                dev_destroy(devs[d]);
            return rc;
        }
    }
    return 0;
}

int dev_cpu_create_group(int n_dev, int n_threads, bool bind, struct dev **devs, char *err,
                         size_t errlen)
{
    if (n_dev < 1 || n_dev > 64) {
        dd_errf(err, errlen, "cpu device group: %d devices (1..64)", n_dev);
        return DD_EINVAL;
    }
    topo_t *topo = topo_create(err, errlen);
    if (!topo)
        return DD_EIO;
    topo_counts counts;
    topo_get_counts(topo, &counts);
    topo_plan *plan = NULL;
    int rc = 0;
    if (!bind || n_dev > counts.allowed_cores) {
        if (bind)
            LOG_W("%d CPU devices on %d allowed cores: devices are not bound", n_dev,
                  counts.allowed_cores);
        rc = unbound_group(n_dev, n_threads ? n_threads : counts.allowed_cores, devs, err, errlen);
        goto out;
    }
    if ((rc = topo_split(topo, n_dev, 0, &plan, err, errlen)))
        goto out;
    topo_bind_unit(&plan->sets[0], 0);
    for (int d = 0; d < n_dev && !rc; d++) {
        int t = n_threads ? n_threads / n_dev + (d < n_threads % n_dev) : plan->sets[d].n;
        rc = dev_cpu_create(t > 0 ? t : 1, &plan->sets[d], &devs[d], err, errlen);
        if (rc)
            while (d-- > 0)
                dev_destroy(devs[d]);
    }
out:
    topo_plan_destroy(plan);
    topo_destroy(topo);
    return rc;
}

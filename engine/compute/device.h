/*
 * device — the compute device interface: a const operations table plus an opaque context
 * (STYLE rule 7, after ggml-backend). The forward pass calls only the static inline wrappers
 * below; implementations live in dev_cpu.c (a thread pool bound to a core set) and, later,
 * the CUDA device.
 *
 * Optional operations may be NULL; each wrapper documents its fallback.
 *
 * Thread safety: a device is driven by one thread (the engine thread) at a time.
 */
#ifndef DELTAD_DEVICE_H
#define DELTAD_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kq.h" // defines: enum kq_type
#include "tpool.h"          // defines: tpool_split, topo_coreset

#define DEV_API_VERSION 1

/* A weight matrix as the device sees it: n_out rows of n_in elements, row_bytes apart. */
struct dev_mat {
    const void *data;
    enum kq_type type;
    int64_t n_in, n_out;
    size_t row_bytes;
};

/* One product of a matmul_multi: y [T][w.n_out] = x [T][w.n_in] * W^T. */
struct dev_mm {
    struct dev_mat w;
    const float *x;
    int64_t T;
    float *y;
};

/* Most products in one matmul_multi call. */
#define DEV_MM_MAX 128

typedef void (*dev_task_fn)(void *ctx, int ith, int nth);

struct dev;

struct dev_ops {
    int api_version;
    const char *name;
    void (*destroy)(struct dev *d);
    /* Reserve scratch for matmuls of up to max_tokens rows of up to max_in inputs. */
    int (*reserve)(struct dev *d, int64_t max_tokens, int64_t max_in);
    /* y [T][n_out] = x [T][n_in] * W^T (f32 in, f32 out). */
    void (*matmul)(struct dev *d, const struct dev_mat *w, const float *x, int64_t T, float *y);
    /*
     * n <= DEV_MM_MAX independent products as one operation: inputs that several products share
     * (the same x, T, n_in and activation format) are prepared once, and the device may run
     * the products' rows in any order and split. Every y is what dev_matmul gives for it.
     * Outputs must not overlap each other or any input. NULL: one matmul per product.
     */
    void (*matmul_multi)(struct dev *d, const struct dev_mm *mm, int n);
    /* Reserve activation scratch of act_bytes for one matmul_multi call (see
     * dev_mm_act_bytes). NULL: nothing to reserve. */
    int (*reserve_multi)(struct dev *d, size_t act_bytes);
    /* Run fn(ctx, ith, nth) on all of the device's threads; returns when all are done.
     * NULL on devices without host threads (the wrapper then runs fn(ctx, 0, 1)). */
    void (*parallel)(struct dev *d, dev_task_fn fn, void *ctx);
    /* Barrier among the threads of the current parallel call (NULL: no-op, 1 thread). */
    void (*barrier)(struct dev *d);
    int (*n_threads)(const struct dev *d);
    /* Bind the calling thread, which will drive the device, near the device (a CPU device: to
     * the first core of its set; a GPU: its NUMA node). NULL: nothing to do. */
    void (*bind_host)(struct dev *d);
    /* The layout in which this device computes weights of type t fastest (a CPU device:
     * kq_repack_type); the model's tensors are rewritten to it at start-up. NULL: t. */
    enum kq_type (*weight_layout)(const struct dev *d, enum kq_type t);
};

struct dev {
    const struct dev_ops *ops;
    void *ctx;
};

static inline void dev_bind_host(struct dev *d)
{
    if (d->ops->bind_host)
        d->ops->bind_host(d);
}

static inline int dev_reserve(struct dev *d, int64_t max_tokens, int64_t max_in)
{
    return d->ops->reserve ? d->ops->reserve(d, max_tokens, max_in) : 0;
}

static inline void dev_matmul(struct dev *d, const struct dev_mat *w, const float *x, int64_t T,
                              float *y)
{
    d->ops->matmul(d, w, x, T, y);
}

static inline void dev_matmul_multi(struct dev *d, const struct dev_mm *mm, int n)
{
    if (d->ops->matmul_multi) {
        d->ops->matmul_multi(d, mm, n);
        return;
    }
    for (int i = 0; i < n; i++)
        d->ops->matmul(d, &mm[i].w, mm[i].x, mm[i].T, mm[i].y);
}

/* Scratch a matmul_multi of these products needs at most on a CPU device: every product's
 * activation rows in its format, 64 bytes of alignment each (sharing only lowers it). */
static inline size_t dev_mm_act_bytes(const struct dev_mm *mm, int n)
{
    size_t b = 0;
    for (int i = 0; i < n; i++)
        b += (size_t)mm[i].T * kq_act_row_bytes(mm[i].w.type, mm[i].w.n_in) + 64;
    return b;
}

static inline int dev_reserve_multi(struct dev *d, size_t act_bytes)
{
    return d->ops->reserve_multi ? d->ops->reserve_multi(d, act_bytes) : 0;
}

static inline void dev_parallel(struct dev *d, dev_task_fn fn, void *ctx)
{
    if (d->ops->parallel)
        d->ops->parallel(d, fn, ctx);
    else
        fn(ctx, 0, 1);
}

static inline void dev_barrier(struct dev *d)
{
    if (d->ops->barrier)
        d->ops->barrier(d);
}

static inline enum kq_type dev_weight_layout(const struct dev *d, enum kq_type t)
{
    return d->ops->weight_layout ? d->ops->weight_layout(d, t) : t;
}

static inline int dev_n_threads(const struct dev *d)
{
    return d->ops->n_threads ? d->ops->n_threads(d) : 1;
}

static inline void dev_destroy(struct dev *d)
{
    if (d)
        d->ops->destroy(d);
}

/* Even split of [0, n) for thread ith of nth inside a parallel call (see tpool_split). */
static inline void dev_split(int64_t n, int ith, int nth, int64_t align, int64_t *lo, int64_t *hi)
{
    tpool_split(n, ith, nth, align, lo, hi);
}

/* The CPU device: a pool of n_threads threads (0 = one per unit of cores, or 1 without cores)
 * whose workers bind to the units of cores (borrowed for the call; NULL = unbound). The
 * calling thread becomes thread 0 of every parallel call. Transferred: dev_destroy. */
int dev_cpu_create(int n_threads, const topo_coreset *cores, struct dev **out, char *err,
                   size_t errlen);

/* A group of n_dev CPU devices over disjoint core sets from hwloc (topo_split: NUMA-aware).
 * n_threads: total threads (0 = one per allowed core), divided among the devices. bind = false
 * (or more devices than cores, for testing) gives unbound devices of at least one thread each.
 * The calling thread is bound to device 0's first core when binding. devs[0 .. n_dev) are
 * transferred (dev_destroy each). Errors name the problem (e.g. more devices than cores). */
int dev_cpu_create_group(int n_dev, int n_threads, bool bind, struct dev **devs, char *err,
                         size_t errlen);

#endif

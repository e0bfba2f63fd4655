/*
 * dev_cpu_impl — what the files of the CPU device share: its context, the parallel loop over
 * items, and the forward ops of dev_cpu_ops.c that dev_cpu.c puts in its table. Users include
 * device.h only.
 */
#ifndef DELTAD_DEV_CPU_IMPL_H
#define DELTAD_DEV_CPU_IMPL_H

#include "device.h" // defines: struct dev, struct dev_mm, struct dev_attn, struct dev_gdn, ...
#include "tpool.h"  // defines: tpool_t

struct cpu_dev {
    struct dev base;
    tpool_t *pool;
    int n_threads;
    void *act; /* matmul activation scratch, act_cap bytes */
    size_t act_cap;
    float *attn_scratch;      /* [n_threads][attn_scratch_n] attention scores */
    int64_t attn_scratch_n;   /* n_ctx <= it <= grp * n_ctx, at most DEV_CPU_ATTN_SCRATCH */
    struct dev_moe_stats moe; /* matmul_id's expert reads so far (dev_moe_stats) */
};

/* Attention scores per thread (floats): a whole query-head group at the usual depths, one head
 * at a time at the longest ones. */
#define DEV_CPU_ATTN_SCRATCH (256 << 10)

static inline struct cpu_dev *dev_cpu__of(struct dev *d)
{
    return (struct cpu_dev *)d;
}

/* fn(arg, i0, i1) on each thread's contiguous share of [0, n), or on the calling thread alone
 * when n * work (elements) is below the size where a dispatch pays (dev_cpu_ops.c). */
typedef void (*dev_cpu__items_fn)(const void *arg, int64_t i0, int64_t i1);
void dev_cpu__par_items(struct cpu_dev *cd, int64_t n, int64_t work, dev_cpu__items_fn fn,
                        const void *arg);

void dev_cpu__matmul_multi(struct dev *d, const struct dev_mm *mm, int n);

/* A matmul_multi input: x's T rows of n_in floats in the activation format of weight type w,
 * act_stride bytes apart at act (in the device's scratch, cpu_dev.act). */
struct dev_cpu__src {
    const float *x; /* [T][n_in] */
    int64_t T, n_in;
    enum kq_type w; /* a weight type with this source's activation format */
    char *act;      /* [T] rows of act_stride bytes */
    size_t act_stride;
};

/* The scratch bytes a source's T rows take: whole 64-byte lines, so the next source starts on
 * a line of its own. */
static inline size_t dev_cpu__src_bytes(int64_t T, size_t act_stride)
{
    return ((size_t)T * act_stride + 63) / 64 * 64;
}

/* matmul_multi where the caller has already prepared some inputs: pre[0 .. n_pre) hold their
 * rows (in the scratch's first pre_bytes bytes), and a product with the same x, T, n_in and
 * activation format reads them instead of quantising x (matmul_id's routed rows, each
 * quantised once for all its slots). n + n_pre <= DEV_MM_MAX. */
void dev_cpu__matmul_multi_pre(struct dev *d, const struct dev_mm *mm, int n,
                               const struct dev_cpu__src *pre, int n_pre, size_t pre_bytes);

/* The forward ops (contracts in device.h). */
void dev_cpu__embed(struct dev *d, const struct dev_mat *w, const struct dev_batch *b, float *x);
void dev_cpu__rope_table(struct dev *d, const struct dev_batch *b, int64_t n_rot, float base,
                         float *cs);
void dev_cpu__rmsnorm(struct dev *d, const struct dev_norm *a);
void dev_cpu__attn_store(struct dev *d, const struct dev_attn *a);
void dev_cpu__attn(struct dev *d, const struct dev_attn *a);
void dev_cpu__gdn_gates(struct dev *d, const struct dev_gdn *g);
void dev_cpu__conv1d(struct dev *d, const struct dev_gdn *g);
void dev_cpu__gdn(struct dev *d, const struct dev_gdn *g);
void dev_cpu__swiglu(struct dev *d, float *g, const float *u, int64_t n, int64_t w);
void dev_cpu__shexp_gate(struct dev *d, const float *w, const float *x, int64_t T, int64_t E,
                         float *out);
void dev_cpu__moe_route(struct dev *d, const struct dev_moe *m);
void dev_cpu__moe_gather(struct dev *d, const struct dev_moe *m);
void dev_cpu__moe_combine(struct dev *d, const struct dev_moe *m);
void dev_cpu__matmul_id(struct dev *d, const struct dev_mm_id *p);
void dev_cpu__gather_rows(struct dev *d, float *dst, const float *src, const int32_t *idx,
                          int64_t n, int64_t w);
void dev_cpu__scatter_rows(struct dev *d, float *dst, const float *src, const int32_t *idx,
                           int64_t n, int64_t w);
void dev_cpu__argmax(struct dev *d, const float *x, int64_t rows, int64_t n, int32_t *out,
                     float *mass);

#endif

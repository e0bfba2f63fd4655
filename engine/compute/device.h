/*
 * device — the compute device interface: a const operations table plus an opaque context
 * (STYLE rule 7, after ggml-backend). The forward pass calls only the static inline wrappers
 * below; implementations: dev_cpu.c + dev_cpu_ops.c (a thread pool bound to a core set),
 * dev_strict.c (the CPU device behind memory the host cannot touch, for tests) and dev_cuda.c.
 *
 * Memory: a device owns buffers (buf_alloc: an opaque handle plus the device address of the
 * first byte). A device address is a typed pointer the host must never dereference, as with
 * cudaMalloc: pointer arithmetic on it is fine, reading through it is not. The CPU device's
 * device memory is host memory it owns; the strict device's faults when the host touches it.
 * Weights (struct dev_mat) are device addresses too: a device with host_weights reads the
 * model's mapping (or its shard's host copies) in place; for any other device the group
 * uploads every weight once at start-up into one buffer of the device (shard_upload). upload /
 * download / copy / memset and every op are ordered on the device's stream and may return before
 * they finish; sync waits for all of them (a download's host bytes are valid after sync).
 *
 * Ops: one entry per forward op at batch granularity, on device addresses; their arguments
 * are host structs (below) whose pointer fields are device addresses. The CPU device runs the
 * kernels of kernels/cpu (each op names its reference there); supports(op, type) says which
 * ops a device has.
 *
 * Optional entries may be NULL; each wrapper documents its fallback. A device whose ops table
 * has another api_version is refused when it is created (dev_check_api).
 *
 * Thread safety: a device is driven by one thread (the engine thread) at a time.
 */
#ifndef DELTAD_DEVICE_H
#define DELTAD_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"           // defines: comm_allreduce
#include "engine/util.h"    // defines: dd_errf, ASSERT, DD_EINVAL
#include "kernels/cpu/kq.h" // defines: enum kq_type, kq_act_row_bytes
#include "tpool.h"          // defines: tpool_split, topo_coreset

#define DEV_API_VERSION 5

/* The forward ops, for supports() (X-macro: name). */
#define DEV_OP_LIST(X)                                                                             \
    X(MATMUL)                                                                                      \
    X(MATMUL_ID)                                                                                   \
    X(EMBED)                                                                                       \
    X(ROPE_TABLE)                                                                                  \
    X(RMSNORM)                                                                                     \
    X(ATTN_STORE)                                                                                  \
    X(ATTN)                                                                                        \
    X(GDN_GATES)                                                                                   \
    X(CONV1D)                                                                                      \
    X(GDN)                                                                                         \
    X(SWIGLU)                                                                                      \
    X(SHEXP_GATE)                                                                                  \
    X(MOE_ROUTE)                                                                                   \
    X(MOE_GATHER)                                                                                  \
    X(MOE_COMBINE)                                                                                 \
    X(ROWS)                                                                                        \
    X(ARGMAX)

enum dev_op {
#define DEV_OP_ENUM(n) DEV_OP_##n,
    DEV_OP_LIST(DEV_OP_ENUM)
#undef DEV_OP_ENUM
        DEV_OP_COUNT
};

/* A weight matrix as the device sees it: n_out rows of n_in elements, row_bytes apart, at
 * device address data. */
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

/* ---- op arguments: host structs whose pointers are device addresses ---------------------- */

/* One run of consecutive rows of one sequence in a batch; src: the snapshot group its
 * recurrent state starts from (the cache's rs_idx of the sequence at the step's start). */
struct dev_run {
    int32_t t0, t1, seq, src;
};

/* A step's batch on the device: T rows, n_runs runs. */
struct dev_batch {
    int64_t T, n_runs;
    const int32_t *token;       /* [T] */
    const int32_t *seq;         /* [T] */
    const int64_t *pos;         /* [T] */
    const struct dev_run *runs; /* [n_runs] */
};

/* One attention layer's KV rows: row p of sequence s at k + s * seq_stride + p * kv_dim. */
struct dev_kv {
    float *k, *v;
    int64_t kv_dim, seq_stride;
};

/* One GDN layer's state: group g of sequence s starts at base + g * group_stride +
 * s * seq_stride with conv_elems floats of conv state, then the SSM state. */
struct dev_gdn_state {
    float *base;
    int64_t group_stride, seq_stride, conv_elems, n_groups;
};

/* y rows = rmsnorm(x rows) * w (w NULL: no weight), after x rows += add rows (add NULL: none);
 * T rows of n at strides ld_x (x and add) and ld_y. */
struct dev_norm {
    float *x;
    const float *add, *w;
    float *y;
    int64_t T, n, ld_x, ld_y;
    float eps;
};

/* One attention layer over a batch: q [T][q_ld] (head h at h * (gated ? 2D : D), its output
 * gate after it), k, v [T][n_head_kv * D], out [T][n_head * D]; cs [T][n_rot] rope tables. */
struct dev_attn {
    const struct dev_batch *b;
    float *q, *k, *v, *out; /* q NULL: store K/V only */
    int64_t q_ld, n_head, n_head_kv, head_dim, n_rot;
    const float *q_norm, *k_norm, *cs;
    bool gated;
    float eps, scale;
    struct dev_kv kv;
};

/* One Gated DeltaNet layer over a batch (docs/models.md 5.4). */
struct dev_gdn {
    const struct dev_batch *b;
    const float *u;               /* [T][C] qkv projection */
    float *y;                     /* [T][C] conv out: q | k | v (q, k L2-normalised) */
    const float *z;               /* [T][Hv * S] output gate */
    float *o;                     /* [T][Hv * S] output */
    const float *bl, *al, *ba;    /* beta / alpha logits [T][Hv] each, or ba [T][2Hv] */
    float *beta, *decay;          /* [T][Hv] */
    const float *a_log, *dt_bias; /* [Hv] */
    const float *conv_w, *norm_w; /* [C][K], [S] */
    int64_t C, S, Hk, Hv, conv_k;
    bool kmap_mod; /* key head of value head h: h % Hk (else h / (Hv / Hk)) */
    float eps;
    struct dev_gdn_state st;
};

/* MoE routing and combine over T rows (docs/models.md 5.6): the rows routed to expert e are
 * slots e_off[e] .. e_off[e + 1] - 1, in row order; e_row [T * k] the row of each slot. */
struct dev_moe {
    int64_t T, n_expert, k, E;
    const float *logits; /* [T][n_expert] router logits */
    float *route_w;      /* [T][k] */
    int32_t *route_e, *slot, *e_off, *e_row;
    const float *xn;      /* [T][E] (gather) */
    float *gath;          /* [T * k][E] (gather) */
    const float *eout;    /* [T * k][E] expert outputs by slot (combine) */
    const float *sh;      /* [T][E] shared expert output (combine) */
    const float *sh_gate; /* [T] (combine) */
    float *out;           /* [T][E] (combine) */
};

/* Products by expert id: for every expert e with slots (e_off), y_i [slots][w_i.n_out] =
 * x [slots] * W_i[e]^T for the n_w (1 or 2) expert tensors (w[i] is expert 0's matrix, experts
 * expert_bytes[i] apart); x rows of expert e start at x + e_off[e] * x_ld (x_ld 0: every expert
 * reads x's row 0, a decode row); y_i rows at y[i] + e_off[e] * w[i].n_out. The n_extra extra
 * products ride along in the same dispatches. slot (NULL: none) tells a device that x's slots
 * are k copies of n_slots / k rows (dev_moe's gather): the slots slot[t * k .. t * k + k - 1]
 * hold the same row t, which a device may then prepare once for all of them. */
struct dev_mm_id {
    const int32_t *e_off;
    int64_t n_expert;
    int64_t n_slots; /* e_off[n_expert], known to the caller (T * k) */
    int n_w;
    struct dev_mat w[2];
    size_t expert_bytes[2];
    const float *x;
    int64_t x_ld;
    const int32_t *slot; /* [n_slots / k][k] or NULL */
    int64_t k;
    float *y[2];
    const struct dev_mm *extra;
    int n_extra;
};

/* What a device's matmul_id calls have read so far (cumulative since the device was created):
 * calls made, the experts with at least one slot summed over the calls, and the bytes of those
 * experts' matrices (each active expert's matrices counted once per call, read once whatever
 * its slot count). A MoE layer's step makes two calls over the same experts (gate/up, down), so
 * experts / calls is the mean number of distinct experts a layer's step reads. */
struct dev_moe_stats {
    int64_t calls, experts;
    double bytes;
};

/* The device buffer handle (opaque). */
struct dev_buf;
/* A recorded sequence of a device's ops (opaque; graph_begin .. graph_end). */
struct dev_graph;

typedef void (*dev_task_fn)(void *ctx, int ith, int nth);

struct dev;

struct dev_ops {
    int api_version;
    const char *name;
    /* Weights may stay in host memory (the CPU device); false: they are uploaded into device
     * memory at start-up (shard_upload) and every op sees device addresses only. */
    bool host_weights;
    void (*destroy)(struct dev *d);
    /* ---- memory (see the top) ---- */
    /* A buffer of bytes at an align-aligned device address *addr, reading as zeros (the cache
     * relies on it). Returns 0 or DD_ENOMEM (user-sized: refused, never aborted). */
    int (*buf_alloc)(struct dev *d, size_t bytes, size_t align, struct dev_buf **buf, void **addr);
    void (*buf_free)(struct dev *d, struct dev_buf *buf);
    void (*upload)(struct dev *d, void *dst, const void *src, size_t bytes);   /* host -> dev */
    void (*download)(struct dev *d, void *dst, const void *src, size_t bytes); /* dev -> host */
    void (*copy)(struct dev *d, void *dst, const void *src, size_t bytes);     /* dev -> dev */
    void (*memset)(struct dev *d, void *dst, int byte, size_t bytes);
    void (*sync)(struct dev *d); /* NULL: every call completes before it returns */
    /* Does the device run op on weights of type t (KQ_F32 for ops without weights)? */
    bool (*supports)(const struct dev *d, enum dev_op op, enum kq_type t);
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
    /* Reserve the attention workspace for sequences of n_ctx positions and grp query heads per
     * KV head. NULL: nothing to reserve. */
    int (*reserve_attn)(struct dev *d, int64_t n_ctx, int64_t grp);

    /* ---- forward ops (reference kernels in kernels/cpu: kq.h, kop.h) ---- */
    /* x [T][w.n_in] = rows b->token of w (kq_dequantize_row). */
    void (*embed)(struct dev *d, const struct dev_mat *w, const struct dev_batch *b, float *x);
    /* cs [T][n_rot] = the rotation table of each row's position (kop_rope_table). */
    void (*rope_table)(struct dev *d, const struct dev_batch *b, int64_t n_rot, float base,
                       float *cs);
    void (*rmsnorm)(struct dev *d, const struct dev_norm *a); /* kop_add, kop_rmsnorm */
    /* Per row: q (if any) and k heads rms-normed and rotated (partial NEOX rotary over n_rot
     * dims) in place, then k and v stored at the row's (seq, pos) in kv. */
    void (*attn_store)(struct dev *d, const struct dev_attn *a);
    /* Per (row, KV head): its query heads attend over rows 0..pos of its sequence's KV
     * (kop_attn_group), then the output gate when gated (kop_mul_sigmoid). */
    void (*attn)(struct dev *d, const struct dev_attn *a);
    /* beta = sigmoid(b), decay = exp(a_log * softplus(a + dt_bias)) per (row, value head). */
    void (*gdn_gates)(struct dev *d, const struct dev_gdn *g);
    /* Per run: the causal conv + SiLU of u from the state of group src (kop_conv1d_silu), the
     * L2 norm of the q and k heads, then the conv-state snapshot groups of its last
     * min(T_run, n_groups) windows (kop_conv_state_window). */
    void (*conv1d)(struct dev *d, const struct dev_gdn *g);
    /* Per (run, value head): the gated delta rule token by token from group src (kop_gdn_step),
     * the gated norm of each output row (kop_rmsnorm_gate), and the states of the run's last
     * min(T_run, n_groups) tokens kept as groups 0 .. (group 0 the newest). */
    void (*gdn)(struct dev *d, const struct dev_gdn *g);
    /* g [n][w] = silu(g) * u (kop_swiglu). */
    void (*swiglu)(struct dev *d, float *g, const float *u, int64_t n, int64_t w);
    /* out [T] = sigmoid(w . x_t) with the dot in double: the shared expert's gate. */
    void (*shexp_gate)(struct dev *d, const float *w, const float *x, int64_t T, int64_t E,
                       float *out);
    /* route_e, route_w (kop_moe_route), then slot, e_off, e_row. */
    void (*moe_route)(struct dev *d, const struct dev_moe *m);
    /* gath [slot] = xn [e_row[slot]] for the T * k slots. */
    void (*moe_gather)(struct dev *d, const struct dev_moe *m);
    /* out [t] = sh [t] * sh_gate [t] + sum_i route_w [t][i] * eout [slot[t][i]] (kop_axpy). */
    void (*moe_combine)(struct dev *d, const struct dev_moe *m);
    void (*matmul_id)(struct dev *d, const struct dev_mm_id *p);
    /* dst [i] = src [idx[i]] for i ascending (dst may be src when idx[i] >= i), rows of w
     * floats; scatter: dst [idx[i]] = src [i] for i descending (likewise in place). */
    void (*gather_rows)(struct dev *d, float *dst, const float *src, const int32_t *idx, int64_t n,
                        int64_t w);
    void (*scatter_rows)(struct dev *d, float *dst, const float *src, const int32_t *idx, int64_t n,
                         int64_t w);
    /* out [r] = the index of the largest of x [r][0..n) (the first on ties), r < rows; and,
     * when mass is not NULL, mass [r] = sum_i exp(x[r][i] - x[r][out[r]]) (>= 1: the softmax
     * probability of the largest is 1 / mass; f32, summed in any order). */
    void (*argmax)(struct dev *d, const float *x, int64_t rows, int64_t n, int32_t *out,
                   float *mass);
    /* The expert reads of matmul_id so far (struct dev_moe_stats). NULL: not counted. */
    void (*moe_stats)(const struct dev *d, struct dev_moe_stats *s);
    /* Free and total bytes of the device's memory (a GPU: from the driver). NULL: unknown. */
    int (*mem_info)(const struct dev *d, size_t *free_bytes, size_t *total_bytes);
    /* The CUDA ordinal of the GPU this device runs on; NULL: not a GPU (groups of such
     * devices reduce over the host communicator, GPUs over NCCL). */
    int (*cuda_ordinal)(const struct dev *d);
    /* buf [n] (device) summed over the ranks of c, ordered after the device's earlier work.
     * NULL: sync, then comm_allreduce on buf. */
    void (*allreduce)(struct dev *d, struct comm *c, int rank, float *buf, int64_t n);
    /* ---- graphs (optional: all four or none; NULL: ops always run as they are issued) ----
     * graph_begin: the ops issued from now on are recorded, not run, until graph_end, which
     * returns them as a graph, or NULL when one of them could not be recorded (it needed the
     * host, e.g. a sync or an allocation: the caller must then issue the ops again without
     * recording). Uploads, downloads and syncs are not issued while recording. graph_launch
     * runs a graph's ops again, ordered on the stream, with the addresses and sizes they were
     * recorded with: inputs change through the contents of device buffers only. */
    void (*graph_begin)(struct dev *d);
    struct dev_graph *(*graph_end)(struct dev *d);
    void (*graph_launch)(struct dev *d, struct dev_graph *g);
    void (*graph_destroy)(struct dev *d, struct dev_graph *g);
};

struct dev {
    const struct dev_ops *ops;
    void *ctx;
};

/* ---- the allocation plan: one table of parts per device, one allocation ------------------ */

#define DEV_PLAN_MAX 48

struct dev_plan_part {
    const char *name; /* static string */
    size_t bytes, align, offset;
};

/* Built by the user of a device (fwd_plan) from its sizes; drives the memory estimate, the
 * start-up refusal message and the device's single allocation (dev_plan_alloc). */
struct dev_plan {
    int n;
    size_t total, align; /* bytes from the base; the largest alignment */
    struct dev_plan_part part[DEV_PLAN_MAX];
};

/* Add a part of bytes (align a power of two); returns its index. */
static inline int dev_plan_add(struct dev_plan *p, const char *name, size_t bytes, size_t align)
{
    ASSERT(p->n < DEV_PLAN_MAX && align && !(align & (align - 1)));
    const size_t off = (p->total + align - 1) & ~(align - 1);
    p->part[p->n] =
        (struct dev_plan_part){.name = name, .bytes = bytes, .align = align, .offset = off};
    p->total = off + bytes;
    p->align = p->align > align ? p->align : align;
    return p->n++;
}

/* The bytes of the parts named name (0 if none). */
static inline size_t dev_plan_bytes(const struct dev_plan *p, const char *name)
{
    size_t b = 0;
    for (int i = 0; i < p->n; i++)
        b += strcmp(p->part[i].name, name) == 0 ? p->part[i].bytes : 0;
    return b;
}

/* ---- wrappers ------------------------------------------------------------------------------ */

/* The table's api_version must be this header's (called by every create). */
static inline int dev_check_api(const struct dev_ops *ops, char *err, size_t errlen)
{
    if (ops->api_version == DEV_API_VERSION)
        return 0;
    dd_errf(err, errlen, "device %s: interface version %d, this build needs %d", ops->name,
            ops->api_version, DEV_API_VERSION);
    return DD_EINVAL;
}

static inline int dev_buf_alloc(struct dev *d, size_t bytes, size_t align, struct dev_buf **buf,
                                void **addr)
{
    return d->ops->buf_alloc(d, bytes, align, buf, addr);
}

static inline void dev_buf_free(struct dev *d, struct dev_buf *buf)
{
    if (buf)
        d->ops->buf_free(d, buf);
}

static inline void dev_upload(struct dev *d, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        d->ops->upload(d, dst, src, bytes);
}

static inline void dev_download(struct dev *d, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        d->ops->download(d, dst, src, bytes);
}

static inline void dev_copy(struct dev *d, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        d->ops->copy(d, dst, src, bytes);
}

static inline void dev_memset(struct dev *d, void *dst, int byte, size_t bytes)
{
    if (bytes)
        d->ops->memset(d, dst, byte, bytes);
}

static inline void dev_sync(struct dev *d)
{
    if (d->ops->sync)
        d->ops->sync(d);
}

static inline bool dev_supports(const struct dev *d, enum dev_op op, enum kq_type t)
{
    return d->ops->supports ? d->ops->supports(d, op, t) : op == DEV_OP_MATMUL;
}

static inline int dev_reserve_attn(struct dev *d, int64_t n_ctx, int64_t grp)
{
    return d->ops->reserve_attn ? d->ops->reserve_attn(d, n_ctx, grp) : 0;
}

static inline void dev_embed(struct dev *d, const struct dev_mat *w, const struct dev_batch *b,
                             float *x)
{
    d->ops->embed(d, w, b, x);
}

static inline void dev_rope_table(struct dev *d, const struct dev_batch *b, int64_t n_rot,
                                  float base, float *cs)
{
    d->ops->rope_table(d, b, n_rot, base, cs);
}

static inline void dev_rmsnorm(struct dev *d, const struct dev_norm *a)
{
    d->ops->rmsnorm(d, a);
}

static inline void dev_attn_store(struct dev *d, const struct dev_attn *a)
{
    d->ops->attn_store(d, a);
}

static inline void dev_attn(struct dev *d, const struct dev_attn *a)
{
    d->ops->attn(d, a);
}

static inline void dev_gdn_gates(struct dev *d, const struct dev_gdn *g)
{
    d->ops->gdn_gates(d, g);
}

static inline void dev_conv1d(struct dev *d, const struct dev_gdn *g)
{
    d->ops->conv1d(d, g);
}

static inline void dev_gdn(struct dev *d, const struct dev_gdn *g)
{
    d->ops->gdn(d, g);
}

static inline void dev_swiglu(struct dev *d, float *g, const float *u, int64_t n, int64_t w)
{
    d->ops->swiglu(d, g, u, n, w);
}

static inline void dev_shexp_gate(struct dev *d, const float *w, const float *x, int64_t T,
                                  int64_t E, float *out)
{
    d->ops->shexp_gate(d, w, x, T, E, out);
}

static inline void dev_moe_route(struct dev *d, const struct dev_moe *m)
{
    d->ops->moe_route(d, m);
}

static inline void dev_moe_gather(struct dev *d, const struct dev_moe *m)
{
    d->ops->moe_gather(d, m);
}

static inline void dev_moe_combine(struct dev *d, const struct dev_moe *m)
{
    d->ops->moe_combine(d, m);
}

static inline void dev_matmul_id(struct dev *d, const struct dev_mm_id *p)
{
    d->ops->matmul_id(d, p);
}

static inline void dev_gather_rows(struct dev *d, float *dst, const float *src, const int32_t *idx,
                                   int64_t n, int64_t w)
{
    d->ops->gather_rows(d, dst, src, idx, n, w);
}

static inline void dev_scatter_rows(struct dev *d, float *dst, const float *src, const int32_t *idx,
                                    int64_t n, int64_t w)
{
    d->ops->scatter_rows(d, dst, src, idx, n, w);
}

static inline void dev_argmax(struct dev *d, const float *x, int64_t rows, int64_t n, int32_t *out,
                              float *mass)
{
    d->ops->argmax(d, x, rows, n, out, mass);
}

static inline void dev_allreduce(struct dev *d, struct comm *c, int rank, float *buf, int64_t n)
{
    if (d->ops->allreduce) {
        d->ops->allreduce(d, c, rank, buf, n);
        return;
    }
    dev_sync(d);
    comm_allreduce(c, rank, buf, n);
}

static inline bool dev_has_graphs(const struct dev *d)
{
    return d->ops->graph_begin != NULL;
}

static inline void dev_graph_begin(struct dev *d)
{
    d->ops->graph_begin(d);
}

static inline struct dev_graph *dev_graph_end(struct dev *d)
{
    return d->ops->graph_end(d);
}

static inline void dev_graph_launch(struct dev *d, struct dev_graph *g)
{
    d->ops->graph_launch(d, g);
}

static inline void dev_graph_destroy(struct dev *d, struct dev_graph *g)
{
    if (g)
        d->ops->graph_destroy(d, g);
}

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

static inline bool dev_host_weights(const struct dev *d)
{
    return d->ops->host_weights;
}

/* Free and total bytes of the device's memory: 0, or -1 when the device cannot tell. */
/* The device's expert-read counters into *s; false (and *s zeroed) where it keeps none. */
static inline bool dev_moe_stats(const struct dev *d, struct dev_moe_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!d->ops->moe_stats)
        return false;
    d->ops->moe_stats(d, s);
    return true;
}

static inline int dev_mem_info(const struct dev *d, size_t *free_bytes, size_t *total_bytes)
{
    return d->ops->mem_info ? d->ops->mem_info(d, free_bytes, total_bytes) : -1;
}

/* " (F MiB free of T MiB)" into buf for an allocation failure's message, or "" when the device
 * cannot tell. */
static inline void dev_mem_note(const struct dev *d, char *buf, size_t cap)
{
    size_t fr = 0, tot = 0;
    buf[0] = '\0';
    if (dev_mem_info(d, &fr, &tot) == 0)
        snprintf(buf, cap, " (%.1f MiB free of %.1f MiB)", fr / 1048576.0, tot / 1048576.0);
}

/* The device's GPU ordinal, or -1 for a device that is not a GPU. */
static inline int dev_cuda_ordinal(const struct dev *d)
{
    return d->ops->cuda_ordinal ? d->ops->cuda_ordinal(d) : -1;
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

/* ---- device groups from a spec (dev_spec.c; creation in backend_registry.c) ---------------- */

#define DEV_GROUP_MAX 64

/* "cpu:N" (N CPU devices over disjoint core sets), "cuda:I[,J...]" (those GPUs, distinct
 * ordinals) or "cuda:all" (every GPU the driver reports, resolved by dev_group_create). */
struct dev_spec {
    bool cuda;
    bool all; /* cuda:all */
    int n;    /* devices (cuda:all: 0 until created) */
    int gpu[DEV_GROUP_MAX];
};

/* Parse s into *out (dev_spec.c; syntax only, cuda specs parse in every build). Returns 0, or
 * DD_EINVAL with the reason in msg. */
int dev_spec_parse(const char *s, struct dev_spec *out, char *msg, size_t cap);

/* The devices of *sp into devs[0 .. *n_dev): CPU devices as dev_cpu_create_group (n_threads
 * per device, bind), or one CUDA device per listed GPU (a missing GPU is an error naming it).
 * Transferred: dev_destroy each. */
int dev_group_create(const struct dev_spec *sp, int n_threads, bool bind, struct dev **devs,
                     int *n_dev, char *err, size_t errlen);

/* The strict test device (dev_strict.c): inner (transferred) behind buffers the host cannot
 * touch outside the device's own calls (PROT_NONE between them), so a host dereference of an
 * activation, cache or weight address faults (its weights are uploaded: no host_weights).
 * Transferred: dev_destroy. */
int dev_strict_create(struct dev *inner, struct dev **out, char *err, size_t errlen);

#endif

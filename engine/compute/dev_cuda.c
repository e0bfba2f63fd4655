/*
 * dev_cuda — the CUDA device (contract in dev_cuda.h): buffers in GPU memory and the forward
 * ops through the launchers of kcuda.h, all ordered on one stream. supports() is true for
 * every forward op: matmul and products by expert id (every weight type kcuda computes),
 * embed, RoPE tables, rmsnorm, the q/k norm + RoPE + KV store and attention (the batch's int64
 * positions converted on the device to the int32 positions and lengths kcuda takes), SwiGLU,
 * GDN gates, conv1d, the gated delta rule, the shared-expert gate, MoE routing, gather and
 * combine, row gathers / scatters, argmax. matmul_id of up to IDS_MAX slots finds each slot's
 * expert on the device and runs kc_matvec_ids (no host round trip, so a decode step of a MoE
 * model syncs only for its logits); above that it downloads the expert offsets (one sync per
 * call) and runs one product per expert with rows; matmul_multi and reserve_attn
 * take the wrappers' fallbacks; allreduce goes on the stream (comm_allreduce_on).
 *
 * Weights: device addresses like everything else. The device has no host_weights, so the
 * group uploads each device's model (or shard) once at start-up into one buffer
 * (shard_upload); nothing here maps host views to copies (an earlier design cached uploads by
 * host address and had to fingerprint them against reuse of freed memory: issue 29).
 * Activations: device addresses (buf_alloc: cudaMalloc, zeroed on the stream); a product runs
 * the matrix-vector kernel for up to KC_MATVEC_MAX_T rows, dequantise + cuBLAS above, without
 * a host round trip.
 *
 * Several GPUs: the CUDA current device is per host thread, so every entry that allocates or
 * launches first selects this device's GPU (kc_set_device, a no-op when it already is).
 *
 * Graphs: graph_begin .. graph_end capture the stream (kc_graph). An op that would synchronise
 * or allocate while capturing (a GEMM scratch or position buffer that must grow, matmul_id's
 * downloaded expert offsets, an upload, download or sync, a host allreduce) is not issued and
 * spoils the capture: graph_end returns NULL and the caller issues the ops again uncaptured.
 *
 * Thread: the engine thread only. A CUDA failure aborts (kcuda.h, STYLE rule 18c).
 */
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"               // defines: comm_allreduce_on, comm_allreduce
#include "dev_cuda_impl.h"      // defines: dev_cuda__create
#include "device.h"             // defines: struct dev, struct dev_ops
#include "engine/util.h"        // defines: xcalloc, dd_errf, LOG_I
#include "kernels/cpu/kq.h"     // defines: kq_type_name
#include "kernels/cuda/kcuda.h" // defines: kc_stream, kc_matmul
#include "topo.h"               // defines: topo_create, topo_coreset_init_gpu, topo_bind_set

struct cuda_dev {
    struct dev base;
    kc_stream *s;
    int gpu;
    cpu_set_t near; /* PUs near the GPU (has_near): where its host thread runs */
    bool has_near;
    int32_t *ipos; /* device [2][ipos_n]: a batch's int32 positions and n_kv (attention) */
    int64_t ipos_n;
    int32_t *e_off; /* host [e_off_n]: matmul_id's expert offsets, downloaded */
    int64_t e_off_n;
    int32_t *ids;   /* device [IDS_MAX]: the expert of each slot (matmul_id's decode path) */
    size_t scratch; /* bytes of GEMM scratch the stream holds (kc_stream_reserve) */
    bool capturing; /* between graph_begin and graph_end */
    bool spoiled;   /* an op of this capture needed the host: graph_end gives NULL */
};

/* Scratch the stream starts with. */
#define SCRATCH0 ((size_t)64 << 20)

/* matmul_id's slots up to which every slot gets a matrix-vector product by expert id (decode
 * and small verification batches); above, one GEMM per expert after one sync. */
#define IDS_MAX 64

static struct cuda_dev *cuda_of(struct dev *d)
{
    return (struct cuda_dev *)d;
}

/* While capturing, an op that would synchronise or allocate is not issued: the capture is
 * spoiled (graph_end returns NULL and the caller issues the step's ops again, uncaptured). */
static bool may_sync(struct cuda_dev *cd)
{
    if (cd->capturing)
        cd->spoiled = true;
    return !cd->capturing;
}

static struct kc_mat kmat(const struct dev_mat *w)
{
    return (struct kc_mat){w->data, w->type, w->n_in, w->n_out, w->row_bytes};
}

static void cuda_matmul(struct dev *d, const struct dev_mat *w, const float *x, int64_t T, float *y)
{
    struct cuda_dev *cd = cuda_of(d);
    if (T <= 0 || w->n_out <= 0)
        return;
    if (w->n_in <= 0) { /* an empty slice of a shard: the product is 0 */
        kc_memset(cd->s, y, 0, (size_t)(T * w->n_out) * sizeof(float));
        return;
    }
    struct kc_mat m = kmat(w);
    const size_t need = T > KC_MATVEC_MAX_T ? kc_matmul_scratch_bytes(&m, T) : 0;
    if (need > cd->scratch) { /* growing it synchronises the stream */
        if (!may_sync(cd))
            return;
        if (kc_stream_reserve(cd->s, need)) {
            LOG_E("cuda device %d: cannot allocate GEMM scratch", cd->gpu);
            abort();
        }
        cd->scratch = need;
    }
    kc_matmul(cd->s, &m, x, w->n_in, T, y, w->n_out);
}

/* ---- buffers: cudaMalloc'd, zeroed on the stream; over-allocated for alignments above 256 ---- */

struct cuda_buf {
    void *raw;
};

static int cuda_buf_alloc(struct dev *d, size_t bytes, size_t align, struct dev_buf **buf,
                          void **addr)
{
    struct cuda_dev *cd = cuda_of(d);
    const size_t extra = align > 256 ? align : 0;
    struct cuda_buf *b = xcalloc(1, sizeof *b);
    kc_set_device(cd->gpu);
    b->raw = kc_malloc(bytes + extra ? bytes + extra : 1);
    if (!b->raw) {
        free(b);
        return DD_ENOMEM;
    }
    kc_memset(cd->s, b->raw, 0, bytes + extra);
    uintptr_t a = (uintptr_t)b->raw;
    *addr = (void *)(extra ? (a + align - 1) & ~(uintptr_t)(align - 1) : a);
    *buf = (struct dev_buf *)b;
    return 0;
}

static void cuda_buf_free(struct dev *d, struct dev_buf *buf)
{
    struct cuda_buf *b = (struct cuda_buf *)buf;
    kc_set_device(cuda_of(d)->gpu);
    kc_stream_sync(cuda_of(d)->s);
    kc_free(b->raw);
    free(b);
}

static void cuda_upload(struct dev *d, void *dst, const void *src, size_t bytes)
{
    if (may_sync(cuda_of(d))) /* pageable host memory: not recorded into a graph */
        kc_upload(cuda_of(d)->s, dst, src, bytes);
}

static void cuda_download(struct dev *d, void *dst, const void *src, size_t bytes)
{
    if (may_sync(cuda_of(d)))
        kc_download(cuda_of(d)->s, dst, src, bytes);
}

static void cuda_copy(struct dev *d, void *dst, const void *src, size_t bytes)
{
    kc_copy(cuda_of(d)->s, dst, src, bytes);
}

static void cuda_memset(struct dev *d, void *dst, int byte, size_t bytes)
{
    kc_memset(cuda_of(d)->s, dst, byte, bytes);
}

static void cuda_sync(struct dev *d)
{
    if (may_sync(cuda_of(d)))
        kc_stream_sync(cuda_of(d)->s);
}

/* ---- graphs: kc_graph capture of the stream ---- */

static void cuda_graph_begin(struct dev *d)
{
    struct cuda_dev *cd = cuda_of(d);
    ASSERT(!cd->capturing);
    kc_graph_begin(cd->s);
    cd->capturing = true;
    cd->spoiled = false;
}

static struct dev_graph *cuda_graph_end(struct dev *d)
{
    struct cuda_dev *cd = cuda_of(d);
    ASSERT(cd->capturing);
    kc_graph *g = kc_graph_end(cd->s);
    cd->capturing = false;
    if (!cd->spoiled)
        return (struct dev_graph *)g;
    kc_graph_destroy(g);
    return NULL;
}

static void cuda_graph_launch(struct dev *d, struct dev_graph *g)
{
    kc_graph_launch(cuda_of(d)->s, (kc_graph *)g);
}

static void cuda_graph_destroy(struct dev *d, struct dev_graph *g)
{
    (void)d;
    kc_graph_destroy((kc_graph *)g);
}

/* ---- the forward ops ---- */

static bool cuda_supports(const struct dev *d, enum dev_op op, enum kq_type t)
{
    (void)d;
    switch (op) {
    case DEV_OP_MATMUL:
    case DEV_OP_EMBED:
        return t == KQ_F32 || t == KQ_F16 || t == KQ_BF16 || t == KQ_Q8_0 || t == KQ_Q4_0 ||
               t == KQ_Q4_K || t == KQ_Q5_K || t == KQ_Q6_K;
    case DEV_OP_MATMUL_ID:
        return cuda_supports(d, DEV_OP_MATMUL, t);
    case DEV_OP_ROPE_TABLE:
    case DEV_OP_ATTN_STORE:
    case DEV_OP_ATTN:
    case DEV_OP_SHEXP_GATE:
    case DEV_OP_MOE_GATHER:
    case DEV_OP_ROWS:
    case DEV_OP_RMSNORM:
    case DEV_OP_SWIGLU:
    case DEV_OP_GDN_GATES:
    case DEV_OP_CONV1D:
    case DEV_OP_GDN:
    case DEV_OP_MOE_ROUTE:
    case DEV_OP_MOE_COMBINE:
    case DEV_OP_ARGMAX:
        return t == KQ_F32;
    default:
        return false;
    }
}

static void cuda_embed(struct dev *d, const struct dev_mat *w, const struct dev_batch *b, float *x)
{
    struct cuda_dev *cd = cuda_of(d);
    struct kc_mat m = kmat(w);
    kc_embed(cd->s, &m, b->token, b->T, x);
}

static void cuda_rope_table(struct dev *d, const struct dev_batch *b, int64_t n_rot, float base,
                            float *cs)
{
    kc_rope_table(cuda_of(d)->s, b->pos, b->T, n_rot, base, cs);
}

/* The batch's positions as int32 and its visible lengths pos + 1 (kc_kv_store, kc_attention
 * take them), in the device's scratch, grown as batches grow. */
static const int32_t *batch_pos32(struct cuda_dev *cd, const struct dev_batch *b)
{
    if (b->T > cd->ipos_n && may_sync(cd)) {
        kc_stream_sync(cd->s);
        kc_free(cd->ipos);
        cd->ipos_n = b->T > 64 ? b->T : 64;
        cd->ipos = kc_malloc((size_t)(2 * cd->ipos_n) * sizeof(int32_t));
        if (!cd->ipos) {
            LOG_E("cuda device %d: out of GPU memory for %lld positions", cd->gpu, (long long)b->T);
            abort();
        }
    }
    if (b->T <= cd->ipos_n)
        kc_pos_n_kv(cd->s, b->pos, b->T, cd->ipos, cd->ipos + cd->ipos_n);
    return cd->ipos;
}

/* The cache layout (seq_stride = n_ctx * kv_dim) as kcuda addresses it. */
static struct kc_kv kc_kv_of(const struct dev_kv *kv)
{
    ASSERT(kv->kv_dim > 0 && kv->seq_stride % kv->kv_dim == 0);
    return (struct kc_kv){kv->k, kv->v, kv->seq_stride / kv->kv_dim, kv->kv_dim};
}

/* q (if any) and k heads: rmsnorm, then RoPE from the tables; then K/V stored at (seq, pos). */
static void cuda_attn_store(struct dev *d, const struct dev_attn *a)
{
    struct cuda_dev *cd = cuda_of(d);
    const int64_t T = a->b->T, D = a->head_dim, kvd = a->n_head_kv * D;
    const int64_t qstride = a->gated ? 2 * D : D;
    if (T <= 0)
        return;
    if (a->q) {
        kc_rmsnorm(cd->s, a->q, a->q_norm, a->q, T, a->n_head, a->q_ld, qstride, D, a->eps);
        kc_rope_neox_cs(cd->s, a->q, a->cs, T, a->n_head, a->q_ld, qstride, a->n_rot);
    }
    kc_rmsnorm(cd->s, a->k, a->k_norm, a->k, T, a->n_head_kv, kvd, D, D, a->eps);
    kc_rope_neox_cs(cd->s, a->k, a->cs, T, a->n_head_kv, kvd, D, a->n_rot);
    const struct kc_kv kv = kc_kv_of(&a->kv);
    ASSERT(kv.kv_dim == kvd);
    const int32_t *pos32 = batch_pos32(cd, a->b);
    if (T <= cd->ipos_n)
        kc_kv_store(cd->s, &kv, a->k, a->v, kvd, a->b->seq, pos32, T);
}

/* Every (row, query head) over rows 0..pos of its sequence, then the gate (kc_attention). */
static void cuda_attn(struct dev *d, const struct dev_attn *a)
{
    struct cuda_dev *cd = cuda_of(d);
    const int64_t T = a->b->T, D = a->head_dim, qstride = a->gated ? 2 * D : D;
    if (T <= 0)
        return;
    const struct kc_kv kv = kc_kv_of(&a->kv);
    ASSERT(kv.kv_dim == a->n_head_kv * D);
    batch_pos32(cd, a->b);
    if (a->b->T > cd->ipos_n) /* a spoiled capture */
        return;
    kc_attention(cd->s, &kv, a->q, a->q_ld, qstride, a->gated ? a->q + D : NULL, a->b->seq,
                 cd->ipos + cd->ipos_n, T, a->n_head, a->n_head_kv, D, a->scale, a->out,
                 a->n_head * D);
}

static void cuda_shexp_gate(struct dev *d, const float *w, const float *x, int64_t T, int64_t E,
                            float *out)
{
    kc_shexp_gate(cuda_of(d)->s, w, x, T, E, out);
}

static void cuda_moe_gather(struct dev *d, const struct dev_moe *m)
{
    kc_gather_rows(cuda_of(d)->s, m->xn, m->e_row, m->T * m->k, m->E, m->gath);
}

static void cuda_gather_rows(struct dev *d, float *dst, const float *src, const int32_t *idx,
                             int64_t n, int64_t w)
{
    if (dst == src) /* in place: row by row, in the reference's order */
        kc_move_rows(cuda_of(d)->s, dst, src, idx, n, w, 0);
    else
        kc_gather_rows(cuda_of(d)->s, src, idx, n, w, dst);
}

static void cuda_scatter_rows(struct dev *d, float *dst, const float *src, const int32_t *idx,
                              int64_t n, int64_t w)
{
    kc_move_rows(cuda_of(d)->s, dst, src, idx, n, w, 1);
}

/* The expert products: e_off is downloaded (one sync per call: the host picks the experts with
 * rows and their row counts), then one cuda_matmul per (expert, tensor) on the expert's slice
 * of the weights (each slice its own uploaded view), then the extra products. */
static void cuda_matmul_id(struct dev *d, const struct dev_mm_id *p)
{
    struct cuda_dev *cd = cuda_of(d);
    if (p->n_slots <= IDS_MAX) { /* decode: each slot's expert found on the device, no sync */
        kc_slot_experts(cd->s, p->e_off, p->n_expert, p->n_slots, cd->ids);
        for (int i = 0; i < p->n_w; i++) {
            const struct kc_mat m = kmat(&p->w[i]);
            if (p->w[i].n_in <= 0) { /* an empty slice of a shard: the products are 0 */
                kc_memset(cd->s, p->y[i], 0, (size_t)(p->n_slots * p->w[i].n_out) * sizeof(float));
                continue;
            }
            kc_matvec_ids(cd->s, &m, p->expert_bytes[i], cd->ids, p->n_slots, p->x, p->x_ld, 1,
                          p->y[i], p->w[i].n_out);
        }
        for (int i = 0; i < p->n_extra; i++)
            cuda_matmul(d, &p->extra[i].w, p->extra[i].x, p->extra[i].T, p->extra[i].y);
        return;
    }
    if (!may_sync(cd)) /* the expert offsets come to the host */
        return;
    if (p->n_expert + 1 > cd->e_off_n) {
        free(cd->e_off);
        cd->e_off_n = p->n_expert + 1;
        cd->e_off = xcalloc((size_t)cd->e_off_n, sizeof *cd->e_off);
    }
    kc_download(cd->s, cd->e_off, p->e_off, (size_t)(p->n_expert + 1) * sizeof *cd->e_off);
    kc_stream_sync(cd->s);
    for (int64_t e = 0; e < p->n_expert; e++) {
        const int64_t s0 = cd->e_off[e], ns = cd->e_off[e + 1] - s0;
        for (int i = 0; ns > 0 && i < p->n_w; i++) {
            struct dev_mat w = p->w[i];
            w.data = (const char *)w.data + (size_t)e * p->expert_bytes[i];
            cuda_matmul(d, &w, p->x + s0 * p->x_ld, ns, p->y[i] + s0 * w.n_out);
        }
    }
    for (int i = 0; i < p->n_extra; i++)
        cuda_matmul(d, &p->extra[i].w, p->extra[i].x, p->extra[i].T, p->extra[i].y);
}

static void cuda_rmsnorm(struct dev *d, const struct dev_norm *a)
{
    struct cuda_dev *cd = cuda_of(d);
    for (int64_t t = 0; a->add && t < a->T; t++) /* rows of n at stride ld_x */
        kc_add(cd->s, a->x + t * a->ld_x, a->add + t * a->ld_x, a->n);
    if (a->ld_x == a->ld_y) {
        kc_rmsnorm(cd->s, a->x, a->w, a->y, a->T, 1, a->ld_x, 0, a->n, a->eps);
        return;
    }
    for (int64_t t = 0; t < a->T; t++) /* different strides (the MTP concat): row by row */
        kc_rmsnorm(cd->s, a->x + t * a->ld_x, a->w, a->y + t * a->ld_y, 1, 1, 0, 0, a->n, a->eps);
}

static void cuda_swiglu(struct dev *d, float *g, const float *u, int64_t n, int64_t w)
{
    kc_swiglu(cuda_of(d)->s, g, u, n * w);
}

static void cuda_gdn_gates(struct dev *d, const struct dev_gdn *g)
{
    kc_gdn_gates(cuda_of(d)->s, g->bl, g->al, g->ba, g->a_log, g->dt_bias, g->b->T, g->Hv, g->Hk,
                 g->beta, g->decay);
}

/* The cache's GDN state (struct dev_gdn_state) as kcuda addresses it; struct dev_run and
 * struct kc_run have the same layout (t0, t1, seq, src). */
static struct kc_gdn_state kc_state(const struct dev_gdn_state *st)
{
    return (struct kc_gdn_state){.conv = st->base,
                                 .ssm = st->base + st->conv_elems,
                                 .group_stride = st->group_stride,
                                 .seq_stride = st->seq_stride,
                                 .n_groups = st->n_groups};
}

_Static_assert(sizeof(struct dev_run) == sizeof(struct kc_run), "dev_run is kc_run");

static void cuda_conv1d(struct dev *d, const struct dev_gdn *g)
{
    struct cuda_dev *cd = cuda_of(d);
    struct kc_gdn_state st = kc_state(&g->st);
    kc_conv1d_silu(cd->s, g->u, g->conv_w, g->C, g->conv_k, (const struct kc_run *)g->b->runs,
                   g->b->n_runs, &st, g->y);
    kc_l2norm(cd->s, g->y, g->b->T, 2 * g->Hk, g->C, g->S, g->S, g->eps); /* the q and k heads */
}

static void cuda_gdn(struct dev *d, const struct dev_gdn *g)
{
    struct cuda_dev *cd = cuda_of(d);
    struct kc_gdn_state st = kc_state(&g->st);
    kc_gdn(cd->s, g->y, g->C, g->Hk, g->Hv, g->S, g->kmap_mod, g->beta, g->decay,
           (const struct kc_run *)g->b->runs, g->b->n_runs, &st, g->o);
    kc_rmsnorm_gate(cd->s, g->o, g->norm_w, g->z, g->b->T * g->Hv, g->S, g->eps);
}

static void cuda_moe_route(struct dev *d, const struct dev_moe *m)
{
    struct cuda_dev *cd = cuda_of(d);
    kc_moe_route(cd->s, m->logits, m->T, m->n_expert, m->k, m->route_e, m->route_w);
    kc_moe_dispatch(cd->s, m->route_e, m->T, m->k, m->n_expert, m->e_off, m->slot, m->e_row);
}

static void cuda_moe_combine(struct dev *d, const struct dev_moe *m)
{
    kc_moe_combine(cuda_of(d)->s, m->sh, m->sh_gate, m->route_w, m->slot, m->eout, m->T, m->k, m->E,
                   m->out);
}

static void cuda_argmax(struct dev *d, const float *x, int64_t rows, int64_t n, int32_t *out,
                        float *mass)
{
    kc_argmax(cuda_of(d)->s, x, rows, n, out, mass);
}

static int cuda_n_threads(const struct dev *d)
{
    return 1;
}

static void cuda_destroy(struct dev *d)
{
    struct cuda_dev *cd = cuda_of(d);
    kc_set_device(cd->gpu);
    kc_stream_sync(cd->s);
    kc_free(cd->ipos);
    kc_free(cd->ids);
    kc_stream_destroy(cd->s);
    free(cd->e_off);
    free(cd);
}

/* The PUs near the GPU: hwloc's PCI locality of the device CUDA reports (its NUMA node on a
 * multi-socket host), for cuda_bind_host. False when the locality is unknown. */
static bool find_near(int gpu, cpu_set_t *near, int *numa)
{
    char busid[32], err[256];
    kc_device_busid(gpu, busid, sizeof busid);
    topo_t *t = busid[0] ? topo_create(err, sizeof err) : NULL;
    if (!t)
        return false;
    const int i = topo_gpu_find(t, busid);
    topo_coreset cs;
    bool ok = i >= 0 && topo_coreset_init_gpu(t, i, 0, &cs) == 0;
    if (ok) {
        CPU_ZERO(near);
        for (int u = 0; u < cs.n; u++)
            if (cs.pu[u] >= 0 && cs.pu[u] < CPU_SETSIZE)
                CPU_SET(cs.pu[u], near);
        *numa = topo_gpu_get(t, i)->numa;
        ok = CPU_COUNT(near) > 0;
        topo_coreset_deinit(&cs);
    }
    topo_destroy(t);
    return ok;
}

/* NCCL on this device's stream (no host wait); another communicator: sync, then its call. */
static void cuda_allreduce(struct dev *d, struct comm *c, int rank, float *buf, int64_t n)
{
    struct cuda_dev *cd = cuda_of(d);
    if (comm_allreduce_on(c, rank, buf, n, kc_stream_handle(cd->s)) == 0 || !may_sync(cd))
        return;
    kc_stream_sync(cd->s);
    comm_allreduce(c, rank, buf, n);
}

static int cuda_mem_info(const struct dev *d, size_t *free_bytes, size_t *total_bytes)
{
    return kc_device_mem(((const struct cuda_dev *)d)->gpu, free_bytes, total_bytes);
}

static int cuda_ordinal(const struct dev *d)
{
    return ((const struct cuda_dev *)d)->gpu;
}

/* The calling thread drives this GPU from now on; binding is best effort: a container that forbids
 * binding leaves the thread where it was. */
static void cuda_bind_host(struct dev *d)
{
    struct cuda_dev *cd = cuda_of(d);
    kc_set_device(cd->gpu);
    if (cd->has_near && sched_setaffinity(0, sizeof cd->near, &cd->near) != 0)
        LOG_W("cuda device %d: cannot bind its host thread (runs unbound)", cd->gpu);
}

static const struct dev_ops cuda_ops = {
    .api_version = DEV_API_VERSION,
    .name = "cuda",
    .host_weights = false,
    .cuda_ordinal = cuda_ordinal,
    .mem_info = cuda_mem_info,
    .allreduce = cuda_allreduce,
    .destroy = cuda_destroy,
    .buf_alloc = cuda_buf_alloc,
    .buf_free = cuda_buf_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .memset = cuda_memset,
    .sync = cuda_sync,
    .supports = cuda_supports,
    .matmul = cuda_matmul,
    .n_threads = cuda_n_threads,
    .bind_host = cuda_bind_host,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .swiglu = cuda_swiglu,
    .gdn_gates = cuda_gdn_gates,
    .conv1d = cuda_conv1d,
    .gdn = cuda_gdn,
    .moe_route = cuda_moe_route,
    .moe_combine = cuda_moe_combine,
    .argmax = cuda_argmax,
    .rope_table = cuda_rope_table,
    .attn_store = cuda_attn_store,
    .attn = cuda_attn,
    .shexp_gate = cuda_shexp_gate,
    .moe_gather = cuda_moe_gather,
    .matmul_id = cuda_matmul_id,
    .gather_rows = cuda_gather_rows,
    .scatter_rows = cuda_scatter_rows,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
};

int dev_cuda__create(int gpu, struct dev **out, char *err, size_t errlen)
{
    int rc = dev_check_api(&cuda_ops, err, errlen);
    if (rc)
        return rc;
    struct cuda_dev *cd = xcalloc(1, sizeof *cd);
    if (kc_stream_create(gpu, SCRATCH0, &cd->s, err, errlen)) {
        free(cd);
        return DD_EUNSUPPORTED;
    }
    cd->base.ops = &cuda_ops;
    cd->base.ctx = cd;
    cd->gpu = gpu;
    cd->scratch = SCRATCH0;
    cd->ids = kc_malloc(IDS_MAX * sizeof *cd->ids); /* kc_stream_create made gpu current */
    if (!cd->ids) {
        dd_errf(err, errlen, "cuda device %d: out of GPU memory at creation", gpu);
        kc_stream_destroy(cd->s);
        free(cd);
        return DD_ENOMEM;
    }
    int numa = -1;
    cd->has_near = find_near(gpu, &cd->near, &numa);
    if (cd->has_near)
        LOG_I("cuda device %d: its host thread binds to %d PUs near it (NUMA node %d)", gpu,
              CPU_COUNT(&cd->near), numa);
    char desc[256];
    kc_device_describe(gpu, desc, sizeof desc);
    LOG_I("cuda device %d: %s", gpu, desc);
    *out = &cd->base;
    return 0;
}

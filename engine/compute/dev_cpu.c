/*
 * dev_cpu — the CPU device: a persistent thread pool (tpool) bound to a core set, running the
 * kernels of kernels/cpu. A matmul, or a matmul_multi of several products, is one chunked
 * dispatch (tpool_run_chunks) with two phases: quantise the distinct activation inputs into
 * their weight types' activation format (chunks of rows), then compute output rows (the rows of
 * all products cut into chunks of equal cost, each over all tokens, so each weight row is
 * streamed from memory once per call). Threads claim chunks as they go, so a thread that shares
 * its core with other work does less of the step instead of holding it up; chunk bounds are
 * multiples of ROW_ALIGN, so every output is computed the same way whoever runs it.
 *
 * The forward ops are in dev_cpu_ops.c. Buffers are host memory the device owns (zeroed,
 * aligned); upload / download / copy / memset are memcpy / memset, and every call completes
 * before it returns (no sync needed).
 *
 * Memory: the activation and attention scratch are sized by reserve() / reserve_multi() /
 * reserve_attn() at start-up; no op allocates.
 * Thread: driven by one thread (the engine thread), which is thread 0 of every dispatch.
 */
#include <stdlib.h>
#include <string.h>

#include "dev_cpu_impl.h"   // defines: struct cpu_dev, dev_cpu__*
#include "device.h"         // defines: struct dev, dev_cpu_create
#include "engine/util.h"    // defines: xcalloc, xaligned_alloc, dd_errf
#include "kernels/cpu/kq.h" // defines: kq_matmul_tagged, kq_act_tags, kq_quantize_act
#include "topo.h"           // defines: topo_split, topo_bind_unit
#include "tpool.h"          // defines: tpool_run, tpool_run_chunks, tpool_barrier

/*
 * One matmul_multi in flight, planned by the calling thread before the dispatch: the distinct
 * inputs ("sources", struct dev_cpu__src, each quantised once; the first n_pre came prepared)
 * and, per product, its source and the cost of one of its output rows, whose prefix sums split
 * the rows of all products evenly across threads.
 */
struct mm_plan {
    struct cpu_dev *cd;
    const struct dev_mm *mm;
    int n, n_src, n_pre;
    int src_of[DEV_MM_MAX];
    struct dev_cpu__src src[DEV_MM_MAX];
    double cost[DEV_MM_MAX];        /* per output row: weight bytes x tokens */
    double cost_at[DEV_MM_MAX + 1]; /* prefix sums of n_out x cost */
    int64_t q_rows, n_q;            /* phase one: chunks of q_rows source rows, n_q of them */
    int64_t n_out, n_tail;          /* phase two: chunks, of which the last n_tail small */
    uint64_t tag0; /* source s's activation tag (kq_matmul_tagged): tag0 + s, this dispatch's */
};

static struct cpu_dev *cpu_of(struct dev *d)
{
    return dev_cpu__of(d);
}

/* Chunks per thread of each phase (dynamic distribution: a thread slowed by other load on its
 * core takes fewer; the tail a late chunk leaves is about 1 / MM_CHUNKS of a thread's share),
 * and the fewest output rows worth a chunk (each chunk calls the kernels once per product, and
 * the plain Q8_0 / Q4_0 kernels prepare the activations on every call; the stored layouts'
 * kernels pack a source's tokens once per thread and dispatch, by its tag). */
#define MM_CHUNKS 8
#define MM_MIN_CHUNK_ROWS 64
/* Fewer activation elements than this are quantised by the calling thread before the dispatch
 * (a few microseconds: a worker descheduled while holding that phase would stall the step). */
#define MM_MIN_Q_ELEMS (1 << 16)

/* Row granularity of the output split: keeps every thread's rows on whole cache lines of y,
 * and every thread's first row a multiple of 4, so the kernels' row tiles (and so the
 * arithmetic of every output) are the same for any thread count. */
#define ROW_ALIGN 16

/* The last chunks of a dispatch are TAIL_PART of the others' cost: a thread that runs out of
 * chunks then waits for at most one small chunk of the other threads (with chunks of equal cost,
 * about a third of one on average: some 3% of a decode matmul). TAIL_MIN_CHUNKS: the fewest
 * chunks per thread for which the dispatch has a tail. */
#define TAIL_PART 4
#define TAIL_MIN_CHUNKS 4

/* The cost fraction before output chunk k (0 <= k <= n_out): the n_out - n_tail regular chunks
 * weigh TAIL_PART each, the tail chunks 1. */
static double chunk_start(const struct mm_plan *p, int64_t k)
{
    const int64_t n_reg = p->n_out - p->n_tail;
    const int64_t units = k <= n_reg ? TAIL_PART * k : TAIL_PART * n_reg + (k - n_reg);
    return (double)units / (double)(TAIL_PART * n_reg + p->n_tail);
}

/* Where cost point c falls: product *j, row *r (rounded to ROW_ALIGN); j == n at the end. */
static void cost_point(const struct mm_plan *p, double c, int *j, int64_t *r)
{
    for (int i = 0; i < p->n; i++) {
        if (c >= p->cost_at[i + 1])
            continue;
        const int64_t n_out = p->mm[i].w.n_out;
        int64_t row = (int64_t)((c - p->cost_at[i]) / p->cost[i] + 0.5);
        row = (row + ROW_ALIGN / 2) / ROW_ALIGN * ROW_ALIGN;
        *j = i;
        *r = row < n_out ? row : n_out;
        return;
    }
    *j = p->n;
    *r = 0;
}

/* Chunk c of a matmul_multi dispatch. Phase one: the sources' rows [c * q_rows, +q_rows)
 * (counted across the sources in order), quantised. Phase two: output chunk k = c - n_q, the
 * products' rows between cost points total * chunk_start(k) and total * chunk_start(k + 1),
 * each weight row streamed once per call. */
static void mm_chunk(void *ctx, int64_t c, int ith)
{
    (void)ith;
    const struct mm_plan *p = ctx;
    if (c < p->n_q) {
        const int64_t lo = c * p->q_rows, hi = lo + p->q_rows;
        int64_t base = 0;
        for (int s = p->n_pre; s < p->n_src; base += p->src[s].T, s++) {
            const struct dev_cpu__src *q = &p->src[s];
            const int64_t t0 = lo > base ? lo - base : 0, t1 = hi - base < q->T ? hi - base : q->T;
            for (int64_t t = t0; t < t1; t++)
                kq_quantize_act(q->w, q->x + t * q->n_in, q->act + t * q->act_stride, q->n_in);
        }
        return;
    }
    const int64_t k = c - p->n_q;
    int j0, j1;
    int64_t r0, r1;
    const double total = p->cost_at[p->n];
    cost_point(p, total * chunk_start(p, k), &j0, &r0);
    if (k + 1 == p->n_out)
        j1 = p->n, r1 = 0;
    else
        cost_point(p, total * chunk_start(p, k + 1), &j1, &r1);
    for (int j = j0; j <= j1 && j < p->n; j++) {
        const struct dev_mm *m = &p->mm[j];
        const struct dev_cpu__src *q = &p->src[p->src_of[j]];
        const int64_t a = j == j0 ? r0 : 0, b = j == j1 ? r1 : m->w.n_out;
        if (a < b)
            kq_matmul_tagged(m->w.type, m->w.n_in, m->w.data, m->w.row_bytes, a, b, q->act,
                             q->act_stride, m->T, m->y, m->w.n_out,
                             p->tag0 + (uint64_t)p->src_of[j]);
    }
}

/* Sources: products with the same x, T, n_in and activation format share one; a new one gets
 * its rows carved from the scratch at *off (64-byte aligned). */
static int plan_source(struct mm_plan *p, const struct dev_mm *m, size_t *off)
{
    const enum kq_type at = kq_act_type(m->w.type);
    for (int s = 0; s < p->n_src; s++) {
        const struct dev_cpu__src *q = &p->src[s];
        if (q->x == m->x && q->T == m->T && q->n_in == m->w.n_in && kq_act_type(q->w) == at)
            return s;
    }
    struct dev_cpu__src *q = &p->src[p->n_src];
    *q = (struct dev_cpu__src){.x = m->x,
                               .T = m->T,
                               .n_in = m->w.n_in,
                               .w = m->w.type,
                               .act_stride = kq_act_row_bytes(m->w.type, m->w.n_in)};
    q->act = (char *)p->cd->act + *off;
    *off += dev_cpu__src_bytes(m->T, q->act_stride);
    return p->n_src++;
}

void dev_cpu__matmul_multi(struct dev *d, const struct dev_mm *mm, int n)
{
    dev_cpu__matmul_multi_pre(d, mm, n, NULL, 0, 0);
}

void dev_cpu__matmul_multi_pre(struct dev *d, const struct dev_mm *mm, int n,
                               const struct dev_cpu__src *pre, int n_pre, size_t pre_bytes)
{
    struct cpu_dev *cd = cpu_of(d);
    ASSERT(n >= 0 && n_pre >= 0 && n + n_pre <= DEV_MM_MAX);
    struct mm_plan p = {.cd = cd, .mm = mm, .n = n, .n_src = n_pre, .n_pre = n_pre};
    for (int s = 0; s < n_pre; s++)
        p.src[s] = pre[s];
    size_t off = pre_bytes;
    for (int j = 0; j < n; j++) {
        p.src_of[j] = plan_source(&p, &mm[j], &off);
        /* + 64: a row of an empty slice (n_in == 0) still costs its store of 0 */
        p.cost[j] = (double)(mm[j].w.row_bytes + 64) * (double)(mm[j].T > 0 ? mm[j].T : 1);
        p.cost_at[j + 1] = p.cost_at[j] + p.cost[j] * (double)mm[j].w.n_out;
    }
    ASSERT(off <= cd->act_cap); /* reserve() / reserve_multi() sized it for the worst case */
    if (n == 0)
        return;
    /* fresh tags: a source's rows are written (phase one, or before the dispatch) before any
     * product reads them and not changed until the dispatch ends, so every chunk of a source
     * may reuse the activation its thread packed for an earlier chunk of it */
    p.tag0 = kq_act_tags(p.n_src);
    int64_t rows = 0, out_rows = 0, in_elems = 0;
    for (int s = n_pre; s < p.n_src; s++)
        rows += p.src[s].T, in_elems += p.src[s].T * p.src[s].n_in;
    for (int j = 0; j < n; j++)
        out_rows += mm[j].w.n_out;
    const int64_t nth = cd->n_threads;
    p.q_rows = rows > 0 ? (rows + MM_CHUNKS * nth - 1) / (MM_CHUNKS * nth) : 1;
    p.n_q = (rows + p.q_rows - 1) / p.q_rows;
    if (in_elems < MM_MIN_Q_ELEMS) { /* decode-sized: quantised here, before the dispatch */
        for (int64_t c = 0; c < p.n_q; c++)
            mm_chunk(&p, c, 0);
        p.n_q = 0;
    }
    p.n_out = out_rows / MM_MIN_CHUNK_ROWS;
    p.n_out = nth == 1 || p.n_out < nth   ? nth
              : p.n_out > MM_CHUNKS * nth ? MM_CHUNKS * nth
                                          : p.n_out;
    p.n_tail = p.n_out >= TAIL_MIN_CHUNKS * nth ? 2 * nth : 0;
    tpool_run_chunks(cd->pool, mm_chunk, &p, p.n_q + p.n_out, p.n_q);
}

static void cpu_matmul(struct dev *d, const struct dev_mat *w, const float *x, int64_t T, float *y)
{
    struct dev_mm m = {.w = *w, .x = x, .T = T, .y = y};
    dev_cpu__matmul_multi(d, &m, 1);
}

static int grow_act(struct cpu_dev *cd, size_t need)
{
    if (need <= cd->act_cap)
        return 0;
    free(cd->act);
    cd->act = xaligned_alloc(need);
    cd->act_cap = need;
    return 0;
}

static int cpu_reserve_multi(struct dev *d, size_t act_bytes)
{
    return grow_act(cpu_of(d), act_bytes);
}

static int cpu_reserve(struct dev *d, int64_t max_tokens, int64_t max_in)
{
    /* the widest activation format is f32 (F32/F16/BF16 weights) */
    return grow_act(cpu_of(d), (size_t)max_tokens * (size_t)max_in * sizeof(float) + 64);
}

static int cpu_reserve_attn(struct dev *d, int64_t n_ctx, int64_t grp)
{
    struct cpu_dev *cd = cpu_of(d);
    int64_t n = grp * n_ctx < DEV_CPU_ATTN_SCRATCH ? grp * n_ctx : DEV_CPU_ATTN_SCRATCH;
    n = n > n_ctx ? n : n_ctx;
    if (n <= cd->attn_scratch_n)
        return 0;
    free(cd->attn_scratch);
    cd->attn_scratch = xaligned_alloc((size_t)(cd->n_threads * n) * sizeof(float));
    cd->attn_scratch_n = n;
    return 0;
}

/* ---- buffers: host memory from calloc (zeroed, lazily for large ones), aligned by hand ---- */

struct cpu_buf {
    void *raw;
};

static int cpu_buf_alloc(struct dev *d, size_t bytes, size_t align, struct dev_buf **buf,
                         void **addr)
{
    (void)d;
    align = align < 64 ? 64 : align;
    struct cpu_buf *b = xcalloc(1, sizeof *b);
    b->raw = calloc(1, bytes + align); /* user-sized: refused, not aborted (STYLE rule 16) */
    if (!b->raw) {
        free(b);
        return DD_ENOMEM;
    }
    *addr = (void *)(((uintptr_t)b->raw + align - 1) & ~(uintptr_t)(align - 1));
    *buf = (struct dev_buf *)b;
    return 0;
}

static void cpu_buf_free(struct dev *d, struct dev_buf *buf)
{
    (void)d;
    struct cpu_buf *b = (struct cpu_buf *)buf;
    free(b->raw);
    free(b);
}

static void cpu_move(struct dev *d, void *dst, const void *src, size_t bytes)
{
    (void)d;
    memmove(dst, src, bytes);
}

static void cpu_memset(struct dev *d, void *dst, int byte, size_t bytes)
{
    (void)d;
    memset(dst, byte, bytes);
}

static bool cpu_supports(const struct dev *d, enum dev_op op, enum kq_type t)
{
    (void)d, (void)op;
    return t == KQ_F32 || kq_type_supported(t) || t == KQ_Q4_KX || t == KQ_Q5_KX || t == KQ_Q6_KX ||
           t == KQ_Q8_0X || t == KQ_Q4_0X;
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

static void cpu_moe_stats(const struct dev *d, struct dev_moe_stats *s)
{
    *s = ((const struct cpu_dev *)d)->moe;
}

static void cpu_bind_host(struct dev *d)
{
    if (tpool_bind_caller(cpu_of(d)->pool))
        LOG_W("cpu device: cannot bind its host thread (runs unbound)");
}

static enum kq_type cpu_weight_layout(const struct dev *d, enum kq_type t)
{
    (void)d;
    return kq_repack_type(t);
}

static void cpu_destroy(struct dev *d)
{
    struct cpu_dev *cd = cpu_of(d);
    tpool_destroy(cd->pool);
    free(cd->act);
    free(cd->attn_scratch);
    free(cd);
}

static const struct dev_ops cpu_ops = {
    .api_version = DEV_API_VERSION,
    .name = "cpu",
    .host_weights = true,
    .destroy = cpu_destroy,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .upload = cpu_move,
    .download = cpu_move,
    .copy = cpu_move,
    .memset = cpu_memset,
    .supports = cpu_supports,
    .reserve = cpu_reserve,
    .matmul = cpu_matmul,
    .matmul_multi = dev_cpu__matmul_multi,
    .reserve_multi = cpu_reserve_multi,
    .parallel = cpu_parallel,
    .barrier = cpu_barrier,
    .n_threads = cpu_n_threads,
    .bind_host = cpu_bind_host,
    .weight_layout = cpu_weight_layout,
    .reserve_attn = cpu_reserve_attn,
    .embed = dev_cpu__embed,
    .rope_table = dev_cpu__rope_table,
    .rmsnorm = dev_cpu__rmsnorm,
    .attn_store = dev_cpu__attn_store,
    .attn = dev_cpu__attn,
    .gdn_gates = dev_cpu__gdn_gates,
    .conv1d = dev_cpu__conv1d,
    .gdn = dev_cpu__gdn,
    .swiglu = dev_cpu__swiglu,
    .shexp_gate = dev_cpu__shexp_gate,
    .moe_route = dev_cpu__moe_route,
    .moe_gather = dev_cpu__moe_gather,
    .moe_combine = dev_cpu__moe_combine,
    .matmul_id = dev_cpu__matmul_id,
    .gather_rows = dev_cpu__gather_rows,
    .scatter_rows = dev_cpu__scatter_rows,
    .argmax = dev_cpu__argmax,
    .moe_stats = cpu_moe_stats,
};

int dev_cpu_create(int n_threads, const topo_coreset *cores, struct dev **out, char *err,
                   size_t errlen)
{
    if (n_threads < 0 || n_threads > 1024) {
        dd_errf(err, errlen, "cpu device: thread count %d out of range 0..1024", n_threads);
        return DD_EINVAL;
    }
    int rc = dev_check_api(&cpu_ops, err, errlen);
    if (rc)
        return rc;
    struct cpu_dev *cd = xcalloc(1, sizeof *cd);
    cd->base.ops = &cpu_ops;
    cd->base.ctx = cd;
    cd->pool = tpool_create(n_threads, cores, "deltad-cpu");
    if (!cd->pool) {
        dd_errf(err, errlen, "cpu device: cannot create %d threads", n_threads);
        free(cd);
        return DD_ENOMEM;
    }
    cd->n_threads = tpool_size(cd->pool);
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

/*
 * comm — host allreduce among the CPU devices of one process (contract in comm.h).
 *
 * Large calls: barrier (every rank has published its buffer) -> each rank sums its share of
 * the elements over all ranks' buffers in rank order into a shared result -> barrier -> each
 * rank copies the result into its own buffer. The next call's first barrier keeps the result
 * alive until everyone has copied it.
 *
 * Small calls (decode-sized, at most SMALL_N floats) meet at one barrier instead of two: each
 * rank copies its buffer into its slot of the call's parity, barrier, then every rank sums all
 * slots in rank order into its own buffer (the same bits everywhere). Slots alternate between
 * two parities, so a slot is rewritten two calls later, when every rank has passed the barrier
 * of the call in between and so has finished reading it. A barrier is the expensive part when
 * the machine is busy (a descheduled rank holds up the others), so this halves the waits.
 *
 * Barriers spin briefly, then yield: ranks are host threads of devices that arrive within
 * microseconds of each other in a balanced split.
 */
#include "comm.h" // defines: comm_create_host, comm_allreduce

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xcalloc, ASSERT, dd_now

#define MAX_RANKS 64
#define SMALL_N 16384 /* floats: a decode step's [T][E] block up to T * E = 16384 */

struct comm {
    const struct comm_ops *ops; /* first member: every implementation starts with it */
    int n;
    float *bufs[MAX_RANKS]; /* published by each rank for the current call */
    float *result;          /* [cap] */
    int64_t cap;
    float *slots; /* [2][n][small_cap] the small calls' copies, by parity and rank */
    int64_t small_cap;
    int par[MAX_RANKS]; /* each rank's parity for its next small call */
    atomic_int arrived;
    atomic_int phase;    /* barrier generation */
    double seconds;      /* rank 0 only: inside host_allreduce */
    double wait_seconds; /* rank 0 only: of those, waiting for the others at the entry */
    int64_t calls;
};

static void host_allreduce(struct comm *c, int rank, float *buf, int64_t n);
static void host_destroy(struct comm *c);

static void host_reserve(struct comm *c, int64_t n);
static void host_stats(const struct comm *c, double *seconds, int64_t *calls, double *wait);

static const struct comm_ops host_ops = {
    .name = "host",
    .allreduce = host_allreduce,
    .destroy = host_destroy,
    .reserve = host_reserve,
    .stats = host_stats,
};

struct comm *comm_create_host(int n_ranks)
{
    ASSERT(n_ranks >= 1 && n_ranks <= MAX_RANKS);
    struct comm *c = xcalloc(1, sizeof *c);
    c->ops = &host_ops;
    c->n = n_ranks;
    atomic_init(&c->arrived, 0);
    atomic_init(&c->phase, 0);
    return c;
}

void comm_reserve(struct comm *c, int64_t n)
{
    if (c->ops->reserve)
        c->ops->reserve(c, n);
}

static void host_reserve(struct comm *c, int64_t n)
{
    if (n <= c->cap)
        return;
    free(c->result);
    c->result = xaligned_alloc((size_t)n * sizeof(float));
    c->cap = n;
    free(c->slots);
    c->small_cap = n < SMALL_N ? n : SMALL_N;
    c->slots = xaligned_alloc((size_t)(2 * c->n * c->small_cap) * sizeof(float));
}

static void host_destroy(struct comm *c)
{
    free(c->slots);
    free(c->result);
    free(c);
}

void comm_destroy(struct comm *c)
{
    if (c)
        c->ops->destroy(c);
}

int comm_size(const struct comm *c)
{
    return c->n;
}

void comm_allreduce(struct comm *c, int rank, float *buf, int64_t n)
{
    if (n > 0) /* zero-element calls are skipped (NCCL rejects some of them) */
        c->ops->allreduce(c, rank, buf, n);
}

int comm_allreduce_on(struct comm *c, int rank, float *buf, int64_t n, void *stream)
{
    if (!c->ops->allreduce_on)
        return -1;
    if (n > 0)
        c->ops->allreduce_on(c, rank, buf, n, stream);
    return 0;
}

/* Sense-counting barrier: the last rank to arrive advances the generation. */
static void barrier(struct comm *c)
{
    int gen = atomic_load_explicit(&c->phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&c->arrived, 1, memory_order_acq_rel) == c->n - 1) {
        atomic_store_explicit(&c->arrived, 0, memory_order_relaxed);
        atomic_store_explicit(&c->phase, gen + 1, memory_order_release);
        return;
    }
    for (int spin = 0; atomic_load_explicit(&c->phase, memory_order_acquire) == gen; spin++)
        if (spin > 2000)
            sched_yield();
}

/* The small-call form (see the top): one barrier, every rank sums all slots. Returns when it
 * passed the barrier (rank 0 only; 0 elsewhere). */
static double small_allreduce(struct comm *c, int rank, float *buf, int64_t n)
{
    float *mine = c->slots + ((size_t)c->par[rank] * c->n + rank) * c->small_cap;
    const float *all = c->slots + (size_t)c->par[rank] * c->n * c->small_cap;
    c->par[rank] ^= 1;
    memcpy(mine, buf, (size_t)n * sizeof(float));
    barrier(c);
    double t1 = rank == 0 ? dd_now() : 0.0;
    for (int64_t i = 0; i < n; i++) {
        float s = all[i];
        for (int r = 1; r < c->n; r++)
            s += all[(size_t)r * c->small_cap + i];
        buf[i] = s;
    }
    return t1;
}

static void host_allreduce(struct comm *c, int rank, float *buf, int64_t n)
{
    if (c->n == 1)
        return;
    ASSERT(n <= c->cap); /* comm_reserve sized the result at start-up */
    double t0 = rank == 0 ? dd_now() : 0.0;
    double t1;
    if (n <= c->small_cap) {
        t1 = small_allreduce(c, rank, buf, n);
    } else {
        c->bufs[rank] = buf;
        barrier(c);
        t1 = rank == 0 ? dd_now() : 0.0;
        int64_t lo = n * rank / c->n, hi = n * (rank + 1) / c->n;
        for (int64_t i = lo; i < hi; i++) {
            float s = c->bufs[0][i];
            for (int r = 1; r < c->n; r++)
                s += c->bufs[r][i];
            c->result[i] = s;
        }
        barrier(c);
        memcpy(buf, c->result, (size_t)n * sizeof(float));
    }
    if (rank == 0) {
        c->seconds += dd_now() - t0;
        c->wait_seconds += t1 - t0;
        c->calls++;
    }
}

static void host_stats(const struct comm *c, double *seconds, int64_t *calls, double *wait)
{
    *seconds = c->seconds;
    *calls = c->calls;
    *wait = c->wait_seconds;
}

void comm_stats(const struct comm *c, double *seconds, int64_t *calls)
{
    double wait = 0.0;
    *seconds = 0.0;
    *calls = 0;
    if (c->ops->stats)
        c->ops->stats(c, seconds, calls, &wait);
}

double comm_wait_seconds(const struct comm *c)
{
    double seconds = 0.0, wait = 0.0;
    int64_t calls = 0;
    if (c->ops->stats)
        c->ops->stats(c, &seconds, &calls, &wait);
    return wait;
}

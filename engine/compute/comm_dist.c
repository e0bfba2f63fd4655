/*
 * comm_dist — allreduce over the devices of every process of an mpirun job (contract in
 * comm.h), in two levels:
 *
 *   1. the process's own devices sum their buffers with the host communicator (comm.c), so
 *      each holds the process's partial sum (skipped for one device);
 *   2. device 0's host thread (the engine thread on rank 0, the main thread on a worker: the
 *      one thread that talks MPI) sends the partial sum to every other process and receives
 *      theirs (dist_xfer: all messages posted at once, polled with the deadline), then sums
 *      the partials in process order 0 .. R-1 — every process computes the same bits;
 *   3. the other devices get the result through a second host sum in which they contribute
 *      zeros (x + 0 is x, so the bits are device 0's).
 *
 * Why not MPI_Allreduce: its algorithm, and so the order of the additions, is the library's
 * choice (it may differ between ranks or with the message size); the exchange fixes the order,
 * gives one process per device exactly the bits of the single-process host communicator
 * (((p0 + p1) + p2) ...), and names the rank that did not answer when one fails. It sends
 * (R - 1) partials per process, fine for the few hosts of one model.
 *
 * When the job is broken (a peer failed, dist.h) step 2 leaves the local sum in place: the step
 * completes with wrong numbers, and the group reports the failure instead of its results.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"        // defines: struct comm_ops, comm_create_dist
#include "dist.h"        // defines: dist_xfer, dist_rank, dist_size
#include "engine/util.h" // defines: xcalloc, xaligned_alloc, dd_now

struct comm_dist {
    const struct comm_ops *ops; /* first: see comm.h */
    struct comm *local;         /* the process's devices; NULL for one */
    int n_local;
    int me, n_proc;
    float *part; /* [n_proc][cap] the processes' partial sums, by process */
    int64_t cap;
    double seconds;      /* device 0: inside allreduce */
    double wait_seconds; /* device 0: in the exchange between processes */
    int64_t calls;
};

static void exchange(struct comm_dist *g, float *buf, int64_t n)
{
    struct dist_msg m[2 * DIST_MAX_RANKS];
    int k = 0;
    const size_t bytes = (size_t)n * sizeof(float);
    memcpy(g->part + (size_t)g->me * g->cap, buf, bytes);
    for (int p = 0; p < g->n_proc; p++) {
        if (p == g->me)
            continue;
        m[k++] = (struct dist_msg){p, DIST_TAG_REDUCE, true, buf, bytes};
        m[k++] = (struct dist_msg){p, DIST_TAG_REDUCE, false, g->part + (size_t)p * g->cap, bytes};
    }
    if (dist_xfer(m, k, false))
        return; /* broken: the local sum stays (see the top) */
    for (int64_t i = 0; i < n; i++) {
        float s = g->part[i];
        for (int p = 1; p < g->n_proc; p++)
            s += g->part[(size_t)p * g->cap + i];
        buf[i] = s;
    }
}

static void dist_allreduce(struct comm *c, int rank, float *buf, int64_t n)
{
    struct comm_dist *g = (struct comm_dist *)c;
    ASSERT(n <= g->cap); /* comm_reserve sized the buffers at start-up */
    const double t0 = rank == 0 ? dd_now() : 0.0;
    if (g->local)
        comm_allreduce(g->local, rank, buf, n);
    if (rank == 0) {
        const double t1 = dd_now();
        exchange(g, buf, n);
        g->wait_seconds += dd_now() - t1;
    } else {
        memset(buf, 0, (size_t)n * sizeof(float));
    }
    if (g->local)
        comm_allreduce(g->local, rank, buf, n);
    if (rank == 0) {
        g->seconds += dd_now() - t0;
        g->calls++;
    }
}

static void dist_reserve(struct comm *c, int64_t n)
{
    struct comm_dist *g = (struct comm_dist *)c;
    if (g->local)
        comm_reserve(g->local, n);
    if (n <= g->cap)
        return;
    free(g->part);
    g->part = xaligned_alloc((size_t)(n * g->n_proc) * sizeof(float));
    g->cap = n;
}

static void dist_stats(const struct comm *c, double *seconds, int64_t *calls, double *wait)
{
    const struct comm_dist *g = (const struct comm_dist *)c;
    *seconds = g->seconds;
    *calls = g->calls;
    *wait = g->wait_seconds;
}

static void dist_destroy(struct comm *c)
{
    struct comm_dist *g = (struct comm_dist *)c;
    comm_destroy(g->local);
    free(g->part);
    free(g);
}

static const struct comm_ops dist_ops = {
    .name = "dist",
    .allreduce = dist_allreduce,
    .destroy = dist_destroy,
    .reserve = dist_reserve,
    .stats = dist_stats,
};

struct comm *comm_create_dist(int n_local)
{
    struct comm_dist *g = xcalloc(1, sizeof *g);
    g->ops = &dist_ops;
    g->n_local = n_local;
    g->local = n_local > 1 ? comm_create_host(n_local) : NULL;
    g->me = dist_rank();
    g->n_proc = dist_size();
    return (struct comm *)g;
}

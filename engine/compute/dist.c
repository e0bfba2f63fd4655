/*
 * dist — the job's ranks and the deadline-bound message exchange (contract in dist.h).
 *
 * Process-wide state, written by dist_init on the main thread before any other thread starts
 * and read-only afterwards, except the broken state: the message, then the flag (release), are
 * written by the one thread that calls dist_xfer at a time (serialized, see dist.h) and read by
 * any (acquire); the interrupt flag is written by a signal handler.
 */
#include "dist.h" // defines: dist_init, dist_xfer

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/util.h" // defines: dd_errf, LOG_E, DD_EIO

static struct {
    const struct dist_ops *ops; /* NULL: a job of one rank */
    int rank, size;
    double timeout;
    char host[128];
    volatile int broken;    /* a wait failed: no more traffic */
    volatile int interrupt; /* dist_interrupt was called (async-signal-safe flag) */
    volatile int finalized;
    char failure[256];
} g = {.size = 1, .timeout = 30.0};

/* mpirun (Open MPI's launcher, or any PMIx one) sets these in every rank's environment. */
static bool launched_by_mpirun(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK");
}

int dist_init(char *err, size_t errlen)
{
    if (gethostname(g.host, sizeof g.host - 1))
        snprintf(g.host, sizeof g.host, "?");
    if (!launched_by_mpirun())
        return 0;
    const struct dist_ops *ops = dist_transport();
    if (!ops) {
        dd_errf(err, errlen,
                "started by mpirun, but this deltad was built without MPI (rebuild with "
                "libopenmpi-dev installed, or make MPI=1)");
        return DD_EUNSUPPORTED;
    }
    int rc = ops->init(&g.rank, &g.size, err, errlen);
    if (rc)
        return rc;
    if (g.size > DIST_MAX_RANKS) {
        dd_errf(err, errlen, "%d ranks; at most %d", g.size, DIST_MAX_RANKS);
        ops->finalize();
        return DD_EINVAL;
    }
    g.ops = ops;
    atexit(dist_finalize);
    return 0;
}

int dist_rank(void)
{
    return g.rank;
}

int dist_size(void)
{
    return g.size;
}

const char *dist_host(void)
{
    return g.host;
}

void dist_set_timeout(double seconds)
{
    g.timeout = seconds;
}

void dist_interrupt(void)
{
    g.interrupt = 1;
}

bool dist_broken(void)
{
    return atomic_load_explicit(&g.broken, memory_order_acquire);
}

const char *dist_failure(void)
{
    return dist_broken() ? g.failure : "";
}

int dist_xfer(struct dist_msg *m, int n, bool wait_forever)
{
    if (dist_broken())
        return DD_EIO;
    if (g.interrupt) {
        snprintf(g.failure, sizeof g.failure, "rank %d: the job is being stopped", g.rank);
        atomic_store_explicit(&g.broken, 1, memory_order_release);
        return DD_EIO;
    }
    if (n == 0)
        return 0;
    int rc = g.ops->xfer(m, n, wait_forever ? -1.0 : g.timeout, &g.interrupt);
    if (rc == 0)
        return 0;
    const struct dist_msg *bad = &m[-1 - rc];
    snprintf(g.failure, sizeof g.failure, "rank %d (on %s) %s rank %d %s", g.rank, g.host,
             bad->send ? "could not send to" : "got no answer from", bad->peer,
             g.interrupt ? "before the job was stopped (SIGTERM: mpirun ends the job when a "
                           "rank dies)"
                         : "within mpi_timeout");
    atomic_store_explicit(&g.broken, 1, memory_order_release);
    LOG_E("tensor-parallel job broken: %s", g.failure);
    return DD_EIO;
}

int dist_allgather(const void *mine, void *all, size_t bytes)
{
    struct dist_msg m[2 * DIST_MAX_RANKS];
    int n = 0;
    memcpy((char *)all + (size_t)g.rank * bytes, mine, bytes);
    for (int p = 0; p < g.size; p++) {
        if (p == g.rank)
            continue;
        m[n++] = (struct dist_msg){p, DIST_TAG_DATA, true, (void *)mine, bytes};
        m[n++] = (struct dist_msg){p, DIST_TAG_DATA, false, (char *)all + (size_t)p * bytes, bytes};
    }
    return dist_xfer(m, n, true);
}

int dist_bcast(void *buf, size_t bytes)
{
    struct dist_msg m[DIST_MAX_RANKS];
    int n = 0;
    if (g.rank == 0)
        for (int p = 1; p < g.size; p++)
            m[n++] = (struct dist_msg){p, DIST_TAG_DATA, true, buf, bytes};
    else
        m[n++] = (struct dist_msg){0, DIST_TAG_DATA, false, buf, bytes};
    return dist_xfer(m, n, true);
}

void dist_finalize(void)
{
    if (!g.ops || g.finalized)
        return;
    g.finalized = 1;
    if (dist_broken() || g.interrupt)
        return; /* a peer may be gone: MPI_Finalize could wait for it; exit as we are */
    if (g.rank == 0) {
        struct dist_cmd c = {.op = DIST_CMD_EXIT};
        struct dist_msg m[DIST_MAX_RANKS];
        for (int r = 1; r < g.size; r++)
            m[r - 1] = (struct dist_msg){r, DIST_TAG_CMD, true, &c, sizeof c};
        if (dist_xfer(m, g.size - 1, false))
            return;
    }
    g.ops->finalize();
}

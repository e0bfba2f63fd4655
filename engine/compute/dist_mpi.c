/*
 * dist_mpi — the dist transport over MPI (Open MPI from Debian); compiled only in builds with
 * MPI (the Makefile's MPI switch), chosen by backend_registry.c.
 *
 * MPI is started with MPI_THREAD_SERIALIZED: one thread at a time calls it (dist.h). Errors
 * return instead of aborting (MPI_ERRORS_RETURN), so dist can name the rank and fail cleanly.
 * Every xfer posts all its messages (MPI_Isend / MPI_Irecv of bytes) and polls them with
 * MPI_Testsome: busy for the first millisecond (a step's exchanges complete within
 * microseconds when the ranks are balanced), then yielding, then sleeping 100 us at a time
 * after 20 ms (an idle worker waiting for the next command costs no CPU). On failure the
 * receives still pending are cancelled; sends cannot be, and the job is over anyway.
 */
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "dist.h"        // defines: struct dist_ops, struct dist_msg
#include "engine/util.h" // defines: dd_errf, dd_now, ASSERT

static int mpi_init(int *rank, int *size, char *err, size_t errlen)
{
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        dd_errf(err, errlen, "MPI_Init_thread failed");
        return DD_EIO;
    }
    if (provided < MPI_THREAD_SERIALIZED) {
        dd_errf(err, errlen, "this MPI library offers thread level %d, below SERIALIZED", provided);
        MPI_Finalize();
        return DD_EUNSUPPORTED;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 0;
}

static void backoff(double waited)
{
    if (waited < 1e-3)
        return;
    if (waited < 20e-3) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 100 * 1000};
    nanosleep(&ts, NULL);
}

/* The first message still pending, as -1 - index; its receive and the others' cancelled. */
static int give_up(MPI_Request *req, const struct dist_msg *m, int n)
{
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (req[i] == MPI_REQUEST_NULL)
            continue;
        if (first < 0)
            first = i;
        if (!m[i].send)
            MPI_Cancel(&req[i]);
    }
    return -1 - (first < 0 ? 0 : first);
}

static int mpi_xfer(struct dist_msg *m, int n, double timeout, const volatile int *stop)
{
    MPI_Request req[2 * DIST_MAX_RANKS];
    int idx[2 * DIST_MAX_RANKS];
    ASSERT(n <= 2 * DIST_MAX_RANKS);
    for (int i = 0; i < n; i++) {
        ASSERT(m[i].bytes <= INT_MAX);
        int rc = m[i].send ? MPI_Isend(m[i].buf, (int)m[i].bytes, MPI_BYTE, m[i].peer, m[i].tag,
                                       MPI_COMM_WORLD, &req[i])
                           : MPI_Irecv(m[i].buf, (int)m[i].bytes, MPI_BYTE, m[i].peer, m[i].tag,
                                       MPI_COMM_WORLD, &req[i]);
        if (rc != MPI_SUCCESS) {
            for (int j = i; j < n; j++)
                req[j] = MPI_REQUEST_NULL;
            give_up(req, m, n);
            return -1 - i;
        }
    }
    const double t0 = dd_now();
    for (int left = n; left > 0;) {
        int done = 0;
        if (MPI_Testsome(n, req, &done, idx, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            return give_up(req, m, n);
        if (done != MPI_UNDEFINED)
            left -= done;
        if (left == 0)
            break;
        const double waited = dd_now() - t0;
        if (*stop || (timeout >= 0 && waited > timeout))
            return give_up(req, m, n);
        backoff(waited);
    }
    return 0;
}

static void mpi_finalize(void)
{
    MPI_Finalize();
}

const struct dist_ops dist_mpi_ops = {
    .name = "mpi",
    .init = mpi_init,
    .xfer = mpi_xfer,
    .finalize = mpi_finalize,
};

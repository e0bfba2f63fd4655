/*
 * dist — the processes of one job across hosts: the ranks mpirun started (MPI_COMM_WORLD).
 * One process started without mpirun is a job of one rank and never touches MPI.
 *
 * The tensor-parallel group spans the ranks (fwd_group.c): rank 0 runs the front end and the
 * scheduler, the other ranks ("workers") run each step on their shards. Everything crosses
 * between ranks as point-to-point messages moved by dist_xfer, which posts all of a call's
 * messages at once and polls them with a deadline, so a rank that died or stopped answering
 * turns into an error naming it instead of a hang (DESIGN: a broken job is not repaired in
 * process; rank 0 fails what is in flight with 503 and exits non-zero, the operator or systemd
 * restarts the job).
 *
 * The transport (struct dist_ops, dist_mpi.c) exists only in builds with MPI; the registry
 * (backend_registry.c, dist_transport) says whether it was compiled in.
 *
 * Thread safety: dist_init and dist_finalize run on the main thread; dist_xfer is called by one
 * thread at a time (MPI_THREAD_SERIALIZED: the main thread during start-up and teardown, the
 * engine thread in between). dist_interrupt is async-signal-safe.
 */
#ifndef DELTAD_DIST_H
#define DELTAD_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DIST_MAX_RANKS 64

/* Message tags: one per kind of traffic, so that the messages of a kind match in order. */
enum { DIST_TAG_CMD = 1, DIST_TAG_DATA = 2, DIST_TAG_REDUCE = 3 };

/* The header of every command rank 0 sends the workers (DIST_TAG_CMD). fwd_group.c defines
 * the ops and their arguments; op DIST_CMD_EXIT (sent by dist_finalize) ends the job. */
struct dist_cmd {
    int64_t op;
    int64_t arg[5];
};
#define DIST_CMD_EXIT 0

/* One message of a dist_xfer call: send bytes of buf to peer, or receive them from it. */
struct dist_msg {
    int peer;
    int tag;
    bool send;
    void *buf; /* borrowed until the call returns */
    size_t bytes;
};

/* The transport (dist_mpi.c). xfer returns 0 when every message completed, or the index of
 * the first message that did not (an error of the transport, *stop set, or the deadline:
 * timeout < 0 waits without one) as -1 - index. */
struct dist_ops {
    const char *name;
    int (*init)(int *rank, int *size, char *err, size_t errlen);
    int (*xfer)(struct dist_msg *m, int n, double timeout, const volatile int *stop);
    void (*finalize)(void);
};

/* NULL in a build without MPI (backend_registry.c). */
const struct dist_ops *dist_transport(void);

/* Find the job's ranks: launched by mpirun (OMPI_COMM_WORLD_SIZE or PMIX_RANK set), start MPI
 * and learn this process's rank; otherwise a job of one rank. Fails, with the reason, when
 * mpirun started a build without MPI. Main thread, first thing in main. */
int dist_init(char *err, size_t errlen);
int dist_rank(void);
int dist_size(void); /* 1 without mpirun */
/* This rank's host name (for the logs and `deltad info`). */
const char *dist_host(void);

/* Seconds a collective waits for a peer before the job counts as broken (mpi_timeout). */
void dist_set_timeout(double seconds);

/* Move the messages m[0..n): 0 when all completed; DD_EIO when a peer failed to answer within
 * the timeout (forever when wait_forever), or after dist_interrupt: the job is then broken
 * (dist_broken), the peer is named in dist_failure, and every later call fails at once. */
int dist_xfer(struct dist_msg *m, int n, bool wait_forever);
/* Collectives built on dist_xfer, without a deadline (start-up: the processes arrive at their
 * own pace). allgather: all [size][bytes] := every process's mine [bytes]; bcast: buf [bytes]
 * := rank 0's. 0 or DD_EIO. */
int dist_allgather(const void *mine, void *all, size_t bytes);
int dist_bcast(void *buf, size_t bytes);

/* The job is ending (mpirun's SIGTERM, which it sends when any rank died): waits in progress
 * and later ones fail at once. Async-signal-safe. */
void dist_interrupt(void);
bool dist_broken(void);
const char *dist_failure(void); /* "" while not broken */

/* Rank 0: tell the workers the job is over (they leave their loop and exit 0) unless it is
 * broken; then MPI_Finalize. Idempotent; registered with atexit by dist_init. */
void dist_finalize(void);

#endif

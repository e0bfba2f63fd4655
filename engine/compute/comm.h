/*
 * comm — the communication interface of a device group: allreduce-sum of f32 buffers across
 * its ranks (DESIGN.md section 4). Implementations: `host` — shared memory among the CPU
 * devices of one process, deterministic (every rank receives the same bits: each element is
 * summed in rank order 0 .. n-1 exactly once); `nccl` arrives with the CUDA device; `dist`
 * (comm_dist.c) spans the processes of an mpirun job: the host sum among the process's own
 * devices, then the processes' partial sums exchanged and added in process order (dist.h).
 *
 * Communicators are created once at start-up (STYLE rule 9). Thread safety: rank r's calls
 * come from rank r's host thread; every rank calls the same collectives in the same order.
 */
#ifndef DELTAD_COMM_H
#define DELTAD_COMM_H

#include <stddef.h>
#include <stdint.h>

struct comm;

/* The operations table of an implementation (STYLE rule 7). Every implementation's struct
 * starts with a pointer to its table; comm_impl users are comm.c, comm_nccl.c and the registry. */
struct comm_ops {
    const char *name;
    void (*allreduce)(struct comm *c, int rank, float *buf, int64_t n);
    void (*destroy)(struct comm *c);
    /* Size buffers for allreduces of up to n floats (start-up); NULL when none are needed. */
    void (*reserve)(struct comm *c, int64_t n);
    /* allreduce enqueued on a device stream (a cudaStream_t as void *) after the work already
     * there, returning before it completes; NULL when the kind has no streams. */
    void (*allreduce_on)(struct comm *c, int rank, float *buf, int64_t n, void *stream);
    /* comm_stats and comm_wait_seconds; NULL when the kind keeps none (zeros). */
    void (*stats)(const struct comm *c, double *seconds, int64_t *calls, double *wait);
};

/* COMM_NCCL_DIST: the GPUs of every process of an mpirun job in one NCCL communicator
 * (ncclCommInitRank, the unique id sent from rank 0 over dist). */
enum comm_kind { COMM_HOST = 0, COMM_NCCL = 1, COMM_NCCL_DIST = 2 };

/* Create a communicator of the given kind for n_ranks ranks (backend_registry.c). For NCCL,
 * cuda_devices[rank] is each rank's GPU and buffers are device pointers. Returns NULL with a
 * message when the kind is not built in or fails to start. */
struct comm *comm_create(enum comm_kind kind, int n_ranks, const int *cuda_devices, char *err,
                         size_t errlen);

/* The communicator of a group that spans the job's processes (dist_size() > 1): the rank of
 * comm_allreduce is this process's own device d of n_local; every process of the job makes one
 * and calls the same collectives in the same order. Transferred: comm_destroy. */
struct comm *comm_create_dist(int n_local);
/* A host communicator for n_ranks ranks (1 .. 64). Transferred: comm_destroy. */
struct comm *comm_create_host(int n_ranks);
/* Size the shared result for allreduces of up to n floats (start-up, before any collective). */
void comm_reserve(struct comm *c, int64_t n);
void comm_destroy(struct comm *c);
int comm_size(const struct comm *c);

/* buf [n] on rank `rank` := sum over ranks of their buf. Blocks until every rank arrived. */
void comm_allreduce(struct comm *c, int rank, float *buf, int64_t n);

/* comm_allreduce ordered on `stream` (the device's own), without waiting for it: returns -1
 * (nothing done) when c has no stream form; the caller then syncs and calls comm_allreduce. */
int comm_allreduce_on(struct comm *c, int rank, float *buf, int64_t n, void *stream);

/* Seconds all ranks spent inside comm_allreduce, and the call count (rank 0's view). */
void comm_stats(const struct comm *c, double *seconds, int64_t *calls);
/* Of comm_stats' seconds, those rank 0 spent at the entry waiting for the other ranks to
 * arrive (their load imbalance, not communication); the rest is the reduction itself. */
double comm_wait_seconds(const struct comm *c);

#endif

/*
 * comm — the communication interface of a device group: allreduce-sum of f32 buffers across
 * its ranks (DESIGN.md section 4). Implementations: `host` — shared memory among the CPU
 * devices of one process, deterministic (every rank receives the same bits: each element is
 * summed in rank order 0 .. n-1 exactly once); `nccl` arrives with the CUDA device.
 *
 * Communicators are created once at start-up (STYLE rule 9). Thread safety: rank r's calls
 * come from rank r's host thread; every rank calls the same collectives in the same order.
 */
#ifndef DELTAD_COMM_H
#define DELTAD_COMM_H

#include <stdint.h>

struct comm;

/* A host communicator for n_ranks ranks (1 .. 64). Transferred: comm_destroy. */
struct comm *comm_create_host(int n_ranks);
/* Size the shared result for allreduces of up to n floats (start-up, before any collective). */
void comm_reserve(struct comm *c, int64_t n);
void comm_destroy(struct comm *c);
int comm_size(const struct comm *c);

/* buf [n] on rank `rank` := sum over ranks of their buf. Blocks until every rank arrived. */
void comm_allreduce(struct comm *c, int rank, float *buf, int64_t n);

/* Seconds all ranks spent inside comm_allreduce, and the call count (rank 0's view). */
void comm_stats(const struct comm *c, double *seconds, int64_t *calls);

#endif

/*
 * comm_nccl — allreduce across the GPUs of one process with NCCL (built with NCCL=1 only;
 * reached through comm_create(COMM_NCCL, ...) in backend_registry.c).
 */
#ifndef DELTAD_COMM_NCCL_H
#define DELTAD_COMM_NCCL_H

#include <stddef.h>

struct comm;

/* ncclCommInitAll over cuda_devices[0 .. n_ranks); one CUDA stream per rank. */
struct comm *comm_nccl_create(int n_ranks, const int *cuda_devices, char *err, size_t errlen);

/* The GPUs of every process of an mpirun job in one communicator (comm_nccl_dist.c, built with
 * NCCL=1 and MPI): this process's n_local GPUs cuda_devices[0 .. n_local) are global ranks
 * base .. base + n_local - 1, base = the GPUs of the processes before it. Collective: every
 * process calls it at the same point. */
struct comm *comm_nccl_create_dist(int n_local, const int *cuda_devices, char *err, size_t errlen);

#endif

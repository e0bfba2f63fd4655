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

#endif

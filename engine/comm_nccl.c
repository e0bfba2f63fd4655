/*
 * comm_nccl — NCCL allreduce for a device group of GPUs in one process (contract in comm.h;
 * compiled only with NCCL=1).
 *
 * Communicators are created once, eagerly, with ncclCommInitAll (STYLE rule 9). Each rank's
 * host thread calls comm_allreduce with a device pointer; the reduction runs on the rank's
 * stream and the call returns when it completed (the CUDA device will order its own stream
 * with an event instead: TODO(issue 8)). Messages are F32; BF16 on the wire above a size
 * threshold needs a conversion kernel from kernels/cuda (TODO(issue 8)). Every NCCL and CUDA
 * call goes through a check that reports file:line and aborts (STYLE rule 18c).
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"      // defines: struct comm_ops
#include "comm_nccl.h" // defines: comm_nccl_create
#include "util.h"      // defines: xcalloc, dd_errf, dd_abort

#define NCCL_CHECK(x) nccl_check((x), __FILE__, __LINE__)
#define CUDA_CHECK(x) cuda_check((x), __FILE__, __LINE__)
#define MAX_GPUS 64

struct comm_nccl {
    const struct comm_ops *ops; /* first: see comm.h */
    int n;
    ncclComm_t comms[MAX_GPUS];
    cudaStream_t streams[MAX_GPUS];
    int devs[MAX_GPUS];
};

static void nccl_check(ncclResult_t r, const char *file, int line)
{
    if (r != ncclSuccess) {
        fprintf(stderr, "<2>deltad: NCCL error at %s:%d: %s\n", file, line, ncclGetErrorString(r));
        abort();
    }
}

static void cuda_check(cudaError_t r, const char *file, int line)
{
    if (r != cudaSuccess) {
        fprintf(stderr, "<2>deltad: CUDA error at %s:%d: %s\n", file, line, cudaGetErrorString(r));
        abort();
    }
}

static void nccl_allreduce(struct comm *c, int rank, float *buf, int64_t n)
{
    struct comm_nccl *g = (struct comm_nccl *)c;
    CUDA_CHECK(cudaSetDevice(g->devs[rank]));
    NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, g->comms[rank],
                             g->streams[rank]));
    CUDA_CHECK(cudaStreamSynchronize(g->streams[rank]));
}

static void nccl_destroy(struct comm *c)
{
    struct comm_nccl *g = (struct comm_nccl *)c;
    for (int r = 0; r < g->n; r++) {
        cudaSetDevice(g->devs[r]);
        cudaStreamDestroy(g->streams[r]);
        ncclCommDestroy(g->comms[r]);
    }
    free(g);
}

static const struct comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .destroy = nccl_destroy,
};

struct comm *comm_nccl_create(int n_ranks, const int *cuda_devices, char *err, size_t errlen)
{
    int have = 0;
    if (n_ranks < 1 || n_ranks > MAX_GPUS || cudaGetDeviceCount(&have) != cudaSuccess ||
        have < 1) {
        dd_errf(err, errlen, "NCCL: %d GPUs requested, %d usable", n_ranks, have);
        return NULL;
    }
    struct comm_nccl *g = xcalloc(1, sizeof *g);
    g->ops = &nccl_ops;
    g->n = n_ranks;
    for (int r = 0; r < n_ranks; r++)
        g->devs[r] = cuda_devices[r];
    ncclResult_t rc = ncclCommInitAll(g->comms, n_ranks, g->devs);
    if (rc != ncclSuccess) {
        dd_errf(err, errlen, "NCCL: ncclCommInitAll failed: %s", ncclGetErrorString(rc));
        free(g);
        return NULL;
    }
    for (int r = 0; r < n_ranks; r++) {
        CUDA_CHECK(cudaSetDevice(g->devs[r]));
        CUDA_CHECK(cudaStreamCreateWithFlags(&g->streams[r], cudaStreamNonBlocking));
    }
    return (struct comm *)g;
}

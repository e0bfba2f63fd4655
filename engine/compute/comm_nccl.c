/*
 * comm_nccl — NCCL allreduce for a device group of GPUs in one process (contract in comm.h;
 * compiled only with NCCL=1).
 *
 * Communicators are created once, eagerly, with ncclCommInitAll over exactly the group's GPUs
 * (STYLE rule 9); a group of one GPU still goes through NCCL. Each rank's host thread calls
 * comm_allreduce with a device pointer; the reduction runs on the rank's stream, inside
 * ncclGroupStart/End, and the call returns when it completed. The CUDA device calls
 * comm_allreduce_on instead: the same reduction enqueued on the device's own stream, after the
 * step's kernels, with no host wait (the step's one sync is the logits download). Wire format
 * (docs/parallelism-and- speculation.md section 5): F32 in place below a size threshold that grows
 * with the group (32768 elements for up to 2 GPUs, 131072 for 3, 262144 for 4 or more); at or above
 * it the buffer is rounded to BF16 into a per-rank device temporary (sized by comm_reserve),
 * reduced as BF16 and widened back, so every rank ends with the same bits. Zero-element calls never
 * reach NCCL (comm_allreduce skips them). Every NCCL and CUDA call goes through a check that
 * reports file:line and aborts (STYLE rule 18c).
 */
#include "comm_nccl.h" // defines: comm_nccl_create

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "comm.h"               // defines: struct comm_ops
#include "engine/util.h"        // defines: xcalloc, dd_errf, dd_abort
#include "kernels/cuda/kcuda.h" // defines: kc_f32_to_bf16_on, kc_bf16_to_f32_on

#define NCCL_CHECK(x) nccl_check((x), __FILE__, __LINE__)
#define CUDA_CHECK(x) cuda_check((x), __FILE__, __LINE__)
#define MAX_GPUS 64

struct comm_nccl {
    const struct comm_ops *ops; /* first: see comm.h */
    int n;
    ncclComm_t comms[MAX_GPUS];
    cudaStream_t streams[MAX_GPUS];
    int devs[MAX_GPUS];
    uint16_t *wire[MAX_GPUS]; /* [cap] BF16 temporaries, one per rank (comm_reserve) */
    int64_t cap;
    int64_t bf16_min; /* calls of at least this many elements go as BF16 */
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

/* The reduction of rank's buf on stream st, enqueued (not waited for). */
static void nccl_enqueue(struct comm_nccl *g, int rank, float *buf, int64_t n, cudaStream_t st)
{
    CUDA_CHECK(cudaSetDevice(g->devs[rank]));
    const int bf16 = n >= g->bf16_min && n <= g->cap;
    if (bf16)
        kc_f32_to_bf16_on(st, buf, g->wire[rank], n);
    NCCL_CHECK(ncclGroupStart());
    if (bf16)
        NCCL_CHECK(ncclAllReduce(g->wire[rank], g->wire[rank], (size_t)n, ncclBfloat16, ncclSum,
                                 g->comms[rank], st));
    else
        NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, g->comms[rank], st));
    NCCL_CHECK(ncclGroupEnd());
    if (bf16)
        kc_bf16_to_f32_on(st, g->wire[rank], buf, n);
}

static void nccl_allreduce(struct comm *c, int rank, float *buf, int64_t n)
{
    struct comm_nccl *g = (struct comm_nccl *)c;
    nccl_enqueue(g, rank, buf, n, g->streams[rank]);
    CUDA_CHECK(cudaStreamSynchronize(g->streams[rank]));
}

/* On the caller's stream (the CUDA device's): ordered after its kernels, no host wait. */
static void nccl_allreduce_on(struct comm *c, int rank, float *buf, int64_t n, void *stream)
{
    nccl_enqueue((struct comm_nccl *)c, rank, buf, n, (cudaStream_t)stream);
}

/* Start-up: the BF16 temporaries for calls of up to n elements. A call larger than the
 * reservation goes as F32 (never an allocation on the hot path). */
static void nccl_reserve(struct comm *c, int64_t n)
{
    struct comm_nccl *g = (struct comm_nccl *)c;
    if (n <= g->cap || n < g->bf16_min)
        return;
    for (int r = 0; r < g->n; r++) {
        CUDA_CHECK(cudaSetDevice(g->devs[r]));
        if (g->wire[r])
            CUDA_CHECK(cudaFree(g->wire[r]));
        CUDA_CHECK(cudaMalloc((void **)&g->wire[r], (size_t)n * sizeof(uint16_t)));
    }
    g->cap = n;
}

static void nccl_destroy(struct comm *c)
{
    struct comm_nccl *g = (struct comm_nccl *)c;
    for (int r = 0; r < g->n; r++) {
        cudaSetDevice(g->devs[r]);
        cudaStreamDestroy(g->streams[r]);
        if (g->wire[r])
            cudaFree(g->wire[r]);
        ncclCommDestroy(g->comms[r]);
    }
    free(g);
}

static const struct comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .destroy = nccl_destroy,
    .reserve = nccl_reserve,
    .allreduce_on = nccl_allreduce_on,
};

/* The communicator over n_local GPUs of this process whose NCCL communicators exist (comms:
 * ncclCommInitAll here, ncclCommInitRank in comm_nccl_dist.c), in a group of n_total GPUs. */
struct comm *comm_nccl__adopt(int n_local, const int *cuda_devices, const ncclComm_t *comms,
                              int n_total)
{
    struct comm_nccl *g = xcalloc(1, sizeof *g);
    g->ops = &nccl_ops;
    g->n = n_local;
    g->bf16_min = n_total <= 2 ? 32768 : n_total == 3 ? 131072 : 262144;
    for (int r = 0; r < n_local; r++) {
        g->devs[r] = cuda_devices[r];
        g->comms[r] = comms[r];
        CUDA_CHECK(cudaSetDevice(g->devs[r]));
        CUDA_CHECK(cudaStreamCreateWithFlags(&g->streams[r], cudaStreamNonBlocking));
    }
    return (struct comm *)g;
}

struct comm *comm_nccl_create(int n_ranks, const int *cuda_devices, char *err, size_t errlen)
{
    int have = 0;
    if (n_ranks < 1 || n_ranks > MAX_GPUS || cudaGetDeviceCount(&have) != cudaSuccess || have < 1) {
        dd_errf(err, errlen, "NCCL: %d GPUs requested, %d usable", n_ranks, have);
        return NULL;
    }
    ncclComm_t comms[MAX_GPUS];
    ncclResult_t rc = ncclCommInitAll(comms, n_ranks, cuda_devices);
    if (rc != ncclSuccess) {
        dd_errf(err, errlen, "NCCL: ncclCommInitAll failed: %s", ncclGetErrorString(rc));
        return NULL;
    }
    return comm_nccl__adopt(n_ranks, cuda_devices, comms, n_ranks);
}

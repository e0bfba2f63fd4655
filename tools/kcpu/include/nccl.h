/*
 * nccl.h (kcpu) — the NCCL subset comm_nccl.c uses, emulated in one process over the fake GPUs
 * of tools/kcpu (tools/kcpu/nccl.cpp): an allreduce completes when every rank of the
 * communicator clique has called it, from one thread inside a group or from one thread per rank.
 */
#ifndef KCPU_NCCL_H
#define KCPU_NCCL_H

#include <stddef.h>

#include "cuda_runtime.h" // defines: cudaStream_t

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
} ncclResult_t;

typedef enum { ncclFloat32 = 7, ncclFloat = 7, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef struct kcpu_nccl_comm *ncclComm_t;

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int n, const int *devlist);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t st);
const char *ncclGetErrorString(ncclResult_t r);

#ifdef __cplusplus
}
#endif

#endif

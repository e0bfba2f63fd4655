/*
 * cuda_runtime.h (kcpu) — the subset of the CUDA runtime API that kernels/cuda and
 * engine/compute use, declared for the kcpu emulation build (tools/kcpu/cudart.cpp implements
 * it on the host). It shadows the toolkit's header in `make KCPU=1` builds only; names, enum
 * values and signatures follow the CUDA 12/13 runtime so the same sources compile with nvcc.
 * Plain C: comm_nccl.c includes it.
 */
#ifndef KCPU_CUDA_RUNTIME_H
#define KCPU_CUDA_RUNTIME_H

#include <stddef.h>

#include "library_types.h" // defines: cudaDataType_t

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotSupported = 801,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorIllegalAddress = 700,
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

typedef struct kcpu_stream *cudaStream_t;
typedef struct kcpu_graph *cudaGraph_t;
typedef struct kcpu_graph *cudaGraphExec_t;

/* The fields the sources read; the emulator fills the rest with zeros. */
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor;
    int multiProcessorCount;
    int warpSize;
    int maxThreadsPerBlock;
    size_t sharedMemPerBlock;
};

const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device);
cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int device);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t st);
cudaError_t cudaMemset(void *dst, int byte, size_t bytes);
cudaError_t cudaMemsetAsync(void *dst, int byte, size_t bytes, cudaStream_t st);

cudaError_t cudaStreamCreate(cudaStream_t *st);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t st);
cudaError_t cudaStreamSynchronize(cudaStream_t st);

cudaError_t cudaStreamBeginCapture(cudaStream_t st, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

#ifdef __cplusplus
}
#endif

#endif

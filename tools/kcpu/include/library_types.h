/* library_types.h (kcpu) — cudaDataType_t for the emulated cuBLAS and NCCL (values as CUDA's). */
#ifndef KCPU_LIBRARY_TYPES_H
#define KCPU_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14,
} cudaDataType_t;

#endif

/*
 * kcuda_impl — internals shared by the .cu files of kernels/cuda; users include kcuda.h only.
 *
 * Holds the error check, the kc_stream struct, warp / block reductions, and the dequantisation
 * of eight consecutive weights of every GGUF type (deq8), written from the block layouts of
 * kernels/cpu/kq_impl.h. The dequantisers use __fmul_rn / __fsub_rn where the CPU reference
 * multiplies and subtracts, so nvcc cannot contract them into FMAs and the f32 values equal
 * kq_dequantize_row's bit for bit.
 */
#ifndef DELTAD_KCUDA_IMPL_CUH
#define DELTAD_KCUDA_IMPL_CUH

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kcuda.h" // defines: kc_* API

/* A failed CUDA call leaves the device undefined: report and abort (STYLE rule 18c). */
#define KC_CHECK(call)                                                                             \
    do {                                                                                           \
        cudaError_t kc_rc_ = (call);                                                               \
        if (kc_rc_ != cudaSuccess)                                                                 \
            kc__fail(#call, cudaGetErrorString(kc_rc_), __FILE__, __LINE__);                       \
    } while (0)
#define KC_BLAS(call)                                                                              \
    do {                                                                                           \
        cublasStatus_t kc_st_ = (call);                                                            \
        if (kc_st_ != CUBLAS_STATUS_SUCCESS)                                                       \
            kc__fail(#call, cublasGetStatusString(kc_st_), __FILE__, __LINE__);                    \
    } while (0)
/* After a launch: catches bad configurations at once (asynchronous faults surface later). */
#define KC_LAUNCHED() KC_CHECK(cudaGetLastError())
/* A broken caller contract (shape out of range): abort with the condition. */
#define KC_REQUIRE(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            kc__fail("requirement", #cond, __FILE__, __LINE__);                                    \
    } while (0)

void kc__fail(const char *what, const char *why, const char *file, int line);

struct kc_stream {
    int device;
    cudaStream_t st;
    cublasHandle_t blas;
    void *scratch; /* scratch_bytes of device memory for the GEMM */
    size_t scratch_bytes;
    void *blas_ws; /* cuBLAS's workspace, set once: it never allocates inside a graph capture */
};

/* Bytes of cuBLAS workspace per stream (NVIDIA's recommendation for Hopper). */
#define KC_BLAS_WORKSPACE ((size_t)32 << 20)

static inline unsigned kc__blocks(int64_t n, int per)
{
    return (unsigned)((n + per - 1) / per);
}

/* ---- reductions ---------------------------------------------------------------------------- */

__device__ __forceinline__ float kc__warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double kc__warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum of v over a block of blockDim.x threads (a multiple of 32, <= 1024); every thread gets
 * the total. Uses 32 doubles of shared memory and two barriers. */
__device__ __forceinline__ double kc__block_sum_d(double v)
{
    __shared__ double part[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = kc__warp_sum_d(v);
    __syncthreads(); /* part may still be read by a previous call */
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    double t = lane < nw ? part[lane] : 0.0;
    return kc__warp_sum_d(t);
}

/* ---- conversions --------------------------------------------------------------------------- */

__device__ __forceinline__ float kc__h2f(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float kc__bf2f(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ uint16_t kc__ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

__device__ __forceinline__ float kc__silu(float x)
{
    return x / (1.0f + expf(-x));
}

__device__ __forceinline__ float kc__sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* ---- dequantisation of 8 consecutive elements ----------------------------------------------- */

/* Block facts per type (the GGUF layouts). */
template <int TYPE> struct kc__blk;
template <> struct kc__blk<KQ_F32> {
    static const int qk = 1, bytes = 4;
};
template <> struct kc__blk<KQ_F16> {
    static const int qk = 1, bytes = 2;
};
template <> struct kc__blk<KQ_BF16> {
    static const int qk = 1, bytes = 2;
};
template <> struct kc__blk<KQ_Q8_0> {
    static const int qk = 32, bytes = 34;
};
template <> struct kc__blk<KQ_Q4_0> {
    static const int qk = 32, bytes = 18;
};
template <> struct kc__blk<KQ_Q4_K> {
    static const int qk = 256, bytes = 144;
};
template <> struct kc__blk<KQ_Q5_K> {
    static const int qk = 256, bytes = 176;
};
template <> struct kc__blk<KQ_Q6_K> {
    static const int qk = 256, bytes = 210;
};

/* Six-bit scale and min of sub-block j of a Q4_K / Q5_K scales[12] (kq__unpack_scales). */
__device__ __forceinline__ void kc__kscale(const uint8_t *s, int j, float *sc, float *m)
{
    if (j < 4) {
        *sc = (float)(s[j] & 63);
        *m = (float)(s[j + 4] & 63);
    } else {
        *sc = (float)((s[j + 4] & 15) | (s[j - 4] >> 6) << 4);
        *m = (float)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
    }
}

/*
 * o[0..8) = elements e0 .. e0+7 of a row of TYPE (e0 a multiple of 8; for the float types the
 * caller guarantees e0 + 8 <= n, see kc__deq1 for tails).
 */
template <int TYPE>
__device__ __forceinline__ void kc__deq8(const uint8_t *row, int64_t e0, float *o)
{
    const int qk = kc__blk<TYPE>::qk;
    const uint8_t *b = row + (e0 / qk) * kc__blk<TYPE>::bytes;
    const int e = (int)(e0 % qk); /* first element within the block */
    if (TYPE == KQ_F32) {
        const float *f = (const float *)row + e0;
        for (int i = 0; i < 8; i++)
            o[i] = f[i];
    } else if (TYPE == KQ_F16) {
        const uint16_t *h = (const uint16_t *)row + e0;
        for (int i = 0; i < 8; i++)
            o[i] = kc__h2f(h[i]);
    } else if (TYPE == KQ_BF16) {
        const uint16_t *h = (const uint16_t *)row + e0;
        for (int i = 0; i < 8; i++)
            o[i] = kc__bf2f(h[i]);
    } else if (TYPE == KQ_Q8_0) {
        const float d = kc__h2f(kc__ld16(b));
        for (int i = 0; i < 8; i++)
            o[i] = __fmul_rn(d, (float)(int8_t)b[2 + e + i]);
    } else if (TYPE == KQ_Q4_0) {
        const float d = kc__h2f(kc__ld16(b));
        const uint8_t *qs = b + 2 + (e & 15);
        for (int i = 0; i < 8; i++)
            o[i] = __fmul_rn(d, (float)((e < 16 ? qs[i] & 15 : qs[i] >> 4) - 8));
    } else if (TYPE == KQ_Q4_K || TYPE == KQ_Q5_K) {
        const float d = kc__h2f(kc__ld16(b)), dmin = kc__h2f(kc__ld16(b + 2));
        const uint8_t *qh = b + 16, *qs = b + (TYPE == KQ_Q5_K ? 48 : 16);
        const int j = e / 32, g = e / 64, l = e % 64;
        float sc, m;
        kc__kscale(b + 4, j, &sc, &m);
        const float ds = __fmul_rn(d, sc), dm = __fmul_rn(dmin, m);
        for (int i = 0; i < 8; i++) {
            int q = l < 32 ? qs[32 * g + l + i] & 15 : qs[32 * g + l - 32 + i] >> 4;
            if (TYPE == KQ_Q5_K)
                q += ((qh[(e + i) % 32] >> j) & 1) << 4;
            o[i] = __fsub_rn(__fmul_rn(ds, (float)q), dm);
        }
    } else if (TYPE == KQ_Q6_K) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = kc__h2f(kc__ld16(b + 208));
        const int h = e / 128, c = (e % 128) / 32, l = e % 32;
        const float ds = __fmul_rn(d, (float)sc[e / 16]); /* 8 elements share a sub-block */
        for (int i = 0; i < 8; i++) {
            const int lo = (ql[64 * h + 32 * (c & 1) + l + i] >> (4 * (c >> 1))) & 15;
            const int hi = (qh[32 * h + l + i] >> (2 * c)) & 3;
            o[i] = __fmul_rn(ds, (float)((lo | hi << 4) - 32));
        }
    }
}

/* One element e of a float-type row (the tails of rows whose length is not a multiple of 8). */
template <int TYPE> __device__ __forceinline__ float kc__deq1(const uint8_t *row, int64_t e)
{
    if (TYPE == KQ_F32)
        return ((const float *)row)[e];
    if (TYPE == KQ_F16)
        return kc__h2f(((const uint16_t *)row)[e]);
    return kc__bf2f(((const uint16_t *)row)[e]);
}

/* Run f<TYPE>() for a runtime weight type; aborts on a type without kernels. */
#define KC_TYPE_SWITCH(type, F, ...)                                                               \
    do {                                                                                           \
        switch (type) {                                                                            \
        case KQ_F32:                                                                               \
            F<KQ_F32>(__VA_ARGS__);                                                                \
            break;                                                                                 \
        case KQ_F16:                                                                               \
            F<KQ_F16>(__VA_ARGS__);                                                                \
            break;                                                                                 \
        case KQ_BF16:                                                                              \
            F<KQ_BF16>(__VA_ARGS__);                                                               \
            break;                                                                                 \
        case KQ_Q8_0:                                                                              \
            F<KQ_Q8_0>(__VA_ARGS__);                                                               \
            break;                                                                                 \
        case KQ_Q4_0:                                                                              \
            F<KQ_Q4_0>(__VA_ARGS__);                                                               \
            break;                                                                                 \
        case KQ_Q4_K:                                                                              \
            F<KQ_Q4_K>(__VA_ARGS__);                                                               \
            break;                                                                                 \
        case KQ_Q5_K:                                                                              \
            F<KQ_Q5_K>(__VA_ARGS__);                                                               \
            break;                                                                                 \
        case KQ_Q6_K:                                                                              \
            F<KQ_Q6_K>(__VA_ARGS__);                                                               \
            break;                                                                                 \
        default:                                                                                   \
            kc__fail("weight type", "no CUDA kernel for this type", __FILE__, __LINE__);           \
        }                                                                                          \
    } while (0)

#endif

/*
 * cublas — the kcpu reference of the cuBLAS calls kernels/cuda makes: handles bound to a
 * stream (and to the GPU current at cublasCreate, whose memory A, B and C must be), and
 * cublasGemmEx in column-major order with F32 / F16 / BF16 inputs, F32 output and
 * f32 accumulation (CUBLAS_COMPUTE_32F), alpha and beta on the host. beta == 0 never reads C
 * (C may hold the 0xFF fill of fresh device memory). The product runs on the handle's stream,
 * so a capturing stream records it like a launch.
 */
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "cublas_v2.h" // defines: cublasGemmEx
#include "kcpu_impl.h" // defines: kcpu::is_device, kcpu::device_of, kcpu::enqueue

struct kcpu_blas {
    cudaStream_t st;
    cublasMath_t math;
    int device; /* current at cublasCreate: the GPU of every operand */
};

extern "C" cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new kcpu_blas{NULL, CUBLAS_DEFAULT_MATH, kcpu::current_device()};
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t st)
{
    h->st = st;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *workspace, size_t bytes)
{
    (void)h;
    if (bytes && !kcpu::is_device(workspace, bytes)) {
        kcpu::warn("cublasSetWorkspace: %p (%zu bytes) is not device memory", workspace, bytes);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

static size_t type_bytes(cudaDataType_t t)
{
    return t == CUDA_R_32F ? 4 : t == CUDA_R_16F || t == CUDA_R_16BF ? 2 : 0;
}

static float load(const void *p, cudaDataType_t t, size_t i)
{
    if (t == CUDA_R_32F)
        return ((const float *)p)[i];
    const uint16_t u = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16F)
        return __half2float(__ushort_as_half(u));
    return __bfloat162float(__nv_bfloat16{u});
}

/* out [rows][depth] f32 with out[r][l] = M[r + l*ld] (N) or M[l + r*ld] (T): for A that is
 * op(A)(r, l); for B, whose columns are wanted, pass the opposite op. */
static std::vector<float> unpack(const void *M, cudaDataType_t t, int ld, cublasOperation_t op,
                                 int rows, int depth)
{
    std::vector<float> out((size_t)rows * depth);
    for (int r = 0; r < rows; r++)
        for (int l = 0; l < depth; l++)
            out[(size_t)r * depth + l] = load(
                M, t, op == CUBLAS_OP_N ? (size_t)r + (size_t)l * ld : (size_t)l + (size_t)r * ld);
    return out;
}

/* Bytes of a column-major operand of `cols` columns of ld elements whose last column has
 * `rows` elements (for the device-range check). */
static size_t span(int rows, int cols, int ld, cudaDataType_t t)
{
    return rows && cols ? ((size_t)(cols - 1) * ld + rows) * type_bytes(t) : 0;
}

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                       int m, int n, int k, const void *alpha, const void *A,
                                       cudaDataType_t at, int lda, const void *B, cudaDataType_t bt,
                                       int ldb, const void *beta, void *C, cudaDataType_t ct,
                                       int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || lda < (ta == CUBLAS_OP_N ? m : k) ||
        ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m || lda < 1 || ldb < 1 || ldc < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!type_bytes(at) || !type_bytes(bt) || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
    if (!kcpu::is_device(A, span(an ? m : k, an ? k : m, lda, at)) ||
        !kcpu::is_device(B, span(bn ? k : n, bn ? n : k, ldb, bt)) ||
        !kcpu::is_device(C, span(m, n, ldc, ct))) {
        kcpu::warn("cublasGemmEx: A, B or C is not inside one device allocation");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (kcpu::device_of(A) != h->device || kcpu::device_of(B) != h->device ||
        kcpu::device_of(C) != h->device) {
        kcpu::warn("cublasGemmEx: A, B, C on GPUs %d, %d, %d with a handle of GPU %d",
                   kcpu::device_of(A), kcpu::device_of(B), kcpu::device_of(C), h->device);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const float al = *(const float *)alpha, be = *(const float *)beta;
    kcpu::enqueue(h->st, [=]() {
        const std::vector<float> a = unpack(A, at, lda, ta, m, k),
                                 b = unpack(B, bt, ldb, bn ? CUBLAS_OP_T : CUBLAS_OP_N, n, k);
        float *c = (float *)C;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                const float *ar = &a[(size_t)i * k], *br = &b[(size_t)j * k];
                float acc = 0.0f;
                for (int l = 0; l < k; l++)
                    acc += ar[l] * br[l];
                float *o = &c[(size_t)i + (size_t)j * ldc];
                *o = be == 0.0f ? al * acc : al * acc + be * *o;
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}

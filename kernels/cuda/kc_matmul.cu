// kc_matmul — weight matrices on the GPU: dequantisation, the decode matrix-vector kernel (also
// indexed by expert for MoE decode), and the prefill GEMM (dequantise a chunk of rows to F16 /
// BF16, then cuBLAS GemmEx with f32 accumulation). Contracts in kcuda.h.
//
// Matrix-vector layout: one warp per weight row, four rows per block. The warp walks the row in
// chunks of 256 elements, lane l taking elements [8l, 8l+8) of each chunk (kc__deq8), and
// multiplies them with up to NT tokens at once, so a weight row is read from memory once for
// all tokens of a decode batch. Partial sums meet in a warp shuffle reduction.
#include "kcuda_impl.cuh" // defines: kc__deq8, KC_TYPE_SWITCH, struct kc_stream

#define MV_ROWS 4 /* warps (rows) per block */

/* Dot products of one weight row with NT activation rows; lane sums reduced, lane 0 stores. */
template <int TYPE, int NT>
__device__ __forceinline__ void mv_row(const uint8_t *row, int64_t n, const float *x,
                                       int64_t x_stride, int nt, float *y, int64_t y_stride)
{
    const int lane = threadIdx.x & 31;
    float acc[NT];
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    for (int64_t e0 = 8 * lane; e0 < n; e0 += 256) {
        float w[8];
        if (kc__blk<TYPE>::qk > 1 || e0 + 8 <= n) {
            kc__deq8<TYPE>(row, e0, w);
            for (int t = 0; t < NT; t++) {
                if (t >= nt)
                    break;
                const float *xt = x + t * x_stride + e0;
                float a = 0.0f;
                for (int i = 0; i < 8; i++)
                    a += w[i] * xt[i];
                acc[t] += a;
            }
        } else { /* float-type row tail */
            for (int64_t e = e0; e < n; e++) {
                const float wi = kc__deq1<TYPE>(row, e);
                for (int t = 0; t < NT && t < nt; t++)
                    acc[t] += wi * x[t * x_stride + e];
            }
        }
    }
    for (int t = 0; t < NT; t++) {
        if (t >= nt)
            break;
        const float v = kc__warp_sum(acc[t]);
        if (lane == 0)
            y[t * y_stride] = v;
    }
}

template <int TYPE, int NT>
__global__ void k_matvec(const uint8_t *W, size_t row_bytes, int64_t n_in, int64_t n_out,
                         const float *x, int64_t x_stride, int nt, float *y, int64_t y_stride)
{
    const int64_t r = (int64_t)blockIdx.x * MV_ROWS + (threadIdx.x >> 5);
    if (r >= n_out)
        return;
    mv_row<TYPE, NT>(W + r * row_bytes, n_in, x, x_stride, nt, y + r, y_stride);
}

template <int TYPE>
__global__ void k_matvec_ids(const uint8_t *W, size_t row_bytes, size_t expert_bytes, int64_t n_in,
                             int64_t n_out, const int32_t *ids, const float *x, int64_t x_stride,
                             int64_t x_div, float *y, int64_t y_stride)
{
    const int64_t r = (int64_t)blockIdx.x * MV_ROWS + (threadIdx.x >> 5), item = blockIdx.y;
    if (r >= n_out)
        return;
    const uint8_t *row = W + (size_t)ids[item] * expert_bytes + r * row_bytes;
    mv_row<TYPE, 1>(row, n_in, x + (item / x_div) * x_stride, 0, 1, y + item * y_stride + r, 0);
}

template <int TYPE>
static void launch_matvec(kc_stream *s, const struct kc_mat *w, const float *x, int64_t x_stride,
                          int64_t T, float *y, int64_t y_stride)
{
    const dim3 grid(kc__blocks(w->n_out, MV_ROWS)), block(32 * MV_ROWS);
    const uint8_t *W = (const uint8_t *)w->data;
    for (int64_t t0 = 0; t0 < T; t0 += KC_MATVEC_MAX_T) {
        const int nt = (int)(T - t0 < KC_MATVEC_MAX_T ? T - t0 : KC_MATVEC_MAX_T);
        const float *xt = x + t0 * x_stride;
        float *yt = y + t0 * y_stride;
        if (nt == 1)
            k_matvec<TYPE, 1><<<grid, block, 0, s->st>>>(W, w->row_bytes, w->n_in, w->n_out, xt,
                                                         x_stride, nt, yt, y_stride);
        else if (nt == 2)
            k_matvec<TYPE, 2><<<grid, block, 0, s->st>>>(W, w->row_bytes, w->n_in, w->n_out, xt,
                                                         x_stride, nt, yt, y_stride);
        else if (nt <= 4)
            k_matvec<TYPE, 4><<<grid, block, 0, s->st>>>(W, w->row_bytes, w->n_in, w->n_out, xt,
                                                         x_stride, nt, yt, y_stride);
        else
            k_matvec<TYPE, 8><<<grid, block, 0, s->st>>>(W, w->row_bytes, w->n_in, w->n_out, xt,
                                                         x_stride, nt, yt, y_stride);
        KC_LAUNCHED();
    }
}

extern "C" void kc_matvec(kc_stream *s, const struct kc_mat *w, const float *x, int64_t x_stride,
                          int64_t T, float *y, int64_t y_stride)
{
    if (T <= 0 || w->n_out <= 0)
        return;
    KC_TYPE_SWITCH(w->type, launch_matvec, s, w, x, x_stride, T, y, y_stride);
}

template <int TYPE>
static void launch_matvec_ids(kc_stream *s, const struct kc_mat *w, size_t expert_bytes,
                              const int32_t *ids, int64_t n_items, const float *x, int64_t x_stride,
                              int64_t x_div, float *y, int64_t y_stride)
{
    KC_REQUIRE(n_items <= 65535 && x_div >= 1);
    const dim3 grid(kc__blocks(w->n_out, MV_ROWS), (unsigned)n_items), block(32 * MV_ROWS);
    k_matvec_ids<TYPE><<<grid, block, 0, s->st>>>((const uint8_t *)w->data, w->row_bytes,
                                                  expert_bytes, w->n_in, w->n_out, ids, x, x_stride,
                                                  x_div, y, y_stride);
    KC_LAUNCHED();
}

extern "C" void kc_matvec_ids(kc_stream *s, const struct kc_mat *w, size_t expert_bytes,
                              const int32_t *ids, int64_t n_items, const float *x, int64_t x_stride,
                              int64_t x_div, float *y, int64_t y_stride)
{
    if (n_items <= 0 || w->n_out <= 0)
        return;
    KC_TYPE_SWITCH(w->type, launch_matvec_ids, s, w, expert_bytes, ids, n_items, x, x_stride, x_div,
                   y, y_stride);
}

/* ---- dequantisation ---------------------------------------------------------------------- */

template <int OUT> __device__ __forceinline__ void store_as(void *dst, int64_t i, float v);
template <> __device__ __forceinline__ void store_as<KQ_F32>(void *dst, int64_t i, float v)
{
    ((float *)dst)[i] = v;
}
template <> __device__ __forceinline__ void store_as<KQ_F16>(void *dst, int64_t i, float v)
{
    ((__half *)dst)[i] = __float2half_rn(v);
}
template <> __device__ __forceinline__ void store_as<KQ_BF16>(void *dst, int64_t i, float v)
{
    ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v);
}

/* Block (x: chunks of 8 elements, y: row) of threads; dst rows are n contiguous elements. */
template <int TYPE, int OUT>
__global__ void k_dequant(const uint8_t *W, size_t row_bytes, int64_t n, const int32_t *ids,
                          int64_t n_rows, void *dst)
{
    const int64_t r = blockIdx.y + (int64_t)gridDim.y * blockIdx.z;
    const int64_t e0 = 8 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (r >= n_rows || e0 >= n)
        return;
    const uint8_t *row = W + (size_t)(ids ? ids[r] : r) * row_bytes;
    if (kc__blk<TYPE>::qk > 1 || e0 + 8 <= n) {
        float v[8];
        kc__deq8<TYPE>(row, e0, v);
        for (int i = 0; i < 8; i++)
            store_as<OUT>(dst, r * n + e0 + i, v[i]);
    } else {
        for (int64_t e = e0; e < n; e++)
            store_as<OUT>(dst, r * n + e, kc__deq1<TYPE>(row, e));
    }
}

template <int TYPE>
static void launch_dequant(kc_stream *s, const struct kc_mat *w, const int32_t *ids, int64_t n_rows,
                           void *dst, enum kq_type dst_type)
{
    const int64_t chunks = (w->n_in + 7) / 8;
    const int64_t gy = n_rows < 65535 ? n_rows : 65535;
    const dim3 grid(kc__blocks(chunks, 128), (unsigned)gy, (unsigned)((n_rows + gy - 1) / gy));
    const uint8_t *W = (const uint8_t *)w->data;
    if (dst_type == KQ_F32)
        k_dequant<TYPE, KQ_F32>
            <<<grid, 128, 0, s->st>>>(W, w->row_bytes, w->n_in, ids, n_rows, dst);
    else if (dst_type == KQ_F16)
        k_dequant<TYPE, KQ_F16>
            <<<grid, 128, 0, s->st>>>(W, w->row_bytes, w->n_in, ids, n_rows, dst);
    else if (dst_type == KQ_BF16)
        k_dequant<TYPE, KQ_BF16>
            <<<grid, 128, 0, s->st>>>(W, w->row_bytes, w->n_in, ids, n_rows, dst);
    else
        KC_REQUIRE(!"dst_type is F32, F16 or BF16");
    KC_LAUNCHED();
}

extern "C" void kc_dequantize(kc_stream *s, const struct kc_mat *w, const int32_t *ids,
                              int64_t n_rows, void *dst, enum kq_type dst_type)
{
    if (n_rows <= 0 || w->n_in <= 0)
        return;
    KC_TYPE_SWITCH(w->type, launch_dequant, s, w, ids, n_rows, dst, dst_type);
}

/* ---- GEMM ---------------------------------------------------------------------------------- */

/* x [T][x_stride] f32 -> dst [T][n] in 16-bit type OUT. */
template <int OUT>
__global__ void k_act16(const float *x, int64_t x_stride, int64_t n, int64_t T, void *dst)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * T)
        return;
    store_as<OUT>(dst, i, x[(i / n) * x_stride + i % n]);
}

#define GEMM_MIN_ROWS 64

static size_t align256(size_t b)
{
    return (b + 255) / 256 * 256;
}

extern "C" size_t kc_matmul_scratch_bytes(const struct kc_mat *w, int64_t T)
{
    if (w->type == KQ_F32)
        return 0;
    const size_t x16 = align256((size_t)T * w->n_in * 2);
    if (w->type == KQ_F16 || w->type == KQ_BF16)
        return x16;
    const int64_t rows = w->n_out < GEMM_MIN_ROWS ? w->n_out : GEMM_MIN_ROWS;
    return x16 + (size_t)rows * w->n_in * 2;
}

/* y [T][y_stride] (rows r0 .. r0+m) = A^T x, A: m rows of lda elements of type ta (col-major
 * [k x m]), x16: [T][k] of type ta. */
static void gemm_ex(kc_stream *s, const void *A, cudaDataType_t ta, int64_t lda, int64_t m,
                    int64_t k, const void *X, int64_t ldx, int64_t T, float *y, int64_t ldy)
{
    const float one = 1.0f, zero = 0.0f;
    KC_BLAS(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)T, (int)k, &one, A, ta,
                         (int)lda, X, ta, (int)ldx, &zero, y, CUDA_R_32F, (int)ldy,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

extern "C" void kc_gemm(kc_stream *s, const struct kc_mat *w, const float *x, int64_t x_stride,
                        int64_t T, float *y, int64_t y_stride)
{
    if (T <= 0 || w->n_out <= 0)
        return;
    const int64_t n = w->n_in;
    KC_REQUIRE(n > 0 && n < INT32_MAX && T < INT32_MAX && w->n_out < INT32_MAX);
    if (w->type == KQ_F32) {
        KC_REQUIRE(w->row_bytes % 4 == 0);
        gemm_ex(s, w->data, CUDA_R_32F, (int64_t)(w->row_bytes / 4), w->n_out, n, x, x_stride, T, y,
                y_stride);
        return;
    }
    KC_REQUIRE(kc_matmul_scratch_bytes(w, T) <= s->scratch_bytes);
    const bool bf = w->type == KQ_BF16;
    const cudaDataType_t ta = bf ? CUDA_R_16BF : CUDA_R_16F;
    void *x16 = s->scratch;
    const int64_t nx = n * T;
    if (bf)
        k_act16<KQ_BF16><<<kc__blocks(nx, 256), 256, 0, s->st>>>(x, x_stride, n, T, x16);
    else
        k_act16<KQ_F16><<<kc__blocks(nx, 256), 256, 0, s->st>>>(x, x_stride, n, T, x16);
    KC_LAUNCHED();
    if (w->type == KQ_F16 || bf) {
        KC_REQUIRE(w->row_bytes % 2 == 0);
        gemm_ex(s, w->data, ta, (int64_t)(w->row_bytes / 2), w->n_out, n, x16, n, T, y, y_stride);
        return;
    }
    /* quantised: dequantise as many rows as the scratch holds, multiply, next chunk */
    const size_t x16_bytes = align256((size_t)nx * 2);
    uint8_t *wbuf = (uint8_t *)s->scratch + x16_bytes;
    int64_t chunk = (int64_t)((s->scratch_bytes - x16_bytes) / ((size_t)n * 2));
    chunk = chunk > w->n_out ? w->n_out : chunk;
    for (int64_t r0 = 0; r0 < w->n_out; r0 += chunk) {
        const int64_t m = w->n_out - r0 < chunk ? w->n_out - r0 : chunk;
        struct kc_mat part = *w;
        part.data = (const uint8_t *)w->data + r0 * w->row_bytes;
        part.n_out = m;
        kc_dequantize(s, &part, NULL, m, wbuf, KQ_F16);
        gemm_ex(s, wbuf, CUDA_R_16F, n, m, n, x16, n, T, y + r0, y_stride);
    }
}

extern "C" void kc_matmul(kc_stream *s, const struct kc_mat *w, const float *x, int64_t x_stride,
                          int64_t T, float *y, int64_t y_stride)
{
    if (T <= KC_MATVEC_MAX_T)
        kc_matvec(s, w, x, x_stride, T, y, y_stride);
    else
        kc_gemm(s, w, x, x_stride, T, y, y_stride);
}

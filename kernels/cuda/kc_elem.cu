// kc_elem — row-wise and element-wise ops: RMSNorm, L2 norm, the gated norm, NEOX RoPE,
// SwiGLU, sigmoid gates, residual add, embedding gather, argmax (contracts in kcuda.h).
//
// Norms run one block per row and accumulate the sum of squares in double, as the CPU
// reference does. RoPE computes each angle in double exactly as kop_rope_table does. Products
// that the reference computes without FMA use __fmul_rn / __fadd_rn so the results agree to
// the last bit wherever the math library does.
#include "kcuda_impl.cuh" // defines: kc__block_sum_d, kc__silu, kc__deq8, struct kc_stream

#define NORM_THREADS 256

static inline unsigned norm_threads(int64_t n)
{
    return n >= NORM_THREADS ? NORM_THREADS : (unsigned)((n + 31) / 32 * 32);
}

/* Row (blockIdx.x = t * n_head + h): y = x * inv * w (w NULL: no weight). */
__global__ void k_rmsnorm(const float *x, const float *w, float *y, int64_t n_head,
                          int64_t tok_stride, int64_t head_stride, int64_t n, float eps)
{
    const int64_t t = blockIdx.x / n_head, h = blockIdx.x % n_head;
    const float *xr = x + t * tok_stride + h * head_stride;
    float *yr = y + t * tok_stride + h * head_stride;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        ss += (double)xr[i] * xr[i];
    ss = kc__block_sum_d(ss);
    const float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = w ? __fmul_rn(__fmul_rn(xr[i], inv), w[i]) : __fmul_rn(xr[i], inv);
}

extern "C" void kc_rmsnorm(kc_stream *s, const float *x, const float *w, float *y, int64_t n_tok,
                           int64_t n_head, int64_t tok_stride, int64_t head_stride, int64_t n,
                           float eps)
{
    if (n_tok * n_head <= 0)
        return;
    k_rmsnorm<<<(unsigned)(n_tok * n_head), norm_threads(n), 0, s->st>>>(
        x, w, y, n_head, tok_stride, head_stride, n, eps);
    KC_LAUNCHED();
}

__global__ void k_l2norm(float *x, int64_t n_head, int64_t tok_stride, int64_t head_stride,
                         int64_t n, float eps)
{
    const int64_t t = blockIdx.x / n_head, h = blockIdx.x % n_head;
    float *xr = x + t * tok_stride + h * head_stride;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        ss += (double)xr[i] * xr[i];
    ss = kc__block_sum_d(ss);
    const double nrm = sqrt(ss);
    const float inv = (float)(1.0 / (nrm > eps ? nrm : (double)eps));
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        xr[i] = __fmul_rn(xr[i], inv);
}

extern "C" void kc_l2norm(kc_stream *s, float *x, int64_t n_tok, int64_t n_head, int64_t tok_stride,
                          int64_t head_stride, int64_t n, float eps)
{
    if (n_tok * n_head <= 0)
        return;
    k_l2norm<<<(unsigned)(n_tok * n_head), norm_threads(n), 0, s->st>>>(x, n_head, tok_stride,
                                                                        head_stride, n, eps);
    KC_LAUNCHED();
}

__global__ void k_rmsnorm_gate(float *x, const float *w, const float *z, int64_t n, float eps)
{
    float *xr = x + (int64_t)blockIdx.x * n;
    const float *zr = z + (int64_t)blockIdx.x * n;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        ss += (double)xr[i] * xr[i];
    ss = kc__block_sum_d(ss);
    const float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        xr[i] = __fmul_rn(__fmul_rn(__fmul_rn(xr[i], inv), w[i]), kc__silu(zr[i]));
}

extern "C" void kc_rmsnorm_gate(kc_stream *s, float *x, const float *w, const float *z,
                                int64_t n_rows, int64_t n, float eps)
{
    if (n_rows <= 0)
        return;
    k_rmsnorm_gate<<<(unsigned)n_rows, norm_threads(n), 0, s->st>>>(x, w, z, n, eps);
    KC_LAUNCHED();
}

/* Thread per (row, pair i < n_rot / 2): the pair (i, i + n_rot/2) rotated by
 * pos * base^(-2i/n_rot). */
/* ptxas-local: k_rope — the double cos/sin (kept to match the CPU reference bit for bit)
 * take CUDA's slow range reduction for large angles, whose table lives in local memory. */
__global__ void k_rope(float *x, const int32_t *pos, int64_t n_rows, int64_t n_head,
                       int64_t tok_stride, int64_t head_stride, int64_t n_rot, float base)
{
    const int64_t half = n_rot / 2;
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_rows * half)
        return;
    const int64_t row = id / half, i = id % half, t = row / n_head, h = row % n_head;
    float *xr = x + t * tok_stride + h * head_stride;
    const double theta = (double)pos[t] * pow((double)base, -2.0 * (double)i / (double)n_rot);
    const float c = (float)cos(theta), sn = (float)sin(theta);
    const float a = xr[i], b = xr[i + half];
    xr[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, sn));
    xr[i + half] = __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, c));
}

extern "C" void kc_rope_neox(kc_stream *s, float *x, const int32_t *pos, int64_t n_tok,
                             int64_t n_head, int64_t tok_stride, int64_t head_stride, int64_t n_rot,
                             float base)
{
    const int64_t n = n_tok * n_head * (n_rot / 2);
    if (n <= 0)
        return;
    k_rope<<<kc__blocks(n, 256), 256, 0, s->st>>>(x, pos, n_tok * n_head, n_head, tok_stride,
                                                  head_stride, n_rot, base);
    KC_LAUNCHED();
}

/* ptxas-local: k_rope_table — the double cos/sin (as in k_rope) take CUDA's slow range
 * reduction for large angles, whose table lives in local memory. */
/* cs [T][n_rot] from pos [T] (int64); reference: kop_rope_table. */
__global__ void k_rope_table(const int64_t *pos, int64_t T, int64_t n_rot, float base, float *cs)
{
    const int64_t half = n_rot / 2;
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= T * half)
        return;
    const int64_t t = id / half, i = id % half;
    const double theta = (double)pos[t] * pow((double)base, -2.0 * (double)i / (double)n_rot);
    cs[t * n_rot + i] = (float)cos(theta);
    cs[t * n_rot + half + i] = (float)sin(theta);
}

extern "C" void kc_rope_table(kc_stream *s, const int64_t *pos, int64_t T, int64_t n_rot,
                              float base, float *cs)
{
    const int64_t n = T * (n_rot / 2);
    if (n <= 0)
        return;
    k_rope_table<<<kc__blocks(n, 256), 256, 0, s->st>>>(pos, T, n_rot, base, cs);
    KC_LAUNCHED();
}

/* NEOX rotation from the tables cs [n_tok][n_rot]; reference: kop_rope_neox_cs. */
__global__ void k_rope_cs(float *x, const float *cs, int64_t n_rows, int64_t n_head,
                          int64_t tok_stride, int64_t head_stride, int64_t n_rot)
{
    const int64_t half = n_rot / 2;
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_rows * half)
        return;
    const int64_t row = id / half, i = id % half, t = row / n_head, h = row % n_head;
    float *xr = x + t * tok_stride + h * head_stride;
    const float c = cs[t * n_rot + i], sn = cs[t * n_rot + half + i];
    const float a = xr[i], b = xr[i + half];
    xr[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, sn));
    xr[i + half] = __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, c));
}

extern "C" void kc_rope_neox_cs(kc_stream *s, float *x, const float *cs, int64_t n_tok,
                                int64_t n_head, int64_t tok_stride, int64_t head_stride,
                                int64_t n_rot)
{
    const int64_t n = n_tok * n_head * (n_rot / 2);
    if (n <= 0)
        return;
    k_rope_cs<<<kc__blocks(n, 256), 256, 0, s->st>>>(x, cs, n_tok * n_head, n_head, tok_stride,
                                                     head_stride, n_rot);
    KC_LAUNCHED();
}

/* ---- element-wise ------------------------------------------------------------------------- */

enum { EW_SWIGLU, EW_MUL_SIGMOID, EW_SIGMOID, EW_ADD };

template <int OP> __global__ void k_ew(float *a, const float *b, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    if (OP == EW_SWIGLU)
        a[i] = __fmul_rn(kc__silu(a[i]), b[i]);
    else if (OP == EW_MUL_SIGMOID)
        a[i] = __fmul_rn(a[i], kc__sigmoid(b[i]));
    else if (OP == EW_SIGMOID)
        a[i] = kc__sigmoid(a[i]);
    else
        a[i] = __fadd_rn(a[i], b[i]);
}

template <int OP> static void ew(kc_stream *s, float *a, const float *b, int64_t n)
{
    if (n <= 0)
        return;
    k_ew<OP><<<kc__blocks(n, 256), 256, 0, s->st>>>(a, b, n);
    KC_LAUNCHED();
}

extern "C" void kc_swiglu(kc_stream *s, float *g, const float *u, int64_t n)
{
    ew<EW_SWIGLU>(s, g, u, n);
}

extern "C" void kc_mul_sigmoid(kc_stream *s, float *x, const float *g, int64_t n)
{
    ew<EW_MUL_SIGMOID>(s, x, g, n);
}

extern "C" void kc_sigmoid(kc_stream *s, float *x, int64_t n)
{
    ew<EW_SIGMOID>(s, x, NULL, n);
}

extern "C" void kc_add(kc_stream *s, float *y, const float *x, int64_t n)
{
    ew<EW_ADD>(s, y, x, n);
}

/* ---- the BF16 wire format of the allreduce -------------------------------------------------- */

__global__ void k_to_bf16(const float *src, uint16_t *dst, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const uint32_t u = __float_as_uint(src[i]);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and NaN */
        dst[i] = (uint16_t)((u >> 16) | 0x40u);
    else /* round to nearest even, as kq_f32_to_bf16 */
        dst[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void k_from_bf16(const uint16_t *src, float *dst, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        dst[i] = __uint_as_float((uint32_t)src[i] << 16);
}

extern "C" void kc_f32_to_bf16_on(void *stream, const float *src, uint16_t *dst, int64_t n)
{
    if (n <= 0)
        return;
    k_to_bf16<<<kc__blocks(n, 256), 256, 0, (cudaStream_t)stream>>>(src, dst, n);
    KC_LAUNCHED();
}

extern "C" void kc_bf16_to_f32_on(void *stream, const uint16_t *src, float *dst, int64_t n)
{
    if (n <= 0)
        return;
    k_from_bf16<<<kc__blocks(n, 256), 256, 0, (cudaStream_t)stream>>>(src, dst, n);
    KC_LAUNCHED();
}

/* ---- embedding, argmax -------------------------------------------------------------------- */

extern "C" void kc_embed(kc_stream *s, const struct kc_mat *w, const int32_t *ids, int64_t T,
                         float *out)
{
    kc_dequantize(s, w, ids, T, out, KQ_F32);
}

/* Block per row: each thread its best (value, index), then a shared-memory tree; with mass,
 * a second pass sums exp(x - best) per thread, then a tree of the partial sums. */
__global__ void k_argmax(const float *x, int64_t n, int32_t *out, float *mass)
{
    __shared__ float bv[256];
    __shared__ int64_t bi[256];
    const float *xr = x + (int64_t)blockIdx.x * n;
    float best = -INFINITY;
    int64_t idx = -1;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i];
        if (v > best || (idx < 0 && v == best)) /* -inf rows still pick index 0; NaN never */
            best = v, idx = i;
    }
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
            const float v = bv[threadIdx.x + w];
            const int64_t j = bi[threadIdx.x + w];
            const int64_t k = bi[threadIdx.x];
            if (j >= 0 && (k < 0 || v > bv[threadIdx.x] || (v == bv[threadIdx.x] && j < k)))
                bv[threadIdx.x] = v, bi[threadIdx.x] = j;
        }
        __syncthreads();
    }
    const int64_t top = bi[0] < 0 ? 0 : bi[0];
    const float mx = xr[top];
    __syncthreads(); /* every thread has read bi[0] before bv is reused */
    if (threadIdx.x == 0)
        out[blockIdx.x] = (int32_t)top;
    if (!mass)
        return;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        sum += expf(xr[i] - mx);
    bv[threadIdx.x] = sum;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            bv[threadIdx.x] += bv[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        mass[blockIdx.x] = bv[0];
}

extern "C" void kc_argmax(kc_stream *s, const float *x, int64_t T, int64_t n, int32_t *out,
                          float *mass)
{
    if (T <= 0)
        return;
    k_argmax<<<(unsigned)T, 256, 0, s->st>>>(x, n, out, mass);
    KC_LAUNCHED();
}

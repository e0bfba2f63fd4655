/*
 * ops_avx512 — AVX-512 versions of the f32 ops (contracts in ops.h, dispatch in ops.c). Built
 * with the Makefile's AVX512_FLAGS; ops.c calls these only when kq_isa_active() is AVX-512.
 *
 * Each keeps the reference's order of operations per output element and vectorises across
 * elements (16 lanes), so results differ from ops.c only where a sum is split across lanes
 * (dot products, norms: the latter in double), in fused multiply-adds, and in exp, which is the
 * Cephes polynomial (within 2 ulp of expf). Tails shorter than 16 use masked loads and stores.
 *
 * Threads: pure functions; any number may call concurrently on disjoint outputs.
 */
#include "ops_impl.h" // defines: kop__avx512_*

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))
#ifdef __clang__
#define UNROLL _Pragma("unroll")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

/* ================================ helpers =================================================== */

/* Lanes [0, n) of 16 (n >= 16: all). */
INLINE __mmask16 lanes(int64_t n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* exp(x): Cody-Waite reduction by ln 2, the Cephes expf polynomial, scaling by 2^n with
 * vscalefps (which also gives inf / 0 past the ends, as expf does). */
INLINE __m512 exp512(__m512 x)
{
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* x / (1 + exp(-x)), as kop_silu. */
INLINE __m512 silu512(__m512 x)
{
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* 1 / (1 + exp(-x)), as kop_sigmoid. */
INLINE __m512 sigmoid512(__m512 x)
{
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* sum of x[i]^2 in double. */
static double sumsq(const float *x, int64_t n)
{
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(lanes(n - i), x + i);
        const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

/* ================================ norms and activations ==================================== */

void kop__avx512_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps)
{
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sqrt(sumsq(x, n) / (double)n + eps)));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv);
        if (w)
            v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

void kop__avx512_l2norm(float *x, int64_t n, float eps)
{
    const double nrm = sqrt(sumsq(x, n));
    const __m512 inv = _mm512_set1_ps((float)(1.0 / (nrm > eps ? nrm : eps)));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
}

void kop__avx512_rmsnorm_gate(float *x, const float *w, const float *z, int64_t n, float eps)
{
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sqrt(sumsq(x, n) / (double)n + eps)));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(n - i);
        const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv),
                                       _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(v, silu512(_mm512_maskz_loadu_ps(m, z + i))));
    }
}

void kop__avx512_swiglu(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(n - i);
        const __m512 s = silu512(_mm512_maskz_loadu_ps(m, g + i));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i)));
    }
}

void kop__avx512_mul_sigmoid(float *x, const float *g, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(n - i);
        const __m512 s = sigmoid512(_mm512_maskz_loadu_ps(m, g + i));
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s));
    }
}

/* ================================ attention ================================================= */

/* q . k over d = 16 nv floats, in four chains (a fixed order, whatever the caller). */
INLINE float dot16(const float *q, const float *k, int64_t nv)
{
    __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    for (int64_t j = 0; j < nv; j++)
        a[j & 3] = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * j), _mm512_loadu_ps(k + 16 * j), a[j & 3]);
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

/* sc[0..n) = exp(sc - max) in place; returns 1 / sum (the sum in double, as the reference). */
static float softmax_exp(float *sc, int64_t n)
{
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t s = 0; s < n; s += 16)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), lanes(n - s), sc + s));
    const __m512 vmx = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int64_t s = 0; s < n; s += 16) {
        const __mmask16 m = lanes(n - s);
        const __m512 e = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + s), vmx)));
        _mm512_mask_storeu_ps(sc + s, m, e);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return (float)(1.0 / _mm512_reduce_add_pd(_mm512_add_pd(a0, a1)));
}

/*
 * Three passes: scores of every head against each K row (the row read once for the group),
 * softmax per head, then out_g += p_g,s v_s with each V row read once for the group. The
 * per-head arithmetic does not depend on n_q.
 */
void kop__avx512_attn_group(const float *q, int64_t q_stride, int64_t n_q, const float *k,
                            const float *v, int64_t kv_stride, int64_t n_kv, int64_t d,
                            float scale, float *scratch, float *out, int64_t out_stride)
{
    const int64_t nv = d / 16;
    for (int64_t s = 0; s < n_kv; s++)
        for (int64_t g = 0; g < n_q; g++)
            scratch[g * n_kv + s] = dot16(q + g * q_stride, k + s * kv_stride, nv) * scale;
    float inv[64]; /* n_q <= 64: query heads per KV head */
    for (int64_t g = 0; g < n_q; g++) {
        inv[g] = softmax_exp(scratch + g * n_kv, n_kv);
        memset(out + g * out_stride, 0, (size_t)d * sizeof(float));
    }
    for (int64_t s = 0; s < n_kv; s++) {
        const float *vs = v + s * kv_stride;
        for (int64_t g = 0; g < n_q; g++) {
            const __m512 p = _mm512_set1_ps(scratch[g * n_kv + s] * inv[g]);
            float *o = out + g * out_stride;
            for (int64_t j = 0; j < nv; j++)
                _mm512_storeu_ps(o + 16 * j, _mm512_fmadd_ps(p, _mm512_loadu_ps(vs + 16 * j),
                                                             _mm512_loadu_ps(o + 16 * j)));
        }
    }
}

/* ================================ causal conv1d ============================================= */

/* Input row t of the virtual matrix [state ; u] (t < K-1 reads the state). */
INLINE const float *conv_row(const float *state, const float *u, int64_t C, int64_t K, int64_t t)
{
    return t < K - 1 ? state + t * C : u + (t - (K - 1)) * C;
}

/* 16 channels at a time; their K taps are gathered once (w is channel-major), then every token
 * sums its K rows in tap order. K <= 16 (checked at model load). */
void kop__avx512_conv1d_silu(const float *state, const float *u, const float *w, int64_t T,
                             int64_t C, int64_t K, int64_t c0, int64_t c1, float *y)
{
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                             12, 13, 14, 15),
                                           _mm512_set1_epi32((int)K));
    for (int64_t c = c0; c < c1; c += 16) {
        const __mmask16 m = lanes(c1 - c);
        __m512 tap[16];
        for (int64_t j = 0; j < K; j++)
            tap[j] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m,
                                              _mm512_add_epi32(idx, _mm512_set1_epi32((int)j)),
                                              w + c * K, 4);
        for (int64_t t = 0; t < T; t++) {
            __m512 acc = _mm512_setzero_ps();
            for (int64_t j = 0; j < K; j++)
                acc = _mm512_fmadd_ps(tap[j], _mm512_maskz_loadu_ps(m, conv_row(state, u, C, K, t + j) + c),
                                      acc);
            _mm512_mask_storeu_ps(y + t * C + c, m, silu512(acc));
        }
    }
}

/* ================================ gated delta rule ========================================== */

/*
 * The reference's two passes with a row of the state as NV vectors, kept in registers: pass 1
 * decays row i into M and accumulates k_i * row into kM; pass 2 adds k_i delta and accumulates
 * q_i * row into the output. NV is a compile-time constant at every call, so the loops over j
 * unroll and kM, delta and the output stay in registers.
 */
INLINE void gdn_rows(float *M, const float *M_in, const float *q, const float *k, const float *v,
                     float decay, float beta, float scale, int64_t S, float *out, const int NV)
{
    __m512 acc[16], delta[16];
    const __m512 vd = _mm512_set1_ps(decay);
    UNROLL for (int j = 0; j < NV; j++)
        acc[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < S; i++) {
        const __m512 ki = _mm512_set1_ps(k[i]);
        UNROLL for (int j = 0; j < NV; j++) {
            const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(M_in + i * S + 16 * j), vd);
            _mm512_storeu_ps(M + i * S + 16 * j, r);
            acc[j] = _mm512_fmadd_ps(ki, r, acc[j]);
        }
    }
    const __m512 vb = _mm512_set1_ps(beta);
    UNROLL for (int j = 0; j < NV; j++) {
        delta[j] = _mm512_mul_ps(vb, _mm512_sub_ps(_mm512_loadu_ps(v + 16 * j), acc[j]));
        acc[j] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < S; i++) {
        const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
        UNROLL for (int j = 0; j < NV; j++) {
            const __m512 r = _mm512_fmadd_ps(ki, delta[j], _mm512_loadu_ps(M + i * S + 16 * j));
            _mm512_storeu_ps(M + i * S + 16 * j, r);
            acc[j] = _mm512_fmadd_ps(qi, r, acc[j]);
        }
    }
    const __m512 vs = _mm512_set1_ps(scale);
    UNROLL for (int j = 0; j < NV; j++)
        _mm512_storeu_ps(out + 16 * j, _mm512_mul_ps(acc[j], vs));
}

/* Any S % 16 == 0 up to 256: column blocks of 16, each a pass of its own over the rows. */
static void gdn_cols(float *M, const float *M_in, const float *q, const float *k, const float *v,
                     float decay, float beta, float scale, int64_t S, float *out)
{
    const __m512 vd = _mm512_set1_ps(decay), vb = _mm512_set1_ps(beta);
    for (int64_t j = 0; j < S; j += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < S; i++) {
            const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(M_in + i * S + j), vd);
            _mm512_storeu_ps(M + i * S + j, r);
            acc = _mm512_fmadd_ps(_mm512_set1_ps(k[i]), r, acc);
        }
        const __m512 delta = _mm512_mul_ps(vb, _mm512_sub_ps(_mm512_loadu_ps(v + j), acc));
        acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < S; i++) {
            const __m512 r = _mm512_fmadd_ps(_mm512_set1_ps(k[i]), delta,
                                             _mm512_loadu_ps(M + i * S + j));
            _mm512_storeu_ps(M + i * S + j, r);
            acc = _mm512_fmadd_ps(_mm512_set1_ps(q[i]), r, acc);
        }
        _mm512_storeu_ps(out + j, _mm512_mul_ps(acc, _mm512_set1_ps(scale)));
    }
}

void kop__avx512_gdn_step(float *M, const float *M_in, const float *q, const float *k,
                          const float *v, float decay, float beta, float scale, int64_t S,
                          float *out)
{
    switch (S) {
    case 64: gdn_rows(M, M_in, q, k, v, decay, beta, scale, S, out, 4); break;
    case 128: gdn_rows(M, M_in, q, k, v, decay, beta, scale, S, out, 8); break;
    default: gdn_cols(M, M_in, q, k, v, decay, beta, scale, S, out); break;
    }
}

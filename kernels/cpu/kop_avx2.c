/*
 * kop_avx2 — AVX2 + FMA versions of the f32 ops (contracts in kop.h, dispatch in kop.c): norms,
 * activations, attention, the causal conv and the gated delta rule. Built with the Makefile's
 * AVX2_FLAGS; kop.c calls these when kq_isa_active() is AVX2 (an AVX-512 CPU runs
 * kop_avx512.c instead).
 *
 * As in kop_avx512.c, each keeps the reference's order of operations per output element and
 * vectorises across elements (8 lanes), so results differ from kop.c only where a sum is split
 * across lanes (the attention scores), in fused multiply-adds, and in exp (the Cephes
 * polynomial, within 2 ulp of expf).
 *
 * Threads: pure functions; any number may call concurrently on disjoint outputs.
 */
#include "kop_impl.h" // defines: kop__avx2_*
#include "simd_avx2.h" // defines: INLINE, UNROLL, hsum_ps, hmax_ps

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ================================ helpers =================================================== */

/* exp(x): Cody-Waite reduction by ln 2, the Cephes expf polynomial, then 2^n built in the
 * exponent field as two factors 2^h * 2^(n-h), so that n from -150 to 128 stays exact and the
 * ends round to 0 / overflow to inf as expf does (x is clamped to [-104, 89] first). */
INLINE __m256 exp256(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i ni = _mm256_cvtps_epi32(n), h = _mm256_srai_epi32(ni, 1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* x / (1 + exp(-x)), as kop_silu. */
INLINE __m256 silu256(__m256 x)
{
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* 1 / (1 + exp(-x)), as kop_sigmoid. */
INLINE __m256 sigmoid256(__m256 x)
{
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

INLINE double hsum_pd(__m256d v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* Lanes [0, n) of 8 as a mask for maskload / maskstore (n >= 8: all). */
INLINE __m256i lanes(int64_t n)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n >= 8 ? 8 : (int)n), idx);
}

/* sum of x[i]^2 in double (the reference's accumulation type). */
static double sumsq(const float *x, int64_t n)
{
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 v = _mm256_maskload_ps(x + i, lanes(n - i));
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        a0 = _mm256_fmadd_pd(lo, lo, a0);
        a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    return hsum_pd(_mm256_add_pd(a0, a1));
}

/* ================================ norms and activations ==================================== */

void kop__avx2_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps)
{
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sqrt(sumsq(x, n) / (double)n + eps)));
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = lanes(n - i);
        __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv);
        if (w)
            v = _mm256_mul_ps(v, _mm256_maskload_ps(w + i, m));
        _mm256_maskstore_ps(y + i, m, v);
    }
}

void kop__avx2_l2norm(float *x, int64_t n, float eps)
{
    const double nrm = sqrt(sumsq(x, n));
    const __m256 inv = _mm256_set1_ps((float)(1.0 / (nrm > eps ? nrm : eps)));
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = lanes(n - i);
        _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
    }
}

void kop__avx2_rmsnorm_gate(float *x, const float *w, const float *z, int64_t n, float eps)
{
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sqrt(sumsq(x, n) / (double)n + eps)));
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = lanes(n - i);
        const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv),
                                       _mm256_maskload_ps(w + i, m));
        _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(v, silu256(_mm256_maskload_ps(z + i, m))));
    }
}

void kop__avx2_swiglu(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = lanes(n - i);
        const __m256 s = silu256(_mm256_maskload_ps(g + i, m));
        _mm256_maskstore_ps(g + i, m, _mm256_mul_ps(s, _mm256_maskload_ps(u + i, m)));
    }
}

void kop__avx2_mul_sigmoid(float *x, const float *g, int64_t n)
{
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = lanes(n - i);
        const __m256 s = sigmoid256(_mm256_maskload_ps(g + i, m));
        _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), s));
    }
}

/* y += a x and y += x as kop.c does them: a multiply, then an add (no FMA), so the same bits. */
void kop__avx2_axpy(float *y, float a, const float *x, int64_t n)
{
    const __m256 va = _mm256_set1_ps(a);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = lanes(n - i);
        const __m256 p = _mm256_mul_ps(va, _mm256_maskload_ps(x + i, m));
        _mm256_maskstore_ps(y + i, m, _mm256_add_ps(_mm256_maskload_ps(y + i, m), p));
    }
}

void kop__avx2_add(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = lanes(n - i);
        const __m256 v = _mm256_add_ps(_mm256_maskload_ps(y + i, m), _mm256_maskload_ps(x + i, m));
        _mm256_maskstore_ps(y + i, m, v);
    }
}

/* ================================ attention ================================================= */

/* Positions per block of the scores and of the weighted sum (a multiple of 8): the block's K
 * rows stay in L1 across the group's heads, its V rows in L2 across the slices of the head. */
#define ATTN_SBLK 64

/* r lane i = the sum of the 8 lanes of v[i]: a transpose-and-add tree in which no two sources
 * mix. */
INLINE __m256 sum8(__m256 v[8])
{
    __m256 a[4], b[2];
    UNROLL for (int i = 0; i < 4; i++) /* per 128-bit lane: [x0+x2, y0+y2, x1+x3, y1+y3] */
        a[i] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    UNROLL for (int i = 0; i < 2; i++) /* per 128-bit lane: one partial of each of 4 sources */
        b[i] = _mm256_add_ps(_mm256_shuffle_ps(a[2 * i], a[2 * i + 1], 0x44),
                             _mm256_shuffle_ps(a[2 * i], a[2 * i + 1], 0xee));
    return _mm256_add_ps(_mm256_permute2f128_ps(b[0], b[1], 0x20),
                         _mm256_permute2f128_ps(b[0], b[1], 0x31));
}

/* sc[i] = q . k_i * scale for 8 K rows k_i = k + i * stride (lanes past n store nothing): one
 * product chain per row over the head, then sum8; a row's score depends only on q and it. */
INLINE void scores8(const float *q, const float *k, int64_t stride, int64_t n, int64_t d,
                    float scale, float *sc)
{
    __m256 acc[8];
    UNROLL for (int i = 0; i < 8; i++)
        acc[i] = _mm256_setzero_ps();
    for (int64_t j = 0; j < d; j += 8) {
        const __m256 qj = _mm256_loadu_ps(q + j);
        UNROLL for (int i = 0; i < 8; i++)
            acc[i] = _mm256_fmadd_ps(qj, _mm256_loadu_ps(k + i * stride + j), acc[i]);
    }
    _mm256_maskstore_ps(sc, lanes(n), _mm256_mul_ps(sum8(acc), _mm256_set1_ps(scale)));
}

/* Scores of positions [0, n_kv) into sc; a last partial block goes through a copy of its rows
 * (padded with the last one), so every position runs the same arithmetic. */
static void scores(const float *q, const float *k, int64_t kv_stride, int64_t n_kv, int64_t d,
                   float scale, float *sc)
{
    int64_t s0 = 0;
    for (; s0 + 8 <= n_kv; s0 += 8)
        scores8(q, k + s0 * kv_stride, kv_stride, 8, d, scale, sc + s0);
    if (s0 < n_kv) {
        _Alignas(32) float rows[8 * 512]; /* d <= 512 */
        for (int64_t i = 0; i < 8; i++)
            memcpy(rows + i * d, k + (s0 + i < n_kv ? s0 + i : n_kv - 1) * kv_stride,
                   (size_t)d * sizeof(float));
        scores8(q, rows, d, n_kv - s0, d, scale, sc + s0);
    }
}

/* sc[0..n) = exp(sc - max) / sum in place (the sum in double, as the reference; each weight is
 * then exp * (1 / sum), the reference's rounding). */
static void softmax(float *sc, int64_t n)
{
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int64_t s = 0;
    for (; s + 8 <= n; s += 8)
        mx = _mm256_max_ps(mx, _mm256_loadu_ps(sc + s));
    float m = hmax_ps(mx);
    for (int64_t i = s; i < n; i++)
        m = sc[i] > m ? sc[i] : m;
    const __m256 vmx = _mm256_set1_ps(m);
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    for (s = 0; s < n; s += 8) {
        const __m256i msk = lanes(n - s);
        const __m256 x = _mm256_sub_ps(_mm256_maskload_ps(sc + s, msk), vmx);
        const __m256 e = _mm256_and_ps(exp256(x), _mm256_castsi256_ps(msk));
        _mm256_maskstore_ps(sc + s, msk, e);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    const __m256 inv = _mm256_set1_ps((float)(1.0 / hsum_pd(_mm256_add_pd(a0, a1))));
    for (s = 0; s < n; s += 8) {
        const __m256i msk = lanes(n - s);
        _mm256_maskstore_ps(sc + s, msk, _mm256_mul_ps(_mm256_maskload_ps(sc + s, msk), inv));
    }
}

/* out_g[16c .. 16c + 15] += p_g,s v_s for the n_q (<= 6) heads and positions [s0, s1): two
 * vectors of every head in registers, so each V row slice is loaded once for the group. */
INLINE void attn_pv_chunk(const float *p, int64_t n_kv, int64_t n_q, const float *v,
                          int64_t kv_stride, int64_t s0, int64_t s1, int64_t c, float *out,
                          int64_t out_stride)
{
    __m256 acc[6][2];
    for (int64_t g = 0; g < n_q; g++) {
        acc[g][0] = _mm256_loadu_ps(out + g * out_stride + 16 * c);
        acc[g][1] = _mm256_loadu_ps(out + g * out_stride + 16 * c + 8);
    }
    for (int64_t s = s0; s < s1; s++) {
        const __m256 v0 = _mm256_loadu_ps(v + s * kv_stride + 16 * c);
        const __m256 v1 = _mm256_loadu_ps(v + s * kv_stride + 16 * c + 8);
        UNROLL for (int g = 0; g < 6; g++) {
            if (g >= n_q)
                break;
            const __m256 pg = _mm256_broadcast_ss(p + g * n_kv + s);
            acc[g][0] = _mm256_fmadd_ps(pg, v0, acc[g][0]);
            acc[g][1] = _mm256_fmadd_ps(pg, v1, acc[g][1]);
        }
    }
    for (int64_t g = 0; g < n_q; g++) {
        _mm256_storeu_ps(out + g * out_stride + 16 * c, acc[g][0]);
        _mm256_storeu_ps(out + g * out_stride + 16 * c + 8, acc[g][1]);
    }
}

/*
 * The three passes of kop__avx512_attn_group with 8 lanes: scores of every head against blocks
 * of 8 K rows, softmax per head, then out_g = sum_s p_g,s v_s with each V row read once per 6
 * heads, by blocks of positions and 16-wide slices of the head. Every output lane sums its
 * positions in order with one FMA each, so the per-head arithmetic does not depend on n_q.
 */
void kop__avx2_attn_group(const float *q, int64_t q_stride, int64_t n_q, const float *k,
                          const float *v, int64_t kv_stride, int64_t n_kv, int64_t d, float scale,
                          float *scratch, float *out, int64_t out_stride)
{
    for (int64_t s0 = 0; s0 < n_kv; s0 += ATTN_SBLK) { /* the block's K rows stay in L1/L2 */
        const int64_t n = n_kv - s0 < ATTN_SBLK ? n_kv - s0 : ATTN_SBLK;
        for (int64_t g = 0; g < n_q; g++)
            scores(q + g * q_stride, k + s0 * kv_stride, kv_stride, n, d, scale,
                   scratch + g * n_kv + s0);
    }
    for (int64_t g = 0; g < n_q; g++) {
        softmax(scratch + g * n_kv, n_kv);
        memset(out + g * out_stride, 0, (size_t)d * sizeof(float));
    }
    for (int64_t g0 = 0; g0 < n_q; g0 += 6) {
        const int64_t ng = n_q - g0 < 6 ? n_q - g0 : 6;
        const float *p = scratch + g0 * n_kv;
        float *o = out + g0 * out_stride;
        for (int64_t s0 = 0; s0 < n_kv; s0 += ATTN_SBLK) {
            const int64_t s1 = s0 + ATTN_SBLK < n_kv ? s0 + ATTN_SBLK : n_kv;
            for (int64_t c = 0; c < d / 16; c++)
                attn_pv_chunk(p, n_kv, ng, v, kv_stride, s0, s1, c, o, out_stride);
            if (d % 16) /* a last 8-wide slice: the same sums, one vector per head */
                for (int64_t s = s0; s < s1; s++)
                    for (int64_t g = 0; g < ng; g++) {
                        float *og = o + g * out_stride + d - 8;
                        const __m256 pg = _mm256_broadcast_ss(p + g * n_kv + s);
                        const __m256 vs = _mm256_loadu_ps(v + s * kv_stride + d - 8);
                        _mm256_storeu_ps(og, _mm256_fmadd_ps(pg, vs, _mm256_loadu_ps(og)));
                    }
        }
    }
}

/* ================================ causal conv1d ============================================= */

/* Input row t of the virtual matrix [state ; u] (t < K-1 reads the state). */
INLINE const float *conv_row(const float *state, const float *u, int64_t C, int64_t K, int64_t t)
{
    return t < K - 1 ? state + t * C : u + (t - (K - 1)) * C;
}

/* 8 channels at a time; their K taps are gathered once (w is channel-major), then every token
 * sums its K rows in tap order. K <= 16 (checked at model load). */
void kop__avx2_conv1d_silu(const float *state, const float *u, const float *w, int64_t T,
                           int64_t C, int64_t K, int64_t c0, int64_t c1, float *y)
{
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32((int)K));
    for (int64_t c = c0; c < c1; c += 8) {
        const __m256i m = lanes(c1 - c);
        __m256 tap[16];
        for (int64_t j = 0; j < K; j++)
            tap[j] = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), w + c * K,
                                              _mm256_add_epi32(idx, _mm256_set1_epi32((int)j)),
                                              _mm256_castsi256_ps(m), 4);
        for (int64_t t = 0; t < T; t++) {
            __m256 acc = _mm256_setzero_ps();
            for (int64_t j = 0; j < K; j++) {
                const float *row = conv_row(state, u, C, K, t + j) + c;
                acc = _mm256_fmadd_ps(tap[j], _mm256_maskload_ps(row, m), acc);
            }
            _mm256_maskstore_ps(y + t * C + c, m, silu256(acc));
        }
    }
}

/* ================================ gated delta rule ========================================== */

/*
 * Columns [j, j + 8 NV) of the reference's two passes, the slice of the state (S rows of 32 NV
 * bytes) staying in L1 between them. Pass 1 only reads: kM = sum_i k_i (decay M_in[i]); pass 2
 * recomputes decay M_in[i], adds k_i delta, stores the row and accumulates q_i row. The rounding
 * is that of kop__avx512_gdn_step (decay product, then one FMA), and M may equal M_in.
 */
INLINE void gdn_slice(int NV, float *M, const float *M_in, const float *q, const float *k,
                      const float *v, float decay, float beta, float scale, int64_t S, int64_t j,
                      float *out)
{
    __m256 acc[4], delta[4];
    const __m256 vd = _mm256_set1_ps(decay);
    UNROLL for (int c = 0; c < NV; c++)
        acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < S; i++) {
        const __m256 ki = _mm256_broadcast_ss(k + i);
        UNROLL for (int c = 0; c < NV; c++) {
            const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(M_in + i * S + j + 8 * c), vd);
            acc[c] = _mm256_fmadd_ps(ki, r, acc[c]);
        }
    }
    const __m256 vb = _mm256_set1_ps(beta);
    UNROLL for (int c = 0; c < NV; c++) {
        delta[c] = _mm256_mul_ps(vb, _mm256_sub_ps(_mm256_loadu_ps(v + j + 8 * c), acc[c]));
        acc[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < S; i++) {
        const __m256 ki = _mm256_broadcast_ss(k + i), qi = _mm256_broadcast_ss(q + i);
        UNROLL for (int c = 0; c < NV; c++) {
            const __m256 d = _mm256_mul_ps(_mm256_loadu_ps(M_in + i * S + j + 8 * c), vd);
            const __m256 r = _mm256_fmadd_ps(ki, delta[c], d);
            _mm256_storeu_ps(M + i * S + j + 8 * c, r);
            acc[c] = _mm256_fmadd_ps(qi, r, acc[c]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
    UNROLL for (int c = 0; c < NV; c++)
        _mm256_storeu_ps(out + j + 8 * c, _mm256_mul_ps(acc[c], vs));
}

void kop__avx2_gdn_step(float *M, const float *M_in, const float *q, const float *k,
                        const float *v, float decay, float beta, float scale, int64_t S,
                        float *out)
{
    int64_t j = 0;
    for (; j + 32 <= S; j += 32)
        gdn_slice(4, M, M_in, q, k, v, decay, beta, scale, S, j, out);
    for (; j < S; j += 8)
        gdn_slice(1, M, M_in, q, k, v, decay, beta, scale, S, j, out);
}

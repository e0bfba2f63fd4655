/*
 * kop_avx512 — AVX-512 versions of the f32 ops (contracts in kop.h, dispatch in kop.c). Built
 * with the Makefile's AVX512_FLAGS; kop.c calls these only when kq_isa_active() is AVX-512.
 *
 * Each keeps the reference's order of operations per output element and vectorises across
 * elements (16 lanes), so results differ from kop.c only where a sum is split across lanes
 * (dot products, norms: the latter in double), in fused multiply-adds, and in exp, which is the
 * Cephes polynomial (within 2 ulp of expf). Tails shorter than 16 use masked loads and stores.
 *
 * Threads: pure functions; any number may call concurrently on disjoint outputs.
 */
#include "kop_impl.h" // defines: kop__avx512_*
#define SIMD_UNROLL_MAX 16
#include "simd.h" // defines: INLINE, UNROLL

#include <immintrin.h>
#include <math.h>
#include <string.h>

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

/* The upper 8 floats of v as 8 doubles. */
INLINE __m512d hi_pd(__m512 v)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* sum of x[i]^2 in double. */
static double sumsq(const float *x, int64_t n)
{
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(lanes(n - i), x + i);
        const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        const __m512d hi = hi_pd(v);
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

/* y += a x and y += x as kop.c does them: a multiply, then an add (no FMA), so the same bits. */
void kop__avx512_axpy(float *y, float a, const float *x, int64_t n)
{
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(n - i);
        const __m512 p = _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, x + i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), p));
    }
}

void kop__avx512_add(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i),
                                                      _mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* ================================ attention ================================================= */

/* Positions per block of the scores and of the weighted sum (a multiple of 16): the block's K
 * rows stay in L1 across the group's heads, its V rows in L2 across the passes over the head. */
#define ATTN_SBLK 64

/* Ask for the d floats of rows [s0, s0 + ATTN_SBLK) (the next block) into L2 ahead of use:
 * the K/V rows are strided, and a pass reads only part of each row, so the hardware prefetch
 * does not run ahead of the block loops. */
static void prefetch_rows(const float *x, int64_t stride, int64_t s0, int64_t n, int64_t d)
{
    const int64_t s1 = s0 + ATTN_SBLK < n ? s0 + ATTN_SBLK : n;
    for (int64_t s = s0; s < s1; s++)
        for (int64_t i = 0; i < d; i += 16)
            _mm_prefetch((const char *)(x + s * stride + i), _MM_HINT_T1);
}

/* r lane block b (4 lanes) = the lane sums of v[4b .. 4b + 3]: lane i of r = sum of v[i]'s
 * 16 lanes. A tree of in-register shuffles and adds in which no two sources ever mix. */
INLINE __m512 sum16(__m512 v[16])
{
    __m512 a[8], b[4], c[2];
    UNROLL for (int i = 0; i < 8; i++) /* per 128-bit lane: [x0+x2, y0+y2, x1+x3, y1+y3] */
        a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    UNROLL for (int i = 0; i < 4; i++) /* per 128-bit lane: one partial of 4 sources */
        b[i] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], 0xee));
    UNROLL for (int i = 0; i < 2; i++) /* [x.l0+l1, x.l2+l3, y.l0+l1, y.l2+l3] */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88),
                         _mm512_shuffle_f32x4(c[0], c[1], 0xdd));
}

/*
 * sc[i] = q . k_i * scale for 16 K rows k_i = k + i * stride (lanes past n store nothing): one
 * product chain per row over the head, then sum16. A row's score depends only on q and the
 * row. The rows are addressed from four bases so that nothing spills.
 */
INLINE void scores16(const float *q, const float *k, int64_t stride, int64_t n, int64_t nv,
                     float scale, float *sc)
{
    __m512 acc[16];
    UNROLL for (int i = 0; i < 16; i++)
        acc[i] = _mm512_setzero_ps();
    const float *b0 = k, *b1 = k + 4 * stride, *b2 = k + 8 * stride, *b3 = k + 12 * stride;
    const int64_t s1 = stride, s2 = 2 * stride, s3 = 3 * stride;
    for (int64_t j = 0; j < 16 * nv; j += 16) {
        const __m512 qj = _mm512_loadu_ps(q + j);
        const float *bb[4] = {b0 + j, b1 + j, b2 + j, b3 + j};
        UNROLL for (int r = 0; r < 4; r++) {
            acc[4 * r] = _mm512_fmadd_ps(qj, _mm512_loadu_ps(bb[r]), acc[4 * r]);
            acc[4 * r + 1] = _mm512_fmadd_ps(qj, _mm512_loadu_ps(bb[r] + s1), acc[4 * r + 1]);
            acc[4 * r + 2] = _mm512_fmadd_ps(qj, _mm512_loadu_ps(bb[r] + s2), acc[4 * r + 2]);
            acc[4 * r + 3] = _mm512_fmadd_ps(qj, _mm512_loadu_ps(bb[r] + s3), acc[4 * r + 3]);
        }
    }
    const __m512 r = _mm512_mul_ps(sum16(acc), _mm512_set1_ps(scale));
    _mm512_mask_storeu_ps(sc, lanes(n), r);
}

/* Scores of positions [0, n_kv) into sc; a last partial block goes through a copy of its rows
 * (padded with the last one), so every position runs the same arithmetic. */
static void scores(const float *q, const float *k, int64_t kv_stride, int64_t n_kv, int64_t d,
                   float scale, float *sc)
{
    int64_t s0 = 0;
    for (; s0 + 16 <= n_kv; s0 += 16)
        scores16(q, k + s0 * kv_stride, kv_stride, 16, d / 16, scale, sc + s0);
    if (s0 < n_kv) {
        _Alignas(64) float rows[16 * 512]; /* d <= 512 */
        for (int64_t i = 0; i < 16; i++)
            memcpy(rows + i * d, k + (s0 + i < n_kv ? s0 + i : n_kv - 1) * kv_stride,
                   (size_t)d * sizeof(float));
        scores16(q, rows, d, n_kv - s0, d / 16, scale, sc + s0);
    }
}

/* sc[0..n) = exp(sc - max) / sum in place (the sum in double, as the reference; each weight
 * is then exp * (1 / sum), the reference's rounding). */
static void softmax(float *sc, int64_t n)
{
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t s = 0; s < n; s += 16)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, lanes(n - s), sc + s));
    const __m512 vmx = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int64_t s = 0; s < n; s += 16) {
        const __mmask16 m = lanes(n - s);
        const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + s), vmx);
        const __m512 e = _mm512_maskz_mov_ps(m, exp512(x));
        _mm512_mask_storeu_ps(sc + s, m, e);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        a1 = _mm512_add_pd(a1, hi_pd(e));
    }
    const __m512 inv = _mm512_set1_ps((float)(1.0 / _mm512_reduce_add_pd(_mm512_add_pd(a0, a1))));
    for (int64_t s = 0; s < n; s += 16) {
        const __mmask16 m = lanes(n - s);
        _mm512_mask_storeu_ps(sc + s, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, sc + s), inv));
    }
}


/*
 * out_g[32c .. 32c + 31] += p_g,s v_s for the n_q (<= 8) heads and positions [s0, s1): two
 * vectors of every head in registers, so each V row slice is loaded once for the group.
 */
INLINE void attn_pv_chunk(const float *p, int64_t n_kv, int64_t n_q, const float *v,
                          int64_t kv_stride, int64_t s0, int64_t s1, int64_t c, float *out,
                          int64_t out_stride)
{
    __m512 acc[8][2];
    for (int64_t g = 0; g < n_q; g++) {
        acc[g][0] = _mm512_loadu_ps(out + g * out_stride + 32 * c);
        acc[g][1] = _mm512_loadu_ps(out + g * out_stride + 32 * c + 16);
    }
    for (int64_t s = s0; s < s1; s++) {
        const __m512 v0 = _mm512_loadu_ps(v + s * kv_stride + 32 * c);
        const __m512 v1 = _mm512_loadu_ps(v + s * kv_stride + 32 * c + 16);
        UNROLL for (int g = 0; g < 8; g++) {
            if (g >= n_q)
                break;
            const __m512 pg = _mm512_set1_ps(p[g * n_kv + s]);
            acc[g][0] = _mm512_fmadd_ps(pg, v0, acc[g][0]);
            acc[g][1] = _mm512_fmadd_ps(pg, v1, acc[g][1]);
        }
    }
    for (int64_t g = 0; g < n_q; g++) {
        _mm512_storeu_ps(out + g * out_stride + 32 * c, acc[g][0]);
        _mm512_storeu_ps(out + g * out_stride + 32 * c + 16, acc[g][1]);
    }
}

/*
 * Three passes: scores of every head against blocks of 16 K rows (read once for the group),
 * softmax per head, then out_g = sum_s p_g,s v_s with each V row read once per 8 heads, by
 * blocks of positions and 32-wide slices of the head. Every output lane sums its positions in
 * order with one FMA each, so the per-head arithmetic does not depend on n_q.
 */
void kop__avx512_attn_group(const float *q, int64_t q_stride, int64_t n_q, const float *k,
                            const float *v, int64_t kv_stride, int64_t n_kv, int64_t d,
                            float scale, float *scratch, float *out, int64_t out_stride)
{
    for (int64_t s0 = 0; s0 < n_kv; s0 += ATTN_SBLK) { /* the block's K rows stay in L1/L2 */
        const int64_t n = n_kv - s0 < ATTN_SBLK ? n_kv - s0 : ATTN_SBLK;
        prefetch_rows(k, kv_stride, s0 + n, n_kv, d);
        for (int64_t g = 0; g < n_q; g++)
            scores(q + g * q_stride, k + s0 * kv_stride, kv_stride, n, d, scale,
                   scratch + g * n_kv + s0);
    }
    for (int64_t g = 0; g < n_q; g++) {
        softmax(scratch + g * n_kv, n_kv);
        memset(out + g * out_stride, 0, (size_t)d * sizeof(float));
    }
    for (int64_t g0 = 0; g0 < n_q; g0 += 8) {
        const int64_t ng = n_q - g0 < 8 ? n_q - g0 : 8;
        const float *p = scratch + g0 * n_kv;
        float *o = out + g0 * out_stride;
        for (int64_t s0 = 0; s0 < n_kv; s0 += ATTN_SBLK) {
            const int64_t s1 = s0 + ATTN_SBLK < n_kv ? s0 + ATTN_SBLK : n_kv;
            prefetch_rows(v, kv_stride, s1, n_kv, d); /* the passes below read slices */
            for (int64_t c = 0; c < d / 32; c++)
                attn_pv_chunk(p, n_kv, ng, v, kv_stride, s0, s1, c, o, out_stride);
            if (d % 32) /* a last 16-wide slice: the same sums, one vector per head */
                for (int64_t s = s0; s < s1; s++)
                    for (int64_t g = 0; g < ng; g++) {
                        float *og = o + g * out_stride + d - 16;
                        const __m512 pg = _mm512_set1_ps(p[g * n_kv + s]);
                        const __m512 vs = _mm512_loadu_ps(v + s * kv_stride + d - 16);
                        _mm512_storeu_ps(og, _mm512_fmadd_ps(pg, vs, _mm512_loadu_ps(og)));
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

/* The 4 taps of 16 channels (64 floats, channel-major) as 4 vectors of 16 channels: the
 * gather, as two-source permutes (channels 0-7 from the first two vectors, 8-15 from the
 * others, then joined). */
INLINE void taps4(const float *w, __m512 tap[4])
{
    const __m512 z0 = _mm512_loadu_ps(w), z1 = _mm512_loadu_ps(w + 16);
    const __m512 z2 = _mm512_loadu_ps(w + 32), z3 = _mm512_loadu_ps(w + 48);
    for (int j = 0; j < 4; j++) {
        /* lane l < 8 of the pair (a, b) is element 4l + j of the 32 */
        const __m512i ix = _mm512_add_epi32(_mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4,
                                                              8, 12, 16, 20, 24, 28),
                                            _mm512_set1_epi32(j));
        const __m512 lo = _mm512_permutex2var_ps(z0, ix, z1);
        const __m512 hi = _mm512_permutex2var_ps(z2, ix, z3);
        tap[j] = _mm512_shuffle_f32x4(lo, hi, 0x44); /* [lo.l0 lo.l1 hi.l0 hi.l1] */
    }
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
        if (K == 4 && m == 0xffff)
            taps4(w + c * K, tap);
        else
            for (int64_t j = 0; j < K; j++)
                tap[j] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m,
                                                  _mm512_add_epi32(idx, _mm512_set1_epi32((int)j)),
                                                  w + c * K, 4);
        for (int64_t t = 0; t < T; t++) {
            __m512 acc = _mm512_setzero_ps();
            for (int64_t j = 0; j < K; j++) {
                const float *row = conv_row(state, u, C, K, t + j) + c;
                acc = _mm512_fmadd_ps(tap[j], _mm512_maskz_loadu_ps(m, row), acc);
            }
            _mm512_mask_storeu_ps(y + t * C + c, m, silu512(acc));
        }
    }
}

/* ================================ gated delta rule ========================================== */

/* Rows of the state ahead of the one in use that gdn_rows asks into L1 (one line each: the
 * hardware prefetch follows the rest of the row). */
#define GDN_PF_ROWS 8

/*
 * The reference's two passes with a row of the state as NV vectors, kept in registers. Pass 1
 * only reads: kM = sum_i k_i (decay M_in[i]); pass 2 recomputes decay M_in[i] (the same
 * product, so the same rounding), adds k_i delta, stores the row and accumulates q_i row. A
 * head's state (S = 128: 64 KiB) does not fit in L1, so a pass-1 store would go out to L2 and
 * come back in pass 2: the state is stored once per step, not twice. M may equal M_in (row i is
 * read before it is stored). NV is a compile-time constant at every call, so the loops over j
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
        if (i + GDN_PF_ROWS < S)
            _mm_prefetch((const char *)(M_in + (i + GDN_PF_ROWS) * S), _MM_HINT_T0);
        UNROLL for (int j = 0; j < NV; j++) {
            const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(M_in + i * S + 16 * j), vd);
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
            const __m512 d = _mm512_mul_ps(_mm512_loadu_ps(M_in + i * S + 16 * j), vd);
            const __m512 r = _mm512_fmadd_ps(ki, delta[j], d);
            _mm512_storeu_ps(M + i * S + 16 * j, r);
            acc[j] = _mm512_fmadd_ps(qi, r, acc[j]);
        }
    }
    const __m512 vs = _mm512_set1_ps(scale);
    UNROLL for (int j = 0; j < NV; j++)
        _mm512_storeu_ps(out + 16 * j, _mm512_mul_ps(acc[j], vs));
}

/* Any S % 16 == 0 up to 256: column blocks of 16 (S rows of 64 bytes, in L1 between the
 * passes), each a pass of its own over the rows; the passes as gdn_rows'. */
static void gdn_cols(float *M, const float *M_in, const float *q, const float *k, const float *v,
                     float decay, float beta, float scale, int64_t S, float *out)
{
    const __m512 vd = _mm512_set1_ps(decay), vb = _mm512_set1_ps(beta);
    for (int64_t j = 0; j < S; j += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < S; i++) {
            const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(M_in + i * S + j), vd);
            acc = _mm512_fmadd_ps(_mm512_set1_ps(k[i]), r, acc);
        }
        const __m512 delta = _mm512_mul_ps(vb, _mm512_sub_ps(_mm512_loadu_ps(v + j), acc));
        acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < S; i++) {
            const __m512 d = _mm512_mul_ps(_mm512_loadu_ps(M_in + i * S + j), vd);
            const __m512 r = _mm512_fmadd_ps(_mm512_set1_ps(k[i]), delta, d);
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

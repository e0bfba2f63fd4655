/*
 * kq_avx512 — AVX-512 (F, BW, VL, DQ, VNNI) matmul and activation quantisers; kq.c calls
 * these only when kq_isa_active() is KQ_ISA_AVX512. Built with the Makefile's AVX512_FLAGS.
 *
 * Every kernel is a register tile of R weight rows x T tokens (kq__tile_drive walks the matrix):
 * the rows' blocks are loaded and unpacked once per step and met with T activation rows, so a
 * weight byte comes from memory once per token chunk. A step covers 64 elements (two Q8_0/Q4_0
 * blocks, one 64-element group of a K-quant super-block) or 16 floats. Decode (one token) runs
 * the 1 x 1 tile row after row, one sequential DRAM stream; it keeps 2 (Q8_0/Q4_0) or 4 (floats)
 * accumulator chains so it is not bound by FMA latency. K-quant super-blocks are independent
 * integer chains already. Q8_0/Q4_0 decode first prepares the activation once per call (see
 * "decode with a prepared activation"), which removes most per-row work on the activation side.
 *
 * Integer products are exact and summed per block / super-block as in the scalar reference:
 *   Q8_0 x Q8_0  |w| (u8) . sign(a, w) (s8) with vpdpbusd (activations are within +-127)
 *   Q4_0 x Q8_0  q (u8 0..15) . a with vpdpbusd, minus 8 * sum(a)
 *   Q4_K/Q5_K    q . a with vpmaddubsw, times the sub-block scale with vpdpwssd; the min term
 *                from the activation's 16-element sums: sum_j m_j * (bsum_2j + bsum_2j+1)
 *   Q6_K         q (u8 0..63) . a likewise, minus 32 * sum_j scale_j * bsum_j
 * Only the float accumulation order differs from the reference.
 *
 * Threads: any number may call concurrently; the only state is the thread-local scratch of the
 * Q8_0/Q4_0 decode, filled and used within one call.
 */
#include "kq_impl.h" // defines: block structs, kq__tileset, kq__avx512_*
#include "simd.h"       // defines: INLINE, UNROLL

#include <immintrin.h>
#define RMAX 4
#define TMAX 4
/* The prepared decode kernels prefetch the weight stream this many bytes ahead (as the AVX2
 * ones do): the hardware prefetcher alone left Q8_0 decode of 6144 x 2048 at 9.1 GB/s on one
 * thread, against 12.5 for the packed kernel's prefetched stream. */
#define PF_DIST 2048

/* ================================ helpers =================================================== */

/* f16 to f32 with the F16C instruction (exact, like kq_f16_to_f32). */
INLINE float h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* [f16 *p0 as f32 x8 | *p1 x8]; p1 NULL gives zeros. Broadcasts from memory, one conversion. */
INLINE __m512 f16_bcast2(const uint16_t *p0, const uint16_t *p1)
{
    const __m128i lo = _mm_set1_epi16((short)*p0);
    const __m128i hi = p1 ? _mm_set1_epi16((short)*p1) : _mm_setzero_si128();
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

/* 32 bytes at lo then 32 at hi; with hi NULL the upper half is zero (a lone tail block). */
INLINE __m512i load_2x32(const void *lo, const void *hi)
{
    const __m512i v = _mm512_zextsi256_si512(_mm256_loadu_si256(lo));
    return hi ? _mm512_inserti64x4(v, _mm256_loadu_si256(hi), 1) : v;
}

/* int32 lanes: lo in the first 256 bits, hi in the rest. */
INLINE __m512i split32(int lo, int hi)
{
    return _mm512_inserti64x4(_mm512_set1_epi32(lo), _mm256_set1_epi32(hi), 1);
}

/* int16 lanes: lo in the first 256 bits, hi in the rest. */
INLINE __m512i split16(short lo, short hi)
{
    return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
}

/* All RMAX x TMAX accumulators, so a 1 x 1 tile may use [0][1..3] as extra chains. */
INLINE void zero_tile(__m512 acc[RMAX][TMAX])
{
    UNROLL for (int r = 0; r < RMAX; r++)
        UNROLL for (int t = 0; t < TMAX; t++)
            acc[r][t] = _mm512_setzero_ps();
}

/* y[t * ys + r] = sum of the lanes of acc[r][t]. */
INLINE void store_tile(int R, int T, __m512 acc[RMAX][TMAX], float *y, int64_t ys)
{
    UNROLL for (int t = 0; t < T; t++)
        UNROLL for (int r = 0; r < R; r++)
            y[t * ys + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/*
 * The tile shapes of a kernel family NAME##_tile(R, T, ...), packaged as a kq__tileset: the four
 * corners and RM x 2, RM x 3 for the tokens past the last full tile. The rm x 1 kernel doubles
 * as the short-row decode kernel (rm = 4 rows already).
 */
#define TILESET(NAME, RM, TM)                                                                     \
    static void NAME##_full(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A, size_t as, \
                            float *y, int64_t ys)                                                 \
    {                                                                                             \
        NAME##_tile(RM, TM, n, W, ws, A, as, y, ys);                                              \
    }                                                                                             \
    static void NAME##_rows(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A, size_t as, \
                            float *y, int64_t ys)                                                 \
    {                                                                                             \
        NAME##_tile(RM, 1, n, W, ws, A, as, y, ys);                                               \
    }                                                                                             \
    static void NAME##_toks(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A, size_t as, \
                            float *y, int64_t ys)                                                 \
    {                                                                                             \
        NAME##_tile(1, TM, n, W, ws, A, as, y, ys);                                               \
    }                                                                                             \
    static void NAME##_single(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A,          \
                              size_t as, float *y, int64_t ys)                                    \
    {                                                                                             \
        NAME##_tile(1, 1, n, W, ws, A, as, y, ys);                                                \
    }                                                                                             \
    static void NAME##_rows2(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A, size_t as,\
                             float *y, int64_t ys)                                                \
    {                                                                                             \
        NAME##_tile(RM, 2, n, W, ws, A, as, y, ys);                                               \
    }                                                                                             \
    static void NAME##_rows3(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A, size_t as,\
                             float *y, int64_t ys)                                                \
    {                                                                                             \
        NAME##_tile(RM, 3, n, W, ws, A, as, y, ys);                                               \
    }                                                                                             \
    static const struct kq__tileset NAME##_tiles = {                                              \
        RM, TM, NAME##_full, NAME##_rows, NAME##_toks, NAME##_single, RM, NAME##_rows,            \
        {NULL, NULL, NAME##_rows2, NAME##_rows3}}

/* ================================ F32 / F16 / BF16 weights ================================== */

/* 16 weights from element i of a float-type row as f32 (lanes outside m read as zero). */
INLINE __m512 load_wf(enum kq_type wt, const uint8_t *row, int64_t i, __mmask16 m)
{
    if (wt == KQ_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)row + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i);
    if (wt == KQ_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 elements from i (lanes in m) of R rows x T tokens into acc[r][t + k]. */
INLINE void float_step(enum kq_type wt, int R, int T, const uint8_t *W, size_t ws,
                       const uint8_t *A, size_t as, int64_t i, __mmask16 m,
                       __m512 acc[RMAX][TMAX], int k)
{
    __m512 w[RMAX];
    UNROLL for (int r = 0; r < R; r++)
        w[r] = load_wf(wt, W + r * ws, i, m);
    UNROLL for (int t = 0; t < T; t++) {
        const __m512 a = _mm512_maskz_loadu_ps(m, (const float *)(A + t * as) + i);
        UNROLL for (int r = 0; r < R; r++)
            acc[r][t + k] = _mm512_fmadd_ps(w[r], a, acc[r][t + k]);
    }
}

INLINE void float_tile(enum kq_type wt, int R, int T, int64_t n, const uint8_t *W, size_t ws,
                       const uint8_t *A, size_t as, float *y, int64_t ys)
{
    __m512 acc[RMAX][TMAX];
    zero_tile(acc);
    int64_t i = 0;
    for (; R * T == 1 && i + 64 <= n; i += 64) /* 1 x 1: four chains, as in BLOCK32_TILE */
        UNROLL for (int k = 0; k < 4; k++)
            float_step(wt, 1, 1, W, ws, A, as, i + 16 * k, 0xffff, acc, k);
    for (; i + 16 <= n; i += 16)
        float_step(wt, R, T, W, ws, A, as, i, 0xffff, acc, 0);
    if (i < n)
        float_step(wt, R, T, W, ws, A, as, i, (__mmask16)((1u << (n - i)) - 1), acc, 0);
    if (R * T == 1)
        acc[0][0] = _mm512_add_ps(_mm512_add_ps(acc[0][0], acc[0][1]),
                                  _mm512_add_ps(acc[0][2], acc[0][3]));
    store_tile(R, T, acc, y, ys);
}

#define f32_tile(R, T, ...) float_tile(KQ_F32, R, T, __VA_ARGS__)
#define f16_tile(R, T, ...) float_tile(KQ_F16, R, T, __VA_ARGS__)
#define bf16_tile(R, T, ...) float_tile(KQ_BF16, R, T, __VA_ARGS__)
TILESET(f32, 4, 4);
TILESET(f16, 4, 4);
TILESET(bf16, 4, 4);

/* ================================ Q8_0 / Q4_0 weights ======================================= */

/* Blocks ib, ib + 1 (two == false: block ib only) of R Q8_0 rows x T tokens into
 * acc[r][t + k]; lanes 0-7 carry the first block, 8-15 the second, each with its own scale. */
INLINE void q8_0_step(int R, int T, const uint8_t *W, size_t ws, const uint8_t *A, size_t as,
                      int64_t ib, bool two, __m512 acc[RMAX][TMAX], int k)
{
    __m512i wabs[RMAX];
    __mmask64 wneg[RMAX];
    __m512 wd[RMAX];
    UNROLL for (int r = 0; r < R; r++) {
        const struct kq__q8_0 *b = (const struct kq__q8_0 *)(W + r * ws) + ib;
        const __m512i v = load_2x32(b[0].qs, two ? b[1].qs : NULL);
        wabs[r] = _mm512_abs_epi8(v);
        wneg[r] = _mm512_movepi8_mask(v);
        wd[r] = f16_bcast2(&b[0].d, two ? &b[1].d : NULL);
    }
    UNROLL for (int t = 0; t < T; t++) {
        const struct kq__q8_0 *c = (const struct kq__q8_0 *)(A + t * as) + ib;
        const __m512i a = load_2x32(c[0].qs, two ? c[1].qs : NULL);
        const __m512 ad = f16_bcast2(&c[0].d, two ? &c[1].d : NULL);
        UNROLL for (int r = 0; r < R; r++) {
            const __m512i sa = _mm512_mask_sub_epi8(a, wneg[r], _mm512_setzero_si512(), a);
            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wabs[r], sa);
            acc[r][t + k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(wd[r], ad),
                                            acc[r][t + k]);
        }
    }
}

/* Blocks ib, ib + 1 of Q4_0 weights as bytes 0..15 in activation order: [lo0 hi0 lo1 hi1]. */
INLINE __m512i q4_0_unpack(const struct kq__q4_0 *b, bool two)
{
    __m256i v = _mm256_zextsi128_si256(_mm_loadu_si128((const void *)b[0].qs));
    if (two)
        v = _mm256_inserti128_si256(v, _mm_loadu_si128((const void *)b[1].qs), 1);
    const __m512i dup = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
                                                 _mm512_zextsi256_si512(v));
    const __m512i sh = _mm512_srlv_epi64(dup, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    return _mm512_and_si512(sh, _mm512_set1_epi8(15));
}

/* As q8_0_step for Q4_0 rows; the level offset -8 is taken off as 8 * sum(a) per lane. */
INLINE void q4_0_step(int R, int T, const uint8_t *W, size_t ws, const uint8_t *A, size_t as,
                      int64_t ib, bool two, __m512 acc[RMAX][TMAX], int k)
{
    __m512i wq[RMAX];
    __m512 wd[RMAX];
    UNROLL for (int r = 0; r < R; r++) {
        const struct kq__q4_0 *b = (const struct kq__q4_0 *)(W + r * ws) + ib;
        wq[r] = q4_0_unpack(b, two);
        wd[r] = f16_bcast2(&b[0].d, two ? &b[1].d : NULL);
    }
    UNROLL for (int t = 0; t < T; t++) {
        const struct kq__q8_0 *c = (const struct kq__q8_0 *)(A + t * as) + ib;
        const __m512i a = load_2x32(c[0].qs, two ? c[1].qs : NULL);
        const __m512 ad = f16_bcast2(&c[0].d, two ? &c[1].d : NULL);
        /* 8 * sum(a) per lane: the "- 8" of every weight level. */
        const __m512i a8 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(8), a);
        UNROLL for (int r = 0; r < R; r++) {
            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[r], a);
            const __m512 pf = _mm512_cvtepi32_ps(_mm512_sub_epi32(p, a8));
            acc[r][t + k] = _mm512_fmadd_ps(pf, _mm512_mul_ps(wd[r], ad), acc[r][t + k]);
        }
    }
}

/*
 * A 1 x 1 tile (the decode kernel) alternates two accumulators so that consecutive steps do not
 * wait on each other's FMA; larger tiles have independent chains already.
 */
#define BLOCK32_TILE(NAME)                                                                        \
    INLINE void NAME##_tile(int R, int T, int64_t n, const uint8_t *W, size_t ws,                \
                            const uint8_t *A, size_t as, float *y, int64_t ys)                    \
    {                                                                                             \
        __m512 acc[RMAX][TMAX];                                                                   \
        zero_tile(acc);                                                                           \
        const int64_t nb = n / KQ__QK;                                                            \
        int64_t ib = 0;                                                                           \
        for (; R * T == 1 && ib + 4 <= nb; ib += 4) {                                             \
            NAME##_step(1, 1, W, ws, A, as, ib, true, acc, 0);                                    \
            NAME##_step(1, 1, W, ws, A, as, ib + 2, true, acc, 1);                                \
        }                                                                                         \
        for (; ib + 2 <= nb; ib += 2)                                                             \
            NAME##_step(R, T, W, ws, A, as, ib, true, acc, 0);                                    \
        if (ib < nb)                                                                              \
            NAME##_step(R, T, W, ws, A, as, ib, false, acc, 0);                                   \
        if (R * T == 1)                                                                           \
            acc[0][0] = _mm512_add_ps(acc[0][0], acc[0][1]);                                      \
        store_tile(R, T, acc, y, ys);                                                             \
    }

BLOCK32_TILE(q8_0)
BLOCK32_TILE(q4_0)
TILESET(q8_0, 4, 4);
TILESET(q4_0, 4, 4);

/* ================================ K-quant weights =========================================== */

/*
 * Plain Q4_K / Q5_K / Q6_K rows (the engine stores them as Q4_KX / Q5_KX / Q6_KX on AVX-512, run
 * by kq_avx512_k.c; these tiles serve callers that keep the plain types).
 * A K-quant super-block meets the activations in 4 steps of 64 elements. Per step and row the
 * levels q (64 bytes, activation order) and the per-lane int16 scales; the super-block's integer
 * sum builds up in iacc[r][t] and becomes float once, with the row's d and the token's d.
 */
struct krow {
    const uint8_t *qs, *qh; /* qh: Q5_K high bits or Q6_K qh; NULL for Q4_K */
    const uint8_t *ql;      /* Q6_K low bits */
    __m512i sc;             /* i16 words (low 256 bits): Q4/5_K sc0..7 m0..7; Q6_K s0..15 */
    __m256i mins;           /* i16 partners of the bsums: Q4/5_K m0 m0 m1 m1 ..; Q6_K s0..15 */
    float d, dmin;
};

/*
 * The 12 packed scale bytes of Q4_K/Q5_K as words [sc0..sc7, m0..m7] (the vector form of
 * kq__unpack_scales). Gathers [s0-3 s8-11 s4-7 s8-11] and [0 s0-3 0 s4-7], then per byte keeps
 * the low 6 bits, the low / high nibble, and moves the top 2 bits of bytes 0-7 to bits 4-5.
 * Reads 16 bytes: the 4 past the scales are still inside the block.
 */
INLINE __m256i kscale_words(const uint8_t *scales)
{
    const __m128i v = _mm_loadu_si128((const void *)scales);
    const __m128i a = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8,
                                                        9, 10, 11));
    const __m128i b = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1,
                                                        -1, 4, 5, 6, 7));
    const __m128i keep = _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0);
    const __m128i lo = _mm_or_si128(_mm_and_si128(a, keep),
                                    _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi32(0, 0, 0, 0x0f0f0f0f)));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm256_cvtepu8_epi16(_mm_or_si128(lo, hi));
}

/* Super-block ib of a K-quant row: scale words, the min / offset partners, f32 d and dmin. */
INLINE struct krow krow_load(enum kq_type wt, const uint8_t *row, int64_t ib)
{
    struct krow k = {0};
    if (wt == KQ_Q6_K) {
        const struct kq__q6_k *b = (const struct kq__q6_k *)row + ib;
        k.mins = _mm256_cvtepi8_epi16(_mm_loadu_si128((const void *)b->scales));
        k.sc = _mm512_zextsi256_si512(k.mins);
        k.ql = b->ql, k.qh = b->qh, k.d = h2f(b->d);
        return k;
    }
    const uint8_t *p = row + ib * (wt == KQ_Q4_K ? sizeof(struct kq__q4_k) : sizeof(struct kq__q5_k));
    uint32_t ddmin; /* d and dmin, adjacent f16 at the block start, converted together */
    memcpy(&ddmin, p, 4);
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)ddmin));
    k.d = _mm_cvtss_f32(dd), k.dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
    if (wt == KQ_Q4_K) {
        const struct kq__q4_k *b = (const void *)p;
        k.sc = _mm512_zextsi256_si512(kscale_words(b->scales));
        k.qs = b->qs;
    } else {
        const struct kq__q5_k *b = (const void *)p;
        k.sc = _mm512_zextsi256_si512(kscale_words(b->scales));
        k.qs = b->qs, k.qh = b->qh;
    }
    k.mins = _mm256_permutexvar_epi16(_mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13,
                                                        14, 14, 15, 15),
                                      _mm512_castsi512_si256(k.sc));
    return k;
}

/* Levels of step s (elements 64s .. 64s+63) as unsigned bytes. */
INLINE __m512i krow_levels(enum kq_type wt, const struct krow *k, int s)
{
    const __m512i m4 = _mm512_set1_epi8(15);
    if (wt == KQ_Q6_K) { /* half s / 2; low nibbles for even s, high for odd */
        const __m512i ql = _mm512_loadu_si512(k->ql + 64 * (s / 2));
        const __m512i qh = load_2x32(k->qh + 32 * (s / 2), k->qh + 32 * (s / 2));
        const __m512i lo = s % 2 ? _mm512_srli_epi16(ql, 4) : ql;
        /* high 2 bits of the first 32 bytes: qh bits 0-1 (even s) / 4-5 (odd s); then 2-3 / 6-7 */
        const __m512i hi = s % 2 ? _mm512_srlv_epi16(qh, split16(0, 2))
                                 : _mm512_sllv_epi16(qh, split16(4, 2));
        return _mm512_or_si512(_mm512_and_si512(lo, m4),
                               _mm512_and_si512(hi, _mm512_set1_epi8(0x30)));
    }
    const __m256i v = _mm256_loadu_si256((const void *)(k->qs + 32 * s));
    __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    q = _mm512_and_si512(q, m4);
    if (wt == KQ_Q5_K) { /* bit 2s of qh[l] for the first 32, bit 2s + 1 for the next */
        const __m512i qh = load_2x32(k->qh, k->qh);
        const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * s))),
                                               _mm256_set1_epi8((char)(2 << (2 * s))), 1);
        q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, _mm512_set1_epi8(16));
    }
    return q;
}

/* Per-lane i16 scales of step s for the vpmaddubsw output (32 lanes: 16 per 32 levels). */
INLINE __m512i krow_scales(enum kq_type wt, const struct krow *k, int s)
{
    if (wt == KQ_Q6_K) { /* 4 sub-blocks of 16 per step: 8 lanes each */
        const __m256i lo = _mm256_setr_m128i(_mm_set1_epi16((short)(4 * s)),
                                             _mm_set1_epi16((short)(4 * s + 1)));
        const __m256i hi = _mm256_setr_m128i(_mm_set1_epi16((short)(4 * s + 2)),
                                             _mm_set1_epi16((short)(4 * s + 3)));
        return _mm512_permutexvar_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), k->sc);
    }
    return _mm512_permutexvar_epi16(split16((short)(2 * s), (short)(2 * s + 1)), k->sc);
}

/* Super-block ib of R rows x T tokens (kept whole: the steps share iacc, see the comment above). */
INLINE void ksb(enum kq_type wt, int R, int T, const uint8_t *W, size_t ws, const uint8_t *A,
                size_t as, int64_t ib, __m512 acc[RMAX][TMAX])
{
    struct krow k[RMAX];
    __m512i iacc[RMAX][TMAX];
    UNROLL for (int r = 0; r < R; r++) {
        k[r] = krow_load(wt, W + r * ws, ib);
        UNROLL for (int t = 0; t < T; t++)
            iacc[r][t] = _mm512_setzero_si512();
    }
    UNROLL for (int s = 0; s < 4; s++) {
        __m512i q[RMAX], sc[RMAX];
        UNROLL for (int r = 0; r < R; r++) {
            q[r] = krow_levels(wt, &k[r], s);
            sc[r] = krow_scales(wt, &k[r], s);
        }
        UNROLL for (int t = 0; t < T; t++) {
            const struct kq__q8_k *c = (const struct kq__q8_k *)(A + t * as) + ib;
            const __m512i a = _mm512_loadu_si512(c->qs + 64 * s);
            UNROLL for (int r = 0; r < R; r++)
                iacc[r][t] = _mm512_dpwssd_epi32(iacc[r][t], _mm512_maddubs_epi16(q[r], a), sc[r]);
        }
    }
    UNROLL for (int t = 0; t < T; t++) {
        const struct kq__q8_k *c = (const struct kq__q8_k *)(A + t * as) + ib;
        const __m256i bs = _mm256_loadu_si256((const void *)c->bsums);
        UNROLL for (int r = 0; r < R; r++) {
            const __m256i mt = _mm256_madd_epi16(bs, k[r].mins);
            if (wt == KQ_Q6_K) { /* same scale as the main sum: fold in as integers */
                const __m512i m32 = _mm512_slli_epi32(_mm512_zextsi256_si512(mt), 5);
                iacc[r][t] = _mm512_sub_epi32(iacc[r][t], m32);
            } else {
                const __m512 mf = _mm512_zextps256_ps512(_mm256_cvtepi32_ps(mt));
                acc[r][t] = _mm512_fnmadd_ps(mf, _mm512_set1_ps(k[r].dmin * c->d), acc[r][t]);
            }
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r][t]),
                                        _mm512_set1_ps(k[r].d * c->d), acc[r][t]);
        }
    }
}

#define KQUANT_TILE(NAME, WT)                                                                     \
    INLINE void NAME##_tile(int R, int T, int64_t n, const uint8_t *W, size_t ws,                \
                            const uint8_t *A, size_t as, float *y, int64_t ys)                    \
    {                                                                                             \
        __m512 acc[RMAX][TMAX];                                                                   \
        zero_tile(acc);                                                                           \
        for (int64_t ib = 0; ib < n / KQ__QK_K; ib++)                                             \
            ksb(WT, R, T, W, ws, A, as, ib, acc);                                                 \
        store_tile(R, T, acc, y, ys);                                                             \
    }

KQUANT_TILE(q4_k, KQ_Q4_K)
KQUANT_TILE(q5_k, KQ_Q5_K)
KQUANT_TILE(q6_k, KQ_Q6_K)
TILESET(q4_k, 4, 4);
TILESET(q5_k, 4, 4);
TILESET(q6_k, 4, 4);

/* ================================ decode with a prepared activation ========================= */

/*
 * Decode (one token) of Q8_0 / Q4_0 weights would spend most of its instructions on the
 * activation side, which is the same for every row, so the matmul prepares it once per call:
 *   qs         the levels, contiguous, the last step zero-padded
 *   step[i]    for blocks 2i, 2i + 1: their scales as f32 and their offsets -k * sum(levels),
 *              k = 128 for Q8_0, 8 for Q4_0
 * The weight levels are then taken as unsigned bytes (Q8_0: w + 128 by flipping the top bit;
 * Q4_0: the nibble, whose offset is 8), so one vpdpbusd started from the offsets yields the
 * exact signed block sums. The scratch stays compact (1.25 bytes per element) because it is
 * re-read for every row and must share L1 with the weight stream: an expanded lane-layout
 * version measured faster in cache but slower from DRAM. Thread-local; longer rows use the
 * tile kernels.
 */
#define PREP_MAX_N 32768

struct prep {
    _Alignas(64) int8_t qs[PREP_MAX_N];
    struct {
        float d[2];
        int32_t off[2];
    } step[PREP_MAX_N / 64];
};

static _Thread_local struct prep prep_tls;

/* Prepare nb Q8_0 activation blocks with level offset k (see above). */
static void prep_act(const struct kq__q8_0 *a, int64_t nb, int k, struct prep *p)
{
    for (int64_t i = 0; 2 * i < nb; i++) {
        const bool two = 2 * i + 1 < nb;
        const __m512i v = load_2x32(a[2 * i].qs, two ? a[2 * i + 1].qs : NULL);
        const __m512i ksum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)k), v);
        _mm512_store_si512(p->qs + 64 * i, v);
        p->step[i].d[0] = h2f(a[2 * i].d);
        p->step[i].d[1] = two ? h2f(a[2 * i + 1].d) : 0.0f;
        p->step[i].off[0] = -_mm512_mask_reduce_add_epi32(0x00ff, ksum);
        p->step[i].off[1] = -_mm512_mask_reduce_add_epi32(0xff00, ksum);
    }
}

/* Step i (blocks 2i, 2i + 1; the second absent when !two) of a row against the prepared act. */
INLINE __m512 prep_step(enum kq_type wt, const uint8_t *row, const struct prep *p, int64_t i,
                        bool two, __m512 acc)
{
    __m512i wu;
    __m512 wd;
    if (wt == KQ_Q8_0) {
        const struct kq__q8_0 *b = (const struct kq__q8_0 *)row + 2 * i;
        wu = _mm512_xor_si512(load_2x32(b[0].qs, two ? b[1].qs : NULL), _mm512_set1_epi8((char)0x80));
        wd = f16_bcast2(&b[0].d, two ? &b[1].d : NULL);
    } else {
        const struct kq__q4_0 *b = (const struct kq__q4_0 *)row + 2 * i;
        wu = q4_0_unpack(b, two);
        wd = f16_bcast2(&b[0].d, two ? &b[1].d : NULL);
    }
    /* rec = [d0, d1, off0, off1]: d to lanes 0-7 / 8-15, the offsets to lanes 0 and 8 only */
    const __m512 rec = _mm512_castps128_ps512(_mm_loadu_ps(p->step[i].d));
    const __m512 ad = _mm512_permutexvar_ps(split32(0, 1), rec);
    const __m512i off = _mm512_maskz_permutexvar_epi32(0x0101, split32(2, 3), _mm512_castps_si512(rec));
    const __m512i sum = _mm512_dpbusd_epi32(off, wu, _mm512_load_si512(p->qs + 64 * i));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(wd, ad), acc);
}

/* One row of nb blocks against the prepared activation; two accumulator chains. */
INLINE float prep_dot(enum kq_type wt, int64_t nb, const uint8_t *row, const struct prep *p)
{
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const size_t bb = wt == KQ_Q8_0 ? sizeof(struct kq__q8_0) : sizeof(struct kq__q4_0);
    int64_t i = 0;
    for (; 2 * i + 4 <= nb; i += 2) {
        const char *pf = (const char *)row + 2 * i * (int64_t)bb + PF_DIST; /* 4 blocks ahead */
        _mm_prefetch(pf, _MM_HINT_T0);
        _mm_prefetch(pf + 64, _MM_HINT_T0);
        if (wt == KQ_Q8_0)
            _mm_prefetch(pf + 128, _MM_HINT_T0);
        acc0 = prep_step(wt, row, p, i, true, acc0);
        acc1 = prep_step(wt, row, p, i + 1, true, acc1);
    }
    for (; 2 * i < nb; i++)
        acc0 = prep_step(wt, row, p, i, 2 * i + 1 < nb, acc0);
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* Rows [r0, r1) of Q8_0 / Q4_0 weights against one token: prepare, then stream the rows. */
static void decode_prepared(enum kq_type wt, int64_t n, const uint8_t *W, size_t ws, int64_t r0,
                            int64_t r1, const void *act, float *y)
{
    struct prep *p = &prep_tls;
    prep_act(act, n / KQ__QK, wt == KQ_Q8_0 ? 128 : 8, p);
    for (int64_t r = r0; r < r1; r++)
        y[r] = wt == KQ_Q8_0 ? prep_dot(KQ_Q8_0, n / KQ__QK, W + r * ws, p)
                             : prep_dot(KQ_Q4_0, n / KQ__QK, W + r * ws, p);
}

/* ================================ prefill with packed groups ================================ */

/*
 * Prefill (many tokens) of plain Q8_0 / Q4_0 weights (the engine stores them as Q8_0X / Q4_0X
 * on AVX-512; these serve callers that keep the plain types). The tile kernels above spend three multiply-
 * class instructions per vpdpbusd, because each vector of products mixes two blocks that need
 * their own scales. Here a group of 16 blocks is packed lane-wise: dword k (elements 4k..4k+3)
 * of block b goes to lane b of vector k, so 8 vpdpbusd give the group's 16 exact integer block
 * dots, and one conversion, one scale product and one FMA finish all 16.
 *   activations: u8 = a + 128 (in registers, reused by every row), f32 block scales
 *   weights:     s8 (Q4_0: q - 8) as vpdpbusd's memory operand, f32 block scales, and the
 *                correction -128 * sum(w) per block that takes the +128 back out exactly
 * Each thread packs a chunk of tokens' activations once, then each block of R rows once per
 * chunk, and runs R rows against one token at a time. A row's arithmetic (its chain of groups)
 * depends on nothing but its own data: not on R, the token count or the thread split.
 * Lanes of a last, partial group read as zero blocks.
 */
/* From 2 tokens: batched decode of 2..7 sequences (2048 x 6144 Q8_0 from DRAM, one thread,
 * time per matmul against one token's: the 4 x 4 tiles 1.12 / 1.47 / 1.00 / 1.68 at 2 / 3 / 4 /
 * 6 tokens, packed 1.00 / 1.04 / 1.10 / 1.26). */
#define PK_MIN_T 2
#define PK_MAX_GROUPS 128   /* n <= 65536 */
#define PK_R 8              /* rows per kernel call at most */
#define PK_ACT_BYTES (256u << 10)
#define PK_W_BYTES (40u << 10) /* a block of packed rows should stay in L1 */

struct pk_act {
    __m512i q[8]; /* u8 levels + 128 */
    __m512 d;     /* block scales */
};
struct pk_w {
    __m512i q[8]; /* s8 levels */
    __m512 d;     /* block scales */
    __m512i corr; /* -128 * sum of the block's levels */
};

static _Thread_local struct pk_act pk_act_tls[PK_ACT_BYTES / sizeof(struct pk_act)];
static _Thread_local struct pk_w pk_w_tls[PK_MAX_GROUPS > PK_W_BYTES / sizeof(struct pk_w)
                                              ? PK_MAX_GROUPS
                                              : PK_W_BYTES / sizeof(struct pk_w)];

/* Lane b: block first + b of a row of nb blocks of `bytes` each; lanes past nb are off. */
INLINE __mmask16 pk_lanes(int64_t first, int64_t nb)
{
    return nb - first >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nb - first)) - 1);
}

INLINE __m512i pk_gather(__mmask16 m, __m512i idx, const uint8_t *base, int off)
{
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m,
                                       _mm512_add_epi32(idx, _mm512_set1_epi32(off)), base, 1);
}

/* The f16 scales at offset 0 of each lane's block, as f32. */
INLINE __m512 pk_scales(__mmask16 m, __m512i idx, const uint8_t *base)
{
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(pk_gather(m, idx, base, 0)));
}

/*
 * The levels of a group of 16 Q8_0 blocks (first, first + 1, .. of a row of nb), packed: v[k]
 * lane b = dword k of block b. Loaded two blocks per vector (lanes 0-7, 8-15), then three
 * rounds of two-source permutes, each taking the even and the odd dwords of a register pair
 * (r, r + 2^s), turn 8 x (2 blocks x 8 dwords) into 8 x (16 blocks x 1 dword).
 */
INLINE void pk_transpose(__m512i v[8]);

INLINE void pk_levels_q8_0(const struct kq__q8_0 *row, int64_t first, int64_t nb, __m512i v[8])
{
    for (int i = 0; i < 8; i++) {
        const int64_t b = first + 2 * i;
        v[i] = b >= nb ? _mm512_setzero_si512()
                       : load_2x32(row[b].qs, b + 1 < nb ? row[b + 1].qs : NULL);
    }
    pk_transpose(v);
}

/* Group g of a Q8_0 activation row of nb blocks. */
static void pk_pack_act(const struct kq__q8_0 *row, int64_t nb, int64_t g, struct pk_act *o)
{
    const __mmask16 m = pk_lanes(16 * g, nb);
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                             11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)sizeof(struct kq__q8_0)));
    __m512i v[8];
    pk_levels_q8_0(row, 16 * g, nb, v);
    for (int k = 0; k < 8; k++)
        o->q[k] = _mm512_xor_si512(v[k], _mm512_set1_epi8((char)0x80));
    o->d = pk_scales(m, idx, (const uint8_t *)(row + 16 * g));
}

/* Group g of a Q8_0 or Q4_0 weight row of nb blocks (Q4_0 gathers its nibbles). */
static void pk_pack_w(enum kq_type wt, const uint8_t *row, int64_t nb, int64_t g, struct pk_w *o)
{
    const size_t bb = wt == KQ_Q8_0 ? sizeof(struct kq__q8_0) : sizeof(struct kq__q4_0);
    const __mmask16 m = pk_lanes(16 * g, nb);
    const uint8_t *base = row + 16 * g * bb;
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                             11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)bb));
    if (wt == KQ_Q8_0)
        pk_levels_q8_0((const struct kq__q8_0 *)row, 16 * g, nb, o->q);
    for (int k = 0; k < 8 && wt == KQ_Q4_0; k++) {
        /* elements 4k..4k+3: low nibbles of qs[4k..] for k < 4, high ones after */
        __m512i q = pk_gather(m, idx, base, 2 + 4 * (k & 3));
        q = _mm512_and_si512(k < 4 ? q : _mm512_srli_epi32(q, 4), _mm512_set1_epi8(15));
        o->q[k] = _mm512_maskz_mov_epi32(m, _mm512_sub_epi8(q, _mm512_set1_epi8(8))); /* pads: 0 */
    }
    __m512i sum = _mm512_setzero_si512();
    for (int k = 0; k < 8; k++)
        sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), o->q[k]);
    o->corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7));
    o->d = pk_scales(m, idx, base);
}

/* The three rounds of pk_levels_q8_0 on v[0..7], each two blocks (lanes 0-7, 8-15). */
INLINE void pk_transpose(__m512i v[8])
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    UNROLL for (int st = 0; st < 3; st++)
        UNROLL for (int r = 0; r < 8; r++) {
            if (r & (1 << st))
                continue;
            const __m512i a = v[r], b = v[r | 1 << st];
            v[r] = _mm512_permutex2var_epi32(a, ev, b);
            v[r | 1 << st] = _mm512_permutex2var_epi32(a, od, b);
        }
}

/* y[r] = row r . token for r < R: R packed rows of G groups (row-major) against one token. */
INLINE void pk_kernel(int R, int64_t G, const struct pk_w *W, const struct pk_act *A, float *y)
{
    __m512 acc[PK_R];
    UNROLL for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        const struct pk_act *a = &A[g];
        __m512i av[8];
        UNROLL for (int k = 0; k < 8; k++)
            av[k] = _mm512_load_si512(&a->q[k]);
        UNROLL for (int r = 0; r < R; r++) {
            const struct pk_w *w = &W[r * G + g];
            __m512i s = _mm512_load_si512(&w->corr);
            UNROLL for (int k = 0; k < 8; k++)
                s = _mm512_dpbusd_epi32(s, av[k], _mm512_load_si512(&w->q[k]));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(w->d, a->d), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < R; r++)
        y[r] = _mm512_reduce_add_ps(acc[r]);
}

/* The row counts pk_kernel is compiled for; any other count runs as several calls.
 * y[0..R): the outputs of the R rows for this token. */
static void pk_rows(int R, int64_t G, const struct pk_w *W, const struct pk_act *A, float *y)
{
    if (R == 8)
        pk_kernel(8, G, W, A, y);
    else if (R == 4)
        pk_kernel(4, G, W, A, y);
    else
        for (int r = 0; r < R; r++)
            pk_kernel(1, G, W + r * G, A, y + r);
}

/* Ask for bytes [lo, hi) of a row ahead of its packing; the packing itself stalls on DRAM. Asked
 * group by group while the current rows are packed: a whole row asked at once (102 lines of a
 * 6144-wide Q8_0 row) overran the outstanding-miss queues and left packing 2 tokens of 2048 x
 * 6144 at 1.45 ms against 0.98 for one token's decode (1.01 group by group). */
static void pk_prefetch_row(const uint8_t *row, size_t lo, size_t hi)
{
    for (size_t o = lo & ~(size_t)63; o < hi; o += 64)
        _mm_prefetch((const char *)row + o, _MM_HINT_T1);
}

/* Same contract as kq_matmul for Q8_0 / Q4_0 weights and nt >= PK_MIN_T; false when n is 0 or
 * too long for the packing buffers (the caller then uses the tiles). */
static bool packed_matmul(enum kq_type wt, int64_t n, const uint8_t *W, size_t ws, int64_t r0,
                          int64_t r1, const uint8_t *act, size_t as, int64_t nt, float *y,
                          int64_t ys)
{
    const int64_t nb = n / KQ__QK, G = (nb + 15) / 16;
    if (G == 0 || G > PK_MAX_GROUPS || n % KQ__QK)
        return false;
    int64_t chunk = (int64_t)(PK_ACT_BYTES / sizeof(struct pk_act)) / G;
    int64_t R = (int64_t)(PK_W_BYTES / sizeof(struct pk_w)) / G;
    R = R >= 8 ? 8 : R >= 4 ? 4 : R >= 2 ? 2 : 1;
    for (int64_t t0 = 0; t0 < nt; t0 += chunk) {
        const int64_t t1 = t0 + chunk < nt ? t0 + chunk : nt;
        for (int64_t t = t0; t < t1; t++)
            for (int64_t g = 0; g < G; g++) {
                struct pk_act *o = &pk_act_tls[(t - t0) * G + g];
                pk_pack_act((const struct kq__q8_0 *)(act + t * as), nb, g, o);
            }
        for (int64_t r = r0; r < r1; r += R) {
            const int rr = (int)(r1 - r < R ? r1 - r : R);
            for (int i = 0; i < rr; i++) {
                for (int64_t g = 0; g < G; g++) {
                    if (r + R + i < r1) /* the next block's row i, group by group */
                        pk_prefetch_row(W + (r + R + i) * ws, (size_t)g * ws / G,
                                        (size_t)(g + 1) * ws / G);
                    pk_pack_w(wt, W + (r + i) * ws, nb, g, &pk_w_tls[i * G + g]);
                }
            }
            for (int64_t t = t0; t < t1; t++) /* y[t][r..]: rows are columns of y */
                pk_rows(rr, G, pk_w_tls, &pk_act_tls[(t - t0) * G], y + t * ys + r);
        }
    }
    return true;
}

/*
 * Q8_0X / Q4_0X weights (kq.h: a row's f16 scales first, then its levels in groups of 16 blocks
 * (the last group may hold fewer), word k of every block of a group side by side; Q8_0X levels
 * + 128, Q4_0X nibble bytes with the low nibbles giving words 0-3 and the high ones 4-7) read
 * as they are stored, for any token count: no call repacks a weight.
 * The activation of each token is packed once per call, or once per tag (kq_matmul_tagged)
 * where all tokens fit px_act_tls (px_act: s8 levels in the same order, the scales, and -128 *
 * the sum of each block's levels, which takes the + 128 back out exactly; Q4_0X: -8 * the sum,
 * its offset). Per group, (row, token) pair and lane (block):
 * an int32 sum of the correction and 8 vpdpbusd, converted, times (weight scale * activation
 * scale), added to a float accumulator by one FMA; at the end each accumulator's 16 lanes are
 * summed by the tree of _mm512_reduce_add_ps. That arithmetic is the same for every tile shape,
 * token count and thread split, so an output depends only on its row and token.
 *
 * Register tiles: PX_R rows x PX_T tokens, k-outer. For each of the 8 words of a group the tile
 * loads R weight vectors and T activation vectors and issues R x T vpdpbusd, so loads per
 * vpdpbusd are (R + T) / (R T) (7 / 12) instead of more than one when each (row, token) pair
 * ran its own chain with the activation as a memory operand (that kernel reached 39% of the
 * vpdpbusd peak at 8 tokens). 3 x 4 fills the register file: 12 int32 sums, 12 float
 * accumulators, 3 weight and 4 activation vectors. The 12 accumulators are summed together
 * (px_store): 45 shuffles and adds for 16 outputs instead of about 9 instructions per output.
 * Each call packs a chunk of tokens, then walks super-blocks of rows (whole tiles, about
 * PX_L1_W bytes): token tile by token tile, each against every row tile of the super-block, so
 * the super-block's rows stay in L1 across token tiles and each token tile's activations are
 * read once per super-block (row tile by row tile for all tokens left 16 tokens' activations,
 * 40 KB at n = 2048, to come from L2 for every 3 rows: 1.06 vpdpbusd a cycle in cache against
 * 1.19). Every tile asks for its share of the next super-block's rows, group by group.
 */
#define PX_R 3                    /* rows of a tile */
#define PX_T 4                    /* tokens of a tile */
#define PX_ACT_BYTES (512u << 10) /* a thread's packed activations: tokens x groups */
#define PX_L1_W (20u << 10)       /* weight bytes of a super-block's panel, kept in L1 */
/* From this many tokens on, the next super-block's rows are asked into L1 (prefetchnta: on this
 * Zen 5 the same or a little more than prefetcht0), for one token into L2 (prefetcht1) as
 * before. kqbench 6144 x 2048 q8_0x, 1 / 2 threads, cpu-time, medians of 3 alternated runs
 * (busy machine), prefetcht1 for all -> this: 4 tokens 0.545 / 0.276 -> 0.386 / 0.190 ms,
 * 8 tokens 0.756 / 0.383 -> 0.492 / 0.269, 16 tokens 1.29 / 0.662 -> 0.995 / 0.509; 1 and 2
 * tokens within the noise. Smaller super-blocks (12 or 16 KiB) ask too late and lost, asking
 * 2 super-blocks ahead into L2 as well lost too. */
#define PX_PF_L1_T 2
#define PX_SR_MIN 9               /* rows of a super-block at least, where panels split rows */
/* Rows that set a panel's width where a row of PX_SR_MIN would not fit PX_L1_W whole: narrower
 * panels of more rows (Q8_0X: 2 groups x 18 rows instead of 4 x 9). kqbench --cpu-time 1, 2
 * threads, weights from DRAM, medians of 5 alternated runs, 16 / 8 tokens: q8_0x 2048 x 6144
 * 0.45-0.50 / 0.34-0.39 ms against 0.57-0.60 / 0.37-0.39, 2048 x 4096 0.31 / 0.21 against 0.37
 * / 0.24, 1024 x 12288 0.50 / 0.38 against 0.59 / 0.44, q4_0x 2048 x 6144 0.42 / 0.23 against
 * 0.47 / 0.30. At 2 and 4 tokens kqbench read them alike, but the ~1.2 GB Q8_0 qwen35moe
 * decoded 3-4 % slower at B = 2 and 4 (medians of 4 alternated runs), so they start at
 * PX_PANEL_T tokens. Rows that fit whole keep PX_SR_MIN: panels of 18 rows there (n = 2048)
 * lost at 4 and 8 tokens (12288 x 2048: 0.56 / 0.58 against 0.39 / 0.49 ms). */
#define PX_SR_PANEL 18
#define PX_PANEL_T 8

/* Keeps v in a register: GCC otherwise folds a load back into each of its R (or T) uses. */
#define PX_IN_REG(v) __asm__("" : "+v"(v))

struct px_act {
    __m512i q[8]; /* s8 levels */
    __m512 d;     /* block scales */
    __m512i corr; /* -128 (Q4_0X: -8) * sum of the block's levels */
};

/* The float accumulators of a tile between panels. */
struct px_acc {
    float v[PX_R * PX_T * 16] __attribute__((aligned(64)));
};

static _Thread_local struct px_act px_act_tls[PX_ACT_BYTES / sizeof(struct px_act)];
static _Thread_local struct kq__pack_key px_key; /* what px_act_tls holds */
static _Thread_local struct px_acc px_acc_tls[(128u << 10) / sizeof(struct px_acc)];

/* Group g of a Q8_0 activation row of nb blocks (lanes past nb: zero levels and scales), for
 * weights whose levels are stored + 2^sh. */
static void px_pack_act(const struct kq__q8_0 *row, int64_t nb, int64_t g, int sh,
                        struct px_act *o)
{
    const __mmask16 m = pk_lanes(16 * g, nb);
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                             11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)sizeof(struct kq__q8_0)));
    pk_levels_q8_0(row, 16 * g, nb, o->q);
    __m512i sum = _mm512_setzero_si512();
    for (int k = 0; k < 8; k++)
        sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), o->q[k]);
    o->corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_sllv_epi32(sum, _mm512_set1_epi32(sh)));
    o->d = pk_scales(m, idx, (const uint8_t *)(row + 16 * g));
}

/* 64 bytes of a full group's word, or a partial group's 4 m bytes (mask mk, zeros after). */
INLINE __m512i px_word(bool part, __mmask16 mk, const uint8_t *p)
{
    return part ? _mm512_maskz_loadu_epi32(mk, p) : _mm512_loadu_si512(p);
}

/* The f16 scales of a group as f32 (part: the first m lanes, zeros after). */
INLINE __m512 px_scales(bool part, __mmask16 mk, const uint8_t *p)
{
    return _mm512_cvtph_ps(part ? _mm256_maskz_loadu_epi16(mk, p) : _mm256_loadu_si256((const void *)p));
}

/*
 * One group of m blocks (part: m < 16, lanes mk) of R rows x T tokens: q / sc point at row 0's
 * levels / scales of the group (rows ws bytes apart), A at token 0's packed group (tokens
 * consecutive). acc[r][t] += per block: (corr + levels . levels) * (weight * activation scale).
 */
INLINE void px_group(bool q4, bool part, int R, int T, int m, __mmask16 mk, const uint8_t *q,
                     const uint8_t *sc, size_t ws, const struct px_act *A,
                     __m512 acc[PX_R][PX_T])
{
    __m512i s[PX_R][PX_T], a[PX_T];
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int t = 0; t < T; t++)
            s[r][t] = _mm512_load_si512(&A[t].corr);
    UNROLL for (int k = 0; k < 8; k++) {
        UNROLL for (int t = 0; t < T; t++) {
            a[t] = _mm512_load_si512(&A[t].q[k]);
            PX_IN_REG(a[t]);
        }
        UNROLL for (int r = 0; r < R; r++) {
            /* Q4_0X: word k & 3 holds words k (low nibbles) and k + 4 (high ones) */
            __m512i w = px_word(part, mk, q + r * ws + (size_t)(4 * m * (q4 ? k & 3 : k)));
            if (q4)
                w = _mm512_and_si512(k < 4 ? w : _mm512_srli_epi16(w, 4), _mm512_set1_epi8(15));
            PX_IN_REG(w);
            UNROLL for (int t = 0; t < T; t++)
                s[r][t] = _mm512_dpbusd_epi32(s[r][t], w, a[t]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        const __m512 wd = px_scales(part, mk, sc + r * ws);
        UNROLL for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][t]), _mm512_mul_ps(wd, A[t].d),
                                        acc[r][t]);
    }
}

/* [a_i + a_i+8 | b_i + b_i+8] for i < 8: the first step of a lane sum, for two vectors. */
INLINE __m512 px_fold8(__m512 a, __m512 b)
{
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
}

/* 128-bit lanes [x0 + x1, x2 + x3, y0 + y1, y2 + y3] from x = fold8(a, b), y = fold8(c, d):
 * lane j then holds the 4 partial sums of a, b, c, d in turn (i + i+4). */
INLINE __m512 px_fold4(__m512 x, __m512 y)
{
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xdd));
}

/*
 * y[t * ys + r] = the lane sum of acc[r][t], by the additions of _mm512_reduce_add_ps (lane i +
 * i+8, then i + i+4, then (0 + 2) + (1 + 3)) so a tile's outputs equal a lone output's bit for
 * bit, done for the tile at once: accumulator v = 4 r + t of 16 (zero where r >= R or t >= T)
 * ends in lane 4 t + r, so each token's R outputs leave in one masked store.
 */
INLINE void px_store(int R, int T, __m512 acc[PX_R][PX_T], float *y, int64_t ys)
{
    if (T == 1) { /* decode: nothing to share */
        UNROLL for (int r = 0; r < R; r++)
            y[r] = _mm512_reduce_add_ps(acc[r][0]);
        return;
    }
    const __m512 z = _mm512_setzero_ps();
    __m512 f8[8], f4[4];
    UNROLL for (int r = 0; r < 4; r++)
        UNROLL for (int h = 0; h < 2; h++) {
            const int t = 2 * h;
            f8[2 * r + h] = r >= R || t >= T ? z
                                             : px_fold8(acc[r][t], t + 1 < T ? acc[r][t + 1] : z);
        }
    /* 128-bit lane t of f4[r]: 4 partial sums of acc[r][t]; of f2a: 2 of acc[0][t], then 2 of
     * acc[1][t] (f2b: rows 2, 3); of f1: the sums of acc[0..3][t] */
    UNROLL for (int r = 0; r < 4; r++)
        f4[r] = px_fold4(f8[2 * r], f8[2 * r + 1]);
    const __m512 f2a = _mm512_add_ps(_mm512_shuffle_ps(f4[0], f4[1], 0x44),
                                     _mm512_shuffle_ps(f4[0], f4[1], 0xee));
    const __m512 f2b = _mm512_add_ps(_mm512_shuffle_ps(f4[2], f4[3], 0x44),
                                     _mm512_shuffle_ps(f4[2], f4[3], 0xee));
    const __m512 f1 = _mm512_add_ps(_mm512_shuffle_ps(f2a, f2b, 0x88),
                                    _mm512_shuffle_ps(f2a, f2b, 0xdd));
    UNROLL for (int t = 0; t < T; t++)
        _mm_mask_storeu_ps(y + t * ys, (__mmask8)((1u << R) - 1), _mm512_extractf32x4_ps(f1, t));
}

/* Ask for the next |nl| lines from *pf into L1 (nl > 0) or L2 (nl < 0), up to the last one at
 * pfl (asked again where *pf passed it: no branch depends on where the range ends, and no
 * division is left in the group loop); *pf moves on. */
INLINE void px_prefetch(const uint8_t **pf, const uint8_t *pfl, int nl)
{
    if (nl < 0) /* into L2 only */
        for (int i = 0; i < -nl; i++, *pf += 64)
            _mm_prefetch((const char *)(*pf < pfl ? *pf : pfl), _MM_HINT_T1);
    else
        for (int i = 0; i < nl; i++, *pf += 64)
            _mm_prefetch((const char *)(*pf < pfl ? *pf : pfl), _MM_HINT_NTA);
}

/*
 * Groups [g0, g1) of y[t * ys + r] = row r . token t for r < R, t < T: rows of nb blocks from W
 * (ws bytes apart), tokens' packed groups at A[g * as + t]; from pf, |nl| lines a group are
 * asked for (px_prefetch), the last at pfl. A panel that does not start the row takes its
 * accumulators from ab (16 floats for each (r, t), r * PX_T + t), one that does not end it
 * leaves them there.
 */
INLINE void px_tile(bool q4, int R, int T, int64_t nb, int64_t g0, int64_t g1, const uint8_t *W,
                    size_t ws, const struct px_act *A, int64_t as, const uint8_t *pf,
                    const uint8_t *pfl, int nl, float *ab, float *y, int64_t ys)
{
    const int64_t GF = nb / 16, G = (nb + 15) / 16;
    const int mt = (int)(nb % 16);
    const size_t gq = q4 ? 16 * 16 : 16 * 32; /* level bytes of a full group */
    const uint8_t *q = W + 2 * nb;            /* the levels after the row's scales */
    __m512 acc[PX_R][PX_T];
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int t = 0; t < T; t++)
            acc[r][t] = g0 ? _mm512_load_ps(ab + 16 * (r * PX_T + t)) : _mm512_setzero_ps();
    const int64_t gf = g1 < GF ? g1 : GF;
    for (int64_t g = g0; g < gf; g++) {
        px_prefetch(&pf, pfl, nl);
        px_group(q4, false, R, T, 16, 0xffff, q + g * gq, W + 32 * g, ws, A + g * as, acc);
    }
    if (mt && g1 == G) {
        px_prefetch(&pf, pfl, nl);
        px_group(q4, true, R, T, mt, (__mmask16)((1u << mt) - 1), q + GF * gq, W + 32 * GF, ws,
                 A + GF * as, acc);
    }
    if (g1 == G) {
        px_store(R, T, acc, y, ys);
        return;
    }
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int t = 0; t < T; t++)
            _mm512_store_ps(ab + 16 * (r * PX_T + t), acc[r][t]);
}

/* px_tile for the shapes it is compiled for: R in 1..PX_R, T in 1..PX_T, both types. */
static void px_tiles(bool q4, int R, int T, int64_t nb, int64_t g0, int64_t g1, const uint8_t *W,
                     size_t ws, const struct px_act *A, int64_t as, const uint8_t *pf,
                     const uint8_t *pfl, int nl, float *ab, float *y, int64_t ys)
{
#define PX_SHAPE(q, r, t)                                                                          \
    if (q4 == q && R == r && T == t)                                                               \
        return px_tile(q, r, t, nb, g0, g1, W, ws, A, as, pf, pfl, nl, ab, y, ys);
#define PX_ROWS(q, r) PX_SHAPE(q, r, 4) PX_SHAPE(q, r, 3) PX_SHAPE(q, r, 2) PX_SHAPE(q, r, 1)
    PX_ROWS(false, 3) PX_ROWS(false, 2) PX_ROWS(false, 1)
    PX_ROWS(true, 3) PX_ROWS(true, 2) PX_ROWS(true, 1)
#undef PX_ROWS
#undef PX_SHAPE
}

/* Same contract as kq_matmul_tagged for Q8_0X / Q4_0X weights, any nt; false when n is 0 or
 * over 65536. */
static bool xq_matmul(enum kq_type wt, int64_t n, const uint8_t *W, size_t ws, int64_t r0, int64_t r1,
                      const uint8_t *act, size_t as, int64_t nt, float *y, int64_t ys,
                      uint64_t tag)
{
    const int64_t nb = n / KQ__QK, G = (nb + 15) / 16;
    if (G == 0 || G > PK_MAX_GROUPS || n % KQ__QK)
        return false;
    const bool q4 = wt == KQ_Q4_0X;
    const size_t rb = kq_row_bytes(wt, n), gb = q4 ? 16 * 18 : 16 * 34; /* bytes of a group */
    /* groups of a panel: all of a row where PX_SR_MIN rows fill PX_L1_W (and of any row for one
     * token, which reads each weight once: panels only broke up its stream, 2048 x 6144 decode
     * 0.27-0.32 ms against 0.20-0.23, noisy), else as many as PX_SR_MIN rows of them fill it
     * (from PX_PANEL_T tokens on, PX_SR_PANEL rows); rows of a super-block: whole tiles of such
     * panels that fill PX_L1_W */
    int64_t gp = nt == 1 ? G : (int64_t)(PX_L1_W / (PX_SR_MIN * gb));
    if (gp < G && nt >= PX_PANEL_T)
        gp = (int64_t)(PX_L1_W / (PX_SR_PANEL * gb));
    gp = gp < 1 ? 1 : gp > G ? G : gp;
    const size_t pb = gp == G ? rb : (size_t)gp * gb;
    const int64_t sr = ((int64_t)(PX_L1_W / pb) / PX_R > 1 ? (int64_t)(PX_L1_W / pb) / PX_R : 1) * PX_R;
    /* tokens per chunk: as many whole tiles as the activation buffer holds (at least one: G <=
     * 128) and, with several panels, the accumulator buffer */
    int64_t chunk = (int64_t)(PX_ACT_BYTES / sizeof(struct px_act)) / G / PX_T * PX_T;
    if (gp < G) {
        const int64_t c = (int64_t)(sizeof px_acc_tls / sizeof(struct px_acc)) / (sr / PX_R) * PX_T;
        chunk = c < chunk ? c : chunk;
    }
    chunk = chunk < nt ? chunk : nt;
    for (int64_t t0 = 0; t0 < nt; t0 += chunk) {
        const int64_t tc = t0 + chunk < nt ? chunk : nt - t0, ntt = (tc + PX_T - 1) / PX_T;
        /* all tokens in one chunk: px_act_tls may still hold them from this tag's last call */
        if (!(tc == nt && kq__pack_held(&px_key, tag, act, as, n, nt, wt))) {
            for (int64_t t = 0; t < tc; t++)
                for (int64_t g = 0; g < G; g++)
                    px_pack_act((const struct kq__q8_0 *)(act + (t0 + t) * as), nb, g, q4 ? 3 : 7,
                                &px_act_tls[g * tc + t]);
            px_key = (struct kq__pack_key){tc == nt ? tag : 0, act, as, n, nt, wt};
        }
        for (int64_t rs = r0; rs < r1; rs += sr) {
            const int64_t re = rs + sr < r1 ? rs + sr : r1, nrt = (re - rs + PX_R - 1) / PX_R;
            /* the next super-block's rows, asked for across this one's tiles: nl lines a group,
             * tile after tile (the groups of a tile are its panel's) */
            const int64_t pe = re + sr < r1 ? re + sr : r1;
            const uint8_t *pf = (const uint8_t *)((uintptr_t)(W + re * ws) & ~(uintptr_t)63);
            const size_t pn = pe > re ? (size_t)(W + (pe - 1) * ws + rb - pf) : 0;
            const int64_t ntile = ntt * nrt, npl = (int64_t)(pn + 63) / 64;
            const uint8_t *pfl = pf + (npl ? npl - 1 : 0) * 64;
            for (int64_t g0 = 0; g0 < G; g0 += gp) {
                const int64_t g1 = g0 + gp < G ? g0 + gp : G;
                /* lines of this panel's tiles: its share of npl, whole lines */
                const int64_t pl = npl * g1 / G - npl * g0 / G;
                const int nl = (int)((pl + ntile * (g1 - g0) - 1) / (ntile * (g1 - g0)));
                for (int64_t t = 0; t < tc; t += PX_T) {
                    const int tt = (int)(tc - t < PX_T ? tc - t : PX_T);
                    for (int64_t r = rs; r < re; r += PX_R) {
                        const int rr = (int)(re - r < PX_R ? re - r : PX_R);
                        float *ab = px_acc_tls[t / PX_T * nrt + (r - rs) / PX_R].v;
                        px_tiles(q4, rr, tt, nb, g0, g1, W + r * ws, ws, px_act_tls + t, tc, pf,
                                 pfl, nt >= PX_PF_L1_T ? nl : -nl, ab, y + (t0 + t) * ys + r, ys);
                        pf += (size_t)nl * (size_t)(g1 - g0) * 64;
                    }
                }
            }
        }
    }
    return true;
}

/* ================================ activation quantisers ===================================== */

/* nb Q8_0 blocks from x [32 nb]; the same arithmetic as the scalar reference, step by step
 * (cvtps2dq rounds to nearest even like lrintf; vpmovdb truncation is exact for |q| <= 127). */
static void act_q8_0(const float *x, struct kq__q8_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += KQ__QK) {
        const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m512 vid = _mm512_set1_ps(id);
        _mm_storeu_si128((void *)b[i].qs, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x0, vid))));
        _mm_storeu_si128((void *)(b[i].qs + 16),
                         _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x1, vid))));
    }
}

/* nb Q8_K blocks from x [256 nb]; each zmm of 16 levels is exactly one bsums group. */
static void act_q8_k(const float *x, struct kq__q8_k *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += KQ__QK_K) {
        __m512 m = _mm512_setzero_ps();
        for (int j = 0; j < 16; j++)
            m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * j)));
        const float d = _mm512_reduce_max_ps(m) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = d;
        for (int j = 0; j < 16; j++) {
            const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * j),
                                                               _mm512_set1_ps(id)));
            _mm_storeu_si128((void *)(b[i].qs + 16 * j), _mm512_cvtepi32_epi8(q));
            b[i].bsums[j] = (int16_t)_mm512_reduce_add_epi32(q);
        }
    }
}

/* ================================ entry points ============================================== */

bool kq__avx512_quantize_act(enum kq_type w, const float *x, void *dst, int64_t n)
{
    switch (kq_act_type(w)) {
    case KQ_Q8_0: act_q8_0(x, dst, n / KQ__QK); return true;
    case KQ_Q8_K: act_q8_k(x, dst, n / KQ__QK_K); return true;
    default: return false; /* f32 activations are a copy */
    }
}

/* ================================ peak loops ================================================ */

/* The asm barrier keeps the compiler from hoisting the loop-invariant operands' work. */
/* The int8 and f32 loops apart, so that only one set of 24 accumulators is live (two sets are
 * 48 registers: the compiler would keep half of them in memory). */
static int64_t peak_int8(int64_t n_iter)
{
    __m512i ia[24];
    UNROLL_FULL(24) for (int k = 0; k < 24; k++)
        ia[k] = _mm512_set1_epi32(k);
    __m512i x = _mm512_set1_epi8(3), z = _mm512_set1_epi8(-5);
    for (int64_t i = 0; i < n_iter; i++) {
        UNROLL_FULL(24) for (int k = 0; k < 24; k++)
            ia[k] = _mm512_dpbusd_epi32(ia[k], x, z);
        __asm__ volatile("" : "+v"(x), "+v"(z));
    }
    volatile int sink = 0;
    UNROLL_FULL(24) for (int k = 0; k < 24; k++)
        sink += _mm512_reduce_add_epi32(ia[k]);
    (void)sink;
    return n_iter * 24 * 64;
}

static int64_t peak_f32(int64_t n_iter)
{
    __m512 fa[24];
    UNROLL_FULL(24) for (int k = 0; k < 24; k++)
        fa[k] = _mm512_set1_ps((float)k);
    __m512 u = _mm512_set1_ps(0.999f), v = _mm512_set1_ps(1e-3f);
    for (int64_t i = 0; i < n_iter; i++) {
        UNROLL_FULL(24) for (int k = 0; k < 24; k++)
            fa[k] = _mm512_fmadd_ps(fa[k], u, v);
        __asm__ volatile("" : "+v"(u), "+v"(v));
    }
    volatile int sink = 0;
    UNROLL_FULL(24) for (int k = 0; k < 24; k++)
        sink += (int)_mm512_reduce_add_ps(fa[k]);
    (void)sink;
    return n_iter * 24 * 16;
}

int64_t kq__avx512_peak(bool int8, int64_t n_iter)
{
    return int8 ? peak_int8(n_iter) : peak_f32(n_iter);
}

/* 4 x 4 tiles measured best for prefill across types (32 zmm registers; 2 x 4 and 4 x 2 lose). */
bool kq__avx512_matmul(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0,
                       int64_t r1, const void *act, size_t act_stride, int64_t nt, float *y,
                       int64_t y_stride, uint64_t tag)
{
    const struct kq__tileset *ts;
    if (w == KQ_Q8_0X || w == KQ_Q4_0X)
        return xq_matmul(w, n, W, w_stride, r0, r1, act, act_stride, nt, y, y_stride, tag);
    if (w == KQ_Q4_KX || w == KQ_Q5_KX || w == KQ_Q6_KX)
        return kq__avx512_kx_matmul(w, n, W, w_stride, r0, r1, act, act_stride, nt, y, y_stride,
                                    tag);
    if (nt == 1 && (w == KQ_Q8_0 || w == KQ_Q4_0) && n <= PREP_MAX_N) {
        decode_prepared(w, n, W, w_stride, r0, r1, act, y);
        return true;
    }
    if (nt >= PK_MIN_T && (w == KQ_Q8_0 || w == KQ_Q4_0) &&
        packed_matmul(w, n, W, w_stride, r0, r1, act, act_stride, nt, y, y_stride))
        return true;
    switch (w) {
    case KQ_F32: ts = &f32_tiles; break;
    case KQ_F16: ts = &f16_tiles; break;
    case KQ_BF16: ts = &bf16_tiles; break;
    case KQ_Q8_0: ts = &q8_0_tiles; break;
    case KQ_Q4_0: ts = &q4_0_tiles; break;
    case KQ_Q4_K: ts = &q4_k_tiles; break;
    case KQ_Q5_K: ts = &q5_k_tiles; break;
    case KQ_Q6_K: ts = &q6_k_tiles; break;
    default: return false;
    }
    kq__tile_drive(ts, n, W, w_stride, r0, r1, act, act_stride, nt, y, y_stride);
    return true;
}

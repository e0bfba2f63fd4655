/*
 * kq_avx2 — AVX2 + FMA + F16C matmul and activation quantisers; kq.c calls these only
 * when kq_isa_active() is KQ_ISA_AVX2. Built with the Makefile's AVX2_FLAGS.
 *
 * The same register-tile scheme as kq_avx512.c (R weight rows x T tokens per kernel, walked by
 * kq__tile_drive), sized for 16 ymm registers. A step is 32 elements (one Q8_0/Q4_0 block, one
 * K-quant sub-block of 32 or two of 16) or 8 floats. The decode 1 x 1 tile keeps 4 accumulator
 * chains for the Q8_0/Q4_0 and float types.
 *
 * The stored layouts Q8_0X, Q4_0X and Q4_KX run kq_avx2x.h's register tiles (decode too),
 * built with and without AVX-VNNI (kq_avx2x_avx2.c, kq_avx2x_vnni.c); the dispatch below picks
 * by kq_avx2_vnni().
 *
 * Integer products here (no VNNI): vpmaddubsw (u8 x s8 -> pairs of i16), then vpmaddwd with
 * ones (Q8_0/Q4_0) or with the sub-block scale (K-quants) to i32, exact as in the scalar
 * reference:
 *   Q8_0  |w| . sign(a, w); the i16 pairs stay below 2 * 128 * 127 < 32768
 *   Q4_0  q (0..15) . a, minus 8 * sum(a)
 *   Q4_K/Q5_K/Q6_K  levels (0..63) . a, scaled per sub-block; min terms from the bsums
 *
 * Threads: pure functions.
 */
#include "kq_impl.h" // defines: block structs, kq__tileset, kq__avx2_*
#include "simd_avx2.h" // defines: INLINE, UNROLL, hsum_ps, hmax_ps

#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>

#define RMAX 4
#define TMAX 4
/* Decode kernels prefetch the weight stream this many bytes ahead: the hardware prefetcher alone
 * left the single-row Q4_K kernel at 9.3 GB/s effective on the 1 GB model, 10.2-11.5 with it. */
#define PF_DIST 2048



/* ================================ helpers =================================================== */

/* f16 to f32 with the F16C instruction (exact, like kq_f16_to_f32). */
INLINE float h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* f16 *p broadcast to 8 f32 lanes (a broadcast from memory and one conversion). */
INLINE __m256 f16_bcast(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_set1_epi16((short)*p));
}

INLINE int hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}

/* u8 x s8 products summed in groups of 4 into i32 lanes. */
INLINE __m256i dot_u8s8(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* Dword j = (v_j, v_j) as two i16, from 8 bytes (signed: sign-extend each byte first). */
INLINE __m256i pairdup8(uint64_t v, bool is_signed)
{
    const __m128i b = _mm_cvtsi64_si128((long long)v);
    const __m256i d = is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    return _mm256_or_si256(_mm256_and_si256(d, _mm256_set1_epi32(0xffff)),
                           _mm256_slli_epi32(d, 16));
}

/* All RMAX x TMAX accumulators, so a 1 x 1 tile may use [0][1..3] as extra chains. */
INLINE void zero_tile(__m256 acc[RMAX][TMAX])
{
    UNROLL for (int r = 0; r < RMAX; r++)
        UNROLL for (int t = 0; t < TMAX; t++)
            acc[r][t] = _mm256_setzero_ps();
}

/* y[t * ys + r] = sum of the lanes of acc[r][t]. */
INLINE void store_tile(int R, int T, __m256 acc[RMAX][TMAX], float *y, int64_t ys)
{
    UNROLL for (int t = 0; t < T; t++)
        UNROLL for (int r = 0; r < R; r++)
            y[t * ys + r] = hsum_ps(acc[r][t]);
}

/* The tile shapes of a kernel family NAME##_tile(R, T, ...): RM x TM, RM x 1 and 1 x TM. */
#define TILE_SHAPES(NAME, RM, TM)                                                                 \
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
    }

/* The tile shapes plus the 1 x 1 and DM x 1 decode tiles, packaged as a kq__tileset. */
#define TILESET(NAME, RM, TM, DM)                                                                   \
    TILE_SHAPES(NAME, RM, TM)                                                                     \
    static void NAME##_single(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A,          \
                              size_t as, float *y, int64_t ys)                                    \
    {                                                                                             \
        NAME##_tile(1, 1, n, W, ws, A, as, y, ys);                                                \
    }                                                                                             \
    static void NAME##_dec(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A, size_t as,  \
                           float *y, int64_t ys)                                                  \
    {                                                                                             \
        NAME##_tile(DM, 1, n, W, ws, A, as, y, ys);                                               \
    }                                                                                             \
    static const struct kq__tileset NAME##_tiles = {RM, TM, NAME##_full, NAME##_rows,            \
                                                    NAME##_toks, NAME##_single,  \
                                                    DM, NAME##_dec, {NULL}}

/* The tile shapes with a hand-written decode kernel SINGLE; short rows decode RM x 1. */
#define TILESET_DECODE(NAME, RM, TM, SINGLE)                                                      \
    TILE_SHAPES(NAME, RM, TM)                                                                     \
    static const struct kq__tileset NAME##_tiles = {RM, TM, NAME##_full, NAME##_rows,            \
                                                    NAME##_toks, SINGLE, RM, NAME##_rows, {NULL}}

/* ================================ F32 / F16 / BF16 weights ================================== */

/* 8 weights from element i of a float-type row as f32 (bf16: the bits shifted into place). */
INLINE __m256 load_wf(enum kq_type wt, const uint8_t *row, int64_t i)
{
    if (wt == KQ_F32)
        return _mm256_loadu_ps((const float *)row + i);
    const __m128i h = _mm_loadu_si128((const void *)((const uint16_t *)row + i));
    if (wt == KQ_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Scalar weight i of a float-type row (the tail past the last multiple of 8). */
INLINE float scalar_wf(enum kq_type wt, const uint8_t *row, int64_t i)
{
    uint16_t h;
    if (wt == KQ_F32) {
        float f;
        memcpy(&f, row + 4 * i, 4);
        return f;
    }
    memcpy(&h, row + 2 * i, 2);
    if (wt == KQ_F16)
        return h2f(h);
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Float-type weights against f32 activations; the n % 8 tail is added in scalar code. */
INLINE void float_tile(enum kq_type wt, int R, int T, int64_t n, const uint8_t *W, size_t ws,
                       const uint8_t *A, size_t as, float *y, int64_t ys)
{
    __m256 acc[RMAX][TMAX];
    zero_tile(acc);
    int64_t i = 0;
    for (; R * T == 1 && i + 32 <= n; i += 32) /* 1 x 1: four chains, as in BLOCK32_TILE */
        UNROLL for (int k = 0; k < 4; k++)
            acc[0][k] = _mm256_fmadd_ps(load_wf(wt, W, i + 8 * k),
                                        _mm256_loadu_ps((const float *)A + i + 8 * k), acc[0][k]);
    for (; i + 8 <= n; i += 8) {
        __m256 w[RMAX];
        UNROLL for (int r = 0; r < R; r++)
            w[r] = load_wf(wt, W + r * ws, i);
        UNROLL for (int t = 0; t < T; t++) {
            const __m256 a = _mm256_loadu_ps((const float *)(A + t * as) + i);
            UNROLL for (int r = 0; r < R; r++)
                acc[r][t] = _mm256_fmadd_ps(w[r], a, acc[r][t]);
        }
    }
    if (R * T == 1)
        acc[0][0] = _mm256_add_ps(_mm256_add_ps(acc[0][0], acc[0][1]),
                                  _mm256_add_ps(acc[0][2], acc[0][3]));
    store_tile(R, T, acc, y, ys);
    for (int64_t k = i; k < n; k++)
        UNROLL for (int t = 0; t < T; t++)
            UNROLL for (int r = 0; r < R; r++)
                y[t * ys + r] += scalar_wf(wt, W + r * ws, k) * ((const float *)(A + t * as))[k];
}

#define f32_tile(R, T, ...) float_tile(KQ_F32, R, T, __VA_ARGS__)
#define f16_tile(R, T, ...) float_tile(KQ_F16, R, T, __VA_ARGS__)
#define bf16_tile(R, T, ...) float_tile(KQ_BF16, R, T, __VA_ARGS__)
TILESET(f32, 4, 2, 4);
TILESET(f16, 4, 2, 4);
TILESET(bf16, 4, 2, 4);

/* ================================ Q8_0 / Q4_0 weights ======================================= */

/* Block ib of R Q8_0 rows x T tokens into acc[r][t + k] (k > 0 only for the 1 x 1 tile). */
INLINE void q8_0_step(int R, int T, const uint8_t *W, size_t ws, const uint8_t *A, size_t as,
                      int64_t ib, __m256 acc[RMAX][TMAX], int k)
{
    __m256i w[RMAX], wabs[RMAX];
    __m256 wd[RMAX];
    UNROLL for (int r = 0; r < R; r++) {
        const struct kq__q8_0 *b = (const struct kq__q8_0 *)(W + r * ws) + ib;
        w[r] = _mm256_loadu_si256((const void *)b->qs);
        wabs[r] = _mm256_abs_epi8(w[r]);
        wd[r] = f16_bcast(&b->d);
    }
    UNROLL for (int t = 0; t < T; t++) {
        const struct kq__q8_0 *c = (const struct kq__q8_0 *)(A + t * as) + ib;
        const __m256i a = _mm256_loadu_si256((const void *)c->qs);
        const __m256 ad = f16_bcast(&c->d);
        UNROLL for (int r = 0; r < R; r++) {
            const __m256i p = dot_u8s8(wabs[r], _mm256_sign_epi8(a, w[r]));
            acc[r][t + k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(wd[r], ad),
                                            acc[r][t + k]);
        }
    }
}

/* As q8_0_step for Q4_0 rows: nibbles unpacked to bytes 0..15 in element order. */
INLINE void q4_0_step(int R, int T, const uint8_t *W, size_t ws, const uint8_t *A, size_t as,
                      int64_t ib, __m256 acc[RMAX][TMAX], int k)
{
    __m256i wq[RMAX];
    __m256 wd[RMAX];
    UNROLL for (int r = 0; r < R; r++) {
        const struct kq__q4_0 *b = (const struct kq__q4_0 *)(W + r * ws) + ib;
        const __m128i v = _mm_loadu_si128((const void *)b->qs);
        const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
        wq[r] = _mm256_and_si256(both, _mm256_set1_epi8(15)); /* elements 0..15, 16..31 */
        wd[r] = f16_bcast(&b->d);
    }
    UNROLL for (int t = 0; t < T; t++) {
        const struct kq__q8_0 *c = (const struct kq__q8_0 *)(A + t * as) + ib;
        const __m256i a = _mm256_loadu_si256((const void *)c->qs);
        const __m256 ad = f16_bcast(&c->d);
        const __m256i a8 = dot_u8s8(_mm256_set1_epi8(8), a); /* the "- 8" of every level */
        UNROLL for (int r = 0; r < R; r++) {
            const __m256i p = _mm256_sub_epi32(dot_u8s8(wq[r], a), a8);
            acc[r][t + k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(wd[r], ad),
                                            acc[r][t + k]);
        }
    }
}

/* A 1 x 1 tile (the decode kernel) rotates four accumulators so steps do not wait on FMAs. */
#define BLOCK32_TILE(NAME)                                                                        \
    INLINE void NAME##_tile(int R, int T, int64_t n, const uint8_t *W, size_t ws,                \
                            const uint8_t *A, size_t as, float *y, int64_t ys)                    \
    {                                                                                             \
        __m256 acc[RMAX][TMAX];                                                                   \
        zero_tile(acc);                                                                           \
        const int64_t nb = n / KQ__QK;                                                            \
        int64_t ib = 0;                                                                           \
        for (; R * T == 1 && ib + 4 <= nb; ib += 4) {                                             \
            const char *pf = (const char *)W + ib * (int64_t)sizeof(struct kq__##NAME) + PF_DIST;  \
            _mm_prefetch(pf, _MM_HINT_T0);                                                        \
            _mm_prefetch(pf + 64, _MM_HINT_T0);                                                   \
            _mm_prefetch(pf + 128, _MM_HINT_T0);                                                  \
            UNROLL for (int k = 0; k < 4; k++)                                                    \
                NAME##_step(1, 1, W, ws, A, as, ib + k, acc, k);                                  \
        }                                                                                         \
        for (; ib < nb; ib++)                                                                     \
            NAME##_step(R, T, W, ws, A, as, ib, acc, 0);                                          \
        if (R * T == 1)                                                                           \
            acc[0][0] = _mm256_add_ps(_mm256_add_ps(acc[0][0], acc[0][1]),                        \
                                      _mm256_add_ps(acc[0][2], acc[0][3]));                       \
        store_tile(R, T, acc, y, ys);                                                             \
    }

BLOCK32_TILE(q8_0)
BLOCK32_TILE(q4_0)
TILESET(q8_0, 4, 2, 4);
TILESET(q4_0, 4, 2, 4);

/* ================================ K-quant weights =========================================== */

/* One K-quant row's super-block, unpacked for the 8 steps of 32 elements. */
struct krow {
    const uint8_t *qs, *ql, *qh; /* qs: Q4_K/Q5_K nibbles; ql, qh: Q6_K; qh also Q5_K */
    __m256i sc_lo, sc_hi;        /* dword j = (scale, scale) as i16: sub-blocks 0-7 / 8-15 */
    __m256i mins;                /* Q4/5_K: dword j = (m_j, m_j); Q6_K: the 16 scales as i16 */
    float d, dmin;
};

/* Unpack super-block ib of a K-quant row: scales as pair-duplicated dwords, f32 d / dmin. */
INLINE struct krow krow_load(enum kq_type wt, const uint8_t *row, int64_t ib)
{
    struct krow k = {0};
    uint64_t sc, m;
    if (wt == KQ_Q6_K) {
        const struct kq__q6_k *b = (const struct kq__q6_k *)row + ib;
        uint64_t sc_hi;
        memcpy(&sc, b->scales, 8);
        memcpy(&sc_hi, b->scales + 8, 8);
        k.sc_lo = pairdup8(sc, true);
        k.sc_hi = pairdup8(sc_hi, true);
        k.mins = _mm256_cvtepi8_epi16(_mm_loadu_si128((const void *)b->scales));
        k.ql = b->ql, k.qh = b->qh, k.d = h2f(b->d);
        return k;
    }
    if (wt == KQ_Q4_K) {
        const struct kq__q4_k *b = (const struct kq__q4_k *)row + ib;
        kq__unpack_scales(b->scales, &sc, &m);
        k.qs = b->qs, k.d = h2f(b->d), k.dmin = h2f(b->dmin);
    } else {
        const struct kq__q5_k *b = (const struct kq__q5_k *)row + ib;
        kq__unpack_scales(b->scales, &sc, &m);
        k.qs = b->qs, k.qh = b->qh, k.d = h2f(b->d), k.dmin = h2f(b->dmin);
    }
    k.sc_lo = pairdup8(sc, false);
    k.mins = pairdup8(m, false);
    return k;
}

/* Levels of step s (elements 32s .. 32s+31) as unsigned bytes. */
INLINE __m256i krow_levels(enum kq_type wt, const struct krow *k, int s)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    if (wt == KQ_Q6_K) { /* half h, chunk c: see struct kq__q6_k */
        const int h = s / 4, c = s % 4;
        const __m256i ql = _mm256_loadu_si256((const void *)(k->ql + 64 * h + 32 * (c & 1)));
        const __m256i qh = _mm256_loadu_si256((const void *)(k->qh + 32 * h));
        const __m256i lo = _mm256_and_si256(c >= 2 ? _mm256_srli_epi16(ql, 4) : ql, m4);
        const __m256i hi = c == 0   ? _mm256_slli_epi16(qh, 4)
                           : c == 1 ? _mm256_slli_epi16(qh, 2)
                           : c == 2 ? qh
                                    : _mm256_srli_epi16(qh, 2); /* bits 2c, 2c+1 -> 4, 5 */
        return _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
    }
    const __m256i v = _mm256_loadu_si256((const void *)(k->qs + 32 * (s / 2)));
    __m256i q = _mm256_and_si256(s % 2 ? _mm256_srli_epi16(v, 4) : v, m4);
    if (wt == KQ_Q5_K) { /* bit s of qh[l] */
        const __m256i bit = _mm256_set1_epi8((char)(1 << s));
        const __m256i qh = _mm256_loadu_si256((const void *)k->qh);
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
        q = _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(16)));
    }
    return q;
}

/* Per-lane i16 scales of step s for the vpmaddubsw output (16 lanes). */
INLINE __m256i krow_scales(enum kq_type wt, const struct krow *k, int s)
{
    if (wt == KQ_Q6_K) { /* sub-blocks 2s, 2s + 1 of 16 elements: 8 lanes = 4 dwords each */
        const int j = (2 * s) % 8;
        const __m256i idx = _mm256_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1);
        return _mm256_permutevar8x32_epi32(s < 4 ? k->sc_lo : k->sc_hi, idx);
    }
    return _mm256_permutevar8x32_epi32(k->sc_lo, _mm256_set1_epi32(s));
}

/* Super-block ib of R rows x T tokens (kept whole: the 8 steps share iacc). */
INLINE void ksb(enum kq_type wt, int R, int T, const uint8_t *W, size_t ws, const uint8_t *A,
                size_t as, int64_t ib, __m256 acc[RMAX][TMAX])
{
    struct krow k[RMAX];
    __m256i iacc[RMAX][TMAX];
    UNROLL for (int r = 0; r < R; r++) {
        k[r] = krow_load(wt, W + r * ws, ib);
        UNROLL for (int t = 0; t < T; t++)
            iacc[r][t] = _mm256_setzero_si256();
    }
    UNROLL for (int s = 0; s < 8; s++) {
        __m256i q[RMAX], sc[RMAX];
        UNROLL for (int r = 0; r < R; r++) {
            q[r] = krow_levels(wt, &k[r], s);
            sc[r] = krow_scales(wt, &k[r], s);
        }
        UNROLL for (int t = 0; t < T; t++) {
            const struct kq__q8_k *c = (const struct kq__q8_k *)(A + t * as) + ib;
            const __m256i a = _mm256_loadu_si256((const void *)(c->qs + 32 * s));
            UNROLL for (int r = 0; r < R; r++) {
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[r], a), sc[r]);
                iacc[r][t] = _mm256_add_epi32(iacc[r][t], p);
            }
        }
    }
    UNROLL for (int t = 0; t < T; t++) {
        const struct kq__q8_k *c = (const struct kq__q8_k *)(A + t * as) + ib;
        const __m256i bs = _mm256_loadu_si256((const void *)c->bsums);
        UNROLL for (int r = 0; r < R; r++) {
            const __m256i mt = _mm256_madd_epi16(bs, k[r].mins);
            if (wt == KQ_Q6_K) { /* same scale as the main sum: fold in as integers */
                iacc[r][t] = _mm256_sub_epi32(iacc[r][t], _mm256_slli_epi32(mt, 5));
            } else {
                acc[r][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mt),
                                             _mm256_set1_ps(k[r].dmin * c->d), acc[r][t]);
            }
            acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][t]),
                                        _mm256_set1_ps(k[r].d * c->d), acc[r][t]);
        }
    }
}

#define KQUANT_TILE(NAME, WT)                                                                     \
    INLINE void NAME##_tile(int R, int T, int64_t n, const uint8_t *W, size_t ws,                \
                            const uint8_t *A, size_t as, float *y, int64_t ys)                    \
    {                                                                                             \
        __m256 acc[RMAX][TMAX];                                                                   \
        zero_tile(acc);                                                                           \
        for (int64_t ib = 0; ib < n / KQ__QK_K; ib++)                                             \
            ksb(WT, R, T, W, ws, A, as, ib, acc);                                                 \
        store_tile(R, T, acc, y, ys);                                                             \
    }

KQUANT_TILE(q4_k, KQ_Q4_K)
KQUANT_TILE(q5_k, KQ_Q5_K)
KQUANT_TILE(q6_k, KQ_Q6_K)
/* Q5_K / Q6_K: 1 row x 4 tokens, the rest of the tokens 1 x 2 or 1 x 3 (6144 x 2048 from DRAM,
 * 2 threads, against the 2 x 2 tiles: 1.1-1.5x at 4 and 16 tokens, prefill 1.4x; 2 x 4, 4 x 2,
 * 2 x 3, 3 x 2 and 1 x 3 measured between the two). */
#define TILESET_1X4(NAME)                                                                          \
    TILE_SHAPES(NAME, 1, 4)                                                                        \
    static void NAME##_dec(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A, size_t as,   \
                           float *y, int64_t ys)                                                   \
    {                                                                                              \
        NAME##_tile(4, 1, n, W, ws, A, as, y, ys);                                                 \
    }                                                                                              \
    static void NAME##_t2(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A, size_t as,    \
                          float *y, int64_t ys)                                                    \
    {                                                                                              \
        NAME##_tile(1, 2, n, W, ws, A, as, y, ys);                                                 \
    }                                                                                              \
    static void NAME##_t3(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A, size_t as,    \
                          float *y, int64_t ys)                                                    \
    {                                                                                              \
        NAME##_tile(1, 3, n, W, ws, A, as, y, ys);                                                 \
    }                                                                                              \
    static const struct kq__tileset NAME##_tiles = {                                               \
        1, 4, NAME##_full, NAME##_rows, NAME##_toks, NAME##_rows, 4, NAME##_dec,                   \
        {NULL, NULL, NAME##_t2, NAME##_t3}}
TILESET_1X4(q5_k);
TILESET_1X4(q6_k);

/*
 * The Q4_K decode kernel (1 row x 1 token), leaner than ksb's 1 x 1 case, which spends two
 * thirds of its instructions on scales and levels and so ran below the memory bandwidth. Per
 * super-block: the 6-bit scales and mins are unpacked in general-purpose registers and widened
 * once to 16 int16 lanes; each 32-element sub-block's scale is spread over a vector with one
 * vpshufb; the min term is one vpmaddwd of the mins against the activation's 32-element sums
 * (pairs of its 16-element bsums, which fit int16). The integer sums are those of ksb.
 */
static const uint8_t q4k_spread[8][32] = {
#define SPREAD(j) {2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), \
                   2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, \
                   2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), \
                   2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1, \
                   2 * (j), 2 * (j) + 1, 2 * (j), 2 * (j) + 1}
    SPREAD(0), SPREAD(1), SPREAD(2), SPREAD(3), SPREAD(4), SPREAD(5), SPREAD(6), SPREAD(7)
#undef SPREAD
};

static void q4_k_single(int64_t n, const uint8_t *W, size_t ws, const uint8_t *A, size_t as,
                        float *y, int64_t ys)
{
    (void)ws, (void)as, (void)ys;
    const struct kq__q4_k *w = (const struct kq__q4_k *)W;
    const struct kq__q8_k *a = (const struct kq__q8_k *)A;
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t ib = 0; ib < n / KQ__QK_K; ib++) {
        uint64_t sc, m;
        _mm_prefetch((const char *)(w + ib) + PF_DIST, _MM_HINT_T0);
        _mm_prefetch((const char *)(w + ib) + PF_DIST + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(w + ib) + PF_DIST + 128, _MM_HINT_T0);
        kq__unpack_scales(w[ib].scales, &sc, &m);
        const __m256i sm = _mm256_cvtepu8_epi16(_mm_set_epi64x((long long)m, (long long)sc));
        const __m256i bs = _mm256_loadu_si256((const void *)a[ib].bsums);
        const __m128i b32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        const __m128i pm = _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), b32);
        accm = _mm_fmadd_ps(_mm_cvtepi32_ps(pm), _mm_set1_ps(h2f(w[ib].dmin) * a[ib].d), accm);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
        __m256i sumi = _mm256_setzero_si256();
        UNROLL for (int i = 0; i < 4; i++) { /* sub-blocks 2i (low nibbles), 2i + 1 (high) */
            const __m256i q = _mm256_loadu_si256((const void *)(w[ib].qs + 32 * i));
            const __m256i sl = _mm256_shuffle_epi8(scales, _mm256_loadu_si256((const void *)q4k_spread[2 * i]));
            const __m256i sh = _mm256_shuffle_epi8(scales, _mm256_loadu_si256((const void *)q4k_spread[2 * i + 1]));
            const __m256i pl = _mm256_maddubs_epi16(_mm256_and_si256(q, m4),
                                                    _mm256_loadu_si256((const void *)(a[ib].qs + 64 * i)));
            const __m256i ph = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                                    _mm256_loadu_si256((const void *)(a[ib].qs + 64 * i + 32)));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_madd_epi16(pl, sl), _mm256_madd_epi16(ph, sh)));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(h2f(w[ib].d) * a[ib].d), acc);
    }
    __m128 m2 = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    m2 = _mm_add_ss(m2, _mm_movehdup_ps(m2));
    *y = hsum_ps(acc) - _mm_cvtss_f32(m2);
}

TILESET_DECODE(q4_k, 2, 2, q4_k_single);

/* Levels of step k of a Q4_KX super-block (kq.h: Q4_K with its levels transposed, dword j of
 * every 32-byte step in sub-block j): the low nibbles of qs[32 (k / 2) ..], odd k high. The
 * packed prefill below reads plain Q4_K through it too; Q4_KX weights run kq_avx2x.h. */
INLINE __m256i q4kx_levels(const struct kq__q4_k *b, int k)
{
    const __m256i x = _mm256_loadu_si256((const void *)(b->qs + 32 * (k / 2)));
    return _mm256_and_si256(k % 2 ? _mm256_srli_epi16(x, 4) : x, _mm256_set1_epi8(15));
}

/* ================================ prefill with packed groups ================================ */

/*
 * Prefill (many tokens) of Q8_0 / Q4_0 / Q4_K weights. The tile kernels above finish every
 * block of 32 products with a conversion, a scale product and an FMA (K-quants: a scale permute
 * and level unpacking per 32), because each vector of products belongs to one block. Here a
 * group of 8 blocks is packed lane-wise: dword k (elements 4k..4k+3) of block b goes to lane b
 * of vector k, so the 8 steps of a group (vpmaddubsw, vpmaddwd, vpaddd each, plus vpsignb for
 * signed levels) leave the 8 exact integer block dots in the 8 lanes of one register, and one
 * conversion, one scale product and one FMA finish all 8.
 *   activations: s8 levels, f32 block scales (Q8_K: the row scale; s = scale * block sum)
 *   Q8_0, Q4_0:  s8 levels (Q4_0: q - 8), f32 block scales; the products are |a| . sign(w, a)
 *                with |a| formed once per step for all rows. A weight of -128 would overflow
 *                there (sign(-128, a < 0) is +128), so rows holding one take |w| . sign(a, w).
 *   Q4_K:        the 8 sub-blocks of a super-block as the blocks: u8 levels 0..15 straight
 *                into vpmaddubsw, scale d * sc_j, and the min term dmin * m_j * (block sum of
 *                the activation), one more FMA per group.
 * Each thread packs a chunk of tokens' activations once, then each block of R rows once per
 * chunk, and runs the R rows against one token at a time. A row's arithmetic (its chain of
 * groups, lane by lane) depends on nothing but its own data: not on R, the token count or the
 * thread split. Lanes of a last, partial group are zero blocks.
 * The activation chunk lives in L3 (up to PK_ACT_BYTES, a per-thread heap buffer kept for the
 * thread's life): every token chunk re-packs all weight rows from DRAM, so a chunk sized for
 * L2 (about 50 tokens) spent 12% of a 512-token prefill packing; the packed rows (R of them)
 * are what must stay in L1.
 */
/* From 2 tokens: batched decode of 2..7 sequences (6144 x 2048 Q8_0 from DRAM, one thread, time
 * per matmul against one token's: the 4 x 2 tiles 2.16 / 2.45 / 2.82 at 2 / 3 / 4 tokens, packed
 * 1.69 / 2.01 / 2.29; both compute-bound, without VNNI). */
#define PK_MIN_T 2
#define PK_MAX_GROUPS 256  /* n <= 65536 */
#define PK_R 8             /* rows per kernel call at most */
#define PK_ACT_BYTES (8u << 20)
#define PK_W_BYTES (24u << 10) /* a block of packed rows should stay in L1 */

struct pk_grp {
    __m256i q[8]; /* q[k] lane b: dword k of block b */
    __m256 d;     /* block scales */
    __m256 s;     /* Q4_K weights: dmin * m_j; Q8_K activations: scale * block sum */
};

/* How pk_kernel forms the products (see above). */
enum pk_mode { PK_SIGNED, PK_SIGNED_WIDE, PK_UNSIGNED };

/* The calling thread's activation buffer of at least n groups (grown, never shrunk; freed by
 * the key's destructor when the thread exits), or NULL when out of memory. */
struct pk_buf {
    int64_t cap;
    struct pk_grp g[];
};
static pthread_key_t pk_key;
static pthread_once_t pk_once = PTHREAD_ONCE_INIT;
static bool pk_key_ok;

static void pk_key_init(void)
{
    pk_key_ok = pthread_key_create(&pk_key, free) == 0;
}

static struct pk_grp *pk_act_buf(int64_t n)
{
    pthread_once(&pk_once, pk_key_init);
    if (!pk_key_ok)
        return NULL;
    struct pk_buf *b = pthread_getspecific(pk_key);
    if (b && b->cap >= n)
        return b->g;
    const int64_t cap = b && 2 * b->cap > n ? 2 * b->cap : n;
    struct pk_buf *nb = aligned_alloc(32, sizeof *nb + (size_t)cap * sizeof(struct pk_grp));
    if (!nb || pthread_setspecific(pk_key, nb) != 0) {
        free(nb);
        return NULL;
    }
    free(b);
    nb->cap = cap;
    return nb->g;
}
static _Thread_local struct pk_grp pk_w_tls[PK_MAX_GROUPS > PK_W_BYTES / sizeof(struct pk_grp)
                                                ? PK_MAX_GROUPS
                                                : PK_W_BYTES / sizeof(struct pk_grp)];

/* v[k] lane b = dword k of v[b] (an 8 x 8 dword transpose: 24 in-register shuffles). */
INLINE void pk_transpose(__m256i v[8])
{
    __m256i a[8], b[8];
    UNROLL for (int i = 0; i < 4; i++) { /* dwords of rows 2i, 2i+1 interleaved */
        a[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    UNROLL for (int i = 0; i < 2; i++) /* qwords of row pairs (4i, 4i+1), (4i+2, 4i+3) */
        UNROLL for (int j = 0; j < 2; j++) {
            b[4 * i + 2 * j] = _mm256_unpacklo_epi64(a[4 * i + j], a[4 * i + 2 + j]);
            b[4 * i + 2 * j + 1] = _mm256_unpackhi_epi64(a[4 * i + j], a[4 * i + 2 + j]);
        }
    /* b[4i + m] holds dword m (low lane) and m + 4 (high lane) of rows 4i .. 4i+3 */
    UNROLL for (int m = 0; m < 4; m++) {
        v[m] = _mm256_permute2x128_si256(b[m], b[4 + m], 0x20);
        v[m + 4] = _mm256_permute2x128_si256(b[m], b[4 + m], 0x31);
    }
}

/* Transpose v into o->q; true when a level is -128. */
INLINE bool pk_store(__m256i v[8], struct pk_grp *o)
{
    __m256i lowest = _mm256_setzero_si256();
    pk_transpose(v);
    UNROLL for (int k = 0; k < 8; k++) {
        _mm256_store_si256(&o->q[k], v[k]);
        lowest = _mm256_or_si256(lowest, _mm256_cmpeq_epi8(v[k], _mm256_set1_epi8(-128)));
    }
    return !_mm256_testz_si256(lowest, lowest);
}

/* Group g of a row of nb Q8_0 (or, for weights, Q4_0) blocks, packed into *o; true when one of
 * its levels is -128. */
static bool pk_pack(enum kq_type wt, const uint8_t *row, int64_t nb, int64_t g, struct pk_grp *o)
{
    _Alignas(32) uint16_t d[8] = {0};
    __m256i v[8];
    for (int b = 0; b < 8; b++) {
        const int64_t ib = 8 * g + b;
        if (ib >= nb) {
            v[b] = _mm256_setzero_si256();
        } else if (wt == KQ_Q8_0) {
            const struct kq__q8_0 *blk = (const struct kq__q8_0 *)row + ib;
            v[b] = _mm256_loadu_si256((const void *)blk->qs);
            d[b] = blk->d;
        } else { /* Q4_0: elements 0..15 low nibbles, 16..31 high ones, minus 8 */
            const struct kq__q4_0 *blk = (const struct kq__q4_0 *)row + ib;
            const __m128i x = _mm_loadu_si128((const void *)blk->qs);
            const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
            v[b] = _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(15)), _mm256_set1_epi8(8));
            d[b] = blk->d;
        }
    }
    o->d = _mm256_cvtph_ps(_mm_load_si128((const void *)d));
    o->s = _mm256_setzero_ps();
    return pk_store(v, o);
}

/* Super-block g of a Q4_K weight row (sub-block 2i is the low nibbles of qs[32i ..], 2i + 1
 * the high ones). */
static void pk_pack_q4_k(const struct kq__q4_k *row, int64_t g, struct pk_grp *o)
{
    const struct kq__q4_k *b = row + g;
    __m256i v[8];
    UNROLL for (int k = 0; k < 8; k++)
        v[k] = q4kx_levels(b, k);
    pk_transpose(v);
    UNROLL for (int k = 0; k < 8; k++)
        _mm256_store_si256(&o->q[k], v[k]);
    uint64_t sc, m;
    kq__unpack_scales(b->scales, &sc, &m);
    const __m256 fsc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
    const __m256 fm = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m)));
    o->d = _mm256_mul_ps(_mm256_set1_ps(h2f(b->d)), fsc);
    o->s = _mm256_mul_ps(_mm256_set1_ps(h2f(b->dmin)), fm);
}

/* Super-block g of a Q8_K activation row: levels, the row scale and its 32-element sums. */
static void pk_pack_q8_k(const struct kq__q8_k *row, int64_t g, struct pk_grp *o)
{
    const struct kq__q8_k *b = row + g;
    __m256i v[8];
    UNROLL for (int j = 0; j < 8; j++)
        v[j] = _mm256_loadu_si256((const void *)(b->qs + 32 * j));
    pk_transpose(v);
    UNROLL for (int k = 0; k < 8; k++)
        _mm256_store_si256(&o->q[k], v[k]);
    const __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256((const void *)b->bsums),
                                         _mm256_set1_epi16(1)); /* pairs of 16-element sums */
    o->d = _mm256_set1_ps(b->d);
    o->s = _mm256_mul_ps(_mm256_cvtepi32_ps(bs), o->d);
}

/* y[r] = row r . token for r < R: R packed rows of G groups (row-major) against one token. */
INLINE void pk_kernel(enum pk_mode mode, int R, int64_t G, const struct pk_grp *W,
                      const struct pk_grp *A, float *y)
{
    __m256 acc[PK_R];
    const __m256i ones = _mm256_set1_epi16(1);
    UNROLL for (int r = 0; r < R; r++)
        acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        __m256i s[PK_R];
        UNROLL for (int r = 0; r < R; r++)
            s[r] = _mm256_setzero_si256();
        UNROLL for (int k = 0; k < 8; k++) {
            const __m256i a = _mm256_load_si256(&A[g].q[k]), aabs = _mm256_abs_epi8(a);
            UNROLL for (int r = 0; r < R; r++) {
                const __m256i w = _mm256_load_si256(&W[r * G + g].q[k]);
                const __m256i p = mode == PK_UNSIGNED ? _mm256_maddubs_epi16(w, a)
                                  : mode == PK_SIGNED ? _mm256_maddubs_epi16(aabs, _mm256_sign_epi8(w, a))
                                  : _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
                s[r] = mode == PK_UNSIGNED ? _mm256_add_epi16(s[r], p)
                                           : _mm256_add_epi32(s[r], _mm256_madd_epi16(p, ones));
            }
        }
        UNROLL for (int r = 0; r < R; r++) {
            const struct pk_grp *w = &W[r * G + g];
            if (mode == PK_UNSIGNED) /* i16 sums of 8 steps: |8 x 2 x 15 x 127| < 32768 */
                s[r] = _mm256_madd_epi16(s[r], ones);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r]), _mm256_mul_ps(w->d, A[g].d), acc[r]);
            if (mode == PK_UNSIGNED)
                acc[r] = _mm256_fnmadd_ps(w->s, A[g].s, acc[r]);
        }
    }
    UNROLL for (int r = 0; r < R; r++)
        y[r] = hsum_ps(acc[r]);
}

/* The shapes pk_kernel is compiled for; any other row count runs as several calls. */
static void pk_rows(enum pk_mode mode, int R, int64_t G, const struct pk_grp *W,
                    const struct pk_grp *A, float *y)
{
    if (mode == PK_SIGNED_WIDE)
        for (int r = 0; r < R; r++)
            pk_kernel(PK_SIGNED_WIDE, 1, G, W + r * G, A, y + r);
    else if (mode == PK_SIGNED && R == 8)
        pk_kernel(PK_SIGNED, 8, G, W, A, y);
    else if (mode == PK_SIGNED && R == 4)
        pk_kernel(PK_SIGNED, 4, G, W, A, y);
    else if (mode == PK_SIGNED)
        for (int r = 0; r < R; r++)
            pk_kernel(PK_SIGNED, 1, G, W + r * G, A, y + r);
    else if (R == 8)
        pk_kernel(PK_UNSIGNED, 8, G, W, A, y);
    else if (R == 4)
        pk_kernel(PK_UNSIGNED, 4, G, W, A, y);
    else
        for (int r = 0; r < R; r++)
            pk_kernel(PK_UNSIGNED, 1, G, W + r * G, A, y + r);
}

/* Ask for bytes [lo, hi) of a row ahead of its packing, group by group (see kq_avx512.c). */
static void pk_prefetch_row(const uint8_t *row, size_t lo, size_t hi)
{
    for (size_t o = lo & ~(size_t)63; o < hi; o += 64)
        _mm_prefetch((const char *)row + o, _MM_HINT_T1);
}

/* Same contract as kq_matmul for Q8_0 / Q4_0 / Q4_K weights and nt >= PK_MIN_T; false when n
 * is 0 or too long for the packing buffers (the caller then uses the tiles). */
static bool packed_matmul(enum kq_type wt, int64_t n, const uint8_t *W, size_t ws, int64_t r0,
                          int64_t r1, const uint8_t *act, size_t as, int64_t nt, float *y,
                          int64_t ys)
{
    const bool kq = wt == KQ_Q4_K;
    const int64_t nb = kq ? n / KQ__QK_K : n / KQ__QK; /* blocks, or super-blocks for Q4_K */
    const int64_t G = kq ? nb : (nb + 7) / 8;
    if (G == 0 || G > PK_MAX_GROUPS || n % (kq ? KQ__QK_K : KQ__QK))
        return false;
    int64_t chunk = (int64_t)(PK_ACT_BYTES / sizeof(struct pk_grp)) / G;
    chunk = chunk < nt ? chunk : nt;
    struct pk_grp *pa = pk_act_buf(chunk * G);
    if (!pa)
        return false;
    int64_t R = (int64_t)(PK_W_BYTES / sizeof(struct pk_grp)) / G;
    R = R >= 8 ? 8 : R >= 4 ? 4 : R >= 2 ? 2 : 1;
    for (int64_t t0 = 0; t0 < nt; t0 += chunk) {
        const int64_t t1 = t0 + chunk < nt ? t0 + chunk : nt;
        for (int64_t t = t0; t < t1; t++)
            for (int64_t g = 0; g < G; g++) { /* activation levels are never -128 */
                struct pk_grp *o = &pa[(t - t0) * G + g];
                if (kq)
                    pk_pack_q8_k((const struct kq__q8_k *)(act + t * as), g, o);
                else
                    (void)pk_pack(KQ_Q8_0, act + t * as, nb, g, o);
            }
        for (int64_t r = r0; r < r1; r += R) {
            const int rr = (int)(r1 - r < R ? r1 - r : R);
            bool wide = false;
            for (int i = 0; i < rr; i++) {
                for (int64_t g = 0; g < G; g++) {
                    if (r + R + i < r1) /* the next block's row i, group by group */
                        pk_prefetch_row(W + (r + R + i) * ws, (size_t)g * ws / G,
                                        (size_t)(g + 1) * ws / G);
                    struct pk_grp *o = &pk_w_tls[i * G + g];
                    if (kq)
                        pk_pack_q4_k((const struct kq__q4_k *)(W + (r + i) * ws), g, o);
                    else
                        wide |= pk_pack(wt, W + (r + i) * ws, nb, g, o);
                }
            }
            const enum pk_mode mode = kq ? PK_UNSIGNED : wide ? PK_SIGNED_WIDE : PK_SIGNED;
            for (int64_t t = t0; t < t1; t++) /* y[t][r..]: rows are columns of y */
                pk_rows(mode, rr, G, pk_w_tls, &pa[(t - t0) * G], y + t * ys + r);
        }
    }
    return true;
}

/* ================================ activation quantisers ===================================== */

INLINE __m256 abs_ps(__m256 v)
{
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

/* round(x[0..32) * id) as 32 bytes in element order, plus the sums of each 16 (for bsums).
 * Rounding is cvtps2dq's nearest-even, matching the reference's lrintf. */
INLINE __m256i quant32(const float *x, __m256 id, int sums[2])
{
    __m256i q[4];
    for (int i = 0; i < 4; i++)
        q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), id));
    sums[0] = hsum_epi32(_mm256_add_epi32(q[0], q[1]));
    sums[1] = hsum_epi32(_mm256_add_epi32(q[2], q[3]));
    /* The packs interleave 128-bit lanes; the dword permute restores element order. */
    const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    return _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Max |x| over n floats, n a multiple of 8. */
static float amax8(const float *x, int n)
{
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8)
        m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + i)));
    return hmax_ps(m);
}

/* nb Q8_0 blocks from x [32 nb]; the same arithmetic as the reference, step by step. */
static void act_q8_0(const float *x, struct kq__q8_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += KQ__QK) {
        const float d = amax8(x, KQ__QK) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int sums[2];
        b[i].d = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_si256((void *)b[i].qs, quant32(x, _mm256_set1_ps(id), sums));
    }
}

/* nb Q8_K blocks from x [256 nb], with the 16-element sums. */
static void act_q8_k(const float *x, struct kq__q8_k *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += KQ__QK_K) {
        const float d = amax8(x, KQ__QK_K) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = d;
        for (int j = 0; j < 8; j++) {
            int sums[2];
            _mm256_storeu_si256((void *)(b[i].qs + 32 * j), quant32(x + 32 * j, _mm256_set1_ps(id), sums));
            b[i].bsums[2 * j] = (int16_t)sums[0];
            b[i].bsums[2 * j + 1] = (int16_t)sums[1];
        }
    }
}

/* ================================ entry points ============================================== */

bool kq__avx2_quantize_act(enum kq_type w, const float *x, void *dst, int64_t n)
{
    switch (kq_act_type(w)) {
    case KQ_Q8_0: act_q8_0(x, dst, n / KQ__QK); return true;
    case KQ_Q8_K: act_q8_k(x, dst, n / KQ__QK_K); return true;
    default: return false; /* f32 activations are a copy */
    }
}

/* ================================ peak loops ================================================ */

/*
 * int8: vpmaddubsw + vpmaddwd + vpaddd, the sequence the AVX2 kernels run per 32 bytes. Each
 * chain feeds its own accumulator back as vpmaddubsw's unsigned operand, so no two chains share
 * a product (with one shared product the compiler computes it once and the loop times only the
 * adds). 12 chains cover the latency of the three instructions.
 */
static int64_t peak_int8(int64_t n_iter)
{
    __m256i ia[12];
    UNROLL_FULL(12) for (int k = 0; k < 12; k++)
        ia[k] = _mm256_set1_epi32(k);
    __m256i z = _mm256_set1_epi8(-5), one = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < n_iter; i++) {
        UNROLL_FULL(12) for (int k = 0; k < 12; k++)
            ia[k] = _mm256_add_epi32(ia[k], _mm256_madd_epi16(_mm256_maddubs_epi16(ia[k], z), one));
        __asm__ volatile("" : "+x"(z), "+x"(one));
    }
    volatile int sink = 0;
    UNROLL_FULL(12) for (int k = 0; k < 12; k++)
        sink += _mm256_extract_epi32(ia[k], 0);
    (void)sink;
    return n_iter * 12 * 32;
}

static int64_t peak_f32(int64_t n_iter)
{
    __m256 fa[12];
    UNROLL_FULL(12) for (int k = 0; k < 12; k++)
        fa[k] = _mm256_set1_ps((float)k);
    __m256 u = _mm256_set1_ps(0.999f), v = _mm256_set1_ps(1e-3f);
    for (int64_t i = 0; i < n_iter; i++) {
        UNROLL_FULL(12) for (int k = 0; k < 12; k++)
            fa[k] = _mm256_fmadd_ps(fa[k], u, v);
        __asm__ volatile("" : "+x"(u), "+x"(v));
    }
    volatile int sink = 0;
    UNROLL_FULL(12) for (int k = 0; k < 12; k++)
        sink += (int)_mm256_cvtss_f32(fa[k]);
    (void)sink;
    return n_iter * 12 * 8;
}

/* The int8 and f32 loops apart, so that only one set of 12 accumulators is live. */
int64_t kq__avx2_peak(bool int8, int64_t n_iter)
{
    return int8 ? peak_int8(n_iter) : peak_f32(n_iter);
}

/* Tile shapes above were picked by measurement within 16 registers: the float ones on 64-token
 * prefill; Q8_0 / Q4_0 on 2-5 tokens, where 4 x 2 beat 2 x 4 by a third at 2-3 tokens (768 x
 * 256 Q8_0 in cache: 54 against 38 GOP/s) and matched it at 4-5. Those batches now run packed
 * (PK_MIN_T); the Q8_0 / Q4_0 tiles remain for rows the packing buffers cannot take. */
bool kq__avx2_matmul(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0,
                     int64_t r1, const void *act, size_t act_stride, int64_t nt, float *y,
                     int64_t y_stride, uint64_t tag)
{
    if (w == KQ_Q8_0X || w == KQ_Q4_0X || w == KQ_Q4_KX)
        return kq_avx2_vnni() ? kq__avx2x_vnni_matmul(w, n, W, w_stride, r0, r1, act, act_stride,
                                                      nt, y, y_stride, tag)
                              : kq__avx2x_matmul(w, n, W, w_stride, r0, r1, act, act_stride, nt,
                                                 y, y_stride, tag);
    if (nt >= PK_MIN_T && (w == KQ_Q8_0 || w == KQ_Q4_0 || w == KQ_Q4_K) &&
        packed_matmul(w, n, W, w_stride, r0, r1, act, act_stride, nt, y, y_stride))
        return true;
    const struct kq__tileset *ts;
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

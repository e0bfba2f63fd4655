/*
 * kq_avx512_k — the AVX-512 (F, BW, VL, DQ, VNNI) matmul of the stored K-quant layouts Q4_KX,
 * Q5_KX and Q6_KX (kq.h): weights rewritten once at load time, read here as they are stored,
 * by one kernel for every token count, so an output depends only on its row and token (never
 * on nt, the tile it fell in or the thread split). Built with the Makefile's AVX512_FLAGS;
 * kq_avx512.c dispatches to kq__avx512_kx_matmul.
 *
 * Lanes are sub-blocks. A "group" is 16 sub-blocks: two super-blocks of Q4_KX / Q5_KX (lanes
 * 0-7 the first one's sub-blocks of 32, 8-15 the second's; the last group of a row with an odd
 * count holds one, its upper lanes zero), one super-block of Q6_KX (16 sub-blocks of 16). Step
 * s of a group is one vector of 64 levels, dword j = 4 consecutive levels of sub-block j, for
 * weights (u8: Q4 0..15, Q5 0..31, Q6 0..63) and for activations (s8) alike, so that
 *   ia[r][t] += vpdpbusd(weight step s of row r, activation step s of token t)
 * over the group's 8 (Q6: 4) steps is, per lane, the exact integer dot of a sub-block; Q6_KX
 * starts it from -32 * the activation's sub-block sums (its level offset). Then, per lane,
 *   acc[r][t] += float(ia) * (d * sc_j) * d_act         (one convert, one multiply, one FMA)
 *   acc[r][t] -= (dmin * m_j) * (d_act * sum of a_j)     (Q4/Q5 mins, one FMA)
 * and the row's sum is acc's 16 lanes, reduced once at the end.
 *
 * Register blocking: a tile is R rows x T tokens. Per step it unpacks R weight vectors (kept in
 * registers), then each of T activation vectors (a memory operand) meets all R: R * T vpdpbusd
 * per R + T vectors read. int32 partials live in R * T registers for one group. From KX_MT
 * tokens on the tiles are 4 rows x up to 4 tokens (kx_mtiles: 16 chains of vpdpbusd, 0.5 vector
 * reads per vpdpbusd) and keep their 16 float accumulators in memory, one load (an FMA operand)
 * and one store a group each: with them in registers too, 16 + 16 + the weights would not fit
 * the 32 registers (the compiler spilled them anyway). Against the 2 x 4 tiles they replace
 * (8 chains, 0.75 reads), 2048 x 6144 Q4_KX in cache, one thread, B = 16 ran in 87-100 us
 * against 115-121 (best of 40, alternated); kqbench --cpu-time 1, 2 threads, weights from DRAM,
 * 6144 x 2048 B = 6 / 8 / 12 / 16: 0.24 / 0.24 / 0.42 / 0.60 ms against 0.26 / 0.28 / 0.45 /
 * 0.63 (2048 x 6144: 0.30 / 0.37 / 0.46 / 0.56 against 0.34 / 0.39 / 0.53 / 0.64), a busy
 * machine whose run-to-run spread is as large. Below KX_MT, 2 or 3 tokens are one tile of 4 rows
 * x 2 or 3 tokens with its accumulators in registers (8 + 8 or 12 + 12 beside the 4 weights):
 * every batched tile meets all 4 rows of a block at once. The 2 x T tiles they replace walked a
 * block in two passes of 2 rows; kqbench --cpu-time 1, 2 threads, weights from DRAM, medians of
 * 4-6 alternated runs: 12288 x 2048 Q4_KX B = 2 / 3 / 4 took 0.45 / 0.48 / 0.52 ms with them
 * against 0.36 / 0.38 / 0.43 now (B = 1: 0.34-0.39), 2048 x 6144 Q6_KX 0.32 / 0.40 / 0.46
 * against 0.25 / 0.27 / 0.33 (B = 1: 0.23-0.25); in L2, a 4 x 2 tile costs ~12 % less than
 * two 2 x 2 (Q4_KX 256 x 2048: 24 against 27 ns a row). At 4 tokens one 4 x 4 tile (in memory)
 * and two 4 x 2 ones ran alike on Q4_KX, the 4 x 4 faster on Q6_KX (0.33 against 0.44 ms).
 * On this Zen 5 vpdpbusd, vmulps and the FMAs share two pipes (cvtdq2ps,
 * vpand, vpsrlw do not), so a group's 8 vpdpbusd, 1 mul and 2 FMAs per output bound it at 5.5
 * cycles an output and group. Decode tiles are 4 rows x 1 token. A row's scales are unpacked
 * by the first token tile that meets it, in the tile, and kept in kx_wsc for the later tiles of
 * the chunk (none with one tile): a separate pass over the rows before the tiles stalled on
 * the rows' headers (B = 2, 4096 x 8192 Q4_KX: 19% of all samples in it) and cost decode ~30%
 * when it was used there.
 * The activations are packed once per call into the step order (kx_act, thread-local), a chunk
 * of tokens at a time (once per tag, kq_matmul_tagged, where all tokens fit one chunk); each
 * block of 4 rows is then read from memory once per chunk and met by all its tokens while it
 * sits in L1, and the next block is prefetched group by group into L1 (T0; against T1, 4096 x
 * 8192 Q4_KX B = 1 and 8 ran faster in 2 of 2 alternated pairs and Q6_KX decode read 79-89%
 * of the triad against 73-94%: the busy machine's noise is as large).
 *
 * Measured (kqbench --cpu-time 1, 2 threads, medians of 3 alternated with the plain kernels, a
 * busy shared machine): 4096 x 8192 batched decode B = 2 / 4 / 8 / 16 took 2.7 / 2.0 / 2.4 / 2.3x
 * less time than the plain Q4_K kernels, Q5_K 1.1 / 1.3 / 1.6 / 1.5x, Q6_K 0.96 / 1.2 / 1.1 /
 * 0.9x (before the T0 prefetch and the in-tile scales; see kq_repack_type for Q6_KX now).
 *
 * Threads: any number may call concurrently; the only state is the thread-local activation
 * scratch, filled within one call and reused by a later call of the same tag.
 */
#include "kq_impl.h" // defines: block structs, kq__avx512_kx_matmul
#include "simd.h"    // defines: INLINE, UNROLL

#include <immintrin.h>

#define KX_R 4                   /* rows per block (and per decode tile) */
#define KX_T 4                   /* tokens per tile at most */
#define KX_MAX_G 256             /* groups of a row: n <= 65536 */
#define KX_ACT_BYTES (256u << 10) /* packed activations of one token chunk */
#define KX_MT 4                  /* tokens from which tiles keep their sums in memory */
_Static_assert(KX_MT <= KX_T + 1, "below KX_MT tokens a chunk has one token tile");

/* One token's group, in the step order: 8 steps (Q6_KX: 4), the scales per lane. */
struct kx_act {
    __m512i q[8];  /* s8 levels; q[s] dword j: levels 4s..4s+3 of sub-block j */
    __m512 d;      /* the token's super-block scale in each lane (0 in absent lanes) */
    __m512 s;      /* Q4/Q5: d times the sub-block's level sum (the mins' partner) */
    __m512i corr;  /* Q6: -32 times the sub-block's level sum; Q4/Q5: 0 */
};

/* One row's group scales, per lane (sub-block), unpacked once per row block and call. */
struct kx_wsc {
    __m512 wd; /* d * sub-block scale */
    __m512 mn; /* Q4/Q5: dmin * sub-block min */
};

static _Thread_local struct kx_act kx_act_tls[KX_ACT_BYTES / sizeof(struct kx_act)];
static _Thread_local struct kq__pack_key kx_key; /* what kx_act_tls holds */
static _Thread_local struct kx_wsc kx_wsc_tls[KX_R * KX_MAX_G];

/* 32 bytes at lo then 32 at hi; with hi NULL the upper half is zero. */
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

/* ================================ activations ============================================= */

/* Group g of a Q8_KX activation row (super-blocks 2g and, when two, 2g + 1): the transposed
 * levels of a super-block's step s are its 32 bytes at 32 s already. */
static void kx_pack_act_pair(const struct kq__q8_k *a, int64_t g, bool two, struct kx_act *o)
{
    const struct kq__q8_k *a0 = a + 2 * g, *a1 = two ? a0 + 1 : NULL;
    for (int s = 0; s < 8; s++)
        o->q[s] = load_2x32(a0->qs + 32 * s, two ? a1->qs + 32 * s : NULL);
    const __m256i one = _mm256_set1_epi16(1);
    const __m256i s0 = _mm256_madd_epi16(_mm256_loadu_si256((const void *)a0->bsums), one);
    const __m256i s1 = two ? _mm256_madd_epi16(_mm256_loadu_si256((const void *)a1->bsums), one)
                           : _mm256_setzero_si256();
    o->d = _mm512_insertf32x8(_mm512_set1_ps(a0->d), _mm256_set1_ps(two ? a1->d : 0.0f), 1);
    o->s = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_inserti64x4(_mm512_castsi256_si512(s0), s1, 1)),
                         o->d);
    o->corr = _mm512_setzero_si512();
}

/* Super-block g of a plain Q8_K activation row for Q6_KX: step s lane j takes dword 4j + s of
 * the levels, from vectors 0-1 for j < 8 and 2-3 after. */
static void kx_pack_act_q6(const struct kq__q8_k *a, struct kx_act *o)
{
    __m512i v[4];
    for (int c = 0; c < 4; c++)
        v[c] = _mm512_loadu_si512(a->qs + 64 * c);
    for (int s = 0; s < 4; s++) {
        const __m512i idx = _mm512_add_epi32(
            _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28),
            _mm512_set1_epi32(s));
        const __m512i lo = _mm512_permutex2var_epi32(v[0], idx, v[1]);
        const __m512i hi = _mm512_permutex2var_epi32(v[2], idx, v[3]);
        o->q[s] = _mm512_mask_blend_epi32(0xff00, lo, hi);
    }
    for (int s = 4; s < 8; s++)
        o->q[s] = _mm512_setzero_si512();
    const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const void *)a->bsums));
    o->d = _mm512_set1_ps(a->d);
    o->s = _mm512_setzero_ps();
    o->corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bs, 5));
}

/* ================================ weights ================================================= */

/* Per-lane scales of a Q4_KX / Q5_KX group from its super-blocks' headers p0, p1 (NULL: none;
 * both types start d, dmin, scales[12]): wd = d * sc_j, mn = dmin * m_j, both exact in f32. */
INLINE void kx_scales_pair(const uint8_t *p0, const uint8_t *p1, __m512 *wd, __m512 *mn)
{
    uint64_t sc0, m0, sc1 = 0, m1 = 0;
    uint32_t dd0, dd1 = 0;
    kq__unpack_scales(p0 + 4, &sc0, &m0);
    memcpy(&dd0, p0, 4);
    if (p1) {
        kq__unpack_scales(p1 + 4, &sc1, &m1);
        memcpy(&dd1, p1, 4);
    }
    const __m512 sc = _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_set_epi64x((long long)sc1, (long long)sc0)));
    const __m512 m = _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_set_epi64x((long long)m1, (long long)m0)));
    /* [d0 dmin0 d1 dmin1] as f32, spread to the lanes of each super-block */
    const __m512 dd = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_set_epi32(0, 0, (int)dd1, (int)dd0)));
    *wd = _mm512_mul_ps(sc, _mm512_permutexvar_ps(split32(0, 2), dd));
    *mn = _mm512_mul_ps(m, _mm512_permutexvar_ps(split32(1, 3), dd));
}

/* Per-lane scales of a Q6_KX super-block: d * scales[j]. */
INLINE __m512 kx_scales_q6(const struct kq__q6_k *b)
{
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)b->scales));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(sc), _mm512_set1_ps(_cvtsh_ss(b->d)));
}

/* Step s of a Q6_KX super-block from its ql vectors v[0..1] and qh vector h: the low nibble
 * (s even) or high one (odd) of v[s / 2], bits 2s..2s+1 of h moved to bits 4-5. */
INLINE __m512i kx_q6_step(const __m512i v[2], __m512i h, int s)
{
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i lo = _mm512_and_si512(s % 2 ? _mm512_srli_epi16(v[s / 2], 4) : v[s / 2], m4);
    const __m512i hs = s == 0   ? _mm512_slli_epi16(h, 4)
                       : s == 1 ? _mm512_slli_epi16(h, 2)
                       : s == 2 ? h
                                : _mm512_srli_epi16(h, 2);
    return _mm512_ternarylogic_epi32(lo, hs, _mm512_set1_epi8(0x30), 0xf8); /* lo | hs & 0x30 */
}

/* ================================ the tile ================================================ */

/* Bytes of a group of type wt (two super-blocks of Q4_KX / Q5_KX, one of Q6_KX). */
#define KX_GB(wt)                                                                                 \
    ((wt) == KQ_Q6_KX   ? sizeof(struct kq__q6_k)                                                 \
     : (wt) == KQ_Q5_KX ? 2 * sizeof(struct kq__q5_k)                                             \
                        : 2 * sizeof(struct kq__q4_k))

/* ia[r][t] += the R x T vpdpbusd of weight step w[r] and activation step s of each token. */
INLINE void kx_dots(int R, int T, const __m512i w[KX_R], const struct kx_act *A, int64_t G,
                    int64_t g, int s, __m512i ia[KX_R][KX_T])
{
    UNROLL for (int t = 0; t < T; t++) {
        const __m512i a = _mm512_load_si512(&A[t * G + g].q[s]);
        UNROLL for (int r = 0; r < R; r++)
            ia[r][t] = _mm512_dpbusd_epi32(ia[r][t], w[r], a);
    }
}

/*
 * Group g of R rows (row r at W + r * ws) against T tokens (packed, token t's groups at
 * A[t * G]) into acc, with row r's scales at S[r * G]; two: a Q4_KX / Q5_KX group of two
 * super-blocks (else one, the row's last). pf (or NULL): the rows to ask for into the cache
 * (row r at pf + r * ws), group by group.
 */
INLINE void kx_group(enum kq_type wt, int R, int T, bool two, const uint8_t *W, size_t ws,
                     int64_t g, struct kx_wsc *S, bool put, const struct kx_act *A, int64_t G,
                     const uint8_t *pf, __m512 acc[restrict KX_R][KX_T])
{
    const size_t gb = KX_GB(wt), bb = wt == KQ_Q6_KX ? gb : gb / 2;
    __m512i ia[KX_R][KX_T], w[KX_R];
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int t = 0; t < T; t++)
            ia[r][t] = wt == KQ_Q6_KX ? _mm512_load_si512(&A[t * G + g].corr)
                                      : _mm512_setzero_si512();
    if (wt == KQ_Q6_KX) {
        __m512i v[KX_R][2], h[KX_R];
        UNROLL for (int r = 0; r < R; r++) {
            const struct kq__q6_k *b = (const void *)(W + r * ws + g * gb);
            v[r][0] = _mm512_loadu_si512(b->ql);
            v[r][1] = _mm512_loadu_si512(b->ql + 64);
            h[r] = _mm512_loadu_si512(b->qh);
        }
        UNROLL for (int s = 0; s < 4; s++) {
            UNROLL for (int r = 0; r < R; r++)
                w[r] = kx_q6_step(v[r], h[r], s);
            kx_dots(R, T, w, A, G, g, s, ia);
        }
    } else {
        const size_t qs = wt == KQ_Q5_KX ? offsetof(struct kq__q5_k, qs)
                                         : offsetof(struct kq__q4_k, qs);
        __m512i qh[KX_R];
        UNROLL for (int r = 0; r < R && wt == KQ_Q5_KX; r++) {
            const uint8_t *b = W + r * ws + g * gb + offsetof(struct kq__q5_k, qh);
            qh[r] = load_2x32(b, two ? b + bb : NULL);
        }
        UNROLL for (int c = 0; c < 4; c++) { /* 32 bytes a super-block: steps 2c, 2c + 1 */
            __m512i v[KX_R];
            UNROLL for (int r = 0; r < R; r++) {
                const uint8_t *b = W + r * ws + g * gb + qs + 32 * c;
                v[r] = load_2x32(b, two ? b + bb : NULL);
            }
            UNROLL for (int h = 0; h < 2; h++) {
                UNROLL for (int r = 0; r < R; r++) {
                    w[r] = _mm512_and_si512(h ? _mm512_srli_epi16(v[r], 4) : v[r],
                                            _mm512_set1_epi8(15));
                    if (wt == KQ_Q5_KX) { /* bit 2c + h of the step's qh byte: level bit 4 */
                        const __m512i bit = _mm512_set1_epi8((char)(1 << (2 * c + h)));
                        w[r] = _mm512_mask_add_epi8(w[r], _mm512_test_epi8_mask(qh[r], bit), w[r],
                                                    _mm512_set1_epi8(16));
                    }
                }
                kx_dots(R, T, w, A, G, g, 2 * c + h, ia);
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        struct kx_wsc own = {0}; /* S NULL or put: this row's scales, unpacked here */
        const struct kx_wsc *sc = S && !put ? &S[r * G + g] : &own;
        if ((!S || put) && wt == KQ_Q6_KX)
            own.wd = kx_scales_q6((const struct kq__q6_k *)(W + r * ws + g * gb));
        else if (!S || put)
            kx_scales_pair(W + r * ws + g * gb, two ? W + r * ws + g * gb + bb : NULL, &own.wd,
                           &own.mn);
        if (put)
            S[r * G + g] = own;
        if (pf)
            UNROLL for (size_t l = 0; l < gb; l += 64)
                _mm_prefetch((const char *)pf + r * ws + g * gb + l, _MM_HINT_T0);
        UNROLL for (int t = 0; t < T; t++) {
            const struct kx_act *a = &A[t * G + g];
            /* one store: acc may be memory (kx_mtiles), which the scale loads could alias */
            const __m512 wd = sc->wd, mn = sc->mn, ad = a->d, as = a->s;
            __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r][t]), _mm512_mul_ps(wd, ad),
                                       acc[r][t]);
            if (wt != KQ_Q6_KX)
                v = _mm512_fnmadd_ps(mn, as, v);
            acc[r][t] = v;
        }
    }
}

/* y[t * ys + r] = row r . token t for r < R, t < T: the GF full groups, then the lone
 * super-block of a Q4_KX / Q5_KX row with an odd count (G > GF). mem: the accumulators kept in
 * memory, each group reading them once and writing them once, as one FMA operand and one store
 * (the KX_R x KX_T tiles, which have no registers for 16 of them beside their 16 int32 sums and
 * weights); the same arithmetic either way. */
INLINE void kx_tile(enum kq_type wt, int R, int T, bool mem, int64_t G, int64_t GF,
                    const uint8_t *W, size_t ws, struct kx_wsc *S, bool put,
                    const struct kx_act *A, const uint8_t *pf, float *y, int64_t ys)
{
    __m512 acc[KX_R][KX_T];
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < GF; g++) {
        __m512(*a)[KX_T] = acc;
        if (mem)
            __asm__("" : "+r"(a)); /* kept from registers: in memory, group by group */
        kx_group(wt, R, T, true, W, ws, g, S, put, A, G, pf, a);
    }
    if (GF < G)
        kx_group(wt, R, T, false, W, ws, GF, S, put, A, G, NULL, acc);
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int t = 0; t < T; t++)
            y[t * ys + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/* kx_tile for the shapes it is compiled for: KX_R x 1..KX_MT - 1 (decode: KX_R x 1), each with
 * its scales unpacked in the tile (S NULL: below KX_MT tokens a chunk has one token tile), and
 * the 1 x 1..KX_T of a chunk's last rows, with the scales also put or got. */
static void kx_tiles(enum kq_type wt, int R, int T, int64_t G, int64_t GF, const uint8_t *W,
                     size_t ws, struct kx_wsc *S, bool put, const struct kx_act *A,
                     const uint8_t *pf, float *y, int64_t ys)
{
#define KX_TILE(w, r, tt)                                                                         \
    if (wt == w && R == r && T == tt)                                                             \
        return !S  ? kx_tile(w, r, tt, false, G, GF, W, ws, NULL, false, A, pf, y, ys)            \
               : put ? kx_tile(w, r, tt, false, G, GF, W, ws, S, true, A, pf, y, ys)              \
                     : kx_tile(w, r, tt, false, G, GF, W, ws, S, false, A, pf, y, ys);
#define KX_OWN(w, tt)                                                                             \
    if (wt == w && R == KX_R && T == tt && !S)                                                    \
        return kx_tile(w, KX_R, tt, false, G, GF, W, ws, NULL, false, A, pf, y, ys);
#define KX_TYPE(w)                                                                                \
    KX_OWN(w, 1) KX_OWN(w, 2) KX_OWN(w, 3)                                                        \
    KX_TILE(w, 1, 4) KX_TILE(w, 1, 3) KX_TILE(w, 1, 2) KX_TILE(w, 1, 1)
    KX_TYPE(KQ_Q4_KX)
    KX_TYPE(KQ_Q5_KX)
    KX_TYPE(KQ_Q6_KX)
#undef KX_TYPE
#undef KX_OWN
#undef KX_TILE
}

/* kx_tile with the accumulators in memory for the shapes it is compiled for: KX_R x 1..KX_T,
 * with the scales put or got. */
static void kx_mtiles(enum kq_type wt, int T, int64_t G, int64_t GF, const uint8_t *W, size_t ws,
                      struct kx_wsc *S, bool put, const struct kx_act *A, const uint8_t *pf,
                      float *y, int64_t ys)
{
#define KX_MTILE(w, tt)                                                                           \
    if (wt == w && T == tt)                                                                       \
        return put ? kx_tile(w, KX_R, tt, true, G, GF, W, ws, S, true, A, pf, y, ys)              \
                   : kx_tile(w, KX_R, tt, true, G, GF, W, ws, S, false, A, pf, y, ys);
#define KX_TYPE(w) KX_MTILE(w, 4) KX_MTILE(w, 3) KX_MTILE(w, 2) KX_MTILE(w, 1)
    KX_TYPE(KQ_Q4_KX)
    KX_TYPE(KQ_Q5_KX)
    KX_TYPE(KQ_Q6_KX)
#undef KX_TYPE
#undef KX_MTILE
}

/* ================================ entry point ============================================= */

bool kq__avx512_kx_matmul(enum kq_type wt, int64_t n, const void *W, size_t ws, int64_t r0,
                          int64_t r1, const void *act, size_t as, int64_t nt, float *y,
                          int64_t ys, uint64_t tag)
{
    const bool pair = wt != KQ_Q6_KX;
    const int64_t nsb = n / KQ__QK_K, G = pair ? (nsb + 1) / 2 : nsb, GF = pair ? nsb / 2 : nsb;
    const int64_t cap = (int64_t)(sizeof kx_act_tls / sizeof kx_act_tls[0]);
    if ((wt != KQ_Q4_KX && wt != KQ_Q5_KX && wt != KQ_Q6_KX) || G == 0 || G > KX_MAX_G ||
        n % KQ__QK_K)
        return false;
    const int64_t chunk = cap / G;
    const uint8_t *w8 = W, *a8 = act;
    for (int64_t t0 = 0; t0 < nt; t0 += chunk) {
        const int64_t t1 = t0 + chunk < nt ? t0 + chunk : nt;
        /* all tokens in one chunk: kx_act_tls may still hold them from this tag's last call
         * (Q4_KX and Q5_KX pack alike) */
        const bool one = t0 == 0 && t1 == nt;
        const int kind = pair ? KQ_Q4_KX : KQ_Q6_KX;
        const bool held = one && kq__pack_held(&kx_key, tag, act, as, n, nt, kind);
        for (int64_t t = t0; t < t1 && !held; t++)
            for (int64_t g = 0; g < G; g++) {
                const struct kq__q8_k *a = (const struct kq__q8_k *)(a8 + t * as);
                struct kx_act *o = &kx_act_tls[(t - t0) * G + g];
                if (pair)
                    kx_pack_act_pair(a, g, g < GF, o);
                else
                    kx_pack_act_q6(a + g, o);
            }
        kx_key = (struct kq__pack_key){one ? tag : 0, act, as, n, nt, kind};
        for (int64_t r = r0; r < r1; r += KX_R) {
            const int rr = (int)(r1 - r < KX_R ? r1 - r : KX_R);
            const uint8_t *Wr = w8 + r * ws;
            /* below KX_MT tokens (one token tile a chunk): scales unpacked in the tile; from
             * KX_MT on: unpacked by the first tile, kept in kx_wsc for the others */
            struct kx_wsc *S = nt >= KX_MT ? kx_wsc_tls : NULL;
            for (int64_t t = t0; t < t1; t += KX_T) {
                const int tt = (int)(t1 - t < KX_T ? t1 - t : KX_T);
                const struct kx_act *A = &kx_act_tls[(t - t0) * G];
                const bool put = t == t0;
                float *yt = y + t * ys + r;
                /* the first token tile asks for the next row block */
                const uint8_t *pf = t == t0 && r + 2 * KX_R <= r1 ? Wr + KX_R * ws : NULL;
                if (rr == KX_R && nt >= KX_MT) {
                    kx_mtiles(wt, tt, G, GF, Wr, ws, S, put, A, pf, yt, ys);
                    continue;
                }
                if (rr == KX_R) { /* below KX_MT tokens: S is NULL */
                    kx_tiles(wt, KX_R, tt, G, GF, Wr, ws, NULL, false, A, pf, yt, ys);
                    continue;
                }
                for (int i = 0; i < rr; i++)
                    kx_tiles(wt, 1, tt, G, GF, Wr + i * ws, ws, S ? S + i * G : NULL, put, A,
                             NULL, yt + i, ys);
            }
        }
    }
    return true;
}

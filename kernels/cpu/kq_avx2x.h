/*
 * kq_avx2x — the AVX2 matmul of the stored layouts Q8_0X, Q4_0X and Q4_KX (kq.h), written once
 * and compiled twice: kq_avx2x_avx2.c includes it with KQX_VNNI 0 (integer products with
 * vpmaddubsw + vpmaddwd, any AVX2 CPU) and kq_avx2x_vnni.c with KQX_VNNI 1 (vpdpbusd on ymm,
 * AVX-VNNI, built with -mavxvnni). Each defines KQX_ENTRY, the name of its entry point. Not a
 * header for anyone else: it holds definitions.
 *
 * Register tiles: a kernel takes R weight rows x T tokens; per 32-byte step it loads R weight
 * vectors and meets each with T activation vectors (R x T multiply-adds into int32 partials),
 * then per group of 8 blocks (Q8_0X / Q4_0X) or super-block (Q4_KX) turns the R x T partials
 * into float and adds them to R x T float accumulators. 16 ymm registers hold 2 R T + R or so.
 *
 * Q8_0X / Q4_0X: a stored group of 16 blocks is two half-groups of 8, each with 8 f16 scales
 * (bytes 16 h .. of the group) and 8 steps of 32 bytes (32 + 64 k + 32 h), dword b of step k
 * being levels 4k..4k+3 of block b: one step's products leave block b's partial in lane b. The
 * activation is packed per call (per tag: kq_matmul_tagged) into the same order (struct xa).
 * The blocks past the last full group (a partial group of m, its steps 4 m bytes apart) are
 * read as stored, each half's words with a masked load (vpmaskmovd) that leaves the blocks
 * past the row zero.
 *   VNNI     Q8_0X: vpdpbusd of the stored u8 levels (q + 128) with the s8 activation, the
 *            partial starting at -128 * (block sum of the activation). Q4_0X: nibbles 0..15,
 *            starting at -8 * (block sum).
 *   maddubs  Q8_0X: w = stored ^ 0x80, |w| . sign(a, w) (pairs <= 2 * 128 * 127 < 32768; a
 *            level of -128 is exact), vpmaddwd with ones, vpaddd. Q4_0X: vpmaddubsw of the
 *            nibbles, the i16 pairs of all 8 steps summed (8 x 2 x 15 x 127 < 32768), one
 *            vpmaddwd, the -8 * sum start.
 * Q4_KX: the activation rows (Q8_KX) are read as they are; lane j of every step is sub-block
 * j. VNNI: vpdpbusd per step; maddubs: vpmaddubsw summed as i16 over the 8 steps, one vpmaddwd
 * with ones. Either leaves sub-block j's exact dot in lane j, finished in float against the
 * row's scales and mins and the token's scale and sums (kx_tile; the AVX-512 kernel's chain).
 *
 * Both builds form the same exact integer partials and finish them with the same float
 * operations in the same order, whatever R, T, nt or the row range: every output depends only
 * on its row and token, bit for bit, and on neither the build nor the batch around it.
 */
#ifndef KQX_VNNI
#error "kq_avx2x.h is included by kq_avx2x_avx2.c and kq_avx2x_vnni.c only"
#endif

#include <pthread.h>
#include <stdlib.h>

#include "kq_impl.h"   // defines: block structs, KQ__QK, KQ__QK_K
#include "simd_avx2.h" // defines: INLINE, UNROLL, hsum_ps

/*
 * Tile shapes (rows x tokens) per type and build, picked by measurement (kqbench, 2 threads,
 * 6144 x 2048 from DRAM at 4..16 tokens and 480 x 2048 in cache at 12, among 4x4, 4x2, 2x4,
 * 3x3, 3x2, 2x3, 2x2, 1x6): 3 x 3 for Q8_0X (16 tokens: 16.5 GB/s against 13-14 for 4x4 and
 * 4x2 with VNNI, 8.5 against 7.2-8.8 without); Q4_0X 4 x 2 with VNNI, 3 x 3 without. Q4_KX
 * 4 x 2 with VNNI, 4 x 3 without (see kx_tile; in L2, 256 x 2048, per row and token at 8 / 16
 * tokens: 4 x 2 15.4 / 14.6 ns, 4 x 3 15.5 / 15.3, 3 x 4 16.6 / 16.1, 4 x 4 21.7 / 20.8 with
 * VNNI; without it 4 x 3 22.7 / 21.6, 4 x 2 24.0 / 22.9, 3 x 3 23.1 / 22.7). Decode (one token)
 * runs R x 1, long Q4_KX rows 1 x 1.
 * The activation vectors are kept in registers (X_IN_REG): GCC folded each one's load into all R
 * of its products (3 x 3: 12 loads for 9 vpdpbusd a step). kqbench 6144 x 2048 q8_0x in cache
 * (--ws 1), 1 thread, medians of 5 alternated runs on a busy machine, 8 / 16 tokens: 0.73 /
 * 1.46 ms before, 0.65 / 1.21 after; 2 x 4 (0.62 / 1.20) lost at 1 and 4 tokens from L3.
 */
#ifndef Q8R
#define Q8R 3
#define Q8T 3
#if KQX_VNNI
#define Q4R 4
#define Q4T 2
#define KR 4
#define KT 2
#else
#define Q4R 3
#define Q4T 3
#define KR 4
#define KT 3
#endif
#endif
#define XR 6           /* rows per tile at most */
#define XT 6           /* tokens per tile at most */
#define X_CHUNK 32     /* tokens whose activations are packed at once */
#define X_PF_DIST 2048 /* bytes ahead a decode row asks for */

/* ================================ helpers =================================================== */

/* Keeps v in a register: GCC otherwise folds its load into each of its uses as a memory
 * operand (R loads of each activation vector a step instead of one). */
#define X_IN_REG(v) __asm__("" : "+x"(v))
/* ... from 2 tokens on: decode (one token) keeps the code it had (q8_0x 6144 x 2048 from L3, 2
 * threads: 0.222-0.232 ms before, 0.244-0.257 with its activation vector in a register) */
#define X_IN_REG_T(v, T)                                                                           \
    do {                                                                                           \
        if ((T) > 1)                                                                               \
            X_IN_REG(v);                                                                           \
    } while (0)

INLINE float xh2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* s + the dot of u8 u and s8 a in groups of 4 (int32 lanes, exact). */
INLINE __m256i x_dot(__m256i s, __m256i u, __m256i a)
{
#if KQX_VNNI
    return _mm256_dpbusd_avx_epi32(s, u, a);
#else
    return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1)));
#endif
}

/* v[k] lane b = dword k of v[b] (an 8 x 8 dword transpose). */
INLINE void x_transpose(__m256i v[8])
{
    __m256i a[8], b[8];
    UNROLL for (int i = 0; i < 4; i++)
    {
        a[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    UNROLL for (int i = 0; i < 2; i++) UNROLL for (int j = 0; j < 2; j++)
    {
        b[4 * i + 2 * j] = _mm256_unpacklo_epi64(a[4 * i + j], a[4 * i + 2 + j]);
        b[4 * i + 2 * j + 1] = _mm256_unpackhi_epi64(a[4 * i + j], a[4 * i + 2 + j]);
    }
    UNROLL for (int m = 0; m < 4; m++)
    {
        v[m] = _mm256_permute2x128_si256(b[m], b[4 + m], 0x20);
        v[m + 4] = _mm256_permute2x128_si256(b[m], b[4 + m], 0x31);
    }
}

/* A per-thread heap buffer of at least `bytes` (grown, never shrunk; freed by the key's
 * destructor when the thread exits), or NULL when out of memory. key: what b holds (a new
 * buffer: nothing). */
struct x_buf {
    size_t cap;
    struct kq__pack_key key;
    _Alignas(32) unsigned char b[];
};
static pthread_key_t x_key;
static pthread_once_t x_once = PTHREAD_ONCE_INIT;
static bool x_key_ok;

static void x_key_init(void)
{
    x_key_ok = pthread_key_create(&x_key, free) == 0;
}

static struct x_buf *x_scratch(size_t bytes)
{
    pthread_once(&x_once, x_key_init);
    if (!x_key_ok)
        return NULL;
    struct x_buf *b = pthread_getspecific(x_key);
    if (b && b->cap >= bytes)
        return b;
    const size_t cap = b && 2 * b->cap > bytes ? 2 * b->cap : bytes;
    struct x_buf *nb = aligned_alloc(32, (sizeof *nb + cap + 31) / 32 * 32);
    if (!nb || pthread_setspecific(x_key, nb) != 0) {
        free(nb);
        return NULL;
    }
    free(b);
    nb->cap = cap;
    nb->key = (struct kq__pack_key){0};
    return nb;
}

/* ================================ Q8_0X / Q4_0X ============================================= */

/* Half-group h (blocks 8h .. 8h+7) of one token's Q8_0 activation. */
struct xa {
    __m256i q[8]; /* q[k] lane b: levels 4k..4k+3 of block 8h + b (zero past the row) */
    __m256 d;     /* block scales (zero past the row) */
    __m256i corr; /* the partials' start: -(offset of the stored levels) * block level sum */
};

/* Half-group h of a Q8_0 activation row of nb blocks; off: the stored weights' level offset
 * that the partial must take back out (128, 8 or 0). */
static void xa_pack(const struct kq__q8_0 *row, int64_t nb, int64_t h, int off, struct xa *o)
{
    _Alignas(16) uint16_t d[8] = {0};
    __m256i v[8];
    for (int b = 0; b < 8; b++) {
        const int64_t ib = 8 * h + b;
        v[b] = ib < nb ? _mm256_loadu_si256((const void *)row[ib].qs) : _mm256_setzero_si256();
        d[b] = ib < nb ? row[ib].d : 0;
    }
    x_transpose(v);
    __m256i sum = _mm256_setzero_si256();
    UNROLL for (int k = 0; k < 8; k++)
    {
        _mm256_store_si256(&o->q[k], v[k]);
        sum =
            _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v[k]),
                                                    _mm256_set1_epi16(1)));
    }
    o->corr = _mm256_mullo_epi32(sum, _mm256_set1_epi32(-off));
    o->d = _mm256_cvtph_ps(_mm_load_si128((const void *)d));
}

/* Step k of a half-group from p: 32 bytes (8 blocks' words), or in a partial group the words
 * of the blocks wm selects (vpmaskmovd: nothing read past them, zeros after). */
INLINE __m256i xq_word(bool part, __m256i wm, const uint8_t *p)
{
    return part ? _mm256_maskload_epi32((const int *)p, wm) : _mm256_loadu_si256((const void *)p);
}

/*
 * Half-group h of R rows x T tokens: acc[r][t] += per block (corr + levels . levels) * (weight
 * scale * activation scale); token t's packed half-group at A[t * AH]. q[r]: row r's levels of the
 * half-group, word k of block b at q[r] + ks k + 4 b (a whole group: ks 64; the partial one as
 * stored: ks 4 m); sc[r]: its 8 f16 scales. part: the partial group, whose blocks past the half's
 * own (lanes off in wm, sm) read as zero levels and scales; their activation lanes are zero too.
 */
INLINE void xq_half(bool q4, bool part, int R, int T, const uint8_t *const q[XR],
                    const uint8_t *const sc[XR], int64_t ks, __m256i wm, __m128i sm,
                    const struct xa *A, int64_t AH, __m256 acc[XR][XT])
{
    __m256i s[XR][XT];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) s[r][t] =
        _mm256_load_si256(&A[t * AH].corr);
    if (!q4) {
        UNROLL for (int k = 0; k < 8; k++)
        {
            __m256i w[XR], wa[XR];
            UNROLL for (int r = 0; r < R; r++)
            {
                w[r] = xq_word(part, wm, q[r] + ks * k);
#if !KQX_VNNI
                w[r] = _mm256_xor_si256(w[r], _mm256_set1_epi8((char)0x80));
                wa[r] = _mm256_abs_epi8(w[r]);
#endif
            }
            (void)wa;
            UNROLL for (int t = 0; t < T; t++)
            {
                __m256i a = _mm256_load_si256(&A[t * AH].q[k]);
                X_IN_REG_T(a, T); /* one load for the R products, not one each */
                UNROLL for (int r = 0; r < R; r++)
#if KQX_VNNI
                    s[r][t] = x_dot(s[r][t], w[r], a);
#else
                    s[r][t] = x_dot(s[r][t], wa[r], _mm256_sign_epi8(a, w[r]));
#endif
            }
        }
    } else {
#if !KQX_VNNI
        __m256i s16[XR][XT];
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) s16[r][t] =
            _mm256_setzero_si256();
#endif
        UNROLL for (int k = 0; k < 4; k++)
        { /* low nibbles: step k; high ones: step k + 4 */
            __m256i lo[XR], hi[XR];
            UNROLL for (int r = 0; r < R; r++)
            {
                const __m256i x = xq_word(part, wm, q[r] + ks * k);
                lo[r] = _mm256_and_si256(x, _mm256_set1_epi8(15));
                hi[r] = _mm256_and_si256(_mm256_srli_epi16(x, 4), _mm256_set1_epi8(15));
            }
            UNROLL for (int t = 0; t < T; t++)
            {
                __m256i a0 = _mm256_load_si256(&A[t * AH].q[k]);
                __m256i a1 = _mm256_load_si256(&A[t * AH].q[k + 4]);
#if KQX_VNNI
                X_IN_REG_T(a0, T);
                X_IN_REG_T(a1, T);
#endif
                UNROLL for (int r = 0; r < R; r++)
                {
#if KQX_VNNI
                    s[r][t] = x_dot(x_dot(s[r][t], lo[r], a0), hi[r], a1);
#else
                    s16[r][t] = _mm256_add_epi16(s16[r][t],
                                                 _mm256_add_epi16(_mm256_maddubs_epi16(lo[r], a0),
                                                                  _mm256_maddubs_epi16(hi[r], a1)));
#endif
                }
            }
        }
#if !KQX_VNNI
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) s[r][t] =
            _mm256_add_epi32(s[r][t], _mm256_madd_epi16(s16[r][t], _mm256_set1_epi16(1)));
#endif
    }
    UNROLL for (int r = 0; r < R; r++)
    {
        __m128i h16 = _mm_loadu_si128((const void *)sc[r]);
        if (part)
            h16 = _mm_and_si128(h16, sm);
        const __m256 wd = _mm256_cvtph_ps(h16);
        UNROLL for (int t = 0; t < T; t++) acc[r][t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r][t]), _mm256_mul_ps(wd, A[t * AH].d), acc[r][t]);
    }
}

/*
 * y[t * ys + r] = row r . token t for r < R, t < T. Rows of nb blocks are W + r * ws; the whole
 * groups g < GF = nb / 16 are read as two halves each, the blocks past them (a partial group of
 * m = nb - 16 GF, its words 4 m bytes a step, kq.h) as stored too, with masked loads; H =
 * (nb + 7) / 8 half-groups in all. A[t * AH + h]: the packed activation. pf (or NULL): rows to
 * ask for, group by group, as this tile reads its own.
 *
 * The partial group's scales are read 16 bytes at a time (masked after the load): they end at
 * most 14 bytes before the row does (its levels follow them), so the load stays in the row.
 */
INLINE void xq_tile(bool q4, int R, int T, int64_t nb, const uint8_t *W, size_t ws,
                    const struct xa *A, int64_t AH, const uint8_t *pf, float *y, int64_t ys)
{
    const int64_t GF = nb / 16, H = (nb + 7) / 8, m = nb - 16 * GF, gq = q4 ? 16 * 16 : 16 * 32;
    const uint8_t *q[XR], *sc[XR];
    __m256 acc[XR][XT];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] =
        _mm256_setzero_ps();
    for (int64_t h = 0; h < 2 * GF; h++) {
        const int64_t g = h >> 1, half = h & 1;
        UNROLL for (int r = 0; r < R; r++)
        {
            q[r] = W + r * ws + 2 * nb + g * gq + 32 * half;
            sc[r] = W + r * ws + 32 * g + 16 * half;
            if (pf && half == 0) {
                _mm_prefetch((const char *)pf + r * ws + 32 * g, _MM_HINT_T0);
                for (int64_t l = 0; l < gq; l += 64)
                    _mm_prefetch((const char *)pf + r * ws + 2 * nb + g * gq + l, _MM_HINT_T0);
            }
        }
        xq_half(q4, false, R, T, q, sc, 64, _mm256_setzero_si256(), _mm_setzero_si128(), &A[h], AH,
                acc);
    }
    for (int64_t h = 2 * GF; h < H; h++) { /* the partial group: blocks 8 half .. of m */
        const int64_t half = h & 1, cnt = m - 8 * half < 8 ? m - 8 * half : 8;
        const __m256i wm = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cnt),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m128i sm =
            _mm_cmpgt_epi16(_mm_set1_epi16((short)cnt), _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7));
        UNROLL for (int r = 0; r < R; r++)
        {
            q[r] = W + r * ws + 2 * nb + GF * gq + 32 * half;
            sc[r] = W + r * ws + 32 * GF + 16 * half;
        }
        if (cnt == 8) /* all 8 blocks of the half there: plain loads */
            xq_half(q4, false, R, T, q, sc, 4 * m, wm, sm, &A[h], AH, acc);
        else
            xq_half(q4, true, R, T, q, sc, 4 * m, wm, sm, &A[h], AH, acc);
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) y[t * ys + r] =
        hsum_ps(acc[r][t]);
}

/* Instantiations of a tile F(r, t) for t <= TM, r in {RM, 1}: returns from the caller when R, T
 * are one of them. */
#define X_SHAPE(F, r, t, TM)                                                                       \
    if ((t) <= (TM) && R == (r) && T == (t))                                                       \
    return F(r, t)
#define X_SHAPES(F, RM, TM)                                                                        \
    do {                                                                                           \
        X_SHAPE(F, RM, 6, TM);                                                                     \
        X_SHAPE(F, RM, 5, TM);                                                                     \
        X_SHAPE(F, RM, 4, TM);                                                                     \
        X_SHAPE(F, RM, 3, TM);                                                                     \
        X_SHAPE(F, RM, 2, TM);                                                                     \
        X_SHAPE(F, RM, 1, TM);                                                                     \
        X_SHAPE(F, 1, 6, TM);                                                                      \
        X_SHAPE(F, 1, 5, TM);                                                                      \
        X_SHAPE(F, 1, 4, TM);                                                                      \
        X_SHAPE(F, 1, 3, TM);                                                                      \
        X_SHAPE(F, 1, 2, TM);                                                                      \
        X_SHAPE(F, 1, 1, TM);                                                                      \
    } while (0)

/* xq_tile for the shapes it is compiled for: R in {RM, 1}, T in 1..TM of the type. */
static void xq_tiles(bool q4, int R, int T, int64_t nb, const uint8_t *W, size_t ws,
                     const struct xa *A, int64_t AH, const uint8_t *pf, float *y, int64_t ys)
{
#define XQ8(r, t) xq_tile(false, r, t, nb, W, ws, A, AH, pf, y, ys)
#define XQ4(r, t) xq_tile(true, r, t, nb, W, ws, A, AH, pf, y, ys)
    if (!q4)
        X_SHAPES(XQ8, Q8R, Q8T);
    else
        X_SHAPES(XQ4, Q4R, Q4T);
#undef XQ8
#undef XQ4
}

/* Same contract as kq_matmul_tagged for Q8_0X / Q4_0X weights, any nt; false when n is 0 or
 * the scratch buffer cannot be had. The activations are packed a chunk of X_CHUNK tokens at a
 * time, once per call, or once per tag where all tokens fit one chunk. */
static bool xq_matmul(enum kq_type wt, int64_t n, const uint8_t *W, size_t ws, int64_t r0,
                      int64_t r1, const uint8_t *act, size_t as, int64_t nt, float *y, int64_t ys,
                      uint64_t tag)
{
    const bool q4 = wt == KQ_Q4_0X;
    const int64_t nb = n / KQ__QK, H = (nb + 7) / 8;
    const int64_t chunk = nt < X_CHUNK ? nt : X_CHUNK;
    const int RM = q4 ? Q4R : Q8R, TM = q4 ? Q4T : Q8T;
    if (nb == 0 || n % KQ__QK)
        return false;
    struct x_buf *buf = x_scratch((size_t)(chunk * H) * sizeof(struct xa));
    if (!buf)
        return false;
    struct xa *A = (struct xa *)buf->b;
    const int off = q4 ? 8 : KQX_VNNI ? 128 : 0;
    for (int64_t t0 = 0; t0 < nt; t0 += chunk) {
        const int64_t t1 = t0 + chunk < nt ? t0 + chunk : nt;
        const bool one = chunk == nt; /* then A may hold them from this tag's last call */
        const bool held = one && kq__pack_held(&buf->key, tag, act, as, n, nt, wt);
        for (int64_t t = t0; t < t1 && !held; t++)
            for (int64_t h = 0; h < H; h++)
                xa_pack((const struct kq__q8_0 *)(act + t * as), nb, h, off, &A[(t - t0) * H + h]);
        buf->key = (struct kq__pack_key){one ? tag : 0, act, as, n, nt, wt};
        for (int64_t r = r0; r < r1; r += RM) {
            const int rr = (int)(r1 - r < RM ? r1 - r : RM);
            const uint8_t *Wr = W + r * ws;
            for (int64_t t = t0; t < t1; t += TM) {
                const int tt = (int)(t1 - t < TM ? t1 - t : TM);
                /* the first token tile asks for the next row block */
                const uint8_t *pf = t == t0 && r + 2 * RM <= r1 ? Wr + RM * ws : NULL;
                if (rr == RM)
                    xq_tiles(q4, RM, tt, nb, Wr, ws, &A[(t - t0) * H], H, pf, y + t * ys + r, ys);
                else
                    for (int i = 0; i < rr; i++)
                        xq_tiles(q4, 1, tt, nb, Wr + i * ws, ws, &A[(t - t0) * H], H, NULL,
                                 y + t * ys + r + i, ys);
            }
        }
    }
    return true;
}

/* ================================ Q4_KX ===================================================== */

/* A Q4_KX row's super-block, per lane (sub-block j): wd = d * sc_j, mn = dmin * m_j. */
struct kx_rw {
    __m256 wd, mn;
};
/* A Q8_KX token's super-block: ad = its scale in every lane, sa = ad * (sub-block j's level
 * sum), the partner of the mins. */
struct kx_tk {
    __m256 ad, sa;
};

INLINE struct kx_rw kx_row(const struct kq__q4_k *b)
{
    uint64_t sc, m;
    kq__unpack_scales(b->scales, &sc, &m);
    const __m128i v = _mm_set_epi64x((long long)m, (long long)sc);
    const __m256 wd = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(v, v)));
    return (struct kx_rw){_mm256_mul_ps(wd, _mm256_set1_ps(xh2f(b->d))),
                          _mm256_mul_ps(mn, _mm256_set1_ps(xh2f(b->dmin)))};
}

INLINE struct kx_tk kx_tok(const struct kq__q8_k *a)
{
    const __m256 ad = _mm256_set1_ps(a->d);
    const __m256i bs = _mm256_loadu_si256((const void *)a->bsums); /* sub-block j: 2j, 2j + 1 */
    return (struct kx_tk){
        ad, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, _mm256_set1_epi16(1))), ad)};
}

/*
 * Super-blocks of R Q4_KX rows x T Q8_KX tokens: y[t * ys + r] = row r . token t. Per
 * super-block, output and lane j (sub-block): the exact integer dot S_j of its levels, then
 *   acc = fma(float(S_j), wd_j * ad, acc);  acc = fnmadd(mn_j, sa_j, acc)
 * (kx_rw, kx_tk), the lanes summed at the end. TK[t * nsb + ib]: token t's super-block ib
 * (kx_tok, once per call); RW[r * nsb + ib] row r's, or with RW NULL made in the tile. pf (or
 * NULL): rows to ask for, super-block by super-block.
 *
 * VNNI: the step loop takes one row's levels at a time (1 register) against each token's
 * activation read from L1 as an operand, so R x T partials and little else are live. maddubs:
 * a step pair's activations of the T tokens are held and each row's levels made and used at
 * once, as before (the VNNI order ran alike there).
 *
 * Against the chain this replaced (per output: the int32 sums times the scales, vpmaddwd of the
 * bsums with the mins, 2 conversions and 2 FMAs by scalar products d * ad, dmin * ad; the row's
 * scales unpacked in every token tile): kqbench 6144 x 2048 Q4_KX, 2 threads, from DRAM, medians
 * of 5 alternated runs, VNNI 8 / 16 tokens 0.544 / 1.034 ms -> 0.470 / 0.893, 1-4 tokens alike;
 * without VNNI within the noise (1-16 tokens: 0.96-1.07x), though in L2 (256 x 2048) 2 and 4
 * tokens cost 23.5 -> 27.6-28.2 ns a row and token and 8 / 16 tokens 23.2 -> 21.6-22.9.
 */
INLINE void kx_tile(int R, int T, int64_t nsb, const uint8_t *W, size_t ws, const uint8_t *A,
                    size_t as, const struct kx_tk *TK, const struct kx_rw *RW, const uint8_t *pf,
                    float *y, int64_t ys)
{
    __m256 acc[XR][XT];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] =
        _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nsb; ib++) {
        __m256i s[XR][XT];
        UNROLL for (int r = 0; r < R; r++)
        {
            if (pf)
                UNROLL for (int l = 0; l < 3; l++)
                    _mm_prefetch((const char *)pf + r * ws + ib * 144 + 64 * l, _MM_HINT_T0);
            UNROLL for (int t = 0; t < T; t++) s[r][t] = _mm256_setzero_si256();
        }
#if KQX_VNNI
        UNROLL for (int k = 0; k < 8; k++)
        { /* step k: the low nibbles of qs[32 (k / 2) ..], odd k the high ones */
            UNROLL for (int r = 0; r < R; r++)
            {
                const struct kq__q4_k *b = (const struct kq__q4_k *)(W + r * ws) + ib;
                __m256i w = _mm256_loadu_si256((const void *)(b->qs + 32 * (k / 2)));
                if (k % 2)
                    w = _mm256_srli_epi16(w, 4);
                w = _mm256_and_si256(w, _mm256_set1_epi8(15));
                X_IN_REG(w);
                UNROLL for (int t = 0; t < T; t++)
                {
                    const struct kq__q8_k *a = (const struct kq__q8_k *)(A + t * as) + ib;
                    s[r][t] = _mm256_dpbusd_avx_epi32(
                        s[r][t], w, _mm256_loadu_si256((const void *)(a->qs + 32 * k)));
                }
            }
        }
#else
        /* maddubs: the T tokens' activations of a step pair held, each row's levels made and
         * used at once: 2T + R T + 2 live registers (4 x 2: 14 of the 16), no spills */
        UNROLL for (int c = 0; c < 4; c++)
        { /* steps 2c (low nibbles), 2c + 1 (high) */
            __m256i a0[XT], a1[XT];
            UNROLL for (int t = 0; t < T; t++)
            {
                const struct kq__q8_k *a = (const struct kq__q8_k *)(A + t * as) + ib;
                a0[t] = _mm256_loadu_si256((const void *)(a->qs + 64 * c));
                a1[t] = _mm256_loadu_si256((const void *)(a->qs + 64 * c + 32));
            }
            UNROLL for (int r = 0; r < R; r++)
            {
                const struct kq__q4_k *b = (const struct kq__q4_k *)(W + r * ws) + ib;
                const __m256i x = _mm256_loadu_si256((const void *)(b->qs + 32 * c));
                const __m256i lo = _mm256_and_si256(x, _mm256_set1_epi8(15));
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), _mm256_set1_epi8(15));
                /* i16 pairs of the 8 steps: 8 x 2 x 15 x 127 < 32768 */
                UNROLL for (int t = 0; t < T; t++) s[r][t] =
                    _mm256_add_epi16(s[r][t], _mm256_add_epi16(_mm256_maddubs_epi16(lo, a0[t]),
                                                               _mm256_maddubs_epi16(hi, a1[t])));
            }
        }
#endif
        UNROLL for (int r = 0; r < R; r++)
        {
            const struct kx_rw rw =
                RW ? RW[r * nsb + ib] : kx_row((const struct kq__q4_k *)(W + r * ws) + ib);
            UNROLL for (int t = 0; t < T; t++)
            {
                const struct kx_tk *tk = &TK[t * nsb + ib];
#if !KQX_VNNI
                s[r][t] = _mm256_madd_epi16(s[r][t], _mm256_set1_epi16(1));
#endif
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r][t]),
                                            _mm256_mul_ps(rw.wd, tk->ad), acc[r][t]);
                acc[r][t] = _mm256_fnmadd_ps(rw.mn, tk->sa, acc[r][t]);
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) y[t * ys + r] =
        hsum_ps(acc[r][t]);
}

/* kx_tile for the shapes it is compiled for: R in {KR, 1}, T in 1..KT. */
static void kx_tiles(int R, int T, int64_t nsb, const uint8_t *W, size_t ws, const uint8_t *A,
                     size_t as, const struct kx_tk *TK, const struct kx_rw *RW, const uint8_t *pf,
                     float *y, int64_t ys)
{
#define KX(r, t) kx_tile(r, t, nsb, W, ws, A, as, TK, RW, pf, y, ys)
    X_SHAPES(KX, KR, KT);
#undef KX
}

/* Same contract as kq_matmul_tagged for Q4_KX weights (Q8_KX activations), any nt; false when
 * the scratch buffer cannot be had. The activation rows are read as they are; their scales and
 * sums (kx_tk) are made once per chunk of X_CHUNK tokens (once per tag where all tokens fit
 * one), a row block's (kx_rw) once per block where several token tiles meet it, else in the
 * tile. Decode (one token) of rows longer than KQ__DEC_SHORT_N runs one row at a time, each
 * asking for its own bytes X_PF_DIST ahead (as the decode tiles of kq_avx2.c do): 4 x 1 tiles
 * there read 0.26 ms against 0.21 (kqbench 6144 x 2048, 2 threads, from DRAM). */
static bool kx_matmul(int64_t n, const uint8_t *W, size_t ws, int64_t r0, int64_t r1,
                      const uint8_t *act, size_t as, int64_t nt, float *y, int64_t ys, uint64_t tag)
{
    const int64_t nsb = n / KQ__QK_K;
    const int64_t chunk = nt < X_CHUNK ? nt : X_CHUNK;
    struct x_buf *buf = x_scratch((size_t)((chunk + KR) * nsb) * sizeof(struct kx_tk));
    if (!buf)
        return false;
    struct kx_tk *TK = (struct kx_tk *)buf->b;
    struct kx_rw *RW = (struct kx_rw *)(TK + chunk * nsb);
    for (int64_t t0 = 0; t0 < nt; t0 += chunk) {
        const int64_t t1 = t0 + chunk < nt ? t0 + chunk : nt;
        const bool one = chunk == nt; /* then TK may hold them from this tag's last call */
        if (!(one && kq__pack_held(&buf->key, tag, act, as, n, nt, KQ_Q4_KX)))
            for (int64_t t = t0; t < t1; t++)
                for (int64_t ib = 0; ib < nsb; ib++)
                    TK[(t - t0) * nsb + ib] = kx_tok((const struct kq__q8_k *)(act + t * as) + ib);
        buf->key = (struct kq__pack_key){one ? tag : 0, act, as, n, nt, KQ_Q4_KX};
        if (nt == 1 && n > KQ__DEC_SHORT_N) { /* decode of long rows */
            for (int64_t r = r0; r < r1; r++)
                kx_tiles(1, 1, nsb, W + r * ws, ws, act, as, TK, NULL, W + r * ws + X_PF_DIST,
                         y + r, ys);
            continue;
        }
        const bool rows_kept = t1 - t0 > KT; /* several token tiles meet each row block */
        for (int64_t r = r0; r < r1; r += KR) {
            const int rr = (int)(r1 - r < KR ? r1 - r : KR);
            const uint8_t *Wr = W + r * ws;
            if (rows_kept)
                for (int i = 0; i < rr; i++)
                    for (int64_t ib = 0; ib < nsb; ib++)
                        RW[i * nsb + ib] = kx_row((const struct kq__q4_k *)(Wr + i * ws) + ib);
            for (int64_t t = t0; t < t1; t += KT) {
                const int tt = (int)(t1 - t < KT ? t1 - t : KT);
                const uint8_t *pf = t == t0 && r + 2 * KR <= r1 ? Wr + KR * ws : NULL;
                const struct kx_tk *tk = TK + (t - t0) * nsb;
                if (rr == KR)
                    kx_tiles(KR, tt, nsb, Wr, ws, act + t * as, as, tk, rows_kept ? RW : NULL, pf,
                             y + t * ys + r, ys);
                else
                    for (int i = 0; i < rr; i++)
                        kx_tiles(1, tt, nsb, Wr + i * ws, ws, act + t * as, as, tk,
                                 rows_kept ? RW + i * nsb : NULL, NULL, y + t * ys + r + i, ys);
            }
        }
    }
    return true;
}

/* ================================ entry point =============================================== */

bool KQX_ENTRY(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0, int64_t r1,
               const void *act, size_t act_stride, int64_t nt, float *y, int64_t y_stride,
               uint64_t tag)
{
    if (w == KQ_Q8_0X || w == KQ_Q4_0X)
        return xq_matmul(w, n, W, w_stride, r0, r1, act, act_stride, nt, y, y_stride, tag);
    if (w != KQ_Q4_KX || n % KQ__QK_K || n == 0)
        return false;
    return kx_matmul(n, W, w_stride, r0, r1, act, act_stride, nt, y, y_stride, tag);
}

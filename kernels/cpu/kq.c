/*
 * kq — GGUF tensor types: type facts, f16/bf16 conversion, dequantisation, the reference
 * quantisers, the scalar reference dot products, and the ISA dispatch of kq_matmul (see
 * kq.h for the contracts, kq_impl.h for the block layouts).
 *
 * The scalar code here is the reference every SIMD kernel is tested against; it favours
 * clarity over speed. Quantised dot products sum integer products exactly per block and apply
 * the float scales once per block (Q8_0/Q4_0) or super-block (K-quants), which is what the SIMD
 * kernels do too, so the implementations differ only in float summation order.
 *
 * Rounding: every quantiser rounds with lrintf (round to nearest even in the default FP
 * environment), as the SIMD quantisers do with cvtps2dq, so activation rows are bit-identical
 * across ISAs.
 *
 * Threads: everything is pure except the ISA choice, an atomic read once (environment variable
 * DELTAD_ISA) on first use, and kq_act_tags' counter (atomic); kq_isa_force is for tests and
 * start-up only.
 */
#include "kq.h" // defines: kq_* API

#include <cpuid.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kq_impl.h" // defines: block structs, kq__tile_drive, per-ISA entry points

/* ================================ type facts ================================================ */

/* What the type-fact functions report; block_elems == 0 marks an unknown type. */
struct type_info {
    const char *name;   /* ggml's spelling, as in GGUF dumps */
    int block_elems;    /* elements per block; 1 for the float types */
    size_t block_bytes; /* bytes per block */
};

/* The single table of type facts (ggml type ids are sparse, hence a switch). */
static struct type_info type_info(uint32_t t)
{
    switch (t) {
    case KQ_F32:
        return (struct type_info){"f32", 1, 4};
    case KQ_F16:
        return (struct type_info){"f16", 1, 2};
    case KQ_BF16:
        return (struct type_info){"bf16", 1, 2};
    case KQ_Q8_0:
        return (struct type_info){"q8_0", KQ__QK, sizeof(struct kq__q8_0)};
    case KQ_Q4_0:
        return (struct type_info){"q4_0", KQ__QK, sizeof(struct kq__q4_0)};
    case KQ_Q4_K:
        return (struct type_info){"q4_K", KQ__QK_K, sizeof(struct kq__q4_k)};
    case KQ_Q5_K:
        return (struct type_info){"q5_K", KQ__QK_K, sizeof(struct kq__q5_k)};
    case KQ_Q6_K:
        return (struct type_info){"q6_K", KQ__QK_K, sizeof(struct kq__q6_k)};
    case KQ_Q8_K:
        return (struct type_info){"q8_K", KQ__QK_K, sizeof(struct kq__q8_k)};
    case KQ_Q4_KX:
        return (struct type_info){"q4_Kx", KQ__QK_K, sizeof(struct kq__q4_k)};
    case KQ_Q5_KX:
        return (struct type_info){"q5_Kx", KQ__QK_K, sizeof(struct kq__q5_k)};
    case KQ_Q6_KX:
        return (struct type_info){"q6_Kx", KQ__QK_K, sizeof(struct kq__q6_k)};
    case KQ_Q8_KX:
        return (struct type_info){"q8_Kx", KQ__QK_K, sizeof(struct kq__q8_k)};
    case KQ_Q8_0X:
        return (struct type_info){"q8_0x", KQ__QK, sizeof(struct kq__q8_0)};
    case KQ_Q4_0X:
        return (struct type_info){"q4_0x", KQ__QK, sizeof(struct kq__q4_0)};
    default:
        return (struct type_info){"?", 0, 0};
    }
}

/* Q8_K is an activation format only, and the X layouts are internal: no file may use them. */
bool kq_type_supported(uint32_t type)
{
    return type != KQ_Q8_K && type != KQ_Q4_KX && type != KQ_Q5_KX && type != KQ_Q6_KX &&
           type != KQ_Q8_KX && type != KQ_Q8_0X && type != KQ_Q4_0X &&
           type_info(type).block_elems > 0;
}

const char *kq_type_name(uint32_t type)
{
    return type_info(type).name;
}

int kq_block_elems(enum kq_type t)
{
    return type_info(t).block_elems;
}

size_t kq_block_bytes(enum kq_type t)
{
    return type_info(t).block_bytes;
}

size_t kq_row_bytes(enum kq_type t, int64_t n)
{
    struct type_info ti = type_info(t);
    return ti.block_elems ? (size_t)(n / ti.block_elems) * ti.block_bytes : 0;
}

enum kq_type kq_act_type(enum kq_type w)
{
    switch (w) {
    case KQ_Q8_0:
    case KQ_Q8_0X:
    case KQ_Q4_0:
    case KQ_Q4_0X:
        return KQ_Q8_0;
    case KQ_Q4_K:
    case KQ_Q5_K:
    case KQ_Q6_K:
    case KQ_Q6_KX:
        return KQ_Q8_K;
    case KQ_Q4_KX:
    case KQ_Q5_KX:
        return KQ_Q8_KX;
    default:
        return KQ_F32;
    }
}

size_t kq_act_row_bytes(enum kq_type w, int64_t n)
{
    return kq_row_bytes(kq_act_type(w), n);
}

/* ================================ f16 / bf16 ================================================ */

/* Bit casts through memcpy (no aliasing games; compiles to a register move). */
static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Exact for every input: each f16 value, subnormals included, is representable in f32. */
float kq_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) /* zero or subnormal: mant * 2^-24, exact in f32 */
        return bits_f32(sign | f32_bits((float)mant * 0x1p-24f));
    if (exp == 31) /* inf / NaN keep their payload */
        return bits_f32(sign | 0x7f800000u | mant << 13);
    return bits_f32(sign | (exp + 112) << 23 | mant << 13);
}

/* m >> s (1 <= s <= 24) rounded to nearest, ties to even; a carry out of the kept bits simply
 * increments the result, which is what both callers want. */
static uint32_t shift_rne(uint32_t m, int s)
{
    const uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

/* Round to nearest even, overflow to infinity, like the F16C instruction (the test compares). */
uint16_t kq_f32_to_f16(float f)
{
    const uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet NaN of the same sign */
        return (uint16_t)(sign | 0x7e00);
    if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00);
    const int e = (int)(ax >> 23);
    if (e < 113) { /* below 2^-14: f16 subnormal (a carry into 0x400 is the right encoding) */
        const int s = 126 - e;
        return (uint16_t)(sign | (s > 24 ? 0 : shift_rne((ax & 0x7fffffu) | 0x800000u, s)));
    }
    /* Normal: rebias and round the 13 dropped bits; a carry rolls into the exponent. */
    return (uint16_t)(sign | shift_rne((uint32_t)(e - 112) << 23 | (ax & 0x7fffffu), 13));
}

float kq_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

/* Round to nearest even by adding 0x7fff plus the lowest kept bit; NaNs stay NaN (quieted). */
uint16_t kq_f32_to_bf16(float f)
{
    const uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static float h2f(uint16_t h)
{
    return kq_f16_to_f32(h);
}

/* ================================ the X layouts ============================================= */

/*
 * Both X layouts reorder a super-block's 256 levels as an 8 x 8 matrix of 4-element groups:
 * step k, group j of the X layout is group k of sub-block j of the plain one. That is a
 * transpose, so the same function converts in both directions.
 */
static void transpose_levels8(const int8_t in[256], int8_t out[256])
{
    for (int k = 0; k < 8; k++)
        for (int j = 0; j < 8; j++)
            memcpy(out + 32 * k + 4 * j, in + 32 * j + 4 * k, 4);
}

/* Nibbles h (0 low, 1 high) of the 4 bytes at p, in the low nibbles. */
static uint32_t nib4(const uint8_t *p, int h)
{
    uint32_t w;
    memcpy(&w, p, 4);
    return (w >> (4 * h)) & 0x0f0f0f0fu;
}

/*
 * The Q4_K levels (sub-block j at chunk j / 2 of 32 bytes, high nibbles for odd j) into the
 * Q4_KX order (steps 2c, 2c + 1 at chunk c), 4 bytes at a time: group j of chunk c of the X
 * layout holds elements 8c..8c+3 of sub-block j in its low nibbles and 8c+4..8c+7 in its high
 * ones. Read the other way, the same formula maps X back to plain: the map is its own inverse.
 */
static void transpose_nibbles(const uint8_t in[128], uint8_t out[128])
{
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < 8; j++) {
            const uint8_t *p = in + 32 * (j / 2) + 8 * c;
            const uint32_t v = nib4(p, j % 2) | nib4(p + 4, j % 2) << 4;
            memcpy(out + 32 * c + 4 * j, &v, 4);
        }
}

static int knib(const uint8_t qs[128], int e);
static int q6_get(const struct kq__q6_k *b, int e);

/*
 * Q5_KX / Q6_KX (kq.h): Q5_K / Q6_K with only the level bytes reordered. Level e of a block
 * (0..31 / 0..63) in the plain layout or (x) the X one; the X formulas are kq.h's: element
 * 4s + i of sub-block j (32 elements for Q5_K, 16 for Q6_K) at byte 4j + i of step s.
 */
static int kx_level(enum kq_type t, const uint8_t *p, int e, bool x)
{
    if (t == KQ_Q5_KX) {
        const struct kq__q5_k *b = (const void *)p;
        const int j = e / 32, s = e % 32 / 4, i = e % 4;
        if (!x)
            return knib(b->qs, e) | ((b->qh[e % 32] >> j) & 1) << 4;
        return ((b->qs[32 * (s / 2) + 4 * j + i] >> (4 * (s % 2))) & 15) |
               ((b->qh[4 * j + i] >> s) & 1) << 4;
    }
    const struct kq__q6_k *b = (const void *)p;
    const int j = e / 16, s = e % 16 / 4, i = e % 4;
    if (!x)
        return q6_get(b, e);
    return ((b->ql[64 * (s / 2) + 4 * j + i] >> (4 * (s % 2))) & 15) |
           ((b->qh[4 * j + i] >> (2 * s)) & 3) << 4;
}

/* OR level q of element e into a block of type t (plain or x layout, as kx_level). */
static void kx_put_level(enum kq_type t, uint8_t *p, int e, int q, bool x)
{
    if (t == KQ_Q5_KX) {
        struct kq__q5_k *b = (void *)p;
        const int j = e / 32, s = e % 32 / 4, i = e % 4, l = e % 64;
        if (!x) {
            b->qs[32 * (e / 64) + l % 32] |= (uint8_t)((q & 15) << (l < 32 ? 0 : 4));
            b->qh[e % 32] |= (uint8_t)((q >> 4) << j);
        } else {
            b->qs[32 * (s / 2) + 4 * j + i] |= (uint8_t)((q & 15) << (4 * (s % 2)));
            b->qh[4 * j + i] |= (uint8_t)((q >> 4) << s);
        }
        return;
    }
    struct kq__q6_k *b = (void *)p;
    if (!x) {
        const int h = e / 128, c = e % 128 / 32, l = e % 32;
        b->ql[64 * h + 32 * (c & 1) + l] |= (uint8_t)((q & 15) << (4 * (c >> 1)));
        b->qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * c));
    } else {
        const int j = e / 16, s = e % 16 / 4, i = e % 4;
        b->ql[64 * (s / 2) + 4 * j + i] |= (uint8_t)((q & 15) << (4 * (s % 2)));
        b->qh[4 * j + i] |= (uint8_t)((q >> 4) << (2 * s));
    }
}

/* A Q5_K / Q6_K block (t: its X type) rewritten into out: to the X layout or (!to_x) back. */
static void kx_convert(enum kq_type t, const uint8_t *in, uint8_t *out, bool to_x)
{
    const size_t lv = t == KQ_Q5_KX ? offsetof(struct kq__q5_k, qh) : 0; /* level bytes start */
    const size_t nlv = t == KQ_Q5_KX ? 32 + 128 : 128 + 64;              /* and count */
    memcpy(out, in, t == KQ_Q5_KX ? sizeof(struct kq__q5_k) : sizeof(struct kq__q6_k));
    memset(out + lv, 0, nlv);
    for (int e = 0; e < KQ__QK_K; e++)
        kx_put_level(t, out, e, kx_level(t, in, e, !to_x), to_x);
}

/* Block p of an X type t rewritten into *tmp, which is returned: in the plain layout, or
 * (to_x) from the plain layout into the X one. Q4_KX and Q8_KX maps are their own inverses,
 * so for them to_x does not matter. p itself for any other type. */
static const uint8_t *x_swap(enum kq_type t, const uint8_t *p, union kq__kblock *tmp, bool to_x)
{
    if (t == KQ_Q4_KX) {
        memcpy(&tmp->q4, p, sizeof tmp->q4);
        transpose_nibbles(((const struct kq__q4_k *)p)->qs, tmp->q4.qs);
        return (const uint8_t *)&tmp->q4;
    }
    if (t == KQ_Q8_KX) {
        memcpy(&tmp->q8, p, sizeof tmp->q8);
        transpose_levels8(((const struct kq__q8_k *)p)->qs, tmp->q8.qs);
        return (const uint8_t *)&tmp->q8;
    }
    if (t == KQ_Q5_KX || t == KQ_Q6_KX) {
        kx_convert(t, p, (uint8_t *)tmp, to_x);
        return (const uint8_t *)tmp;
    }
    return p;
}

/* The plain type of an X K-quant layout; t itself for any other. */
static enum kq_type kx_plain(enum kq_type t)
{
    switch (t) {
    case KQ_Q4_KX:
        return KQ_Q4_K;
    case KQ_Q5_KX:
        return KQ_Q5_K;
    case KQ_Q6_KX:
        return KQ_Q6_K;
    case KQ_Q8_KX:
        return KQ_Q8_K;
    default:
        return t;
    }
}

/*
 * Q8_0X / Q4_0X (kq.h): in a row of nb blocks, block b's f16 scale at byte 2 b; its levels in
 * group g = b / 16 of m = min(16, nb - 16 g) blocks, which starts at 2 nb + 16 g nq (nq level
 * bytes per block): byte j of the block's quants (Q8_0: qs[j] + 128; Q4_0: qs[j] as it is) at
 * 4 m (j / 4) + 4 (b % 16) + j % 4 of the group. Where block b's bytes go: scale at *sc, byte j
 * of its quants at qoff + 4 m (j / 4) + j % 4.
 */
static void xq_place(enum kq_type t, int64_t nb, int64_t b, int64_t *sc, int64_t *qoff, int64_t *m)
{
    const int64_t nq = t == KQ_Q4_0X ? 16 : 32, g = b / 16;
    *sc = 2 * b;
    *m = nb - 16 * g < 16 ? nb - 16 * g : 16;
    *qoff = 2 * nb + 16 * g * nq + 4 * (b % 16);
}

/* Block b of a Q8_0X / Q4_0X row (type t) of nb blocks, as a plain block into out. */
static void xq_get(enum kq_type t, const uint8_t *row, int64_t nb, int64_t b, void *out)
{
    const int nq = t == KQ_Q4_0X ? 16 : 32, flip = t == KQ_Q4_0X ? 0 : 0x80;
    int64_t sc, qo, m;
    xq_place(t, nb, b, &sc, &qo, &m);
    uint8_t *o = out;
    memcpy(o, row + sc, 2);
    for (int j = 0; j < nq; j++)
        o[2 + j] = (uint8_t)(row[qo + 4 * m * (j / 4) + j % 4] ^ flip);
}

/* The inverse of xq_get: plain block in as block b of a row of type t. */
static void xq_put(enum kq_type t, uint8_t *row, int64_t nb, int64_t b, const void *in)
{
    const int nq = t == KQ_Q4_0X ? 16 : 32, flip = t == KQ_Q4_0X ? 0 : 0x80;
    int64_t sc, qo, m;
    xq_place(t, nb, b, &sc, &qo, &m);
    const uint8_t *p = in;
    memcpy(row + sc, p, 2);
    for (int j = 0; j < nq; j++)
        row[qo + 4 * m * (j / 4) + j % 4] = (uint8_t)(p[2 + j] ^ flip);
}

/* Q8_0X / Q4_0X where the AVX-512 or AVX2 kernels run, Q4_KX / Q5_KX where the AVX-512 ones do
 * (their batched matmul then reads the weights as they are, and their decode is as fast on them);
 * Q4_KX on AVX2. */
enum kq_type kq_repack_type(enum kq_type t)
{
    const enum kq_isa isa = kq_isa_active();
    if (isa == KQ_ISA_AVX512) {
        switch (t) {
        case KQ_Q8_0:
            return KQ_Q8_0X;
        case KQ_Q4_0:
            return KQ_Q4_0X;
        case KQ_Q4_K:
            return KQ_Q4_KX;
        case KQ_Q5_K:
            return KQ_Q5_KX;
        /* Q6_K: kept plain while the Q6_KX kernel decoded at 0.86-0.98x of the plain one
         * (2026-12-07); re-measured 2026-12-08 it decodes as fast or faster and batches ~2x faster
         * (kqbench, 2 threads, medians of 3: 4096 x 8192 B = 1 / 2 / 8 0.55 / 0.55 / 1.39 ms
         * against 0.63 / 1.30 / 2.43; an all-Q6_K ~0.86 GB qwen35 decoded 1.55x faster at B = 1
         * and 2.3-2.8x at B = 2-8) */
        case KQ_Q6_K:
            return KQ_Q6_KX;
        default:
            return t;
        }
    }
    if (t == KQ_Q8_0 && isa == KQ_ISA_AVX2)
        return KQ_Q8_0X;
    if (t == KQ_Q4_0 && isa == KQ_ISA_AVX2)
        return KQ_Q4_0X;
    return t == KQ_Q4_K && isa == KQ_ISA_AVX2 ? KQ_Q4_KX : t;
}

bool kq_repack_rows(enum kq_type from, enum kq_type to, const void *src, void *dst, int64_t n,
                    int64_t rows)
{
    const bool swap = (from == KQ_Q4_K && to == KQ_Q4_KX) || (from == KQ_Q4_KX && to == KQ_Q4_K);
    const bool xq = (from == KQ_Q8_0 && to == KQ_Q8_0X) || (from == KQ_Q8_0X && to == KQ_Q8_0) ||
                    (from == KQ_Q4_0 && to == KQ_Q4_0X) || (from == KQ_Q4_0X && to == KQ_Q4_0);
    const bool kx = from != to &&
                    (from == KQ_Q5_K || from == KQ_Q5_KX || from == KQ_Q6_K || from == KQ_Q6_KX) &&
                    kx_plain(from) == kx_plain(to);
    if (from != to && !swap && !xq && !kx)
        return false;
    if (kx) { /* block by block, each a permutation of its level bits */
        const enum kq_type xt = from == KQ_Q5_K || from == KQ_Q6_K ? to : from;
        const size_t bb = kq_block_bytes(from);
        const int64_t nblk = n / KQ__QK_K * rows;
        for (int64_t b = 0; b < nblk; b++)
            kx_convert(xt, (const uint8_t *)src + b * bb, (uint8_t *)dst + b * bb, to == xt);
        return true;
    }
    if (xq) {
        const int64_t nb = n / KQ__QK, bb = (int64_t)kq_block_bytes(from);
        const size_t rb = kq_row_bytes(from, n);
        const bool to_x = to == KQ_Q8_0X || to == KQ_Q4_0X;
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *in = (const uint8_t *)src + r * rb;
            uint8_t *out = (uint8_t *)dst + r * rb;
            for (int64_t b = 0; b < nb; b++) {
                struct kq__q8_0 blk; /* room for either block */
                if (to_x) {
                    memcpy(&blk, in + b * bb, (size_t)bb);
                    xq_put(to, out, nb, b, &blk);
                } else {
                    xq_get(from, in, nb, b, &blk);
                    memcpy(out + b * bb, &blk, (size_t)bb);
                }
            }
        }
        return true;
    }
    const size_t bytes = kq_row_bytes(from, n) * (size_t)rows;
    memcpy(dst, src, bytes);
    const struct kq__q4_k *in = src;
    struct kq__q4_k *out = dst;
    for (size_t b = 0; swap && b < bytes / sizeof *in; b++)
        transpose_nibbles(in[b].qs, out[b].qs);
    return true;
}

/* ================================ dequantisation ============================================ */

/* Six-bit scale / min j of a Q4_K/Q5_K block. */
static void kscale(const uint8_t s[12], int j, int *sc, int *m)
{
    uint64_t sv, mv;
    kq__unpack_scales(s, &sv, &mv);
    *sc = (int)(sv >> (8 * j)) & 63;
    *m = (int)(mv >> (8 * j)) & 63;
}

/* 4-bit value of element e (0..255) of a Q4_K/Q5_K qs array. */
static int knib(const uint8_t qs[128], int e)
{
    const int g = e / 64, l = e % 64;
    return l < 32 ? qs[32 * g + l] & 15 : qs[32 * g + l - 32] >> 4;
}

/* Unsigned 6-bit value (0..63) of element e (0..255) of a Q6_K block. */
static int q6_get(const struct kq__q6_k *b, int e)
{
    const int h = e / 128, c = (e % 128) / 32, l = e % 32;
    const int lo = (b->ql[64 * h + 32 * (c & 1) + l] >> (4 * (c >> 1))) & 15;
    const int hi = (b->qh[32 * h + l] >> (2 * c)) & 3;
    return lo | hi << 4;
}

/* One Q4_K (qh NULL) or Q5_K super-block into y [256]: x = d * sc[j] * q - dmin * m[j]. */
static void deq_kaffine(uint16_t hd, uint16_t hdmin, const uint8_t *scales, const uint8_t *qh,
                        const uint8_t *qs, float *y)
{
    const float d = h2f(hd), dmin = h2f(hdmin);
    for (int e = 0; e < KQ__QK_K; e++) {
        int sc, m;
        kscale(scales, e / 32, &sc, &m);
        const int q = knib(qs, e) + (qh ? ((qh[e % 32] >> (e / 32)) & 1) << 4 : 0);
        y[e] = d * (float)sc * (float)q - dmin * (float)m;
    }
}

/* One block of a quantised type t at p into y [kq_block_elems(t)]. */
static void deq_block(enum kq_type t, const uint8_t *p, float *y)
{
    union kq__kblock tmp;
    p = x_swap(t, p, &tmp, false);
    t = kx_plain(t);
    if (t == KQ_Q8_0) {
        const struct kq__q8_0 *b = (const void *)p;
        for (int i = 0; i < KQ__QK; i++)
            y[i] = h2f(b->d) * b->qs[i];
    } else if (t == KQ_Q4_0) {
        const struct kq__q4_0 *b = (const void *)p;
        for (int i = 0; i < 16; i++) {
            y[i] = h2f(b->d) * (float)((b->qs[i] & 15) - 8);
            y[i + 16] = h2f(b->d) * (float)((b->qs[i] >> 4) - 8);
        }
    } else if (t == KQ_Q4_K) {
        const struct kq__q4_k *b = (const void *)p;
        deq_kaffine(b->d, b->dmin, b->scales, NULL, b->qs, y);
    } else if (t == KQ_Q5_K) {
        const struct kq__q5_k *b = (const void *)p;
        deq_kaffine(b->d, b->dmin, b->scales, b->qh, b->qs, y);
    } else if (t == KQ_Q6_K) {
        const struct kq__q6_k *b = (const void *)p;
        for (int e = 0; e < KQ__QK_K; e++)
            y[e] = h2f(b->d) * (float)b->scales[e / 16] * (float)(q6_get(b, e) - 32);
    } else if (t == KQ_Q8_K) {
        const struct kq__q8_k *b = (const void *)p;
        for (int i = 0; i < KQ__QK_K; i++)
            y[i] = b->d * b->qs[i];
    }
}

/* Float types convert element-wise; quantised ones go block by block (n / block_elems). */
void kq_dequantize_row(enum kq_type t, const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    switch (t) {
    case KQ_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case KQ_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = kq_f16_to_f32(h[i]);
        return;
    case KQ_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = kq_bf16_to_f32(h[i]);
        return;
    case KQ_Q8_0X:
    case KQ_Q4_0X:
        for (int64_t b = 0; b < n / KQ__QK; b++) {
            struct kq__q8_0 blk; /* room for either block */
            xq_get(t, src, n / KQ__QK, b, &blk);
            deq_block(t == KQ_Q8_0X ? KQ_Q8_0 : KQ_Q4_0, (const uint8_t *)&blk, dst + b * KQ__QK);
        }
        return;
    default:
        break;
    }
    const struct type_info ti = type_info(t);
    for (int64_t b = 0; ti.block_elems && b < n / ti.block_elems; b++)
        deq_block(t, (const uint8_t *)src + b * ti.block_bytes, dst + b * ti.block_elems);
}

/* ================================ reference quantisers ====================================== */

/* Nearest integer, ties to even (the default rounding mode; cvtps2dq does the same). */
static int iround(float v)
{
    return (int)lrintf(v);
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* max |x[i]|; order-independent, so SIMD reductions get the same value. */
static float absmax(const float *x, int n)
{
    float m = 0.0f;
    for (int i = 0; i < n; i++)
        m = fmaxf(m, fabsf(x[i]));
    return m;
}

/*
 * Q8_0 (weights and activations): d = amax / 127, q = round(x / d), so |q| <= 127 and the SIMD
 * kernels may take |w| and sign(a, w) without overflow. id is computed from the unrounded d,
 * while the block stores d rounded to f16.
 */
static void quant_q8_0(const float *x, struct kq__q8_0 *b)
{
    const float d = absmax(x, KQ__QK) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = kq_f32_to_f16(d);
    for (int i = 0; i < KQ__QK; i++)
        b->qs[i] = (int8_t)iround(x[i] * id);
}

/* Q4_0: the value of largest magnitude maps to level -8 exactly (as ggml does), so the 16
 * levels cover [-|max|, 7/8 |max|] with the extreme value reproduced without error. */
static void quant_q4_0(const float *x, struct kq__q4_0 *b)
{
    float vmax = 0.0f;
    for (int i = 0; i < KQ__QK; i++)
        vmax = fabsf(x[i]) > fabsf(vmax) ? x[i] : vmax;
    const float d = vmax / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = kq_f32_to_f16(d);
    for (int i = 0; i < 16; i++) {
        const int lo = clampi(iround(x[i] * id) + 8, 0, 15);
        const int hi = clampi(iround(x[i + 16] * id) + 8, 0, 15);
        b->qs[i] = (uint8_t)(lo | hi << 4);
    }
}

/* Q8_K (activations): as Q8_0 over 256 elements with an f32 scale, plus the 16-element sums
 * that carry the K-quant min / offset terms (|bsum| <= 16 * 127 fits int16). */
static void quant_q8_k(const float *x, struct kq__q8_k *b)
{
    const float d = absmax(x, KQ__QK_K) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = d;
    for (int j = 0; j < 16; j++) {
        int sum = 0;
        for (int i = 16 * j; i < 16 * j + 16; i++) {
            b->qs[i] = (int8_t)iround(x[i] * id);
            sum += b->qs[i];
        }
        b->bsums[j] = (int16_t)sum;
    }
}

/*
 * Least-squares fit of x[0..len) ~ off + s * q, q in [0, qmax], off <= 0: start from the
 * min/max range, then alternate "assign levels" and "solve the 2x2 normal equations" a few
 * times, keeping the lowest squared error. Returns s >= 0 and the min -off >= 0.
 */
static void fit_affine(const float *x, int len, int qmax, float *scale, float *min)
{
    float lo = 0.0f, hi = -INFINITY; /* lo <= 0: the stored min is non-negative */
    for (int i = 0; i < len; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    float s = (hi - lo) / (float)qmax, off = lo, best = INFINITY;
    *scale = 0.0f;
    *min = -lo;
    for (int it = 0; it < 6 && s > 0.0f; it++) {
        double sq = 0, sqq = 0, sx = 0, sxq = 0, err = 0;
        for (int i = 0; i < len; i++) {
            const int q = clampi(iround((x[i] - off) / s), 0, qmax);
            const double r = off + (double)s * q - x[i];
            sq += q, sqq += (double)q * q, sx += x[i], sxq += (double)x[i] * q, err += r * r;
        }
        if (err < best) {
            best = (float)err;
            *scale = s;
            *min = -off;
        }
        const double det = len * sqq - sq * sq;
        if (det <= 0.0)
            break;
        double ns = (len * sxq - sq * sx) / det, noff = (sqq * sx - sq * sxq) / det;
        if (noff > 0.0) /* the constraint binds: refit the scale alone */
            noff = 0.0, ns = sxq / sqq;
        s = (float)ns;
        off = (float)noff;
    }
}

/*
 * Symmetric least-squares fit x ~ s * q, q in [-32, 31]; returns s (either sign). Starts with
 * the largest-magnitude value on level -32 (using the asymmetric level range), then refits
 * s = <x, q> / <q, q> a few times.
 */
static float fit_symmetric(const float *x, int len)
{
    float vmax = 0.0f;
    for (int i = 0; i < len; i++)
        vmax = fabsf(x[i]) > fabsf(vmax) ? x[i] : vmax;
    float s = vmax / -32.0f, best_s = s, best = INFINITY;
    for (int it = 0; it < 6 && s != 0.0f; it++) {
        double sxq = 0, sqq = 0, err = 0;
        for (int i = 0; i < len; i++) {
            const int q = clampi(iround(x[i] / s), -32, 31);
            const double r = (double)s * q - x[i];
            sxq += (double)x[i] * q, sqq += (double)q * q, err += r * r;
        }
        if (err < best)
            best = (float)err, best_s = s;
        if (sqq == 0.0)
            break;
        s = (float)(sxq / sqq);
    }
    return best_s;
}

/* Pack the 6-bit scales / mins of a Q4_K/Q5_K block (inverse of kq__unpack_scales). */
static void pack_scales(const int sc[8], const int m[8], uint8_t s[12])
{
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
}

/*
 * Q4_K/Q5_K levels: fit each sub-block of 32 (scale, min), quantise the 8 scales and 8 mins to 6
 * bits against the f16 super-scales d and dmin, then assign q [256] from the stored values.
 */
static void quant_kaffine(const float *x, int qmax, uint16_t *hd, uint16_t *hdmin,
                          uint8_t scales[12], int *q)
{
    float s[8], m[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        fit_affine(x + 32 * j, 32, qmax, &s[j], &m[j]);
        smax = fmaxf(smax, s[j]);
        mmax = fmaxf(mmax, m[j]);
    }
    *hd = kq_f32_to_f16(smax / 63.0f);
    *hdmin = kq_f32_to_f16(mmax / 63.0f);
    const float d = h2f(*hd), dmin = h2f(*hdmin);
    int sc[8], mi[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = d > 0.0f ? clampi(iround(s[j] / d), 0, 63) : 0;
        mi[j] = dmin > 0.0f ? clampi(iround(m[j] / dmin), 0, 63) : 0;
        const float ds = d * (float)sc[j], dm = dmin * (float)mi[j];
        for (int i = 32 * j; i < 32 * j + 32; i++)
            q[i] = ds > 0.0f ? clampi(iround((x[i] + dm) / ds), 0, qmax) : 0;
    }
    pack_scales(sc, mi, scales);
}

/* Levels q [256] (low 4 bits used) into the Q4_K/Q5_K nibble order of kq__q4_k. */
static void pack_nibbles(const int *q, uint8_t qs[128])
{
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++)
            qs[32 * g + l] = (uint8_t)((q[64 * g + l] & 15) | (q[64 * g + 32 + l] & 15) << 4);
}

static void quant_q4_k(const float *x, struct kq__q4_k *b)
{
    int q[KQ__QK_K];
    quant_kaffine(x, 15, &b->d, &b->dmin, b->scales, q);
    pack_nibbles(q, b->qs);
}

/* As Q4_K with 32 levels; bit 4 of each level goes to qh (bit j of qh[l] for sub-block j). */
static void quant_q5_k(const float *x, struct kq__q5_k *b)
{
    int q[KQ__QK_K];
    quant_kaffine(x, 31, &b->d, &b->dmin, b->scales, q);
    pack_nibbles(q, b->qs);
    memset(b->qh, 0, sizeof b->qh);
    for (int e = 0; e < KQ__QK_K; e++)
        b->qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
}

/*
 * Q6_K: a symmetric fit per sub-block of 16, the 16 scales quantised to int8 against one f16 d,
 * then levels from the quantised scales (so the stored scale is the one they were fitted to).
 */
static void quant_q6_k(const float *x, struct kq__q6_k *b)
{
    float s[16], smax = 0.0f;
    for (int j = 0; j < 16; j++) {
        s[j] = fit_symmetric(x + 16 * j, 16);
        smax = fmaxf(smax, fabsf(s[j]));
    }
    b->d = kq_f32_to_f16(smax / 127.0f);
    const float d = h2f(b->d);
    memset(b->ql, 0, sizeof b->ql);
    memset(b->qh, 0, sizeof b->qh);
    for (int e = 0; e < KQ__QK_K; e++) {
        if (e % 16 == 0)
            b->scales[e / 16] = (int8_t)(d > 0.0f ? clampi(iround(s[e / 16] / d), -127, 127) : 0);
        const float ds = d * (float)b->scales[e / 16];
        const int u = (ds != 0.0f ? clampi(iround(x[e] / ds), -32, 31) : 0) + 32;
        const int h = e / 128, c = (e % 128) / 32, l = e % 32;
        b->ql[64 * h + 32 * (c & 1) + l] |= (uint8_t)((u & 15) << (4 * (c >> 1)));
        b->qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * c));
    }
}

/* One block of x into type t at p. */
static void quant_block(enum kq_type t, const float *x, uint8_t *p)
{
    switch (t) {
    case KQ_Q8_0:
        quant_q8_0(x, (void *)p);
        break;
    case KQ_Q4_0:
        quant_q4_0(x, (void *)p);
        break;
    case KQ_Q4_K:
        quant_q4_k(x, (void *)p);
        break;
    case KQ_Q5_K:
        quant_q5_k(x, (void *)p);
        break;
    case KQ_Q6_K:
        quant_q6_k(x, (void *)p);
        break;
    case KQ_Q8_K:
        quant_q8_k(x, (void *)p);
        break;
    case KQ_Q4_KX:
    case KQ_Q5_KX:
    case KQ_Q6_KX:
    case KQ_Q8_KX: { /* the plain block, then its levels reordered */
        union kq__kblock tmp;
        quant_block(kx_plain(t), x, p);
        memcpy(p, x_swap(t, p, &tmp, true), kq_block_bytes(t));
        break;
    }
    default:
        break;
    }
}

void kq_quantize_row(enum kq_type t, const float *src, void *dst, int64_t n)
{
    uint16_t *h = dst;
    switch (t) {
    case KQ_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case KQ_F16:
        for (int64_t i = 0; i < n; i++)
            h[i] = kq_f32_to_f16(src[i]);
        return;
    case KQ_BF16:
        for (int64_t i = 0; i < n; i++)
            h[i] = kq_f32_to_bf16(src[i]);
        return;
    case KQ_Q8_0X: /* Q8_0 / Q4_0, then each block put in its place of the X layout */
    case KQ_Q4_0X:
        for (int64_t b = 0; b < n / KQ__QK; b++) {
            struct kq__q8_0 blk; /* room for either block */
            quant_block(t == KQ_Q8_0X ? KQ_Q8_0 : KQ_Q4_0, src + b * KQ__QK, (uint8_t *)&blk);
            xq_put(t, dst, n / KQ__QK, b, &blk);
        }
        return;
    default:
        break;
    }
    const struct type_info ti = type_info(t);
    for (int64_t b = 0; ti.block_elems && b < n / ti.block_elems; b++)
        quant_block(t, src + b * ti.block_elems, (uint8_t *)dst + b * ti.block_bytes);
}

/* ================================ scalar dot products ======================================= */

/* F32 / F16 / BF16 weights [n] against f32 activations [n], summed in order in f32. */
static float dot_float(enum kq_type w, int64_t n, const void *wrow, const float *a)
{
    const float *f = wrow;
    const uint16_t *h = wrow;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float wi = w == KQ_F32 ? f[i] : w == KQ_F16 ? h2f(h[i]) : kq_bf16_to_f32(h[i]);
        s += wi * a[i];
    }
    return s;
}

/* nb Q8_0 weight blocks against nb Q8_0 activation blocks: exact int sum, one scale each. */
static float dot_q8_0(int64_t nb, const struct kq__q8_0 *w, const struct kq__q8_0 *a)
{
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int isum = 0;
        for (int i = 0; i < KQ__QK; i++)
            isum += w[b].qs[i] * a[b].qs[i];
        s += (float)isum * (h2f(w[b].d) * h2f(a[b].d));
    }
    return s;
}

/* nb Q4_0 weight blocks against nb Q8_0 activation blocks. */
static float dot_q4_0(int64_t nb, const struct kq__q4_0 *w, const struct kq__q8_0 *a)
{
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int isum = 0;
        for (int i = 0; i < 16; i++)
            isum +=
                ((w[b].qs[i] & 15) - 8) * a[b].qs[i] + ((w[b].qs[i] >> 4) - 8) * a[b].qs[i + 16];
        s += (float)isum * (h2f(w[b].d) * h2f(a[b].d));
    }
    return s;
}

/*
 * One Q4_K/Q5_K super-block (qh NULL for Q4_K) against one Q8_K block. The min term uses the
 * activation's bsums, as the SIMD kernels do; the quantiser keeps them consistent with qs.
 */
static float dot_kaffine(uint16_t hd, uint16_t hdmin, const uint8_t *scales, const uint8_t *qh,
                         const uint8_t *qs, const struct kq__q8_k *a)
{
    int isum = 0, msum = 0;
    for (int j = 0; j < 8; j++) {
        int sc, m, sub = 0;
        kscale(scales, j, &sc, &m);
        for (int e = 32 * j; e < 32 * j + 32; e++)
            sub += (knib(qs, e) + (qh ? ((qh[e % 32] >> j) & 1) << 4 : 0)) * a->qs[e];
        isum += sc * sub;
        msum += m * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    }
    return (float)isum * (h2f(hd) * a->d) - (float)msum * (h2f(hdmin) * a->d);
}

/* One Q6_K super-block against one Q8_K block (levels centred by -32 before the product). */
static float dot_q6_k(const struct kq__q6_k *w, const struct kq__q8_k *a)
{
    int isum = 0;
    for (int j = 0; j < 16; j++) {
        int sub = 0;
        for (int e = 16 * j; e < 16 * j + 16; e++)
            sub += (q6_get(w, e) - 32) * a->qs[e];
        isum += w->scales[j] * sub;
    }
    return (float)isum * (h2f(w->d) * a->d);
}

/* The reference kq_dot: weight row wrow of type w [n] against its activation row. */
static float dot_scalar(enum kq_type w, int64_t n, const void *wrow, const void *act)
{
    const struct kq__q8_k *ak = act;
    float s = 0.0f;
    switch (w) {
    case KQ_F32:
    case KQ_F16:
    case KQ_BF16:
        return dot_float(w, n, wrow, act);
    case KQ_Q8_0:
        return dot_q8_0(n / KQ__QK, wrow, act);
    case KQ_Q4_0:
        return dot_q4_0(n / KQ__QK, wrow, act);
    case KQ_Q4_K:
        for (int64_t b = 0; b < n / KQ__QK_K; b++) {
            const struct kq__q4_k *q = (const struct kq__q4_k *)wrow + b;
            s += dot_kaffine(q->d, q->dmin, q->scales, NULL, q->qs, ak + b);
        }
        return s;
    case KQ_Q5_K:
        for (int64_t b = 0; b < n / KQ__QK_K; b++) {
            const struct kq__q5_k *q = (const struct kq__q5_k *)wrow + b;
            s += dot_kaffine(q->d, q->dmin, q->scales, q->qh, q->qs, ak + b);
        }
        return s;
    case KQ_Q6_K:
        for (int64_t b = 0; b < n / KQ__QK_K; b++)
            s += dot_q6_k((const struct kq__q6_k *)wrow + b, ak + b);
        return s;
    case KQ_Q8_0X: /* Q8_0's / Q4_0's dot of the plain blocks: the same result bit for bit */
    case KQ_Q4_0X:
        for (int64_t b = 0; b < n / KQ__QK; b++) {
            struct kq__q8_0 blk; /* room for either block */
            xq_get(w, wrow, n / KQ__QK, b, &blk);
            s += w == KQ_Q8_0X
                     ? dot_q8_0(1, &blk, (const struct kq__q8_0 *)act + b)
                     : dot_q4_0(1, (const struct kq__q4_0 *)&blk, (const struct kq__q8_0 *)act + b);
        }
        return s;
    case KQ_Q4_KX: /* Q4_K's dot of the plain blocks: the same result bit for bit */
        for (int64_t b = 0; b < n / KQ__QK_K; b++) {
            union kq__kblock tw, ta;
            const struct kq__q4_k *q = (const void *)x_swap(
                w, (const uint8_t *)wrow + b * sizeof(struct kq__q4_k), &tw, 0);
            const struct kq__q8_k *a =
                (const void *)x_swap(KQ_Q8_KX, (const uint8_t *)(ak + b), &ta, false);
            s += dot_kaffine(q->d, q->dmin, q->scales, NULL, q->qs, a);
        }
        return s;
    case KQ_Q5_KX: /* Q5_K's dot of the plain blocks, as for Q4_KX */
        for (int64_t b = 0; b < n / KQ__QK_K; b++) {
            union kq__kblock tw, ta;
            const struct kq__q5_k *q = (const void *)x_swap(
                w, (const uint8_t *)wrow + b * sizeof(struct kq__q5_k), &tw, 0);
            const struct kq__q8_k *a =
                (const void *)x_swap(KQ_Q8_KX, (const uint8_t *)(ak + b), &ta, false);
            s += dot_kaffine(q->d, q->dmin, q->scales, q->qh, q->qs, a);
        }
        return s;
    case KQ_Q6_KX: /* Q6_K's dot of the plain blocks (the activation is plain Q8_K) */
        for (int64_t b = 0; b < n / KQ__QK_K; b++) {
            union kq__kblock tw;
            s += dot_q6_k((const void *)x_swap(
                              w, (const uint8_t *)wrow + b * sizeof(struct kq__q6_k), &tw, false),
                          ak + b);
        }
        return s;
    default:
        return 0.0f;
    }
}

/* ================================ ISA selection ============================================= */

static _Atomic int isa_state = -1; /* enum kq_isa once chosen, -1 before first use */

/* The AVX-512 kernels need F, BW, VL, DQ and VNNI (vpdpbusd, vpdpwssd); the AVX2 ones FMA and
 * F16C. __builtin_cpu_supports also checks that the OS saves the wide registers. */
enum kq_isa kq_isa_best(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni"))
        return KQ_ISA_AVX512;
    /* clang 14 has no "f16c" for __builtin_cpu_supports: ask cpuid leaf 1 directly. */
    unsigned eax, ebx, ecx = 0, edx;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c)
        return KQ_ISA_AVX2;
    return KQ_ISA_SCALAR;
}

/* The ISA named by DELTAD_ISA, else the best one; clamped to what the CPU has. */
static enum kq_isa isa_from_env(void)
{
    const enum kq_isa best = kq_isa_best();
    const char *e = getenv("DELTAD_ISA");
    enum kq_isa want = best;
    if (e && strcmp(e, "scalar") == 0)
        want = KQ_ISA_SCALAR;
    else if (e && (strcmp(e, "avx2") == 0 || strcmp(e, "avx2-novnni") == 0))
        want = KQ_ISA_AVX2;
    return want < best ? want : best;
}

/* AVX-VNNI: cpuid leaf 7 subleaf 1, EAX bit 4 (the OS's saving of ymm state is checked with
 * AVX2 in kq_isa_best, which must hold too). */
static bool cpu_avx_vnni(void)
{
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return kq_isa_best() >= KQ_ISA_AVX2 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
           (eax & (1u << 4));
}

static _Atomic int vnni_state = -1; /* 0 / 1 once chosen, -1 before first use */

bool kq_avx2_vnni(void)
{
    int v = atomic_load_explicit(&vnni_state, memory_order_relaxed);
    if (v < 0) { /* racing first calls compute the same value */
        const char *e = getenv("DELTAD_ISA");
        v = cpu_avx_vnni() && !(e && strcmp(e, "avx2-novnni") == 0);
        atomic_store_explicit(&vnni_state, v, memory_order_relaxed);
    }
    return v;
}

bool kq_avx2_vnni_force(bool on)
{
    const bool v = on && cpu_avx_vnni();
    atomic_store_explicit(&vnni_state, v, memory_order_relaxed);
    return v;
}

enum kq_isa kq_isa_active(void)
{
    int v = atomic_load_explicit(&isa_state, memory_order_relaxed);
    if (v < 0) { /* racing first calls compute the same value */
        v = (int)isa_from_env();
        atomic_store_explicit(&isa_state, v, memory_order_relaxed);
    }
    return (enum kq_isa)v;
}

enum kq_isa kq_isa_force(enum kq_isa isa)
{
    const enum kq_isa best = kq_isa_best();
    const enum kq_isa v = isa < best ? isa : best;
    atomic_store_explicit(&isa_state, (int)v, memory_order_relaxed);
    return v;
}

const char *kq_isa_name(enum kq_isa isa)
{
    switch (isa) {
    case KQ_ISA_SCALAR:
        return "scalar";
    case KQ_ISA_AVX2:
        return "avx2";
    case KQ_ISA_AVX512:
        return "avx512";
    }
    return "?";
}

/* ================================ activations, dot, matmul ================================== */

/* The SIMD quantisers produce the reference's bytes exactly (tested), so the choice of ISA
 * never changes a result beyond float summation order in the dot products. */
void kq_quantize_act(enum kq_type w, const float *x, void *dst, int64_t n)
{
    if (kq_act_type(w) == KQ_Q8_KX) { /* Q8_K, then each block's levels transposed */
        kq_quantize_act(KQ_Q4_K, x, dst, n);
        for (int64_t b = 0; b < n / KQ__QK_K; b++) {
            struct kq__q8_k *blk = (struct kq__q8_k *)dst + b;
            int8_t plain[256];
            memcpy(plain, blk->qs, sizeof plain);
            transpose_levels8(plain, blk->qs);
        }
        return;
    }
    const enum kq_isa isa = kq_isa_active();
    if (isa == KQ_ISA_AVX512 && kq__avx512_quantize_act(w, x, dst, n))
        return;
    if (isa == KQ_ISA_AVX2 && kq__avx2_quantize_act(w, x, dst, n))
        return;
    kq_quantize_row(kq_act_type(w), x, dst, n);
}

/* A SIMD dot is a 1 x 1 matmul: the decode kernel, with its several accumulators. */
float kq_dot(enum kq_type w, int64_t n, const void *wrow, const void *act)
{
    if (kq_isa_active() == KQ_ISA_SCALAR)
        return dot_scalar(w, n, wrow, act);
    float y = 0.0f;
    kq_matmul(w, n, wrow, kq_row_bytes(w, n), 0, 1, act, kq_act_row_bytes(w, n), 1, &y, 1);
    return y;
}

void kq_matmul(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0, int64_t r1,
               const void *act, size_t act_stride, int64_t nt, float *y, int64_t y_stride)
{
    kq_matmul_tagged(w, n, W, w_stride, r0, r1, act, act_stride, nt, y, y_stride, 0);
}

/* SIMD first; the scalar loop is the reference and the fallback for a declined type. */
void kq_matmul_tagged(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0,
                      int64_t r1, const void *act, size_t act_stride, int64_t nt, float *y,
                      int64_t y_stride, uint64_t act_tag)
{
    const enum kq_isa isa = kq_isa_active();
    if (isa == KQ_ISA_AVX512 &&
        kq__avx512_matmul(w, n, W, w_stride, r0, r1, act, act_stride, nt, y, y_stride, act_tag))
        return;
    if (isa == KQ_ISA_AVX2 &&
        kq__avx2_matmul(w, n, W, w_stride, r0, r1, act, act_stride, nt, y, y_stride, act_tag))
        return;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t t = 0; t < nt; t++)
            y[t * y_stride + r] = dot_scalar(w, n, (const uint8_t *)W + r * w_stride,
                                             (const uint8_t *)act + t * act_stride);
}

uint64_t kq_act_tags(int64_t count)
{
    static _Atomic uint64_t next = 1; /* 0 is "no tag" */
    return atomic_fetch_add_explicit(&next, (uint64_t)(count > 0 ? count : 0),
                                     memory_order_relaxed);
}

/* Tokens [t0, t1) of one row block: full-width tiles, then the rest in one rest[k] call where
 * there is one (rest may be NULL), else the narrow kernel token by token. */
static void drive_tokens(kq__tile_fn wide, kq__tile_fn narrow, const kq__tile_fn *rest, int tm,
                         int64_t n, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
                         int64_t t0, int64_t t1, float *y, int64_t ys)
{
    int64_t t = t0;
    for (; t + tm <= t1; t += tm)
        wide(n, w, ws, a + t * as, as, y + t * ys, ys);
    if (rest && t1 - t > 1 && t1 - t < 4 && rest[t1 - t]) { /* the rest in one call */
        rest[t1 - t](n, w, ws, a + t * as, as, y + t * ys, ys);
        return;
    }
    for (; t < t1; t++)
        narrow(n, w, ws, a + t * as, as, y + t * ys, ys);
}

/*
 * Tokens go in chunks whose activations fit in L2 (~512 KiB); within a chunk each block of rm
 * weight rows is read from memory once and met with every token while it sits in L1/L2.
 * Decode (nt == 1) of long rows goes row after row instead: one sequential stream through the
 * matrix reads DRAM faster than rm interleaved ones. Short rows (a small model's, in cache) go
 * dm at a time: one call and one reduction per dm rows instead of per row, and dm independent
 * chains (768 x 256 Q8_0 in cache, AVX2: 26.7 GOP/s row by row, 36 two rows at a time, 48.6
 * four at a time).
 */
void kq__tile_drive(const struct kq__tileset *ts, int64_t n, const void *W, size_t w_stride,
                    int64_t r0, int64_t r1, const void *act, size_t act_stride, int64_t nt,
                    float *y, int64_t y_stride)
{
    const uint8_t *w8 = W, *a8 = act;
    int64_t chunk = (int64_t)((512u << 10) / (act_stride ? act_stride : 1));
    chunk = chunk < ts->tm ? ts->tm : chunk - chunk % ts->tm;
    for (int64_t t0 = 0; t0 < nt; t0 += chunk) {
        const int64_t t1 = t0 + chunk < nt ? t0 + chunk : nt;
        int64_t r = r0;
        for (; nt == 1 && n <= KQ__DEC_SHORT_N && r + ts->dm <= r1; r += ts->dm)
            ts->dec(n, w8 + r * w_stride, w_stride, a8, act_stride, y + r, y_stride);
        for (; nt > 1 && r + ts->rm <= r1; r += ts->rm)
            drive_tokens(ts->full, ts->rows, ts->rows_k, ts->tm, n, w8 + r * w_stride, w_stride, a8,
                         act_stride, t0, t1, y + r, y_stride);
        for (; r < r1; r++)
            drive_tokens(ts->toks, ts->single, NULL, ts->tm, n, w8 + r * w_stride, w_stride, a8,
                         act_stride, t0, t1, y + r, y_stride);
    }
}

/* ================================ peak throughput =========================================== */

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Scalar stand-in: 8 independent f32 multiply-add chains (int8 has no faster scalar path). */
static int64_t peak_scalar(int64_t n_iter)
{
    volatile float seed = 0.999f;
    float a[8] = {0, 1, 2, 3, 4, 5, 6, 7}, u = seed, v = 1e-3f;
    for (int64_t i = 0; i < n_iter; i++)
        for (int k = 0; k < 8; k++)
            a[k] = a[k] * u + v;
    volatile float sink = a[0] + a[7];
    (void)sink;
    return n_iter * 8;
}

double kq_peak_ops(enum kq_type w, double seconds)
{
    const bool int8 = kq_act_type(w) != KQ_F32;
    const enum kq_isa isa = kq_isa_active();
    const int64_t n_iter = 1 << 16; /* about 1 ms a round on current cores */
    double best = 0.0, t_end = mono_now() + seconds;
    do {
        double t0 = mono_now();
        int64_t macs = isa == KQ_ISA_AVX512 ? kq__avx512_peak(int8, n_iter)
                       : isa == KQ_ISA_AVX2 && int8 && kq_avx2_vnni() ? kq__avx2_vnni_peak(n_iter)
                       : isa == KQ_ISA_AVX2                           ? kq__avx2_peak(int8, n_iter)
                                                                      : peak_scalar(n_iter);
        double rate = 2.0 * (double)macs / (mono_now() - t0);
        best = rate > best ? rate : best;
    } while (mono_now() < t_end);
    return best;
}

/* A matmul of the layout w is computed in (kq_repack_type), n inputs, 64 tokens, over about 192
 * KiB of weights (they stay in L2), repeated for about `seconds` in rounds; the best round. */
double kq_kernel_ops(enum kq_type w, int64_t n, double seconds)
{
    const int64_t nt = 64;
    if (!kq_type_supported(w) || n <= 0 || n % kq_block_elems(w) || n > (1 << 16))
        return 0.0;
    const enum kq_type x = kq_repack_type(w);
    const size_t rb = kq_row_bytes(w, n), xb = kq_row_bytes(x, n), ab = kq_act_row_bytes(x, n);
    int64_t rows = (int64_t)((192u << 10) / xb) / 16 * 16;
    rows = rows < 16 ? 16 : rows;
    float *f = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)(rows * nt));
    uint8_t *q = malloc(rb * (size_t)rows), *act = malloc(ab * (size_t)nt);
    uint8_t *wx = x == w ? NULL : malloc(xb * (size_t)rows); /* the repacked rows, if any */
    double best = 0.0;
    if (!f || !y || !q || !act || (x != w && !wx))
        goto out;
    uint32_t seed = 12345;
    for (int64_t r = 0; r < rows + nt; r++) { /* rows, then the tokens */
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            f[i] = (float)((int32_t)(seed >> 8) - (1 << 23)) / (float)(1 << 23);
        }
        if (r < rows)
            kq_quantize_row(w, f, q + (size_t)r * rb, n);
        else
            kq_quantize_act(x, f, act + (size_t)(r - rows) * ab, n);
    }
    if (wx && !kq_repack_rows(w, x, q, wx, n, rows))
        goto out;
    const uint8_t *wk = wx ? wx : q;
    const double t_end = mono_now() + seconds;
    do {
        const double t0 = mono_now();
        for (int k = 0; k < 4; k++)
            kq_matmul(x, n, wk, xb, 0, rows, act, ab, nt, y, rows);
        const double rate = 4.0 * 2.0 * (double)(rows * n * nt) / (mono_now() - t0);
        best = rate > best ? rate : best;
    } while (mono_now() < t_end);
out:
    free(f), free(y), free(q), free(wx), free(act);
    return best;
}

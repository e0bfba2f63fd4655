/*
 * kq_impl — internals shared by kq.c and its SIMD implementations (kq_avx2.c,
 * kq_avx512.c). Users include kq.h only.
 *
 * Holds the GGUF block structs (byte-exact: the static asserts pin every size), the Q4_K/Q5_K
 * scale unpacking every implementation needs, the row x token tiling driver that the SIMD
 * matmuls share, and the per-ISA entry points that kq.c dispatches to.
 *
 * Alignment: blocks holding an f16 need 2-byte alignment, Q8_K needs 4; GGUF data and the strides
 * of kq_row_bytes / kq_act_row_bytes keep that. Integer vectors are always loaded unaligned.
 */
#ifndef DELTAD_QUANT_IMPL_H
#define DELTAD_QUANT_IMPL_H

#include <string.h>

#include "kq.h" // defines: kq_type, kq_isa

#define KQ__QK 32    /* elements of a Q8_0 / Q4_0 block */
#define KQ__QK_K 256 /* elements of a K-quant super-block */

/* Q8_0: x[i] = d * qs[i]. 34 bytes. */
struct kq__q8_0 {
    uint16_t d; /* f16 */
    int8_t qs[32];
};
/* Q4_0: x[i] = d * ((qs[i] & 15) - 8), x[i + 16] = d * ((qs[i] >> 4) - 8). 18 bytes. */
struct kq__q4_0 {
    uint16_t d; /* f16 */
    uint8_t qs[16];
};
/*
 * Q4_K: 8 sub-blocks of 32 with 6-bit scale sc[j] and min m[j] (packed in `scales`, see
 * kq__unpack_scales). Group g (64 elements) takes its first 32 values from the low nibbles of
 * qs[32g .. 32g+31], the next 32 from the high nibbles: x = d * sc[j] * q - dmin * m[j]. 144 bytes.
 */
struct kq__q4_k {
    uint16_t d, dmin; /* f16 */
    uint8_t scales[12];
    uint8_t qs[128];
};
/* Q5_K: Q4_K plus a fifth bit: element l of sub-block j has bit 4 = (qh[l] >> j) & 1. 176 bytes. */
struct kq__q5_k {
    uint16_t d, dmin; /* f16 */
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
/*
 * Q6_K: 16 sub-blocks of 16 with int8 scales; x = d * scales[e / 16] * (q - 32), q 6 bits. Half h
 * (128 elements) uses ql[64h..], qh[32h..]: element l < 32 has low bits ql[l] & 15, 32 + l has
 * ql[32 + l] & 15, 64 + l has ql[l] >> 4, 96 + l has ql[32 + l] >> 4; their high 2 bits are bits
 * 0-1, 2-3, 4-5, 6-7 of qh[l]. 210 bytes.
 */
struct kq__q6_k {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d; /* f16 */
};
/* Q8_K (activations): x = d * qs[i]; bsums[j] = sum of qs[16j .. 16j+15]. 292 bytes. */
struct kq__q8_k {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
};

/* Room for one K-quant weight or activation block (the X layouts convert through it). */
union kq__kblock {
    struct kq__q4_k q4;
    struct kq__q5_k q5;
    struct kq__q6_k q6;
    struct kq__q8_k q8;
};

_Static_assert(sizeof(struct kq__q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(struct kq__q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(struct kq__q4_k) == 144, "q4_k layout");
_Static_assert(sizeof(struct kq__q5_k) == 176, "q5_k layout");
_Static_assert(sizeof(struct kq__q6_k) == 210, "q6_k layout");
_Static_assert(sizeof(struct kq__q8_k) == 292, "q8_k layout");

/*
 * Unpack the 12 scale bytes of Q4_K/Q5_K: the 8 six-bit scales into the bytes of *sc and the 8
 * mins into *m (byte j = sub-block j). Bytes 0-3 hold sc[0..3] in their low 6 bits and the top 2
 * bits of sc[4..7]; bytes 4-7 the same for the mins; bytes 8-11 the low nibbles of sc[4..7]
 * (low half) and m[4..7] (high half).
 */
static inline void kq__unpack_scales(const uint8_t s[12], uint64_t *sc, uint64_t *m)
{
    uint32_t w0, w1, w2;
    memcpy(&w0, s, 4);
    memcpy(&w1, s + 4, 4);
    memcpy(&w2, s + 8, 4);
    const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
    *sc = (uint64_t)(w0 & 0x3f3f3f3fu) | (uint64_t)sc_hi << 32;
    *m = (uint64_t)(w1 & 0x3f3f3f3fu) | (uint64_t)m_hi << 32;
}

/*
 * Tiling driver shared by the SIMD matmuls. A tile kernel computes rows [0, R) x tokens [0, T)
 * of its fixed shape: y[t * y_stride + r] = dot(W row r, activation row t), W and act pointing at
 * the tile's first row / token. A tile set has the full RM x TM kernel and the edge kernels.
 */
typedef void (*kq__tile_fn)(int64_t n, const uint8_t *W, size_t w_stride, const uint8_t *act,
                            size_t act_stride, float *y, int64_t y_stride);
struct kq__tileset {
    int rm, tm;         /* shape of `full` */
    kq__tile_fn full;   /* rm x tm */
    kq__tile_fn rows;   /* rm x 1 */
    kq__tile_fn toks;   /* 1 x tm */
    kq__tile_fn single; /* 1 x 1 */
    int dm;             /* rows of `dec` */
    kq__tile_fn dec;    /* dm x 1: decode of rows of at most KQ__DEC_SHORT_N elements */
    /* rm x k for k < tm (entry k; NULL: k calls of `rows`): the tokens after the last full
     * tile, each row block's levels unpacked once for all of them. Every output's arithmetic
     * is the same as in `rows` and `full` (a tile's outputs are independent chains). */
    kq__tile_fn rows_k[4];
};
#define KQ__DEC_SHORT_N 1024
/* Same contract as kq_matmul, driving the tiles of ts. */
void kq__tile_drive(const struct kq__tileset *ts, int64_t n, const void *W, size_t w_stride,
                    int64_t r0, int64_t r1, const void *act, size_t act_stride, int64_t nt,
                    float *y, int64_t y_stride);

/*
 * What a thread's packed-activation buffer holds (kq_matmul_tagged): the tag it was packed for
 * (0: nothing to reuse), the call's activation rows, stride, token count and row length, and
 * the packing's kind (the weight type whose packing it is). A kernel packs all nt tokens,
 * then sets the key to that call's (tag 0 unless they all fit the buffer at once).
 */
struct kq__pack_key {
    uint64_t tag;
    const void *act;
    size_t as;
    int64_t n, nt;
    int kind;
};

/* Whether a buffer with key k holds this call's packing: a nonzero tag, all else the same. */
static inline bool kq__pack_held(const struct kq__pack_key *k, uint64_t tag, const void *act,
                                 size_t as, int64_t n, int64_t nt, int kind)
{
    return tag && k->tag == tag && k->act == act && k->as == as && k->n == n && k->nt == nt &&
           k->kind == kind;
}

/*
 * Per-ISA entry points (kq_avx2.c, kq_avx512.c). The matmul has kq_matmul_tagged's contract
 * (tag: its act_tag) and returns false for a type it does not handle (kq.c then runs the
 * scalar reference). The act quantiser writes activation type kq_act_type(w); it must equal
 * the scalar one byte for byte.
 */
bool kq__avx2_matmul(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0,
                     int64_t r1, const void *act, size_t act_stride, int64_t nt, float *y,
                     int64_t y_stride, uint64_t tag);
bool kq__avx2_quantize_act(enum kq_type w, const float *x, void *dst, int64_t n);
/* The AVX2 matmul of the stored layouts Q8_0X, Q4_0X and Q4_KX (kq_avx2x.h), any nt, with
 * vpmaddubsw products (kq_avx2x_avx2.c) or AVX-VNNI's vpdpbusd (kq_avx2x_vnni.c; call only when
 * kq_avx2_vnni()): kq_matmul's contract, false for another type or an n it does not take. The
 * two give the same outputs bit for bit. */
bool kq__avx2x_matmul(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0,
                      int64_t r1, const void *act, size_t act_stride, int64_t nt, float *y,
                      int64_t y_stride, uint64_t tag);
bool kq__avx2x_vnni_matmul(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0,
                           int64_t r1, const void *act, size_t act_stride, int64_t nt, float *y,
                           int64_t y_stride, uint64_t tag);
bool kq__avx512_matmul(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0,
                       int64_t r1, const void *act, size_t act_stride, int64_t nt, float *y,
                       int64_t y_stride, uint64_t tag);
bool kq__avx512_quantize_act(enum kq_type w, const float *x, void *dst, int64_t n);
/* The matmul of Q4_KX / Q5_KX / Q6_KX weights on AVX-512 (kq_avx512_k.c), any nt; false for
 * any other type or an n it does not take (0, or past 65536 elements). */
bool kq__avx512_kx_matmul(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0,
                          int64_t r1, const void *act, size_t act_stride, int64_t nt, float *y,
                          int64_t y_stride, uint64_t tag);

/*
 * Peak loops for kq_peak_ops: n_iter rounds of independent accumulator chains (24 on AVX-512,
 * 12 on AVX2, 10 for AVX-VNNI: enough to cover latency x throughput) of the inner product
 * instruction (int8: vpdpbusd / vpmaddubsw + vpmaddwd; f32: FMA), in registers: the loops are
 * unrolled whole (UNROLL_FULL) so that no accumulator lives in memory — with a partial unroll
 * they did, and the peak read half the instruction's rate. Return the multiply-adds done.
 */
int64_t kq__avx512_peak(bool int8, int64_t n_iter);
int64_t kq__avx2_peak(bool int8, int64_t n_iter);
int64_t kq__avx2_vnni_peak(int64_t n_iter); /* int8 with vpdpbusd ymm (AVX-VNNI) */

#endif

/*
 * kq — tensor types of GGUF (exact block layouts), their dequantisation, reference
 * quantisers, and the dot-product / matmul kernels the CPU device runs.
 *
 * Layer: kernels. Raw pointers and sizes only; no engine struct crosses this boundary.
 *
 * Activations: every weight type has an activation type that its dot product consumes
 * (kq_act_type): F32 for F32/F16/BF16 weights, Q8_0 blocks for Q8_0/Q4_0, Q8_K blocks (f32 scale,
 * 256 int8, 16 int16 block sums) for the K-quants. Callers quantise an activation row once with
 * kq_quantize_act and reuse it against every weight row.
 *
 * Implementations: a scalar reference for everything, plus AVX2 and AVX-512 versions selected
 * at run time from cpuid (kq_isa_active); tests force each ISA with kq_isa_force and compare
 * against the scalar reference.
 *
 * Thread safety: all functions are pure except kq_isa_force (call before threads start); the
 * matmuls' thread-local scratch (kq_matmul_tagged) never changes an output.
 */
#ifndef DELTAD_QUANT_H
#define DELTAD_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/ktype.h" // defines: enum kq_type

enum kq_isa { KQ_ISA_SCALAR = 0, KQ_ISA_AVX2 = 1, KQ_ISA_AVX512 = 2 };

/* ---- type facts --------------------------------------------------------------------------- */
bool kq_type_supported(uint32_t type);   /* weight types the kernels compute with */
const char *kq_type_name(uint32_t type); /* "q8_0", ...; "?" if unknown */
int kq_block_elems(enum kq_type t);      /* 1 for F32/F16/BF16, 32 for Q4_0/Q8_0, 256 for K */
size_t kq_block_bytes(enum kq_type t);
size_t kq_row_bytes(enum kq_type t, int64_t n); /* n must be a multiple of kq_block_elems */

/* ---- conversion --------------------------------------------------------------------------- */
float kq_f16_to_f32(uint16_t h);
uint16_t kq_f32_to_f16(float f);
float kq_bf16_to_f32(uint16_t h);
uint16_t kq_f32_to_bf16(float f); /* round to nearest even */

/* dst[0..n) = dequantised src row. */
void kq_dequantize_row(enum kq_type t, const void *src, float *dst, int64_t n);
/* Reference quantiser (deterministic) for every weight type and for Q8_K. */
void kq_quantize_row(enum kq_type t, const float *src, void *dst, int64_t n);

/* ---- repacked layouts -------------------------------------------------------------------- */
/*
 * The layout the active ISA's kernels compute fastest for weights of type t: KQ_Q8_0X / KQ_Q4_0X
 * / KQ_Q4_KX / KQ_Q5_KX / KQ_Q6_KX for Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K on AVX-512, KQ_Q8_0X /
 * KQ_Q4_0X / KQ_Q4_KX for Q8_0 / Q4_0 / Q4_K on AVX2, t itself otherwise. Every X layout keeps
 * the bytes per block and a row's size.
 *
 * Q8_0X and Q4_0X: a row of nb blocks holds the nb f16
 * block scales first (block b's at byte 2 b), then the quants (32 bytes a block for Q8_0X, 16
 * for Q4_0X) in groups of 16 blocks, the last group holding the nb % 16 blocks left if any:
 * group g starts at 2 nb + 16 g * (quant bytes a block), and in a group of m blocks word k (4
 * bytes) of block l lies at 4 m k + 4 l. Q8_0X stores its levels + 128 (unsigned), Q4_0X its
 * nibble bytes as they are. A row of 64 blocks (n = 2048) thus has its scales on two cache
 * lines and every group's quants on whole lines. The activation is plain Q8_0. The AVX-512
 * and AVX2 matmuls read these rows as stored for any token count and any n (AVX2 reads a group
 * as two halves of 8 blocks, 32 bytes a step), where the plain types' batched matmul repacks
 * the rows every call.
 *
 * The K-quant X layouts keep every super-block's own bytes (d, dmin, scales) and reorder only
 * its levels, so that 4 consecutive levels of one sub-block share a 4-byte word and word j of
 * every step belongs to sub-block j: one vpdpbusd per step gives each sub-block's partial sum
 * in its own int32 lane. Element 4s + i of sub-block j ("step s"):
 *   Q4_KX  (sub-blocks of 32, 8 steps) low 4 bits in qs[32 (s / 2) + 4 j + i], the low
 *          nibble for even s, the high one for odd s;
 *   Q5_KX  the same in qs, and bit 4 in bit s of qh[4 j + i];
 *   Q6_KX  (sub-blocks of 16, 4 steps) low 4 bits in ql[64 (s / 2) + 4 j + i], low nibble for
 *          even s, high for odd; bits 4-5 in bits 2s, 2s + 1 of qh[4 j + i].
 * Their activation: Q8_KX for Q4_KX and Q5_KX (Q8_K with its levels reordered the same way,
 * element 4s + i of sub-block j at qs[32 s + 4 j + i]), plain Q8_K for Q6_KX.
 * Every function here accepts the X types; the results equal the plain type's on the same data.
 */
enum kq_type kq_repack_type(enum kq_type t);
/* Rows of src (type `from`) rewritten as type `to` in dst (same size): from == to copies, and
 * (Q4_K, Q4_KX), (Q5_K, Q5_KX), (Q6_K, Q6_KX), (Q8_0, Q8_0X), (Q4_0, Q4_0X) either way convert;
 * false (nothing written) for any other pair. The X layouts are whole-row formats: dequantise and
 * dot whole rows only. n elements per row, rows kq_row_bytes apart. */
bool kq_repack_rows(enum kq_type from, enum kq_type to, const void *src, void *dst, int64_t n,
                    int64_t rows);

/* ---- activations -------------------------------------------------------------------------- */
enum kq_type kq_act_type(enum kq_type w);
size_t kq_act_row_bytes(enum kq_type w, int64_t n);
/* Quantise one activation row x[0..n) into the activation type of weight type w. */
void kq_quantize_act(enum kq_type w, const float *x, void *dst, int64_t n);

/* ---- compute ------------------------------------------------------------------------------ */
/* Dot product of one weight row (type w, n elements) with one activation row of kq_act_type(w). */
float kq_dot(enum kq_type w, int64_t n, const void *wrow, const void *act);

/*
 * Blocked matmul: for rows r in [r0, r1) and tokens t in [0, nt):
 *   y[t * y_stride + r] = dot(W row r, activation row t)
 * W rows are w_stride bytes apart (normally kq_row_bytes(w, n)); activation rows act_stride
 * bytes apart (normally kq_act_row_bytes(w, n)). nt == 1 is the decode (matrix-vector) path.
 * The caller (the CPU device) splits [0, rows) across threads.
 *
 * Which kernel runs (and so the float summation order of an output) depends on the type, nt
 * and, for the tile kernels, on a row's place in its block of 4 from r0 and a token's place in
 * its block of 4: decode (nt == 1) has its own kernels; nt >= 2 of Q8_0 / Q4_0 (and on AVX2
 * Q4_K) runs a packed kernel whose every output depends only on its row and token; Q8_0X /
 * Q4_0X (AVX-512, AVX2), Q4_KX (AVX-512, AVX2) and Q5_KX / Q6_KX (AVX-512) run one arithmetic
 * for every nt, so their outputs never depend on nt (nor, on AVX2, on AVX-VNNI). The
 * differences are rounding-level (all are within 2e-6 of the scalar reference, tested).
 */
void kq_matmul(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0, int64_t r1,
               const void *act, size_t act_stride, int64_t nt, float *y, int64_t y_stride);

/*
 * kq_matmul with an activation tag. The SIMD kernels of the stored layouts (Q8_0X, Q4_0X on
 * AVX-512 and AVX2, Q4_KX, Q5_KX, Q6_KX on AVX-512) rewrite the activation rows into their own
 * order in a thread-local buffer on every call; a caller that runs one activation against many
 * row ranges (the CPU device's chunks of a dispatch) tags it so that each thread does that once.
 * The promise: two calls with the same nonzero act_tag pass the same act, act_stride, nt and n,
 * and the rows' bytes do not change in between. A thread then reuses what its buffer still
 * holds from an earlier call with that tag (and the same act, act_stride, nt, n and weight
 * type's packing, all checked), when all nt tokens fit the buffer at once; any other call
 * replaces it. act_tag 0: no reuse, kq_matmul itself. Outputs are the same bits either way.
 * Tags come from kq_act_tags, so that no two users of the kernels share one.
 */
void kq_matmul_tagged(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0,
                      int64_t r1, const void *act, size_t act_stride, int64_t nt, float *y,
                      int64_t y_stride, uint64_t act_tag);
/* count fresh activation tags, first .. first + count - 1, none handed out before in this
 * process; returns first (nonzero). Any thread. */
uint64_t kq_act_tags(int64_t count);

/* ---- peak throughput --------------------------------------------------------------------- */
/*
 * In-cache peak of the inner-product instruction that the matmul of weight type w runs on, on
 * the calling thread: int8 multiply-adds (vpdpbusd on AVX-512 and on AVX2 with AVX-VNNI,
 * vpmaddubsw + vpmaddwd on AVX2 without) for the Q8_0 / Q8_K activations,
 * f32 FMAs for the F32 ones. Runs about `seconds` in short rounds and keeps the best round, so a
 * busy machine reads low less often. Returns operations per second (a multiply-add counts 2).
 */
double kq_peak_ops(enum kq_type w, double seconds);

/* What the kernels reach, not the instruction: the best rate (operations per second, 2 per
 * multiply-add) of kq_matmul on the calling thread for weights of type w (in the layout it is
 * computed in, kq_repack_type) with n inputs and 64 tokens, weights and activations in cache, over
 * about `seconds`. The block scales' float work and the loads come on top of the multiply-adds,
 * so this is below kq_peak_ops; 0 where n does not fit w's blocks. */
double kq_kernel_ops(enum kq_type w, int64_t n, double seconds);

/* ---- ISA selection ------------------------------------------------------------------------ */
enum kq_isa kq_isa_best(void);   /* what this CPU supports */
enum kq_isa kq_isa_active(void); /* what is in use */
/* Force an ISA (clamped to kq_isa_best). Returns the ISA now active. */
enum kq_isa kq_isa_force(enum kq_isa isa);
const char *kq_isa_name(enum kq_isa isa);
/*
 * AVX-VNNI (vpdpbusd on 256-bit registers, cpuid leaf 7.1 EAX bit 4) within the AVX2 ISA: the
 * AVX2 kernels of the stored layouts use it where the CPU has it, unless DELTAD_ISA is
 * "avx2-novnni" (which also selects AVX2) or kq_avx2_vnni_force turned it off. Outputs are the
 * same bit for bit either way (exact integer sums); only the speed differs.
 */
bool kq_avx2_vnni(void); /* whether the AVX2 kernels use AVX-VNNI now */
/* Turn AVX-VNNI on (only where the CPU has it) or off; returns the state now. For tests and
 * start-up only, like kq_isa_force. */
bool kq_avx2_vnni_force(bool on);

#endif

/*
 * ktype — the tensor type ids (ggml's numbering, plus the CPU kernels' internal layouts) that
 * both kernel families name: kernels/cpu (kq.h, which says what each layout is) and
 * kernels/cuda (kcuda.h). Only the enum lives here, so neither family includes the other.
 *
 * Layer: kernels. No code.
 */
#ifndef DELTAD_KTYPE_H
#define DELTAD_KTYPE_H

/* ggml type ids. */
enum kq_type {
    KQ_F32 = 0,
    KQ_F16 = 1,
    KQ_Q4_0 = 2,
    KQ_Q8_0 = 8,
    KQ_Q4_K = 12,
    KQ_Q5_K = 13,
    KQ_Q6_K = 14,
    KQ_Q8_K = 15, /* activation-only type */
    KQ_BF16 = 30,
    /* Internal layouts (never in a file; kq_type_supported is false for them). */
    KQ_Q4_KX = 1012, /* Q4_K with its levels transposed: see kq_repack_type */
    KQ_Q5_KX = 1013, /* Q5_K with its levels transposed like Q4_KX: see kq_repack_type */
    KQ_Q6_KX = 1014, /* Q6_K with its levels transposed per 16-element sub-block: see there */
    KQ_Q8_KX = 1015, /* activation of Q4_KX, Q5_KX: Q8_K with its levels transposed the same way */
    KQ_Q4_0X = 1002, /* Q4_0 in groups of 16 blocks, levels interleaved: see kq_repack_type */
    KQ_Q8_0X = 1008, /* Q8_0 in groups of 16 blocks, levels interleaved: see kq_repack_type */
};

#endif

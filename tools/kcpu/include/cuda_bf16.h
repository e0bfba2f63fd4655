/*
 * cuda_bf16.h (kcpu) — __nv_bfloat16 for the kcpu emulation (C++ only): storage plus the
 * conversions the kernels use (round to nearest even, NaN kept quiet).
 */
#ifndef KCPU_CUDA_BF16_H
#define KCPU_CUDA_BF16_H

#ifdef __cplusplus
#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t __x;
};

inline float __bfloat162float(__nv_bfloat16 h)
{
    const uint32_t u = (uint32_t)h.__x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return __nv_bfloat16{(uint16_t)((u >> 16) | 0x40u)};
    return __nv_bfloat16{(uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

inline __nv_bfloat16 __float2bfloat16(float f)
{
    return __float2bfloat16_rn(f);
}

#endif
#endif

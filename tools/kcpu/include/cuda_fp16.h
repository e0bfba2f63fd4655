/*
 * cuda_fp16.h (kcpu) — __half for the kcpu emulation (C++ only): storage plus the conversions
 * the kernels use, rounding to nearest even like the hardware.
 */
#ifndef KCPU_CUDA_FP16_H
#define KCPU_CUDA_FP16_H

#ifdef __cplusplus
#include <stdint.h>
#include <string.h>

struct __half {
    uint16_t __x;
};

inline __half __ushort_as_half(unsigned short u)
{
    return __half{u};
}

inline unsigned short __half_as_ushort(__half h)
{
    return h.__x;
}

inline float __half2float(__half h)
{
    const uint32_t s = (uint32_t)(h.__x & 0x8000u) << 16, e = (h.__x >> 10) & 31, m = h.__x & 1023;
    uint32_t u;
    if (e == 31) /* inf / NaN */
        u = s | 0x7f800000u | m << 13;
    else if (e != 0)
        u = s | (e + 112) << 23 | m << 13;
    else if (m == 0)
        u = s;
    else { /* subnormal: normalise */
        int sh = 0;
        uint32_t mm = m;
        while (!(mm & 1024))
            mm <<= 1, sh++;
        u = s | (uint32_t)(113 - sh) << 23 | (mm & 1023) << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline __half __float2half_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
        return __half{(uint16_t)(s | 0x7e00u | (a >> 13 & 0x3ffu))};
    if (a >= 0x477ff000u) /* rounds to or beyond 65520: inf */
        return __half{(uint16_t)(s | 0x7c00u)};
    if (a >= 0x38800000u) {
        /* normal half: rebias the exponent 127 -> 15, drop 13 bits rounding to nearest even */
        const uint32_t r = a - 0x38000000u;
        const uint32_t h = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
        return __half{(uint16_t)(s | h)};
    }
    if (a < 0x33000000u) /* below half the smallest subnormal: zero */
        return __half{s};
    /* subnormal half: value = m * 2^-24 */
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    const int shift = (int)(126 - e); /* bits to drop from the 24-bit significand: 14 .. 24 */
    const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    const uint32_t h = q + (rem > half || (rem == half && (q & 1u)));
    return __half{(uint16_t)(s | h)};
}

inline __half __float2half(float f)
{
    return __float2half_rn(f);
}

#endif
#endif

/*
 * simd_avx2 — the inline helpers the AVX2 kernel files share (kop_avx2.c, kq_avx2.c): simd.h's
 * INLINE and UNROLL, and the horizontal sum / max of 8 float lanes.
 * Include only from files built with the Makefile's AVX2_FLAGS.
 */
#ifndef DELTAD_SIMD_AVX2_H
#define DELTAD_SIMD_AVX2_H

#include "simd.h" // defines: INLINE, UNROLL

#include <immintrin.h>

/* Horizontal sum / max of the 8 lanes. */
INLINE float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

INLINE float hmax_ps(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

#endif

/*
 * simd — the spellings every SIMD kernel file shares (kop_avx2.c, kop_avx512.c, kq_avx2.c,
 * kq_avx512.c): always-inline helpers and fully unrolled loops over tile rows / tokens, so
 * the accumulators live in registers. A file that wants a deeper unroll than 8 defines
 * SIMD_UNROLL_MAX before including this header.
 */
#ifndef DELTAD_SIMD_H
#define DELTAD_SIMD_H

#define INLINE static inline __attribute__((always_inline))

#ifndef SIMD_UNROLL_MAX
#define SIMD_UNROLL_MAX 8
#endif
/* clang needs its own spelling: it accepts the GCC one but then keeps the loops. */
#ifdef __clang__
#define UNROLL _Pragma("unroll")
#else
#define SIMD_PRAGMA(x) _Pragma(#x)
#define SIMD_UNROLL_BY(n) SIMD_PRAGMA(GCC unroll n)
#define UNROLL SIMD_UNROLL_BY(SIMD_UNROLL_MAX)
#endif
/* UNROLL_FULL(n): unroll a loop of n iterations (a literal) whole, past SIMD_UNROLL_MAX: the
 * peak loops' accumulator arrays stay in registers only when every index is a constant. */
#ifdef __clang__
#define UNROLL_FULL(n) _Pragma("unroll")
#else
#define UNROLL_FULL(n) SIMD_UNROLL_BY(n)
#endif

#endif

/*
 * kq_avx2x_vnni — the stored-layout matmul of kq_avx2x.h with AVX-VNNI products (vpdpbusd on
 * ymm), and the AVX2 int8 peak loop on that instruction. Built with AVX2_FLAGS plus -mavxvnni
 * (the Makefile's rule for *_vnni.c); kq_avx2.c and kq.c call into it only when the CPU has
 * AVX-VNNI and it is not turned off (kq_avx2_vnni).
 *
 * Threads: pure functions (per-thread scratch buffers).
 */
#define KQX_VNNI 1
#define KQX_ENTRY kq__avx2x_vnni_matmul

#include "kq_avx2x.h" // defines: kq__avx2x_vnni_matmul

/* kq__avx2_peak's int8 loop with vpdpbusd: 10 independent chains, each its own accumulator
 * (12 leave too few of the 16 ymm registers: the compiler spills, and the loop reads ~20% low). */
int64_t kq__avx2_vnni_peak(int64_t n_iter)
{
    __m256i ia[10];
    UNROLL_FULL(10) for (int k = 0; k < 10; k++) ia[k] = _mm256_set1_epi32(k);
    __m256i x = _mm256_set1_epi8(3), z = _mm256_set1_epi8(-5);
    for (int64_t i = 0; i < n_iter; i++) {
        UNROLL_FULL(10) for (int k = 0; k < 10; k++) ia[k] = _mm256_dpbusd_avx_epi32(ia[k], x, z);
        __asm__ volatile("" : "+x"(x), "+x"(z));
    }
    volatile int sink = 0;
    UNROLL_FULL(10) for (int k = 0; k < 10; k++) sink += _mm256_extract_epi32(ia[k], 0);
    (void)sink;
    return n_iter * 10 * 32;
}

/*
 * kq_avx2x_avx2 — the stored-layout matmul of kq_avx2x.h with vpmaddubsw + vpmaddwd products,
 * for every AVX2 CPU. Built with the Makefile's AVX2_FLAGS; kq_avx2.c calls kq__avx2x_matmul
 * when AVX-VNNI is off (kq_avx2_vnni).
 *
 * Threads: pure functions (per-thread scratch buffers).
 */
#define KQX_VNNI 0
#define KQX_ENTRY kq__avx2x_matmul

#include "kq_avx2x.h" // defines: kq__avx2x_matmul

/*
 * kop_impl — the AVX-512 (kop_avx512.c) and AVX2 (kop_avx2.c) versions of the ops that kop.c
 * dispatches to. Users
 * include kop.h only. Each has the contract of the kop.h function of the same name; callers
 * (kop.c) have checked the shape conditions noted here.
 */
#ifndef DELTAD_OPS_IMPL_H
#define DELTAD_OPS_IMPL_H

#include <stdint.h>

void kop__avx512_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);
void kop__avx512_l2norm(float *x, int64_t n, float eps);
void kop__avx512_rmsnorm_gate(float *x, const float *w, const float *z, int64_t n, float eps);
void kop__avx512_swiglu(float *g, const float *u, int64_t n);
void kop__avx512_mul_sigmoid(float *x, const float *g, int64_t n);
void kop__avx512_axpy(float *y, float a, const float *x, int64_t n);
void kop__avx512_add(float *y, const float *x, int64_t n);
/* d % 16 == 0 */
void kop__avx512_attn_group(const float *q, int64_t q_stride, int64_t n_q, const float *k,
                            const float *v, int64_t kv_stride, int64_t n_kv, int64_t d, float scale,
                            float *scratch, float *out, int64_t out_stride);
void kop__avx512_conv1d_silu(const float *state, const float *u, const float *w, int64_t T,
                             int64_t C, int64_t K, int64_t c0, int64_t c1, float *y);
/* S % 16 == 0 */
void kop__avx512_gdn_step(float *M, const float *M_in, const float *q, const float *k,
                          const float *v, float decay, float beta, float scale, int64_t S,
                          float *out);

/* AVX2 + FMA */
void kop__avx2_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);
void kop__avx2_l2norm(float *x, int64_t n, float eps);
void kop__avx2_rmsnorm_gate(float *x, const float *w, const float *z, int64_t n, float eps);
void kop__avx2_swiglu(float *g, const float *u, int64_t n);
void kop__avx2_mul_sigmoid(float *x, const float *g, int64_t n);
void kop__avx2_axpy(float *y, float a, const float *x, int64_t n);
void kop__avx2_add(float *y, const float *x, int64_t n);
void kop__avx2_conv1d_silu(const float *state, const float *u, const float *w, int64_t T, int64_t C,
                           int64_t K, int64_t c0, int64_t c1, float *y);
/* d % 8 == 0, d <= 512 */
void kop__avx2_attn_group(const float *q, int64_t q_stride, int64_t n_q, const float *k,
                          const float *v, int64_t kv_stride, int64_t n_kv, int64_t d, float scale,
                          float *scratch, float *out, int64_t out_stride);
/* S % 8 == 0 */
void kop__avx2_gdn_step(float *M, const float *M_in, const float *q, const float *k, const float *v,
                        float decay, float beta, float scale, int64_t S, float *out);

#endif

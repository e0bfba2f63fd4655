/*
 * quant_avx2 — placeholder while the SIMD kernels are written: declines every type, so
 * quant.c runs the scalar reference.
 */
#include "quant_impl.h" // defines: kq__avx2_matmul, kq__avx2_quantize_act

bool kq__avx2_matmul(enum kq_type w, int64_t n, const void *W, size_t w_stride, int64_t r0,
                     int64_t r1, const void *act, size_t act_stride, int64_t nt, float *y,
                     int64_t y_stride)
{
    return false;
}

bool kq__avx2_quantize_act(enum kq_type w, const float *x, void *dst, int64_t n)
{
    return false;
}

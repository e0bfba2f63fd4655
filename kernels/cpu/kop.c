/*
 * kop — f32 leaf operations of the forward pass (see kop.h for the contracts): the scalar
 * reference of every op, and the dispatch to the AVX-512 (kop_avx512.c) and AVX2 (kop_avx2.c)
 * versions.
 *
 * Numerics follow docs/models.md section 5 in f32 with the sequential order of the gated delta
 * rule that llama.cpp runs (decay, read, delta, update, read-out). Accumulations that feed a
 * normalisation use double to keep batch and token-by-token results within 1e-6.
 *
 * Dispatch: each public kop_* tests kq_isa_active() once per call (a relaxed atomic load) and
 * either runs the AVX-512 (or AVX2) version or falls through to the reference below it.
 */
#include "kop.h" // defines: kop_*

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kop_impl.h" // defines: kop__avx512_*, kop__avx2_*
#include "kq.h"       // defines: kq_isa_active

static bool use_avx512(void)
{
    return kq_isa_active() == KQ_ISA_AVX512;
}

static bool use_avx2(void)
{
    return kq_isa_active() == KQ_ISA_AVX2;
}

void kop_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps)
{
    if (use_avx512()) {
        kop__avx512_rmsnorm(x, w, y, n, eps);
        return;
    }
    if (use_avx2()) {
        kop__avx2_rmsnorm(x, w, y, n, eps);
        return;
    }
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    const float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
    if (w) {
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * inv * w[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * inv;
    }
}

void kop_l2norm(float *x, int64_t n, float eps)
{
    if (use_avx512()) {
        kop__avx512_l2norm(x, n, eps);
        return;
    }
    if (use_avx2()) {
        kop__avx2_l2norm(x, n, eps);
        return;
    }
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double nrm = sqrt(ss);
    const float inv = (float)(1.0 / (nrm > eps ? nrm : eps));
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

void kop_rmsnorm_gate(float *x, const float *w, const float *z, int64_t n, float eps)
{
    if (use_avx512()) {
        kop__avx512_rmsnorm_gate(x, w, z, n, eps);
        return;
    }
    if (use_avx2()) {
        kop__avx2_rmsnorm_gate(x, w, z, n, eps);
        return;
    }
    kop_rmsnorm(x, w, x, n, eps);
    for (int64_t i = 0; i < n; i++)
        x[i] *= kop_silu(z[i]);
}

void kop_rope_table(int64_t n_rot, int64_t pos, float base, float *cs)
{
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        /* theta computed in double: positions up to 10^6 keep ~1e-9 relative phase error */
        double theta = (double)pos * pow((double)base, -2.0 * (double)i / (double)n_rot);
        cs[i] = (float)cos(theta);
        cs[half + i] = (float)sin(theta);
    }
}

void kop_rope_neox_cs(float *x, int64_t n_rot, const float *cs)
{
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        float c = cs[i], s = cs[half + i];
        float a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = a * s + b * c;
    }
}

void kop_rope_neox(float *x, int64_t n_rot, int64_t pos, float base)
{
    float cs[512]; /* n_rot <= head_dim <= 512 is checked at model load */
    kop_rope_table(n_rot, pos, base, cs);
    kop_rope_neox_cs(x, n_rot, cs);
}

void kop_swiglu(float *restrict g, const float *restrict u, int64_t n)
{
    if (use_avx512()) {
        kop__avx512_swiglu(g, u, n);
        return;
    }
    if (use_avx2()) {
        kop__avx2_swiglu(g, u, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        g[i] = kop_silu(g[i]) * u[i];
}

void kop_mul_sigmoid(float *restrict x, const float *restrict g, int64_t n)
{
    if (use_avx512()) {
        kop__avx512_mul_sigmoid(x, g, n);
        return;
    }
    if (use_avx2()) {
        kop__avx2_mul_sigmoid(x, g, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        x[i] *= kop_sigmoid(g[i]);
}

void kop_axpy(float *restrict y, float a, const float *restrict x, int64_t n)
{
    if (use_avx512()) {
        kop__avx512_axpy(y, a, x, n);
        return;
    }
    if (use_avx2()) {
        kop__avx2_axpy(y, a, x, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

void kop_add(float *restrict y, const float *restrict x, int64_t n)
{
    if (use_avx512()) {
        kop__avx512_add(y, x, n);
        return;
    }
    if (use_avx2()) {
        kop__avx2_add(y, x, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

void kop_moe_route(const float *lg, int64_t Nx, int64_t k, int32_t *sel, float *w)
{
    float mx = lg[0];
    for (int64_t e = 1; e < Nx; e++)
        mx = lg[e] > mx ? lg[e] : mx;
    double sum = 0.0, wsum = 0.0;
    for (int64_t e = 0; e < Nx; e++)
        sum += exp((double)lg[e] - mx);
    for (int64_t i = 0; i < k; i++) {
        int64_t best = -1;
        for (int64_t e = 0; e < Nx; e++) {
            bool taken = false;
            for (int64_t j = 0; j < i; j++)
                taken |= sel[j] == e;
            if (!taken && (best < 0 || lg[e] > lg[best]))
                best = e;
        }
        sel[i] = (int32_t)best;
        w[i] = (float)(exp((double)lg[best] - mx) / sum);
        wsum += w[i];
    }
    const float denom = (float)(wsum > 6.1e-5 ? wsum : 6.1e-5);
    for (int64_t i = 0; i < k; i++)
        w[i] /= denom;
    for (int64_t i = 1; i < k; i++) /* insertion sort by expert, weights alongside */
        for (int64_t j = i; j > 0 && sel[j - 1] > sel[j]; j--) {
            const int32_t te = sel[j];
            const float tw = w[j];
            sel[j] = sel[j - 1], w[j] = w[j - 1];
            sel[j - 1] = te, w[j - 1] = tw;
        }
}

static float dotf(const float *restrict a, const float *restrict b, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (; i < n; i++)
        s += a[i] * b[i];
    for (int j = 0; j < 8; j++)
        s += acc[j];
    return s;
}

void kop_attn_head(const float *q, const float *k, const float *v, int64_t kv_stride, int64_t n_kv,
                   int64_t d, float scale, float *scratch, float *out)
{
    if (use_avx512() && d % 16 == 0) {
        kop__avx512_attn_group(q, 0, 1, k, v, kv_stride, n_kv, d, scale, scratch, out, 0);
        return;
    }
    if (use_avx2() && d % 8 == 0) {
        kop__avx2_attn_group(q, 0, 1, k, v, kv_stride, n_kv, d, scale, scratch, out, 0);
        return;
    }
    float mx = -INFINITY;
    for (int64_t s = 0; s < n_kv; s++) {
        scratch[s] = dotf(q, k + s * kv_stride, d) * scale;
        if (scratch[s] > mx)
            mx = scratch[s];
    }
    double sum = 0.0;
    for (int64_t s = 0; s < n_kv; s++) {
        scratch[s] = expf(scratch[s] - mx);
        sum += scratch[s];
    }
    const float inv = (float)(1.0 / sum);
    memset(out, 0, (size_t)d * sizeof *out);
    for (int64_t s = 0; s < n_kv; s++)
        kop_axpy(out, scratch[s] * inv, v + s * kv_stride, d);
}

void kop_attn_group(const float *q, int64_t q_stride, int64_t n_q, const float *k, const float *v,
                    int64_t kv_stride, int64_t n_kv, int64_t d, float scale, float *scratch,
                    float *out, int64_t out_stride)
{
    if (use_avx512() && d % 16 == 0 && n_q <= 64) {
        kop__avx512_attn_group(q, q_stride, n_q, k, v, kv_stride, n_kv, d, scale, scratch, out,
                               out_stride);
        return;
    }
    if (use_avx2() && d % 8 == 0) {
        kop__avx2_attn_group(q, q_stride, n_q, k, v, kv_stride, n_kv, d, scale, scratch, out,
                             out_stride);
        return;
    }
    for (int64_t g = 0; g < n_q; g++)
        kop_attn_head(q + g * q_stride, k, v, kv_stride, n_kv, d, scale, scratch,
                      out + g * out_stride);
}

/* Input row t of the virtual matrix [state ; u] (t < K-1 reads the state). */
static inline const float *conv_row(const float *state, const float *u, int64_t C, int64_t K,
                                    int64_t t)
{
    return t < K - 1 ? state + t * C : u + (t - (K - 1)) * C;
}

void kop_conv1d_silu(const float *state, const float *u, const float *w, int64_t T, int64_t C,
                     int64_t K, int64_t c0, int64_t c1, float *y)
{
    if (use_avx512() && K <= 16) {
        kop__avx512_conv1d_silu(state, u, w, T, C, K, c0, c1, y);
        return;
    }
    if (use_avx2() && K <= 16) {
        kop__avx2_conv1d_silu(state, u, w, T, C, K, c0, c1, y);
        return;
    }
    for (int64_t t = 0; t < T; t++) {
        float *yt = y + t * C;
        for (int64_t c = c0; c < c1; c++)
            yt[c] = 0.0f;
        /* output t sees virtual rows t .. t+K-1; tap j multiplies row t+j */
        for (int64_t j = 0; j < K; j++) {
            const float *row = conv_row(state, u, C, K, t + j);
            for (int64_t c = c0; c < c1; c++)
                yt[c] += w[c * K + j] * row[c];
        }
        for (int64_t c = c0; c < c1; c++)
            yt[c] = kop_silu(yt[c]);
    }
}

void kop_conv_state_window_cols(const float *state, const float *u, int64_t T, int64_t C, int64_t K,
                                int64_t back, int64_t c0, int64_t c1, float *dst)
{
    /* The virtual matrix has K-1+T rows; the window of K-1 rows ending `back` rows before the
     * end starts at row T - back (clamped at 0). Source row start + r >= r, so copying oldest
     * first is safe even when dst == state (a shift towards the front). */
    int64_t start = T - back;
    if (start < 0)
        start = 0;
    for (int64_t r = 0; r < K - 1; r++) {
        const float *src = conv_row(state, u, C, K, start + r);
        if (src != dst + r * C)
            memmove(dst + r * C + c0, src + c0, (size_t)(c1 - c0) * sizeof *dst);
    }
}

void kop_conv_state_window(const float *state, const float *u, int64_t T, int64_t C, int64_t K,
                           int64_t back, float *dst)
{
    kop_conv_state_window_cols(state, u, T, C, K, back, 0, C, dst);
}

void kop_gdn_step(float *M, const float *M_in, const float *restrict q, const float *restrict k,
                  const float *restrict v, float decay, float beta, float scale, int64_t S,
                  float *restrict out)
{
    if (use_avx512() && S % 16 == 0) {
        kop__avx512_gdn_step(M, M_in, q, k, v, decay, beta, scale, S, out);
        return;
    }
    if (use_avx2() && S % 8 == 0) {
        kop__avx2_gdn_step(M, M_in, q, k, v, decay, beta, scale, S, out);
        return;
    }
    float kM[256], delta[256]; /* S <= 256 is checked at model load */
    for (int64_t j = 0; j < S; j++)
        kM[j] = 0.0f;
    /* pass 1: decay the state and read M^T k */
    for (int64_t i = 0; i < S; i++) {
        float *row = M + i * S;
        const float *in = M_in + i * S;
        const float ki = k[i];
        for (int64_t j = 0; j < S; j++) {
            row[j] = in[j] * decay;
            kM[j] += ki * row[j];
        }
    }
    for (int64_t j = 0; j < S; j++) {
        delta[j] = beta * (v[j] - kM[j]);
        out[j] = 0.0f;
    }
    /* pass 2: rank-1 update, then read M^T q with the updated state */
    for (int64_t i = 0; i < S; i++) {
        float *row = M + i * S;
        const float ki = k[i], qi = q[i];
        for (int64_t j = 0; j < S; j++) {
            row[j] += ki * delta[j];
            out[j] += qi * row[j];
        }
    }
    for (int64_t j = 0; j < S; j++)
        out[j] *= scale;
}

void kop_argmax_rows(const float *x, int64_t rows, int64_t n, int32_t *out, float *mass)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            best = xr[i] > xr[best] ? i : best;
        out[r] = (int32_t)best;
        double sum = 0.0;
        for (int64_t i = 0; mass && i < n; i++)
            sum += exp((double)xr[i] - xr[best]);
        if (mass)
            mass[r] = (float)sum;
    }
}

/*
 * kop — the f32 leaf operations of the forward pass other than matmul (see kq.h): norms,
 * RoPE, activations, attention over a KV run, causal conv1d with state, and the gated delta
 * rule. Each has a scalar reference in kop.c, written for clarity; the hot ones also have an
 * AVX-512 version (kop_avx512.c) that runs when kq_isa_active() is KQ_ISA_AVX512, so tests
 * compare the two by forcing the ISA (kq_isa_force). The versions differ only in float
 * summation order and in exp (a polynomial within 2 ulp of expf).
 *
 * Layer: kernels. Raw pointers and sizes only. All functions are pure and thread-safe on
 * disjoint outputs; callers split work (rows, heads, channels) across threads. None allocates.
 */
#ifndef DELTAD_OPS_H
#define DELTAD_OPS_H

#include <stdint.h>

/* y[0..n) = x / sqrt(mean(x^2) + eps) * w   (w may be NULL: no weight). y may alias x. */
void kop_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);
/* x[0..n) /= max(||x||_2, eps), in place. */
void kop_l2norm(float *x, int64_t n, float eps);
/* The gated norm of a GDN head: x = rmsnorm(x) * w * silu(z), in place (w not NULL). */
void kop_rmsnorm_gate(float *x, const float *w, const float *z, int64_t n, float eps);

/* NEOX RoPE on the first n_rot dims of one head of dim head_dim, in place: pairs (i, i+n_rot/2).
 * theta_i = pos * base^(-2i/n_rot). */
void kop_rope_neox(float *x, int64_t n_rot, int64_t pos, float base);
/* The rotation of one position as a table cs [n_rot]: cos theta_i at i, sin theta_i at
 * n_rot/2 + i (computed exactly as kop_rope_neox does), and the rotation from the table, so
 * the heads of a token share one table. kop_rope_neox_cs(x, n_rot, cs) == kop_rope_neox. */
void kop_rope_table(int64_t n_rot, int64_t pos, float base, float *cs);
void kop_rope_neox_cs(float *x, int64_t n_rot, const float *cs);

static inline float kop_sigmoid(float x)
{
    return 1.0f / (1.0f + __builtin_expf(-x));
}
static inline float kop_silu(float x)
{
    return x / (1.0f + __builtin_expf(-x));
}
static inline float kop_softplus(float x)
{
    return x > 20.0f ? x : __builtin_log1pf(__builtin_expf(x));
}

/* g[i] = silu(g[i]) * u[i] for i < n (SwiGLU), in place in g. */
void kop_swiglu(float *g, const float *u, int64_t n);
/* x[i] *= sigmoid(g[i]) for i < n (the output gate of gated attention). */
void kop_mul_sigmoid(float *x, const float *g, int64_t n);
/* y[i] += a * x[i]. */
void kop_axpy(float *y, float a, const float *x, int64_t n);
/* y[i] += x[i]. */
void kop_add(float *y, const float *x, int64_t n);
/* MoE routing of one row of router logits lg[Nx]: softmax over all experts (in double), the
 * top k (ties to the lower index), weights renormalised over the k (denominator at least
 * 6.1e-5), then sel[k] / w[k] sorted by expert. */
void kop_moe_route(const float *lg, int64_t Nx, int64_t k, int32_t *sel, float *w);

/*
 * One query head against a run of n_kv cached positions (causal masking is the caller's: pass
 * only visible positions). q [D]; k, v rows [n_kv] with row stride kv_stride floats; out [D];
 * scratch [n_kv]. out = sum_s softmax_s(q.k_s * scale) v_s.
 */
void kop_attn_head(const float *q, const float *k, const float *v, int64_t kv_stride, int64_t n_kv,
                   int64_t d, float scale, float *scratch, float *out);
/*
 * kop_attn_head for n_q query heads that share one K/V head (grouped-query attention): head g
 * reads q + g * q_stride and writes out + g * out_stride; scratch [n_q * n_kv]. Each K/V row is
 * read once for the whole group. Every head's result is what kop_attn_head computes for it on
 * the same ISA (the same per-head arithmetic), whatever n_q is.
 */
void kop_attn_group(const float *q, int64_t q_stride, int64_t n_q, const float *k, const float *v,
                    int64_t kv_stride, int64_t n_kv, int64_t d, float scale, float *scratch,
                    float *out, int64_t out_stride);

/*
 * Depthwise causal conv over T tokens for channels [c0, c1) of C, with SiLU.
 * state [(K-1) x C] holds the previous K-1 inputs (oldest first, row-major by time); u [T x C]
 * inputs; w [C x K] taps (channel-major as in GGUF ne [K, C]: w[c*K + j], tap K-1 = current);
 * y [T x C] outputs. The state is NOT updated here (see kop_conv_state_window).
 */
void kop_conv1d_silu(const float *state, const float *u, const float *w, int64_t T, int64_t C,
                     int64_t K, int64_t c0, int64_t c1, float *y);
/* dst [(K-1) x C] = the K-1 inputs that end `back` tokens before the end of [state ; u]
 * (back = 0: the newest window). dst may alias state (the copy runs front to back). */
void kop_conv_state_window(const float *state, const float *u, int64_t T, int64_t C, int64_t K,
                           int64_t back, float *dst);
/* The same for channels [c0, c1) of every row only (the other columns of dst untouched). */
void kop_conv_state_window_cols(const float *state, const float *u, int64_t T, int64_t C, int64_t K,
                                int64_t back, int64_t c0, int64_t c1, float *dst);

/*
 * One step of the gated delta rule for one value head.
 * M_in, M [S x S] indexed M[key i][value j]: the state is read from M_in and the new state
 * written to M (M_in == M for an in-place step; a different M_in lets the first token of a
 * batch start from a snapshot group without a copy). q, k already L2-normalised; v [S];
 * decay = exp(g); out [S] = M^T q * scale after the update:
 *   M <- decay * M_in;  delta = beta * (v - M^T k);  M <- M + k delta^T;  out = M^T q * scale
 * S <= 256.
 */
void kop_gdn_step(float *M, const float *M_in, const float *q, const float *k, const float *v,
                  float decay, float beta, float scale, int64_t S, float *out);

/* For each of rows rows of x [rows][n]: out[r] = the index of the largest value (the first
 * among ties); with mass, mass[r] = sum_i exp(x[r][i] - x[r][out[r]]) summed in double, so the
 * argmax's softmax probability is 1 / mass[r]. */
void kop_argmax_rows(const float *x, int64_t rows, int64_t n, int32_t *out, float *mass);

#endif

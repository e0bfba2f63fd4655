/*
 * test_kop — the f32 ops of kernels/cpu/kop.c: every SIMD version against the scalar reference
 * on random inputs over a sweep of shapes (tails shorter than a vector, in-place calls), plus
 * the identities the forward pass relies on:
 *   - kop_rope_neox_cs with kop_rope_table is exactly kop_rope_neox;
 *   - kop_attn_group gives every head exactly what kop_attn_head gives it, for any group size
 *     (the forward pass batches heads; a row's result must not depend on that);
 *   - kop_gdn_step in place equals the step from a separate input state;
 *   - kop_conv_state_window_cols over column blocks equals the whole-row kop_conv_state_window.
 * Tolerances: relative 2e-6 (norms, activations); for sums with cancellation, the error over the
 * largest output (conv 2e-6, attention 1e-5); relative 1e-5 above a floor for the GDN state
 * after 24 steps. The suite runs once per SIMD level the CPU has (AVX2, then AVX-512).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kop.h" // defines: kop_*
#include "kernels/cpu/kq.h"  // defines: kq_isa_force, kq_isa_best
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* Uniform in [-a, a). */
static float frand(float a)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return a * (2.0f * (float)((rng >> 40) * (1.0 / 16777216.0)) - 1.0f);
}

static float *rnd(int64_t n, float a)
{
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = frand(a);
    return p;
}

static float *dup(const float *x, int64_t n)
{
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}

/* Largest |a - b| / (|b| + floor) over n elements. */
static double max_rel(const float *a, const float *b, int64_t n, double floor)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + floor);
        m = d > m || isnan(d) ? d : m;
    }
    if (getenv("TEST_OPS_VERBOSE"))
        printf("    max_rel %.3g over %lld\n", m, (long long)n);
    return m;
}

/* Largest |a - b| over the largest |b|: the error of a sum against the size of its terms. */
static double max_err_norm(const float *a, const float *b, int64_t n)
{
    double m = 0.0, big = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        m = d > m || isnan(d) ? d : m;
        big = fabs((double)b[i]) > big ? fabs((double)b[i]) : big;
    }
    if (getenv("TEST_OPS_VERBOSE"))
        printf("    max_err_norm %.3g over %lld\n", m / big, (long long)n);
    return m / big;
}

/* The SIMD level under test (main sets it for each pass of the suite). */
static enum kq_isa simd = KQ_ISA_SCALAR;

/* Run STMT with the scalar ISA, then return to the level under test. */
#define SCALAR(stmt)                                                                               \
    do {                                                                                           \
        kq_isa_force(KQ_ISA_SCALAR);                                                               \
        stmt;                                                                                      \
        kq_isa_force(simd);                                                                        \
    } while (0)

static const int64_t sizes[] = {1, 7, 16, 31, 64, 100, 128, 257, 2048};
#define N_SIZES (int64_t)(sizeof sizes / sizeof sizes[0])

TEST(norms_and_activations)
{
    for (int64_t si = 0; si < N_SIZES; si++) {
        const int64_t n = sizes[si];
        float *x = rnd(n, 3.0f), *w = rnd(n, 1.5f), *z = rnd(n, 12.0f), *u = rnd(n, 2.0f);
        float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
        SCALAR(kop_rmsnorm(x, w, a, n, 1e-6f));
        kop_rmsnorm(x, w, b, n, 1e-6f);
        CHECK(max_rel(b, a, n, 1e-6) < 2e-6);
        SCALAR(kop_rmsnorm(x, NULL, a, n, 1e-6f));
        kop_rmsnorm(x, NULL, b, n, 1e-6f);
        CHECK(max_rel(b, a, n, 1e-6) < 2e-6);
        memcpy(a, x, (size_t)n * sizeof(float));
        memcpy(b, x, (size_t)n * sizeof(float));
        SCALAR(kop_l2norm(a, n, 1e-6f));
        kop_l2norm(b, n, 1e-6f);
        CHECK(max_rel(b, a, n, 1e-6) < 2e-6);
        memcpy(a, x, (size_t)n * sizeof(float));
        memcpy(b, x, (size_t)n * sizeof(float));
        SCALAR(kop_rmsnorm_gate(a, w, z, n, 1e-6f));
        kop_rmsnorm_gate(b, w, z, n, 1e-6f);
        CHECK(max_rel(b, a, n, 1e-6) < 2e-6);
        memcpy(a, z, (size_t)n * sizeof(float));
        memcpy(b, z, (size_t)n * sizeof(float));
        SCALAR(kop_swiglu(a, u, n));
        kop_swiglu(b, u, n);
        CHECK(max_rel(b, a, n, 1e-6) < 2e-6);
        memcpy(a, x, (size_t)n * sizeof(float));
        memcpy(b, x, (size_t)n * sizeof(float));
        SCALAR(kop_mul_sigmoid(a, z, n));
        kop_mul_sigmoid(b, z, n);
        CHECK(max_rel(b, a, n, 1e-6) < 2e-6);
        /* y += a x, y += x: a multiply then an add on every path, so the same bits */
        memcpy(a, x, (size_t)n * sizeof(float));
        memcpy(b, x, (size_t)n * sizeof(float));
        SCALAR(kop_axpy(a, 0.37f, z, n));
        kop_axpy(b, 0.37f, z, n);
        SCALAR(kop_add(a, u, n));
        kop_add(b, u, n);
        CHECK(memcmp(a, b, (size_t)n * sizeof(float)) == 0);
        free(x), free(w), free(z), free(u), free(a), free(b);
    }
}

/* Large arguments: exp saturates like expf (silu(-100) = -0, sigmoid(+-100) = 1 / 0). */
TEST(activation_extremes)
{
    float g[16] = {-100, -90, -50, -20, -1e-3f, 0, 1e-3f, 20, 50, 88, 90, 100, -88, 1, -1, 30};
    float u[16], a[16], b[16];
    for (int i = 0; i < 16; i++)
        u[i] = 1.0f;
    memcpy(a, g, sizeof g);
    memcpy(b, g, sizeof g);
    SCALAR(kop_swiglu(a, u, 16));
    kop_swiglu(b, u, 16);
    CHECK(max_rel(b, a, 16, 1e-30) < 2e-6);
    for (int i = 0; i < 16; i++)
        a[i] = b[i] = 1.0f;
    SCALAR(kop_mul_sigmoid(a, g, 16));
    kop_mul_sigmoid(b, g, 16);
    CHECK(max_rel(b, a, 16, 1e-30) < 2e-6);
}

TEST(rope_table)
{
    const int64_t n_rot = 64, D = 256;
    float *x = rnd(D, 1.0f), cs[64];
    for (int64_t pos = 0; pos < 300000; pos = pos * 3 + 1) {
        float *a = dup(x, D), *b = dup(x, D);
        kop_rope_neox(a, n_rot, pos, 1e7f);
        kop_rope_table(n_rot, pos, 1e7f, cs);
        kop_rope_neox_cs(b, n_rot, cs);
        CHECK(memcmp(a, b, (size_t)D * sizeof(float)) == 0);
        free(a), free(b);
    }
    free(x);
}

TEST(attention)
{
    const int64_t ds[] = {16, 24, 64, 256}, lens[] = {1, 5, 17, 100, 700};
    for (int64_t di = 0; di < 4; di++)
        for (int64_t li = 0; li < 5; li++) {
            const int64_t d = ds[di], n = lens[li], G = 8, kvs = 2 * d + 16;
            float *q = rnd(G * d, 1.0f), *k = rnd(n * kvs, 1.0f), *v = rnd(n * kvs, 1.0f);
            float *sc = malloc((size_t)(G * n) * sizeof(float));
            float *ref = malloc((size_t)(G * d) * sizeof(float));
            float *one = malloc((size_t)(G * d) * sizeof(float));
            float *grp = malloc((size_t)(G * d) * sizeof(float));
            const float scale = 1.0f / sqrtf((float)d) * 4.0f; /* sharper than usual */
            for (int64_t g = 0; g < G; g++) {
                SCALAR(kop_attn_head(q + g * d, k, v, kvs, n, d, scale, sc, ref + g * d));
                kop_attn_head(q + g * d, k, v, kvs, n, d, scale, sc, one + g * d);
            }
            kop_attn_group(q, d, G, k, v, kvs, n, d, scale, sc, grp, d);
            CHECK(max_err_norm(one, ref, G * d) < 1e-5);
            CHECK(memcmp(grp, one, (size_t)(G * d) * sizeof(float)) == 0);
            free(q), free(k), free(v), free(sc), free(ref), free(one), free(grp);
        }
}

TEST(conv1d)
{
    const int64_t Cs[] = {16, 40, 8192}, Ks[] = {2, 4, 16};
    for (int64_t ci = 0; ci < 3; ci++)
        for (int64_t ki = 0; ki < 3; ki++) {
            const int64_t C = Cs[ci], K = Ks[ki], T = 9;
            float *st = rnd((K - 1) * C, 2.0f), *u = rnd(T * C, 2.0f), *w = rnd(C * K, 1.0f);
            float *a = calloc((size_t)(T * C), sizeof(float));
            float *b = calloc((size_t)(T * C), sizeof(float));
            /* a channel range that starts and ends inside vectors, then the whole */
            const int64_t c0 = C > 16 ? 3 : 0, c1 = C > 16 ? C - 5 : C;
            SCALAR(kop_conv1d_silu(st, u, w, T, C, K, c0, c1, a));
            kop_conv1d_silu(st, u, w, T, C, K, c0, c1, b);
            CHECK(max_err_norm(b, a, T * C) < 2e-6);
            for (int64_t t = 0; t < T; t++) /* untouched outside [c0, c1) */
                CHECK((c0 == 0 || b[t * C] == 0.0f) && (c1 == C || b[t * C + C - 1] == 0.0f));
            free(st), free(u), free(w), free(a), free(b);
        }
}

/* The window by column blocks, last block first, gives the whole-row window's bytes: into a
 * separate destination and in place (the state shifted by T rows), for every `back`. */
TEST(conv_state_window_cols)
{
    const int64_t C = 40, K = 4, T = 3, S = 8, rows = (K - 1) * C;
    float *st = rnd(rows, 2.0f), *u = rnd(T * C, 2.0f);
    float *a = malloc((size_t)rows * sizeof(float)), *b = malloc((size_t)rows * sizeof(float));
    for (int64_t back = 0; back <= T; back++)
        for (int in_place = 0; in_place < 2; in_place++) {
            for (int64_t i = 0; i < rows; i++)
                a[i] = in_place ? st[i] : -1.0f, b[i] = a[i];
            kop_conv_state_window(in_place ? a : st, u, T, C, K, back, a);
            for (int64_t c0 = C - S; c0 >= 0; c0 -= S)
                kop_conv_state_window_cols(in_place ? b : st, u, T, C, K, back, c0, c0 + S, b);
            CHECK(memcmp(a, b, (size_t)rows * sizeof(float)) == 0);
        }
    free(st), free(u), free(a), free(b);
}

/* Many steps on one state, scalar and SIMD side by side; also in place vs separate input. */
TEST(gdn_step)
{
    const int64_t Ss[] = {16, 32, 64, 128, 256};
    for (int64_t si = 0; si < 5; si++) {
        const int64_t S = Ss[si];
        float *M0 = rnd(S * S, 0.5f), *Ma = dup(M0, S * S), *Mb = dup(M0, S * S);
        float *Mc = malloc((size_t)(S * S) * sizeof(float));
        float *oa = malloc((size_t)S * sizeof(float)), *ob = malloc((size_t)S * sizeof(float));
        float *oc = malloc((size_t)S * sizeof(float));
        for (int step = 0; step < 24; step++) {
            float *q = rnd(S, 1.0f), *k = rnd(S, 1.0f), *v = rnd(S, 1.0f);
            kop_l2norm(q, S, 1e-6f);
            kop_l2norm(k, S, 1e-6f);
            const float decay = 0.9f + 0.1f * frand(1.0f), beta = 0.5f + 0.5f * frand(1.0f);
            const float scale = 1.0f / sqrtf((float)S);
            kop_gdn_step(Mc, Mb, q, k, v, decay, beta, scale, S, oc); /* separate input first */
            SCALAR(kop_gdn_step(Ma, Ma, q, k, v, decay, beta, scale, S, oa));
            kop_gdn_step(Mb, Mb, q, k, v, decay, beta, scale, S, ob);
            CHECK(memcmp(Mc, Mb, (size_t)(S * S) * sizeof(float)) == 0);
            CHECK(memcmp(oc, ob, (size_t)S * sizeof(float)) == 0);
            free(q), free(k), free(v);
        }
        CHECK(max_rel(Mb, Ma, S * S, 1e-2) < 1e-5);
        CHECK(max_rel(ob, oa, S, 1e-2) < 1e-5);
        free(M0), free(Ma), free(Mb), free(Mc), free(oa), free(ob), free(oc);
    }
}

int main(void)
{
    const enum kq_isa levels[] = {KQ_ISA_AVX2, KQ_ISA_AVX512};
    int runs = 0;
    for (int li = 0; li < 2; li++) {
        if (kq_isa_force(levels[li]) != levels[li])
            continue;
        simd = levels[li];
        printf("ops at %s against the scalar reference\n", kq_isa_name(simd));
        RUN(norms_and_activations);
        RUN(activation_extremes);
        RUN(rope_table);
        RUN(attention);
        RUN(conv1d);
        RUN(conv_state_window_cols);
        RUN(gdn_step);
        runs++;
    }
    if (runs == 0)
        TEST_SKIP("no AVX2 on this CPU: only the scalar reference exists here");
    TEST_MAIN_END("test_kop");
}

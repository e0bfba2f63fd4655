/*
 * test_cuda_kernels — parity of every CUDA kernel (kernels/cuda, kcuda.h) with the scalar CPU
 * reference (kernels/cpu), on random inputs with odd sizes and every weight type (STYLE rule 33).
 *
 * Each check prints one line: "ok" or "FAIL", its name, the error and the tolerance. The error
 * is max |gpu - ref| / max |ref| over the compared values (integers compare exactly). Tolerances:
 * 1e-6 where the GPU does the reference's arithmetic (dequantisation, conv), 2e-5 .. 1e-4 where
 * only the summation order differs (matrix-vector, norms, attention, the delta rule), 2e-3 for
 * the F16 GEMM (activations and weights rounded to f16, unit roundoff 4.9e-4) and 1e-2 for the
 * BF16 GEMM (activations rounded to bf16, unit roundoff 3.9e-3).
 *
 * Usage: test_cuda_kernels [--perf]. --perf adds bandwidth / throughput lines (never asserted).
 * Exit: 0 all passed, 1 a check failed, 77 no CUDA device (SKIP, so CPU machines stay green).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/kcuda.h" // defines: kc_* launchers
#include "kernels/cpu/kop.h"   // defines: kop_* (CPU reference)
#include "kernels/cpu/kq.h" // defines: kq_* (CPU reference)

static int n_pass, n_fail;
static kc_stream *S;

/* ---- helpers ------------------------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void) /* uniform [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static float *rand_f(int64_t n, float scale)
{
    float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    for (int64_t i = 0; i < n; i++)
        p[i] = frand() * scale;
    return p;
}

static void *dev_dup(const void *h, size_t bytes)
{
    void *d = kc_malloc(bytes);
    if (!d) {
        fprintf(stderr, "kc_malloc(%zu) failed\n", bytes);
        exit(1);
    }
    kc_upload(S, d, h, bytes);
    kc_stream_sync(S);
    return d;
}

static void *dev_zero(size_t bytes)
{
    void *d = kc_malloc(bytes);
    if (!d)
        exit(1);
    kc_memset(S, d, 0, bytes);
    return d;
}

static void *host_get(const void *d, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    kc_download(S, h, d, bytes);
    kc_stream_sync(S);
    return h;
}

/* max |a - r| / max |r|; NaN anywhere counts as infinite error. */
static double rel_err(const float *a, const float *r, int64_t n)
{
    double md = 0.0, mr = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - r[i]);
        if (isnan(a[i]) || isnan(r[i]))
            d = INFINITY;
        md = d > md ? d : md;
        mr = fabs(r[i]) > mr ? fabs(r[i]) : mr;
    }
    return mr > 0.0 ? md / mr : md;
}

static void check(const char *name, double err, double tol)
{
    const int ok = err <= tol;
    printf("%s %-56s err %.3e  tol %.1e\n", ok ? "ok  " : "FAIL", name, err, tol);
    ok ? n_pass++ : n_fail++;
}

static void check_i32(const char *name, const int32_t *a, const int32_t *r, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += a[i] != r[i];
    printf("%s %-56s mismatches %lld of %lld\n", bad ? "FAIL" : "ok  ", name, (long long)bad,
           (long long)n);
    bad ? n_fail++ : n_pass++;
}

static const enum kq_type TYPES[] = {KQ_F32, KQ_F16, KQ_BF16, KQ_Q8_0,
                                     KQ_Q4_0, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K};
#define N_TYPES (int)(sizeof TYPES / sizeof TYPES[0])

/* An odd row length for the type: 77 for float types, 7 blocks of 32, 3 super-blocks. */
static int64_t odd_n(enum kq_type t)
{
    const int be = kq_block_elems(t);
    return be == 1 ? 77 : be == 32 ? 7 * 32 : 3 * 256;
}

/* A random weight matrix of type t quantised by the reference quantiser; *deq gets its
 * dequantised values [rows][n] (the exact values the GPU multiplies). */
static void *make_weights(enum kq_type t, int64_t rows, int64_t n, float **deq)
{
    const size_t rb = kq_row_bytes(t, n);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *x = rand_f(n, 1.0f);
    *deq = malloc((size_t)(rows * n) * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++)
            x[i] = frand();
        kq_quantize_row(t, x, w + r * rb, n);
        kq_dequantize_row(t, w + r * rb, *deq + r * n, n);
    }
    free(x);
    return w;
}

/* ---- weights ------------------------------------------------------------------------------- */

static void test_dequant(void)
{
    for (int ti = 0; ti < N_TYPES; ti++) {
        const enum kq_type t = TYPES[ti];
        const int64_t n = odd_n(t), rows = 5;
        float *ref;
        void *w = make_weights(t, rows, n, &ref);
        const size_t rb = kq_row_bytes(t, n);
        void *dw = dev_dup(w, rb * rows);
        struct kc_mat m = {dw, t, n, rows, rb};
        float *dy = dev_zero((size_t)(rows * n) * sizeof(float));
        kc_dequantize(S, &m, NULL, rows, dy, KQ_F32);
        float *y = host_get(dy, (size_t)(rows * n) * sizeof(float));
        char name[96];
        snprintf(name, sizeof name, "dequantize %s -> f32 [%lld x %lld]", kq_type_name(t),
                 (long long)rows, (long long)n);
        check(name, rel_err(y, ref, rows * n), 1e-6);
        /* embedding gather: the same dequantisation through row ids */
        const int32_t ids[4] = {3, 0, 4, 4};
        int32_t *dids = dev_dup(ids, sizeof ids);
        kc_embed(S, &m, dids, 4, dy);
        free(y);
        y = host_get(dy, (size_t)(4 * n) * sizeof(float));
        double e = 0.0;
        for (int r = 0; r < 4; r++) {
            double er = rel_err(y + r * n, ref + ids[r] * n, n);
            e = er > e ? er : e;
        }
        snprintf(name, sizeof name, "embed %s (4 ids of 5 rows)", kq_type_name(t));
        check(name, e, 1e-6);
        kc_free(dids);
        kc_free(dy);
        kc_free(dw);
        free(y);
        free(w);
        free(ref);
    }
}

/* y [T][ys] = x [T][xs] W^T in double from the dequantised weights. */
static void ref_matmul(const float *deq, int64_t n_out, int64_t n, const float *x, int64_t xs,
                       int64_t T, float *y, int64_t ys)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < n_out; r++) {
            double a = 0.0;
            for (int64_t i = 0; i < n; i++)
                a += (double)deq[r * n + i] * x[t * xs + i];
            y[t * ys + r] = (float)a;
        }
}

static double matmul_tol(enum kq_type t, int64_t T)
{
    if (T <= KC_MATVEC_MAX_T || t == KQ_F32)
        return 1e-4;
    return t == KQ_BF16 ? 1e-2 : 2e-3;
}

static void test_matmul(void)
{
    static const int64_t outs[] = {1, 37, 300};
    static const int64_t toks[] = {1, 2, 3, 5, 8, 9, 33, 130};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const enum kq_type t = TYPES[ti];
        const int64_t n = odd_n(t), xs = n + 3;
        for (int oi = 0; oi < 3; oi++) {
            const int64_t n_out = outs[oi], ys = n_out + 5;
            float *deq;
            void *w = make_weights(t, n_out, n, &deq);
            const size_t rb = kq_row_bytes(t, n);
            void *dw = dev_dup(w, rb * n_out);
            struct kc_mat m = {dw, t, n, n_out, rb};
            for (int k = 0; k < 8; k++) {
                const int64_t T = toks[k];
                if (n_out == 1 && T > 9)
                    continue;
                float *x = rand_f(T * xs, 1.0f), *ref = calloc((size_t)(T * ys), sizeof(float));
                ref_matmul(deq, n_out, n, x, xs, T, ref, ys);
                float *dx = dev_dup(x, (size_t)(T * xs) * sizeof(float));
                float *dy = dev_zero((size_t)(T * ys) * sizeof(float));
                if (kc_stream_reserve(S, kc_matmul_scratch_bytes(&m, T))) {
                    fprintf(stderr, "scratch\n");
                    exit(1);
                }
                kc_matmul(S, &m, dx, xs, T, dy, ys);
                float *y = host_get(dy, (size_t)(T * ys) * sizeof(float));
                char name[96];
                snprintf(name, sizeof name, "matmul %s %s n_in %lld n_out %lld T %lld",
                         kq_type_name(t), T <= KC_MATVEC_MAX_T ? "matvec" : "gemm", (long long)n,
                         (long long)n_out, (long long)T);
                check(name, rel_err(y, ref, T * ys), matmul_tol(t, T));
                kc_free(dx);
                kc_free(dy);
                free(x);
                free(y);
                free(ref);
            }
            kc_free(dw);
            free(w);
            free(deq);
        }
    }
}

/* MoE decode: 5 experts of [n_out][n]; 3 tokens x 2 choices; gate/up (x_div = 2) form. */
static void test_matvec_ids(void)
{
    for (int ti = 0; ti < N_TYPES; ti++) {
        const enum kq_type t = TYPES[ti];
        const int64_t n = odd_n(t), n_out = 19, Nx = 5, T = 3, k = 2, items = T * k;
        float *deq;
        void *w = make_weights(t, Nx * n_out, n, &deq);
        const size_t rb = kq_row_bytes(t, n), eb = rb * n_out;
        void *dw = dev_dup(w, eb * Nx);
        struct kc_mat m = {dw, t, n, n_out, rb};
        const int32_t ids[6] = {4, 1, 0, 4, 2, 3};
        float *x = rand_f(T * n, 1.0f), *ref = malloc((size_t)(items * n_out) * sizeof(float));
        for (int64_t i = 0; i < items; i++)
            ref_matmul(deq + ids[i] * n_out * n, n_out, n, x + (i / k) * n, n, 1,
                       ref + i * n_out, n_out);
        int32_t *dids = dev_dup(ids, sizeof ids);
        float *dx = dev_dup(x, (size_t)(T * n) * sizeof(float));
        float *dy = dev_zero((size_t)(items * n_out) * sizeof(float));
        kc_matvec_ids(S, &m, eb, dids, items, dx, n, k, dy, n_out);
        float *y = host_get(dy, (size_t)(items * n_out) * sizeof(float));
        char name[96];
        snprintf(name, sizeof name, "matvec_ids %s (5 experts, 3 tokens x 2)", kq_type_name(t));
        check(name, rel_err(y, ref, items * n_out), 1e-4);
        kc_free(dids), kc_free(dx), kc_free(dy), kc_free(dw);
        free(x), free(y), free(ref), free(w), free(deq);
    }
}

/* ---- norms, RoPE, element-wise ----------------------------------------------------------- */

static void test_norms(void)
{
    /* per-head rows inside interleaved [q | gate] rows: 3 tokens x 4 heads of 64 */
    const int64_t T = 3, H = 4, D = 64, ts = H * 2 * D, hs = 2 * D, n_all = T * ts;
    const float eps = 1e-6f;
    float *x = rand_f(n_all, 2.0f), *w = rand_f(D, 1.0f);
    for (int wi = 0; wi < 2; wi++) {
        float *ref = malloc((size_t)n_all * sizeof(float));
        memcpy(ref, x, (size_t)n_all * sizeof(float));
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                kop_rmsnorm(ref + t * ts + h * hs, wi ? w : NULL, ref + t * ts + h * hs, D, eps);
        float *dx = dev_dup(x, (size_t)n_all * sizeof(float)), *dw = dev_dup(w, D * sizeof(float));
        kc_rmsnorm(S, dx, wi ? dw : NULL, dx, T, H, ts, hs, D, eps);
        float *y = host_get(dx, (size_t)n_all * sizeof(float));
        check(wi ? "rmsnorm per head, weighted, in place" : "rmsnorm per head, no weight",
              rel_err(y, ref, n_all), 1e-5);
        kc_free(dx), kc_free(dw);
        free(y), free(ref);
    }
    /* plain rows of an odd length, out of place */
    {
        const int64_t rows = 5, n = 1037;
        float *a = rand_f(rows * n, 3.0f), *g = rand_f(n, 1.0f);
        float *ref = malloc((size_t)(rows * n) * sizeof(float));
        for (int64_t r = 0; r < rows; r++)
            kop_rmsnorm(a + r * n, g, ref + r * n, n, eps);
        float *da = dev_dup(a, (size_t)(rows * n) * 4), *dg = dev_dup(g, (size_t)n * 4);
        float *dy = dev_zero((size_t)(rows * n) * 4);
        kc_rmsnorm(S, da, dg, dy, rows, 1, n, 0, n, eps);
        float *y = host_get(dy, (size_t)(rows * n) * 4);
        check("rmsnorm rows of 1037, out of place", rel_err(y, ref, rows * n), 1e-5);
        kc_free(da), kc_free(dg), kc_free(dy);
        free(a), free(g), free(ref), free(y);
    }
    /* l2norm on the q/k heads of a conv output row layout */
    {
        float *ref = malloc((size_t)n_all * sizeof(float));
        memcpy(ref, x, (size_t)n_all * sizeof(float));
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                kop_l2norm(ref + t * ts + h * hs, D, eps);
        float *dx = dev_dup(x, (size_t)n_all * sizeof(float));
        kc_l2norm(S, dx, T, H, ts, hs, D, eps);
        float *y = host_get(dx, (size_t)n_all * sizeof(float));
        check("l2norm per head", rel_err(y, ref, n_all), 1e-5);
        kc_free(dx);
        free(y), free(ref);
    }
    /* gated norm: 7 rows of S = 32 */
    {
        const int64_t rows = 7, n = 32;
        float *a = rand_f(rows * n, 2.0f), *z = rand_f(rows * n, 4.0f), *g = rand_f(n, 1.0f);
        float *ref = malloc((size_t)(rows * n) * 4);
        memcpy(ref, a, (size_t)(rows * n) * 4);
        for (int64_t r = 0; r < rows; r++)
            kop_rmsnorm_gate(ref + r * n, g, z + r * n, n, eps);
        float *da = dev_dup(a, (size_t)(rows * n) * 4), *dz = dev_dup(z, (size_t)(rows * n) * 4);
        float *dg = dev_dup(g, (size_t)n * 4);
        kc_rmsnorm_gate(S, da, dg, dz, rows, n, eps);
        float *y = host_get(da, (size_t)(rows * n) * 4);
        check("rmsnorm_gate 7 x 32", rel_err(y, ref, rows * n), 1e-5);
        kc_free(da), kc_free(dz), kc_free(dg);
        free(a), free(z), free(g), free(ref), free(y);
    }
    free(x), free(w);
}

static void test_rope(void)
{
    const int64_t T = 3, H = 5, D = 64, ts = H * 2 * D, hs = 2 * D, n_all = T * ts;
    const int32_t pos[3] = {0, 7, 123456};
    const int64_t rots[2] = {16, 64};
    for (int ri = 0; ri < 2; ri++) {
        const int64_t n_rot = rots[ri];
        float *x = rand_f(n_all, 1.0f), *ref = malloc((size_t)n_all * 4);
        memcpy(ref, x, (size_t)n_all * 4);
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                kop_rope_neox(ref + t * ts + h * hs, n_rot, pos[t], 1e7f);
        float *dx = dev_dup(x, (size_t)n_all * 4);
        int32_t *dp = dev_dup(pos, sizeof pos);
        kc_rope_neox(S, dx, dp, T, H, ts, hs, n_rot, 1e7f);
        float *y = host_get(dx, (size_t)n_all * 4);
        char name[96];
        snprintf(name, sizeof name, "rope_neox n_rot %lld of D 64, pos up to 123456",
                 (long long)n_rot);
        check(name, rel_err(y, ref, n_all), 1e-5);
        kc_free(dx), kc_free(dp);
        free(x), free(ref), free(y);
    }
}

static void test_elementwise(void)
{
    const int64_t n = 1001;
    float *a = rand_f(n, 6.0f), *b = rand_f(n, 6.0f), *ref = malloc((size_t)n * 4);
    for (int op = 0; op < 4; op++) {
        memcpy(ref, a, (size_t)n * 4);
        float *da = dev_dup(a, (size_t)n * 4), *db = dev_dup(b, (size_t)n * 4);
        const char *name = "";
        if (op == 0) {
            kop_swiglu(ref, b, n), kc_swiglu(S, da, db, n), name = "swiglu 1001";
        } else if (op == 1) {
            kop_mul_sigmoid(ref, b, n), kc_mul_sigmoid(S, da, db, n), name = "mul_sigmoid 1001";
        } else if (op == 2) {
            for (int64_t i = 0; i < n; i++)
                ref[i] = kop_sigmoid(ref[i]);
            kc_sigmoid(S, da, n), name = "sigmoid 1001";
        } else {
            kop_add(ref, b, n), kc_add(S, da, db, n), name = "add 1001";
        }
        float *y = host_get(da, (size_t)n * 4);
        check(name, rel_err(y, ref, n), 1e-6);
        kc_free(da), kc_free(db);
        free(y);
    }
    free(a), free(b), free(ref);
}

/* The allreduce's BF16 wire format against kq_f32_to_bf16, bit for bit (ties to even, NaN,
 * infinities, subnormals), and back. */
static void test_bf16_wire(void)
{
    const int64_t n = 1029;
    float *x = rand_f(n, 100.0f);
    const uint32_t special[] = {0x7fc00000u, 0xff800000u, 0x7f800000u, 0x00000001u,
                                0x3f808000u, 0x3f818000u, 0x80000000u, 0x7f7fffffu};
    for (int i = 0; i < 8; i++)
        memcpy(&x[i], &special[i], 4);
    float *dx = dev_dup(x, (size_t)n * 4), *dback = dev_zero((size_t)n * 4);
    uint16_t *dw = dev_zero((size_t)n * 2);
    void *st = kc_stream_handle(S);
    kc_f32_to_bf16_on(st, dx, dw, n);
    kc_bf16_to_f32_on(st, dw, dback, n);
    uint16_t *w = host_get(dw, (size_t)n * 2);
    float *back = host_get(dback, (size_t)n * 4);
    int64_t bad = 0, bad_back = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t r = kq_f32_to_bf16(x[i]);
        const float rb = kq_bf16_to_f32(r);
        bad += w[i] != r;
        bad_back += memcmp(&back[i], &rb, 4) != 0;
    }
    check("bf16 wire 1029 (NaN, inf, ties, subnormal)", (double)bad, 0.0);
    check("bf16 wire back to f32", (double)bad_back, 0.0);
    kc_free(dx), kc_free(dback), kc_free(dw);
    free(x), free(w), free(back);
}

static void test_argmax(void)
{
    const int64_t T = 4, n = 1000;
    float *x = rand_f(T * n, 1.0f);
    x[1 * n + 10] = 5.0f, x[1 * n + 900] = 5.0f; /* tie: the lower index wins */
    x[2 * n + 999] = 7.0f;                       /* the last element */
    x[3 * n + 0] = 9.0f;                         /* the first element */
    int32_t ref[4];
    for (int64_t t = 0; t < T; t++) {
        int64_t b = 0;
        for (int64_t i = 1; i < n; i++)
            b = x[t * n + i] > x[t * n + b] ? i : b;
        ref[t] = (int32_t)b;
    }
    float mref[4];
    for (int64_t t = 0; t < T; t++) { /* the mass: sum exp(x - max), dev_cpu__argmax's */
        double s = 0.0;
        for (int64_t i = 0; i < n; i++)
            s += exp((double)x[t * n + i] - x[t * n + ref[t]]);
        mref[t] = (float)s;
    }
    float *dx = dev_dup(x, (size_t)(T * n) * 4);
    int32_t *dout = dev_zero(sizeof ref);
    float *dmass = dev_zero(sizeof mref);
    kc_argmax(S, dx, T, n, dout, NULL);
    int32_t *got = host_get(dout, sizeof ref);
    check_i32("argmax 4 x 1000 (tie, first, last)", got, ref, T);
    kc_argmax(S, dx, T, n, dout, dmass);
    int32_t *got2 = host_get(dout, sizeof ref);
    check_i32("argmax with its mass: the same indices", got2, ref, T);
    float *gm = host_get(dmass, sizeof mref);
    check("argmax mass sum exp(x - max)", rel_err(gm, mref, T), 1e-5);
    kc_free(dx), kc_free(dout), kc_free(dmass);
    free(x), free(got), free(got2), free(gm);
}

/* ---- attention ----------------------------------------------------------------------------- */

static void test_attention_d(int64_t D, int gated)
{
    const int64_t n_seq = 3, n_ctx = 1100, H = 8, Hkv = 2, kvd = Hkv * D, T = 4;
    const int32_t seq[4] = {0, 1, 2, 1}, pos[4] = {0, 16, 299, 1099};
    int32_t nkv[4];
    for (int t = 0; t < T; t++)
        nkv[t] = pos[t] + 1;
    const int64_t cache_n = n_seq * n_ctx * kvd;
    float *kc = rand_f(cache_n, 1.0f), *vc = rand_f(cache_n, 1.0f);
    const int64_t q_head = gated ? 2 * D : D, q_tok = H * q_head;
    float *q = rand_f(T * q_tok, 1.0f), *knew = rand_f(T * kvd, 1.0f), *vnew = rand_f(T * kvd, 1.0f);
    /* the device cache and the reference cache get the same stores */
    struct kc_kv kv = {dev_dup(kc, (size_t)cache_n * 4), dev_dup(vc, (size_t)cache_n * 4), n_ctx,
                       kvd};
    for (int t = 0; t < T; t++) {
        memcpy(kc + (seq[t] * n_ctx + pos[t]) * kvd, knew + t * kvd, (size_t)kvd * 4);
        memcpy(vc + (seq[t] * n_ctx + pos[t]) * kvd, vnew + t * kvd, (size_t)kvd * 4);
    }
    const float scale = 1.0f / sqrtf((float)D);
    float *ref = calloc((size_t)(T * H * D), 4), *scratch = malloc((size_t)n_ctx * 4);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t j = h / (H / Hkv);
            float *o = ref + t * H * D + h * D;
            kop_attn_head(q + t * q_tok + h * q_head, kc + seq[t] * n_ctx * kvd + j * D,
                          vc + seq[t] * n_ctx * kvd + j * D, kvd, nkv[t], D, scale, scratch, o);
            if (gated)
                kop_mul_sigmoid(o, q + t * q_tok + h * q_head + D, D);
        }
    float *dq = dev_dup(q, (size_t)(T * q_tok) * 4), *dkn = dev_dup(knew, (size_t)(T * kvd) * 4);
    float *dvn = dev_dup(vnew, (size_t)(T * kvd) * 4), *dout = dev_zero((size_t)(T * H * D) * 4);
    int32_t *dseq = dev_dup(seq, sizeof seq), *dpos = dev_dup(pos, sizeof pos);
    int32_t *dnkv = dev_dup(nkv, sizeof nkv);
    kc_kv_store(S, &kv, dkn, dvn, kvd, dseq, dpos, T);
    kc_attention(S, &kv, dq, q_tok, q_head, gated ? dq + D : NULL, dseq, dnkv, T, H, Hkv, D, scale,
                 dout, H * D);
    float *out = host_get(dout, (size_t)(T * H * D) * 4);
    float *kback = host_get(kv.k, (size_t)cache_n * 4);
    char name[96];
    snprintf(name, sizeof name, "attention D %lld H 8 Hkv 2 %s n_kv 1..1100", (long long)D,
             gated ? "gated" : "plain");
    check(name, rel_err(out, ref, T * H * D), 2e-5);
    snprintf(name, sizeof name, "kv_store D %lld (K cache after the store)", (long long)D);
    check(name, rel_err(kback, kc, cache_n), 0.0);
    kc_free(kv.k), kc_free(kv.v), kc_free(dq), kc_free(dkn), kc_free(dvn), kc_free(dout);
    kc_free(dseq), kc_free(dpos), kc_free(dnkv);
    free(kc), free(vc), free(q), free(knew), free(vnew), free(ref), free(scratch), free(out);
    free(kback);
}

static void test_attention(void)
{
    test_attention_d(64, 1);
    test_attention_d(256, 1);
    test_attention_d(40, 0);
    test_attention_d(128, 0);
}

/* ---- Gated DeltaNet -------------------------------------------------------------------------- */

static void test_gates(void)
{
    const int64_t T = 5, Hv = 6, Hk = 2, r = Hv / Hk;
    float *b = rand_f(T * Hv, 4.0f), *al = rand_f(T * Hv, 4.0f), *ba = rand_f(T * 2 * Hv, 4.0f);
    float a_log[6], dt[6];
    for (int h = 0; h < Hv; h++)
        a_log[h] = -(1.0f + 7.5f * (frand() + 1.0f)), dt[h] = 0.5f * frand();
    al[3] = 30.0f; /* softplus's linear branch */
    for (int variant = 0; variant < 2; variant++) {
        float rb[30], rd[30];
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < Hv; h++) {
                const int64_t i = t * Hv + h, gk = h / r, j = h % r;
                const float bv = variant ? ba[t * 2 * Hv + 2 * r * gk + j] : b[i];
                const float av = variant ? ba[t * 2 * Hv + 2 * r * gk + r + j] : al[i];
                rb[i] = kop_sigmoid(bv);
                rd[i] = expf(a_log[h] * kop_softplus(av + dt[h]));
            }
        float *db = dev_dup(b, (size_t)(T * Hv) * 4), *dal = dev_dup(al, (size_t)(T * Hv) * 4);
        float *dba = dev_dup(ba, (size_t)(T * 2 * Hv) * 4), *dlog = dev_dup(a_log, sizeof a_log);
        float *ddt = dev_dup(dt, sizeof dt), *dbeta = dev_zero(sizeof rb), *ddec = dev_zero(sizeof rd);
        kc_gdn_gates(S, db, dal, variant ? dba : NULL, dlog, ddt, T, Hv, Hk, dbeta, ddec);
        float *gb = host_get(dbeta, sizeof rb), *gd = host_get(ddec, sizeof rd);
        check(variant ? "gdn_gates ba (qwen3next) beta" : "gdn_gates beta/alpha beta",
              rel_err(gb, rb, T * Hv), 1e-6);
        check(variant ? "gdn_gates ba (qwen3next) decay" : "gdn_gates beta/alpha decay",
              rel_err(gd, rd, T * Hv), 1e-5);
        kc_free(db), kc_free(dal), kc_free(dba), kc_free(dlog), kc_free(ddt), kc_free(dbeta);
        kc_free(ddec);
        free(gb), free(gd);
    }
    free(b), free(al), free(ba);
}

/*
 * The GDN layer's sequence part over three runs in one batch, as the forward pass runs it: conv
 * (+ state snapshots), L2 norm of the q/k heads, the delta rule (+ SSM snapshots), the gated
 * norm. Runs: a decode token of seq 0 from group 0; 3 tokens of seq 2 from group 2 (after a
 * rollback); 7 tokens (more than the 4 groups) of seq 1 from group 1. The state block has the
 * layout of engine/sched/cache.c: [group][seq][conv | ssm].
 */
static void test_gdn_s(int64_t Sd, int kmap_mod)
{
    const int64_t Hk = 2, Hv = 4, C = 2 * Hk * Sd + Hv * Sd, K = 4, G = 4, n_seq = 3, T = 11;
    const int64_t conv_n = (K - 1) * C, ssm_n = Hv * Sd * Sd, per = conv_n + ssm_n;
    const int64_t st_n = G * n_seq * per;
    const struct kc_run runs[3] = {{0, 1, 0, 0}, {1, 4, 2, 2}, {4, 11, 1, 1}};
    const float eps = 1e-6f, scale = 1.0f / sqrtf((float)Sd);
    float *u = rand_f(T * C, 1.0f), *w = rand_f(C * K, 0.5f), *st = rand_f(st_n, 0.3f);
    float *z = rand_f(T * Hv * Sd, 3.0f), *nw = rand_f(Sd, 1.0f);
    float *beta = malloc((size_t)(T * Hv) * 4), *decay = malloc((size_t)(T * Hv) * 4);
    for (int64_t i = 0; i < T * Hv; i++)
        beta[i] = 0.5f + 0.5f * frand(), decay[i] = 0.75f + 0.25f * frand();
    /* device */
    float *dst = dev_dup(st, (size_t)st_n * 4), *du = dev_dup(u, (size_t)(T * C) * 4);
    float *dw = dev_dup(w, (size_t)(C * K) * 4), *dz = dev_dup(z, (size_t)(T * Hv * Sd) * 4);
    float *dnw = dev_dup(nw, (size_t)Sd * 4), *dbeta = dev_dup(beta, (size_t)(T * Hv) * 4);
    float *ddec = dev_dup(decay, (size_t)(T * Hv) * 4), *dy = dev_zero((size_t)(T * C) * 4);
    float *dout = dev_zero((size_t)(T * Hv * Sd) * 4);
    struct kc_run *druns = dev_dup(runs, sizeof runs);
    const struct kc_gdn_state gs = {dst, dst + conv_n, n_seq * per, per, G};
    kc_conv1d_silu(S, du, dw, C, K, druns, 3, &gs, dy);
    kc_l2norm(S, dy, T, 2 * Hk, C, Sd, Sd, eps);
    kc_gdn(S, dy, C, Hk, Hv, Sd, kmap_mod, dbeta, ddec, druns, 3, &gs, dout);
    kc_rmsnorm_gate(S, dout, dnw, dz, T * Hv, Sd, eps);
    /* reference, in fwd.c's order */
    float *y = calloc((size_t)(T * C), 4), *o = calloc((size_t)(T * Hv * Sd), 4);
#define CONV(g, s) (st + ((g) * n_seq + (s)) * per)
#define SSM(g, s) (st + ((g) * n_seq + (s)) * per + conv_n)
    for (int ri = 0; ri < 3; ri++) {
        const struct kc_run *ru = &runs[ri];
        const int64_t Tr = ru->t1 - ru->t0, n_snap = Tr < G ? Tr : G;
        const float *src = CONV(ru->src_group, ru->seq);
        kop_conv1d_silu(src, u + ru->t0 * C, w, Tr, C, K, 0, C, y + ru->t0 * C);
        for (int pass = 0; pass < 2; pass++)
            for (int64_t g = n_snap - 1; g >= 0; g--)
                if ((g == ru->src_group) == (pass == 1))
                    kop_conv_state_window(src, u + ru->t0 * C, Tr, C, K, g, CONV(g, ru->seq));
        for (int64_t t = ru->t0; t < ru->t1; t++)
            for (int64_t hh = 0; hh < 2 * Hk; hh++)
                kop_l2norm(y + t * C + hh * Sd, Sd, eps);
        for (int64_t h = 0; h < Hv; h++) {
            const int64_t kh = kmap_mod ? h % Hk : h / (Hv / Hk);
            float *M = SSM(0, ru->seq) + h * Sd * Sd;
            const float *Min = SSM(ru->src_group, ru->seq) + h * Sd * Sd;
            for (int64_t t = ru->t0; t < ru->t1; t++) {
                const float *yt = y + t * C;
                float *ot = o + t * Hv * Sd + h * Sd;
                kop_gdn_step(M, t == ru->t0 ? Min : M, yt + kh * Sd, yt + Hk * Sd + kh * Sd,
                             yt + 2 * Hk * Sd + h * Sd, decay[t * Hv + h], beta[t * Hv + h],
                             scale, Sd, ot);
                kop_rmsnorm_gate(ot, nw, z + t * Hv * Sd + h * Sd, Sd, eps);
                const int64_t back = ru->t1 - 1 - t;
                if (back >= 1 && back < G)
                    memcpy(SSM(back, ru->seq) + h * Sd * Sd, M, (size_t)(Sd * Sd) * 4);
            }
        }
    }
#undef CONV
#undef SSM
    float *gy = host_get(dy, (size_t)(T * C) * 4), *go = host_get(dout, (size_t)(T * Hv * Sd) * 4);
    float *gst = host_get(dst, (size_t)st_n * 4);
    /* conv parts of the state compare exactly; the SSM parts to the recurrence's tolerance */
    double e_conv = 0.0, e_ssm = 0.0;
    for (int64_t b = 0; b < G * n_seq; b++) {
        double ec = rel_err(gst + b * per, st + b * per, conv_n);
        double es = rel_err(gst + b * per + conv_n, st + b * per + conv_n, ssm_n);
        e_conv = ec > e_conv ? ec : e_conv;
        e_ssm = es > e_ssm ? es : e_ssm;
    }
    char name[96];
    const char *km = kmap_mod ? "h%Hk" : "h/r";
    snprintf(name, sizeof name, "gdn S %lld %s: conv + l2norm output", (long long)Sd, km);
    check(name, rel_err(gy, y, T * C), 1e-5);
    snprintf(name, sizeof name, "gdn S %lld %s: conv state, all groups", (long long)Sd, km);
    check(name, e_conv, 0.0);
    snprintf(name, sizeof name, "gdn S %lld %s: ssm state, all groups", (long long)Sd, km);
    check(name, e_ssm, 1e-4);
    snprintf(name, sizeof name, "gdn S %lld %s: output after gated norm", (long long)Sd, km);
    check(name, rel_err(go, o, T * Hv * Sd), 1e-4);
    kc_free(dst), kc_free(du), kc_free(dw), kc_free(dz), kc_free(dnw), kc_free(dbeta);
    kc_free(ddec), kc_free(dy), kc_free(dout), kc_free(druns);
    free(u), free(w), free(st), free(z), free(nw), free(beta), free(decay), free(y), free(o);
    free(gy), free(go), free(gst);
}

static void test_gdn(void)
{
    test_gdn_s(16, 1);
    test_gdn_s(32, 0);
    test_gdn_s(64, 1);
    test_gdn_s(128, 1);
    test_gdn_s(128, 0);
}

/* ---- MoE ------------------------------------------------------------------------------------ */

static void test_moe(void)
{
    const int64_t T = 6, Nx = 37, k = 4, E = 50, n = T * k;
    float *lg = rand_f(T * Nx, 3.0f);
    lg[2 * Nx + 5] = lg[2 * Nx + 30] = 9.0f; /* a tie for the top choice */
    int32_t re[24], slot[24], erow[24], eoff[38];
    float rw[24];
    for (int64_t t = 0; t < T; t++)
        kop_moe_route(lg + t * Nx, Nx, k, re + t * k, rw + t * k);
    memset(eoff, 0, sizeof eoff);
    for (int64_t i = 0; i < n; i++)
        eoff[re[i] + 1]++;
    for (int64_t e = 0; e < Nx; e++)
        eoff[e + 1] += eoff[e];
    {
        int32_t next[37];
        memcpy(next, eoff, sizeof next);
        for (int64_t i = 0; i < n; i++) {
            slot[i] = next[re[i]]++;
            erow[slot[i]] = (int32_t)(i / k);
        }
    }
    float *dlg = dev_dup(lg, (size_t)(T * Nx) * 4), *drw = dev_zero(sizeof rw);
    int32_t *dre = dev_zero(sizeof re), *dslot = dev_zero(sizeof slot);
    int32_t *derow = dev_zero(sizeof erow), *deoff = dev_zero(sizeof eoff);
    kc_moe_route(S, dlg, T, Nx, k, dre, drw);
    kc_moe_dispatch(S, dre, T, k, Nx, deoff, dslot, derow);
    int32_t *gre = host_get(dre, sizeof re), *gslot = host_get(dslot, sizeof slot);
    int32_t *gerow = host_get(derow, sizeof erow), *geoff = host_get(deoff, sizeof eoff);
    float *grw = host_get(drw, sizeof rw);
    check_i32("moe_route experts (37 experts, top 4, a tie)", gre, re, n);
    check("moe_route weights", rel_err(grw, rw, n), 1e-6);
    check_i32("moe_dispatch e_off", geoff, eoff, Nx + 1);
    check_i32("moe_dispatch slot", gslot, slot, n);
    check_i32("moe_dispatch e_row", gerow, erow, n);
    /* gather + combine (by slot and by item) */
    float *x = rand_f(T * E, 1.0f), *eout = rand_f(n * E, 1.0f), *sh = rand_f(T * E, 1.0f);
    float *shg = rand_f(T, 1.0f), *ref = malloc((size_t)(n * E) * 4);
    for (int64_t s = 0; s < n; s++)
        memcpy(ref + s * E, x + erow[s] * E, (size_t)E * 4);
    float *dx = dev_dup(x, (size_t)(T * E) * 4), *dg = dev_zero((size_t)(n * E) * 4);
    kc_gather_rows(S, dx, derow, n, E, dg);
    float *gg = host_get(dg, (size_t)(n * E) * 4);
    check("gather_rows by e_row", rel_err(gg, ref, n * E), 0.0);
    float *de = dev_dup(eout, (size_t)(n * E) * 4), *dsh = dev_dup(sh, (size_t)(T * E) * 4);
    float *dshg = dev_dup(shg, (size_t)T * 4), *dc = dev_zero((size_t)(T * E) * 4);
    for (int mode = 0; mode < 2; mode++) {
        for (int64_t t = 0; t < T; t++) {
            float *o = ref + t * E;
            for (int64_t i = 0; i < E; i++)
                o[i] = mode ? sh[t * E + i] * shg[t] : 0.0f;
            for (int64_t i = 0; i < k; i++)
                kop_axpy(o, rw[t * k + i], eout + (mode ? slot[t * k + i] : t * k + i) * E, E);
        }
        kc_moe_combine(S, mode ? dsh : NULL, mode ? dshg : NULL, drw, mode ? dslot : NULL, de, T,
                       k, E, dc);
        float *gc = host_get(dc, (size_t)(T * E) * 4);
        check(mode ? "moe_combine by slot + shared expert" : "moe_combine by item, no shared",
              rel_err(gc, ref, T * E), 1e-6);
        free(gc);
    }
    kc_free(dlg), kc_free(drw), kc_free(dre), kc_free(dslot), kc_free(derow), kc_free(deoff);
    kc_free(dx), kc_free(dg), kc_free(de), kc_free(dsh), kc_free(dshg), kc_free(dc);
    free(lg), free(gre), free(gslot), free(gerow), free(geoff), free(grw), free(x), free(eout);
    free(sh), free(shg), free(ref), free(gg);
}

/* ---- CUDA graph ----------------------------------------------------------------------------- */

/* Capture rmsnorm + a Q4_K matvec, replay on new inputs written into the same buffers, and
 * compare with direct launches. */
static void test_graph(void)
{
    const int64_t n = 512, n_out = 77;
    float *deq, *g = rand_f(n, 1.0f);
    void *w = make_weights(KQ_Q4_K, n_out, n, &deq);
    const size_t rb = kq_row_bytes(KQ_Q4_K, n);
    struct kc_mat m = {dev_dup(w, rb * n_out), KQ_Q4_K, n, n_out, rb};
    float *dx = dev_zero((size_t)n * 4), *dxn = dev_zero((size_t)n * 4), *dg = dev_dup(g, (size_t)n * 4);
    float *dy = dev_zero((size_t)n_out * 4);
    kc_graph_begin(S);
    kc_rmsnorm(S, dx, dg, dxn, 1, 1, n, 0, n, 1e-6f);
    kc_matvec(S, &m, dxn, n, 1, dy, n_out);
    kc_graph *gr = kc_graph_end(S);
    float *x = rand_f(n, 1.0f);
    kc_upload(S, dx, x, (size_t)n * 4);
    kc_graph_launch(S, gr);
    float *y_graph = host_get(dy, (size_t)n_out * 4);
    kc_memset(S, dy, 0, (size_t)n_out * 4);
    kc_rmsnorm(S, dx, dg, dxn, 1, 1, n, 0, n, 1e-6f);
    kc_matvec(S, &m, dxn, n, 1, dy, n_out);
    float *y_direct = host_get(dy, (size_t)n_out * 4);
    check("graph replay == direct launches", rel_err(y_graph, y_direct, n_out), 0.0);
    kc_graph_destroy(gr);
    kc_free((void *)m.data), kc_free(dx), kc_free(dxn), kc_free(dg), kc_free(dy);
    free(deq), free(g), free(w), free(x), free(y_graph), free(y_direct);
}

/* ---- --perf ---------------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Matrix-vector GB/s of each type on a 8192 x 8192 matrix, T = 1 and 4; GEMM TFLOP/s at T =
 * 512 on 4096 x 4096. Random bytes stand in for weights (timing only). */
static void perf(void)
{
    const int64_t n = 8192, n_out = 8192;
    float *dx = dev_zero((size_t)(512 * n) * 4), *dy = dev_zero((size_t)(512 * n_out) * 4);
    for (int ti = 0; ti < N_TYPES; ti++) {
        const enum kq_type t = TYPES[ti];
        const size_t rb = kq_row_bytes(t, n), bytes = rb * n_out;
        float *deq;
        void *w = make_weights(t, 64, n, &deq); /* 64 real rows, tiled */
        uint8_t *big = malloc(bytes);
        for (int64_t r = 0; r < n_out; r++)
            memcpy(big + r * rb, (uint8_t *)w + (r % 64) * rb, rb);
        struct kc_mat m = {dev_dup(big, bytes), t, n, n_out, rb};
        for (int64_t T = 1; T <= 4; T *= 4) {
            kc_matvec(S, &m, dx, n, T, dy, n_out);
            kc_stream_sync(S);
            const int reps = 50;
            double t0 = now_s();
            for (int i = 0; i < reps; i++)
                kc_matvec(S, &m, dx, n, T, dy, n_out);
            kc_stream_sync(S);
            double dt = (now_s() - t0) / reps;
            printf("perf matvec %-5s 8192x8192 T %lld: %8.1f us  %7.1f GB/s\n", kq_type_name(t),
                   (long long)T, dt * 1e6, bytes / dt * 1e-9);
        }
        struct kc_mat g = m;
        g.n_out = 4096;
        g.n_in = 4096;
        g.row_bytes = kq_row_bytes(t, 4096);
        if (kc_stream_reserve(S, kc_matmul_scratch_bytes(&g, 512) + (64u << 20)) == 0) {
            kc_gemm(S, &g, dx, 4096, 512, dy, 4096);
            kc_stream_sync(S);
            double t0 = now_s();
            for (int i = 0; i < 10; i++)
                kc_gemm(S, &g, dx, 4096, 512, dy, 4096);
            kc_stream_sync(S);
            double dt = (now_s() - t0) / 10;
            printf("perf gemm   %-5s 4096x4096 T 512: %8.1f us  %7.1f TFLOP/s\n",
                   kq_type_name(t), dt * 1e6, 2.0 * 4096 * 4096 * 512 / dt * 1e-12);
        }
        kc_free((void *)m.data);
        free(big), free(w), free(deq);
    }
    kc_free(dx), kc_free(dy);
}

int main(int argc, char **argv)
{
    char err[256] = "";
    const int n_dev = kc_device_count(err, sizeof err);
    if (n_dev <= 0) {
        printf("SKIP: no CUDA device (%s)\n", err[0] ? err : "cudaGetDeviceCount returned 0");
        return 77;
    }
    char desc[256];
    kc_device_describe(0, desc, sizeof desc);
    printf("device 0: %s\n", desc);
    if (kc_stream_create(0, 64u << 20, &S, err, sizeof err)) {
        printf("FAIL: %s\n", err);
        return 1;
    }
    kq_isa_force(KQ_ISA_SCALAR); /* the reference is the scalar code */
    test_dequant();
    test_matmul();
    test_matvec_ids();
    test_norms();
    test_rope();
    test_elementwise();
    test_argmax();
    test_bf16_wire();
    test_attention();
    test_gates();
    test_gdn();
    test_moe();
    test_graph();
    if (argc > 1 && strcmp(argv[1], "--perf") == 0)
        perf();
    kc_stream_destroy(S);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}

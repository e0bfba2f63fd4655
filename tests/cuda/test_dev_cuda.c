/*
 * test_dev_cuda — the CUDA device (engine/compute/dev_cuda.c) against the CPU device through the device
 * interface, on device buffers (uploads, products, downloads): dev_matmul and dev_matmul_multi of
 * every weight type, decode (T = 1, 4) and
 * prefill (T = 37) shapes. Weights are device addresses (uploaded, as the group does at
 * start-up for a device without host_weights). The CPU device quantises
 * activations (Q8_0 / Q8_K) for the quantised types and the GPU does not, so those compare at
 * 3e-2 of the largest output; F32 / F16 / BF16 weights take f32 activations on both (1e-4, or
 * the 16-bit GEMM's 2e-3 / 1e-2 for T > 8).
 *
 * Graphs: a recorded op replays on new buffer contents as a direct launch computes them, and a
 * recording that needs the host is spoiled.
 *
 * Every other forward op (embed, rmsnorm, SwiGLU, argmax, GDN gates, conv1d and the gated
 * delta rule with a snapshot group, MoE route + combine; RoPE tables, attention store +
 * gated GQA attention, the shared-expert gate, MoE gather, products by expert id, row
 * gathers / scatters in place) against the CPU device's, on device buffers from the same host
 * inputs.
 *
 * Exit: 0 pass, 1 fail, 77 no GPU or no CUDA device (SKIP with the device's own message).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/dev_cuda.h" // defines: dev_cuda_create
#include "engine/compute/device.h"   // defines: dev_matmul, dev_cpu_create, dev_buf_alloc, dev_*
#include "kernels/cpu/kq.h"    // defines: kq_quantize_row

static uint64_t rng = 88172645463325252ull;

static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static double rel_err(const float *a, const float *r, int64_t n)
{
    double md = 0.0, mr = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = isnan(a[i]) ? INFINITY : fabs((double)a[i] - r[i]);
        md = d > md ? d : md;
        mr = fabs(r[i]) > mr ? fabs(r[i]) : mr;
    }
    return mr > 0.0 ? md / mr : md;
}

/* Random rows of type t quantised into w [n_out][kq_row_bytes(t, n)]. */
static void fill_weights(uint8_t *w, enum kq_type t, int64_t n, int64_t n_out)
{
    const size_t rb = kq_row_bytes(t, n);
    float *row = malloc((size_t)n * sizeof *row);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n; i++)
            row[i] = frand();
        kq_quantize_row(t, row, w + r * rb, n);
    }
    free(row);
}

/* The products mm[0 .. n) of host weights, x and y on device d, the way the forward pass runs
 * them: the weights and x uploaded into device buffers, the products on device addresses, y
 * downloaded after a sync. */
static void mm_host(struct dev *d, const struct dev_mm *mm, int n)
{
    struct dev_buf *bx[4], *by[4], *bw[4];
    struct dev_mm dm[4];
    for (int i = 0; i < n && i < 4; i++) {
        const size_t wb = mm[i].w.row_bytes * (size_t)mm[i].w.n_out;
        void *w = NULL;
        if (dev_buf_alloc(d, wb, 256, &bw[i], &w))
            abort();
        dev_upload(d, w, mm[i].w.data, wb);
        const size_t xb = (size_t)(mm[i].T * mm[i].w.n_in) * 4;
        const size_t yb = (size_t)(mm[i].T * mm[i].w.n_out) * 4;
        void *x = NULL, *y = NULL;
        bx[i] = NULL;
        for (int j = 0; j < i; j++)
            if (mm[j].x == mm[i].x)
                x = (void *)dm[j].x;
        if (!x && (dev_buf_alloc(d, xb, 64, &bx[i], &x) || !x))
            abort();
        dev_upload(d, x, mm[i].x, xb);
        if (dev_buf_alloc(d, yb, 64, &by[i], &y))
            abort();
        dm[i] = (struct dev_mm){mm[i].w, x, mm[i].T, y};
        dm[i].w.data = w;
    }
    dev_matmul_multi(d, dm, n);
    for (int i = 0; i < n; i++)
        dev_download(d, mm[i].y, dm[i].y, (size_t)(mm[i].T * mm[i].w.n_out) * 4);
    dev_sync(d);
    for (int i = 0; i < n; i++) {
        dev_buf_free(d, bx[i]);
        dev_buf_free(d, by[i]);
        dev_buf_free(d, bw[i]);
    }
}

static void mm_one(struct dev *d, const struct dev_mat *m, const float *x, int64_t T, float *y)
{
    struct dev_mm mm = {*m, x, T, y};
    mm_host(d, &mm, 1);
}

/* ---- forward ops: the same op on both devices from the same host inputs ----------------- */

/* Regions of one device buffer, carved in order. */
struct arena {
    struct dev *d;
    struct dev_buf *b;
    char *base;
    size_t off;
};

static void arena_init(struct arena *a, struct dev *d)
{
    *a = (struct arena){.d = d};
    if (dev_buf_alloc(d, 8u << 20, 256, &a->b, (void **)&a->base))
        abort();
}

static void *room(struct arena *a, size_t bytes)
{
    void *p = a->base + a->off;
    a->off += (bytes + 255) / 256 * 256;
    if (a->off > (8u << 20))
        abort();
    return p;
}

static void *put(struct arena *a, const void *host, size_t bytes)
{
    void *p = room(a, bytes);
    dev_upload(a->d, p, host, bytes);
    return p;
}

static void get(struct arena *a, void *host, const void *dev, size_t bytes)
{
    dev_download(a->d, host, dev, bytes);
    dev_sync(a->d);
}

static float *frands(int64_t n)
{
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = frand();
    return x;
}

/* One op's outputs (floats) on gpu and cpu: relative error, printed and counted. */
static void check(const char *what, const float *g, const float *c, int64_t n, double tol,
                  int *passes, int *fails)
{
    const double e = rel_err(g, c, n);
    printf("%s %-34s err %.3e  tol %.1e\n", e <= tol ? "ok  " : "FAIL", what, e, tol);
    e <= tol ? (*passes)++ : (*fails)++;
}

/* embed, rmsnorm (+ add, both stride forms), swiglu, argmax, gdn gates, conv1d + gdn over one
 * run with snapshot groups, moe route + combine. */
static void test_ops(struct dev *gpu, struct dev *cpu, int *passes, int *fails)
{
    const int64_t T = 5, E = 256, V = 50;
    struct dev *devs[2] = {gpu, cpu};
    float *out[2][8];
    int32_t am[2][T];
    const size_t rb = kq_row_bytes(KQ_Q8_0, E);
    uint8_t *wemb = malloc(rb * V);
    fill_weights(wemb, KQ_Q8_0, E, V);
    int32_t tok[5] = {3, 49, 0, 7, 7}, seq[5] = {0};
    int64_t pos[5] = {0, 1, 2, 3, 4};
    float *x0 = frands(T * E), *add = frands(T * E), *nw = frands(E), *u = frands(T * E);
    /* GDN: one run of T tokens, Hk = 1, Hv = 2, S = 16, K = 4, two groups */
    const int64_t Hk = 1, Hv = 2, S = 16, K = 4, C = 2 * Hk * S + Hv * S, G = 2;
    const int64_t conv_e = (K - 1) * C, st_n = conv_e + Hv * S * S;
    float *qkv = frands(T * C), *z = frands(T * Hv * S), *bl = frands(T * Hv), *al = frands(T * Hv);
    float *alog = frands(Hv), *dtb = frands(Hv), *cw = frands(C * K), *gw = frands(S);
    float *st0 = frands(G * st_n);
    const int64_t Nx = 8, k = 2;
    float *lg = frands(T * Nx), *eout = frands(T * k * E), *sh = frands(T * E), *shg = frands(T);
    for (int i = 0; i < 2; i++) {
        struct dev *d = devs[i];
        struct arena a;
        arena_init(&a, d);
        struct dev_run run = {0, (int32_t)T, 0, 0};
        struct dev_batch b = {.T = T,
                              .n_runs = 1,
                              .token = put(&a, tok, sizeof tok),
                              .seq = put(&a, seq, sizeof seq),
                              .pos = put(&a, pos, sizeof pos),
                              .runs = put(&a, &run, sizeof run)};
        struct dev_mat w = {put(&a, wemb, rb * V), KQ_Q8_0, E, V, rb};
        float *x = room(&a, T * E * 4), *y = room(&a, T * 2 * E * 4);
        dev_embed(d, &w, &b, x);
        out[i][0] = malloc(T * E * 4);
        get(&a, out[i][0], x, T * E * 4);
        float *xr = put(&a, x0, T * E * 4);
        struct dev_norm nm = {xr, put(&a, add, T * E * 4), put(&a, nw, E * 4), y, T, E, E, E, 1e-6f};
        dev_rmsnorm(d, &nm);
        nm.add = NULL, nm.ld_y = 2 * E, nm.y = y + E; /* the MTP concat's second half */
        dev_rmsnorm(d, &nm);
        out[i][1] = malloc(T * 2 * E * 4);
        get(&a, out[i][1], y, T * 2 * E * 4);
        float *g = put(&a, x0, T * E * 4);
        dev_swiglu(d, g, put(&a, u, T * E * 4), T, E);
        out[i][2] = malloc(T * E * 4);
        get(&a, out[i][2], g, T * E * 4);
        int32_t *ai = room(&a, T * 4);
        dev_argmax(d, g, T, E, ai, NULL);
        get(&a, am[i], ai, T * 4);
        struct dev_gdn gd = {.b = &b,
                             .u = put(&a, qkv, T * C * 4),
                             .y = room(&a, T * C * 4),
                             .z = put(&a, z, T * Hv * S * 4),
                             .o = room(&a, T * Hv * S * 4),
                             .bl = put(&a, bl, T * Hv * 4),
                             .al = put(&a, al, T * Hv * 4),
                             .beta = room(&a, T * Hv * 4),
                             .decay = room(&a, T * Hv * 4),
                             .a_log = put(&a, alog, Hv * 4),
                             .dt_bias = put(&a, dtb, Hv * 4),
                             .conv_w = put(&a, cw, C * K * 4),
                             .norm_w = put(&a, gw, S * 4),
                             .C = C, .S = S, .Hk = Hk, .Hv = Hv, .conv_k = K, .eps = 1e-6f,
                             .st = {put(&a, st0, G * st_n * 4), st_n, st_n, conv_e, G}};
        dev_gdn_gates(d, &gd);
        dev_conv1d(d, &gd);
        dev_gdn(d, &gd);
        out[i][3] = malloc(T * Hv * S * 4);
        get(&a, out[i][3], gd.o, T * Hv * S * 4);
        out[i][4] = malloc(G * st_n * 4);
        get(&a, out[i][4], gd.st.base, G * st_n * 4);
        struct dev_moe m = {.T = T, .n_expert = Nx, .k = k, .E = E,
                            .logits = put(&a, lg, T * Nx * 4),
                            .route_w = room(&a, T * k * 4),
                            .route_e = room(&a, T * k * 4),
                            .slot = room(&a, T * k * 4),
                            .e_off = room(&a, (Nx + 1) * 4),
                            .e_row = room(&a, T * k * 4),
                            .eout = put(&a, eout, T * k * E * 4),
                            .sh = put(&a, sh, T * E * 4),
                            .sh_gate = put(&a, shg, T * 4),
                            .out = room(&a, T * E * 4)};
        dev_moe_route(d, &m);
        dev_moe_combine(d, &m);
        out[i][5] = malloc(T * E * 4);
        get(&a, out[i][5], m.out, T * E * 4);
        dev_buf_free(d, a.b);
    }
    check("embed q8_0", out[0][0], out[1][0], T * E, 1e-6, passes, fails);
    check("rmsnorm + add, and strided", out[0][1], out[1][1], T * 2 * E, 1e-5, passes, fails);
    check("swiglu", out[0][2], out[1][2], T * E, 1e-5, passes, fails);
    check("gdn gates + conv1d + gdn: output", out[0][3], out[1][3], T * Hv * S, 1e-4, passes,
          fails);
    check("gdn: state and snapshot group", out[0][4], out[1][4], G * st_n, 1e-4, passes, fails);
    check("moe route + combine", out[0][5], out[1][5], T * E, 1e-5, passes, fails);
    const bool same = memcmp(am[0], am[1], sizeof am[0]) == 0;
    printf("%s argmax\n", same ? "ok  " : "FAIL");
    same ? (*passes)++ : (*fails)++;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 6; j++)
            free(out[i][j]);
    void *h[] = {wemb, x0, add, nw, u, qkv, z, bl, al, alog, dtb, cw, gw, st0, lg, eout, sh, shg};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        free(h[i]);
}

/* The rest of the forward ops: RoPE tables, q/k norm + RoPE + KV store and gated GQA attention
 * over two sequences (one from position 0, one after 3 cached rows), the shared-expert gate,
 * the MoE gather, products by expert id (two tensors, an expert without rows, an extra
 * product), row gathers (in place and not) and the in-place scatter. */
static void test_ops2(struct dev *gpu, struct dev *cpu, int *passes, int *fails)
{
    enum { T = 5, NO = 9 };
    const int64_t H = 4, Hkv = 2, D = 32, n_rot = 16, n_ctx = 8, n_seq = 2, kvd = Hkv * D;
    const int64_t q_ld = H * 2 * D, E = 64, W = 40, NX = 4, NS = 6, n_out[2] = {32, 48};
    struct dev *devs[2] = {gpu, cpu};
    float *out[2][NO];
    int32_t seq[T] = {0, 0, 0, 1, 1}, e_row[2 * T] = {3, 0, 1, 4, 2, 2, 0, 1, 4, 3};
    int64_t pos[T] = {0, 1, 2, 3, 4};
    int32_t e_off[5] = {0, 2, 2, 5, 6}, gi[6] = {1, 1, 3, 5, 5, 5}, go[3] = {4, 0, 2};
    int32_t si[4] = {0, 2, 3, 5};
    float *q0 = frands(T * q_ld), *k0 = frands(T * kvd), *v0 = frands(T * kvd);
    float *qn = frands(D), *kn = frands(D), *cache = frands(2 * n_seq * n_ctx * kvd);
    float *gw = frands(E), *gx = frands(T * E), *rows = frands(NS * W), *xid = frands(NS * 256);
    const size_t rb = kq_row_bytes(KQ_F16, 256);
    uint8_t *wid[2] = {malloc(rb * n_out[0] * NX), malloc(rb * n_out[1] * NX)};
    fill_weights(wid[0], KQ_F16, 256, n_out[0] * NX);
    fill_weights(wid[1], KQ_F16, 256, n_out[1] * NX);
    const size_t osz[NO] = {T * n_rot, T * q_ld, 2 * n_seq * n_ctx * kvd, T * H * D, T, 2 * T * E,
                            NS * (n_out[0] + n_out[1]) + 3 * n_out[0], NS * W + 3 * W, NS * W};
    for (int i = 0; i < 2; i++) {
        struct dev *d = devs[i];
        struct arena a;
        arena_init(&a, d);
        for (int j = 0; j < NO; j++)
            out[i][j] = malloc(osz[j] * 4);
        dev_reserve_attn(d, n_ctx, H / Hkv);
        struct dev_batch b = {.T = T, .token = NULL, .seq = put(&a, seq, sizeof seq),
                              .pos = put(&a, pos, sizeof pos)};
        float *cs = room(&a, T * n_rot * 4), *kc = put(&a, cache, 2 * n_seq * n_ctx * kvd * 4);
        dev_rope_table(d, &b, n_rot, 10000.0f, cs);
        get(&a, out[i][0], cs, T * n_rot * 4);
        struct dev_attn at = {.b = &b, .q = put(&a, q0, T * q_ld * 4),
                              .k = put(&a, k0, T * kvd * 4), .v = put(&a, v0, T * kvd * 4),
                              .out = room(&a, T * H * D * 4), .q_ld = q_ld, .n_head = H,
                              .n_head_kv = Hkv, .head_dim = D, .n_rot = n_rot,
                              .q_norm = put(&a, qn, D * 4), .k_norm = put(&a, kn, D * 4),
                              .cs = cs, .gated = true, .eps = 1e-6f, .scale = 0.17f,
                              .kv = {kc, kc + n_seq * n_ctx * kvd, kvd, n_ctx * kvd}};
        dev_attn_store(d, &at);
        dev_attn(d, &at);
        get(&a, out[i][1], at.q, T * q_ld * 4);
        get(&a, out[i][2], kc, 2 * n_seq * n_ctx * kvd * 4);
        get(&a, out[i][3], at.out, T * H * D * 4);
        float *sg = room(&a, T * 4);
        dev_shexp_gate(d, put(&a, gw, E * 4), put(&a, gx, T * E * 4), T, E, sg);
        get(&a, out[i][4], sg, T * 4);
        struct dev_moe m = {.T = T, .k = 2, .E = E, .e_row = put(&a, e_row, sizeof e_row),
                            .xn = put(&a, gx, T * E * 4), .gath = room(&a, 2 * T * E * 4)};
        dev_moe_gather(d, &m);
        get(&a, out[i][5], m.gath, 2 * T * E * 4);
        float *yid = room(&a, osz[6] * 4), *xd = put(&a, xid, NS * 256 * 4);
        const void *dw[2] = {put(&a, wid[0], rb * n_out[0] * NX), put(&a, wid[1], rb * n_out[1] * NX)};
        struct dev_mm extra = {{dw[0], KQ_F16, 256, n_out[0], rb}, xd, 3,
                               yid + NS * (n_out[0] + n_out[1])};
        struct dev_mm_id p = {.e_off = put(&a, e_off, sizeof e_off), .n_expert = NX, .n_slots = NS, .n_w = 2,
                              .w = {{dw[0], KQ_F16, 256, n_out[0], rb},
                                    {dw[1], KQ_F16, 256, n_out[1], rb}},
                              .expert_bytes = {rb * n_out[0], rb * n_out[1]}, .x = xd,
                              .x_ld = 256, .y = {yid, yid + NS * n_out[0]}, .extra = &extra,
                              .n_extra = 1};
        dev_matmul_id(d, &p);
        get(&a, out[i][6], yid, osz[6] * 4);
        float *r = put(&a, rows, NS * W * 4), *g2 = room(&a, 3 * W * 4);
        dev_gather_rows(d, g2, r, put(&a, go, sizeof go), 3, W); /* not in place, first */
        dev_gather_rows(d, r, r, put(&a, gi, sizeof gi), NS, W);
        get(&a, out[i][7], r, NS * W * 4);
        get(&a, out[i][7] + NS * W, g2, 3 * W * 4);
        r = put(&a, rows, NS * W * 4);
        dev_scatter_rows(d, r, r, put(&a, si, sizeof si), 4, W);
        get(&a, out[i][8], r, NS * W * 4);
        dev_buf_free(d, a.b);
    }
    static const char *const what[NO] = {"rope table",
                                         "attn store: q normed + rotated",
                                         "attn store: kv cache rows",
                                         "attn (gated, gqa 4/2, 2 seqs)",
                                         "shexp gate",
                                         "moe gather",
                                         "matmul_id f16 (2 tensors + extra)",
                                         "gather rows (in place and not)",
                                         "scatter rows (in place)"};
    static const double tol[NO] = {1e-6, 1e-5, 1e-5, 1e-4, 1e-6, 0, 1e-4, 0, 0};
    for (int j = 0; j < NO; j++)
        check(what[j], out[0][j], out[1][j], (int64_t)osz[j], tol[j], passes, fails);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < NO; j++)
            free(out[i][j]);
    void *h[] = {q0, k0, v0, qn, kn, cache, gw, gx, rows, xid, wid[0], wid[1]};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        free(h[i]);
}

/* Graphs: a recorded op runs only when the graph is launched, then on the contents its input
 * buffers have at the launch (the bits of a direct launch); a recording that uploads (a host
 * round trip) is spoiled: graph_end gives NULL. */
static void test_graph(struct dev *gpu, int *passes, int *fails)
{
    const int64_t n = 1000;
    struct dev_buf *b = NULL;
    float *g = NULL;
    if (dev_buf_alloc(gpu, (size_t)(4 * n) * 4, 256, &b, (void **)&g)) {
        printf("FAIL graph: no buffer\n");
        (*fails)++;
        return;
    }
    float *u = g + n, *g2 = g + 2 * n, *u2 = g + 3 * n;
    float *h0 = malloc(n * 4), *h1 = malloc(n * 4), *hu = malloc(n * 4), *r0 = malloc(n * 4),
          *r1 = malloc(n * 4);
    for (int64_t i = 0; i < n; i++)
        h0[i] = frand(), h1[i] = frand(), hu[i] = frand();
    dev_upload(gpu, g, h0, n * 4);
    dev_upload(gpu, u, hu, n * 4);
    dev_graph_begin(gpu);
    dev_swiglu(gpu, g, u, 1, n);
    struct dev_graph *gr = dev_graph_end(gpu);
    dev_download(gpu, r0, g, n * 4);
    dev_sync(gpu);
    bool ok = gr && memcmp(r0, h0, n * 4) == 0; /* recorded, not run */
    dev_upload(gpu, g, h1, n * 4);
    dev_upload(gpu, g2, h1, n * 4);
    dev_upload(gpu, u2, hu, n * 4);
    if (gr)
        dev_graph_launch(gpu, gr);
    dev_swiglu(gpu, g2, u2, 1, n);
    dev_download(gpu, r0, g, n * 4);
    dev_download(gpu, r1, g2, n * 4);
    dev_sync(gpu);
    ok = ok && memcmp(r0, r1, n * 4) == 0 && memcmp(r0, h1, n * 4) != 0;
    dev_graph_begin(gpu);
    dev_upload(gpu, g, h0, n * 4);
    struct dev_graph *spoiled = dev_graph_end(gpu);
    ok = ok && spoiled == NULL;
    printf("%s graph: replayed on new inputs = direct launch; an upload spoils a recording\n",
           ok ? "ok  " : "FAIL");
    ok ? (*passes)++ : (*fails)++;
    dev_graph_destroy(gpu, gr);
    dev_graph_destroy(gpu, spoiled);
    dev_buf_free(gpu, b);
    free(h0), free(h1), free(hu), free(r0), free(r1);
}

int main(void)
{
    char err[256] = "";
    struct dev *gpu = NULL, *cpu = NULL;
    if (dev_cuda_create(0, &gpu, err, sizeof err)) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    if (dev_cpu_create(1, NULL, &cpu, err, sizeof err)) {
        printf("FAIL: cpu device: %s\n", err);
        return 1;
    }
    static const enum kq_type types[] = {KQ_F32, KQ_F16, KQ_BF16, KQ_Q8_0,
                                         KQ_Q4_0, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K};
    static const int64_t toks[] = {1, 4, 37};
    const int64_t n = 512, n_out = 123;
    dev_reserve(cpu, 64, n);
    int fails = 0, passes = 0;
    for (int ti = 0; ti < 8; ti++) {
        const enum kq_type t = types[ti];
        const size_t rb = kq_row_bytes(t, n);
        uint8_t *w = malloc(rb * n_out);
        float *row = malloc(n * sizeof *row);
        for (int64_t r = 0; r < n_out; r++) {
            for (int64_t i = 0; i < n; i++)
                row[i] = frand();
            kq_quantize_row(t, row, w + r * rb, n);
        }
        struct dev_mat m = {w, t, n, n_out, rb};
        for (int k = 0; k < 3; k++) {
            const int64_t T = toks[k];
            float *x = malloc((size_t)(T * n) * 4), *yc = malloc((size_t)(T * n_out) * 4);
            float *yg = malloc((size_t)(T * n_out) * 4);
            for (int64_t i = 0; i < T * n; i++)
                x[i] = frand();
            mm_one(cpu, &m, x, T, yc);
            mm_one(gpu, &m, x, T, yg);
            const bool fl = t == KQ_F32 || t == KQ_F16 || t == KQ_BF16;
            const double tol = !fl ? 3e-2 : T <= 8 || t == KQ_F32 ? 1e-4 : t == KQ_BF16 ? 1e-2 : 2e-3;
            const double e = rel_err(yg, yc, T * n_out);
            printf("%s dev_matmul %-5s T %2lld vs cpu device  err %.3e  tol %.1e\n",
                   e <= tol ? "ok  " : "FAIL", kq_type_name(t), (long long)T, e, tol);
            e <= tol ? passes++ : fails++;
            free(x), free(yc), free(yg);
        }
        free(w), free(row);
    }
    /* matmul_multi (the NULL fallback: one matmul per product) with two products sharing x */
    {
        const int64_t T = 2;
        const size_t rb = kq_row_bytes(KQ_Q8_0, n);
        uint8_t *w = malloc(rb * n_out);
        float *x = malloc((size_t)(T * n) * 4), row[512];
        for (int64_t r = 0; r < n_out; r++) {
            for (int64_t i = 0; i < n; i++)
                row[i] = frand();
            kq_quantize_row(KQ_Q8_0, row, w + r * rb, n);
        }
        for (int64_t i = 0; i < T * n; i++)
            x[i] = frand();
        float *a = malloc((size_t)(T * n_out) * 4), *b = malloc((size_t)(T * 40) * 4);
        float *ra = malloc((size_t)(T * n_out) * 4), *rbuf = malloc((size_t)(T * 40) * 4);
        struct dev_mm mm[2] = {{{w, KQ_Q8_0, n, n_out, rb}, x, T, a},
                               {{w, KQ_Q8_0, n, 40, rb}, x, T, b}};
        mm_host(gpu, mm, 2);
        mm[0].y = ra, mm[1].y = rbuf;
        mm_host(cpu, mm, 2);
        const double e = fmax(rel_err(a, ra, T * n_out), rel_err(b, rbuf, T * 40));
        printf("%s dev_matmul_multi q8_0 (2 products, one view) err %.3e  tol 3.0e-02\n",
               e <= 3e-2 ? "ok  " : "FAIL", e);
        e <= 3e-2 ? passes++ : fails++;
        free(w), free(x), free(a), free(b), free(ra), free(rbuf);
    }
    test_ops(gpu, cpu, &passes, &fails);
    test_ops2(gpu, cpu, &passes, &fails);
    test_graph(gpu, &passes, &fails);
    dev_destroy(gpu);
    dev_destroy(cpu);
    printf("%d passed, %d failed\n", passes, fails);
    return fails ? 1 : 0;
}

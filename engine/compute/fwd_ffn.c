/*
 * fwd_ffn — the feed-forward half of a block on one device: dense SwiGLU (docs/models.md
 * 5.5) or a mixture of experts with a gated shared expert (5.6). Input xn [T][E], output
 * out [T][E] (partial over a tensor-parallel group; fwd.c reduces it after the weighted
 * expert sum).
 *
 * MoE step: router and shared gate/up in one device call; top-k routing; the routed rows
 * gathered by expert ("slots"); every active expert's gate/up in one call, SwiGLU, every down
 * plus the shared down in one call; the weighted sum per row. Only routed experts are read.
 *
 * Invariants: a row's arithmetic never depends on the rest of the batch or on the split.
 * Thread: the engine thread (or a group's host thread); items run on the device's workers.
 */
#include <string.h>

#include "fwd_impl.h"        // defines: struct fwd_dev, fwd__mm, fwd__matmul, fwd__par_items
#include "kernels/cpu/kop.h" // defines: kop_swiglu, kop_axpy, kop_sigmoid, kop_moe_route

/* ============================================================================================
 * Helpers
 * ========================================================================================== */

/* SwiGLU of n rows: g = silu(g) * u, rows of w elements. */
struct glu_arg {
    float *g;
    const float *u;
    int64_t w;
};

static void glu_items(struct fwd_dev *f, const void *arg, int64_t t0, int64_t t1)
{
    const struct glu_arg *a = arg;
    for (int64_t t = t0; t < t1; t++)
        kop_swiglu(a->g + t * a->w, a->u + t * a->w, a->w);
}

static void swiglu_rows(struct fwd_dev *f, float *g, const float *u, int64_t n, int64_t w)
{
    struct glu_arg a = {.g = g, .u = u, .w = w};
    fwd__par_items(f, n, w, glu_items, &a);
}

/* Expert e of a 3-D expert tensor as a matrix. */
static struct dev_mat mat_expert(const struct model_w *w, int64_t e)
{
    struct dev_mat d = fwd__mat(w);
    d.data = (const char *)w->data + (size_t)e * w->nb2;
    return d;
}

/* ============================================================================================
 * Dense SwiGLU (5.5) and MoE with a gated shared expert (5.6)
 * ========================================================================================== */

static void dense_ffn(struct fwd_dev *f, const struct model_layer *l, const float *xn, float *out)
{
    const int64_t T = f->b->n_tokens, ff = l->ffn_gate.ne[1];
    struct dev_mm mm[2] = {fwd__mm(&l->ffn_gate, xn, T, f->big0),
                           fwd__mm(&l->ffn_up, xn, T, f->big1)};
    dev_matmul_multi(f->dev, mm, 2);
    swiglu_rows(f, f->big0, f->big1, T, ff);
    fwd__matmul(f, &l->ffn_down, f->big0, T, out);
}

/* Softmax over all experts, top-k (ties to the lower index), renormalised weights; then each
 * row's choices sorted by expert, and the slots: the rows of expert e are slots
 * e_off[e] .. e_off[e + 1] - 1, in row order. */
static void moe_route(struct fwd_dev *f, const float *logits, int64_t T)
{
    const int64_t Nx = f->m->hp.n_expert, k = f->m->hp.n_expert_used;
    for (int64_t t = 0; t < T; t++)
        kop_moe_route(logits + t * Nx, Nx, k, f->route_e + t * k, f->route_w + t * k);
    memset(f->e_off, 0, (size_t)(Nx + 1) * sizeof *f->e_off);
    for (int64_t i = 0; i < T * k; i++)
        f->e_off[f->route_e[i] + 1]++;
    for (int64_t e = 0; e < Nx; e++)
        f->e_off[e + 1] += f->e_off[e];
    for (int64_t t = 0; t < T; t++) /* rows in order: each expert's slots follow row order */
        for (int64_t i = 0; i < k; i++) {
            int32_t s = f->e_off[f->route_e[t * k + i]]++;
            f->slot[t * k + i] = s;
            f->e_row[s] = (int32_t)t;
        }
    for (int64_t e = Nx; e > 0; e--) /* the increments moved every start to the next one's */
        f->e_off[e] = f->e_off[e - 1];
    f->e_off[0] = 0;
}

static void gather_items(struct fwd_dev *f, const void *arg, int64_t s0, int64_t s1)
{
    const float *xn = arg;
    const int64_t E = f->m->hp.n_embd;
    for (int64_t s = s0; s < s1; s++)
        memcpy(f->gath + s * E, xn + f->e_row[s] * E, (size_t)E * sizeof(float));
}

/* Per row: the shared expert's output times its sigmoid gate, then the routed experts'
 * outputs by weight, in expert order. */
static void combine_items(struct fwd_dev *f, const void *arg, int64_t t0, int64_t t1)
{
    const int64_t E = f->m->hp.n_embd, k = f->m->hp.n_expert_used;
    float *out = (float *)arg;
    for (int64_t t = t0; t < t1; t++) {
        const float s = f->sh_gate[t];
        float *o = out + t * E;
        const float *sh = f->big2 + t * E;
        for (int64_t i = 0; i < E; i++)
            o[i] = sh[i] * s;
        for (int64_t i = 0; i < k; i++)
            kop_axpy(o, f->route_w[t * k + i], f->eout + f->slot[t * k + i] * E, E);
    }
}

/* The products of every expert with rows: gate and up from its gathered slots (down = false;
 * a decode row reads xn itself), or down from its SwiGLU rows plus the shared expert's down
 * (down = true); in calls of at most DEV_MM_MAX products. */
static void moe_experts(struct fwd_dev *f, const struct model_layer *l, const float *xn, bool down)
{
    const int64_t E = f->m->hp.n_embd, ff = l->gate_exps.ne[1], T = f->b->n_tokens;
    struct dev_mm mm[DEV_MM_MAX];
    int n = 0;
    for (int64_t e = 0; e < f->m->hp.n_expert; e++) {
        const int64_t s0 = f->e_off[e], ns = f->e_off[e + 1] - s0;
        if (ns == 0)
            continue;
        if (n + 2 > DEV_MM_MAX) {
            dev_matmul_multi(f->dev, mm, n);
            n = 0;
        }
        if (down) {
            mm[n++] = (struct dev_mm){mat_expert(&l->down_exps, e), f->eg + s0 * ff, ns,
                                      f->eout + s0 * E};
        } else {
            const float *x = T == 1 ? xn : f->gath + s0 * E; /* decode: every expert reads xn */
            mm[n++] = (struct dev_mm){mat_expert(&l->gate_exps, e), x, ns, f->eg + s0 * ff};
            mm[n++] = (struct dev_mm){mat_expert(&l->up_exps, e), x, ns, f->eu + s0 * ff};
        }
    }
    if (down && n + 1 > DEV_MM_MAX) {
        dev_matmul_multi(f->dev, mm, n);
        n = 0;
    }
    if (down) /* the shared expert's down projection rides along */
        mm[n++] = fwd__mm(&l->down_shexp, f->big0, T, f->big2);
    dev_matmul_multi(f->dev, mm, n);
}

/*
 * Router and the shared expert's gate/up in one device call; routing; the routed rows
 * gathered by expert; every active expert's gate/up in one call, SwiGLU, every down (and the
 * shared down) in one call; then the weighted sum per row. Only routed experts are read.
 */
static void moe_ffn(struct fwd_dev *f, const struct model_layer *l, const float *xn, float *out)
{
    const struct model_hparams *hp = &f->m->hp;
    const int64_t T = f->b->n_tokens, E = hp->n_embd, k = hp->n_expert_used;
    const int64_t ffs = l->gate_shexp.ne[1], ff = l->gate_exps.ne[1];
    struct dev_mm mm[3] = {fwd__mm(&l->gate_inp, xn, T, f->small), /* [T][Nx] router logits */
                           fwd__mm(&l->gate_shexp, xn, T, f->big0),
                           fwd__mm(&l->up_shexp, xn, T, f->big1)};
    dev_matmul_multi(f->dev, mm, 3);
    moe_route(f, f->small, T);
    const float *wsh = l->gate_inp_shexp.data;
    for (int64_t t = 0; t < T; t++) {
        double dot = 0.0;
        for (int64_t i = 0; i < E; i++)
            dot += (double)wsh[i] * xn[t * E + i];
        f->sh_gate[t] = kop_sigmoid((float)dot);
    }
    if (T > 1)
        fwd__par_items(f, T * k, E, gather_items, xn);
    moe_experts(f, l, xn, false);
    swiglu_rows(f, f->eg, f->eu, T * k, ff);
    swiglu_rows(f, f->big0, f->big1, T, ffs);
    moe_experts(f, l, xn, true);
    fwd__par_items(f, T, E * (k + 1), combine_items, out);
}

void fwd__ffn(struct fwd_dev *f, const struct model_layer *l, const float *xn, float *out)
{
    if (f->m->hp.n_expert)
        moe_ffn(f, l, xn, out);
    else
        dense_ffn(f, l, xn, out);
}

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
 * Every step is a device op (device.h) on device addresses; the CPU device's versions are in
 * dev_cpu_ops.c (routing, gather, expert products by id, combine).
 * Thread: the engine thread (or a group's host thread), driving its device.
 */
#include "fwd_impl.h" // defines: struct fwd_dev, fwd__mm, fwd__matmul

/* ============================================================================================
 * Dense SwiGLU (5.5) and MoE with a gated shared expert (5.6)
 * ========================================================================================== */

static void dense_ffn(struct fwd_dev *f, const struct model_layer *l, const float *xn, float *out)
{
    const int64_t T = f->b->n_tokens, ff = l->ffn_gate.ne[1];
    struct dev_mm mm[2] = {fwd__mm(&l->ffn_gate, xn, T, f->big0),
                           fwd__mm(&l->ffn_up, xn, T, f->big1)};
    dev_matmul_multi(f->dev, mm, 2);
    dev_swiglu(f->dev, f->big0, f->big1, T, ff);
    fwd__matmul(f, &l->ffn_down, f->big0, T, out);
}

/* The products of every expert with rows: gate and up from its gathered slots (a decode row
 * reads xn itself), or down from its SwiGLU rows plus the shared expert's down riding along. */
static void moe_experts(struct fwd_dev *f, const struct model_layer *l, const float *xn, bool down)
{
    const int64_t E = f->m->hp.n_embd, T = f->b->n_tokens;
    struct dev_mm shared = fwd__mm(&l->down_shexp, f->big0, T, f->big2);
    struct dev_mm_id p = {
        .e_off = f->e_off, .n_expert = f->m->hp.n_expert, .n_slots = T * f->m->hp.n_expert_used};
    if (down) {
        p.n_w = 1;
        p.w[0] = fwd__mat(&l->down_exps);
        p.expert_bytes[0] = l->down_exps.nb2;
        p.x = f->eg;
        p.x_ld = l->gate_exps.ne[1];
        p.y[0] = f->eout;
        p.extra = &shared;
        p.n_extra = 1;
    } else {
        p.n_w = 2;
        p.w[0] = fwd__mat(&l->gate_exps);
        p.w[1] = fwd__mat(&l->up_exps);
        p.expert_bytes[0] = l->gate_exps.nb2;
        p.expert_bytes[1] = l->up_exps.nb2;
        p.x = T == 1 ? xn : f->gath; /* decode: every expert reads xn */
        p.x_ld = T == 1 ? 0 : E;
        p.slot = T == 1 ? NULL : f->slot; /* each row gathered k times: prepared once */
        p.k = f->m->hp.n_expert_used;
        p.y[0] = f->eg;
        p.y[1] = f->eu;
    }
    dev_matmul_id(f->dev, &p);
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
    struct dev_moe m = {.T = T,
                        .n_expert = hp->n_expert,
                        .k = k,
                        .E = E,
                        .logits = f->small,
                        .route_w = f->route_w,
                        .route_e = f->route_e,
                        .slot = f->slot,
                        .e_off = f->e_off,
                        .e_row = f->e_row,
                        .xn = xn,
                        .gath = f->gath,
                        .eout = f->eout,
                        .sh = f->big2,
                        .sh_gate = f->sh_gate,
                        .out = out};
    dev_moe_route(f->dev, &m);
    dev_shexp_gate(f->dev, l->gate_inp_shexp.data, xn, T, E, f->sh_gate);
    if (T > 1)
        dev_moe_gather(f->dev, &m);
    moe_experts(f, l, xn, false);
    dev_swiglu(f->dev, f->eg, f->eu, T * k, ff);
    dev_swiglu(f->dev, f->big0, f->big1, T, ffs);
    moe_experts(f, l, xn, true);
    dev_moe_combine(f->dev, &m);
}

void fwd__ffn(struct fwd_dev *f, const struct model_layer *l, const float *xn, float *out)
{
    if (f->m->hp.n_expert)
        moe_ffn(f, l, xn, out);
    else
        dense_ffn(f, l, xn, out);
}

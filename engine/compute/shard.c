/*
 * shard — tensor-parallel shard plans and shard models (contract and split rules in shard.h).
 *
 * A shard model is a shallow copy of the full model whose split tensors point at buffers it
 * owns (listed in owned[]) and whose per-layer dims are the device's slice. Everything the
 * forward pass reads from a layer goes through those dims, so the same code runs a shard.
 *
 * Thread: the start-up thread.
 */
#include "shard.h" // defines: shard_build, shard_free

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"      // defines: dev_buf_alloc, dev_upload, dev_sync
#include "engine/util.h" // defines: xcalloc, xmalloc, dd_errf

/* A slice [lo, hi) of one split dimension, in units of the split (heads, channels, ...). */
struct slice {
    int64_t lo, hi;
};

/* Device rank's slice of length L in units of granularity g among n devices, rotated by rot:
 * boundaries L*(j+1)/n rounded down to g, the last piece takes the remainder. */
static struct slice split(int64_t L, int64_t g, int n, int rank, int rot)
{
    int j = ((rank - rot) % n + n) % n;
    int64_t lo = j == 0 ? 0 : L * j / n / g * g;
    int64_t hi = j == n - 1 ? L : L * (j + 1) / n / g * g;
    return (struct slice){lo, hi > lo ? hi : lo};
}

/* Smallest m >= 1 with (m * unit) % block == 0. */
static int64_t gran(int64_t unit, int64_t block)
{
    int64_t m = 1;
    while ((m * unit) % block != 0)
        m++;
    return m;
}

static int64_t lcm(int64_t a, int64_t b)
{
    int64_t x = a, y = b;
    while (y) {
        int64_t t = x % y;
        x = y;
        y = t;
    }
    return a / x * b;
}

struct builder {
    struct model *s;
    int64_t cap;
};

/* Record buffer p of `bytes` as the shard's (freed by shard_free). */
static void own_buffer(struct builder *bd, void *p, size_t bytes)
{
    struct model *s = bd->s;
    if (s->n_owned == bd->cap) {
        bd->cap = bd->cap ? bd->cap * 2 : 64;
        s->owned = xrealloc(s->owned, (size_t)bd->cap * sizeof *s->owned);
    }
    s->owned[s->n_owned++] = p;
    s->owned_bytes += bytes;
}

static void *own(struct builder *bd, size_t bytes)
{
    void *p = xaligned_alloc(bytes ? bytes : 64);
    own_buffer(bd, p, bytes);
    return p;
}

/* ============================================================================================
 * Cutting tensors
 * ========================================================================================== */

/* Keep output rows: for each expert (ne[2]) the concatenation of the row ranges segs[0..n). */
static void cut_rows(struct builder *bd, struct model_w *w, const struct slice *segs, int n)
{
    if (!w->data)
        return;
    int64_t rows = 0;
    for (int i = 0; i < n; i++)
        rows += segs[i].hi - segs[i].lo;
    struct model_w o = *w;
    char *dst = own(bd, (size_t)rows * w->nb1 * (size_t)w->ne[2]);
    o.data = dst;
    o.ne[1] = rows;
    o.nb2 = w->nb1 * (size_t)rows;
    for (int64_t e = 0; e < w->ne[2]; e++) {
        const char *src = (const char *)w->data + (size_t)e * w->nb2;
        for (int i = 0; i < n; i++) {
            size_t len = (size_t)(segs[i].hi - segs[i].lo) * w->nb1;
            memcpy(dst, src + (size_t)segs[i].lo * w->nb1, len);
            dst += len;
        }
    }
    *w = o;
}

/* Keep input columns (elements of ne0, whole quant blocks): the concatenation of segs. */
static int cut_cols(struct builder *bd, struct model_w *w, const struct slice *segs, int n,
                    char *err, size_t errlen)
{
    if (!w->data)
        return 0;
    const int64_t B = kq_block_elems(w->type);
    const size_t bb = kq_block_bytes(w->type);
    int64_t cols = 0;
    for (int i = 0; i < n; i++) {
        if (segs[i].lo == segs[i].hi)
            continue; /* an empty segment cuts nothing */
        if (segs[i].lo % B || segs[i].hi % B) {
            dd_errf(err, errlen,
                    "tensor parallelism: a slice of %lld..%lld columns cuts a %s "
                    "block of %lld",
                    (long long)segs[i].lo, (long long)segs[i].hi, kq_type_name(w->type),
                    (long long)B);
            return DD_EUNSUPPORTED;
        }
        cols += segs[i].hi - segs[i].lo;
    }
    struct model_w o = *w;
    o.ne[0] = cols;
    o.nb1 = kq_row_bytes(w->type, cols);
    o.nb2 = o.nb1 * (size_t)w->ne[1];
    char *dst = own(bd, o.nb2 * (size_t)w->ne[2]);
    o.data = dst;
    for (int64_t e = 0; e < w->ne[2]; e++)
        for (int64_t r = 0; r < w->ne[1]; r++) {
            const char *row = (const char *)w->data + (size_t)e * w->nb2 + (size_t)r * w->nb1;
            for (int i = 0; i < n; i++) {
                if (segs[i].lo == segs[i].hi)
                    continue;
                size_t len = (size_t)((segs[i].hi - segs[i].lo) / B) * bb;
                memcpy(dst, row + (size_t)(segs[i].lo / B) * bb, len);
                dst += len;
            }
        }
    *w = o;
    return 0;
}

/* Keep elements of a 1-D F32 tensor [N]: the concatenation of segs. */
static void cut_vec(struct builder *bd, struct model_w *w, const struct slice *segs, int n)
{
    int64_t len = 0;
    for (int i = 0; i < n; i++)
        len += segs[i].hi - segs[i].lo;
    float *dst = own(bd, (size_t)len * sizeof(float));
    const float *src = w->data;
    for (int i = 0, at = 0; i < n; i++) {
        memcpy(dst + at, src + segs[i].lo, (size_t)(segs[i].hi - segs[i].lo) * sizeof(float));
        at += (int)(segs[i].hi - segs[i].lo);
    }
    w->data = dst;
    w->ne[0] = len;
    w->nb1 = w->nb2 = (size_t)len * sizeof(float);
}

/* ============================================================================================
 * Per layer
 * ========================================================================================== */

static int shard_attn(struct builder *bd, struct model_layer *l, const struct model_hparams *hp,
                      int n, int rank, int rot, char *err, size_t errlen)
{
    const int64_t D = hp->head_dim, grp = hp->n_head / hp->n_head_kv;
    struct slice kv = split(hp->n_head_kv, gran(grp * D, kq_block_elems(l->wo.type)), n, rank, rot);
    const int64_t qs = hp->attn_gated ? 2 * D : D;
    struct slice q = {kv.lo * grp * qs, kv.hi * grp * qs}, k = {kv.lo * D, kv.hi * D};
    struct slice o = {kv.lo * grp * D, kv.hi * grp * D};
    cut_rows(bd, &l->wq, &q, 1);
    cut_rows(bd, &l->wk, &k, 1);
    cut_rows(bd, &l->wv, &k, 1);
    l->n_head_kv = kv.hi - kv.lo;
    l->n_head = l->n_head_kv * grp;
    return cut_cols(bd, &l->wo, &o, 1, err, errlen);
}

/* Value heads that read key heads [k.lo, k.hi), as segments of value-head indices. */
static int value_segments(const struct model_hparams *hp, struct slice k, struct slice *out)
{
    const int64_t Hk = hp->ssm_hk, r = hp->ssm_hv / Hk;
    if (!hp->kmap_mod) { /* qwen3next: head h reads key head h / r */
        out[0] = (struct slice){k.lo * r, k.hi * r};
        return 1;
    }
    int n = 0;
    for (int64_t j = 0; j < r; j++) { /* qwen35: head h reads key head h mod Hk */
        struct slice v = {j * Hk + k.lo, j * Hk + k.hi};
        if (n > 0 && out[n - 1].hi == v.lo)
            out[n - 1].hi = v.hi; /* adjacent (the whole key range): one segment */
        else
            out[n++] = v;
    }
    return n;
}

static struct slice scale(struct slice s, int64_t f, int64_t off)
{
    return (struct slice){off + s.lo * f, off + s.hi * f};
}

static int shard_gdn(struct builder *bd, struct model_layer *l, const struct model_hparams *hp,
                     int n, int rank, int rot, char *err, size_t errlen)
{
    const int64_t S = hp->ssm_s, Hk = hp->ssm_hk, r = hp->ssm_hv / Hk;
    const int64_t B = kq_block_elems(l->ssm_out.type);
    /* qwen35's tiled value heads put segment j at offset j * Hk * S: unless that is a whole
     * number of blocks, only the whole key range (merged into one segment) cuts cleanly */
    int64_t g = hp->kmap_mod ? ((Hk * S) % B ? Hk : gran(S, B)) : gran(r * S, B);
    struct slice k = split(Hk, g, n, rank, rot);
    struct slice vh[64], ch[66], vc[64];
    if (r > 64) {
        dd_errf(err, errlen, "tensor parallelism: more than 64 value heads per key head");
        return DD_EUNSUPPORTED;
    }
    int nv = value_segments(hp, k, vh);
    /* channels of attn_qkv / conv: q part, k part, then the v segments */
    ch[0] = scale(k, S, 0);
    ch[1] = scale(k, S, Hk * S);
    for (int i = 0; i < nv; i++) {
        ch[2 + i] = scale(vh[i], S, 2 * Hk * S);
        vc[i] = scale(vh[i], S, 0);
    }
    cut_rows(bd, &l->qkv, ch, 2 + nv);
    cut_rows(bd, &l->conv, ch, 2 + nv);
    cut_rows(bd, &l->gate, vc, nv);
    cut_vec(bd, &l->dt_bias, vh, nv);
    cut_vec(bd, &l->ssm_a, vh, nv);
    if (l->ba.data) {
        struct slice ba = scale(k, 2 * r, 0); /* grouped per key head: [b (r) | a (r)] */
        cut_rows(bd, &l->ba, &ba, 1);
    } else {
        cut_rows(bd, &l->beta, vh, nv);
        cut_rows(bd, &l->alpha, vh, nv);
    }
    l->ssm_hk = k.hi - k.lo;
    l->ssm_hv = l->ssm_hk * r;
    l->conv_ch = 2 * l->ssm_hk * S + l->ssm_hv * S;
    return cut_cols(bd, &l->ssm_out, vc, nv, err, errlen);
}

/* gate/up rows and down columns of one SwiGLU block of width F, with its own granularity. */
static int shard_mlp(struct builder *bd, struct model_w *gate, struct model_w *up,
                     struct model_w *down, int64_t F, int n, int rank, int rot, int64_t *local,
                     char *err, size_t errlen)
{
    if (!gate->data) {
        *local = 0;
        return 0;
    }
    struct slice f = split(F, lcm(kq_block_elems(down->type), 128), n, rank, rot);
    cut_rows(bd, gate, &f, 1);
    cut_rows(bd, up, &f, 1);
    *local = f.hi - f.lo;
    return cut_cols(bd, down, &f, 1, err, errlen);
}

static int shard_ffn(struct builder *bd, struct model_layer *l, const struct model_hparams *hp,
                     int n, int rank, int rot, char *err, size_t errlen)
{
    if (!hp->n_expert)
        return shard_mlp(bd, &l->ffn_gate, &l->ffn_up, &l->ffn_down, hp->n_ff, n, rank, rot,
                         &l->n_ff, err, errlen);
    int rc = shard_mlp(bd, &l->gate_exps, &l->up_exps, &l->down_exps, hp->n_ff_exp, n, rank, rot,
                       &l->n_ff_exp, err, errlen);
    return rc ? rc
              : shard_mlp(bd, &l->gate_shexp, &l->up_shexp, &l->down_shexp, hp->n_ff_shexp, n, rank,
                          rot, &l->n_ff_shexp, err, errlen);
}

/* ============================================================================================
 * Public
 * ========================================================================================== */

/* A shallow copy of m owning nothing yet (its layers array is its own). */
static struct model *shallow_copy(const struct model *m)
{
    struct model *s = xcalloc(1, sizeof *s);
    *s = *m;
    s->owned = NULL;
    s->n_owned = 0;
    s->owned_bytes = 0;
    s->is_shard = true;
    s->layers = xmalloc((size_t)m->hp.n_layer_all * sizeof *s->layers);
    memcpy(s->layers, m->layers, (size_t)m->hp.n_layer_all * sizeof *s->layers);
    return s;
}

int shard_build(const struct model *m, int n_dev, int rank, struct model **out, char *err,
                size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    struct model *s = shallow_copy(m);
    struct builder bd = {.s = s};
    int rc = 0, n_attn = 0, n_gdn = 0;
    for (int64_t il = 0; il < hp->n_layer_all && !rc; il++) {
        struct model_layer *l = &s->layers[il];
        int rot = (l->recurrent ? n_gdn++ : n_attn++) % n_dev;
        rc = l->recurrent ? shard_gdn(&bd, l, hp, n_dev, rank, rot, err, errlen)
                          : shard_attn(&bd, l, hp, n_dev, rank, rot, err, errlen);
        rc = rc ? rc : shard_ffn(&bd, l, hp, n_dev, rank, rot, err, errlen);
    }
    struct slice v = split(hp->n_vocab, 1, n_dev, rank, (int)(hp->n_layer % n_dev));
    cut_rows(&bd, &s->output, &v, 1);
    s->vocab_lo = v.lo;
    s->vocab_hi = v.hi;
    if (rc) {
        shard_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* The layer tensors that go through the device's matmul (the others are F32 vectors). */
static const size_t layer_mats[] = {
    offsetof(struct model_layer, wq),         offsetof(struct model_layer, wk),
    offsetof(struct model_layer, wv),         offsetof(struct model_layer, wo),
    offsetof(struct model_layer, qkv),        offsetof(struct model_layer, gate),
    offsetof(struct model_layer, beta),       offsetof(struct model_layer, alpha),
    offsetof(struct model_layer, ba),         offsetof(struct model_layer, ssm_out),
    offsetof(struct model_layer, ffn_gate),   offsetof(struct model_layer, ffn_up),
    offsetof(struct model_layer, ffn_down),   offsetof(struct model_layer, gate_inp),
    offsetof(struct model_layer, gate_exps),  offsetof(struct model_layer, up_exps),
    offsetof(struct model_layer, down_exps),  offsetof(struct model_layer, gate_inp_shexp),
    offsetof(struct model_layer, gate_shexp), offsetof(struct model_layer, up_shexp),
    offsetof(struct model_layer, down_shexp), offsetof(struct model_layer, eh_proj),
};

/* w rewritten in layout `to` into a buffer of the shard (when its rows are plain and dense). */
static void relayout(struct builder *bd, struct model_w *w, enum kq_type to)
{
    const int64_t rows = w->ne[1] * (w->ne[2] ? w->ne[2] : 1);
    if (!w->data || to == w->type || w->nb1 != kq_row_bytes(w->type, w->ne[0]) ||
        w->nb2 != w->nb1 * (size_t)w->ne[1])
        return;
    void *dst = xaligned_alloc(w->nb1 * (size_t)rows);
    if (!kq_repack_rows(w->type, to, w->data, dst, w->ne[0], rows)) {
        free(dst); /* not a pair the kernels convert: w stays as it is */
        return;
    }
    bool replaced = false; /* a split tensor's copy is the shard's already: swap it out */
    for (int64_t i = 0; i < bd->s->n_owned && !replaced; i++)
        if (bd->s->owned[i] == w->data) {
            free(bd->s->owned[i]);
            bd->s->owned[i] = dst;
            replaced = true;
        }
    if (!replaced)
        own_buffer(bd, dst, w->nb1 * (size_t)rows);
    w->data = dst;
    w->type = to;
}

size_t shard_relayout_bytes(const struct model *m, enum kq_type (*want)(void *ctx, enum kq_type t),
                            void *ctx, int *n)
{
    size_t bytes = 0;
    *n = 0;
    for (int64_t il = 0; il < m->hp.n_layer_all; il++)
        for (size_t i = 0; i < sizeof layer_mats / sizeof layer_mats[0]; i++) {
            const struct model_w *w = (const void *)((const char *)&m->layers[il] + layer_mats[i]);
            if (w->data && want(ctx, w->type) != w->type) {
                bytes += w->nb2 * (size_t)(w->ne[2] ? w->ne[2] : 1);
                ++*n;
            }
        }
    if (m->output.data && want(ctx, m->output.type) != m->output.type) {
        bytes += m->output.nb1 * (size_t)m->output.ne[1];
        ++*n;
    }
    return bytes;
}

int shard_relayout(const struct model *m, struct model **shard,
                   enum kq_type (*want)(void *ctx, enum kq_type t), void *ctx)
{
    int n;
    shard_relayout_bytes(*shard ? *shard : m, want, ctx, &n);
    if (n == 0)
        return 0;
    struct model *s = *shard ? *shard : shallow_copy(m);
    struct builder bd = {.s = s, .cap = s->n_owned};
    for (int64_t il = 0; il < m->hp.n_layer_all; il++)
        for (size_t i = 0; i < sizeof layer_mats / sizeof layer_mats[0]; i++) {
            struct model_w *w = (void *)((char *)&s->layers[il] + layer_mats[i]);
            relayout(&bd, w, want(ctx, w->type));
        }
    /* a tied LM head keeps sharing one buffer with the embedding (which get_rows dequantises) */
    const bool tied = s->output.data == s->tok_embd.data && s->output.type == s->tok_embd.type;
    relayout(&bd, &s->output, want(ctx, s->output.type));
    if (tied) {
        s->tok_embd.data = s->output.data;
        s->tok_embd.type = s->output.type;
    }
    *shard = s;
    return n;
}

/* ============================================================================================
 * Weights into device memory
 * ========================================================================================== */

/* Every weight view of a layer (the matrices and the f32 vectors). */
static const size_t layer_views[] = {
    offsetof(struct model_layer, attn_norm),
    offsetof(struct model_layer, ffn_norm),
    offsetof(struct model_layer, wq),
    offsetof(struct model_layer, wk),
    offsetof(struct model_layer, wv),
    offsetof(struct model_layer, wo),
    offsetof(struct model_layer, q_norm),
    offsetof(struct model_layer, k_norm),
    offsetof(struct model_layer, qkv),
    offsetof(struct model_layer, gate),
    offsetof(struct model_layer, conv),
    offsetof(struct model_layer, dt_bias),
    offsetof(struct model_layer, ssm_a),
    offsetof(struct model_layer, beta),
    offsetof(struct model_layer, alpha),
    offsetof(struct model_layer, ba),
    offsetof(struct model_layer, ssm_norm),
    offsetof(struct model_layer, ssm_out),
    offsetof(struct model_layer, ffn_gate),
    offsetof(struct model_layer, ffn_up),
    offsetof(struct model_layer, ffn_down),
    offsetof(struct model_layer, gate_inp),
    offsetof(struct model_layer, gate_exps),
    offsetof(struct model_layer, up_exps),
    offsetof(struct model_layer, down_exps),
    offsetof(struct model_layer, gate_inp_shexp),
    offsetof(struct model_layer, gate_shexp),
    offsetof(struct model_layer, up_shexp),
    offsetof(struct model_layer, down_shexp),
    offsetof(struct model_layer, eh_proj),
    offsetof(struct model_layer, enorm),
    offsetof(struct model_layer, hnorm),
    offsetof(struct model_layer, shared_head_norm),
};

#define N_LAYER_VIEWS (sizeof layer_views / sizeof layer_views[0])

/* The host bytes a view covers: its rows of every expert. */
static size_t view_bytes(const struct model_w *w)
{
    return w->nb2 * (size_t)(w->ne[2] > 0 ? w->ne[2] : 1);
}

/* One host range to upload: the union of the views that overlap it. */
struct range {
    const char *lo, *hi;
    size_t off; /* in the device buffer */
};

static int cmp_view(const void *a, const void *b)
{
    const char *x = (*(struct model_w *const *)a)->data, *y = (*(struct model_w *const *)b)->data;
    return x < y ? -1 : x > y;
}

/* Upload the ranges into base. On a terminal (dd_progress_on) a progress line named label
 * follows the bytes the device has taken: the copies go in pieces of at most 64 MiB, and the
 * line moves (after a wait for the device) every 64 MiB. */
static void upload_ranges(struct dev *d, char *base, const struct range *r, size_t nr, size_t total,
                          const char *label)
{
    const bool show = dd_progress_on();
    const size_t piece = show ? (size_t)64 << 20 : SIZE_MAX;
    size_t done = 0, next = piece;
    for (size_t i = 0; i < nr; i++) {
        const size_t len = (size_t)(r[i].hi - r[i].lo);
        for (size_t o = 0; o < len; o += piece) {
            const size_t n = len - o < piece ? len - o : piece;
            dev_upload(d, base + r[i].off + o, r[i].lo + o, n);
            done += n;
            if (!show || done < next)
                continue;
            next = done + piece;
            dev_sync(d);
            dd_progress(false, "%s: uploading weights %.0f / %.0f MiB (%.0f%%)", label,
                        done / 1048576.0, total / 1048576.0, 100.0 * done / total);
        }
    }
    if (show) {
        dev_sync(d);
        dd_progress(true, "%s: uploading weights %.0f / %.0f MiB (100%%)", label, done / 1048576.0,
                    total / 1048576.0);
    }
}

int shard_upload(const struct model *m, struct model **shard, struct dev *d, const char *label,
                 struct dev_buf **buf, size_t *bytes, char *err, size_t errlen)
{
    struct model *s = *shard ? *shard : shallow_copy(m);
    const int64_t L = s->hp.n_layer_all;
    struct model_w **v = xmalloc((size_t)(L * (int64_t)N_LAYER_VIEWS + 3) * sizeof *v);
    size_t n = 0;
    struct model_w *top[3] = {&s->tok_embd, &s->output_norm, &s->output};
    for (int i = 0; i < 3; i++)
        if (top[i]->data)
            v[n++] = top[i];
    for (int64_t il = 0; il < L; il++)
        for (size_t i = 0; i < N_LAYER_VIEWS; i++) {
            struct model_w *w = (void *)((char *)&s->layers[il] + layer_views[i]);
            if (w->data)
                v[n++] = w;
        }
    /* views that overlap (a tied LM head, a vocab slice of the embedding) share one range */
    qsort(v, n, sizeof *v, cmp_view);
    struct range *r = xmalloc((n ? n : 1) * sizeof *r);
    size_t nr = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *lo = v[i]->data, *hi = lo + view_bytes(v[i]);
        if (nr && lo < r[nr - 1].hi) {
            r[nr - 1].hi = hi > r[nr - 1].hi ? hi : r[nr - 1].hi;
            continue;
        }
        r[nr++] = (struct range){lo, hi, 0};
    }
    for (size_t i = 0; i < nr; i++) {
        r[i].off = total;
        total += ((size_t)(r[i].hi - r[i].lo) + 255) / 256 * 256;
    }
    char *base = NULL;
    int rc = dev_buf_alloc(d, total ? total : 256, 256, buf, (void **)&base);
    if (rc) {
        char mem[96];
        dev_mem_note(d, mem, sizeof mem);
        dd_errf(err, errlen,
                "device %s: cannot allocate %.1f MiB for the weights%s; use more devices or a "
                "smaller quantisation",
                d->ops->name, (double)total / 1048576.0, mem);
    } else {
        upload_ranges(d, base, r, nr, total, label);
        dev_sync(d); /* the host copies may go now */
        for (size_t i = 0, k = 0; i < n; i++) {
            while (k + 1 < nr && (const char *)v[i]->data >= r[k].hi &&
                   (const char *)v[i]->data >= r[k + 1].lo)
                k++;
            /* an empty view (a zero-width slice) gets the buffer's base: some device address */
            v[i]->data =
                view_bytes(v[i]) ? base + r[k].off + ((const char *)v[i]->data - r[k].lo) : base;
        }
        for (int64_t i = 0; i < s->n_owned; i++) /* the shard's host copies are uploaded */
            free(s->owned[i]);
        s->n_owned = 0;
        *bytes = total;
    }
    free(r);
    free(v);
    if (rc && !*shard)
        shard_free(s);
    else
        *shard = s;
    return rc;
}

void shard_free(struct model *s)
{
    if (!s)
        return;
    for (int64_t i = 0; i < s->n_owned; i++)
        free(s->owned[i]);
    free(s->owned);
    free(s->layers);
    free(s);
}

void shard_bytes(const struct model *s, size_t *owned, size_t *replicated)
{
    *owned = s->owned_bytes;
    size_t rep = (size_t)s->tok_embd.nb2 + (size_t)s->hp.n_embd * 4; /* embedding + final norm */
    for (int64_t il = 0; il < s->hp.n_layer_all; il++) {
        const struct model_layer *l = &s->layers[il];
        const struct model_w *w[] = {&l->attn_norm, &l->ffn_norm, &l->q_norm,          &l->k_norm,
                                     &l->ssm_norm,  &l->gate_inp, &l->gate_inp_shexp,  &l->eh_proj,
                                     &l->enorm,     &l->hnorm,    &l->shared_head_norm};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            rep += w[i]->data ? w[i]->nb2 * (size_t)w[i]->ne[2] : 0;
    }
    *replicated = rep;
}

/*
 * cache — KV rows and GDN snapshot groups per sequence (contract in cache.h).
 *
 * Layout: every layer has its own block sized by its dims as held on this device, so a tensor-
 * parallel shard (fewer heads per layer, possibly zero) uses the same code. K|V blocks per
 * attention layer ([n_seq][n_ctx][kv_dim] each); the GDN state is [n_groups][group_n], a
 * group holding every recurrent layer's [n_seq][conv | ssm]. All of it is device memory.
 *
 * Invariants: rs_idx[s] < n_groups; valid[s] < n_groups; rs_idx[s] != 0 only between a rollback
 * and the next forward step of s. Written by the engine thread (and its device workers on
 * disjoint slices during a forward step).
 */
#include "cache.h" // defines: struct cache

#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xcalloc, ASSERT, dd_errf

/* Per-layer element counts for model m. */
static void layer_dims(const struct model *m, int64_t il, int64_t *kv, int64_t *conv, int64_t *ssm)
{
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *l = &m->layers[il];
    *kv = l->recurrent ? 0 : l->n_head_kv * hp->head_dim;
    *conv = l->recurrent ? (hp->conv_k - 1) * l->conv_ch : 0;
    *ssm = l->recurrent ? l->ssm_hv * hp->ssm_s * hp->ssm_s : 0;
}

/* The four parts: K|V of the trunk's attention layers, of the MTP layer, GDN group 0 and the
 * draft_max snapshot groups right after it (so the groups are one [n_groups][group_n] array). */
static void parts(const struct model *m, int64_t n_seq, int64_t n_ctx, size_t *kv, size_t *mtp,
                  size_t *group)
{
    *kv = *mtp = *group = 0;
    for (int64_t il = 0; il < m->hp.n_layer_all; il++) {
        int64_t d, conv, ssm;
        layer_dims(m, il, &d, &conv, &ssm);
        *(il < m->hp.n_layer ? kv : mtp) += (size_t)n_seq * n_ctx * d * 2 * sizeof(float);
        *group += (size_t)n_seq * (conv + ssm) * sizeof(float);
    }
}

void cache_plan(const struct model *m, int64_t n_seq, int64_t n_ctx, int64_t draft_max,
                struct dev_plan *plan)
{
    size_t kv, mtp, group;
    parts(m, n_seq, n_ctx, &kv, &mtp, &group);
    dev_plan_add(plan, "kv", kv, 64);
    dev_plan_add(plan, "mtp_kv", mtp, 64);
    dev_plan_add(plan, "gdn", group, 64);
    dev_plan_add(plan, "snapshots", (size_t)draft_max * group, sizeof(float)); /* adjacent */
}

size_t cache_bytes_needed(const struct model *m, int64_t n_seq, int64_t n_ctx, int64_t draft_max)
{
    struct dev_plan p = {0};
    cache_plan(m, n_seq, n_ctx, draft_max, &p);
    return dev_plan_bytes(&p, "kv") + dev_plan_bytes(&p, "mtp_kv") + dev_plan_bytes(&p, "gdn") +
           dev_plan_bytes(&p, "snapshots");
}

void cache_mem_parts(const struct model *m, int64_t n_seq, int64_t n_ctx, struct cache_mem *out)
{
    struct dev_plan p = {0};
    cache_plan(m, n_seq, n_ctx, 0, &p);
    *out = (struct cache_mem){.kv = dev_plan_bytes(&p, "kv"),
                              .mtp_kv = dev_plan_bytes(&p, "mtp_kv"),
                              .gdn_group = dev_plan_bytes(&p, "gdn")};
}

static char *part_at(const struct dev_plan *plan, const char *name, char *base)
{
    for (int i = 0; i < plan->n; i++)
        if (strcmp(plan->part[i].name, name) == 0)
            return base + plan->part[i].offset;
    ASSERT(!"cache part missing from the plan");
    return NULL;
}

void cache_init(struct cache *c, const struct model *m, struct dev *d, int64_t n_seq, int64_t n_ctx,
                int64_t draft_max, const struct dev_plan *plan, char *base)
{
    memset(c, 0, sizeof *c);
    c->dev = d;
    c->n_seq = n_seq;
    c->n_ctx = n_ctx;
    c->n_groups = 1 + draft_max;
    c->n_layers = m->hp.n_layer_all;
    c->kv_dim = xcalloc((size_t)c->n_layers, sizeof *c->kv_dim);
    c->conv_elems = xcalloc((size_t)c->n_layers, sizeof *c->conv_elems);
    c->ssm_elems = xcalloc((size_t)c->n_layers, sizeof *c->ssm_elems);
    c->k = xcalloc((size_t)c->n_layers, sizeof *c->k);
    c->v = xcalloc((size_t)c->n_layers, sizeof *c->v);
    c->gdn_off = xcalloc((size_t)c->n_layers, sizeof *c->gdn_off);
    float *kv[2] = {(float *)part_at(plan, "kv", base), (float *)part_at(plan, "mtp_kv", base)};
    c->gdn = (float *)part_at(plan, "gdn", base);
    for (int64_t il = 0; il < c->n_layers; il++) {
        layer_dims(m, il, &c->kv_dim[il], &c->conv_elems[il], &c->ssm_elems[il]);
        float **at = &kv[il >= m->hp.n_layer];
        const size_t n = (size_t)n_seq * n_ctx * c->kv_dim[il];
        c->k[il] = *at;
        c->v[il] = *at + n;
        *at += 2 * n;
        c->gdn_off[il] = c->group_n;
        c->group_n += (size_t)n_seq * (c->conv_elems[il] + c->ssm_elems[il]);
        c->n_gdn_layers += m->layers[il].recurrent;
    }
    c->bytes = cache_bytes_needed(m, n_seq, n_ctx, draft_max);
    c->rs_idx = xcalloc((size_t)n_seq, sizeof *c->rs_idx);
    c->valid = xcalloc((size_t)n_seq, sizeof *c->valid);
}

void cache_deinit(struct cache *c)
{
    void *bufs[] = {c->kv_dim, c->conv_elems, c->ssm_elems, c->k,
                    c->v,      c->gdn_off,    c->rs_idx,    c->valid};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    memset(c, 0, sizeof *c);
}

struct dev_kv cache_kv(const struct cache *c, int64_t il)
{
    ASSERT(il >= 0 && il < c->n_layers);
    return (struct dev_kv){.k = c->k[il],
                           .v = c->v[il],
                           .kv_dim = c->kv_dim[il],
                           .seq_stride = c->n_ctx * c->kv_dim[il]};
}

struct dev_gdn_state cache_gdn(const struct cache *c, int64_t il)
{
    ASSERT(il >= 0 && il < c->n_layers);
    return (struct dev_gdn_state){.base = c->gdn + c->gdn_off[il],
                                  .group_stride = (int64_t)c->group_n,
                                  .seq_stride = c->conv_elems[il] + c->ssm_elems[il],
                                  .conv_elems = c->conv_elems[il],
                                  .n_groups = c->n_groups};
}

/* Device address of (layer il, group g, seq s): conv_elems floats of conv state, then SSM. */
static float *gdn_at(const struct cache *c, int64_t il, int64_t g, int64_t s)
{
    ASSERT(g >= 0 && g < c->n_groups && s >= 0 && s < c->n_seq);
    return c->gdn + (size_t)g * c->group_n + c->gdn_off[il] +
           (size_t)s * (c->conv_elems[il] + c->ssm_elems[il]);
}

void cache_seq_clear(struct cache *c, int64_t s)
{
    ASSERT(s >= 0 && s < c->n_seq);
    for (int64_t il = 0; il < c->n_layers; il++) {
        size_t n = (size_t)(c->conv_elems[il] + c->ssm_elems[il]);
        dev_memset(c->dev, gdn_at(c, il, 0, s), 0, n * sizeof(float));
    }
    c->rs_idx[s] = 0;
    c->valid[s] = 0;
}

bool cache_seq_rollback(struct cache *c, int64_t s, int64_t r)
{
    ASSERT(s >= 0 && s < c->n_seq);
    /* rs_idx is absolute: a second rollback before a forward step would pick the wrong group */
    ASSERT(c->rs_idx[s] == 0);
    if (r < 1 || r > c->valid[s])
        return false;
    c->rs_idx[s] = (int32_t)r;
    c->valid[s] = 0;
    return true;
}

void cache_seq_advanced(struct cache *c, int64_t s, int64_t T)
{
    c->rs_idx[s] = 0;
    c->valid[s] = (int32_t)((T < c->n_groups ? T : c->n_groups) - 1);
}

size_t cache_ckpt_floats(const struct cache *c)
{
    size_t n = 0;
    for (int64_t il = 0; il < c->n_layers; il++)
        n += (size_t)(c->conv_elems[il] + c->ssm_elems[il]);
    return n;
}

void cache_seq_save(const struct cache *c, int64_t s, float *dst)
{
    for (int64_t il = 0; il < c->n_layers; il++) {
        size_t n = (size_t)(c->conv_elems[il] + c->ssm_elems[il]);
        dev_download(c->dev, dst, gdn_at(c, il, c->rs_idx[s], s), n * sizeof(float));
        dst += n;
    }
    dev_sync(c->dev);
}

void cache_seq_restore(struct cache *c, int64_t s, const float *src)
{
    for (int64_t il = 0; il < c->n_layers; il++) {
        size_t n = (size_t)(c->conv_elems[il] + c->ssm_elems[il]);
        dev_upload(c->dev, gdn_at(c, il, 0, s), src, n * sizeof(float));
        src += n;
    }
    dev_sync(c->dev);
    c->rs_idx[s] = 0;
    c->valid[s] = 0;
}

size_t cache_kv_floats(const struct cache *c)
{
    size_t n = 0;
    for (int64_t il = 0; il < c->n_layers; il++)
        n += 2 * (size_t)c->kv_dim[il];
    return n;
}

/* Device address of row 0 of sequence s in layer il's K (v false) or V block. */
static float *kv_at(const struct cache *c, int64_t il, bool v, int64_t s)
{
    ASSERT(s >= 0 && s < c->n_seq);
    return (v ? c->v[il] : c->k[il]) + (size_t)s * c->n_ctx * c->kv_dim[il];
}

void cache_seq_kv_copy(struct cache *c, int64_t dst, int64_t src, int64_t r0, int64_t r1)
{
    ASSERT(0 <= r0 && r0 <= r1 && r1 <= c->n_ctx);
    for (int64_t il = 0; il < c->n_layers; il++)
        for (int v = 0; v < 2; v++) {
            const size_t d = (size_t)c->kv_dim[il];
            dev_copy(c->dev, kv_at(c, il, v, dst) + (size_t)r0 * d,
                     kv_at(c, il, v, src) + (size_t)r0 * d, (size_t)(r1 - r0) * d * sizeof(float));
        }
}

/* Rows [r0, r1) of sequence s to host rows laid out for n positions (down), or from them (up):
 * exactly one of the two is given (cache.h has the layout). */
static void kv_move(const struct cache *c, int64_t s, int64_t r0, int64_t r1, int64_t n,
                    float *down, const float *up)
{
    ASSERT(0 <= r0 && r0 <= r1 && r1 <= n && n <= c->n_ctx);
    if (r0 == r1)
        return;
    size_t off = 0; /* floats of the host rows before this layer's K or V block */
    for (int64_t il = 0; il < c->n_layers; il++)
        for (int v = 0; v < 2; v++) {
            const size_t d = (size_t)c->kv_dim[il], bytes = (size_t)(r1 - r0) * d * sizeof(float);
            float *dev = kv_at(c, il, v, s) + (size_t)r0 * d;
            if (up)
                dev_upload(c->dev, dev, up + off + (size_t)r0 * d, bytes);
            else
                dev_download(c->dev, down + off + (size_t)r0 * d, dev, bytes);
            off += (size_t)n * d;
        }
    dev_sync(c->dev);
}

void cache_seq_kv_download(const struct cache *c, int64_t s, int64_t r0, int64_t r1, int64_t n,
                           float *dst)
{
    kv_move(c, s, r0, r1, n, dst, NULL);
}

void cache_seq_kv_upload(struct cache *c, int64_t s, int64_t r0, int64_t r1, int64_t n,
                         const float *src)
{
    kv_move(c, s, r0, r1, n, NULL, src);
}

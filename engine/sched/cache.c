/*
 * cache — KV rows and GDN snapshot groups per sequence (contract in cache.h).
 *
 * Layout: every layer has its own block sized by its dims as held on this device, so a tensor-
 * parallel shard (fewer heads per layer, possibly zero) uses the same code. A GDN layer's block
 * is [n_groups][n_seq][conv | ssm].
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

size_t cache_bytes_needed(const struct model *m, int64_t n_seq, int64_t n_ctx, int64_t draft_max)
{
    size_t n = 0;
    for (int64_t il = 0; il < m->hp.n_layer_all; il++) {
        int64_t kv, conv, ssm;
        layer_dims(m, il, &kv, &conv, &ssm);
        n += (size_t)n_seq * n_ctx * kv * 2 + (size_t)(1 + draft_max) * n_seq * (conv + ssm);
    }
    return n * sizeof(float);
}

void cache_mem_parts(const struct model *m, int64_t n_seq, int64_t n_ctx, struct cache_mem *out)
{
    *out = (struct cache_mem){0};
    for (int64_t il = 0; il < m->hp.n_layer_all; il++) {
        int64_t kv, conv, ssm;
        layer_dims(m, il, &kv, &conv, &ssm);
        size_t kv_b = (size_t)n_seq * n_ctx * kv * 2 * sizeof(float);
        *(il < m->hp.n_layer ? &out->kv : &out->mtp_kv) += kv_b;
        out->gdn_group += (size_t)n_seq * (conv + ssm) * sizeof(float);
    }
}

int cache_create(struct cache *c, const struct model *m, int64_t n_seq, int64_t n_ctx,
                 int64_t draft_max, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->n_seq = n_seq;
    c->n_ctx = n_ctx;
    c->n_groups = 1 + draft_max;
    c->n_layers = m->hp.n_layer_all;
    c->kv_dim = xcalloc((size_t)c->n_layers, sizeof *c->kv_dim);
    c->conv_elems = xcalloc((size_t)c->n_layers, sizeof *c->conv_elems);
    c->ssm_elems = xcalloc((size_t)c->n_layers, sizeof *c->ssm_elems);
    c->kv_off = xcalloc((size_t)c->n_layers, sizeof *c->kv_off);
    c->gdn_off = xcalloc((size_t)c->n_layers, sizeof *c->gdn_off);
    size_t kv_n = 0, gdn_n = 0;
    for (int64_t il = 0; il < c->n_layers; il++) {
        layer_dims(m, il, &c->kv_dim[il], &c->conv_elems[il], &c->ssm_elems[il]);
        c->kv_off[il] = kv_n;
        c->gdn_off[il] = gdn_n;
        kv_n += (size_t)n_seq * n_ctx * c->kv_dim[il];
        gdn_n += (size_t)c->n_groups * n_seq * (c->conv_elems[il] + c->ssm_elems[il]);
        c->n_gdn_layers += m->layers[il].recurrent;
    }
    c->bytes = (2 * kv_n + gdn_n) * sizeof(float);
    /* user-sized: refuse instead of aborting (STYLE rule 16) */
    c->k = calloc(kv_n ? kv_n : 1, sizeof(float));
    c->v = calloc(kv_n ? kv_n : 1, sizeof(float));
    c->gdn = calloc(gdn_n ? gdn_n : 1, sizeof(float));
    c->rs_idx = xcalloc((size_t)n_seq, sizeof *c->rs_idx);
    c->valid = xcalloc((size_t)n_seq, sizeof *c->valid);
    if (!c->k || !c->v || !c->gdn) {
        dd_errf(err, errlen,
                "cannot allocate the cache: %.1f MiB for %lld sequences x %lld tokens"
                " with %lld snapshot groups",
                c->bytes / 1048576.0, (long long)n_seq, (long long)n_ctx, (long long)c->n_groups);
        cache_destroy(c);
        return DD_EFULL;
    }
    return 0;
}

void cache_destroy(struct cache *c)
{
    void *bufs[] = {c->k,         c->v,      c->gdn,     c->kv_dim, c->conv_elems,
                    c->ssm_elems, c->kv_off, c->gdn_off, c->rs_idx, c->valid};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    memset(c, 0, sizeof *c);
}

float *cache_k(const struct cache *c, int64_t il, int64_t s)
{
    ASSERT(c->kv_dim[il] >= 0 && s >= 0 && s < c->n_seq);
    return c->k + c->kv_off[il] + (size_t)s * c->n_ctx * c->kv_dim[il];
}

float *cache_v(const struct cache *c, int64_t il, int64_t s)
{
    ASSERT(c->kv_dim[il] >= 0 && s >= 0 && s < c->n_seq);
    return c->v + c->kv_off[il] + (size_t)s * c->n_ctx * c->kv_dim[il];
}

/* Start of (layer il, group g, seq s): conv_elems floats of conv state, then the SSM state. */
static float *gdn_at(const struct cache *c, int64_t il, int64_t g, int64_t s)
{
    ASSERT(g >= 0 && g < c->n_groups && s >= 0 && s < c->n_seq);
    return c->gdn + c->gdn_off[il] +
           ((size_t)g * c->n_seq + s) * (c->conv_elems[il] + c->ssm_elems[il]);
}

float *cache_conv(const struct cache *c, int64_t il, int64_t g, int64_t s)
{
    return gdn_at(c, il, g, s);
}

float *cache_ssm(const struct cache *c, int64_t il, int64_t g, int64_t s)
{
    return gdn_at(c, il, g, s) + c->conv_elems[il];
}

void cache_seq_clear(struct cache *c, int64_t s)
{
    ASSERT(s >= 0 && s < c->n_seq);
    for (int64_t il = 0; il < c->n_layers; il++) {
        size_t n = (size_t)(c->conv_elems[il] + c->ssm_elems[il]);
        if (n)
            memset(gdn_at(c, il, 0, s), 0, n * sizeof(float));
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
        memcpy(dst, gdn_at(c, il, c->rs_idx[s], s), n * sizeof(float));
        dst += n;
    }
}

void cache_seq_restore(struct cache *c, int64_t s, const float *src)
{
    for (int64_t il = 0; il < c->n_layers; il++) {
        size_t n = (size_t)(c->conv_elems[il] + c->ssm_elems[il]);
        memcpy(gdn_at(c, il, 0, s), src, n * sizeof(float));
        src += n;
    }
    c->rs_idx[s] = 0;
    c->valid[s] = 0;
}

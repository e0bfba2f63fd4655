/*
 * cache — KV rows and GDN snapshot groups per sequence (contract in cache.h).
 *
 * Invariants: rs_idx[s] < n_groups; valid[s] < n_groups; rs_idx[s] != 0 only between a rollback
 * and the next forward step of s. Written by the engine thread only.
 */
#include "cache.h" // defines: struct cache

#include <stdlib.h>
#include <string.h>

#include "util.h" // defines: xcalloc, ASSERT, dd_errf

static int64_t n_kv_layers(const struct model *m)
{
    return model_n_attn_layers(m) + m->hp.n_nextn;
}

size_t cache_bytes_needed(const struct model *m, int64_t n_seq, int64_t n_ctx, int64_t draft_max)
{
    const struct model_hparams *hp = &m->hp;
    size_t kv = (size_t)n_kv_layers(m) * n_seq * n_ctx * hp->n_head_kv * hp->head_dim * 2;
    size_t per_group = 0;
    if (hp->arch != ARCH_QWEN3)
        per_group = (size_t)(hp->conv_k - 1) * hp->conv_ch + (size_t)hp->ssm_hv * hp->ssm_s * hp->ssm_s;
    size_t gdn = (size_t)model_n_gdn_layers(m) * (1 + draft_max) * n_seq * per_group;
    return (kv + gdn) * sizeof(float);
}

int cache_create(struct cache *c, const struct model *m, int64_t n_seq, int64_t n_ctx,
                 int64_t draft_max, char *err, size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    memset(c, 0, sizeof *c);
    c->n_seq = n_seq;
    c->n_ctx = n_ctx;
    c->n_groups = 1 + draft_max;
    c->kv_dim = hp->n_head_kv * hp->head_dim;
    c->kv_of_layer = xcalloc((size_t)hp->n_layer_all, sizeof *c->kv_of_layer);
    c->gdn_of_layer = xcalloc((size_t)hp->n_layer_all, sizeof *c->gdn_of_layer);
    for (int64_t il = 0; il < hp->n_layer_all; il++) {
        bool rec = m->layers[il].recurrent;
        c->kv_of_layer[il] = rec ? -1 : c->n_kv_layers++;
        c->gdn_of_layer[il] = rec ? c->n_gdn_layers++ : -1;
    }
    if (hp->arch != ARCH_QWEN3) {
        c->conv_elems = (hp->conv_k - 1) * hp->conv_ch;
        c->ssm_elems = hp->ssm_hv * hp->ssm_s * hp->ssm_s;
    }
    size_t kv_n = (size_t)c->n_kv_layers * n_seq * n_ctx * c->kv_dim;
    size_t conv_n = (size_t)c->n_gdn_layers * c->n_groups * n_seq * c->conv_elems;
    size_t ssm_n = (size_t)c->n_gdn_layers * c->n_groups * n_seq * c->ssm_elems;
    c->bytes = (2 * kv_n + conv_n + ssm_n) * sizeof(float);
    /* user-sized: refuse instead of aborting (STYLE rule 16) */
    c->k = calloc(kv_n ? kv_n : 1, sizeof(float));
    c->v = calloc(kv_n ? kv_n : 1, sizeof(float));
    c->conv = calloc(conv_n ? conv_n : 1, sizeof(float));
    c->ssm = calloc(ssm_n ? ssm_n : 1, sizeof(float));
    c->rs_idx = xcalloc((size_t)n_seq, sizeof *c->rs_idx);
    c->valid = xcalloc((size_t)n_seq, sizeof *c->valid);
    if (!c->k || !c->v || !c->conv || !c->ssm) {
        dd_errf(err, errlen, "cannot allocate the cache: %.1f MiB for %lld sequences x %lld tokens"
                " with %lld snapshot groups", c->bytes / 1048576.0, (long long)n_seq,
                (long long)n_ctx, (long long)c->n_groups);
        cache_destroy(c);
        return DD_EFULL;
    }
    return 0;
}

void cache_destroy(struct cache *c)
{
    free(c->k);
    free(c->v);
    free(c->conv);
    free(c->ssm);
    free(c->kv_of_layer);
    free(c->gdn_of_layer);
    free(c->rs_idx);
    free(c->valid);
    memset(c, 0, sizeof *c);
}

float *cache_k(const struct cache *c, int64_t il, int64_t s)
{
    int64_t kl = c->kv_of_layer[il];
    ASSERT(kl >= 0 && s >= 0 && s < c->n_seq);
    return c->k + ((size_t)kl * c->n_seq + s) * c->n_ctx * c->kv_dim;
}

float *cache_v(const struct cache *c, int64_t il, int64_t s)
{
    int64_t kl = c->kv_of_layer[il];
    ASSERT(kl >= 0 && s >= 0 && s < c->n_seq);
    return c->v + ((size_t)kl * c->n_seq + s) * c->n_ctx * c->kv_dim;
}

float *cache_conv(const struct cache *c, int64_t il, int64_t g, int64_t s)
{
    int64_t gl = c->gdn_of_layer[il];
    ASSERT(gl >= 0 && g >= 0 && g < c->n_groups && s >= 0 && s < c->n_seq);
    return c->conv + (((size_t)gl * c->n_groups + g) * c->n_seq + s) * c->conv_elems;
}

float *cache_ssm(const struct cache *c, int64_t il, int64_t g, int64_t s)
{
    int64_t gl = c->gdn_of_layer[il];
    ASSERT(gl >= 0 && g >= 0 && g < c->n_groups && s >= 0 && s < c->n_seq);
    return c->ssm + (((size_t)gl * c->n_groups + g) * c->n_seq + s) * c->ssm_elems;
}

void cache_seq_clear(struct cache *c, int64_t s)
{
    ASSERT(s >= 0 && s < c->n_seq);
    for (int64_t gl = 0; gl < c->n_gdn_layers; gl++) {
        size_t conv_off = (((size_t)gl * c->n_groups) * c->n_seq + s) * c->conv_elems;
        size_t ssm_off = (((size_t)gl * c->n_groups) * c->n_seq + s) * c->ssm_elems;
        memset(c->conv + conv_off, 0, (size_t)c->conv_elems * sizeof(float));
        memset(c->ssm + ssm_off, 0, (size_t)c->ssm_elems * sizeof(float));
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
    return (size_t)c->n_gdn_layers * (size_t)(c->conv_elems + c->ssm_elems);
}

void cache_seq_save(const struct cache *c, int64_t s, float *dst)
{
    ASSERT(s >= 0 && s < c->n_seq);
    const int64_t g = c->rs_idx[s];
    for (int64_t gl = 0; gl < c->n_gdn_layers; gl++) {
        size_t base = ((size_t)gl * c->n_groups + g) * c->n_seq + s;
        memcpy(dst, c->conv + base * c->conv_elems, (size_t)c->conv_elems * sizeof(float));
        dst += c->conv_elems;
        memcpy(dst, c->ssm + base * c->ssm_elems, (size_t)c->ssm_elems * sizeof(float));
        dst += c->ssm_elems;
    }
}

void cache_seq_restore(struct cache *c, int64_t s, const float *src)
{
    ASSERT(s >= 0 && s < c->n_seq);
    for (int64_t gl = 0; gl < c->n_gdn_layers; gl++) {
        size_t base = ((size_t)gl * c->n_groups) * c->n_seq + s; /* group 0 */
        memcpy(c->conv + base * c->conv_elems, src, (size_t)c->conv_elems * sizeof(float));
        src += c->conv_elems;
        memcpy(c->ssm + base * c->ssm_elems, src, (size_t)c->ssm_elems * sizeof(float));
        src += c->ssm_elems;
    }
    c->rs_idx[s] = 0;
    c->valid[s] = 0;
}

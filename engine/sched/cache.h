/*
 * cache — per-sequence model state: the KV cache of every attention layer (the MTP block's
 * layer included, as its own KV layer) and the GDN conv + SSM state of every recurrent layer,
 * kept in 1 + draft_max snapshot groups (docs/parallelism-and-speculation.md section 2).
 *
 * KV: f32 rows [n_ctx][Hkv * D] per (layer, sequence); a token at position p lives in row p.
 * Truncating a sequence needs no data movement: the next write at position p overwrites row p
 * and attention at position p reads rows 0..p only.
 *
 * GDN: for each recurrent layer, group g, sequence s:
 *   conv [(K-1) x C] f32 — the last K-1 conv inputs, oldest first;
 *   ssm  [Hv][S][S]  f32 — M_h[key i][value j].
 * Group 0 holds the state after the last token of the sequence's last batch; group g the state
 * g tokens before that (written only for the last min(T, n_groups) tokens of that batch).
 * rs_idx[s] names the group that holds the logical current state; the next forward step reads
 * from it, writes group 0 and resets rs_idx to 0. Rolling back r tokens is rs_idx = r, valid
 * only for 1 <= r <= valid[s] = min(T_last, n_groups) - 1 (asserted).
 *
 * Memory: everything is allocated once by cache_create (STYLE rule 12).
 * Thread safety: owned by the engine thread; the forward pass writes disjoint slices from the
 * device's worker threads.
 */
#ifndef DELTAD_CACHE_H
#define DELTAD_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h" // defines: struct model

struct cache {
    int64_t n_seq, n_ctx, n_groups;
    int64_t n_layers; /* layers of the model, MTP included */
    /* per layer il (dims as this device holds the layer): */
    int64_t *kv_dim;     /* [n_layers] Hkv_il * D for attention layers, 0 for GDN layers */
    int64_t *conv_elems; /* [n_layers] (K-1) * C_il for GDN layers, 0 otherwise */
    int64_t *ssm_elems;  /* [n_layers] Hv_il * S * S for GDN layers, 0 otherwise */
    size_t *kv_off;      /* [n_layers] float offset of the layer's [n_seq][n_ctx][kv_dim] block */
    size_t *gdn_off;     /* [n_layers] float offset of [n_groups][n_seq][conv_elems + ssm_elems] */
    float *k, *v;        /* all attention layers' K and V blocks */
    float *gdn;          /* all GDN layers' groups: per (group, seq) conv then ssm */
    int64_t n_gdn_layers;
    int32_t *rs_idx; /* [n_seq] group holding the current state */
    int32_t *valid;  /* [n_seq] snapshots usable for rollback */
    size_t bytes;    /* total allocated */
};

/* Allocate for n_seq sequences of up to n_ctx tokens with draft_max rollback depth. Returns 0
 * or DD_EFULL with the numbers in err when the allocation is refused. */
int cache_create(struct cache *c, const struct model *m, int64_t n_seq, int64_t n_ctx,
                 int64_t draft_max, char *err, size_t errlen);
void cache_destroy(struct cache *c);

/* Bytes the cache would need, without allocating. */
size_t cache_bytes_needed(const struct model *m, int64_t n_seq, int64_t n_ctx, int64_t draft_max);
/* The same by part: K + V of the trunk's attention layers and of the MTP layer, and one GDN state
 * group (conv + SSM of every recurrent layer) for all n_seq sequences; the cache holds
 * 1 + draft_max such groups. */
struct cache_mem {
    size_t kv, mtp_kv, gdn_group;
};
void cache_mem_parts(const struct model *m, int64_t n_seq, int64_t n_ctx, struct cache_mem *out);

/* K and V rows of (layer il, seq s) starting at position 0. */
float *cache_k(const struct cache *c, int64_t il, int64_t s);
float *cache_v(const struct cache *c, int64_t il, int64_t s);
/* GDN state of (layer il, group g, seq s). */
float *cache_conv(const struct cache *c, int64_t il, int64_t g, int64_t s);
float *cache_ssm(const struct cache *c, int64_t il, int64_t g, int64_t s);

/* Start a sequence from scratch: zero its current state and reset rs_idx. */
void cache_seq_clear(struct cache *c, int64_t s);
/* Roll the recurrent state back r tokens (1 <= r <= valid[s], at most once between forward
 * steps). Returns false when the snapshots cannot serve it (caller restores a checkpoint). */
bool cache_seq_rollback(struct cache *c, int64_t s, int64_t r);
/* Called by the forward pass after it wrote a batch of T tokens of sequence s. */
void cache_seq_advanced(struct cache *c, int64_t s, int64_t T);

/* Checkpoints of the recurrent state (docs/parallelism-and-speculation.md 2.6): the KV part needs
 * none (truncation), so a checkpoint is the GDN conv + SSM state of every recurrent layer.
 * save copies the logical current state (group rs_idx[s]) into dst [cache_ckpt_floats]; restore
 * writes group 0 from src and resets rs_idx[s] and the rollback window. */
size_t cache_ckpt_floats(const struct cache *c);
void cache_seq_save(const struct cache *c, int64_t s, float *dst);
void cache_seq_restore(struct cache *c, int64_t s, const float *src);

#endif

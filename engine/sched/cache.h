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
 * Memory: the K/V rows and GDN groups live in device memory: four parts of the device's
 * allocation plan (cache_plan: "kv", "mtp_kv", "gdn" = group 0, "snapshots" = groups 1..),
 * carved from its one allocation by the forward pass (cache_init). The host keeps only the
 * bookkeeping (dims, rs_idx, valid) and reaches the state through the device (memset,
 * download, upload); the forward ops get it as device addresses (cache_kv, cache_gdn).
 * Thread safety: owned by the engine thread; the forward pass writes disjoint slices from the
 * device's worker threads.
 */
#ifndef DELTAD_CACHE_H
#define DELTAD_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/compute/device.h" // defines: struct dev, struct dev_plan, struct dev_kv
#include "engine/model/model.h"    // defines: struct model

struct cache {
    struct dev *dev; /* borrowed: the device whose memory holds the state */
    int64_t n_seq, n_ctx, n_groups;
    int64_t n_layers; /* layers of the model, MTP included */
    /* per layer il (dims as this device holds the layer): */
    int64_t *kv_dim;     /* [n_layers] Hkv_il * D for attention layers, 0 for GDN layers */
    int64_t *conv_elems; /* [n_layers] (K-1) * C_il for GDN layers, 0 otherwise */
    int64_t *ssm_elems;  /* [n_layers] Hv_il * S * S for GDN layers, 0 otherwise */
    float **k;           /* [n_layers] device address of the layer's [n_seq][n_ctx][kv_dim] K */
    float **v;           /* [n_layers] the same for V */
    size_t *gdn_off;     /* [n_layers] float offset of the layer's [n_seq][conv | ssm] in a group */
    size_t group_n;      /* floats of one group: every GDN layer, every sequence */
    float *gdn;          /* device address of [n_groups][group_n] */
    int64_t n_gdn_layers;
    int32_t *rs_idx; /* [n_seq] group holding the current state */
    int32_t *valid;  /* [n_seq] snapshots usable for rollback */
    size_t bytes;    /* device bytes of the four parts */
};

/* Add the cache's parts for n_seq sequences of up to n_ctx tokens with draft_max rollback
 * depth to a device's allocation plan. */
void cache_plan(const struct model *m, int64_t n_seq, int64_t n_ctx, int64_t draft_max,
                struct dev_plan *plan);
/* The cache over the parts cache_plan added to plan, at device address base (zeroed) of d. */
void cache_init(struct cache *c, const struct model *m, struct dev *d, int64_t n_seq, int64_t n_ctx,
                int64_t draft_max, const struct dev_plan *plan, char *base);
void cache_deinit(struct cache *c);

/* Bytes the cache would need, without allocating (the sum of its plan parts). */
size_t cache_bytes_needed(const struct model *m, int64_t n_seq, int64_t n_ctx, int64_t draft_max);
/* The same by part: K + V of the trunk's attention layers and of the MTP layer, and one GDN state
 * group (conv + SSM of every recurrent layer) for all n_seq sequences; the cache holds
 * 1 + draft_max such groups. */
struct cache_mem {
    size_t kv, mtp_kv, gdn_group;
};
void cache_mem_parts(const struct model *m, int64_t n_seq, int64_t n_ctx, struct cache_mem *out);

/* Layer il's K/V rows and GDN state as the device ops take them. */
struct dev_kv cache_kv(const struct cache *c, int64_t il);
struct dev_gdn_state cache_gdn(const struct cache *c, int64_t il);

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
/* save and restore wait for the device (dev_sync): the host buffer is done with on return. */

/* The prompt cache's KV rows (eng_cache.c): positions of a sequence over every attention
 * layer, MTP included. On the host, n positions are laid out layer by layer, K rows [n][kv_dim]
 * then V rows [n][kv_dim]: cache_kv_floats per position. Each call moves rows [r0, r1) only
 * (0 <= r0 <= r1 <= n), so a prefix whose first rows are already in place, or a save done in
 * pieces, moves no row twice. copy moves rows between two sequences on the device (dev_copy);
 * download and upload wait for the device like save and restore. */
size_t cache_kv_floats(const struct cache *c);
void cache_seq_kv_copy(struct cache *c, int64_t dst, int64_t src, int64_t r0, int64_t r1);
void cache_seq_kv_download(const struct cache *c, int64_t s, int64_t r0, int64_t r1, int64_t n,
                           float *dst);
void cache_seq_kv_upload(struct cache *c, int64_t s, int64_t r0, int64_t r1, int64_t n,
                         const float *src);

#endif

/*
 * shard — the tensor-parallel shard plan (docs/parallelism-and-speculation.md section 1) and the
 * per-device shard models built from it.
 *
 * Split rules (ne order: ne0 = inputs, ne1 = outputs):
 * - attention: by whole KV heads (q heads follow their KV group): attn_q / attn_k / attn_v
 *   output rows, attn_output input columns; q/k norms replicated;
 * - GDN: by whole key heads: the q and k parts of attn_qkv, and the value heads that read those
 *   key heads (qwen3next: the contiguous r-groups; qwen35/qwen35moe: r tiled blocks of the key
 *   range) in attn_qkv's v part, attn_gate, ssm_beta / ssm_alpha (qwen3next: ssm_ba by key
 *   group), ssm_dt, ssm_a, ssm_conv1d channels, ssm_out input columns; ssm_norm replicated;
 * - FFN: by intermediate width in units of lcm(block, 128): gate/up rows, down input columns;
 *   every expert is sliced the same way (experts are sliced, not distributed); the shared
 *   expert is sliced too (its gate is a replicated scalar, so the partial sums stay exact);
 *   the router and every norm are replicated;
 * - LM head: by vocabulary rows; token_embd, output_norm and the MTP eh_proj / norms
 *   replicated.
 * Slice boundaries are rounded down to the granularity (the last device takes the remainder;
 * zero-size slices are legal) and rotated per layer kind so remainders do not pile up on one
 * device. Split tensors are copied into memory owned by the shard; replicated ones stay views
 * into the mapping.
 *
 * Thread safety: built on the start-up thread; immutable afterwards.
 */
#ifndef DELTAD_SHARD_H
#define DELTAD_SHARD_H

#include <stddef.h>

#include "engine/model/model.h" // defines: struct model

/* Build device `rank`'s shard of m for a group of n_dev devices. *out is transferred:
 * shard_free. Fails (DD_EUNSUPPORTED, message in err) for a tensor type or shape the split
 * rules cannot cut. */
int shard_build(const struct model *m, int n_dev, int rank, struct model **out, char *err,
                size_t errlen);
void shard_free(struct model *shard);

/*
 * Store the matrix weights of a device's model in the layouts its kernels prefer: every layer
 * matmul weight and the LM head w with want(ctx, w.type) != w.type is rewritten (kq_repack_rows)
 * into a buffer *shard owns. *shard is a shard of m, or NULL for the whole model, in which case
 * a shallow copy is made when anything changes. Returns the number of tensors rewritten.
 */
int shard_relayout(const struct model *m, struct model **shard,
                   enum kq_type (*want)(void *ctx, enum kq_type t), void *ctx);
/* What shard_relayout would rewrite in m: bytes, and *n tensors. */
size_t shard_relayout_bytes(const struct model *m, enum kq_type (*want)(void *ctx, enum kq_type t),
                            void *ctx, int *n);

struct dev;
struct dev_buf;

/*
 * Move the weights of a device's model into device memory (for a device without
 * host_weights): one buffer of d holds every weight view once (views that overlap, a tied LM
 * head, share their bytes), uploaded in one pass; every view of *shard then points at device
 * addresses and the shard's host copies are freed. *shard as for shard_relayout (NULL: the
 * whole model, a shallow copy is made). *buf is d's (dev_buf_free it before the shard is
 * freed); *bytes its size. On a terminal a progress line named label ("device 0 (cuda)")
 * follows the upload (dd_progress); the caller logs the result. Returns 0 or DD_ENOMEM
 * (message in err).
 */
int shard_upload(const struct model *m, struct model **shard, struct dev *d, const char *label,
                 struct dev_buf **buf, size_t *bytes, char *err, size_t errlen);

/* Bytes this shard owns (split tensors) and reads from the shared mapping (replicated). */
void shard_bytes(const struct model *shard, size_t *owned, size_t *replicated);

#endif

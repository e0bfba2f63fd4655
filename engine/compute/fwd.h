/*
 * fwd — the batched forward pass of the trunk and of the MTP block, written once against
 * the device interface (device.h) and run on a device group: one device, or N devices holding
 * tensor-parallel shards (shard.h) that meet at two allreduces per layer (comm.h). One call
 * processes many tokens of many sequences, each with its own positions and cache state, and
 * produces logits only for the rows asked for (gathered from the devices' vocab slices).
 *
 * Batch rules (checked, DD_EINVAL otherwise): the tokens of one sequence are contiguous in the
 * batch and their positions consecutive; a sequence appears in at most one run; positions lie
 * in [0, n_ctx); token ids in [0, n_vocab). The caller owns positions: writing a run that starts
 * at position p truncates the sequence's KV to p (attention reads rows 0..p only).
 *
 * Graphs (fwd_params.graphs, on devices that have them: CUDA): a trunk step whose runs are at
 * most 17 rows (decode, verification) replays a graph recorded per batch shape (rows, runs,
 * logits rows); its per-step inputs are uploaded into fixed device buffers first, so a replay
 * computes what the ops would, bit for bit.
 *
 * Memory: one allocation plan per device (fwd_plan: the cache's parts and the activations,
 * sized from n_seq, n_ctx, draft_max, max_tokens and the device's shard) is allocated once by
 * fwd_create; fwd_decode allocates nothing. Logits and hidden rows come back to the host on
 * demand (fwd_logits, fwd_hidden download them from the devices).
 * Thread safety: one engine thread drives a fwd_ctx; the device's workers do the parallel parts.
 */
#ifndef DELTAD_FORWARD_H
#define DELTAD_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "device.h"             // defines: struct dev
#include "engine/model/model.h" // defines: struct model
#include "engine/sched/cache.h" // defines: struct cache

struct fwd_params {
    int64_t max_tokens; /* largest batch */
    int64_t n_seq;      /* sequences (slots) */
    int64_t n_ctx;      /* positions per sequence */
    int64_t draft_max;  /* GDN snapshot depth: 1 + draft_max groups */
    int64_t n_hrows;    /* hidden rows kept on the devices for the caller (FWD_H_KEPT) */
    bool graphs;        /* replay decode / verification steps as graphs (devices that have them:
                         * CUDA), recorded per batch shape */
};

struct fwd_batch {
    int64_t n_tokens;
    const int32_t *token;  /* [n_tokens] */
    const int64_t *pos;    /* [n_tokens] */
    const int32_t *seq;    /* [n_tokens] */
    const uint8_t *logits; /* [n_tokens] 1 = produce a logits row; NULL = last row of each run */
};

struct fwd_ctx;

/* The parts of one device's allocation plan for model m (the whole model or a device's shard):
 * the cache's (cache_plan) and the activations'. */
void fwd_plan(const struct model *m, const struct fwd_params *p, struct dev_plan *plan);

/* One device. Borrowed: m and d must outlive the context. The cache is owned by the context. */
int fwd_create(const struct model *m, struct dev *d, const struct fwd_params *p,
               struct fwd_ctx **out, char *err, size_t errlen);
/* A tensor-parallel group of n_dev devices (borrowed) over the shards of m, with a host
 * communicator and one host thread per device (the caller is device 0's). n_dev == 1 is the
 * same as fwd_create. Under mpirun (dist.h) the group also spans the devices of every worker
 * process (fwd_worker_run), and its allreduces cross the processes. */
int fwd_create_group(const struct model *m, struct dev **devs, int n_dev,
                     const struct fwd_params *p, struct fwd_ctx **out, char *err, size_t errlen);
void fwd_destroy(struct fwd_ctx *f);
/* Devices of the group, over every process of an mpirun job. */
int fwd_n_devices(const struct fwd_ctx *f);
/* The processes of the group (1 without mpirun) and each one's device count,
 * per_proc [DIST_MAX_RANKS]. */
void fwd_topology(const struct fwd_ctx *f, int *n_proc, int *per_proc);

/* The group spans processes and one of them failed (dist_broken): every step fails with
 * DD_EIO from now on, and cache contents are garbage. */
bool fwd_broken(const struct fwd_ctx *f);

/* An mpirun job's worker (dist_rank() > 0): its own devices (borrowed) over the shards of m,
 * serving rank 0's groups. Each fwd_create_group on rank 0 makes the same group here (the
 * parameters come from rank 0), every call on rank 0's group runs here too, and fwd_destroy
 * there ends it here; returns 0 when rank 0 ends the job (dist_finalize), or an error (rank 0
 * gone: message in err). The group spans every process: rank 0's fwd_create_group,
 * fwd_decode, ... are collective calls that the workers answer. */
int fwd_worker_run(const struct model *m, struct dev **devs, int n_dev, char *err, size_t errlen);

/* Device 0's cache, for reading the per-sequence bookkeeping (rs_idx, valid), which is the
 * same on every device. Change state only through the fwd_seq_* calls below. */
struct cache *fwd_cache(struct fwd_ctx *f);
/* cache_seq_* over every device of the group (see cache.h for the rules). A checkpoint holds
 * every device's part, concatenated in rank order. */
void fwd_seq_clear(struct fwd_ctx *f, int64_t s);
bool fwd_seq_rollback(struct fwd_ctx *f, int64_t s, int64_t r);
size_t fwd_ckpt_floats(const struct fwd_ctx *f);
void fwd_seq_save(const struct fwd_ctx *f, int64_t s, float *dst);
void fwd_seq_restore(struct fwd_ctx *f, int64_t s, const float *src);
/* cache_seq_kv_* over every device (the prompt cache): host rows are every device's part of
 * n positions, concatenated in rank order, fwd_kv_floats per position; each call moves rows
 * [r0, r1) only. */
size_t fwd_kv_floats(const struct fwd_ctx *f);
void fwd_seq_kv_copy(struct fwd_ctx *f, int64_t dst, int64_t src, int64_t r0, int64_t r1);
void fwd_seq_kv_download(const struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
                         float *dst);
void fwd_seq_kv_upload(struct fwd_ctx *f, int64_t s, int64_t r0, int64_t r1, int64_t n,
                       const float *src);
/* Trunk steps recorded as graphs and replayed from them (device 0's; 0 without graphs). */
void fwd_graph_stats(const struct fwd_ctx *f, int64_t *captures, int64_t *replays);
/* Time spent in allreduces and their count; bytes device d owns and reads replicated. */
void fwd_comm_stats(const struct fwd_ctx *f, double *seconds, int64_t *calls);
/* Of those seconds, the time spent waiting for the other devices to arrive (see comm.h). */
double fwd_comm_wait_seconds(const struct fwd_ctx *f);
void fwd_device_bytes(const struct fwd_ctx *f, int d, size_t *owned, size_t *replicated);
/* The expert reads of the MoE layers so far (device.h struct dev_moe_stats): calls and
 * experts of device 0 (every device of a group runs the same experts, each its slice), bytes
 * summed over this process's devices. False (and *s zeroed) where the devices keep none. */
bool fwd_moe_stats(const struct fwd_ctx *f, struct dev_moe_stats *s);

/* Trunk forward. Afterwards fwd_logits holds one row per requested token, in batch order,
 * and fwd_hidden the post-output_norm hidden state of every batch row (the MTP input). */
int fwd_decode(struct fwd_ctx *f, const struct fwd_batch *b, char *err, size_t errlen);

/* MTP forward: row t combines token b->token[t] at position b->pos[t] with h_prev [n_tokens][E]
 * (the trunk hidden of position pos-1, zeros when unknown). Writes the MTP block's KV cache and
 * fwd_logits like fwd_decode; fwd_hidden holds the MTP block's hidden rows of the rows that
 * asked for logits only (the other rows only fill the KV cache: their rows are unspecified).
 * Fails with DD_EUNSUPPORTED when the model has no MTP block. */
int fwd_mtp(struct fwd_ctx *f, const struct fwd_batch *b, const float *h_prev, char *err,
            size_t errlen);

/*
 * The hidden pool: rows of n_embd floats on every device of the group (hidden rows are
 * replicated), so MTP inputs never leave the devices. A row is named by set and index:
 * FWD_H_TRUNK i: the last trunk step's hidden of batch row i (valid until the next
 * fwd_decode); FWD_H_MTP i: the last MTP step's hidden of batch row i (until the next MTP
 * step); FWD_H_KEPT i < n_hrows: the caller's, changed only by the calls below. Copies, zeroing
 * and uploads are ordered with the steps on the devices' streams; a download waits.
 */
enum fwd_hset { FWD_H_TRUNK, FWD_H_MTP, FWD_H_KEPT };
int32_t fwd_hrow(const struct fwd_ctx *f, enum fwd_hset set, int64_t i);
void fwd_hrow_copy(struct fwd_ctx *f, int32_t dst, int32_t src);
void fwd_hrow_zero(struct fwd_ctx *f, int32_t row);
void fwd_hrow_upload(struct fwd_ctx *f, int32_t row, const float *src); /* src [n_embd] */
void fwd_hrow_download(struct fwd_ctx *f, int32_t row, float *dst);     /* dst [n_embd] */
/* fwd_mtp with h_prev row t = pool row h_rows[t] (gathered on the devices). */
int fwd_mtp_rows(struct fwd_ctx *f, const struct fwd_batch *b, const int32_t *h_rows, char *err,
                 size_t errlen);

/* Host copies of the last step's rows, valid until the next step (downloaded on first use). */
const float *fwd_logits(struct fwd_ctx *f); /* [n_out][n_vocab] */
int64_t fwd_n_logits(const struct fwd_ctx *f);
/* The index of the largest logit of each of the last step's logits rows [n_out] (the lowest
 * index among ties, as smp_argmax), computed on the devices: only 4 bytes per row come back
 * (8 per row and device in a tensor-parallel group, whose devices hold vocab slices). Valid
 * until the next step. */
const int32_t *fwd_argmax(struct fwd_ctx *f);
/* fwd_argmax's rows and, per row, the softmax probability of its largest logit (over the
 * whole vocabulary: each device sums its slice, 4 more bytes per row and device); what MTP
 * drafting needs of a logits row. Valid until the next step. */
const float *fwd_top_prob(struct fwd_ctx *f);
/* Bytes fwd_logits and fwd_argmax have downloaded so far (what sampling cost the link). */
int64_t fwd_sample_bytes(const struct fwd_ctx *f);
const float *fwd_hidden(struct fwd_ctx *f); /* [n_tokens][n_embd] */

#endif

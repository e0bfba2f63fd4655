/*
 * forward_impl — one device's part of the forward pass (forward.c), driven by the group
 * (fwd_group.c, the public API of forward.h). Users include forward.h only.
 *
 * A fwd_dev runs the whole layer stack on its model — the whole model, or its tensor-parallel
 * shard (fewer heads / narrower FFN per layer, a vocab slice of the LM head) — and meets the
 * other devices of its group at the two allreduce points of every layer through comm.
 */
#ifndef DELTAD_FORWARD_IMPL_H
#define DELTAD_FORWARD_IMPL_H

#include "forward.h" // defines: struct fwd_batch, struct fwd_params

struct comm;

/* One run of consecutive tokens of one sequence inside the batch. */
struct fwd_run {
    int64_t t0, t1; /* rows [t0, t1) */
    int64_t seq;
};

struct fwd_dev;

int fwd__dev_create(const struct model *m, struct dev *d, const struct fwd_params *p,
                    struct comm *comm, int rank, struct fwd_dev **out, char *err, size_t errlen);
void fwd__dev_destroy(struct fwd_dev *f);
/* The batch was validated by the group; runs are its per-sequence runs. */
void fwd__dev_decode(struct fwd_dev *f, const struct fwd_batch *b, const struct fwd_run *runs,
                     int64_t n_runs);
void fwd__dev_mtp(struct fwd_dev *f, const struct fwd_batch *b, const struct fwd_run *runs,
                  int64_t n_runs, const float *h_prev);
struct cache *fwd__dev_cache(struct fwd_dev *f);
/* This device's logits rows [*n_rows][vocab_hi - vocab_lo of its model]. */
const float *fwd__dev_logits(const struct fwd_dev *f, int64_t *n_rows);
const float *fwd__dev_hidden(const struct fwd_dev *f); /* [T][n_embd], replicated */
const struct model *fwd__dev_model(const struct fwd_dev *f);

#endif

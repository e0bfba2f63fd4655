/*
 * eng_mem — what the engine's per-sequence state costs, computed before anything is allocated,
 * so that a configuration that does not fit is refused at start-up with the numbers instead of
 * failing (or swapping) later (issue "Lossless speculative decoding": snapshot memory budgeted
 * at start-up). Also the two sizing rules eng_create and the estimate share.
 *
 * The device parts come from the same allocation plan the forward pass allocates (fwd_plan):
 * the KV rows of every attention layer (the MTP layer's apart), the GDN state in 1 + depth
 * snapshot groups, and the activations of a max_batch_tokens step (reported, not counted
 * against the cache limit); the prompt-cache checkpoints and the speculation checkpoint are
 * host memory. Not counted: the model (mapped from its file).
 *
 * Thread safety: pure functions of their arguments.
 */
#include <stdio.h>

#include "eng.h"                // defines: eng_mem_estimate, eng_mem_check
#include "eng_impl.h"           // defines: eng__snap_depth, eng__draft_cap
#include "engine/compute/fwd.h" // defines: fwd_plan
#include "engine/util.h"        // defines: dd_errf, DD_EFULL

int64_t eng__snap_depth(const struct eng_params *p)
{
    if (!p->spec_types || p->spec_rollback == ENG_ROLLBACK_RECOMPUTE)
        return 0;
    return p->draft_max;
}

int64_t eng__draft_cap(const struct eng_params *p)
{
    if ((p->spec_types & (ENG_SPEC_NGRAM | ENG_SPEC_EXTERNAL)) && p->ngram_max_draft > p->draft_max)
        return p->ngram_max_draft; /* long drafts: covered by a checkpoint */
    return p->draft_max;
}

void eng_mem_estimate(const struct model *m, const struct eng_params *p, struct eng_mem *out)
{
    struct dev_plan plan = {0};
    const struct fwd_params fp = {.max_tokens = p->max_batch_tokens > 0 ? p->max_batch_tokens : 1,
                                  .n_seq = p->n_slots,
                                  .n_ctx = p->n_ctx,
                                  .draft_max = eng__snap_depth(p),
                                  .n_hrows = eng__hrows(m, p)};
    fwd_plan(m, &fp, &plan);
    const size_t gdn = dev_plan_bytes(&plan, "gdn");
    const size_t per_slot = p->n_slots > 0 ? gdn / (size_t)p->n_slots : 0;
    const size_t h = (size_t)m->hp.n_embd * sizeof(float);
    *out = (struct eng_mem){.kv = dev_plan_bytes(&plan, "kv"),
                            .mtp_kv = dev_plan_bytes(&plan, "mtp_kv"),
                            .gdn = gdn,
                            .snapshots = dev_plan_bytes(&plan, "snapshots")};
    out->act = plan.total - (out->kv + out->mtp_kv + out->gdn + out->snapshots);
    if (gdn) {
        out->ckpts = (size_t)(p->n_slots * p->n_checkpoints) * (per_slot + h);
        if (eng__draft_cap(p) > eng__snap_depth(p) && p->spec_types)
            out->ckpts += (size_t)p->n_slots * per_slot; /* the speculation checkpoint */
    }
    out->total = out->kv + out->mtp_kv + out->gdn + out->snapshots + out->ckpts;
}

int eng_mem_check(const struct model *m, const struct eng_params *p, int64_t limit,
                  const char *limit_name, char *err, size_t errlen)
{
    struct eng_mem u;
    eng_mem_estimate(m, p, &u);
    if (limit <= 0 || u.total <= (size_t)limit)
        return 0;
    const double MiB = 1048576.0;
    char lim[48];
    if (limit < 1048576)
        snprintf(lim, sizeof lim, "%lld bytes", (long long)limit);
    else
        snprintf(lim, sizeof lim, "%.1f MiB", (double)limit / MiB);
    dd_errf(err, errlen,
            "the caches need %.1f MiB but %s is %s: KV %.1f MiB (%lld slots x "
            "%lld tokens), MTP layer KV %.1f MiB, GDN state %.1f MiB + %lld snapshot groups "
            "%.1f MiB (slots x (1 + draft_max) x %.2f MiB), checkpoints %.1f MiB (besides: "
            "activations %.1f MiB for %lld-token steps)",
            u.total / MiB, limit_name, lim, u.kv / MiB, (long long)p->n_slots, (long long)p->n_ctx,
            u.mtp_kv / MiB, u.gdn / MiB, (long long)eng__snap_depth(p), u.snapshots / MiB,
            p->n_slots ? u.gdn / MiB / (double)p->n_slots : 0.0, u.ckpts / MiB, u.act / MiB,
            (long long)p->max_batch_tokens);
    return DD_EFULL;
}

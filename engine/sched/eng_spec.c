/*
 * eng_spec — speculative decoding inside the engine step (docs/parallelism-and-speculation.md
 * section 3): drafting (n-gram first, then the model's MTP head chained on its own hidden
 * state), the MTP KV sync after every target batch, and verification with rollback.
 *
 * Drafting only where it pays: each slot's throttle (spec.h) keeps an acceptance estimate and
 * picks this round's draft length from it and from what verification and MTP draft steps cost
 * at the current batch size (linear models of the target and MTP passes fitted to their
 * measured times, spec_fit); when no length pays, the slot is throttled and probes again with
 * one-token drafts after 1, 2, 4 ... 64 rounds. A throttled slot's decode rows wait (up to
 * ENG_MAX_DRAFT of them) and reach the MTP layer in one batch when it drafts again, and the
 * first MTP draft step rides in the sync batch instead of a pass of its own.
 *
 * Lossless by construction: every emitted token is sampled by the slot's own sampler from the
 * target logits of its row, in order, with one RNG draw per token exactly as without
 * speculation; a draft token only decides whether the next row's logits are usable. Rejected
 * rows are rolled back by selecting a GDN snapshot group (fwd_seq_rollback: an index change,
 * no copy, no recomputation) and, for attention, by simply writing later positions over them.
 * A draft longer than the snapshot depth (a long n-gram) is covered by a checkpoint taken before
 * the verification; a rejection beyond the depth restores it and replays the accepted tokens.
 * With rollback by recomputation (ENG_ROLLBACK_RECOMPUTE, a debug mode that measures what the
 * snapshots save) the depth is 0: every verification is checkpointed and every rejection goes
 * through restore + replay, which re-runs the accepted tokens in the next step. The penalties
 * of each row see the tokens accepted before it (slot->gen), as without speculation.
 *
 * Thread: the engine thread only.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eng_impl.h"    // defines: struct eng, struct slot, eng__*
#include "engine/util.h" // defines: ASSERT, dd_now, xcalloc
#include "spec.h"        // defines: spec_ngram_draft

static void add_ns(atomic_llong *acc, double t0)
{
    atomic_fetch_add_explicit(acc, (long long)((dd_now() - t0) * 1e9), memory_order_relaxed);
}

/* Longest draft slot s may take now: room in the context and in max_tokens. */
static int64_t draft_room(const eng_t *e, const struct slot *s, int64_t cap)
{
    int64_t room = e->p.n_ctx - s->n_cached - 2;
    if (s->req->p.max_tokens > 0 && s->req->p.max_tokens - s->n_gen - 1 < room)
        room = s->req->p.max_tokens - s->n_gen - 1;
    return room < cap ? room : cap;
}

/* ---- the throttle's costs ------------------------------------------------------------------ */

double eng__cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Costs of drafting for a slot this round, relative to a plain decode step of the batch the
 * decoding slots make (spec.h); mtp: whether the draft comes from MTP steps. The target step
 * with k more rows is timed at its size (spec_fit_time); before any pass was measured, a
 * verified row costs 20 % and an MTP step 15 % of a step: on the safe side (a CPU's; a GPU's
 * rows cost far less), so that a head that never agrees is found out soon. */
static struct spec_cost draft_cost(const eng_t *e, bool mtp)
{
    struct spec_cost k = {.row = 0.2, .mtp = mtp ? 0.15 : 0.0};
    double w, c, wm, cm;
    const int64_t B = e->n_decoding > 0 ? e->n_decoding : 1;
    if (e->p.spec_prior_costs || !spec_fit_get(&e->fit_trunk, &w, &c))
        return k;
    double step = spec_fit_time(&e->fit_trunk, B);
    k.row = c / step;
    k.n_extra = SPEC_COST_K;
    for (int64_t i = 1; i <= SPEC_COST_K; i++) { /* never cheaper than a shorter draft */
        double x = (spec_fit_time(&e->fit_trunk, B + i) - step) / step;
        k.extra[i] = x > k.extra[i - 1] ? x : k.extra[i - 1];
    }
    if (mtp && spec_fit_get(&e->fit_mtp, &wm, &cm)) /* the pass is shared by the drafting slots */
        k.mtp = (wm / (double)(e->n_mtp_drafting > 0 ? e->n_mtp_drafting : 1) + cm) / step;
    return k;
}

/* The decision of slot s's throttle for drafts of source src (ENG_SRC_*) of at most k_max
 * tokens; counts it. */
static int64_t throttle(eng_t *e, struct slot *s, int src, int64_t k_max)
{
    struct spec_thr *t = &s->thr[src];
    struct spec_cost c = draft_cost(e, src == ENG_SRC_MTP);
    int64_t throttles = t->n_throttles;
    int64_t k = spec_thr_plan(t, &c, k_max, e->spec_round);
    LOG_D("slot %lld: %s drafts: acceptance %.3f, costs of 1 / 2 / 3 rows %.3f / %.3f / %.3f, "
          "an MTP step %.3f -> %lld (%s)",
          (long long)s->id, src == ENG_SRC_MTP ? "MTP" : "n-gram", spec_thr_estimate(t),
          c.n_extra ? c.extra[1] : c.row, c.n_extra ? c.extra[2] : 2 * c.row,
          c.n_extra ? c.extra[3] : 3 * c.row, c.mtp, (long long)k, spec_mode_name(t->mode));
    if (t->n_throttles != throttles)
        atomic_fetch_add_explicit(&e->st_thr_throttles, 1, memory_order_relaxed);
    if (t->mode == SPEC_MODE_PROBE)
        atomic_fetch_add_explicit(&e->st_thr_probes, 1, memory_order_relaxed);
    if (t->mode == SPEC_MODE_THROTTLED)
        atomic_fetch_add_explicit(&e->st_thr_rounds_off, 1, memory_order_relaxed);
    return k;
}

/* ---- drafters ------------------------------------------------------------------------------ */

static void ngram_round(eng_t *e, struct slot *s)
{
    int64_t room = draft_room(e, s, e->p.ngram_max_draft);
    if (room < 1)
        return;
    s->tokens[s->n_cached] = s->last; /* history = cached tokens + the pending one */
    s->n_draft =
        spec_ngram_draft(s->tokens, s->n_cached + 1, e->p.ngram_n, e->p.ngram_min, room, s->draft);
}

/* The result of an MTP row for slot s (logits row o of batch row r): its argmax joins the
 * draft when the head is sure enough (the softmax probability of the argmax: both computed on
 * the devices, fwd_top_prob); otherwise the chain ends here (a chain that ends with no draft is
 * a miss). */
static void take_mtp_row(eng_t *e, struct slot *s, int64_t o, int64_t r)
{
    const float p = fwd_top_prob(e->fwd)[o];
    const int32_t id = fwd_argmax(e->fwd)[o];
    if (p < e->p.mtp_p_min) {
        s->draft_goal = s->n_draft;
        if (s->n_draft == 0)
            spec_thr_miss(&s->thr[ENG_SRC_MTP]); /* an MTP pass for nothing */
        return;
    }
    s->draft[s->n_draft++] = id;
    s->draft_src = ENG_SRC_MTP;
    eng__hcopy(e, eng__hrow(e, s, ENG_H_DRAFT), fwd_hrow(e->fwd, FWD_H_MTP, r));
}

/* MTP draft length each slot wants this round (0 = none): what its throttle allows. */
static void plan_mtp(eng_t *e)
{
    int64_t n = 0;
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        bool want = s->state == SLOT_DECODE && (s->spec & ENG_SPEC_MTP) && s->n_draft == 0 &&
                    s->n_replay == 0 && s->draft_goal >= 0;
        int64_t room = want ? draft_room(e, s, e->p.draft_max) : 0;
        s->draft_goal = room > 0 ? throttle(e, s, ENG_SRC_MTP, room) : 0;
        n += s->draft_goal > 0;
    }
    e->n_mtp_drafting = n;
}

/* Chained MTP drafting from step 1 on (step 0 ran with the sync batch): one token per drafting
 * slot per call, all slots in one batch, each fed its own previous MTP hidden row. */
static void mtp_chain(eng_t *e)
{
    int64_t goal = 0;
    for (int64_t i = 0; i < e->p.n_slots; i++)
        goal = e->slots[i].draft_goal > goal ? e->slots[i].draft_goal : goal;
    char err[256];
    for (int64_t step = 1; step < goal; step++) {
        int64_t n = 0;
        for (int64_t i = 0; i < e->p.n_slots; i++) {
            struct slot *s = &e->slots[i];
            if (s->draft_goal <= step || s->n_draft != step)
                continue;
            e->b_tok[n] = s->draft[step - 1];
            e->b_pos[n] = s->n_cached + step;
            e->b_seq[n] = (int32_t)s->id;
            e->b_want[n] = 1;
            e->h_idx[n] = eng__hrow(e, s, ENG_H_DRAFT);
            n++;
        }
        if (n == 0)
            return;
        struct fwd_batch b = {.n_tokens = n,
                              .token = e->b_tok,
                              .pos = e->b_pos,
                              .seq = e->b_seq,
                              .logits = e->b_want};
        double c1 = eng__cpu_now();
        int rc = fwd_mtp_rows(e->fwd, &b, e->h_idx, err, sizeof err);
        if (rc == DD_EIO)
            return; /* the group lost a process: the next trunk step fails the requests */
        ASSERT(rc == 0);
        spec_fit_add(&e->fit_mtp, (double)n, eng__cpu_now() - c1);
        atomic_fetch_add_explicit(&e->st_mtp_rows, n, memory_order_relaxed);
        for (int64_t r = 0; r < n; r++)
            take_mtp_row(e, &e->slots[e->b_seq[r]], r, r);
    }
}

static void external_round(eng_t *e, struct slot *s)
{
    int64_t room = draft_room(e, s, e->draft_cap);
    if (room < 1)
        return;
    s->tokens[s->n_cached] = s->last;
    int64_t n = e->p.draft_fn(e->p.draft_ud, s->id, s->tokens, s->n_cached + 1, room, s->draft);
    s->n_draft = n < 0 ? 0 : n > room ? room : n;
}

/* A model-free draft (external, else n-gram) for slot s, cut to what its throttle allows. A
 * draft it keeps decides the round (no MTP draft); otherwise MTP may still draft. */
static void free_round(eng_t *e, struct slot *s)
{
    if ((s->spec & ENG_SPEC_EXTERNAL) && e->p.draft_fn)
        external_round(e, s);
    if (s->n_draft == 0 && (s->spec & ENG_SPEC_NGRAM))
        ngram_round(e, s);
    if (s->n_draft == 0)
        return;
    s->n_draft = throttle(e, s, ENG_SRC_FREE, s->n_draft);
    if (s->n_draft > 0) {
        s->draft_src = ENG_SRC_FREE;
        s->draft_goal = -1;
    }
}

void eng__spec_init(eng_t *e)
{
    spec_fit_init(&e->fit_trunk, 0.25); /* per-row compute vs the weight stream, until seen */
    spec_fit_init(&e->fit_mtp, 0.25);
    for (int k = 0; k < 2; k++) {
        spec_thr_reset(&e->thr_pool[k]);
        for (int64_t i = 0; i < e->p.n_slots; i++)
            e->slots[i].thr[k].pool = &e->thr_pool[k];
    }
    if (!e->mtp)
        return;
    const size_t B = (size_t)e->p.max_batch_tokens;
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        s->lag_tok = xcalloc(ENG_MAX_DRAFT, sizeof *s->lag_tok);
        s->lag_pos = xcalloc(ENG_MAX_DRAFT, sizeof *s->lag_pos);
    }
    e->y_tok = xcalloc(B, sizeof *e->y_tok);
    e->y_seq = xcalloc(B, sizeof *e->y_seq);
    e->y_pos = xcalloc(B, sizeof *e->y_pos);
    e->y_want = xcalloc(B, sizeof *e->y_want);
    e->y_idx = xcalloc(B, sizeof *e->y_idx);
}

void eng__spec_deinit(eng_t *e)
{
    for (int64_t i = 0; i < e->p.n_slots && e->mtp; i++) {
        free(e->slots[i].lag_tok);
        free(e->slots[i].lag_pos);
    }
    free(e->y_tok);
    free(e->y_seq);
    free(e->y_pos);
    free(e->y_want);
    free(e->y_idx);
}

/* ---- the MTP KV sync -------------------------------------------------------------------- */

/* Run the sync batch through the MTP layer; its wanted rows are the drafts' step 0. */
static void sync_flush(eng_t *e, int64_t *n)
{
    if (*n == 0)
        return;
    struct fwd_batch b = {
        .n_tokens = *n, .token = e->y_tok, .pos = e->y_pos, .seq = e->y_seq, .logits = e->y_want};
    char err[256];
    int64_t n_want = 0;
    for (int64_t r = 0; r < *n; r++)
        n_want += e->y_want[r] != 0;
    double c1 = eng__cpu_now();
    int rc = fwd_mtp_rows(e->fwd, &b, e->y_idx, err, sizeof err);
    if (rc == DD_EIO) { /* the group lost a process: the next trunk step fails the requests */
        *n = 0;
        return;
    }
    ASSERT(rc == 0);
    if (n_want > 0) /* a pass that drafts (rows without logits only store their K/V) */
        spec_fit_add(&e->fit_mtp, (double)n_want, eng__cpu_now() - c1);
    atomic_fetch_add_explicit(&e->st_mtp_rows, *n, memory_order_relaxed);
    for (int64_t r = 0, o = 0; r < *n; r++)
        if (e->y_want[r])
            take_mtp_row(e, &e->slots[e->y_seq[r]], o++, r);
    *n = 0;
}

/* Row h of the hidden pool is read when the batch runs: it must hold until then. */
static void sync_add(eng_t *e, int64_t *n, int32_t tok, int64_t pos, int64_t seq, int32_t h,
                     bool want)
{
    if (*n == e->p.max_batch_tokens)
        sync_flush(e, n); /* rows of one sequence stay in position order across batches */
    e->y_tok[*n] = tok;
    e->y_pos[*n] = pos;
    e->y_seq[*n] = (int32_t)seq;
    e->y_want[*n] = want;
    e->y_idx[*n] = h;
    (*n)++;
}

/* May slot s leave this step's rows out of the MTP layer for now? Only a plain decode row of a
 * slot that runs no MTP draft this round (nothing reads its MTP KV before it drafts again). */
static bool may_lag(const struct slot *s)
{
    return s->state == SLOT_DECODE && s->run == RUN_DECODE && s->draft_goal == 0 &&
           s->n_lag + s->run_len <= ENG_MAX_DRAFT;
}

/* Feed slot s's lagging rows to the sync batch. */
static void lag_flush(eng_t *e, int64_t *n, struct slot *s)
{
    for (int64_t k = 0; k < s->n_lag; k++)
        sync_add(e, n, s->lag_tok[k], s->lag_pos[k], s->id, eng__hrow(e, s, ENG_H_LAG + (int)k),
                 false);
    s->n_lag = 0;
}

/* The MTP layer's KV follows the target: this step's kept rows (rejected draft rows are left
 * out: later rows overwrite their positions) go through it, each paired with the trunk hidden
 * row of the position before (e->h_idx, filled by eng.c before the pending row moved on). A
 * slot that drafts with MTP this round appends its first draft step to the same batch (the
 * pending token at position n_cached with the pending row): one MTP pass instead of two. A
 * sequence's rows stay one run in position order: its lagging rows, this step's, then the draft
 * row. */
static void mtp_sync(eng_t *e, int64_t n_batch)
{
    double t0 = dd_now();
    int64_t n = 0;
    for (int64_t k = 0; k < n_batch; k++) {
        struct slot *s = &e->slots[e->b_seq[k]];
        bool first = k == 0 || e->b_seq[k - 1] != e->b_seq[k];
        bool last = k + 1 == n_batch || e->b_seq[k + 1] != e->b_seq[k];
        if (may_lag(s)) {
            s->lag_tok[s->n_lag] = e->b_tok[k];
            s->lag_pos[s->n_lag] = e->b_pos[k];
            eng__hcopy(e, eng__hrow(e, s, ENG_H_LAG + (int)s->n_lag), e->h_idx[k]);
            s->n_lag++;
            continue;
        }
        if (first)
            lag_flush(e, &n, s);
        if (e->b_pos[k] < s->n_cached)
            sync_add(e, &n, e->b_tok[k], e->b_pos[k], s->id, e->h_idx[k], false);
        if (last && s->draft_goal > 0)
            sync_add(e, &n, s->last, s->n_cached, s->id, eng__hrow(e, s, ENG_H_PENDING), true);
    }
    for (int64_t i = 0; i < e->p.n_slots; i++) { /* slots without rows in this step */
        struct slot *s = &e->slots[i];
        if (s->run != RUN_NONE)
            continue;
        lag_flush(e, &n, s);
        if (s->draft_goal > 0)
            sync_add(e, &n, s->last, s->n_cached, s->id, eng__hrow(e, s, ENG_H_PENDING), true);
    }
    sync_flush(e, &n);
    add_ns(&e->st_sync_ns, t0);
}

/* ---- drafting ----------------------------------------------------------------------------- */

void eng__spec_draft(eng_t *e, int64_t n_batch)
{
    double t0 = dd_now();
    int64_t n_dec = 0;
    for (int64_t i = 0; i < e->p.n_slots; i++)
        n_dec += e->slots[i].state == SLOT_DECODE;
    e->n_decoding = n_dec; /* the batch a throttle decision weighs its drafts against */
    e->spec_round++;
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        s->n_draft = 0;
        s->draft_goal = 0;
        if (s->state != SLOT_DECODE || s->n_replay != 0)
            continue;
        free_round(e, s);
    }
    if (!e->mtp) {
        add_ns(&e->st_draft_ns, t0);
        return;
    }
    plan_mtp(e);
    add_ns(&e->st_draft_ns, t0);
    mtp_sync(e, n_batch); /* timed as the sync, though it runs the drafts' first step too */
    t0 = dd_now();
    mtp_chain(e);
    add_ns(&e->st_draft_ns, t0);
}

void eng__spec_ckpt_save(eng_t *e, struct slot *s)
{
    double t0 = dd_now();
    fwd_seq_save(e->fwd, s->id, s->spec_ckpt.state);
    eng__hcopy(e, eng__hrow(e, s, ENG_H_SPEC), eng__hrow(e, s, ENG_H_PENDING));
    s->spec_ckpt.pos = s->n_cached;
    add_ns(&e->st_ckpt_ns, t0);
}

/* Restore the state saved before this verification and queue the accepted tokens for replay. */
static void restore_and_replay(eng_t *e, struct slot *s, int64_t p0, int64_t kept)
{
    double t0 = dd_now();
    fwd_seq_restore(e->fwd, s->id, s->spec_ckpt.state);
    add_ns(&e->st_ckpt_ns, t0);
    atomic_fetch_add(&e->st_restores, 1);
    atomic_fetch_add(&e->st_replayed, kept);
    eng__hcopy(e, eng__hrow(e, s, ENG_H_PENDING), eng__hrow(e, s, ENG_H_SPEC));
    memcpy(s->replay, s->tokens + p0, (size_t)kept * sizeof *s->replay);
    s->n_replay = kept;
    s->n_cached = p0;
}

void eng__spec_verify(eng_t *e, struct slot *s, int64_t o0)
{
    const int64_t n = s->run_len - 1;
    const int64_t p0 = s->n_cached;
    int64_t kept = 0, matched = 0;
    bool alive = true;
    s->drafted += n; /* counted before accepting: a request may finish inside the loop */
    for (int64_t i = 0; i <= n && alive; i++) {
        int32_t t = eng__sample_out(e, s, o0 + i);
        s->tokens[s->n_cached++] = e->b_tok[s->row0 + i]; /* the fed token of this row stays */
        kept++;
        alive = eng__accept(e, s, t);
        if (i == n || t != s->draft[i])
            break;
        matched++;
        s->accepted++;
        atomic_fetch_add(&e->st_accepted_at[i < ENG_MAX_DRAFT ? i : ENG_MAX_DRAFT - 1], 1);
    }
    for (int64_t i = 0; i < n && i < ENG_MAX_DRAFT; i++)
        atomic_fetch_add(&e->st_drafted_at[i], 1);
    spec_thr_observe(&s->thr[s->draft_src], n, matched);
    atomic_fetch_add(&e->st_drafted, n);
    atomic_fetch_add(&e->st_accepted, matched);
    atomic_fetch_add(&e->st_verify_steps, 1);
    eng__hcopy(e, eng__hrow(e, s, ENG_H_PENDING),
               fwd_hrow(e->fwd, FWD_H_TRUNK, s->row0 + kept - 1));
    int64_t reject = s->run_len - kept;
    if (reject > 0)
        atomic_fetch_add(&e->st_rollbacks, 1);
    if (reject > 0 && !fwd_seq_rollback(e->fwd, s->id, reject)) {
        ASSERT(s->spec_ckpt.pos == p0); /* planned: drafts beyond the depth carry a checkpoint */
        restore_and_replay(e, s, p0, kept);
    }
    s->n_draft = 0;
}

/*
 * eng — the engine thread: slots, continuous batching with chunked prefill, the prompt cache
 * with GDN checkpoints, sampling and emission (contract in eng.h; DESIGN.md section 2).
 *
 * One step (eng_step) runs the numbered phases: 1 admit, 2 reap, 3 plan, 4 forward, 5 sample,
 * 6 verify (speculation: issue "Lossless speculative decoding"), 7 emit, 8 sleep.
 *
 * Invariants:
 * - Only the engine thread touches slots, the cache and the device.
 * - slot->tokens[0 .. n_cached) are the tokens whose state is in the cache for that sequence;
 *   group 0 (or rs_idx) holds the GDN state after exactly those tokens.
 * - Every checkpoint of a slot holds the GDN state after tokens[0 .. pos) with pos <= n_cached.
 * - All memory (slots, samplers, checkpoints, batch arrays) is allocated by eng_create.
 */
#include "eng.h" // defines: eng_create, eng_submit, ...

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eng_impl.h"            // defines: struct eng_req, eng__req_*
#include "engine/compute/dist.h" // defines: DIST_MAX_RANKS
#include "engine/compute/fwd.h"  // defines: fwd_decode
#include "engine/model/tok.h"    // defines: tok_stream_push
#include "engine/util.h"         // defines: xcalloc, dd_buf_reserve, LOG_*, dd_now
#include "smp.h"                 // defines: smp_init, smp_set

/* ============================================================================================
 * Inbox (any thread)
 * ========================================================================================== */

int eng_submit(eng_t *e, eng_req_t *r, char *err, size_t errlen)
{
    if (r->p.n_prompt < 1 || r->p.n_prompt >= e->p.n_ctx) {
        dd_errf(err, errlen,
                "the prompt has %lld tokens; this server's context is %lld tokens "
                "(at least one must remain for the answer)",
                (long long)r->p.n_prompt, (long long)e->p.n_ctx);
        return DD_EINVAL;
    }
    for (int64_t i = 0; i < r->p.n_prompt; i++)
        if (r->p.prompt[i] < 0 || r->p.prompt[i] >= e->m->hp.n_vocab) {
            dd_errf(err, errlen, "prompt token %lld has id %d, outside the vocabulary",
                    (long long)i, r->p.prompt[i]);
            return DD_EINVAL;
        }
    int64_t nb = 0; /* message ends: keep the ascending ones inside the prompt */
    for (int64_t i = 0; i < r->p.n_bounds; i++)
        if (r->p.bounds[i] >= 1 && r->p.bounds[i] < r->p.n_prompt &&
            (nb == 0 || r->p.bounds[i] > r->p.bounds[nb - 1]))
            r->p.bounds[nb++] = r->p.bounds[i];
    r->p.n_bounds = nb;
    pthread_mutex_lock(&e->mu);
    if (e->stopping || e->in_count >= e->p.queue_max) {
        pthread_mutex_unlock(&e->mu);
        dd_errf(err, errlen, e->stopping ? "the server is shutting down" : "the queue is full");
        return DD_EFULL;
    }
    eng__req_retain(r);
    r->next = NULL;
    if (e->in_tail)
        e->in_tail->next = r;
    else
        e->in_head = r;
    e->in_tail = r;
    e->in_count++;
    pthread_cond_signal(&e->cv); /* the one wakeup; signals coalesce */
    pthread_mutex_unlock(&e->mu);
    return 0;
}

/* Pop the oldest queued request, or NULL. Engine thread. */
static eng_req_t *inbox_pop(eng_t *e)
{
    pthread_mutex_lock(&e->mu);
    eng_req_t *r = e->in_head;
    if (r) {
        e->in_head = r->next;
        if (!e->in_head)
            e->in_tail = NULL;
        e->in_count--;
    }
    pthread_mutex_unlock(&e->mu);
    return r;
}

/* ============================================================================================
 * Slots: state and finishing (the prompt cache and its checkpoints: eng_cache.c)
 * ========================================================================================== */

void eng__slot_set_state(struct slot *s, enum slot_state st)
{
    static const bool legal[3][3] = {/* from FREE */ {false, true, false},
                                     /* from PREFILL */ {true, false, true},
                                     /* from DECODE */ {true, false, false}};
    ASSERT(legal[s->state][st]);
    LOG_D("slot %lld: state %d -> %d", (long long)s->id, s->state, st);
    s->state = st;
}

void eng__finish(eng_t *e, struct slot *s, enum eng_finish why, const char *error)
{
    eng_req_t *r = s->req;
    eng__req_usage(r, s->n_reused, s->n_gen);
    eng__req_spec(r, s->drafted, s->accepted);
    eng__req_finish(r, why, error);
    eng__req_notify(r);
    eng__gram_stop(s);
    eng_req_release(r);
    s->req = NULL;
    s->last_used = dd_now();
    eng__slot_set_state(s, SLOT_FREE);
    atomic_fetch_sub(&e->st_active, 1);
}

/* ============================================================================================
 * Phases 1-3: admit, reap, plan
 * ========================================================================================== */

static void slot_start(eng_t *e, struct slot *s, eng_req_t *r, int64_t reuse)
{
    s->req = r;
    s->n_cached = reuse;
    s->n_prompt_done = reuse;
    memcpy(s->tokens, r->p.prompt, (size_t)reuse * sizeof *s->tokens);
    s->n_gen = 0;
    dd_buf_truncate(&s->pend, 0);
    s->n_draft = s->n_replay = 0;
    s->drafted = s->accepted = 0;
    s->thr[0].wait = s->thr[1].wait = 0; /* a new request: probe at once if throttled (the
                                          * estimates stay) */
    s->n_lag = 0; /* the old request's lagging MTP rows: dropped (they only shape drafts) */
    s->spec = r->p.spec_override ? r->p.spec_types & e->p.spec_types : e->p.spec_types;
    smp_set(&s->smp, &r->p.s); /* logit_bias borrowed from r, which outlives the slot's use */
    tok_stream_init(&s->ts);
    eng__gram_start(e, s);
    s->n_reused = reuse;
    eng__req_usage(r, reuse, 0);
    atomic_fetch_add(&e->st_cached, reuse);
    atomic_fetch_add(&e->st_active, 1);
    eng__slot_set_state(s, SLOT_PREFILL);
    LOG_D("slot %lld: admitted, prompt %lld tokens, %lld cached", (long long)s->id,
          (long long)r->p.n_prompt, (long long)reuse);
}

static void phase_admit(eng_t *e)
{
    for (;;) {
        bool any = false;
        for (int64_t i = 0; i < e->p.n_slots && !any; i++)
            any = e->slots[i].state == SLOT_FREE;
        if (!any)
            return;
        eng_req_t *r = inbox_pop(e);
        if (!r)
            return;
        if (atomic_load(&r->cancelled)) {
            eng__req_finish(r, ENG_FINISH_CANCELLED, NULL);
            eng__req_notify(r);
            eng_req_release(r);
            continue;
        }
        int64_t reuse;
        struct slot *s = eng__cache_admit(e, r, &reuse);
        slot_start(e, s, r, reuse);
    }
}

static void phase_reap(eng_t *e)
{
    double now = dd_now();
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->state == SLOT_FREE)
            continue;
        if (atomic_load(&s->req->cancelled))
            eng__finish(e, s, ENG_FINISH_CANCELLED, NULL);
        else if (s->req->p.deadline > 0 && now > s->req->p.deadline)
            eng__finish(e, s, ENG_FINISH_TIMEOUT, "request deadline exceeded");
    }
}

static void batch_add(eng_t *e, int64_t *n, int32_t tok, int64_t pos, int64_t seq, bool want)
{
    e->b_tok[*n] = tok;
    e->b_pos[*n] = pos;
    e->b_seq[*n] = (int32_t)seq;
    e->b_want[*n] = want;
    (*n)++;
}

/* A generating slot's run: a replay after a restored checkpoint, [last + draft] to verify, or
 * the plain [last]. A run never splits across batches: a draft that does not fit is dropped. */
static void plan_decode(eng_t *e, struct slot *s, int64_t *n, int64_t budget)
{
    s->row0 = *n;
    if (s->n_replay > 0 && *n + s->n_replay + 1 <= budget) {
        for (int64_t i = 0; i < s->n_replay; i++)
            batch_add(e, n, s->replay[i], s->n_cached + i, s->id, false);
        batch_add(e, n, s->last, s->n_cached + s->n_replay, s->id, true);
        s->run = RUN_REPLAY;
    } else if (s->n_replay == 0 && s->n_draft > 0 && *n + 1 + s->n_draft <= budget) {
        if (s->n_draft > e->snap_depth) /* deeper than the snapshots: checkpoint first */
            eng__spec_ckpt_save(e, s);
        batch_add(e, n, s->last, s->n_cached, s->id, true);
        for (int64_t i = 0; i < s->n_draft; i++)
            batch_add(e, n, s->draft[i], s->n_cached + 1 + i, s->id, true);
        s->run = RUN_VERIFY;
    } else if (s->n_replay == 0) {
        s->n_draft = 0;
        batch_add(e, n, s->last, s->n_cached, s->id, true);
        s->run = RUN_DECODE;
    }
    s->run_len = *n - s->row0;
}

static void plan_prefill(eng_t *e, struct slot *s, int64_t *n, int64_t budget)
{
    const eng_req_t *r = s->req;
    const int64_t end = eng__cache_chunk_end(e, s, s->n_prompt_done + (budget - *n));
    s->row0 = *n;
    for (int64_t p = s->n_prompt_done; p < end; p++)
        batch_add(e, n, r->p.prompt[p], p, s->id, p == r->p.n_prompt - 1);
    s->run_len = *n - s->row0;
    s->run = s->run_len ? RUN_PREFILL : RUN_NONE;
}

/* Generating slots first (decode latency), then prefill chunks within the token budget. */
static int64_t phase_plan(eng_t *e)
{
    int64_t n = 0, budget = e->p.max_batch_tokens;
    for (int64_t i = 0; i < e->p.n_slots; i++)
        e->slots[i].run = RUN_NONE;
    for (int64_t i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].state == SLOT_DECODE && n < budget)
            plan_decode(e, &e->slots[i], &n, budget);
    for (int64_t i = 0; i < e->p.n_slots && n < budget; i++)
        if (e->slots[i].state == SLOT_PREFILL)
            plan_prefill(e, &e->slots[i], &n, budget);
    return n;
}

/* ============================================================================================
 * Phases 5 and 7: sample and emit (the per-token part lives in eng_emit.c)
 * ========================================================================================== */

/* Append rows [row0, row0 + len) of the batch to the slot's cached tokens. */
static void keep_rows(eng_t *e, struct slot *s, int64_t len)
{
    for (int64_t i = 0; i < len; i++)
        s->tokens[s->n_cached++] = e->b_tok[s->row0 + i];
    eng__hcopy(e, eng__hrow(e, s, ENG_H_PENDING), fwd_hrow(e->fwd, FWD_H_TRUNK, s->row0 + len - 1));
}

/* After the forward step: per slot, keep its rows, sample where due, verify drafts. A logits
 * row comes back only when a slot's sampler needs it (eng__sample_out). */
static void phase_sample_emit(eng_t *e)
{
    /* logits rows are compacted (one per wanted batch row, in batch order): index them */
    int64_t n_out = 0;
    for (int64_t r = 0; r < e->b_n; r++)
        e->b_outrow[r] = e->b_want[r] ? n_out++ : -1;
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->run == RUN_NONE)
            continue;
        const int64_t last_row = s->row0 + s->run_len - 1;
        if (s->run == RUN_VERIFY) { /* every row of a verify run has logits */
            eng__spec_verify(e, s, e->b_outrow[s->row0]);
            continue;
        }
        keep_rows(e, s, s->run_len);
        if (s->run == RUN_PREFILL) {
            s->n_prompt_done += s->run_len;
            atomic_fetch_add(&e->st_prompt, s->run_len);
            if (s->n_prompt_done < s->req->p.n_prompt)
                continue;
            eng__slot_set_state(s, SLOT_DECODE);
        }
        s->n_replay = 0;
        eng__accept(e, s, eng__sample_out(e, s, e->b_outrow[last_row]));
    }
    for (int64_t i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].state == SLOT_PREFILL)
            eng__cache_after_prefill(e, &e->slots[i]);
}

/* MTP inputs of this batch, as rows of the devices' hidden pool: row k pairs its token with the
 * trunk hidden of the previous position: trunk row k-1 of the same run, or for a run's first
 * row the slot's pending row as it is now (copied to its PREV row: phase 5 moves pending on). */
static void prepare_mtp_inputs(eng_t *e, int64_t n)
{
    if (!e->mtp)
        return;
    for (int64_t k = 0; k < n; k++) {
        if (k > 0 && e->b_seq[k] == e->b_seq[k - 1]) {
            e->h_idx[k] = fwd_hrow(e->fwd, FWD_H_TRUNK, k - 1);
            continue;
        }
        const struct slot *s = &e->slots[e->b_seq[k]];
        e->h_idx[k] = eng__hrow(e, s, ENG_H_PREV);
        eng__hcopy(e, e->h_idx[k], eng__hrow(e, s, ENG_H_PENDING));
    }
}

/* ---- the kept hidden rows (eng_impl.h) ---- */

int64_t eng__hrows(const struct model *m, const struct eng_params *p)
{
    return (p->spec_types & ENG_SPEC_MTP) && m->hp.n_nextn > 0 ? p->n_slots * ENG_H_SLOT : 0;
}

int32_t eng__hrow(const eng_t *e, const struct slot *s, int which)
{
    return e->mtp ? fwd_hrow(e->fwd, FWD_H_KEPT, s->id * ENG_H_SLOT + which) : -1;
}

void eng__hcopy(eng_t *e, int32_t dst, int32_t src)
{
    if (e->mtp)
        fwd_hrow_copy(e->fwd, dst, src);
}

void eng__hsave(eng_t *e, const struct slot *s, float *dst)
{
    if (e->mtp)
        fwd_hrow_download(e->fwd, eng__hrow(e, s, ENG_H_PENDING), dst);
    else
        memset(dst, 0, (size_t)e->m->hp.n_embd * sizeof(float));
}

void eng__hload(eng_t *e, const struct slot *s, const float *src)
{
    if (!e->mtp)
        return;
    if (src)
        fwd_hrow_upload(e->fwd, eng__hrow(e, s, ENG_H_PENDING), src);
    else
        fwd_hrow_zero(e->fwd, eng__hrow(e, s, ENG_H_PENDING));
}

/* ============================================================================================
 * The loop
 * ========================================================================================== */

/* A failed step: its requests end with an error. When the forward group lost a process of
 * its mpirun job (DD_EIO, fwd.h) nothing can be computed any more: every request ends with
 * 503 (ENG_FINISH_UNAVAILABLE), and so will each later one (its step fails at once). */
static void fail_batch(eng_t *e, int rc, const char *msg)
{
    const bool gone = rc == DD_EIO;
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->state == SLOT_FREE || (s->run == RUN_NONE && !gone))
            continue;    /* no rows in the failed step: its state is intact, it keeps going */
        s->n_cached = 0; /* a step that failed part-way may have advanced its GDN state */
        eng__finish(e, s, gone ? ENG_FINISH_UNAVAILABLE : ENG_FINISH_ERROR,
                    gone ? "the model's tensor-parallel job lost a process (see the server "
                           "log); retry once the job is restarted"
                         : msg);
    }
}

/* One scheduler step; returns false when nothing is runnable. */
static bool eng_step(eng_t *e)
{
    phase_admit(e);            /* 1 */
    phase_reap(e);             /* 2 */
    int64_t n = phase_plan(e); /* 3 */
    e->step_prompt_rows = 0;
    for (int64_t i = 0; i < e->p.n_slots; i++)
        e->step_prompt_rows += e->slots[i].run == RUN_PREFILL ? e->slots[i].run_len : 0;
    if (n == 0)
        return false;
    e->b_n = n;
    struct fwd_batch b = {
        .n_tokens = n, .token = e->b_tok, .pos = e->b_pos, .seq = e->b_seq, .logits = e->b_want};
    char err[256];
    double t0 = dd_now(), c0 = eng__cpu_now();
    bool injected = dd_fault_hit(DD_FAULT_STEP); /* DELTAD_FAIL_STEP (FAULT=1 builds only) */
    if (injected)
        dd_errf(err, sizeof err, "injected failure (DELTAD_FAIL_STEP)");
    int rc = injected ? DD_EINVAL : fwd_decode(e->fwd, &b, err, sizeof err); /* 4 */
    if (rc) {
        LOG_E("forward step failed: %s", err);
        fail_batch(e, rc, "internal error in the forward step");
        return true;
    }
    if (e->step_prompt_rows == 0) /* the throttle's model of a decode / verify step */
        spec_fit_add(&e->fit_trunk, (double)n, eng__cpu_now() - c0);
    prepare_mtp_inputs(e, n);
    phase_sample_emit(e);  /* 5 sample, 6 verify, 7 emit */
    eng__spec_draft(e, n); /* MTP KV sync and drafts for the next step */
    eng__gram_check_drafts(e);
    atomic_store_explicit(&e->st_sample_bytes, fwd_sample_bytes(e->fwd), memory_order_relaxed);
    atomic_fetch_add(&e->st_busy_us, (long long)((dd_now() - t0) * 1e6));
    atomic_fetch_add(&e->st_steps, 1);
    return true;
}

static bool all_idle(eng_t *e)
{
    for (int64_t i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].state != SLOT_FREE)
            return false;
    return true;
}

static void cancel_everything(eng_t *e)
{
    for (int64_t i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].state != SLOT_FREE)
            eng__finish(e, &e->slots[i], ENG_FINISH_CANCELLED, "server shutting down");
    eng_req_t *r;
    while ((r = inbox_pop(e))) {
        eng__req_finish(r, ENG_FINISH_CANCELLED, "server shutting down");
        eng__req_notify(r);
        eng_req_release(r);
    }
}

/* Copy what monitoring may read about the slots into atomics (eng_get_slots). */
static void publish_slots(eng_t *e)
{
    for (int64_t i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        atomic_store_explicit(&s->pub_state, (int)s->state, memory_order_relaxed);
        atomic_store_explicit(&s->pub_n_past, s->n_cached, memory_order_relaxed);
        atomic_store_explicit(&s->pub_n_gen, s->n_gen, memory_order_relaxed);
        atomic_store_explicit(&s->pub_n_prompt, s->req ? s->req->p.n_prompt : 0,
                              memory_order_relaxed);
        atomic_store_explicit(&s->pub_drafted, s->drafted, memory_order_relaxed);
        atomic_store_explicit(&s->pub_accepted, s->accepted, memory_order_relaxed);
        for (int k = 0; k < 2; k++) {
            atomic_store_explicit(&s->pub_spec_mode[k], (int)s->thr[k].mode, memory_order_relaxed);
            atomic_store_explicit(&s->pub_spec_acc_ppm[k],
                                  (long long)(spec_thr_estimate(&s->thr[k]) * 1e6),
                                  memory_order_relaxed);
        }
        for (int64_t k = 0; k < ENG_PUB_CKPTS; k++)
            atomic_store_explicit(&s->pub_ckpt[k], k < e->n_ckpt ? s->ckpts[k].pos : -1,
                                  memory_order_relaxed);
    }
}

static void *eng_main(void *arg)
{
    eng_t *e = arg;
    pthread_setname_np(pthread_self(), "deltad-engine"); /* /metrics' per-thread CPU time */
    for (;;) {
        bool busy = eng_step(e);
        busy |= eng__cache_background(e); /* saves below the slots: off the first token's path */
        pthread_mutex_lock(&e->mu);
        bool stop = e->stopping && ((all_idle(e) && !e->in_head) || dd_now() > e->drain_until);
        if (!busy && !stop && !e->in_head) { /* 8: sleep until a submit or stop (or 100 ms:
                                              * the loop counter is the watchdog's heartbeat) */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000L;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
        atomic_fetch_add_explicit(&e->st_loops, 1, memory_order_relaxed);
        publish_slots(e);
        pthread_mutex_unlock(&e->mu);
        if (stop)
            break;
    }
    cancel_everything(e);
    if (!fwd_broken(e->fwd))   /* a broken job's caches hold garbage */
        eng__cache_persist(e); /* with a disk tier: the slots' checkpoints outlive the daemon */
    return NULL;
}

/* ============================================================================================
 * Lifecycle and statistics
 * ========================================================================================== */

static void slot_init(eng_t *e, struct slot *s, int64_t id)
{
    const int64_t V = e->m->hp.n_vocab;
    s->id = id;
    s->tokens = xcalloc((size_t)e->p.n_ctx, sizeof *s->tokens);
    s->gen = xcalloc((size_t)e->p.n_ctx + 1, sizeof *s->gen);
    struct smp_params sp = {.temperature = 0.0f, .top_p = 1.0f, .repetition_penalty = 1.0f};
    smp_init(&s->smp, V, &sp);
    dd_buf_reserve(&s->pend, 1024);
    s->ckpts = xcalloc((size_t)e->n_ckpt, sizeof *s->ckpts);
    const size_t nf = fwd_ckpt_floats(e->fwd), E = (size_t)e->m->hp.n_embd;
    for (int64_t i = 0; i < e->n_ckpt; i++) {
        s->ckpts[i].pos = -1;
        s->ckpts[i].state = xaligned_alloc(nf * sizeof(float));
        s->ckpts[i].h = xcalloc(E, sizeof(float));
    }
    s->draft = xcalloc((size_t)e->draft_cap + 1, sizeof *s->draft);
    s->replay = xcalloc((size_t)e->draft_cap + 1, sizeof *s->replay);
    s->spec_ckpt.pos = -1;
    spec_thr_reset(&s->thr[0]);
    spec_thr_reset(&s->thr[1]);
    s->spec_ckpt.state =
        e->draft_cap > e->snap_depth ? xaligned_alloc(nf * sizeof(float) + 64) : NULL;
}

static void slot_deinit(eng_t *e, struct slot *s)
{
    free(s->tokens);
    free(s->gen);
    smp_deinit(&s->smp);
    dd_buf_free(&s->pend);
    for (int64_t i = 0; i < e->n_ckpt; i++) {
        free(s->ckpts[i].state);
        free(s->ckpts[i].h);
    }
    free(s->ckpts);
    free(s->draft);
    free(s->replay);
    free(s->spec_ckpt.state);
    eng__gram_deinit(e, s);
}

static int check_params(const struct eng_params *p, char *err, size_t errlen)
{
    if (p->n_slots < 1 || p->n_slots > 1024 || p->n_ctx < 8 || p->max_batch_tokens < 1 ||
        p->max_batch_tokens < p->n_slots || p->queue_max < 0 || p->n_checkpoints < 0 ||
        p->n_checkpoints > 256 || p->checkpoint_every < 1) {
        dd_errf(err, errlen,
                "invalid engine parameters: slots %lld (1..1024), ctx %lld (>= 8), "
                "max_batch_tokens %lld (>= slots), queue_max %lld, checkpoints %lld (0..256)",
                (long long)p->n_slots, (long long)p->n_ctx, (long long)p->max_batch_tokens,
                (long long)p->queue_max, (long long)p->n_checkpoints);
        return DD_EINVAL;
    }
    if (p->spec_types & ~(unsigned)(ENG_SPEC_NGRAM | ENG_SPEC_MTP | ENG_SPEC_EXTERNAL) ||
        ((p->spec_types & ENG_SPEC_EXTERNAL) && !p->draft_fn) || p->draft_max < 0 ||
        p->draft_max > 16 || p->ngram_max_draft < 0 || p->ngram_max_draft > ENG_MAX_DRAFT ||
        ((p->spec_types & ENG_SPEC_NGRAM) &&
         (p->ngram_n < 1 || p->ngram_n > 16 || p->ngram_min < 1 || p->ngram_min > p->ngram_n)) ||
        (p->spec_types && p->draft_max < 1) ||
        (p->spec_types && p->max_batch_tokens < 1 + p->draft_max) ||
        (p->spec_rollback != ENG_ROLLBACK_SNAPSHOT && p->spec_rollback != ENG_ROLLBACK_RECOMPUTE)) {
        dd_errf(err, errlen,
                "invalid speculation parameters: types %u, draft_max %lld (1..16 when "
                "speculating, and max_batch_tokens >= 1 + draft_max), ngram n %lld min %lld "
                "(1 <= min <= n <= 16), ngram_max_draft %lld (0..%d), rollback %d (0 snapshot, "
                "1 recompute)",
                p->spec_types, (long long)p->draft_max, (long long)p->ngram_n,
                (long long)p->ngram_min, (long long)p->ngram_max_draft, ENG_MAX_DRAFT,
                p->spec_rollback);
        return DD_EINVAL;
    }
    if (p->mem_max < 0 || p->cache_ram_max < 0 || p->cache_disk_max < 0 ||
        p->cache_save_piece < 0) {
        dd_errf(err, errlen,
                "invalid engine parameters: mem_max %lld (>= 0, 0 = no limit), cache_ram_max "
                "%lld, cache_disk_max %lld, cache_save_piece %lld (each >= 0)",
                (long long)p->mem_max, (long long)p->cache_ram_max, (long long)p->cache_disk_max,
                (long long)p->cache_save_piece);
        return DD_EINVAL;
    }
    return 0;
}

int eng_create(const struct model *m, struct dev *d, const struct eng_params *p, eng_t **out,
               char *err, size_t errlen)
{
    return eng_create_group(m, &d, 1, p, out, err, errlen);
}

int eng_create_group(const struct model *m, struct dev **devs, int n_dev,
                     const struct eng_params *p, eng_t **out, char *err, size_t errlen)
{
    int rc = check_params(p, err, errlen);
    if (!rc)
        rc = eng_mem_check(m, p, p->mem_max, "the memory limit (mem_max)", err, errlen);
    if (rc)
        return rc;
    eng_t *e = xcalloc(1, sizeof *e);
    e->m = m;
    e->dev = devs[0];
    e->p = *p;
    struct fwd_params fp = {.max_tokens = p->max_batch_tokens,
                            .n_seq = p->n_slots,
                            .n_ctx = p->n_ctx,
                            .draft_max = eng__snap_depth(p),
                            .n_hrows = eng__hrows(m, p),
                            .graphs = !p->no_graphs};
    rc = fwd_create_group(m, devs, n_dev, &fp, &e->fwd, err, errlen);
    if (rc) {
        free(e);
        return rc;
    }
    e->n_ckpt = fwd_cache(e->fwd)->n_gdn_layers ? p->n_checkpoints : 0;
    e->mtp = (p->spec_types & ENG_SPEC_MTP) && m->hp.n_nextn > 0;
    if ((p->spec_types & ENG_SPEC_MTP) && !e->mtp)
        LOG_W("speculation: the model has no MTP block; MTP drafts are off");
    e->draft_cap = eng__draft_cap(p);
    e->snap_depth = eng__snap_depth(p);
    e->slots = xcalloc((size_t)p->n_slots, sizeof *e->slots);
    for (int64_t i = 0; i < p->n_slots; i++)
        slot_init(e, &e->slots[i], i);
    eng__spec_init(e);
    e->b_tok = xcalloc((size_t)p->max_batch_tokens, sizeof *e->b_tok);
    e->b_seq = xcalloc((size_t)p->max_batch_tokens, sizeof *e->b_seq);
    e->b_pos = xcalloc((size_t)p->max_batch_tokens, sizeof *e->b_pos);
    e->b_want = xcalloc((size_t)p->max_batch_tokens, sizeof *e->b_want);
    e->b_none = xcalloc((size_t)p->max_batch_tokens, sizeof *e->b_none);
    e->b_outrow = xcalloc((size_t)p->max_batch_tokens, sizeof *e->b_outrow);
    e->h_idx = xcalloc((size_t)p->max_batch_tokens, sizeof *e->h_idx);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    rc = eng__cache_init(e, err, errlen);
    if (rc) {
        eng_destroy(e);
        return rc;
    }
    *out = e;
    return 0;
}

int eng_start(eng_t *e, char *err, size_t errlen)
{
    if (pthread_create(&e->thread, NULL, eng_main, e) != 0) {
        dd_errf(err, errlen, "cannot start the engine thread");
        return DD_ENOMEM;
    }
    e->running = true;
    return 0;
}

void eng_stop(eng_t *e, double drain_s)
{
    if (!e->running)
        return;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    e->drain_until = dd_now() + drain_s;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->running = false;
}

void eng_destroy(eng_t *e)
{
    if (!e)
        return;
    eng_stop(e, 0.0);
    eng__spec_deinit(e);
    eng__cache_deinit(e);
    for (int64_t i = 0; i < e->p.n_slots; i++)
        slot_deinit(e, &e->slots[i]);
    free(e->slots);
    eng__gram_deinit(e, NULL);
    free(e->b_tok);
    free(e->b_seq);
    free(e->b_pos);
    free(e->b_want);
    free(e->b_none);
    free(e->b_outrow);
    free(e->h_idx);
    fwd_destroy(e->fwd);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

void eng_get_stats(eng_t *e, struct eng_stats *s)
{
    pthread_mutex_lock(&e->mu);
    s->queue_depth = e->in_count;
    pthread_mutex_unlock(&e->mu);
    s->active_slots = atomic_load_explicit(&e->st_active, memory_order_relaxed);
    s->n_slots = e->p.n_slots;
    s->prompt_tokens_total = atomic_load_explicit(&e->st_prompt, memory_order_relaxed);
    s->generated_tokens_total = atomic_load_explicit(&e->st_gen, memory_order_relaxed);
    s->steps_total = atomic_load_explicit(&e->st_steps, memory_order_relaxed);
    s->cached_tokens_total = atomic_load_explicit(&e->st_cached, memory_order_relaxed);
    s->busy_seconds = atomic_load_explicit(&e->st_busy_us, memory_order_relaxed) * 1e-6;
    int64_t calls;
    fwd_comm_stats(e->fwd, &s->allreduce_seconds, &calls); /* racy read: monitoring only */
    s->n_devices = fwd_n_devices(e->fwd);
    int per_proc[DIST_MAX_RANKS], n_proc;
    fwd_topology(e->fwd, &n_proc, per_proc);
    s->n_ranks = n_proc;
    s->drafted_total = atomic_load_explicit(&e->st_drafted, memory_order_relaxed);
    s->accepted_total = atomic_load_explicit(&e->st_accepted, memory_order_relaxed);
    s->verify_steps_total = atomic_load_explicit(&e->st_verify_steps, memory_order_relaxed);
    s->loops_total = atomic_load_explicit(&e->st_loops, memory_order_relaxed);
    s->draft_max = e->draft_cap;
    s->rollbacks_total = atomic_load_explicit(&e->st_rollbacks, memory_order_relaxed);
    s->restores_total = atomic_load_explicit(&e->st_restores, memory_order_relaxed);
    s->replayed_total = atomic_load_explicit(&e->st_replayed, memory_order_relaxed);
    s->ckpt_seconds = atomic_load_explicit(&e->st_ckpt_ns, memory_order_relaxed) * 1e-9;
    s->draft_seconds = atomic_load_explicit(&e->st_draft_ns, memory_order_relaxed) * 1e-9;
    s->sync_seconds = atomic_load_explicit(&e->st_sync_ns, memory_order_relaxed) * 1e-9;
    s->mtp_rows_total = atomic_load_explicit(&e->st_mtp_rows, memory_order_relaxed);
    s->sample_bytes_total = atomic_load_explicit(&e->st_sample_bytes, memory_order_relaxed);
    s->spec_throttles_total = atomic_load_explicit(&e->st_thr_throttles, memory_order_relaxed);
    s->spec_probes_total = atomic_load_explicit(&e->st_thr_probes, memory_order_relaxed);
    s->spec_rounds_throttled_total =
        atomic_load_explicit(&e->st_thr_rounds_off, memory_order_relaxed);
    s->spec_slots_throttled = 0;
    for (int64_t i = 0; i < e->p.n_slots; i++)
        s->spec_slots_throttled +=
            atomic_load_explicit(&e->slots[i].pub_spec_mode[ENG_SRC_MTP], memory_order_relaxed) ==
            SPEC_MODE_THROTTLED;
    s->pc_queries = atomic_load_explicit(&e->st_pc_queries, memory_order_relaxed);
    s->pc_hit_slot = atomic_load_explicit(&e->st_pc_hit[0], memory_order_relaxed);
    s->pc_hit_ram = atomic_load_explicit(&e->st_pc_hit[1], memory_order_relaxed);
    s->pc_hit_disk = atomic_load_explicit(&e->st_pc_hit[2], memory_order_relaxed);
    s->pc_copies = atomic_load_explicit(&e->st_pc_copies, memory_order_relaxed);
    s->pc_demoted = atomic_load_explicit(&e->st_pc_demoted, memory_order_relaxed);
    s->pc_abandoned = atomic_load_explicit(&e->st_pc_abandoned, memory_order_relaxed);
    struct pcache_stats ps;
    pcache_get_stats(e->pc, &ps);
    s->pc_ram_bytes = ps.ram_bytes;
    s->pc_ram_entries = ps.ram_entries;
    s->pc_disk_entries = ps.disk_entries;
    s->pc_ram_evictions = ps.ram_evictions;
    s->pc_disk_writes = ps.disk_writes;
    s->pc_disk_write_errors = ps.disk_write_errors;
    s->pc_disk_reads = ps.disk_reads;
    s->pc_disk_rejected = ps.disk_rejected;
    s->pc_disk_bytes = ps.disk_bytes;
    s->pc_disk_evictions = ps.disk_evictions;
    s->pc_disk_writes_skipped = ps.disk_writes_skipped;
    for (int i = 0; i < ENG_MAX_DRAFT; i++) {
        s->drafted_at[i] = atomic_load_explicit(&e->st_drafted_at[i], memory_order_relaxed);
        s->accepted_at[i] = atomic_load_explicit(&e->st_accepted_at[i], memory_order_relaxed);
    }
}

int64_t eng_get_slots(eng_t *e, struct eng_slot_stats *out, int64_t max)
{
    /* Published by the engine after every step: each field is current to within one step,
     * and fields may be mutually inconsistent by one step (monitoring only). */
    for (int64_t i = 0; i < e->p.n_slots && i < max; i++) {
        struct slot *s = &e->slots[i];
        out[i] = (struct eng_slot_stats){
            .state = atomic_load_explicit(&s->pub_state, memory_order_relaxed),
            .n_past = atomic_load_explicit(&s->pub_n_past, memory_order_relaxed),
            .n_prompt = atomic_load_explicit(&s->pub_n_prompt, memory_order_relaxed),
            .n_generated = atomic_load_explicit(&s->pub_n_gen, memory_order_relaxed),
            .drafted = atomic_load_explicit(&s->pub_drafted, memory_order_relaxed),
            .accepted = atomic_load_explicit(&s->pub_accepted, memory_order_relaxed),
            .spec_mode = atomic_load_explicit(&s->pub_spec_mode[ENG_SRC_MTP], memory_order_relaxed),
            .spec_acceptance =
                atomic_load_explicit(&s->pub_spec_acc_ppm[ENG_SRC_MTP], memory_order_relaxed) *
                1e-6,
            .ngram_mode =
                atomic_load_explicit(&s->pub_spec_mode[ENG_SRC_FREE], memory_order_relaxed),
            .ngram_acceptance =
                atomic_load_explicit(&s->pub_spec_acc_ppm[ENG_SRC_FREE], memory_order_relaxed) *
                1e-6};
        for (int64_t k = 0; k < ENG_PUB_CKPTS; k++) {
            int64_t pos = atomic_load_explicit(&s->pub_ckpt[k], memory_order_relaxed);
            if (pos > 0)
                out[i].ckpt_pos[out[i].n_ckpts++] = pos;
        }
    }
    return e->p.n_slots;
}

/*
 * eng_impl — internals shared by the engine's own files (eng.c: the loop and slots; eng_req.c:
 * requests and their outboxes). Users include eng.h only.
 */
#ifndef DELTAD_ENG_IMPL_H
#define DELTAD_ENG_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "eng.h"                // defines: public engine types
#include "engine/compute/fwd.h" // defines: struct fwd_ctx
#include "engine/model/tok.h"   // defines: struct tok_stream
#include "engine/util.h"        // defines: struct dd_buf
#include "gram.h"               // defines: gram_m_t, gram_vocab_t
#include "pcache.h"             // defines: pcache_t, pcache_get_stats, struct pcache_entry
#include "smp.h"                // defines: struct smp
#include "spec.h"               // defines: struct spec_thr, struct spec_fit

/* Bytes a request's outbox reserves when created (eng_req.c). */
#define ENG_OUTBOX_RESERVE 4096

/* A request, shared by an HTTP connection and the engine (refcounted, STYLE rule 14). */
struct eng_req {
    atomic_int refs;
    atomic_bool cancelled;
    struct eng_req_params p; /* owned: prompt, stop strings, logit_bias */
    void (*notify)(void *ud);
    void *ud;
    struct eng_req *next; /* inbox link, guarded by the engine's inbox mutex */
    /* outbox, guarded by mu: written by the engine thread, drained by the HTTP side */
    pthread_mutex_t mu;
    struct dd_buf out; /* text not yet taken; keeps its allocation across takes */
    struct eng_tok_info *toks;
    int64_t n_toks, toks_cap;
    bool done;
    enum eng_finish finish;
    char error[256];
    int64_t prompt_tokens, cached_tokens, completion_tokens;
    int64_t drafted_tokens, accepted_tokens;
    double t_queued, t_first_token, t_done;
};

enum slot_state { SLOT_FREE = 0, SLOT_PREFILL = 1, SLOT_DECODE = 2 };

/* A prompt-cache checkpoint: the GDN state after tokens[0 .. pos) and the trunk hidden row of
 * position pos - 1 (the MTP input of the next position). */
struct ckpt {
    int64_t pos;  /* -1 = unused */
    float *state; /* [cache_ckpt_floats] */
    float *h;     /* [n_embd] */
    uint64_t age; /* the engine's ckpt_clock when saved or last used: smaller = older */
    bool keep;    /* a system-prompt boundary: dropped only when every other one is */
    bool saved;   /* in the tiers below the slots, or its save is under way (eng_cache.c) */
};

/* A checkpoint being saved to the tiers below the slots (eng_cache.c): pe holds its tokens,
 * state and hidden row, and its KV rows [lo, pos); rows [0, lo) are still read from slot s. */
struct save {
    struct pcache_entry *pe; /* NULL = unused; owned until inserted into the tiers */
    struct slot *s;
    int64_t lo;
    uint64_t seq; /* start order: the oldest is worked on first */
};

/* Draft sources with a throttle each (struct slot.thr). */
enum { ENG_SRC_FREE = 0, ENG_SRC_MTP = 1 };

/* A slot's run in the current batch. */
enum run_kind { RUN_NONE = 0, RUN_PREFILL, RUN_DECODE, RUN_VERIFY, RUN_REPLAY };

struct slot {
    int64_t id;
    enum slot_state state;
    eng_req_t *req;
    int32_t *tokens; /* [n_ctx] tokens whose state is cached */
    int64_t n_cached;
    int64_t n_prompt_done; /* prompt tokens already in the cache */
    int64_t n_gen;
    int32_t last;     /* sampled, not yet fed */
    double last_used; /* for LRU choice among free slots */
    struct smp smp;   /* parameters of the current request; its logits: the last sampled row
                       * after bias and penalties */
    int32_t *gen;     /* [n_ctx + 1] the current request's generated tokens [n_gen], in order:
                       * the sampler's penalty history */
    struct tok_stream ts;
    struct dd_buf pend; /* text held back while it may start a stop string (1 KiB reserved) */
    struct ckpt *ckpts; /* [n_ckpt] */
    /* this step's run */
    enum run_kind run;
    int64_t row0, run_len; /* rows [row0, row0 + run_len) of the batch */
    /* speculation */
    unsigned spec;  /* drafters enabled for the current request (ENG_SPEC_*) */
    int32_t *draft; /* [draft_cap] proposed continuation of `last` */
    int64_t n_draft;
    int64_t draft_goal;    /* MTP draft length wanted this round */
    struct ckpt spec_ckpt; /* state before a verification longer than the snapshot depth (its
                            * hidden row: the slot's ENG_H_SPEC row on the devices) */
    int32_t *replay;       /* [draft_cap + 1] accepted tokens to re-feed after a restore */
    int64_t n_replay;
    int64_t drafted, accepted; /* per request */
    struct spec_thr thr[2];    /* the draft throttles of model-free (n-gram, external) and MTP
                                * drafts: kept across requests (the slot's acceptance
                                * estimates), their waits reset by a new request */
    int draft_src;             /* ENG_SRC_* of the current draft */
    /* decode rows not yet fed to the MTP layer: while a slot is throttled, its MTP KV catches up
     * in one batch when drafting resumes instead of a one-row MTP pass every step */
    int32_t *lag_tok; /* [ENG_MAX_DRAFT] (their MTP inputs: the slot's ENG_H_LAG rows) */
    int64_t *lag_pos; /* [ENG_MAX_DRAFT] */
    int64_t n_lag;
    int64_t n_reused; /* prompt tokens of the current request served by the cache */
    /* constrained decoding (eng_gram.c): the request's matcher, advanced by every emitted token
     * only (so a rejected draft leaves it untouched); the mask and the masked row are
     * allocated the first time the slot serves a grammar */
    gram_m_t *gm;    /* NULL = unconstrained */
    uint32_t *gbits; /* [gram_vocab_words] allowed tokens of the current row */
    float *grow;     /* [n_vocab] the row with disallowed logits at -1e30 */
    /* published after every step for eng_get_slots (other threads) */
    atomic_int pub_state;
    atomic_llong pub_n_past, pub_n_gen, pub_n_prompt, pub_drafted, pub_accepted;
    atomic_llong pub_ckpt[ENG_PUB_CKPTS]; /* checkpoint positions, -1 = none */
    atomic_int pub_spec_mode[2];          /* enum spec_mode, by ENG_SRC_* */
    atomic_llong pub_spec_acc_ppm[2];     /* the acceptance estimates, in millionths */
};

struct eng {
    const struct model *m;
    struct dev *dev;
    struct eng_params p;
    struct fwd_ctx *fwd;
    struct slot *slots; /* [n_slots] */
    int64_t n_ckpt;
    uint64_t ckpt_clock; /* ticks at every checkpoint save or use (struct ckpt.age) */
    pcache_t *pc;        /* the RAM and disk tiers, NULL = none */
    uint64_t *ph;        /* [n_ctx + 1] prefix hashes of the prompt being admitted */
    struct save *saves;  /* [n_saves] saves to the tiers under way (eng_cache.c) */
    int64_t n_saves;
    uint64_t save_clock;
    int64_t step_prompt_rows; /* prompt rows the last step computed (0: none ran) */
    int64_t draft_cap;        /* longest draft of any drafter */
    int64_t snap_depth; /* GDN snapshot groups beyond the first: a longer draft is checkpointed */
    /* batch arrays [max_batch_tokens] */
    int32_t *b_tok, *b_seq;
    int64_t *b_pos;
    uint8_t *b_want;
    int64_t *b_outrow; /* [max_batch_tokens] logits row of a batch row, -1 = none */
    int64_t b_n;       /* rows in the current batch */
    int32_t *h_idx;    /* [max_batch_tokens] MTP inputs: rows of the hidden pool */
    uint8_t *b_none;   /* [max_batch_tokens] zeros: no logits rows */
    bool mtp;          /* the MTP drafter is active (enabled and the model has the block) */
    /* the draft throttle's cost models (eng_spec.c): CPU seconds of target passes without
     * prompt rows, and of MTP passes that draft, by their rows; the batch of this round's
     * decisions */
    struct spec_fit fit_trunk, fit_mtp;
    int64_t n_decoding;          /* slots decoding */
    int64_t n_mtp_drafting;      /* slots that drafted with MTP in the last round */
    int64_t spec_round;          /* drafting rounds (steps) so far: the throttles' common clock */
    struct spec_thr thr_pool[2]; /* acceptance over all slots, by ENG_SRC_* (spec_thr.pool) */
    gram_vocab_t *gvocab;        /* the tokenizer's trie, built with the first grammar request */
    /* the MTP sync batch [max_batch_tokens] (rows of the step plus slots' lagging rows) */
    int32_t *y_tok, *y_seq;
    int64_t *y_pos;
    uint8_t *y_want; /* rows whose logits are wanted: the first step of MTP drafts */
    int32_t *y_idx;  /* [max_batch_tokens] their MTP inputs: rows of the hidden pool */
    /* inbox */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    eng_req_t *in_head, *in_tail;
    int64_t in_count;
    bool stopping, running;
    double drain_until;
    pthread_t thread;
    /* statistics (relaxed atomics: read by other threads) */
    atomic_llong st_prompt, st_gen, st_steps, st_cached, st_busy_us, st_active;
    atomic_llong st_drafted, st_accepted, st_verify_steps, st_loops;
    atomic_llong st_rollbacks, st_restores, st_replayed, st_ckpt_ns;
    atomic_llong st_draft_ns, st_sync_ns, st_mtp_rows; /* MTP drafting and KV sync work */
    atomic_llong st_sample_bytes;                      /* fwd_sample_bytes after each step */
    atomic_llong st_pc_queries, st_pc_hit[3], st_pc_copies, st_pc_demoted; /* prompt cache */
    atomic_llong st_pc_abandoned; /* saves given up: a request needed their rows first */
    atomic_llong st_thr_throttles, st_thr_probes, st_thr_rounds_off; /* the draft throttle */
    atomic_llong st_accepted_at[ENG_MAX_DRAFT]; /* drafts accepted at position i */
    atomic_llong st_drafted_at[ENG_MAX_DRAFT];
};

/* ---- MTP hidden rows, kept on the devices (fwd's hidden pool, fwd.h; eng.c) ----
 * With the MTP drafter (e->mtp) each slot keeps ENG_H_SLOT rows of the pool: ENG_H_PENDING the
 * trunk hidden of position n_cached - 1 (zeros if unknown); ENG_H_PREV pending as it was before
 * this step's sampling moved it (the MTP input of the slot's first batch row); ENG_H_DRAFT the
 * MTP hidden carried between chained draft steps; ENG_H_SPEC pending at the speculation
 * checkpoint; ENG_H_LAG + j the MTP inputs of the slot's lagging rows. Without MTP nothing
 * reads them: there are none, copies are no-ops and checkpoints keep zeros. */
enum {
    ENG_H_PENDING,
    ENG_H_PREV,
    ENG_H_DRAFT,
    ENG_H_SPEC,
    ENG_H_LAG,
    ENG_H_SLOT = ENG_H_LAG + ENG_MAX_DRAFT
};
int64_t eng__hrows(const struct model *m, const struct eng_params *p); /* pool rows kept */
int32_t eng__hrow(const eng_t *e, const struct slot *s, int which);    /* -1 without MTP */
void eng__hcopy(eng_t *e, int32_t dst, int32_t src);
void eng__hsave(eng_t *e, const struct slot *s, float *dst);       /* pending -> host [E] */
void eng__hload(eng_t *e, const struct slot *s, const float *src); /* NULL: zeros */
/* ---- sizing (eng_mem.c) ---- */
int64_t eng__snap_depth(const struct eng_params *p); /* GDN snapshot groups beyond the first */
int64_t eng__draft_cap(const struct eng_params *p);  /* longest draft of any drafter */
/* ---- speculation (eng_spec.c) ---- */
/* CPU seconds of the process (all threads): the clock of the draft throttle's cost models, which
 * a busy machine's preemptions do not distort as they do wall time. */
double eng__cpu_now(void);
/* Buffers of the MTP sync (per slot and per engine), after the slots exist; and their end. */
void eng__spec_init(eng_t *e);
void eng__spec_deinit(eng_t *e);
/* After the step's n_batch rows were sampled: bring the MTP layer's KV up to date with them
 * and propose drafts for every decoding slot that speculates (n-gram first, then MTP). */
void eng__spec_draft(eng_t *e, int64_t n_batch);
/* Save the state before a verification the snapshots cannot cover (long draft, or every
 * verification when rolling back by recomputation). */
void eng__spec_ckpt_save(eng_t *e, struct slot *s);
/* Verify slot s's run: sample row by row, accept the matching drafts, roll the rest back. */
void eng__spec_verify(eng_t *e, struct slot *s, int64_t o0); /* its rows: logits rows o0 .. */
/* ---- constrained decoding (eng_gram.c) ---- */
void eng__gram_start(eng_t *e, struct slot *s);  /* a new request on s: its matcher, if any */
void eng__gram_stop(struct slot *s);             /* the request left s */
void eng__gram_deinit(eng_t *e, struct slot *s); /* slot teardown (s) or, with s NULL, the trie */
/* The row to sample slot s from: logits itself, or the masked copy; NULL when the grammar
 * allows no token at all (the request must end in an error). */
const float *eng__gram_row(eng_t *e, struct slot *s, const float *logits);
/* Advance s's matcher by an emitted token; false if the grammar refuses it. */
bool eng__gram_accept(eng_t *e, struct slot *s, int32_t id);
/* Cut every constrained slot's draft at its first token the grammar refuses. */
void eng__gram_check_drafts(eng_t *e);
/* ---- the prompt cache (eng_cache.c) ---- */
/* The free slot a new request r goes to, with the longest cached prefix of its prompt already
 * in place; returns it with *reuse = the prompt tokens served (0 = start from scratch). */
struct slot *eng__cache_admit(eng_t *e, const eng_req_t *r, int64_t *reuse);
/* The end of slot s's next prefill chunk, at most want: the chunk stops where a checkpoint
 * is due, so saving it costs no extra forward work. */
int64_t eng__cache_chunk_end(const eng_t *e, const struct slot *s, int64_t want);
/* After a prefill step of s: save a checkpoint if one is due at s->n_cached. */
void eng__cache_after_prefill(eng_t *e, struct slot *s);
/* The tiers below the slots (after the slots exist), and their end. */
int eng__cache_init(eng_t *e, char *err, size_t errlen);
void eng__cache_deinit(eng_t *e);
/* Between steps: a piece of saving checkpoints below the slots, never in the way of a first
 * token that is one step away. Returns whether there was work (call again). */
bool eng__cache_background(eng_t *e);
/* At shutdown, with a disk tier: write every slot's checkpoints there, and wait for the
 * writes. */
void eng__cache_persist(eng_t *e);
/* ---- the step (eng.c) and its per-token end (eng_emit.c) ---- */
void eng__slot_set_state(struct slot *s, enum slot_state st);
void eng__finish(eng_t *e, struct slot *s, enum eng_finish why, const char *error);
/* Sample one target row [n_vocab] with the slot's sampler, the request's generated tokens as
 * the penalties' history (plain decoding and verification alike), and accept a token. */
int32_t eng__sample_row(eng_t *e, struct slot *s, const float *logits); /* -1: none allowed */
/* eng__sample_row on logits row o of the step (fwd_logits), downloaded only when needed: a
 * slot that samples greedily from the raw row takes the devices' argmax (fwd_argmax). */
int32_t eng__sample_out(eng_t *e, struct slot *s, int64_t o);
bool eng__accept(eng_t *e, struct slot *s, int32_t id); /* false when the request finished */

/* Engine-thread side of the outbox. */
void eng__req_append(eng_req_t *r, const char *text, size_t len, const struct eng_tok_info *ti);
void eng__req_finish(eng_req_t *r, enum eng_finish why, const char *error);
void eng__req_notify(eng_req_t *r);
void eng__req_usage(eng_req_t *r, int64_t cached, int64_t completion);
void eng__req_spec(eng_req_t *r, int64_t drafted, int64_t accepted);
void eng__req_retain(eng_req_t *r);

#endif

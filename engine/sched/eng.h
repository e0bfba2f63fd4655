/*
 * eng — the engine: one thread that owns the slots, the caches and the device, and runs the
 * scheduler loop of DESIGN.md section 2 (admit, reap, plan, forward, sample, verify, emit,
 * sleep) with continuous batching and chunked prefill.
 *
 * Threads and ownership (STYLE rules 14, 22, 23):
 * - eng_create / eng_start / eng_stop / eng_destroy: the start-up (main) thread.
 * - eng_submit, eng_req_*: any thread (HTTP threads). A request is refcounted: the creator holds
 *   one reference, eng_submit takes another for the engine; each side calls eng_req_release once.
 *   The dispose callback runs on whichever thread releases last.
 * - Results flow back through the request's outbox (a mutex-guarded buffer): the engine appends
 *   text and token info, then calls the request's notify callback (e.g. MHD_resume_connection);
 *   the HTTP side drains it with eng_req_take. Notifications may coalesce.
 * - The inbox is MPSC (mutex + list) with one wakeup (condvar); wakeups coalesce.
 */
#ifndef DELTAD_ENG_H
#define DELTAD_ENG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/compute/device.h" // defines: struct dev
#include "engine/model/model.h"    // defines: struct model
#include "gram.h"                  // defines: gram_t
#include "smp.h"                   // defines: struct smp_params

/* Engine parameters, passed by value (the engine never reads the server config). */
struct eng_params {
    int64_t n_slots;          /* concurrent sequences */
    int64_t n_ctx;            /* positions per slot */
    int64_t max_batch_tokens; /* tokens per forward step */
    int64_t queue_max;        /* admitted-but-waiting requests before eng_submit refuses */
    int64_t n_checkpoints;    /* GDN prompt-cache checkpoints per slot (hybrid models) */
    int64_t checkpoint_every; /* minimum spacing of prompt-cache checkpoints, tokens */
    int64_t draft_max;        /* longest MTP draft and, with snapshot rollback, the GDN
                               * snapshot depth reserved for speculation (0 = none) */
    unsigned spec_types;      /* ENG_SPEC_NGRAM | ENG_SPEC_MTP (0 = no speculation) */
    int64_t ngram_n;          /* longest n-gram matched against the history (e.g. 3) */
    int64_t ngram_min;        /* shortest n-gram accepted as a match (1 .. ngram_n) */
    int64_t ngram_max_draft;  /* longest n-gram draft; beyond draft_max a checkpoint is taken */
    float mtp_p_min;          /* stop an MTP draft at a token the head gives less than this */
    int spec_rollback;        /* ENG_ROLLBACK_SNAPSHOT, or ENG_ROLLBACK_RECOMPUTE (debug) */
    bool spec_prior_costs;    /* the draft throttle weighs drafts by its prior costs, not the
                               * timed passes, so its decisions follow the tokens alone (tests:
                               * timing on a loaded machine must not decide whether they draft) */
    int64_t mem_max;          /* bytes the caches and checkpoints may take (0 = no limit) */
    int64_t cache_ram_max;    /* bytes of saved prefixes kept in host RAM (0 = none) */
    const char *cache_dir;    /* directory of saved prefixes that outlive the daemon (NULL or
                               * "" = none); borrowed during eng_create only */
    int64_t cache_disk_max;   /* bytes of cache_dir's files (0 = no limit; LRU by mtime) */
    int64_t cache_save_piece; /* KV bytes a background save copies between two steps (0 = the
                               * default, 1 MiB; tests make it tiny) */
    bool no_graphs;           /* launch every op each step; by default devices with graphs
                               * (CUDA) replay decode and verification steps (fwd_params) */
    /* Optional external draft source, tried before the built-in ones for slots whose mask has
     * ENG_SPEC_EXTERNAL: propose up to max tokens continuing hist[0 .. n) (cached tokens + the
     * pending one). Called on the engine thread; must not block. Used by tests to inject
     * drafts with a known acceptance pattern, and by embedders with their own drafter. */
    int64_t (*draft_fn)(void *ud, int64_t slot, const int32_t *hist, int64_t n, int64_t max,
                        int32_t *out);
    void *draft_ud;
};

/* Draft sources (bit mask). */
enum { ENG_SPEC_NGRAM = 1u, ENG_SPEC_MTP = 2u, ENG_SPEC_EXTERNAL = 4u };
#define ENG_MAX_DRAFT 64

/* How rejected draft rows leave the GDN state. SNAPSHOT: select the snapshot group written
 * during verification (no copy, no re-run). RECOMPUTE (debug, to measure what snapshots save):
 * keep no snapshot groups, checkpoint the state before every verification, and on a rejection
 * restore it and re-run the accepted tokens in the next step. Both are lossless. */
enum { ENG_ROLLBACK_SNAPSHOT = 0, ENG_ROLLBACK_RECOMPUTE = 1 };

enum eng_finish {
    ENG_FINISH_NONE = 0,
    ENG_FINISH_STOP,        /* end-of-generation token or a stop string */
    ENG_FINISH_LENGTH,      /* max_tokens or the context is full */
    ENG_FINISH_CANCELLED,   /* client gone */
    ENG_FINISH_TIMEOUT,     /* past the request deadline */
    ENG_FINISH_ERROR,       /* internal error; message in the outbox */
    ENG_FINISH_UNAVAILABLE, /* the engine cannot compute any more (a process of its
                             * tensor-parallel job is gone): 503, message in the outbox */
};

#define ENG_MAX_STOP 16
#define ENG_MAX_TOP_LOGPROBS 20

struct eng_req_params {
    int32_t *prompt; /* [n_prompt] token ids; transferred to the request */
    int64_t n_prompt;
    /* Positions where a chat message ends (ascending; transferred, may be NULL): prefill
     * saves the recurrent state there (the first one, the system prompt, kept longest), since
     * that is where later conversations diverge. Without them (raw prompts) the state is saved
     * every checkpoint_every tokens and one token before the prompt's end. Positions outside
     * 1 .. n_prompt - 1 or out of order are ignored. */
    int64_t *bounds; /* [n_bounds] */
    int64_t n_bounds;
    int64_t max_tokens;       /* 0 = until end-of-generation or the context is full */
    char *stop[ENG_MAX_STOP]; /* NUL-terminated, transferred; never emitted */
    int n_stop;
    struct smp_params s;  /* handed to the slot's sampler as is; s.logit_bias transferred; the
                           * penalties' history is the request's generated tokens */
    bool logprobs;        /* report each token's log-probability (struct eng_tok_info) */
    int32_t top_logprobs; /* alternatives per token, 0 .. ENG_MAX_TOP_LOGPROBS */
    double deadline;      /* absolute dd_now() seconds, 0 = none */
    bool cache_prompt;    /* reuse a slot's cached prefix (default true) */
    bool spec_override;   /* false: the engine's spec_types; true: spec_types below (a subset) */
    unsigned spec_types;
    gram_t *gram; /* output constraint (one reference, transferred), NULL = none: only tokens the
                   * grammar allows are sampled, end-of-generation only where it accepts */
};

/* Info about one generated token (only when logprobs were asked for). */
struct eng_tok_info {
    int32_t id;
    float logprob;
    int32_t n_top;
    int32_t top_id[ENG_MAX_TOP_LOGPROBS];
    float top_logprob[ENG_MAX_TOP_LOGPROBS];
};

/* What eng_req_take hands over: everything appended since the last take. */
struct eng_delta {
    char *text; /* new text: valid UTF-8, never part of a stop string; malloc'd, caller frees */
    size_t len;
    struct eng_tok_info *toks; /* [n_toks] tokens finished in this delta (logprobs only); free */
    int64_t n_toks;
    bool done;              /* the request is finished; no more deltas will come */
    enum eng_finish finish; /* valid when done */
    char error[256];        /* message when finish == ENG_FINISH_ERROR */
    int64_t prompt_tokens, cached_tokens, completion_tokens; /* usage, valid when done */
    int64_t drafted_tokens, accepted_tokens;                 /* speculation, valid when done */
    double t_queued, t_first_token, t_done;                  /* dd_now() stamps for metrics */
};

typedef struct eng eng_t;
typedef struct eng_req eng_req_t;

/* Memory the engine's per-sequence state takes for parameters p (any thread; allocates
 * nothing). The MTP layer's KV is counted apart from the trunk's; snapshots are the draft_max
 * extra GDN state groups that make rollback free. */
struct eng_mem {
    size_t kv;        /* trunk attention layers' K and V, all slots */
    size_t mtp_kv;    /* the MTP layer's K and V, all slots */
    size_t gdn;       /* one GDN state group (conv + SSM of every recurrent layer), all slots */
    size_t snapshots; /* the draft_max extra groups kept for rollback */
    size_t ckpts;     /* prompt-cache checkpoints and the speculation checkpoint */
    size_t total;     /* all of the above: what the cache limit bounds */
    size_t act;       /* besides: the forward pass's activations (the rest of the device plan) */
};
void eng_mem_estimate(const struct model *m, const struct eng_params *p, struct eng_mem *out);
/* Refuse (DD_EFULL, the numbers in err) when the estimate exceeds limit bytes; limit_name says
 * where the limit came from. 0 when it fits or limit is 0. */
int eng_mem_check(const struct model *m, const struct eng_params *p, int64_t limit,
                  const char *limit_name, char *err, size_t errlen);

/* The engine over a loaded model and a device (both borrowed; they must outlive it). The caches
 * are refused when p->mem_max is set and eng_mem_check fails. */
int eng_create(const struct model *m, struct dev *d, const struct eng_params *p, eng_t **out,
               char *err, size_t errlen);
/* The same over a tensor-parallel group of n_dev devices (see fwd.h). */
int eng_create_group(const struct model *m, struct dev **devs, int n_dev,
                     const struct eng_params *p, eng_t **out, char *err, size_t errlen);
/* Start the engine thread. */
int eng_start(eng_t *e, char *err, size_t errlen);
/* Stop accepting, let running requests finish for up to drain_s seconds, cancel the rest, join
 * the thread. */
void eng_stop(eng_t *e, double drain_s);
void eng_destroy(eng_t *e);

/* A request. notify(ud) is called by the engine thread after new output was appended (may
 * coalesce); it must not block. The caller owns the returned reference. */
eng_req_t *eng_req_create(struct eng_req_params *p, void (*notify)(void *ud), void *ud);
/* Hand a request to the engine. Returns 0 (the engine took its own reference), DD_EFULL when
 * the queue is full, DD_EINVAL when the prompt does not fit the context (message in err). */
int eng_submit(eng_t *e, eng_req_t *r, char *err, size_t errlen);
/* Ask the engine to stop the request (client gone); takes effect within one engine step. */
void eng_req_cancel(eng_req_t *r);
/* Move everything new into *d (zeroed first). Returns true when d carries text, tokens or done. */
bool eng_req_take(eng_req_t *r, struct eng_delta *d);
void eng_delta_free(struct eng_delta *d);
void eng_req_release(eng_req_t *r);

/* Point-in-time statistics for /metrics and /slots (any thread; values are relaxed reads). */
#define ENG_PUB_CKPTS 64 /* checkpoints per slot /slots shows at most */
struct eng_slot_stats {
    int state; /* 0 free, 1 prefill, 2 decode */
    int64_t n_past, n_prompt, n_generated, n_cached_tokens;
    int64_t drafted, accepted; /* speculation, current request */
    int spec_mode; /* the MTP draft throttle (enum spec_mode): 0 on, 1 throttled, 2 probe */
    double spec_acceptance; /* its acceptance estimate (per draft token), kept across requests */
    int ngram_mode;         /* the same for model-free (n-gram, external) drafts */
    double ngram_acceptance;
    int64_t n_ckpts; /* the slot's prompt-cache checkpoints: their positions */
    int64_t ckpt_pos[ENG_PUB_CKPTS];
};
struct eng_stats {
    int64_t queue_depth, active_slots, n_slots;
    int64_t prompt_tokens_total, generated_tokens_total, steps_total, cached_tokens_total;
    double busy_seconds;      /* time spent in forward steps */
    double allreduce_seconds; /* part of it spent in tensor-parallel allreduces */
    int64_t n_devices;        /* of the tensor-parallel group, over every process */
    int64_t n_ranks;          /* processes of the mpirun job (1 without mpirun) */
    int64_t drafted_total, accepted_total, verify_steps_total;
    int64_t loops_total; /* engine loop iterations: moves at least every 100 ms while alive */
    int64_t draft_max;
    int64_t rollbacks_total; /* verifications that rejected rows */
    int64_t restores_total;  /* of which were undone by checkpoint restore + replay */
    int64_t replayed_total;  /* tokens re-run after those restores */
    double ckpt_seconds;     /* time spent saving and restoring speculation checkpoints */
    double draft_seconds;    /* time spent drafting (n-gram lookups and MTP passes) */
    double sync_seconds;     /* time spent feeding accepted rows to the MTP layer's KV */
    int64_t mtp_rows_total;  /* rows run through the MTP layer (drafting + sync) */
    /* the draft throttles: times a slot stopped drafting because it did not pay, one-token
     * probes, slot rounds spent throttled (both drafter kinds), slots whose MTP drafts are
     * throttled now */
    int64_t spec_throttles_total, spec_probes_total, spec_rounds_throttled_total;
    int64_t spec_slots_throttled;
    int64_t drafted_at[ENG_MAX_DRAFT], accepted_at[ENG_MAX_DRAFT]; /* per draft position */
    /* bytes of logits downloaded for sampling and drafting (a greedy row: 4, the argmax) */
    int64_t sample_bytes_total;
    /* the prompt cache (issue 36): requests that looked for a prefix, prompt tokens served
     * from a slot (in place or copied from another slot), from RAM and from disk, slot-to-slot
     * copies, checkpoints saved to the RAM / disk tiers when a slot dropped them, and the
     * tiers' own counters */
    int64_t pc_queries, pc_hit_slot, pc_hit_ram, pc_hit_disk, pc_copies, pc_demoted;
    int64_t pc_ram_bytes, pc_ram_entries, pc_disk_entries, pc_ram_evictions;
    int64_t pc_disk_writes, pc_disk_write_errors, pc_disk_reads, pc_disk_rejected;
    int64_t pc_disk_bytes, pc_disk_evictions, pc_disk_writes_skipped;
    int64_t pc_abandoned; /* saves given up: a new request needed the slot's rows first */
};
void eng_get_stats(eng_t *e, struct eng_stats *s);
/* Copies up to max slots' stats; returns the number of slots. */
int64_t eng_get_slots(eng_t *e, struct eng_slot_stats *out, int64_t max);

#endif

/*
 * metrics — counters and histograms kept by the HTTP layer, rendered together with the
 * engine's statistics as Prometheus text (GET /metrics).
 *
 * Series (prefix deltad_): http_requests_total{endpoint,status}, requests_active,
 * streams_active, requests_cancelled_total, requests_rejected_total{reason},
 * request_success_total{finish_reason}, queue_depth, slots_active, slots_total,
 * prompt_tokens_total, generation_tokens_total, cached_prompt_tokens_total, engine_steps_total,
 * engine_busy_seconds_total, generation_tokens_per_second, spec_drafted_tokens_total,
 * spec_accepted_tokens_total, spec_verify_steps_total, spec_{drafted,accepted}_at_position_total
 * {position}, and the histograms
 * time_to_first_token_seconds, inter_token_latency_seconds, e2e_request_latency_seconds.
 *
 * Thread safety: every update is a relaxed atomic; any thread may update or render at any time.
 * A rendered page is a consistent-enough snapshot, not an atomic one.
 */
#ifndef DELTAD_METRICS_H
#define DELTAD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sched/eng.h" // defines: struct eng_stats, enum eng_finish

/* Endpoints counted separately (aliases count with their /v1 route). */
enum metrics_ep {
    METRICS_EP_CHAT = 0,
    METRICS_EP_COMPLETIONS,
    METRICS_EP_MODELS,
    METRICS_EP_HEALTH,
    METRICS_EP_METRICS,
    METRICS_EP_SLOTS,
    METRICS_EP_TOKENIZE,
    METRICS_EP_DETOKENIZE,
    METRICS_EP_RESPONSES,
    METRICS_EP_MESSAGES,
    METRICS_EP_OTHER,
    METRICS_EP_COUNT
};

typedef struct metrics metrics_t;

metrics_t *metrics_create(void);
void metrics_destroy(metrics_t *m);

/* One finished HTTP request (called once per request, from the completion callback). */
void metrics_request(metrics_t *m, enum metrics_ep ep, int status);
/* Requests being generated / streams open: +1 at start, -1 at the end. */
void metrics_active_add(metrics_t *m, int64_t d, bool stream);
void metrics_cancelled(metrics_t *m);
/* reason: "queue_full", "draining" or "loading" (static strings). */
void metrics_rejected(metrics_t *m, const char *reason);

/* One finished generation (one choice): times are dd_now() stamps from the engine's final
 * delta; t_first <= 0 when no token was produced. */
struct metrics_gen {
    enum eng_finish finish;
    double t_queued, t_first, t_done;
    int64_t completion_tokens;
};
void metrics_generation(metrics_t *m, const struct metrics_gen *g);

/* The Prometheus text page (malloc'd, *len set). es is NULL while the model loads. */
char *metrics_render(metrics_t *m, const struct eng_stats *es, size_t *len);

#endif

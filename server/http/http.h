/*
 * http — the HTTP front end: a libmicrohttpd daemon (internal polling threads, epoll where
 * available, suspend / resume) serving the OpenAI API and the operational endpoints:
 *
 *   POST /v1/chat/completions   POST /v1/completions      GET /v1/models  GET /v1/models/{id}
 *   GET  /health  /v1/health    GET /metrics  GET /slots  POST /tokenize  POST /detokenize
 *   (+ the unprefixed aliases /chat/completions, /completions, /models, /models/{id})
 *   POST /v1/responses  GET, DELETE /v1/responses/{id}  POST /v1/responses/{id}/cancel
 *   POST /v1/messages  POST /v1/messages/count_tokens  (Anthropic; errors in its shape)
 *
 * Around every route: a bounded body (413 over the cap, even while it arrives), the API key
 * (constant-time compare; every route except health, and /metrics and /slots only when
 * auth_metrics), CORS with OPTIONS preflight answered before auth, 404 / 405 (with Allow), a
 * connection limit and an idle timeout, and one access-log line per request.
 *
 * States: LOADING (listening; /health and the API answer 503) -> READY (http_attach) ->
 * DRAINING (http_set_draining: /health 503, new API requests 503, running ones finish).
 *
 * Threads: http_start / http_attach / http_set_draining / http_stop from the main thread;
 * http_active_requests from any thread. Requests run on MHD's threads (see job.h).
 * Shutdown order: http_set_draining, wait for http_active_requests() == 0 (or a timeout),
 * eng_stop, then http_stop (the engine must not notify after http_stop has freed the jobs'
 * wakers; http_stop also ends requests the engine left unfinished).
 */
#ifndef DELTAD_HTTP_H
#define DELTAD_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h" // defines: struct model
#include "engine/sched/eng.h"   // defines: eng_t
#include "server/api/chat.h"    // defines: chat_tmpl_t

struct http_opts {
    const char *host;           /* bind address, e.g. "127.0.0.1" or "::1" */
    int port;                   /* 0 = any free port (see http_port) */
    int threads;                /* MHD worker threads, <= 0 = 4 */
    const char *api_key;        /* NULL or "" = no authentication */
    bool auth_metrics;          /* also require the key on /metrics and /slots */
    int max_conns;              /* connection limit, <= 0 = MHD's default */
    int idle_timeout_s;         /* per-connection idle timeout, <= 0 = none */
    double receive_timeout_s;   /* a request's headers and body arrive within this, <= 0 = none */
    size_t max_body;            /* request body cap in bytes (413 above) */
    int max_json_depth;         /* JSON nesting limit (400 above), <= 0 = 64 */
    const char *cors_origin;    /* NULL or "" = no CORS headers; "*" or one origin */
    const char *model_name;     /* served name; NULL = the model file's base name */
    int64_t max_tokens_default; /* when a request sets none; 0 = until end or context full */
    int64_t n_slots;            /* upper bound of n */
    double request_timeout_s;   /* engine deadline per request, <= 0 = none */
    bool metrics_enabled, slots_enabled; /* else 501 */
    int queue_full_status;               /* 429 or 503 when the engine queue is full */
    int retry_after_s;                   /* Retry-After on 429 / 503 */
    int64_t n_ctx;        /* positions per slot (the engine's n_ctx); 0 = the model's n_ctx_train */
    double sse_ping_s;    /* ": keep-alive" SSE comment after this many silent seconds; <= 0 = 15 */
    int reasoning_format; /* enum api_reasoning: the default for chat requests */
    int64_t responses_store_max;  /* stored /v1/responses objects (0 = none) */
    double responses_store_ttl_s; /* their lifetime */
};

typedef struct http http_t;

/* Copy the options (strings included), bind and start listening in state LOADING. Returns 0 or
 * a negative dd_err with the reason (address, port) in err. */
int http_start(const struct http_opts *o, http_t **out, char *err, size_t errlen);
/* The bound port (useful with port 0). */
int http_port(const http_t *h);
/* Serve with this engine, model and chat template (borrowed; they must outlive http_stop):
 * state READY. */
void http_attach(http_t *h, eng_t *e, const struct model *m, const chat_tmpl_t *chat);
/* State DRAINING: /health 503, new API requests 503; running requests continue. */
void http_set_draining(http_t *h);
/* Generation requests in flight. */
int64_t http_active_requests(const http_t *h);
/* End every remaining request, stop listening, close connections, free h. */
void http_stop(http_t *h);

#endif

/*
 * http — libmicrohttpd daemon, routing, limits, authentication, CORS and the access log (see
 * http.h). The OpenAI semantics live in api (requests), resp (responses) and job (generation).
 *
 * A request's life in the access handler (MHD calls it several times per request):
 *   1st call   headers only: route, OPTIONS preflight, 404 / 405, API key, state, 413 from
 *              Content-Length; these errors are answered at once.
 *   n calls    body bytes: copied into a buffer bounded by max_body (over it: 413, or the
 *              connection is dropped if the client keeps sending).
 *   last call  (no data) every route answers; generation starts a job and either queues the
 *              SSE response or suspends until the job is done (job_poll), after which MHD
 *              calls once more and the answer is queued.
 * The request-completed callback writes the access-log line, counts the request and ends the
 * job (cancelling it when the client went away).
 *
 * Invariants: exactly one response per request; every response carries X-Request-Id and the
 * CORS headers; the state only moves LOADING -> READY -> DRAINING -> STOPPED, and eng / model
 * are written before READY is published (release / acquire).
 *
 * Threads: MHD's worker threads run the callbacks; http_* from the main thread.
 */
#include "http.h" // defines: http_start, struct http_opts

#include <arpa/inet.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "engine/model/tok_cache.h"    // defines: tok_cache_create, tok_cache_destroy
#include "engine/util.h"               // defines: LOG_I, xcalloc, dd_now
#include "job.h"                       // defines: job_start, job_poll, job_end
#include "metrics.h"                   // defines: metrics_request, metrics_render
#include "server/api/api.h"            // defines: api_parse, api_tokenize, struct api_error
#include "server/api/api_messages.h"   // defines: api_messages_parse, api_messages_count
#include "server/api/api_responses.h"  // defines: api_responses_parse
#include "server/api/json.h"           // defines: json_hooks_install
#include "server/api/resp.h"           // defines: resp_error, resp_models, resp_slots
#include "server/api/resp_messages.h"  // defines: resp_messages_create, resp_messages_error
#include "server/api/resp_responses.h" // defines: resp_responses_create
#include "server/api/store.h"          // defines: store_create, store_get

/* The server's life; only ever moves forward. Handlers read it with acquire ordering so that
 * eng / model, written before READY is stored with release, are visible once READY is seen. */
enum state { ST_LOADING = 0, ST_READY, ST_DRAINING, ST_STOPPED };

/* One per process. Written by the main thread (start, attach); read by every MHD thread. */
struct http {
    struct http_opts o; /* host, api_key, cors_origin, model_name: owned copies */
    struct MHD_Daemon *d;
    _Atomic int state;         /* enum state */
    eng_t *eng;                /* borrowed; written before READY */
    const struct model *model; /* borrowed; written before READY */
    const chat_tmpl_t *chat;   /* borrowed; written before READY */
    char model_name[256];      /* the served id: configured, or the file name at attach */
    int64_t n_ctx;             /* positions per slot, for validation and /v1/models */
    int64_t created;           /* Unix seconds of start-up, for /v1/models */
    int port;                  /* the bound port (o.port may be 0) */
    job_pool_t *pool;          /* generation jobs and their wakers */
    store_t *store;            /* stored /v1/responses objects */
    metrics_t *metrics;
    /* open connections, oldest first (see "connections" below); conn_mu guards the list and
     * every hconn's since / busy */
    pthread_mutex_t conn_mu;
    struct hconn *conn_head, *conn_tail;
    int n_conns;
    gram_cache_t *grams; /* compiled response_format / json_schema / grammar constraints */
    tok_cache_t *toks;   /* encodings of long message texts (system prompts) */
};

/* ---- routes ---------------------------------------------------------------------------- */

/* The route table is the single place that decides method, authentication and the metrics
 * label of every path; the unprefixed aliases share everything with their /v1 twin so that
 * an alias can never bypass the key. */
enum route_id {
    R_CHAT,
    R_COMPL,
    R_MODELS,
    R_MODEL,
    R_HEALTH,
    R_METRICS,
    R_SLOTS,
    R_TOK,
    R_DETOK,
    R_RESP,    /* POST /v1/responses */
    R_RESP_ID, /* GET, DELETE /v1/responses/{id}; POST /v1/responses/{id}/cancel */
    R_MSG,     /* POST /v1/messages (Anthropic) */
    R_MSG_COUNT,
};
enum { AUTH_API = 1, AUTH_OPT = 2 }; /* always / only with auth_metrics */

struct route {
    const char *path;
    bool prefix; /* path is a prefix; the rest is a parameter */
    enum route_id id;
    bool post; /* POST, else GET (and HEAD) */
    int auth;
    enum metrics_ep ep;
    bool anthropic; /* errors in Anthropic's shape */
};

static const struct route routes[] = {
    {"/v1/chat/completions", false, R_CHAT, true, AUTH_API, METRICS_EP_CHAT, false},
    {"/chat/completions", false, R_CHAT, true, AUTH_API, METRICS_EP_CHAT, false},
    {"/v1/completions", false, R_COMPL, true, AUTH_API, METRICS_EP_COMPLETIONS, false},
    {"/completions", false, R_COMPL, true, AUTH_API, METRICS_EP_COMPLETIONS, false},
    {"/v1/models", false, R_MODELS, false, AUTH_API, METRICS_EP_MODELS, false},
    {"/models", false, R_MODELS, false, AUTH_API, METRICS_EP_MODELS, false},
    {"/v1/models/", true, R_MODEL, false, AUTH_API, METRICS_EP_MODELS, false},
    {"/models/", true, R_MODEL, false, AUTH_API, METRICS_EP_MODELS, false},
    {"/health", false, R_HEALTH, false, 0, METRICS_EP_HEALTH, false},
    {"/v1/health", false, R_HEALTH, false, 0, METRICS_EP_HEALTH, false},
    {"/metrics", false, R_METRICS, false, AUTH_OPT, METRICS_EP_METRICS, false},
    {"/slots", false, R_SLOTS, false, AUTH_OPT, METRICS_EP_SLOTS, false},
    {"/tokenize", false, R_TOK, true, AUTH_API, METRICS_EP_TOKENIZE, false},
    {"/detokenize", false, R_DETOK, true, AUTH_API, METRICS_EP_DETOKENIZE, false},
    {"/v1/responses", false, R_RESP, true, AUTH_API, METRICS_EP_RESPONSES, false},
    {"/v1/responses/", true, R_RESP_ID, false, AUTH_API, METRICS_EP_RESPONSES, false},
    {"/v1/messages", false, R_MSG, true, AUTH_API, METRICS_EP_MESSAGES, true},
    {"/v1/messages/count_tokens", false, R_MSG_COUNT, true, AUTH_API, METRICS_EP_MESSAGES, true},
};

/* The route for a path (MHD passes it without the query string), or NULL. */
static const struct route *route_find(const char *url)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const struct route *r = &routes[i];
        size_t n = strlen(r->path);
        if (r->prefix ? strncmp(url, r->path, n) == 0 && url[n] : strcmp(url, r->path) == 0)
            return r;
    }
    return NULL;
}

/* ---- connections ---------------------------------------------------------------------- */

/*
 * Every open connection, in accept order (MHD_OPTION_NOTIFY_CONNECTION), so that a client that
 * holds a connection without finishing its request cannot keep others out:
 *  - receive_timeout: a request must arrive complete, headers and body, within it (a new
 *    connection's first request counted from the accept, a kept-alive one's from its headers):
 *    the connection's MHD timeout is cut to what is left when the headers are in, and a body
 *    still arriving past the deadline closes the connection;
 *  - max_conns: MHD admits a few more than max_conns; when a new connection makes it
 *    max_conns + 1, the one that has waited longest without a complete request (since its
 *    accept, or since its last answer on a kept-alive connection) is shut down. Connections
 *    whose request is being answered are never picked; with none to pick, the new one goes.
 * MHD announces CLOSED before it closes the socket, so a shutdown() under conn_mu never hits a
 * descriptor that was closed and reused.
 */
struct hconn {
    struct hconn *prev, *next;
    int fd;
    double since;    /* waiting for a complete request since (dd_now) */
    double deadline; /* the current request must be complete by then; 0 = not started */
    bool busy;       /* a complete request is being answered */
    bool evicted;    /* shut down to admit a newer connection (logged once) */
    int64_t n_done;  /* requests answered on it */
};

static struct hconn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The connection's MHD timeout (silence) for the rest of a request that must arrive within
 * `left` seconds: the shorter of the two; idle_timeout alone when left <= 0. */
static void conn_set_timeout(http_t *h, struct MHD_Connection *c, double left)
{
    double s = h->o.idle_timeout_s > 0 ? (double)h->o.idle_timeout_s : 0.0;
    if (left > 0 && (s == 0.0 || left < s))
        s = left;
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)ceil(s));
}

/* The oldest connection without a complete request, other than `not`; conn_mu held. */
static struct hconn *conn_victim(http_t *h, const struct hconn * not )
{
    struct hconn *best = NULL;
    for (struct hconn *x = h->conn_head; x; x = x->next)
        if (x != not &&!x->busy && !x->evicted && (!best || x->since < best->since))
            best = x;
    return best;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    http_t *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        struct hconn *x = xcalloc(1, sizeof *x);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        x->fd = ci ? ci->connect_fd : -1;
        x->since = dd_now();
        *socket_context = x;
        pthread_mutex_lock(&h->conn_mu);
        x->prev = h->conn_tail;
        *(x->prev ? &x->prev->next : &h->conn_head) = x;
        h->conn_tail = x;
        struct hconn *v = NULL;
        if (h->o.max_conns > 0 && ++h->n_conns > h->o.max_conns) {
            v = conn_victim(h, x);
            v = v ? v : x;
            v->evicted = true;
            if (v->fd >= 0)
                shutdown(v->fd, SHUT_RDWR); /* its MHD thread sees the end and closes it */
        } else if (h->o.max_conns <= 0) {
            h->n_conns++;
        }
        double waited = v ? dd_now() - v->since : 0.0;
        pthread_mutex_unlock(&h->conn_mu);
        if (h->o.receive_timeout_s > 0) /* the first request's headers too */
            conn_set_timeout(h, c, h->o.receive_timeout_s);
        if (v) /* debug only: a request it had started gets its access-log line, "evicted" */
            LOG_D("max_conns %d reached: closed %s connection that waited %.1f s without a "
                  "complete request",
                  h->o.max_conns, v == x ? "the new" : "the", waited);
        return;
    }
    struct hconn *x = *socket_context;
    if (!x)
        return;
    pthread_mutex_lock(&h->conn_mu);
    *(x->prev ? &x->prev->next : &h->conn_head) = x->next;
    *(x->next ? &x->next->prev : &h->conn_tail) = x->prev;
    h->n_conns--;
    pthread_mutex_unlock(&h->conn_mu);
    free(x);
    *socket_context = NULL;
}

/* The headers of a request are in: start its receive deadline (a new connection's counts from
 * the accept) and cut the connection's idle timeout to what is left of it. False when the
 * deadline has already passed. */
static bool conn_request_start(http_t *h, struct MHD_Connection *c)
{
    struct hconn *x = conn_of(c);
    if (!x || h->o.receive_timeout_s <= 0)
        return true;
    const double now = dd_now();
    pthread_mutex_lock(&h->conn_mu);
    x->deadline = (x->n_done ? now : x->since) + h->o.receive_timeout_s;
    const double left = x->deadline - now;
    pthread_mutex_unlock(&h->conn_mu);
    if (left <= 0)
        return false;
    conn_set_timeout(h, c, left);
    return true;
}

/* Still within the receive deadline (a body arriving)? */
static bool conn_in_time(http_t *h, struct MHD_Connection *c)
{
    struct hconn *x = conn_of(c);
    return !x || !x->deadline || dd_now() <= x->deadline;
}

/* The request is complete: the connection is busy answering it, with the normal idle timeout. */
static void conn_request_complete(http_t *h, struct MHD_Connection *c)
{
    struct hconn *x = conn_of(c);
    if (!x)
        return;
    pthread_mutex_lock(&h->conn_mu);
    x->busy = true;
    x->deadline = 0;
    pthread_mutex_unlock(&h->conn_mu);
    conn_set_timeout(h, c, 0);
}

/* The request is over: the connection waits for the next one from now. */
static void conn_request_done(http_t *h, struct MHD_Connection *c)
{
    struct hconn *x = conn_of(c);
    if (!x)
        return;
    pthread_mutex_lock(&h->conn_mu);
    x->busy = false;
    x->deadline = 0;
    x->since = dd_now();
    x->n_done++;
    pthread_mutex_unlock(&h->conn_mu);
}

/* ---- per-request state ----------------------------------------------------------------- */

/* One HTTP request (MHD's per-request context). Owned by the MHD thread of its connection;
 * created on the first access-handler call, freed in the completion callback. */
struct hreq {
    http_t *h;
    const struct route *rt; /* NULL for unknown routes */
    double t0;              /* dd_now() at the first call, for the access log */
    char id[64];            /* X-Request-Id; the completion id for generation requests */
    char method[16];
    char path[256]; /* for the log, truncated */
    char *body;     /* [len] received bytes (cap allocated), at most max_body */
    size_t len, cap;
    bool too_large;   /* the body went over max_body */
    bool late;        /* closed: the body was still arriving past receive_timeout */
    bool oom;         /* the body buffer could not grow (dd_try_realloc): 503 */
    bool responded;   /* a response is queued: later calls only drain MHD */
    bool stream;      /* the job answers with SSE */
    size_t discarded; /* bytes dropped after the cap */
    int status;       /* the status sent, 0 until one is queued */
    size_t bytes;     /* body bytes sent (streams: taken from the job at the end) */
    job_t *job;       /* generation in flight, or NULL */
};

/* prefix + 24 random hex digits: request and completion ids (unguessable, unique enough). */
static void hex_id(char *out, size_t cap, const char *prefix)
{
    unsigned char rnd[12];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        memset(rnd, 0, sizeof rnd);
    int n = snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof rnd && (size_t)n + 2 < cap; i++)
        n += snprintf(out + n, cap - (size_t)n, "%02x", rnd[i]);
}

static struct hreq *hreq_new(http_t *h, const char *url, const char *method)
{
    struct hreq *q = xcalloc(1, sizeof *q);
    q->h = h;
    q->t0 = dd_now();
    q->rt = route_find(url);
    snprintf(q->method, sizeof q->method, "%s", method);
    snprintf(q->path, sizeof q->path, "%s", url);
    hex_id(q->id, sizeof q->id, "req-");
    return q;
}

/* ---- responses ------------------------------------------------------------------------- */

/* Headers every response carries: the request id, and CORS when an origin is configured
 * (a concrete origin also needs Vary so caches keep per-origin copies apart). */
static void add_common_headers(const http_t *h, const struct hreq *q, struct MHD_Response *r)
{
    MHD_add_response_header(r, "X-Request-Id", q->id);
    const char *origin = h->o.cors_origin;
    if (!origin || !origin[0])
        return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Request-Id, Retry-After");
    if (strcmp(origin, "*") != 0)
        MHD_add_response_header(r, "Vary", "Origin");
}

/* Queue r (the caller's reference is dropped) and record the status. */
static enum MHD_Result queue(struct hreq *q, struct MHD_Connection *c, int status,
                             struct MHD_Response *r)
{
    add_common_headers(q->h, q, r);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    if (ok == MHD_YES) {
        q->responded = true;
        q->status = status;
    }
    return ok;
}

/* A buffered response; body is malloc'd and transferred (MHD frees it). */
static enum MHD_Result reply(struct hreq *q, struct MHD_Connection *c, int status,
                             const char *ctype, char *body, size_t len, const char *hdr,
                             const char *val)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hdr)
        MHD_add_response_header(r, hdr, val);
    q->bytes = len;
    return queue(q, c, status, r);
}

static enum MHD_Result reply_json(struct hreq *q, struct MHD_Connection *c, int status, char *body,
                                  size_t len)
{
    return reply(q, c, status, "application/json", body, len, NULL, NULL);
}

/* An OpenAI error object; 429 / 503 carry Retry-After, 401 WWW-Authenticate. */
static enum MHD_Result reply_error(struct hreq *q, struct MHD_Connection *c,
                                   const struct api_error *e)
{
    size_t len;
    char *body = q->rt && q->rt->anthropic ? resp_messages_error(e, &len) : resp_error(e, &len);
    char retry[16];
    snprintf(retry, sizeof retry, "%d", q->h->o.retry_after_s > 0 ? q->h->o.retry_after_s : 1);
    bool busy = e->status == 429 || e->status == 503;
    const char *hdr = busy ? "Retry-After" : e->status == 401 ? "WWW-Authenticate" : NULL;
    return reply(q, c, e->status, "application/json", body, len, hdr, busy ? retry : "Bearer");
}

/* An error without a param (routing, auth, limits, state). */
static enum MHD_Result fail(struct hreq *q, struct MHD_Connection *c, int status, const char *type,
                            const char *code, const char *msg)
{
    struct api_error e;
    api_error_set(&e, status, type, code, NULL, "%s", msg);
    return reply_error(q, c, &e);
}

/* 503 while loading, draining or stopping. */
static enum MHD_Result unavailable(struct hreq *q, struct MHD_Connection *c, int st)
{
    metrics_rejected(q->h->metrics, st == ST_LOADING ? "loading" : "draining");
    return fail(q, c, 503, "unavailable_error", NULL,
                st == ST_LOADING ? "Loading model" : "the server is shutting down");
}

/* ---- authentication and CORS ----------------------------------------------------------- */

/* Constant-time in the key's length: every key byte is compared whatever the input, so the
 * time taken reveals neither where a guess first differs nor the key's length. */
static bool key_equal(const char *given, const char *key)
{
    size_t lg = strlen(given), lk = strlen(key);
    unsigned char diff = lg != lk;
    for (size_t i = 0; i < lk; i++)
        diff |= (unsigned char)(key[i] ^ (lg ? given[i % lg] : 0));
    return diff == 0;
}

/* Authorization: Bearer <key>, or X-Api-Key: <key> (llama.cpp clients send either). Public
 * routes, and /metrics and /slots unless auth_metrics, pass without a key. */
static bool auth_ok(const http_t *h, struct MHD_Connection *c, const struct route *rt)
{
    const char *key = h->o.api_key;
    if (!key || !key[0] || rt->auth == 0 || (rt->auth == AUTH_OPT && !h->o.auth_metrics))
        return true;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (v && strncasecmp(v, "Bearer ", 7) == 0) {
        v += 7;
        while (*v == ' ')
            v++;
    } else {
        v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    }
    return v && key_equal(v, key);
}

/* OPTIONS: the CORS preflight (answered before authentication, for browsers). */
static enum MHD_Result preflight(struct hreq *q, struct MHD_Connection *c)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    const char *allow = q->rt->post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS";
    MHD_add_response_header(r, "Allow", allow);
    if (q->h->o.cors_origin && q->h->o.cors_origin[0]) {
        const char *want =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", allow);
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                want ? want : "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    }
    return queue(q, c, 204, r);
}

/* ---- simple endpoints ------------------------------------------------------------------ */

/* GET /health: 200 only when READY, so a balancer stops routing here while loading or
 * draining (llama.cpp's body and error shape). */
static enum MHD_Result do_health(struct hreq *q, struct MHD_Connection *c)
{
    int st = atomic_load_explicit(&q->h->state, memory_order_acquire);
    if (st != ST_READY)
        return fail(q, c, 503, "unavailable_error", NULL,
                    st == ST_LOADING ? "Loading model" : "the server is shutting down");
    static const char ok[] = "{\"status\":\"ok\"}";
    return reply_json(q, c, 200, xstrdup(ok), sizeof ok - 1);
}

/* GET /v1/models and /v1/models/{id}: the one served model (any other id is a 404). The meta
 * block appears once the model is loaded. */
static enum MHD_Result do_models(struct hreq *q, struct MHD_Connection *c, const char *url)
{
    http_t *h = q->h;
    bool ready = atomic_load_explicit(&h->state, memory_order_acquire) != ST_LOADING && h->model;
    if (!ready && !(h->o.model_name && h->o.model_name[0]))
        return unavailable(q, c, ST_LOADING); /* the name comes from the model file */
    if (q->rt->id == R_MODEL) {
        const char *want = url + strlen(q->rt->path);
        if (strcmp(want, h->model_name) != 0) {
            struct api_error e;
            api_error_set(&e, 404, "not_found_error", "model_not_found", "model",
                          "The model '%.200s' does not exist", want);
            return reply_error(q, c, &e);
        }
    }
    size_t len;
    char *body =
        resp_models(h->model_name, h->created, ready ? h->model->hp.n_vocab : 0,
                    ready ? h->model->hp.n_ctx_train : 0, h->n_ctx, q->rt->id == R_MODEL, &len);
    return reply_json(q, c, 200, body, len);
}

/* GET /metrics: HTTP-layer counters plus the engine's statistics (zeros while loading). */
static enum MHD_Result do_metrics(struct hreq *q, struct MHD_Connection *c)
{
    http_t *h = q->h;
    if (!h->o.metrics_enabled)
        return fail(q, c, 501, "not_supported_error", NULL, "metrics are disabled");
    struct eng_stats es;
    bool have = atomic_load_explicit(&h->state, memory_order_acquire) != ST_LOADING && h->eng;
    if (have)
        eng_get_stats(h->eng, &es);
    size_t len;
    char *body = metrics_render(h->metrics, have ? &es : NULL, &len);
    return reply(q, c, 200, "text/plain; version=0.0.4; charset=utf-8", body, len, NULL, NULL);
}

/* GET /slots: one object per engine slot (state, positions, tokens). */
static enum MHD_Result do_slots(struct hreq *q, struct MHD_Connection *c)
{
    http_t *h = q->h;
    if (!h->o.slots_enabled)
        return fail(q, c, 501, "not_supported_error", NULL, "the slots endpoint is disabled");
    int st = atomic_load_explicit(&h->state, memory_order_acquire);
    if (st == ST_LOADING || !h->eng)
        return unavailable(q, c, ST_LOADING);
    int64_t n = h->o.n_slots > 0 ? h->o.n_slots : 1;
    struct eng_slot_stats *s = xcalloc((size_t)n, sizeof *s);
    int64_t got = eng_get_slots(h->eng, s, n);
    size_t len;
    char *body = resp_slots(s, got < n ? got : n, &len);
    free(s);
    return reply_json(q, c, 200, body, len);
}

/* What the api module validates against (valid only once READY). */
static struct api_ctx api_ctx_of(const http_t *h)
{
    return (struct api_ctx){.model = h->model,
                            .n_ctx = h->n_ctx,
                            .n_slots = h->o.n_slots,
                            .max_tokens_default = h->o.max_tokens_default,
                            .max_json_depth = h->o.max_json_depth,
                            .tmpl = h->chat,
                            .reasoning = (enum api_reasoning)h->o.reasoning_format,
                            .grams = h->grams,
                            .toks = h->toks};
}

/* POST /tokenize and /detokenize. */
static enum MHD_Result do_tokenize(struct hreq *q, struct MHD_Connection *c)
{
    struct api_ctx ctx = api_ctx_of(q->h);
    struct api_error e;
    size_t len;
    char *body = q->rt->id == R_TOK ? api_tokenize(&ctx, q->body, q->len, &len, &e)
                                    : api_detokenize(&ctx, q->body, q->len, &len, &e);
    return body ? reply_json(q, c, 200, body, len) : reply_error(q, c, &e);
}

/* ---- generation ------------------------------------------------------------------------ */

/* Non-streaming: answer once the job is done, else stay suspended. */
static enum MHD_Result poll_job(struct hreq *q, struct MHD_Connection *c)
{
    int status;
    char *body;
    size_t len;
    int rc = job_poll(q->job, &status, &body, &len);
    if (rc <= 0)
        return rc == 0 ? MHD_YES : MHD_NO; /* parked, or the client is gone: drop it */
    return reply_json(q, c, status, body, len);
}

/* Streaming: the 200 and the SSE headers go out now; the job's reader produces the events.
 * X-Accel-Buffering: no stops nginx from buffering the stream (docs section 3). */
static enum MHD_Result start_stream(struct hreq *q, struct MHD_Connection *c)
{
    struct MHD_Response *r = job_sse_response(q->job);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return queue(q, c, 200, r);
}

/* The engine queue is full: 429 or 503 as configured, with Retry-After, so the official
 * clients back off and retry on their own (docs 6.1). */
static enum MHD_Result queue_full(struct hreq *q, struct MHD_Connection *c)
{
    bool is503 = q->h->o.queue_full_status == 503;
    metrics_rejected(q->h->metrics, "queue_full");
    return fail(q, c, is503 ? 503 : 429, is503 ? "unavailable_error" : "rate_limit_error",
                "queue_full", "the server is busy: every slot and the queue are full; retry later");
}

/* POST chat / completions: validate, tokenize, submit, then answer by stream or by parking
 * the connection until the job is done. Every client error is decided before the 200. */
static enum MHD_Result do_generate(struct hreq *q, struct MHD_Connection *c)
{
    http_t *h = q->h;
    enum api_kind kind = q->rt->id == R_CHAT ? API_CHAT : API_COMPLETION;
    struct api_ctx ctx = api_ctx_of(h);
    struct api_req req;
    struct api_error e;
    if (api_parse(kind, q->body, q->len, &ctx, &req, &e))
        return reply_error(q, c, &e);
    free(q->body); /* everything needed is in req now; do not hold megabytes while generating */
    q->body = NULL;
    hex_id(q->id, sizeof q->id, kind == API_CHAT ? "chatcmpl-" : "cmpl-");
    struct job_env env = {h->eng, h->model->tok, h->model_name, h->metrics};
    double deadline = h->o.request_timeout_s > 0 ? dd_now() + h->o.request_timeout_s : 0;
    q->stream = req.stream;
    int rc = job_start(h->pool, &env, c, &req, q->id, deadline, &q->job, &e);
    api_req_free(&req);
    if (rc == DD_EFULL)
        return queue_full(q, c);
    if (rc)
        return reply_error(q, c, &e);
    return q->stream ? start_stream(q, c) : poll_job(q, c);
}

/* ---- the Responses and Messages APIs ------------------------------------------------------ */

/* /v1/responses/{id}: GET and DELETE; POST only for {id}/cancel. */
static bool resp_id_method_ok(const struct hreq *q)
{
    const char *m = q->method;
    size_t n = strlen(q->path);
    bool cancel = n > 7 && strcmp(q->path + n - 7, "/cancel") == 0;
    if (cancel)
        return strcmp(m, "POST") == 0;
    return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0 || strcmp(m, "DELETE") == 0;
}

/* Submit the parsed request with its front end (transferred) and answer like do_generate. */
static enum MHD_Result run_front(struct hreq *q, struct MHD_Connection *c, struct api_req *req,
                                 struct resp_front *front)
{
    http_t *h = q->h;
    struct api_error e;
    struct job_env env = {h->eng, h->model->tok, h->model_name, h->metrics};
    double deadline = h->o.request_timeout_s > 0 ? dd_now() + h->o.request_timeout_s : 0;
    q->stream = req->stream;
    int rc = job_start_front(h->pool, &env, c, req, q->id, front, deadline, &q->job, &e);
    api_req_free(req);
    if (rc == DD_EFULL)
        return queue_full(q, c);
    if (rc)
        return reply_error(q, c, &e);
    return q->stream ? start_stream(q, c) : poll_job(q, c);
}

/* POST /v1/responses. */
static enum MHD_Result do_responses(struct hreq *q, struct MHD_Connection *c)
{
    http_t *h = q->h;
    struct api_ctx ctx = api_ctx_of(h);
    struct api_req req;
    struct api_responses_req rr;
    struct api_error e;
    if (api_responses_parse(q->body, q->len, &ctx, h->store, &req, &rr, &e))
        return reply_error(q, c, &e);
    free(q->body);
    q->body = NULL;
    hex_id(q->id, sizeof q->id, "resp_");
    struct resp_front *f = resp_responses_create(q->id, h->model_name, (int64_t)time(NULL), rr.echo,
                                                 rr.messages, rr.store, h->store);
    api_responses_req_free(&rr);
    return run_front(q, c, &req, f);
}

/* GET / DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel (the response keeps what
 * was generated; its status becomes cancelled). An unknown, evicted or expired id is a 404. */
static enum MHD_Result do_response_id(struct hreq *q, struct MHD_Connection *c, const char *url)
{
    char id[128];
    snprintf(id, sizeof id, "%s", url + strlen(q->rt->path));
    bool cancel = strcmp(q->method, "POST") == 0;
    size_t n = strlen(id);
    if (cancel && n >= 7)
        id[n - 7] = '\0'; /* "{id}/cancel" */
    size_t len;
    char *obj = NULL;
    bool found;
    if (strcmp(q->method, "DELETE") == 0) {
        found = store_delete(q->h->store, id);
        obj = found ? resp_responses_deleted(id, &len) : NULL;
    } else {
        if (cancel)
            store_cancel(q->h->store, id);
        found = store_get(q->h->store, id, &obj, NULL);
        len = obj ? strlen(obj) : 0;
    }
    if (!found) {
        struct api_error e;
        api_error_set(&e, 404, "not_found_error", "not_found", NULL,
                      "Response with id '%.100s' not found.", id);
        return reply_error(q, c, &e);
    }
    if (cancel && strstr(obj, "\"status\":\"in_progress\"")) {
        cJSON *o = cJSON_Parse(obj);
        free(obj);
        cJSON_ReplaceItemInObjectCaseSensitive(o, "status", cJSON_CreateString("cancelled"));
        obj = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        len = strlen(obj);
    }
    return reply_json(q, c, 200, obj, len);
}

/* POST /v1/messages (Anthropic). */
static enum MHD_Result do_messages(struct hreq *q, struct MHD_Connection *c)
{
    http_t *h = q->h;
    struct api_ctx ctx = api_ctx_of(h);
    struct api_req req;
    struct api_messages_req mr;
    struct api_error e;
    if (api_messages_parse(q->body, q->len, &ctx, &req, &mr, &e))
        return reply_error(q, c, &e);
    free(q->body);
    q->body = NULL;
    hex_id(q->id, sizeof q->id, "msg_");
    struct resp_front *f = resp_messages_create(q->id, h->model_name, &mr);
    api_messages_req_free(&mr);
    return run_front(q, c, &req, f);
}

/* POST /v1/messages/count_tokens: the prompt's tokens, {"input_tokens": N}. */
static enum MHD_Result do_count_tokens(struct hreq *q, struct MHD_Connection *c)
{
    struct api_ctx ctx = api_ctx_of(q->h);
    struct api_error e;
    size_t len;
    char *body = api_messages_count(&ctx, q->body, q->len, &len, &e);
    return body ? reply_json(q, c, 200, body, len) : reply_error(q, c, &e);
}

/* ---- the access handler ---------------------------------------------------------------- */

/* First call: everything decidable from the request line and headers. Errors found here are
 * answered at once (MHD then skips the body and closes the connection); everything else is
 * answered on the last call. */
static enum MHD_Result on_headers(struct hreq *q, struct MHD_Connection *c)
{
    http_t *h = q->h;
    const struct route *rt = q->rt;
    if (!rt)
        return fail(q, c, 404, "not_found_error", "not_found", "unknown route");
    if (strcmp(q->method, "OPTIONS") == 0)
        return preflight(q, c);
    bool get = strcmp(q->method, "GET") == 0 || strcmp(q->method, "HEAD") == 0;
    if (rt->id == R_RESP_ID ? !resp_id_method_ok(q)
        : rt->post          ? strcmp(q->method, "POST") != 0
                            : !get) {
        struct api_error e;
        api_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
                      "%s is not allowed on %s", q->method, rt->path);
        size_t len;
        char *body = rt->anthropic ? resp_messages_error(&e, &len) : resp_error(&e, &len);
        return reply(q, c, 405, "application/json", body, len, "Allow",
                     rt->id == R_RESP_ID ? "GET, DELETE, POST, OPTIONS"
                     : rt->post          ? "POST, OPTIONS"
                                         : "GET, HEAD, OPTIONS");
    }
    if (!auth_ok(h, c, rt))
        return fail(q, c, 401, "authentication_error", "invalid_api_key",
                    "invalid or missing API key");
    int st = atomic_load_explicit(&h->state, memory_order_acquire);
    if (rt->post && st != ST_READY)
        return unavailable(q, c, st);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (rt->post && cl && strtoull(cl, NULL, 10) > h->o.max_body)
        return fail(q, c, 413, "invalid_request_error", "request_too_large",
                    "the request body is larger than the configured limit");
    return MHD_YES; /* answer once the request is complete, so the connection can be reused */
}

/* The body buffer could not grow (a user-sized allocation, STYLE rule 16): drop what was
 * received and answer 503 (the server, not the request, is short), at once if MHD lets us,
 * else at the end; the rest of the body is swallowed like a 413's. */
static enum MHD_Result body_oom(struct hreq *q, struct MHD_Connection *c, size_t n)
{
    LOG_W("id=%s: out of memory for a request body of %zu+ bytes", q->id, q->len + n);
    free(q->body);
    q->body = NULL;
    q->len = q->cap = 0;
    q->oom = true;
    q->discarded = n;
    fail(q, c, 503, "unavailable_error", "out_of_memory",
         "the server is out of memory for the request body; retry later");
    return MHD_YES;
}

/* Body bytes: copy within the cap; past it, answer 413 at once if MHD lets us, else drop the
 * bytes (up to another max_body, then the connection) and answer at the end. */
static enum MHD_Result on_data(struct hreq *q, struct MHD_Connection *c, const char *data,
                               size_t *size)
{
    size_t n = *size, max = q->h->o.max_body;
    *size = 0;
    if (q->oom) {
        q->discarded += n;
        return q->discarded > max ? MHD_NO : MHD_YES;
    }
    if (q->too_large || q->len + n > max) {
        if (!q->too_large &&
            fail(q, c, 413, "invalid_request_error", "request_too_large",
                 "the request body is larger than the configured limit") == MHD_YES)
            return MHD_YES;
        q->too_large = true;
        q->discarded += n;
        return q->discarded > max ? MHD_NO : MHD_YES;
    }
    if (q->len + n > q->cap) {
        size_t cap = q->cap ? q->cap : 4096;
        while (cap < q->len + n)
            cap *= 2;
        char *grown = dd_try_realloc(q->body, cap < max ? cap : max);
        if (!grown)
            return body_oom(q, c, n);
        q->body = grown;
        q->cap = cap < max ? cap : max;
    }
    memcpy(q->body + q->len, data, n);
    q->len += n;
    return MHD_YES;
}

/* Last call: the request (body included) is complete. */
static enum MHD_Result on_body(struct hreq *q, struct MHD_Connection *c, const char *url)
{
    if (q->too_large)
        return fail(q, c, 413, "invalid_request_error", "request_too_large",
                    "the request body is larger than the configured limit");
    if (q->oom)
        return fail(q, c, 503, "unavailable_error", "out_of_memory",
                    "the server is out of memory for the request body; retry later");
    switch (q->rt->id) {
    case R_HEALTH:
        return do_health(q, c);
    case R_MODELS:
    case R_MODEL:
        return do_models(q, c, url);
    case R_METRICS:
        return do_metrics(q, c);
    case R_SLOTS:
        return do_slots(q, c);
    case R_RESP_ID:
        return do_response_id(q, c, url);
    default:
        break;
    }
    int st = atomic_load_explicit(&q->h->state, memory_order_acquire);
    if (st != ST_READY)
        return unavailable(q, c, st);
    if (q->rt->id == R_TOK || q->rt->id == R_DETOK)
        return do_tokenize(q, c);
    if (q->rt->id == R_RESP)
        return do_responses(q, c);
    if (q->rt->id == R_MSG)
        return do_messages(q, c);
    if (q->rt->id == R_MSG_COUNT)
        return do_count_tokens(q, c);
    return do_generate(q, c);
}

/* MHD's access handler: dispatch by call (see the file comment). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    (void)version;
    struct hreq *q = *req_cls;
    if (!q) {
        q = hreq_new(cls, url, method);
        *req_cls = q;
        if (!conn_request_start(q->h, c))
            return MHD_NO; /* the headers took longer than receive_timeout */
        return on_headers(q, c);
    }
    if (q->job && !q->stream)
        return poll_job(q, c); /* resumed */
    if (q->responded) {        /* answered early (413 mid-body): swallow a bounded rest, then cut */
        q->discarded += *upload_data_size;
        *upload_data_size = 0;
        return q->discarded > q->h->o.max_body ? MHD_NO : MHD_YES;
    }
    if (*upload_data_size) {
        if (!conn_in_time(q->h, c)) {
            q->late = true;
            return MHD_NO; /* the body is still arriving past receive_timeout */
        }
        return on_data(q, c, upload_data, upload_data_size);
    }
    conn_request_complete(q->h, c);
    return on_body(q, c, url);
}

/* ---- completion: access log, metrics, job end ------------------------------------------ */

/* How a request ended, for the access log. */
static const char *toe_name(enum MHD_RequestTerminationCode toe)
{
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK:
        return "ok";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
        return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
        return "shutdown";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
        return "client-abort";
    default:
        return "error";
    }
}

/* The peer address as text ("-" when unknown). */
static void client_addr(struct MHD_Connection *c, char *out, size_t cap)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(out, cap, "-");
    if (!ci || !ci->client_addr)
        return;
    const struct sockaddr *sa = ci->client_addr;
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)sa;
    const struct sockaddr_in *v4 = (const struct sockaddr_in *)sa;
    const void *a =
        sa->sa_family == AF_INET6 ? (const void *)&v6->sin6_addr : (const void *)&v4->sin_addr;
    inet_ntop(sa->sa_family, a, out, (socklen_t)cap);
}

/* MHD_OPTION_NOTIFY_COMPLETED: the request is over, answered or not (client gone, timeout,
 * shutdown). Ends the job (cancelling an unfinished generation: this is how a disconnect
 * reaches the engine), logs one line and counts the request. */
static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_t *h = cls;
    struct hreq *q = *req_cls;
    conn_request_done(h, c);
    if (!q)
        return;
    int stream_failed = 0; /* a stream that ended with an error event instead of its end */
    if (q->job) {
        if (q->stream) {
            q->bytes = job_bytes(q->job);
            stream_failed = job_failed_status(q->job);
        }
        job_end(q->job);
    }
    int status = q->status ? q->status : 499; /* 499: the client left before an answer */
    char addr[64], ev[32];
    client_addr(c, addr, sizeof addr);
    const struct hconn *x = conn_of(c);
    const char *how = q->late ? "receive-timeout"
                      : x && x->evicted && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK
                          ? "evicted"
                          : toe_name(toe);
    if (stream_failed && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        snprintf(ev, sizeof ev, "error-event-%d", stream_failed);
        how = ev;
    }
    LOG_I("%s %s %s %d %zuB %.3fs id=%s %s", addr, q->method, q->path, status, q->bytes,
          dd_now() - q->t0, q->id, how);
    metrics_request(h->metrics, q->rt ? q->rt->ep : METRICS_EP_OTHER, status);
    free(q->body);
    free(q);
    *req_cls = NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------- */

/* libmicrohttpd's own messages, through our log (one line each, no trailing newline). */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    /* mostly clients going away: routine, not a warning; a connection's own end is already
     * in the access-log line of its request, so those messages are debug only, and so is the
     * one for an access handler's MHD_NO (deltad returns it only to close a connection on
     * purpose: a body past max_body or receive_timeout, also in the access log) */
    if (strncmp(msg, "Connection ", 11) == 0 ||
        strncmp(msg, "Application reported internal error", 35) == 0)
        LOG_D("libmicrohttpd: %s", msg);
    else
        LOG_I("libmicrohttpd: %s", msg);
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

/* Resolve host:port into ss; returns the MHD address-family flag or -1. */
static int resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *sl)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    if (getaddrinfo(host && host[0] ? host : "127.0.0.1", NULL, &hints, &ai) != 0 || !ai)
        return -1;
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *sl = ai->ai_addrlen;
    freeaddrinfo(ai);
    if (ss->ss_family == AF_INET6) {
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
        return MHD_USE_IPv6;
    }
    ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    return 0;
}

/* The daemon: internal polling threads (a pool; epoll where built in, else poll) with
 * suspend / resume, the connection limit and idle timeout, and our callbacks. The external
 * logger must come first so that MHD's option errors go through it too. */
static struct MHD_Daemon *start_daemon(http_t *h, const struct sockaddr *sa, int family)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | (unsigned)family;
    flags |= MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES ? MHD_USE_EPOLL : MHD_USE_POLL;
    unsigned threads = h->o.threads > 0 ? (unsigned)h->o.threads : 4;
    /* room above max_conns, so that on_connection sees the new connection and makes room */
    unsigned limit = h->o.max_conns > 0 ? (unsigned)h->o.max_conns + 16u : 1000;
    unsigned idle = h->o.idle_timeout_s > 0 ? (unsigned)h->o.idle_timeout_s : 0;
    return MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER,
                            mhd_log, h, MHD_OPTION_SOCK_ADDR, sa, MHD_OPTION_THREAD_POOL_SIZE,
                            threads, MHD_OPTION_CONNECTION_LIMIT, limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, idle, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
}

/* Free everything http_start allocated (the daemon is already stopped or never started). */
static void http_free(http_t *h)
{
    pthread_mutex_destroy(&h->conn_mu);
    job_pool_destroy(h->pool);
    store_destroy(h->store);
    metrics_destroy(h->metrics);
    gram_cache_destroy(h->grams);
    tok_cache_destroy(h->toks);
    free((char *)h->o.host);
    free((char *)h->o.api_key);
    free((char *)h->o.cors_origin);
    free((char *)h->o.model_name);
    free(h);
}

int http_start(const struct http_opts *o, http_t **out, char *err, size_t errlen)
{
    json_hooks_install(); /* before this function starts the first thread */
    http_t *h = xcalloc(1, sizeof *h);
    h->o = *o;
    h->o.host = dup_or_null(o->host);
    h->o.api_key = dup_or_null(o->api_key);
    h->o.cors_origin = dup_or_null(o->cors_origin);
    h->o.model_name = dup_or_null(o->model_name);
    if (h->o.max_json_depth <= 0)
        h->o.max_json_depth = 64;
    snprintf(h->model_name, sizeof h->model_name, "%s", o->model_name ? o->model_name : "");
    h->created = (int64_t)time(NULL);
    h->pool = job_pool_create(o->sse_ping_s > 0 ? o->sse_ping_s : 15);
    h->store = store_create(o->responses_store_max,
                            o->responses_store_ttl_s > 0 ? o->responses_store_ttl_s : 3600);
    h->metrics = metrics_create();
    pthread_mutex_init(&h->conn_mu, NULL);
    h->grams = gram_cache_create(16);          /* x GRAM_CACHE_BYTES of masks at most: 256 MiB */
    h->toks = tok_cache_create(1024, 4 << 20); /* texts of 1 KiB or more, 4 MiB in all */
    struct sockaddr_storage ss;
    socklen_t sl;
    int family = resolve(o->host, o->port, &ss, &sl);
    if (family < 0) {
        dd_errf(err, errlen, "cannot resolve listen address '%s'", o->host ? o->host : "");
        goto fail;
    }
    h->d = start_daemon(h, (const struct sockaddr *)&ss, family);
    if (!h->d) {
        dd_errf(err, errlen, "cannot listen on %s:%d (address in use or not permitted?)",
                o->host ? o->host : "127.0.0.1", o->port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : o->port;
    *out = h;
    return 0;
fail:
    http_free(h);
    return DD_EIO;
}

int http_port(const http_t *h)
{
    return h->port;
}

/* The served name when none was configured: the model file's base name without .gguf. */
static void default_name(http_t *h, const struct model *m)
{
    const char *base = m->path ? strrchr(m->path, '/') : NULL;
    base = base ? base + 1 : (m->path ? m->path : "model");
    snprintf(h->model_name, sizeof h->model_name, "%s", base);
    char *dot = strstr(h->model_name, ".gguf");
    if (dot && dot[5] == '\0')
        *dot = '\0';
}

void http_attach(http_t *h, eng_t *e, const struct model *m, const chat_tmpl_t *chat)
{
    h->eng = e;
    h->model = m;
    h->chat = chat;
    h->n_ctx = h->o.n_ctx > 0 ? h->o.n_ctx : m->hp.n_ctx_train;
    if (!h->model_name[0])
        default_name(h, m);
    atomic_store_explicit(&h->state, ST_READY, memory_order_release);
    LOG_I("serving '%s' on port %d (n_ctx %lld)", h->model_name, h->port, (long long)h->n_ctx);
}

void http_set_draining(http_t *h)
{
    atomic_store_explicit(&h->state, ST_DRAINING, memory_order_release);
}

int64_t http_active_requests(const http_t *h)
{
    return job_pool_live(h->pool);
}

void http_stop(http_t *h)
{
    if (!h)
        return;
    atomic_store_explicit(&h->state, ST_STOPPED, memory_order_release);
    /* MHD must not be stopped with suspended connections: wake every job so it ends (an error
     * event or a 503), and give the connections a moment to flush before closing them. */
    job_pool_shutdown(h->pool);
    for (int i = 0; i < 200 && job_pool_live(h->pool) > 0; i++)
        usleep(10 * 1000);
    MHD_stop_daemon(h->d);
    http_free(h);
}

/*
 * job — generation requests between libmicrohttpd and the engine (see job.h).
 *
 * The hand-off, per job, guarded by its waker's mutex:
 *   pending   the engine notified while the connection was running: look again before parking
 *   suspended the connection is parked (MHD_suspend_connection); the next notify resumes it
 *   closing   the server is stopping: finish now with an error
 *   ping      a parked stream was silent too long: send an SSE comment (set by the timer)
 *   gone      the client closed the connection while it was parked: drop it (set by the timer)
 * An HTTP thread clears `pending`, drains every choice, and parks only if nothing arrived and
 * `pending` is still clear, all under the mutex; the engine's notify either sets `pending` or
 * resumes. So a notification is never lost and a parked connection always has one coming.
 *
 * Why a timer: a parked connection is invisible to MHD, so neither a silent stream (long
 * prefill, proxies time out after 60 s) nor a vanished client (the slot would run to
 * max_tokens) would be noticed until the engine's next output. The timer covers both.
 *
 * Invariants: a job's output buffer only grows on its connection's thread; a choice is `done`
 * once its final delta was taken; `ended` means the terminal event ([DONE] or an error) is in
 * the output buffer, after which the reader only drains.
 *
 * Threads: see job.h. Lock order: pool mutex, then waker mutex (shutdown, timer); never the
 * reverse. The timer mutex is never held together with either.
 *
 * Sections: wakers and the pool, parking, draining the engine, streaming, non-streaming,
 * lifecycle.
 */
#include "job.h" // defines: job_start, job_poll, job_end

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "engine/util.h"      // defines: xcalloc, DD_EFULL, struct dd_buf
#include "server/api/reply.h" // defines: reply_feed, reply_sse, reply_choice
#include "server/api/resp.h"  // defines: resp_sse_*, resp_completion

#define SSE_BLOCK 16384 /* MHD's buffer hint for the streaming reader */

/* ---- wakers and the pool ---------------------------------------------------------------- */

/* What the engine's notify callback sees (its ud). Wakers are pooled and never freed before
 * the pool, because the engine may notify after the job ended; a reused waker may get a stale
 * notification, which only causes one spurious look at the outbox. */
struct waker {
    pthread_mutex_t mu;
    job_t *job;              /* guarded by mu; NULL once the job ended */
    struct waker *next_free; /* pool free list, guarded by the pool mutex */
    struct waker *next_all;  /* every waker ever made, for shutdown and destroy */
};

/* Every waker ever made, the free ones, and the timer thread. Owned by the http module. */
struct job_pool {
    pthread_mutex_t mu;
    struct waker *free, *all; /* guarded by mu */
    _Atomic int64_t live;     /* jobs between job_new and job_end */
    double ping_s;            /* SSE keep-alive after this many silent seconds */
    pthread_t timer;          /* runs pool_tick about once a second */
    pthread_mutex_t timer_mu;
    pthread_cond_t timer_cv;
    bool timer_stop, timer_running; /* guarded by timer_mu */
};

/* One choice: one engine request. Connection thread only. */
struct choice {
    eng_req_t *r; /* our reference; NULL when not submitted */
    bool done;    /* the final delta was taken */
    enum eng_finish finish;
    char error[256];
    struct dd_buf text;        /* non-streaming: the whole text (echo prefix included) */
    struct eng_tok_info *toks; /* non-streaming: all; streaming: not yet sent */
    int64_t n_toks, cap_toks;
    size_t tok_off;   /* output offset of toks[0]'s text (legacy logprobs) */
    const char *echo; /* prompt text to echo first (borrowed from the job), or NULL */
    size_t echo_len;
    int64_t prompt_tokens, cached_tokens, completion_tokens;
    int64_t drafted_tokens, accepted_tokens;
    reply_t *reply; /* chat with reasoning or tool-call parsing, else NULL */
    /* other front ends (j->front): the raw text and, with stop strings, every token's text, to
     * tell which stop string ended the output (the engine reports only "stop") */
    struct dd_buf raw, tok_text;
    bool eog; /* an end-of-generation token was sampled */
};

/* A generation request. The fields above the "connection thread only" line are set at
 * creation (or guarded as noted); the rest belongs to the connection's MHD thread. */
struct job {
    job_pool_t *pool;
    struct waker *w;
    struct job_env env;
    struct MHD_Connection *conn;
    struct resp_meta meta; /* envelope of every response object; points at id */
    char id[64];
    bool stream, include_usage;
    int fd;                                       /* the connection's socket, for the timer */
    bool suspended, pending, closing, ping, gone; /* guarded by w->mu */
    double parked_at;                             /* guarded by w->mu: when it was suspended */
    /* connection thread only: */
    int64_t n_choices, n_per_prompt;
    struct choice *ch;     /* [n_choices] */
    char **echo_texts;     /* [n_choices / n_per_prompt] prompt copies, or NULL */
    cJSON *tools;          /* the request's tools, for the tool-call parsers, or NULL */
    struct job_hook *hook; /* test-hook build only: the fixed output (see hook_attach), or NULL */
    struct resp_front *front; /* responses / messages: their events and objects, or NULL */
    char **stops;             /* [n_stops] the request's stop strings (front ends), owned */
    int n_stops;
    bool user_cancel;  /* the front end asked to cancel (POST /v1/responses/{id}/cancel) */
    struct dd_buf out; /* streaming: produced, not yet handed to MHD */
    size_t out_off;
    bool started;    /* streaming: the opening events were written */
    bool ended;      /* the terminal event is in `out` */
    bool failed;     /* a choice finished with an error or a server-side cancel */
    bool dropped;    /* the client is gone: end the response with an error */
    int fail_status; /* 500: engine error; 503: the server cancelled it (shutting down) */
    char fail_msg[256];
    size_t bytes; /* body bytes handed to MHD, for the access log */
};

static void *timer_main(void *arg);

job_pool_t *job_pool_create(double ping_s)
{
    job_pool_t *p = xcalloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->timer_mu, NULL);
    pthread_cond_init(&p->timer_cv, NULL);
    p->ping_s = ping_s;
    /* without the timer the daemon still works, minus pings and early disconnect detection */
    p->timer_running = pthread_create(&p->timer, NULL, timer_main, p) == 0;
    if (!p->timer_running)
        LOG_W("cannot start the HTTP timer thread: no SSE pings, late disconnect detection");
    return p;
}

/* Stop and join the timer thread (idempotent). */
static void timer_stop(job_pool_t *p)
{
    pthread_mutex_lock(&p->timer_mu);
    p->timer_stop = true;
    pthread_cond_signal(&p->timer_cv);
    bool join = p->timer_running;
    p->timer_running = false;
    pthread_mutex_unlock(&p->timer_mu);
    if (join)
        pthread_join(p->timer, NULL);
}

void job_pool_destroy(job_pool_t *p)
{
    if (!p)
        return;
    timer_stop(p);
    if (NEVER(atomic_load(&p->live) != 0)) {
        /* a job outlived the daemon: keep the wakers (a leak at exit beats a use after free) */
        LOG_E("%lld HTTP jobs still alive at shutdown", (long long)atomic_load(&p->live));
        return;
    }
    for (struct waker *w = p->all, *next; w; w = next) {
        next = w->next_all;
        pthread_mutex_destroy(&w->mu);
        free(w);
    }
    pthread_cond_destroy(&p->timer_cv);
    pthread_mutex_destroy(&p->timer_mu);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int64_t job_pool_live(job_pool_t *p)
{
    return atomic_load(&p->live);
}

/* A waker for j: a free one, or a new one added to the pool for good. */
static struct waker *waker_get(job_pool_t *p, job_t *j)
{
    pthread_mutex_lock(&p->mu);
    struct waker *w = p->free;
    if (w) {
        p->free = w->next_free;
    } else {
        w = xcalloc(1, sizeof *w);
        pthread_mutex_init(&w->mu, NULL);
        w->next_all = p->all;
        p->all = w;
    }
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_lock(&w->mu);
    w->job = j;
    pthread_mutex_unlock(&w->mu);
    return w;
}

/* Detach the job (later notifications find NULL) and return the waker to the free list. */
static void waker_put(job_pool_t *p, struct waker *w)
{
    pthread_mutex_lock(&w->mu);
    w->job = NULL;
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_lock(&p->mu);
    w->next_free = p->free;
    p->free = w;
    pthread_mutex_unlock(&p->mu);
}

/* Resume the job's connection if it is parked, else remember the wake-up. Caller holds w->mu. */
static void wake_locked(job_t *j)
{
    if (j->suspended) {
        j->suspended = false;
        MHD_resume_connection(j->conn);
    } else {
        j->pending = true;
    }
}

/* The engine's notify callback (engine thread): never blocks beyond the waker mutex. */
static void on_notify(void *ud)
{
    struct waker *w = ud;
    pthread_mutex_lock(&w->mu);
    if (w->job)
        wake_locked(w->job);
    pthread_mutex_unlock(&w->mu);
}

void job_pool_shutdown(job_pool_t *p)
{
    timer_stop(p); /* it peeks at parked sockets, which MHD is about to close */
    pthread_mutex_lock(&p->mu);
    for (struct waker *w = p->all; w; w = w->next_all) {
        pthread_mutex_lock(&w->mu);
        if (w->job) {
            w->job->closing = true;
            wake_locked(w->job);
        }
        pthread_mutex_unlock(&w->mu);
    }
    pthread_mutex_unlock(&p->mu);
}

/* ---- parking --------------------------------------------------------------------------- */

enum { F_CLOSING = 1, F_PING = 2, F_GONE = 4 };

/* Forget earlier wake-ups before draining; returns the F_* flags (a ping is consumed). */
static unsigned take_flags(job_t *j)
{
    pthread_mutex_lock(&j->w->mu);
    j->pending = false;
    unsigned f = (j->closing ? F_CLOSING : 0) | (j->ping ? F_PING : 0) | (j->gone ? F_GONE : 0);
    j->ping = false;
    pthread_mutex_unlock(&j->w->mu);
    return f;
}

/* Suspend the connection unless a wake-up arrived since take_flags. Returns true when parked.
 * Must run inside an MHD callback of this connection. */
static bool park(job_t *j)
{
    pthread_mutex_lock(&j->w->mu);
    bool parked = !j->pending && !j->closing && !j->ping && !j->gone;
    if (parked) {
        j->suspended = true;
        j->parked_at = dd_now();
        MHD_suspend_connection(j->conn);
    }
    pthread_mutex_unlock(&j->w->mu);
    return parked;
}

/* True when the peer closed (EOF) or reset the socket. A parked connection's socket is not
 * watched by MHD, so peeking at it from the timer thread is safe while w->mu is held. */
static bool peer_gone(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* One timer round over every parked job: wake gone clients (to be dropped) and silent
 * streams (to send a keep-alive comment). */
static void pool_tick(job_pool_t *p, double now, double ping_s)
{
    pthread_mutex_lock(&p->mu);
    for (struct waker *w = p->all; w; w = w->next_all) {
        pthread_mutex_lock(&w->mu);
        job_t *j = w->job;
        if (j && j->suspended && j->fd >= 0 && peer_gone(j->fd)) {
            j->gone = true;
            wake_locked(j);
        } else if (j && j->suspended && j->stream && now - j->parked_at >= ping_s) {
            j->ping = true;
            wake_locked(j);
        }
        pthread_mutex_unlock(&w->mu);
    }
    pthread_mutex_unlock(&p->mu);
}

/* The timer thread: pool_tick about once a second until timer_stop. */
static void *timer_main(void *arg)
{
    job_pool_t *p = arg;
    pthread_setname_np(pthread_self(), "deltad-http"); /* /metrics' per-thread CPU time */
    pthread_mutex_lock(&p->timer_mu);
    while (!p->timer_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&p->timer_cv, &p->timer_mu, &ts);
        if (p->timer_stop)
            break;
        pthread_mutex_unlock(&p->timer_mu);
        pool_tick(p, dd_now(), p->ping_s);
        pthread_mutex_lock(&p->timer_mu);
    }
    pthread_mutex_unlock(&p->timer_mu);
    return NULL;
}

/* ---- draining the engine --------------------------------------------------------------- */

/* Keep token infos (logprobs) of a choice; grows geometrically. End-of-generation tokens
 * (<|im_end|>) are not part of the text, so OpenAI's logprobs, which cover the content tokens
 * only, leave them out (issue 32). */
static void toks_append(const job_t *j, struct choice *c, const struct eng_tok_info *t, int64_t n)
{
    if (c->n_toks + n > c->cap_toks) {
        c->cap_toks = c->cap_toks * 2 > c->n_toks + n ? c->cap_toks * 2 : c->n_toks + n + 16;
        c->toks = xrealloc(c->toks, (size_t)c->cap_toks * sizeof *c->toks);
    }
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *p = tok_piece(j->env.tok, t[i].id, &len);
        if (j->front && p)
            dd_buf_put(&c->tok_text, p, len);
        if (!tok_is_eog(j->env.tok, t[i].id))
            c->toks[c->n_toks++] = t[i];
        else
            c->eog = true;
    }
    if (j->front)
        c->n_toks = 0; /* front ends report no logprobs: only the text was needed */
}

/* Bytes of output text the first n pending tokens stand for. */
static size_t toks_text_len(const job_t *j, const struct choice *c, int64_t n)
{
    size_t total = 0, len;
    for (int64_t i = 0; i < n; i++)
        total += tok_piece(j->env.tok, c->toks[i].id, &len) ? len : 0;
    return total;
}

/* OpenAI's finish_reason: a stop string or end-of-generation is "stop", or "tool_calls" when
 * the choice called tools; the token cap, the context limit and the request deadline all read
 * as "length" (output was cut short). */
static const char *finish_name(const struct choice *c)
{
    if (c->finish != ENG_FINISH_STOP)
        return "length";
    return c->reply && reply_n_calls(c->reply) > 0 ? "tool_calls" : "stop";
}

/* The pending logprobs of a choice as a resp_toks view (NULL when none). */
static const struct resp_toks *pending_toks(const struct choice *c, struct resp_toks *k)
{
    *k = (struct resp_toks){c->toks, c->n_toks, c->tok_off};
    return c->n_toks ? k : NULL;
}

/* Streaming: logprobs were sent; advance the text offset past them. */
static void toks_sent(const job_t *j, struct choice *c)
{
    c->tok_off += toks_text_len(j, c, c->n_toks);
    c->n_toks = 0;
}

/* A choice's final delta: keep its usage, count it in the metrics, and mark the job failed
 * on an engine error (500) or a cancel the client did not ask for (shutdown: 503). */
static void record_done(job_t *j, struct choice *c, const struct eng_delta *d)
{
    c->done = true;
    c->finish = d->finish;
    c->prompt_tokens = d->prompt_tokens;
    c->cached_tokens = d->cached_tokens;
    c->completion_tokens = d->completion_tokens;
    c->drafted_tokens = d->drafted_tokens;
    c->accepted_tokens = d->accepted_tokens;
    snprintf(c->error, sizeof c->error, "%s", d->error);
    struct metrics_gen g = {d->finish, d->t_queued, d->t_first_token, d->t_done,
                            d->completion_tokens};
    metrics_generation(j->env.metrics, &g);
    if (d->finish == ENG_FINISH_ERROR || d->finish == ENG_FINISH_CANCELLED ||
        d->finish == ENG_FINISH_UNAVAILABLE) {
        bool err = d->finish == ENG_FINISH_ERROR;
        j->failed = true;
        j->fail_status = err ? 500 : 503;
        snprintf(j->fail_msg, sizeof j->fail_msg, "%s",
                 d->finish != ENG_FINISH_CANCELLED
                     ? (d->error[0] ? d->error : "internal error")
                     : "the server is shutting down; the request was cancelled");
    }
}

/* A reply part, to the front end (streaming: the events stay in j->out). */
static void front_part(void *ud, enum resp_part kind, const char *id, const char *name,
                       const char *s, size_t n)
{
    job_t *j = ud;
    j->front->ops->part(j->front, &j->out, kind, id, name, s, n);
}

/* Responses / messages, streamed or not: the reply parser's parts go to the front end, which
 * keeps what its object needs (without streaming, its events are dropped). */
static void front_delta(job_t *j, struct choice *c, const struct eng_delta *d)
{
    if (j->meta.logprobs && d->n_toks)
        toks_append(j, c, d->toks, d->n_toks);
    dd_buf_put(&c->raw, d->text ? d->text : "", d->len);
    reply_feed(c->reply, d->text, d->len);
    if (d->done)
        reply_finish(c->reply);
    reply_parts(c->reply, front_part, j);
    if (!j->stream)
        dd_buf_truncate(&j->out, 0);
    if (d->done)
        record_done(j, c, d);
}

/* Streaming: turn one delta of choice i into SSE events. */
static void stream_delta(job_t *j, int64_t i, const struct eng_delta *d)
{
    struct choice *c = &j->ch[i];
    struct resp_toks k;
    if (j->front) {
        front_delta(j, c, d);
        return;
    }
    if (j->meta.logprobs && d->n_toks)
        toks_append(j, c, d->toks, d->n_toks);
    if (c->reply) {
        reply_feed(c->reply, d->text, d->len);
        if (d->done)
            reply_finish(c->reply);
        if (reply_sse(c->reply, &j->out, &j->meta, i, pending_toks(c, &k)))
            toks_sent(j, c);
    } else if (d->len > 0) {
        resp_sse_text(&j->out, &j->meta, i, d->text, d->len, pending_toks(c, &k));
        toks_sent(j, c);
    }
    if (!d->done)
        return;
    record_done(j, c, d);
    if (d->finish != ENG_FINISH_ERROR && d->finish != ENG_FINISH_CANCELLED &&
        d->finish != ENG_FINISH_UNAVAILABLE) {
        resp_sse_finish(&j->out, &j->meta, i, finish_name(c), pending_toks(c, &k));
        toks_sent(j, c);
    }
}

/* Non-streaming: accumulate one delta of choice i. */
static void collect_delta(job_t *j, int64_t i, const struct eng_delta *d)
{
    struct choice *c = &j->ch[i];
    if (j->front) {
        front_delta(j, c, d);
        return;
    }
    if (c->reply)
        reply_feed(c->reply, d->text, d->len);
    else
        dd_buf_put(&c->text, d->text ? d->text : "", d->len);
    if (j->meta.logprobs && d->n_toks)
        toks_append(j, c, d->toks, d->n_toks);
    if (!d->done)
        return;
    if (c->reply)
        reply_finish(c->reply);
    record_done(j, c, d);
}

/* ---- test hook (DELTAD_TEST_HOOKS builds only) ------------------------------------------ */
#ifdef DELTAD_TEST_HOOKS
#define HOOK_PIECE 3 /* bytes per delta of the fixed output, cut between characters */

/* api.h's hook_output for every choice of a job, handed out in small pieces without the
 * engine, so the output parsers and the streaming see many deltas. */
struct job_hook {
    char *text; /* the job's copy */
    size_t len;
    size_t *off;     /* [n_choices] bytes handed out per choice */
    int64_t *prompt; /* [n_choices] prompt tokens to report */
};

/* Take over the job when the request carries a fixed output (api_chat.c parse_hook). */
static void hook_attach(job_t *j, const struct api_req *req)
{
    if (!req->hook_output)
        return;
    j->hook = xcalloc(1, sizeof *j->hook);
    j->hook->text = xstrdup(req->hook_output);
    j->hook->len = strlen(j->hook->text);
    j->hook->off = xcalloc((size_t)j->n_choices, sizeof *j->hook->off);
    j->hook->prompt = xcalloc((size_t)j->n_choices, sizeof *j->hook->prompt);
    for (int64_t i = 0; i < j->n_choices; i++)
        j->hook->prompt[i] = req->prompts[i / req->n].n_ids;
}

/* The next piece of choice i, the last one with the usage a real run would report. Returns
 * false when the job runs on the engine. */
static bool hook_take(job_t *j, int64_t i, struct eng_delta *d)
{
    struct job_hook *h = j->hook;
    if (!h)
        return false;
    memset(d, 0, sizeof *d);
    size_t off = h->off[i], left = h->len - off, n = left < HOOK_PIECE ? left : HOOK_PIECE;
    while (off + n < h->len && ((unsigned char)h->text[off + n] & 0xC0) == 0x80)
        n++;
    d->text = memcpy(xmalloc(n + 1), h->text + off, n);
    d->text[n] = '\0';
    d->len = n;
    h->off[i] = off + n;
    if (h->off[i] < h->len)
        return true;
    d->done = true;
    d->finish = ENG_FINISH_STOP;
    d->prompt_tokens = h->prompt[i];
    d->completion_tokens = tok_encode(j->env.tok, h->text, h->len, true, NULL, 0);
    d->t_queued = d->t_first_token = d->t_done = dd_now();
    return true;
}

static void hook_free(job_t *j)
{
    if (j->hook) {
        free(j->hook->text);
        free(j->hook->off);
        free(j->hook->prompt);
        free(j->hook);
    }
}
#else
/* The production build: no hook, every job runs on the engine (j->hook stays NULL). */
static void hook_attach(job_t *j, const struct api_req *req)
{
}

static bool hook_take(job_t *j, int64_t i, struct eng_delta *d)
{
    return false;
}

static void hook_free(job_t *j)
{
}
#endif

/* ---- draining, continued ----------------------------------------------------------------- */

/* Take everything new from every unfinished choice. Returns true when anything arrived. */
static bool drain(job_t *j)
{
    bool any = false;
    if (j->front && j->front->ops->cancelled && !j->user_cancel &&
        j->front->ops->cancelled(j->front)) {
        j->user_cancel = true; /* what was generated stays; the rest is cancelled */
        for (int64_t i = 0; i < j->n_choices; i++) {
            struct choice *c = &j->ch[i];
            if (c->done)
                continue;
            if (c->r)
                eng_req_cancel(c->r);
            c->done = true;
            reply_finish(c->reply);
            reply_parts(c->reply, front_part, j);
        }
        return true;
    }
    for (int64_t i = 0; i < j->n_choices; i++) {
        struct choice *c = &j->ch[i];
        struct eng_delta d;
        if (c->done)
            continue;
        if (!hook_take(j, i, &d) && !eng_req_take(c->r, &d))
            continue;
        any = true;
        if (j->stream)
            stream_delta(j, i, &d);
        else
            collect_delta(j, i, &d);
        eng_delta_free(&d);
    }
    return any;
}

/* Every choice has delivered its final delta. */
static bool all_done(const job_t *j)
{
    for (int64_t i = 0; i < j->n_choices; i++)
        if (!j->ch[i].done)
            return false;
    return true;
}

/* Usage over all choices: each prompt counts once, completions add up. */
static struct resp_usage usage(const job_t *j)
{
    struct resp_usage u = {0};
    for (int64_t i = 0; i < j->n_choices; i++) {
        if (i % j->n_per_prompt == 0) {
            u.prompt += j->ch[i].prompt_tokens;
            u.cached += j->ch[i].cached_tokens;
        }
        u.completion += j->ch[i].completion_tokens;
        u.drafted += j->ch[i].drafted_tokens;
        u.accepted += j->ch[i].accepted_tokens;
        if (j->ch[i].reply)
            u.reasoning += reply_reasoning_tokens(j->ch[i].reply, j->env.tok);
    }
    return u;
}

/* ---- other front ends ------------------------------------------------------------------ */

/* The stop string that ended choice c: the engine stops at the first stop string in the
 * tokens' text, so the one found earliest there is it (the output text cannot be compared
 * byte for byte: invalid UTF-8 became U+FFFD in it). NULL for end-of-generation. */
static const char *stop_matched(const job_t *j, const struct choice *c)
{
    const char *best = NULL, *at = NULL;
    for (int i = 0; !c->eog && c->tok_text.len && i < j->n_stops; i++) {
        const char *p = memmem(c->tok_text.p, c->tok_text.len, j->stops[i], strlen(j->stops[i]));
        if (p && (!at || p < at)) {
            at = p;
            best = j->stops[i];
        }
    }
    return best;
}

/* How the (single) choice ended, for the front end. */
static struct resp_end front_end(const job_t *j)
{
    const struct choice *c = &j->ch[0];
    struct resp_end e = {.finish = finish_name(c), .u = usage(j)};
    if (j->user_cancel)
        e.finish = "cancelled";
    else if (c->finish == ENG_FINISH_STOP && j->n_stops)
        e.stop_seq = stop_matched(j, c);
    return e;
}

/* The terminal events of a front end's stream: its close, or its failure. */
static void front_close(job_t *j, bool closing)
{
    if (closing || j->failed) {
        j->front->ops->fail(j->front, &j->out, closing ? 503 : j->fail_status,
                            closing ? "the server is shutting down" : j->fail_msg);
    } else {
        struct resp_end e = front_end(j);
        j->front->ops->close(j->front, &j->out, &e);
    }
    j->ended = true;
}

/* ---- streaming ------------------------------------------------------------------------- */

/* The opening events: a role chunk per chat choice, the echoed prompt per completion choice. */
static void stream_open(job_t *j)
{
    if (j->front) {
        j->front->ops->open(j->front, &j->out);
        j->started = true;
        return;
    }
    for (int64_t i = 0; i < j->n_choices; i++) {
        struct choice *c = &j->ch[i];
        if (j->meta.kind == API_CHAT)
            resp_sse_role(&j->out, &j->meta, i);
        else if (c->echo_len)
            resp_sse_text(&j->out, &j->meta, i, c->echo, c->echo_len, NULL);
    }
    j->started = true;
}

/* The terminal events once every choice is done, or an error (no [DONE]) on failure. */
static void stream_close(job_t *j, bool closing)
{
    if (j->front) {
        front_close(j, closing);
        return;
    }
    if (closing || j->failed) {
        bool down = closing || j->fail_status == 503;
        resp_sse_error(&j->out, down ? "unavailable_error" : "server_error",
                       closing ? "the server is shutting down" : j->fail_msg);
    } else {
        if (j->include_usage) {
            struct resp_usage u = usage(j);
            resp_sse_usage(&j->out, &j->meta, &u);
        }
        resp_sse_done(&j->out);
    }
    j->ended = true;
}

/* Produce more SSE bytes; returns true when the output buffer or the state changed (the
 * reader then loops), false when there is nothing to do but park. A failed choice ends the
 * whole stream: OpenAI clients cannot tell one failed choice of n from a failed request. */
static bool stream_step(job_t *j)
{
    unsigned f = take_flags(j);
    bool closing = f & F_CLOSING;
    if (f & F_GONE) {
        j->ended = j->dropped = true;
        return true;
    }
    if (f & F_PING)
        dd_buf_puts(&j->out, ": keep-alive\n\n");
    if (!j->started) {
        stream_open(j);
        return true;
    }
    bool any = drain(j);
    if (closing || j->failed || all_done(j)) {
        stream_close(j, closing && !all_done(j));
        return true;
    }
    return any;
}

/* Copy produced bytes to MHD's buffer; once everything was handed over the buffer is reused
 * from its start, so a long stream does not grow it. */
static ssize_t stream_copy(job_t *j, char *buf, size_t max)
{
    size_t n = j->out.len - j->out_off;
    if (n > max)
        n = max;
    memcpy(buf, j->out.p + j->out_off, n);
    j->out_off += n;
    if (j->out_off == j->out.len) {
        dd_buf_truncate(&j->out, 0);
        j->out_off = 0;
    }
    j->bytes += n;
    return (ssize_t)n;
}

/* MHD content reader: never returns 0 without having parked the connection first (a 0 from
 * an active connection would make MHD call again at once: a spin). pos is unused: the stream
 * is produced once, in order. */
static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    job_t *j = cls;
    (void)pos;
    for (;;) {
        if (j->out_off < j->out.len)
            return stream_copy(j, buf, max);
        if (j->dropped)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (j->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (stream_step(j))
            continue;
        if (park(j))
            return 0;
    }
}

struct MHD_Response *job_sse_response(job_t *j)
{
    return MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, sse_reader, j, NULL);
}

/* ---- non-streaming --------------------------------------------------------------------- */

/* The chat.completion / text_completion body of a finished non-streaming job. */
static char *final_body(job_t *j, int *status, size_t *len)
{
    struct resp_choice *rc = xcalloc((size_t)j->n_choices, sizeof *rc);
    for (int64_t i = 0; i < j->n_choices; i++) {
        struct choice *c = &j->ch[i];
        rc[i] = (struct resp_choice){.text = c->text.p ? c->text.p : "",
                                     .len = c->text.len,
                                     .finish = finish_name(c),
                                     .toks = {c->toks, c->n_toks, c->echo_len}};
        if (c->reply)
            reply_choice(c->reply, &rc[i]);
    }
    struct resp_usage u = usage(j);
    char *body = resp_completion(&j->meta, rc, j->n_choices, &u, len);
    free(rc);
    *status = 200;
    return body;
}

/* A front end's object of a finished non-streaming job. */
static char *front_body(job_t *j, int *status, size_t *len)
{
    struct resp_end e = front_end(j);
    j->front->ops->close(j->front, &j->out, &e);
    dd_buf_truncate(&j->out, 0);
    *status = 200;
    return j->front->ops->object(j->front, len);
}

/* The same loop as the streaming reader, with the whole body as the only output. */
int job_poll(job_t *j, int *status, char **body, size_t *len)
{
    for (;;) {
        unsigned f = take_flags(j);
        bool closing = f & F_CLOSING;
        if (f & F_GONE)
            return -1;
        while (drain(j))
            ; /* the test hook's fixed output comes in many pieces with no notification */
        struct api_error e;
        if ((closing && !all_done(j)) || j->failed) {
            int st = j->failed ? j->fail_status : 503;
            api_error_set(&e, st, st == 503 ? "unavailable_error" : "server_error", NULL, NULL,
                          "%s", j->failed ? j->fail_msg : "the server is shutting down");
            *status = e.status;
            *body = j->front ? j->front->ops->error(&e, len) : resp_error(&e, len);
            if (j->front) { /* a stored response records the failure too */
                j->front->ops->fail(j->front, &j->out, e.status, e.message);
                dd_buf_truncate(&j->out, 0);
            }
            return 1;
        }
        if (all_done(j)) {
            *body = j->front ? front_body(j, status, len) : final_body(j, status, len);
            return 1;
        }
        if (park(j))
            return 0;
    }
}

/* ---- lifecycle ------------------------------------------------------------------------- */

/* Chat choices: a reply parser when reasoning or tool calls are split out, and (test-hook build)
 * the fixed output, which replaces the engine for every choice. */
static void chat_outputs(job_t *j, const struct api_req *req)
{
    j->tools = req->tools_json ? cJSON_Parse(req->tools_json) : NULL;
    /* front ends always parse, and always take the parts as events */
    struct reply_opts o = {req->reasoning, req->think_open,         req->tool_calls,
                           req->max_calls, req->stream || j->front, j->tools};
    for (int64_t i = 0; i < j->n_choices; i++)
        if (req->reasoning || req->tool_calls || j->front)
            j->ch[i].reply = reply_create(&o);
    if (j->front) {
        j->stops = req->n_stop ? xcalloc((size_t)req->n_stop, sizeof *j->stops) : NULL;
        for (int i = 0; i < req->n_stop; i++)
            j->stops[j->n_stops++] = xstrdup(req->stop[i]);
    }
    hook_attach(j, req);
}

/* Allocate the job and its choices; echo texts are copied once per prompt (choices of one
 * prompt share it). Choice i answers prompt i / n with seed offset i % n. */
static job_t *job_new(job_pool_t *p, const struct job_env *env, struct MHD_Connection *c,
                      const struct api_req *req, const char *id, struct resp_front *front)
{
    job_t *j = xcalloc(1, sizeof *j);
    j->pool = p;
    j->front = front;
    j->env = *env;
    j->conn = c;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    snprintf(j->id, sizeof j->id, "%s", id);
    j->meta = (struct resp_meta){req->kind,       j->id,    (int64_t)time(NULL),
                                 env->model_name, env->tok, req->logprobs};
    j->stream = req->stream;
    j->include_usage = req->include_usage;
    j->n_per_prompt = req->n;
    j->n_choices = req->n * req->n_prompts;
    j->ch = xcalloc((size_t)j->n_choices, sizeof *j->ch);
    if (req->echo) {
        j->echo_texts = xcalloc((size_t)req->n_prompts, sizeof *j->echo_texts);
        for (int64_t i = 0; i < j->n_choices; i++) {
            const struct api_prompt *ap = &req->prompts[i / req->n];
            if (!j->echo_texts[i / req->n])
                j->echo_texts[i / req->n] = xstrdup(ap->text ? ap->text : "");
            j->ch[i].echo = j->echo_texts[i / req->n];
            j->ch[i].echo_len = ap->text ? ap->text_len : 0;
            dd_buf_put(&j->ch[i].text, j->ch[i].echo, j->ch[i].echo_len);
        }
    }
    for (int64_t i = 0; i < j->n_choices; i++)
        j->ch[i].tok_off = j->ch[i].echo_len;
    if (req->kind == API_CHAT)
        chat_outputs(j, req);
    j->w = waker_get(p, j);
    atomic_fetch_add(&p->live, 1);
    metrics_active_add(env->metrics, 1, j->stream);
    return j;
}

/* Submit every choice; on failure nothing stays submitted (the caller ends the job). */
static int submit_all(job_t *j, const struct api_req *req, double deadline, struct api_error *e)
{
    if (j->hook)
        return 0; /* the test hook's fixed output: no engine request */
    for (int64_t i = 0; i < j->n_choices; i++) {
        struct eng_req_params prm;
        api_req_params(req, i / req->n, i % req->n, deadline, &prm);
        eng_req_t *r = eng_req_create(&prm, on_notify, j->w);
        char err[256] = "";
        int rc = eng_submit(j->env.eng, r, err, sizeof err);
        if (rc == 0) {
            j->ch[i].r = r;
            continue;
        }
        eng_req_release(r);
        if (rc == DD_EINVAL)
            api_error_set(e, 400, "exceed_context_size_error", "context_length_exceeded",
                          req->kind == API_CHAT ? "messages" : "prompt", "%s", err);
        else if (rc != DD_EFULL)
            api_error_set(e, 500, "server_error", NULL, NULL, "submit failed: %s",
                          err[0] ? err : dd_strerror(rc));
        return rc;
    }
    return 0;
}

int job_start(job_pool_t *p, const struct job_env *env, struct MHD_Connection *c,
              const struct api_req *req, const char *id, double deadline, job_t **out,
              struct api_error *e)
{
    return job_start_front(p, env, c, req, id, NULL, deadline, out, e);
}

int job_start_front(job_pool_t *p, const struct job_env *env, struct MHD_Connection *c,
                    const struct api_req *req, const char *id, struct resp_front *front,
                    double deadline, job_t **out, struct api_error *e)
{
    job_t *j = job_new(p, env, c, req, id, front);
    int rc = submit_all(j, req, deadline, e);
    if (rc) {
        /* withdraw the choices already submitted; not a client cancel, so not counted */
        for (int64_t i = 0; i < j->n_choices; i++) {
            if (j->ch[i].r)
                eng_req_cancel(j->ch[i].r);
            j->ch[i].done = true;
        }
        job_end(j);
        return rc;
    }
    *out = j;
    return 0;
}

/* Streams count in stream_copy; buffered responses are counted by the http module. */
size_t job_bytes(const job_t *j)
{
    return j->bytes;
}

int job_failed_status(const job_t *j)
{
    return j->failed ? j->fail_status : 0;
}

void job_end(job_t *j)
{
    waker_put(j->pool, j->w);
    bool cancelled = false;
    for (int64_t i = 0; i < j->n_choices; i++) {
        struct choice *c = &j->ch[i];
        if (c->r && !c->done) {
            eng_req_cancel(c->r);
            cancelled = true;
        }
        if (c->r)
            eng_req_release(c->r);
        dd_buf_free(&c->text);
        dd_buf_free(&c->raw);
        dd_buf_free(&c->tok_text);
        free(c->toks);
        reply_destroy(c->reply);
    }
    cJSON_Delete(j->tools);
    hook_free(j);
    if (j->front)
        j->front->ops->destroy(j->front);
    for (int i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    free(j->stops);
    if (cancelled)
        metrics_cancelled(j->env.metrics);
    for (int64_t i = 0; j->echo_texts && i < j->n_choices / j->n_per_prompt; i++)
        free(j->echo_texts[i]);
    free(j->echo_texts);
    metrics_active_add(j->env.metrics, -1, j->stream);
    atomic_fetch_sub(&j->pool->live, 1);
    dd_buf_free(&j->out);
    free(j->ch);
    free(j);
}

/*
 * job — one generation request as the HTTP layer sees it: the engine requests of its choices
 * (n per prompt), the connection it answers on, and the suspend / resume hand-off between the
 * engine thread and the libmicrohttpd thread that owns the connection (STYLE rule 22).
 *
 * Flow: job_start submits; a streaming job answers with job_sse_response, whose content reader
 * drains eng_req_take into SSE events and suspends the connection whenever nothing is pending;
 * a non-streaming job calls job_poll from the access handler, which suspends until every choice
 * is done and then hands back the whole body. The engine's notify callback resumes the
 * connection. Nothing ever blocks or spins on an HTTP thread.
 *
 * Lifetime: the engine's notify(ud) gets a "waker" owned by the pool, never the job itself, so a
 * late notification after the job ended touches only the waker (a stale wake-up of a reused
 * waker is a harmless spurious resume). A job ends exactly once, in job_end, called from the
 * request-completed callback: it cancels what still runs and drops the job's engine references;
 * the engine frees each request when it drops its own.
 *
 * Threads: job_start / job_sse_response / job_poll / job_end run on the MHD thread of the
 * connection; the notify callback runs on the engine thread; the pool's timer thread checks
 * parked connections; job_pool_shutdown runs on the thread stopping the server. The suspend
 * flags are guarded by the waker's mutex.
 */
#ifndef DELTAD_JOB_H
#define DELTAD_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "engine/model/tok.h" // defines: tok_t
#include "engine/sched/eng.h" // defines: eng_t
#include "metrics.h"          // defines: metrics_t
#include "server/api/api.h"   // defines: struct api_req, struct api_error
#include "server/api/resp.h"  // defines: struct resp_front

typedef struct job job_t;
typedef struct job_pool job_pool_t;

/* What jobs need from the server; borrowed, must outlive every job. */
struct job_env {
    eng_t *eng;
    const tok_t *tok;
    const char *model_name;
    metrics_t *metrics;
};

/* The pool starts a timer thread that, about once a second, wakes a parked stream silent for
 * ping_s seconds to send an SSE comment (": keep-alive", so proxies keep the connection open
 * through a long prefill), and wakes a parked connection whose client closed it so that it is
 * dropped, which cancels its generation. */
job_pool_t *job_pool_create(double ping_s);
/* IMPORTANT: only once no job is left and the engine has stopped (eng_stop joined its thread),
 * because the engine may call notify on a pool waker until then. */
void job_pool_destroy(job_pool_t *p);
/* Jobs alive now (any thread). */
int64_t job_pool_live(job_pool_t *p);
/* Shutdown, before MHD_stop_daemon: stop the timer thread, mark every job closing and resume
 * every suspended connection, so that each one ends (an error event or a 503) and none stays
 * suspended when the daemon stops. */
void job_pool_shutdown(job_pool_t *p);

/*
 * Create a job for req (borrowed; copied) answering on connection c, and submit its engine
 * requests; id is the response id ("chatcmpl-..."). Returns 0 with *out set, or with nothing
 * left submitted: DD_EFULL (the queue is full), DD_EINVAL (a prompt does not fit the context;
 * *e is the 400), another negative dd_err (*e is a 500).
 */
int job_start(job_pool_t *p, const struct job_env *env, struct MHD_Connection *c,
              const struct api_req *req, const char *id, double deadline, job_t **out,
              struct api_error *e);

/* job_start for a front end other than chat completions (responses, messages): req is the
 * translated chat request (one choice); front (transferred, destroyed with the job, also on
 * failure) writes the events and the object. */
int job_start_front(job_pool_t *p, const struct job_env *env, struct MHD_Connection *c,
                    const struct api_req *req, const char *id, struct resp_front *front,
                    double deadline, job_t **out, struct api_error *e);

/* Streaming: the 200 response whose reader produces the SSE events (the caller adds headers,
 * queues it and destroys its reference). */
struct MHD_Response *job_sse_response(job_t *j);

/* Non-streaming, from the access handler: returns 0 after suspending the connection (the
 * handler runs again once resumed), 1 with the final status and body (malloc'd, transferred)
 * when every choice is done, or -1 when the client is gone (the handler drops the
 * connection). */
int job_poll(job_t *j, int *status, char **body, size_t *len);

/* Bytes of body produced so far (for the access log). */
size_t job_bytes(const job_t *j);
/* The status a failed choice would have had (500 engine error, 503 cancelled by the server or
 * the job lost a process), 0 when none failed: a stream has sent its 200 already and reports
 * such a failure as an error event, which the access log names. */
int job_failed_status(const job_t *j);

/* End the job: cancel unfinished choices, release the engine references, free it. */
void job_end(job_t *j);

#endif

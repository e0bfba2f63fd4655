/*
 * resp — the OpenAI response side: chat.completion / text_completion objects, the chunk objects
 * of a stream and their SSE framing (docs/openai-api.md sections 2-5), error objects (6.3), the
 * models list and the /slots document.
 *
 * Everything is built with cJSON and printed compactly into malloc'd text or appended to a
 * struct dd_buf (engine/util.h); nothing here touches a connection.
 *
 * Ownership: every returned char * is malloc'd and transferred to the caller (free); borrowed
 * arguments are only read during the call. Thread safety: no shared state; any thread.
 */
#ifndef DELTAD_RESP_H
#define DELTAD_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h"              // defines: struct api_error, enum api_kind
#include "engine/model/tok.h" // defines: tok_t
#include "engine/sched/eng.h" // defines: struct eng_tok_info, struct eng_slot_stats
#include "engine/util.h"      // defines: struct dd_buf

/* What every response and chunk of one request shares. All borrowed. */
struct resp_meta {
    enum api_kind kind;
    const char *id; /* "chatcmpl-<hex>" or "cmpl-<hex>" */
    int64_t created;
    const char *model;
    const tok_t *tok; /* token text for logprobs */
    bool logprobs;
};

struct resp_usage {
    int64_t prompt, completion, cached;
    int64_t drafted, accepted; /* speculation (extension field, only when drafted > 0) */
    int64_t reasoning;         /* completion_tokens_details.reasoning_tokens, only when > 0 */
};

/* Logprobs of consecutive tokens; text_offset = where the first token's text starts in the
 * choice's output (completions' legacy text_offset). */
struct resp_toks {
    const struct eng_tok_info *t; /* [n] */
    int64_t n;
    size_t text_offset;
};

/* A tool call of an assistant message: arguments are JSON text. */
struct resp_call {
    const char *id, *name, *args;
    size_t args_len;
};

/* One finished choice of a non-streaming response. The fields after toks are chat only and
 * may stay zero: no reasoning, no tool calls. */
struct resp_choice {
    const char *text; /* valid UTF-8 */
    size_t len;
    const char *finish; /* "stop" | "length" | "tool_calls" */
    struct resp_toks toks;
    const char *reasoning; /* message.reasoning_content, or NULL for none */
    size_t reasoning_len;
    const struct resp_call *calls; /* [n_calls] message.tool_calls */
    int64_t n_calls;
    bool content_null; /* message.content is null (only tool calls) */
};

/* {"error": {message, type, param, code}} (+ n_prompt_tokens, n_ctx for context errors). */
char *resp_error(const struct api_error *e, size_t *len);

/* chat.completion or text_completion with n choices. */
char *resp_completion(const struct resp_meta *m, const struct resp_choice *c, int64_t n,
                      const struct resp_usage *u, size_t *len);

/* ---- SSE events, appended to b as "data: ...\n\n" ---- */
/* Chat only: the first chunk of a choice, delta {"role":"assistant","content":null}. */
void resp_sse_role(struct dd_buf *b, const struct resp_meta *m, int64_t index);
/* A content delta (len > 0) with optional logprobs (toks may be NULL). */
void resp_sse_text(struct dd_buf *b, const struct resp_meta *m, int64_t index, const char *text,
                   size_t len, const struct resp_toks *toks);
/* Chat: a delta.reasoning_content (len > 0), like resp_sse_text otherwise. */
void resp_sse_reasoning(struct dd_buf *b, const struct resp_meta *m, int64_t index,
                        const char *text, size_t len, const struct resp_toks *toks);
/* Chat: a tool-call delta of call `call`. The first one of a call passes id and name (and
 * args ""): {"index", "id", "type": "function", "function": {"name", "arguments"}}; later ones
 * pass id = name = NULL and an arguments piece: {"index", "function": {"arguments"}}. */
void resp_sse_tool_call(struct dd_buf *b, const struct resp_meta *m, int64_t index, int64_t call,
                        const char *id, const char *name, const char *args, size_t args_len,
                        const struct resp_toks *toks);
/* The finish chunk: delta {} (chat) or text "" (completions) and a finish_reason. */
void resp_sse_finish(struct dd_buf *b, const struct resp_meta *m, int64_t index, const char *finish,
                     const struct resp_toks *toks);
/* The usage chunk (choices []), only when include_usage was asked for. */
void resp_sse_usage(struct dd_buf *b, const struct resp_meta *m, const struct resp_usage *u);
/* data: {"error": {...}} for a failure after the 200 (type "server_error" or
 * "unavailable_error"); the stream then ends without [DONE]. */
void resp_sse_error(struct dd_buf *b, const char *type, const char *message);
void resp_sse_done(struct dd_buf *b);

/* ---- other front ends (resp_responses.c, resp_messages.c) -------------------------------- */

/* A JSON string of s[0..n) (s may be NULL), made valid UTF-8. */
cJSON *resp_str(const char *s, size_t n);
/* Append o as "event: TYPE\ndata: JSON\n\n" (the Responses and Messages framing); deletes o. */
void resp_sse_event(struct dd_buf *b, const char *type, cJSON *o);

/* A piece of a parsed reply (reply.h): text, reasoning, the start of a tool call (its id and
 * name), more of its arguments. */
enum resp_part {
    RESP_PART_CONTENT,
    RESP_PART_REASONING,
    RESP_PART_CALL_START,
    RESP_PART_CALL_ARGS
};

/* How a generation ended, for a front end's terminal events and object. */
struct resp_end {
    const char *finish;   /* "stop" | "length" | "tool_calls" | "cancelled" */
    const char *stop_seq; /* the stop sequence that ended it, or NULL */
    struct resp_usage u;
    bool failed; /* an engine error or a shutdown: the object's status is failed */
    const char *error;
};

/* A front end other than chat completions: its SSE events and objects, built from the same
 * reply parts. The job calls open once, part for every piece, then close (streaming: the
 * terminal events go to b; without streaming b is scratch), then object for the body. Errors
 * take the front end's own shape. Owned by the job (destroy). Connection thread only, except
 * cancelled (any thread). */
struct resp_front;
struct resp_front_ops {
    void (*open)(struct resp_front *f, struct dd_buf *b);
    void (*part)(struct resp_front *f, struct dd_buf *b, enum resp_part kind, const char *id,
                 const char *name, const char *s, size_t n);
    void (*close)(struct resp_front *f, struct dd_buf *b, const struct resp_end *end);
    char *(*object)(struct resp_front *f, size_t *len);
    /* a failure after the 200: the stream's error event(s) */
    void (*fail)(struct resp_front *f, struct dd_buf *b, int status, const char *message);
    char *(*error)(const struct api_error *e, size_t *len);
    bool (*cancelled)(struct resp_front *f); /* a cancel was asked for (may be NULL) */
    void (*destroy)(struct resp_front *f);
};
struct resp_front {
    const struct resp_front_ops *ops;
};

/* GET /v1/models (one == false) or /v1/models/{id} (one == true). meta fields are added when
 * n_vocab > 0. */
char *resp_models(const char *name, int64_t created, int64_t n_vocab, int64_t n_ctx_train,
                  int64_t n_ctx, bool one, size_t *len);
/* GET /slots: one object per slot. */
char *resp_slots(const struct eng_slot_stats *s, int64_t n, size_t *len);

#endif

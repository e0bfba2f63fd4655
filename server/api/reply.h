/*
 * reply — one chat choice's generated text turned into the parts of an OpenAI message:
 * reasoning_content (reasoning.h), content, and tool_calls (toolcall.h), for a stream as SSE
 * chunks and for a whole response as a resp_choice.
 *
 * The text flows: engine deltas -> <think> splitter -> tool-call parser (content only: a call
 * written while thinking is not a call) -> parts. Both modes run the same parsers, so a stream
 * and a whole response of the same text carry the same message.
 *
 * Ownership: reply_create returns an object the caller frees with reply_destroy; opts.tools is
 * borrowed and must outlive it; pointers handed out by reply_choice stay valid until
 * reply_destroy. Thread safety: one owner (the connection thread of the request).
 */
#ifndef DELTAD_REPLY_H
#define DELTAD_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "engine/model/tok.h" // defines: tok_t
#include "resp.h"             // defines: struct resp_meta, struct resp_choice

struct reply_opts {
    bool reasoning;     /* split a leading <think> block into reasoning_content */
    bool think_open;    /* the prompt ended inside an open <think> block */
    bool tool_calls;    /* parse tool calls out of the content */
    int max_calls;      /* 0 = any number, 1 = parallel_tool_calls false */
    bool stream;        /* keep events for reply_sse */
    const cJSON *tools; /* the request's tools (borrowed), or NULL */
};

typedef struct reply reply_t;

reply_t *reply_create(const struct reply_opts *o);
/* More generated text (valid UTF-8 pieces, as the engine hands them out). */
void reply_feed(reply_t *r, const char *s, size_t n);
/* End of generation: settle everything held back. */
void reply_finish(reply_t *r);

/* Streaming: append the chunks for everything parsed since the last call (content and
 * reasoning deltas, tool-call deltas) to b. toks (may be NULL) go with the first chunk.
 * Returns true when a chunk was written, i.e. toks were sent. */
bool reply_sse(reply_t *r, struct dd_buf *b, const struct resp_meta *m, int64_t index,
               const struct resp_toks *toks);
/* Other front ends (responses, messages): hand every part parsed since the last call to fn
 * instead of writing chat chunks. id and name are set for RESP_PART_CALL_START only; the
 * pieces are borrowed for the call. */
typedef void (*reply_part_fn)(void *ud, enum resp_part kind, const char *id, const char *name,
                              const char *s, size_t n);
void reply_parts(reply_t *r, reply_part_fn fn, void *ud);
/* Whole response: the message parts into c (text, reasoning, calls, content_null); the other
 * fields of c are left alone. */
void reply_choice(reply_t *r, struct resp_choice *c);
/* Tool calls reported so far. */
int reply_n_calls(const reply_t *r);
/* Tokens of the reasoning part (re-tokenised, plus the think tags seen): 0 when none. */
int64_t reply_reasoning_tokens(const reply_t *r, const tok_t *tok);

void reply_destroy(reply_t *r);

#endif

/*
 * api_messages — the request side of Anthropic's Messages API (POST /v1/messages and
 * /v1/messages/count_tokens): validate the body and translate it into a chat request (api.h).
 *
 * Translation: system (a string or text blocks) becomes a system message; messages with
 * content blocks text, tool_use (assistant tool_calls) and tool_result (tool messages);
 * thinking blocks of earlier turns are dropped; max_tokens (required), stop_sequences,
 * temperature, top_p, top_k; tools (input_schema = parameters); tool_choice auto / none
 * (any and tool are refused until constrained decoding can enforce them); thinking
 * disabled sets enable_thinking false, enabled true. Images, documents and server tools are
 * refused with a 400.
 *
 * Ownership: fills *out (api_req_free). Thread safety: no shared state; HTTP threads.
 */
#ifndef DELTAD_API_MESSAGES_H
#define DELTAD_API_MESSAGES_H

#include <stddef.h>
#include <stdint.h>

#include "api.h" // defines: struct api_req, struct api_ctx, struct api_error

struct api_messages_req {
    int64_t input_tokens; /* the prompt's tokens (message_start's usage) */
};

int api_messages_parse(const char *body, size_t len, const struct api_ctx *ctx, struct api_req *out,
                       struct api_messages_req *mr, struct api_error *e);
static inline void api_messages_req_free(struct api_messages_req *mr)
{
    (void)mr;
}
/* POST /v1/messages/count_tokens: {"input_tokens": N} (malloc'd) or NULL with *e set. */
char *api_messages_count(const struct api_ctx *ctx, const char *body, size_t len, size_t *out_len,
                         struct api_error *e);

#endif

/*
 * resp_messages — the response side of Anthropic's Messages API: the message object (content
 * blocks thinking / text / tool_use, stop_reason, stop_sequence, usage) and the stream
 * (message_start, ping, content_block_start, content_block_delta with text_delta /
 * thinking_delta / input_json_delta, content_block_stop, message_delta, message_stop; error),
 * framed as "event: TYPE\ndata: JSON\n\n"; errors in Anthropic's shape.
 *
 * A front end (struct resp_front, resp.h) for the job module.
 * Ownership: the front owns copies. Thread safety: one owner (the connection thread).
 */
#ifndef DELTAD_RESP_MESSAGES_H
#define DELTAD_RESP_MESSAGES_H

#include <stddef.h>

#include "api_messages.h" // defines: struct api_messages_req
#include "resp.h"         // defines: struct resp_front, struct api_error

struct resp_front *resp_messages_create(const char *id, const char *model,
                                        const struct api_messages_req *mr);
/* {"type": "error", "error": {"type", "message"}}, the type from the status. */
char *resp_messages_error(const struct api_error *e, size_t *len);

#endif

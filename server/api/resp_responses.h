/*
 * resp_responses — the response side of OpenAI's Responses API: the response object and the
 * streaming events (response.created, response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta / .done,
 * response.reasoning_text.delta / .done, response.function_call_arguments.delta / .done,
 * response.content_part.done, response.output_item.done, then response.completed,
 * response.incomplete or response.failed), each with its sequence_number, framed as
 * "event: TYPE\ndata: JSON\n\n". Output items: reasoning (from <think>), message with one
 * output_text part, function_call; in the order the model wrote them.
 *
 * A front end (struct resp_front, resp.h) for the job module; with store on it keeps the
 * object (in_progress from the start, so it can be cancelled) and the conversation it ends.
 *
 * Ownership: resp_responses_create copies what it is given except store (borrowed: must
 * outlive the front). Thread safety: one owner (the connection thread); cancelled any thread.
 */
#ifndef DELTAD_RESP_RESPONSES_H
#define DELTAD_RESP_RESPONSES_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "resp.h"  // defines: struct resp_front, struct api_error
#include "store.h" // defines: store_t

/* id "resp_<hex>"; echo: the request fields the object repeats (api_responses.h); messages:
 * the conversation before this response (JSON array text); store NULL or keep false = not
 * stored. */
struct resp_front *resp_responses_create(const char *id, const char *model, int64_t created,
                                         const cJSON *echo, const char *messages, bool keep,
                                         store_t *store);

/* The API's error object, as resp_error. */
char *resp_responses_error(const struct api_error *e, size_t *len);

/* {"id", "object": "response", "deleted": true} for DELETE /v1/responses/{id}. */
char *resp_responses_deleted(const char *id, size_t *len);

#endif

/*
 * api_responses — the request side of OpenAI's Responses API (POST /v1/responses): validate
 * the body and translate it into a chat request (api.h), so the same template rendering,
 * reasoning split and tool-call parsing serve it. What the response object repeats of the
 * request (instructions, tools, tool_choice, metadata, ...) and the conversation to store come
 * back in a struct api_responses_req.
 *
 * Translation: input (a string, or items: message with input_text / output_text parts,
 * function_call, function_call_output; reasoning items are skipped) becomes chat messages
 * after those of previous_response_id (from the store); instructions a leading system
 * message (not carried to the next turn, as in the API); function tools become chat tools;
 * max_output_tokens max_tokens; reasoning.effort "none" enable_thinking false. Built-in tools,
 * images, files, background mode and JSON text formats are refused with a 400.
 *
 * Ownership: api_responses_parse fills *out (api_req_free) and *rr (api_responses_req_free).
 * Thread safety: no shared state; HTTP threads (the store locks itself).
 */
#ifndef DELTAD_API_RESPONSES_H
#define DELTAD_API_RESPONSES_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "api.h"   // defines: struct api_req, struct api_ctx, struct api_error
#include "store.h" // defines: store_t

struct api_responses_req {
    cJSON *echo;    /* the response object's request fields (instructions, tools, ...), owned */
    char *messages; /* the conversation so far as a JSON array of chat messages, owned */
    bool store;     /* keep the response (the API's default: true) */
};

/* Returns 0, or -1 with *e set (a 400, or a 404 for an unknown previous_response_id). */
int api_responses_parse(const char *body, size_t len, const struct api_ctx *ctx, store_t *store,
                        struct api_req *out, struct api_responses_req *rr, struct api_error *e);
void api_responses_req_free(struct api_responses_req *rr);

#endif

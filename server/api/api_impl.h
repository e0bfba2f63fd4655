/*
 * api_impl — what the api module's files share (api.c: common fields, completions, /tokenize;
 * api_chat.c: the chat endpoint's own fields, rendering and tokenizing). Not for users of
 * api.h.
 */
#ifndef DELTAD_API_IMPL_H
#define DELTAD_API_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "api.h"              // defines: struct api_req, struct api_ctx, struct api_error
#include "chat.h"             // defines: struct chat_prompt
#include "engine/model/tok.h" // defines: tok_t

/* The status and type of every validation failure. */
#define E400 400, "invalid_request_error"

/* A member that is present and not null; NULL otherwise. */
const cJSON *api__field(const cJSON *o, const char *key);
/* Typed getters: absent or null leaves *out unchanged (get_obj: NULL) and returns 0; a wrong
 * type is -1 with a 400 naming the key in *e. get_str borrows from the tree. */
int api__get_bool(const cJSON *o, const char *key, bool *out, struct api_error *e);
int api__get_str(const cJSON *o, const char *key, const char **out, struct api_error *e);
int api__get_obj(const cJSON *o, const char *key, const cJSON **out, struct api_error *e);

/* Append the tokens of s[0..n) to p->ids (the caller reserved n + 1 more). */
void api__encode_into(const tok_t *t, const char *s, size_t n, bool special, struct api_prompt *p);
/* The model's BOS when its tokenizer asks for one (Qwen's does not). */
void api__add_bos(const tok_t *t, struct api_prompt *p);
/* Tokenize a rendered chat prompt into p: template text with special tokens, user spans
 * without (api_chat.c); tc (NULL: none) keeps the encodings of long spans. */
void api__encode_chat(const tok_t *t, tok_cache_t *tc, const struct chat_prompt *cp,
                      struct api_prompt *p);

/* Output constraints (api_format.c): response_format, json_schema, grammar into r->constraint
 * (validated, schemas compiled to GBNF); then, once the prompt is rendered (a thinking block
 * left open is let through unconstrained), the grammar compiled into r->gram. */
int api__parse_constraint(const cJSON *root, struct api_req *r, struct api_error *e);
int api__compile_constraint(const struct api_ctx *ctx, struct api_req *r, struct api_error *e);
/* The tool-call constraint (api_format.c): tool_choice "required" or a named function (a call
 * at once), or "auto" with a tool marked strict (free text, then calls), in the Qwen3 JSON form
 * or (xml) the XML form of Qwen3.5 / Qwen3-Coder, with each call's arguments valid under its
 * parameters schema; parallel false: one call. tools: the validated, non-empty tools array; tc:
 * tool_choice or NULL. */
int api__tool_constraint(const cJSON *tools, const cJSON *tc, bool parallel, bool xml,
                         struct api_req *r, struct api_error *e);

/* The chat endpoint's own fields: messages, tools, template variables, output parsing; renders
 * and tokenizes the one prompt into r. Returns 0 or -1 with *e set. */
int api__parse_chat(const cJSON *root, const struct api_ctx *ctx, struct api_req *r,
                    struct api_error *e);

/* The other front ends (api_responses.c, api_messages.c): parse a chat request they built from
 * their own body (chat, borrowed) like a /v1/chat/completions body; error params that name a
 * chat field are renamed by the pairs in rename ({"messages", "input", ..., NULL}), and so is
 * the first 'quoted' mention of the field in the message.
 * Defined in api_responses.c. */
int api__parse_translated(const cJSON *chat, const struct api_ctx *ctx, const char *const *rename,
                          struct api_req *out, struct api_error *e);
/* The last chat message when it is an assistant turn, else a new empty one appended (chat
 * allows no two assistant turns in a row, so calls and text merge). Borrowed from msgs. */
cJSON *api__assistant_turn(cJSON *msgs);
/* Add a tool call {id, type: function, function: {name, arguments}} to that assistant turn. */
void api__add_tool_call(cJSON *msgs, const char *id, const char *name, const char *args);
/* Append a chat "tool" message answering call_id with content. */
void api__add_tool_result(cJSON *msgs, const char *call_id, const char *content);
/* A string of at most max bytes, required or not; -1 with a 400 naming param otherwise. */
int api__need_str(const cJSON *o, const char *key, bool required, const char *param,
                  const char **out, struct api_error *e);

#endif

/*
 * api — the OpenAI request side: parse a JSON body, validate every known field (docs/openai-
 * api.md sections 7.1-7.3; unknown fields are ignored, known ones are type-checked strictly),
 * render and tokenize the prompt, and produce a typed api_req the job module hands to the
 * engine. Also the small JSON endpoints /tokenize and /detokenize.
 *
 * Errors are OpenAI-shaped (struct api_error): a 4xx status, error.type, error.param naming the
 * field, error.code. A client error is never a 5xx.
 *
 * Ownership: api_parse fills a caller-owned api_req whose buffers it allocates (api_req_free);
 * no cJSON tree outlives api_parse. api_req_params copies, so engine requests own their data.
 * Thread safety: no shared state; any thread (the tokenizer is immutable).
 */
#ifndef DELTAD_API_H
#define DELTAD_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "chat.h"                   // defines: chat_tmpl_t
#include "engine/model/model.h"     // defines: struct model
#include "engine/model/tok_cache.h" // defines: tok_cache_t
#include "engine/sched/eng.h"       // defines: struct eng_req_params, ENG_MAX_STOP
#include "engine/sched/gram.h"      // defines: gram_t, gram_cache_t
#include "engine/sched/smp.h"       // defines: struct smp_params

#define API_MAX_STOP_LEN 256 /* bytes per stop string */
#define API_MAX_LOGIT_BIAS 1024
#define API_MAX_PROMPTS 32 /* batched completions prompts */
#define API_MAX_COMPLETION_LOGPROBS 5

/* reasoning_format: what happens to a <think> block in chat output (config key and request
 * field of the same name). */
enum api_reasoning {
    API_REASONING_SEPARATE = 0, /* into message.reasoning_content (the default) */
    API_REASONING_NONE,         /* left in the content as the model wrote it */
};

/* What validation needs to know about the server; borrowed. */
struct api_ctx {
    const struct model *model;
    int64_t n_ctx;                /* positions per slot */
    int64_t n_slots;              /* upper bound of n */
    int64_t max_tokens_default;   /* 0 = until end-of-generation or the context is full */
    int max_json_depth;           /* nesting limit checked before parsing */
    const chat_tmpl_t *tmpl;      /* the model's chat template; NULL = built-in ChatML */
    enum api_reasoning reasoning; /* the server's reasoning_format */
    gram_cache_t *grams;          /* compiled grammars (thread-safe); NULL = compile each time */
    tok_cache_t *toks;            /* encodings of long message texts (thread-safe); NULL = none */
};

struct api_error {
    int status;       /* HTTP status */
    const char *type; /* error.type, static */
    const char *code; /* error.code, static or NULL */
    char param[64];   /* error.param, "" = null */
    char message[512];
    int64_t n_prompt_tokens, n_ctx; /* set for context overflow only */
};

enum api_kind { API_CHAT = 0, API_COMPLETION };

/* One prompt (chat has one; completions may batch several). */
struct api_prompt {
    int32_t *ids; /* [n_ids] token ids, owned */
    int64_t n_ids;
    char *text; /* prompt text for echo (completions), owned, may be NULL */
    size_t text_len;
    int64_t *bounds; /* [n_bounds] token positions where a chat message ends (ascending, in
                      * 1 .. n_ids): the prompt cache checkpoints there; owned, may be NULL */
    int64_t n_bounds;
};

struct api_req {
    enum api_kind kind;
    bool stream, include_usage, logprobs, echo, cache_prompt;
    bool spec_override;       /* "speculative" given: use spec_types instead of the server's */
    unsigned spec_types;      /* ENG_SPEC_* mask */
    int32_t top_logprobs;     /* alternatives per position, 0 .. ENG_MAX_TOP_LOGPROBS */
    int64_t n;                /* choices per prompt */
    int64_t max_tokens;       /* requested cap, 0 = none; clamped per prompt by api_req_params */
    struct smp_params s;      /* s.logit_bias owned here; s.seed is the base seed of choice 0 */
    char *stop[ENG_MAX_STOP]; /* owned */
    int n_stop;
    struct api_prompt *prompts; /* [n_prompts] */
    int64_t n_prompts;
    int64_t n_ctx; /* copied from the ctx, for clamping */
    /* chat output parsing (see reply.h) */
    bool reasoning;   /* split <think> blocks into reasoning_content */
    bool think_open;  /* the rendered prompt left a <think> block open */
    bool tool_calls;  /* parse tool calls (tools given, tool_choice not "none") */
    int max_calls;    /* 0 = any, 1 = parallel_tool_calls false */
    char *tools_json; /* the request's tools array as JSON text, owned, or NULL */
    /* The test-hook build's fixed assistant text (api_chat.c, DELTAD_TEST_HOOKS), owned; always
     * NULL in the production binary. Present in every build so the struct's layout, which
     * the test-hook binary shares with the production objects, never depends on the flag. */
    char *hook_output;
    /* output constraint (api_format.c): response_format json_object / json_schema, or the
     * llama.cpp fields json_schema and grammar; compiled after the prompt is rendered */
    char *constraint; /* GBNF text, owned, NULL = none */
    size_t constraint_len;
    const char *constraint_param; /* the field it came from (static), for errors */
    gram_t *gram;                 /* compiled; one reference, released by api_req_free */
};

/* Set *e to an error (status, type, code may be NULL, param may be NULL). */
void api_error_set(struct api_error *e, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* json_parse_body (json.h) with its failure as a 400 in *e. Returns the tree (transferred:
 * cJSON_Delete) or NULL. */
cJSON *api_json_parse(const char *body, size_t len, int max_depth, struct api_error *e);

/* Parse and validate a chat (API_CHAT) or completions (API_COMPLETION) body into *out, render
 * and tokenize the prompt(s). Returns 0, or -1 with *e set and *out left empty. */
int api_parse(enum api_kind kind, const char *body, size_t len, const struct api_ctx *ctx,
              struct api_req *out, struct api_error *e);
void api_req_free(struct api_req *r);

/* Engine parameters for choice `choice` of prompt `prompt`: seed + index, max_tokens clamped
 * to the room left in the context. Every pointer in *out is a fresh copy, transferred to the
 * engine request by eng_req_create. */
void api_req_params(const struct api_req *r, int64_t prompt, int64_t choice, double deadline,
                    struct eng_req_params *out);

/* The chat prompt as one string (template text and user text together), for callers that do
 * not need the user-text spans. *out is malloc'd (caller frees). Returns 0 or DD_EINVAL. */
int api_render_chat(const chat_tmpl_t *t, const cJSON *messages, const cJSON *tools,
                    const cJSON *kwargs, bool add_generation_prompt, char **out, char *err,
                    size_t errlen);

/* POST /tokenize {"content", "add_special"?, "parse_special"?, "with_pieces"?} and
 * POST /detokenize {"tokens"}: the response body (malloc'd, *len set) or NULL with *e set. */
char *api_tokenize(const struct api_ctx *ctx, const char *body, size_t len, size_t *out_len,
                   struct api_error *e);
char *api_detokenize(const struct api_ctx *ctx, const char *body, size_t len, size_t *out_len,
                     struct api_error *e);

#endif

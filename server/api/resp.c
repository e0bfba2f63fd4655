/*
 * resp — OpenAI response objects and SSE framing (see resp.h).
 *
 * Shapes follow docs/openai-api.md: the role chunk carries "content": null (llama.cpp's suite
 * asserts it), content deltas are never empty, the finish chunk has delta {}, the usage chunk
 * has choices [] and comes only when asked for, logprobs never hold -inf (JSON has none; the
 * lowest finite float stands in). Token text inside logprobs is made valid UTF-8; the raw
 * bytes travel in "bytes".
 *
 * Objects are built in the field order of the SDK's types (id, object, created, model,
 * system_fingerprint, choices, usage), which keeps the wire output easy to compare by eye.
 *
 * Thread safety: no shared state; any thread.
 */
#include "resp.h" // defines: resp_completion, resp_sse_*

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/sched/spec.h" // defines: spec_mode_name, SPEC_MODE_THROTTLED
#include "engine/util.h"       // defines: dd_buf_put, ASSERT
#include "json.h"              // defines: json_utf8_sanitize

/* llama.cpp's suite asserts the fingerprint starts with "b" (its build number); ours is the
 * version, with the same prefix. */
#define SYSTEM_FINGERPRINT "b0.1.0-deltad"

/* Print o compactly, delete it, return the text (transferred). */
static char *print(cJSON *o, size_t *len)
{
    char *s = cJSON_PrintUnformatted(o);
    ASSERT(s); /* cJSON only fails on OOM */
    cJSON_Delete(o);
    if (len)
        *len = strlen(s);
    return s;
}

/* Append o as one SSE event and delete it. */
static void sse(struct dd_buf *b, cJSON *o)
{
    size_t n;
    char *s = print(o, &n);
    dd_buf_puts(b, "data: ");
    dd_buf_put(b, s, n);
    dd_buf_puts(b, "\n\n");
    free(s);
}

/* A string item from bytes that need not be NUL-terminated (valid UTF-8 by contract). */
cJSON *resp_str(const char *s, size_t n)
{
    char *z = json_utf8_sanitize(s ? s : "", s ? n : 0, NULL);
    cJSON *v = cJSON_CreateString(z);
    free(z);
    return v;
}

void resp_sse_event(struct dd_buf *b, const char *type, cJSON *o)
{
    size_t n;
    char *s = print(o, &n);
    dd_buf_puts(b, "event: ");
    dd_buf_puts(b, type);
    dd_buf_puts(b, "\ndata: ");
    dd_buf_put(b, s, n);
    dd_buf_puts(b, "\n\n");
    free(s);
}

/* ---- errors ---------------------------------------------------------------------------- */

/* code: the error's string id, else null: OpenAI's typed clients declare code as string |
 * null (issue 32), so the HTTP status never goes there. */
char *resp_error(const struct api_error *e, size_t *len)
{
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "server_error");
    if (e->param[0])
        cJSON_AddStringToObject(err, "param", e->param);
    else
        cJSON_AddNullToObject(err, "param");
    if (e->code)
        cJSON_AddStringToObject(err, "code", e->code);
    else
        cJSON_AddNullToObject(err, "code");
    if (e->n_ctx > 0) {
        cJSON_AddNumberToObject(err, "n_prompt_tokens", (double)e->n_prompt_tokens);
        cJSON_AddNumberToObject(err, "n_ctx", (double)e->n_ctx);
    }
    return print(o, len);
}

/* ---- logprobs -------------------------------------------------------------------------- */

/* JSON has no -inf: a token the sampler could never pick gets the lowest finite float. */
static double finite_lp(float lp)
{
    return isfinite(lp) ? lp : -FLT_MAX;
}

/* {"id", "token", "logprob", "bytes"} of one token id (chat shape; "id" is llama.cpp's
 * addition). A byte token that is half a character shows as U+FFFD in "token"; "bytes" keeps
 * the truth so clients can reassemble it. */
static cJSON *tok_entry(const tok_t *t, int32_t id, float lp)
{
    size_t n = 0;
    const char *p = tok_piece(t, id, &n);
    if (!p)
        n = 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", id);
    cJSON_AddItemToObject(o, "token", resp_str(p ? p : "", n));
    cJSON_AddNumberToObject(o, "logprob", finite_lp(lp));
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)p[i]));
    return o;
}

/* Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}], "refusal": null}. */
static cJSON *chat_logprobs(const tok_t *t, const struct resp_toks *k)
{
    cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
    for (int64_t i = 0; i < k->n; i++) {
        const struct eng_tok_info *ti = &k->t[i];
        cJSON *e = tok_entry(t, ti->id, ti->logprob);
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int32_t j = 0; j < ti->n_top; j++)
            cJSON_AddItemToArray(top, tok_entry(t, ti->top_id[j], ti->top_logprob[j]));
        cJSON_AddItemToArray(content, e);
    }
    cJSON_AddNullToObject(o, "refusal");
    return o;
}

/* Completions (legacy): {tokens, token_logprobs, top_logprobs: [{text: lp}], text_offset}. */
static cJSON *legacy_logprobs(const tok_t *t, const struct resp_toks *k)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
    size_t off = k->text_offset;
    for (int64_t i = 0; i < k->n; i++) {
        const struct eng_tok_info *ti = &k->t[i];
        size_t n = 0;
        const char *p = tok_piece(t, ti->id, &n);
        cJSON_AddItemToArray(tokens, resp_str(p ? p : "", p ? n : 0));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(finite_lp(ti->logprob)));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += p ? n : 0;
        cJSON *top = cJSON_CreateObject();
        for (int32_t j = 0; j < ti->n_top; j++) {
            size_t tn = 0;
            const char *tp = tok_piece(t, ti->top_id[j], &tn);
            char *key = json_utf8_sanitize(tp ? tp : "", tp ? tn : 0, NULL);
            if (!cJSON_GetObjectItemCaseSensitive(top, key))
                cJSON_AddNumberToObject(top, key, finite_lp(ti->top_logprob[j]));
            free(key);
        }
        cJSON_AddItemToArray(tops, top);
    }
    return o;
}

/* "logprobs": null unless asked for and there are tokens to report. */
static void add_logprobs(cJSON *choice, const struct resp_meta *m, const struct resp_toks *k)
{
    if (!m->logprobs || !k) {
        cJSON_AddNullToObject(choice, "logprobs");
        return;
    }
    cJSON_AddItemToObject(choice, "logprobs",
                          m->kind == API_CHAT ? chat_logprobs(m->tok, k)
                                              : legacy_logprobs(m->tok, k));
}

/* ---- envelopes ------------------------------------------------------------------------- */

/* The fields every response and chunk begin with. Completions chunks keep the object name
 * "text_completion", as OpenAI sends them. */
static cJSON *envelope(const struct resp_meta *m, bool chunk)
{
    static const char *const objects[2][2] = {{"chat.completion", "chat.completion.chunk"},
                                              {"text_completion", "text_completion"}};
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", m->id);
    cJSON_AddStringToObject(o, "object", objects[m->kind == API_COMPLETION][chunk]);
    cJSON_AddNumberToObject(o, "created", (double)m->created);
    cJSON_AddStringToObject(o, "model", m->model);
    cJSON_AddStringToObject(o, "system_fingerprint", SYSTEM_FINGERPRINT);
    return o;
}

/* usage with the invariant total = prompt + completion built in, and the cached prompt
 * tokens llama.cpp's suite checks for. */
static cJSON *usage_json(const struct resp_usage *u)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", (double)u->prompt);
    cJSON_AddNumberToObject(o, "completion_tokens", (double)u->completion);
    cJSON_AddNumberToObject(o, "total_tokens", (double)(u->prompt + u->completion));
    cJSON *d = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)u->cached);
    if (u->reasoning > 0) {
        cJSON *c = cJSON_AddObjectToObject(o, "completion_tokens_details");
        cJSON_AddNumberToObject(c, "reasoning_tokens", (double)u->reasoning);
    }
    if (u->drafted > 0) { /* deltad extension: clients ignore unknown usage fields */
        cJSON *s = cJSON_AddObjectToObject(o, "speculative");
        cJSON_AddNumberToObject(s, "drafted_tokens", (double)u->drafted);
        cJSON_AddNumberToObject(s, "accepted_tokens", (double)u->accepted);
    }
    return o;
}

/* {"id", "type": "function", "function": {"name", "arguments"}} of a whole message. */
static cJSON *call_json(const struct resp_call *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", c->id);
    cJSON_AddStringToObject(o, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(o, "function");
    cJSON_AddItemToObject(fn, "name", resp_str(c->name, strlen(c->name)));
    cJSON_AddItemToObject(fn, "arguments", resp_str(c->args, c->args_len));
    return o;
}

/* The assistant message: content (null when only tool calls came), refusal, then the
 * extension reasoning_content and tool_calls when there are any (docs section 2). */
static cJSON *message_json(const struct resp_choice *c)
{
    cJSON *msg = cJSON_CreateObject();
    cJSON_AddStringToObject(msg, "role", "assistant");
    if (c->content_null)
        cJSON_AddNullToObject(msg, "content");
    else
        cJSON_AddItemToObject(msg, "content", resp_str(c->text, c->len));
    cJSON_AddNullToObject(msg, "refusal");
    if (c->reasoning)
        cJSON_AddItemToObject(msg, "reasoning_content", resp_str(c->reasoning, c->reasoning_len));
    if (c->n_calls > 0) {
        cJSON *calls = cJSON_AddArrayToObject(msg, "tool_calls");
        for (int64_t i = 0; i < c->n_calls; i++)
            cJSON_AddItemToArray(calls, call_json(&c->calls[i]));
    }
    return msg;
}

/* One choice of a whole response: message (chat) or text (completions). */
static cJSON *final_choice(const struct resp_meta *m, const struct resp_choice *c, int64_t i)
{
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", (double)i);
    if (m->kind == API_CHAT) {
        cJSON_AddItemToObject(ch, "message", message_json(c));
    } else {
        cJSON_AddItemToObject(ch, "text", resp_str(c->text, c->len));
    }
    add_logprobs(ch, m, &c->toks);
    cJSON_AddStringToObject(ch, "finish_reason", c->finish);
    return ch;
}

char *resp_completion(const struct resp_meta *m, const struct resp_choice *c, int64_t n,
                      const struct resp_usage *u, size_t *len)
{
    cJSON *o = envelope(m, false);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int64_t i = 0; i < n; i++)
        cJSON_AddItemToArray(choices, final_choice(m, &c[i], i));
    cJSON_AddItemToObject(o, "usage", usage_json(u));
    return print(o, len);
}

/* ---- stream chunks --------------------------------------------------------------------- */

/* A chunk with one choice; returns the choice so the caller fills delta / text. */
static cJSON *chunk(const struct resp_meta *m, int64_t index, cJSON **out_choice)
{
    cJSON *o = envelope(m, true);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", (double)index);
    cJSON_AddItemToArray(choices, ch);
    *out_choice = ch;
    return o;
}

void resp_sse_role(struct dd_buf *b, const struct resp_meta *m, int64_t index)
{
    cJSON *ch, *o = chunk(m, index, &ch);
    cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
    cJSON_AddStringToObject(delta, "role", "assistant");
    cJSON_AddNullToObject(delta, "content");
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddNullToObject(ch, "finish_reason");
    sse(b, o);
}

void resp_sse_text(struct dd_buf *b, const struct resp_meta *m, int64_t index, const char *text,
                   size_t len, const struct resp_toks *toks)
{
    ASSERT(len > 0);
    cJSON *ch, *o = chunk(m, index, &ch);
    if (m->kind == API_CHAT)
        cJSON_AddItemToObject(cJSON_AddObjectToObject(ch, "delta"), "content", resp_str(text, len));
    else
        cJSON_AddItemToObject(ch, "text", resp_str(text, len));
    add_logprobs(ch, m, toks && toks->n ? toks : NULL);
    cJSON_AddNullToObject(ch, "finish_reason");
    sse(b, o);
}

void resp_sse_reasoning(struct dd_buf *b, const struct resp_meta *m, int64_t index,
                        const char *text, size_t len, const struct resp_toks *toks)
{
    ASSERT(len > 0);
    cJSON *ch, *o = chunk(m, index, &ch);
    cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
    cJSON_AddItemToObject(delta, "reasoning_content", resp_str(text, len));
    add_logprobs(ch, m, toks && toks->n ? toks : NULL);
    cJSON_AddNullToObject(ch, "finish_reason");
    sse(b, o);
}

/* The shapes llama.cpp's test client asserts (docs section 3): a new index comes with id, type
 * and a non-empty name; "function" never holds an id. */
void resp_sse_tool_call(struct dd_buf *b, const struct resp_meta *m, int64_t index, int64_t call,
                        const char *id, const char *name, const char *arguments, size_t args_len,
                        const struct resp_toks *toks)
{
    cJSON *ch, *o = chunk(m, index, &ch);
    cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
    cJSON *tc = cJSON_CreateObject();
    cJSON_AddNumberToObject(tc, "index", (double)call);
    if (id) {
        cJSON_AddStringToObject(tc, "id", id);
        cJSON_AddStringToObject(tc, "type", "function");
    }
    cJSON *fn = cJSON_AddObjectToObject(tc, "function");
    if (name)
        cJSON_AddItemToObject(fn, "name", resp_str(name, strlen(name)));
    cJSON_AddItemToObject(fn, "arguments", resp_str(arguments, args_len));
    cJSON_AddItemToArray(cJSON_AddArrayToObject(delta, "tool_calls"), tc);
    add_logprobs(ch, m, toks && toks->n ? toks : NULL);
    cJSON_AddNullToObject(ch, "finish_reason");
    sse(b, o);
}

void resp_sse_finish(struct dd_buf *b, const struct resp_meta *m, int64_t index, const char *finish,
                     const struct resp_toks *toks)
{
    cJSON *ch, *o = chunk(m, index, &ch);
    if (m->kind == API_CHAT)
        cJSON_AddObjectToObject(ch, "delta");
    else
        cJSON_AddStringToObject(ch, "text", "");
    add_logprobs(ch, m, toks && toks->n ? toks : NULL);
    cJSON_AddStringToObject(ch, "finish_reason", finish);
    sse(b, o);
}

void resp_sse_usage(struct dd_buf *b, const struct resp_meta *m, const struct resp_usage *u)
{
    cJSON *o = envelope(m, true);
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage_json(u));
    sse(b, o);
}

void resp_sse_error(struct dd_buf *b, const char *type, const char *message)
{
    struct api_error e;
    api_error_set(&e, strcmp(type, "unavailable_error") == 0 ? 503 : 500, type, NULL, NULL, "%s",
                  message);
    size_t n;
    char *s = resp_error(&e, &n);
    dd_buf_puts(b, "data: ");
    dd_buf_put(b, s, n);
    dd_buf_puts(b, "\n\n");
    free(s);
}

void resp_sse_done(struct dd_buf *b)
{
    dd_buf_puts(b, "data: [DONE]\n\n");
}

/* ---- models and slots ------------------------------------------------------------------ */

/* An OpenAI Model object; "meta" follows llama.cpp (clients ignore unknown fields). */
static cJSON *model_json(const char *name, int64_t created, int64_t n_vocab, int64_t n_ctx_train,
                         int64_t n_ctx)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", name);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "owned_by", "deltad");
    if (n_vocab > 0) {
        cJSON *meta = cJSON_AddObjectToObject(o, "meta");
        cJSON_AddNumberToObject(meta, "n_vocab", (double)n_vocab);
        cJSON_AddNumberToObject(meta, "n_ctx_train", (double)n_ctx_train);
        cJSON_AddNumberToObject(meta, "n_ctx", (double)n_ctx);
    }
    return o;
}

char *resp_models(const char *name, int64_t created, int64_t n_vocab, int64_t n_ctx_train,
                  int64_t n_ctx, bool one, size_t *len)
{
    cJSON *m = model_json(name, created, n_vocab, n_ctx_train, n_ctx);
    if (one)
        return print(m, len);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    return print(o, len);
}

/* A draft throttle's state into o: mode (on, throttled, probe), throttled, acceptance. */
static void add_throttle(cJSON *o, int mode, double acceptance)
{
    int m = mode >= 0 && mode <= 2 ? mode : 0;
    cJSON_AddStringToObject(o, "mode", spec_mode_name((enum spec_mode)m));
    cJSON_AddBoolToObject(o, "throttled", m == SPEC_MODE_THROTTLED);
    cJSON_AddNumberToObject(o, "acceptance", round(acceptance * 1e4) / 1e4);
}

/* States by the engine's numbering (0 free, 1 prefill, 2 decode); is_processing is the
 * field llama.cpp's /slots users poll. */
char *resp_slots(const struct eng_slot_stats *s, int64_t n, size_t *len)
{
    static const char *const states[] = {"idle", "prefill", "decode"};
    cJSON *arr = cJSON_CreateArray();
    for (int64_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        int st = s[i].state >= 0 && s[i].state <= 2 ? s[i].state : 0;
        cJSON_AddNumberToObject(o, "id", (double)i);
        cJSON_AddStringToObject(o, "state", states[st]);
        cJSON_AddBoolToObject(o, "is_processing", st != 0);
        cJSON_AddNumberToObject(o, "n_past", (double)s[i].n_past);
        cJSON_AddNumberToObject(o, "n_prompt", (double)s[i].n_prompt);
        cJSON_AddNumberToObject(o, "n_generated", (double)s[i].n_generated);
        cJSON_AddNumberToObject(o, "n_cached_tokens", (double)s[i].n_cached_tokens);
        cJSON_AddNumberToObject(o, "spec_drafted", (double)s[i].drafted);
        cJSON_AddNumberToObject(o, "spec_accepted", (double)s[i].accepted);
        cJSON *sp = cJSON_AddObjectToObject(o, "spec_throttle"); /* the draft throttles */
        add_throttle(sp, s[i].spec_mode, s[i].spec_acceptance);
        add_throttle(cJSON_AddObjectToObject(sp, "ngram"), s[i].ngram_mode, s[i].ngram_acceptance);
        cJSON *ck = cJSON_AddArrayToObject(o, "checkpoints"); /* prompt-cache positions */
        for (int64_t k = 0; k < s[i].n_ckpts && k < ENG_PUB_CKPTS; k++)
            cJSON_AddItemToArray(ck, cJSON_CreateNumber((double)s[i].ckpt_pos[k]));
        cJSON_AddItemToArray(arr, o);
    }
    return print(arr, len);
}

/*
 * fuzz_api — libFuzzer target for the HTTP request path after the body is received: the exact
 * functions server/http/http.c calls per route (api_parse for /v1/chat/completions and
 * /v1/completions, api_tokenize, api_detokenize; with bit 64 of byte 0 the Responses and
 * Messages parsers, api_responses_parse and api_messages_parse / _count, whose objects are then
 * built by their front ends), with the JSON body guards, validation, chat
 * rendering and tokenization behind them, then the response builders of server/api/resp.c fed with
 * what a generation of the parsed prompt would produce.
 *
 * Input: byte 0 picks the route and the server limits (see struct variant); the rest is the
 * request body, as the bytes MHD hands over (not NUL-terminated: the harness copies it into an
 * exact-size heap buffer so ASan sees any read past the end).
 *
 * Invariants checked (a violation aborts, which libFuzzer reports as a crash):
 *   - a rejected request is a 4xx with a message and a param that fits, and resp_error prints
 *     it as JSON with an "error" object: a client error is never a 5xx or a crash;
 *   - an accepted request has 1..n_slots choices and every prompt 1 <= n_ids < n_ctx with ids
 *     below n_vocab; api_req_params leaves room for at least one token and never exceeds n_ctx;
 *   - every SSE event and every response body built from the prompt's tokens (streaming
 *     detokenizer, logprobs with the token pieces) is valid UTF-8 and parses as JSON.
 *
 * The model is a weightless tokenizer + GGUF (fz_model.h): DELTAD_FUZZ_MODEL, default
 * build/cpu/models/tiny-qwen35.gguf (make generates it). Built by `make fuzz-build`.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/model/tok.h"  // defines: tok_stream_push, tok_n_vocab
#include "engine/sched/gram.h" // defines: gram_release
#include "fz_model.h"          // defines: fz_model_load
#include "server/api/api.h"    // defines: api_parse, api_tokenize, api_detokenize, api_req_params
#include "server/api/api_messages.h"   // defines: api_messages_parse, api_messages_count
#include "server/api/api_responses.h"  // defines: api_responses_parse
#include "server/api/json.h"           // defines: json_utf8_valid
#include "server/api/resp.h"           // defines: resp_error, resp_sse_*, resp_completion
#include "server/api/resp_messages.h"  // defines: resp_messages_create
#include "server/api/resp_responses.h" // defines: resp_responses_create
#include "server/api/store.h"          // defines: store_create

static const struct model *g_model;
static store_t *g_store; /* responses kept across inputs, so previous_response_id can hit */

/* Reports a failed invariant the way libFuzzer notices: a crash, with the reason first. */
static void require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_api: invariant failed: %s\n", what);
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_model = fz_model_load("DELTAD_FUZZ_MODEL", "build/cpu/models/tiny-qwen35.gguf");
    g_store = store_create(8, 3600);
    return 0;
}

/* ---- checks on produced JSON ----------------------------------------------------------- */

/* text[0..len) is valid UTF-8 and one JSON value; returns the tree (caller deletes). */
static cJSON *require_json(const char *text, size_t len)
{
    require(json_utf8_valid(text, len), "response is not valid UTF-8");
    cJSON *o = cJSON_ParseWithLength(text, len);
    require(o != NULL, "response is not JSON");
    return o;
}

/* Every event of an SSE buffer is "data: <JSON>\n\n" (or a comment / [DONE]). */
static void require_sse(const struct dd_buf *b)
{
    const char *p = b->p, *end = b->p + b->len;
    while (p < end) {
        const char *sep = memmem(p, (size_t)(end - p), "\n\n", 2);
        require(sep != NULL, "SSE event without its blank line");
        require(sep - p >= 6 && memcmp(p, "data: ", 6) == 0, "SSE event without data:");
        const char *payload = p + 6;
        size_t n = (size_t)(sep - payload);
        require(memchr(payload, '\n', n) == NULL, "raw newline inside an SSE payload");
        if (!(n == 6 && memcmp(payload, "[DONE]", 6) == 0))
            cJSON_Delete(require_json(payload, n));
        p = sep + 2;
    }
}

/* An error reply: a client error, printed as {"error": {...}}. */
static void check_error(const struct api_error *e)
{
    require(e->status >= 400 && e->status < 500, "a client error that is not a 4xx");
    require(e->message[0] != '\0', "an error without a message");
    require(memchr(e->param, '\0', sizeof e->param) != NULL, "error.param not terminated");
    size_t len;
    char *body = resp_error(e, &len);
    cJSON *o = require_json(body, len);
    require(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(o, "error")), "no error object");
    cJSON_Delete(o);
    free(body);
}

/* ---- what the engine would produce ----------------------------------------------------- */

/* Logprob records for ids[0..n): each token its own alternative, plus its neighbours. */
static struct eng_tok_info *fake_toks(const int32_t *ids, int64_t n, int32_t n_top)
{
    struct eng_tok_info *t = calloc((size_t)n + 1, sizeof *t);
    for (int64_t i = 0; i < n; i++) {
        t[i].id = ids[i];
        t[i].logprob = -0.5f * (float)(i % 7);
        t[i].n_top = n_top;
        for (int32_t k = 0; k < n_top; k++) {
            t[i].top_id[k] = ids[(i + k) % n];
            t[i].top_logprob[k] = -(float)k;
        }
    }
    return t;
}

/* "Generate" the prompt's own tokens: stream them through the detokenizer into SSE chunks with
 * logprobs, then build the non-streaming body of the same text. */
static void emulate_output(const struct api_req *r, const struct api_prompt *p)
{
    const tok_t *t = g_model->tok;
    int64_t n = p->n_ids < 256 ? p->n_ids : 256;
    struct eng_tok_info *toks = fake_toks(p->ids, n, r->top_logprobs);
    struct resp_meta m = {r->kind, "chatcmpl-fuzz", 1700000000, "fuzz-model", t, r->logprobs};
    struct dd_buf sse = {0}, all = {0};
    struct tok_stream ts;
    tok_stream_init(&ts);
    char chunk[4096];
    if (r->kind == API_CHAT)
        resp_sse_role(&sse, &m, 0);
    for (int64_t i = 0; i < n; i++) {
        size_t len = tok_stream_push(t, &ts, p->ids[i], chunk, sizeof chunk);
        require(json_utf8_valid(chunk, len), "streamed text is not valid UTF-8");
        struct resp_toks k = {toks + i, 1, all.len};
        if (len)
            resp_sse_text(&sse, &m, 0, chunk, len, r->logprobs ? &k : NULL);
        dd_buf_put(&all, chunk, len);
    }
    size_t len = tok_stream_flush(&ts, chunk, sizeof chunk);
    dd_buf_put(&all, chunk, len);
    resp_sse_finish(&sse, &m, 0, "length", NULL);
    struct resp_usage u = {p->n_ids, n, 0, 0, 0};
    resp_sse_usage(&sse, &m, &u);
    resp_sse_done(&sse);
    require_sse(&sse);
    struct resp_choice c = {all.p ? all.p : "", all.len, "stop", {toks, r->logprobs ? n : 0, 0}};
    size_t blen;
    char *body = resp_completion(&m, &c, 1, &u, &blen);
    cJSON_Delete(require_json(body, blen));
    free(body);
    dd_buf_free(&sse);
    dd_buf_free(&all);
    free(toks);
}

/* ---- the routes ------------------------------------------------------------------------ */

/* An accepted request: the invariants api.h promises, then the engine parameters. */
static void check_req(const struct api_req *r, const struct api_ctx *ctx)
{
    int32_t n_vocab = tok_n_vocab(g_model->tok);
    require(r->n >= 1 && r->n <= ctx->n_slots, "n out of range");
    require(r->n_prompts >= 1 && r->n_prompts <= API_MAX_PROMPTS, "prompt count out of range");
    require(r->n_stop >= 0 && r->n_stop <= ENG_MAX_STOP, "too many stop strings");
    for (int64_t i = 0; i < r->n_prompts; i++) {
        const struct api_prompt *p = &r->prompts[i];
        require(p->n_ids >= 1 && p->n_ids < ctx->n_ctx, "prompt length out of range");
        for (int64_t k = 0; k < p->n_ids; k++)
            require(p->ids[k] >= 0 && p->ids[k] < n_vocab, "token id out of range");
        for (int64_t c = 0; c < r->n; c++) {
            struct eng_req_params prm;
            api_req_params(r, i, c, 0, &prm);
            require(prm.max_tokens >= 1 && prm.n_prompt + prm.max_tokens <= ctx->n_ctx,
                    "max_tokens leaves no room or overflows the context");
            free(prm.prompt);
            free(prm.bounds);
            for (int s = 0; s < prm.n_stop; s++)
                free(prm.stop[s]);
            free(prm.s.logit_bias);
            gram_release(prm.gram);
        }
    }
    emulate_output(r, &r->prompts[0]);
}

/* A front end's whole life on a fixed output: open, parts of every kind, close, object. */
static void run_front(struct resp_front *f)
{
    struct dd_buf b = {0};
    f->ops->open(f, &b);
    f->ops->part(f, &b, RESP_PART_REASONING, NULL, NULL, "hm", 2);
    f->ops->part(f, &b, RESP_PART_CONTENT, NULL, NULL, "hi", 2);
    f->ops->part(f, &b, RESP_PART_CALL_START, "call_1", "f", "", 0);
    f->ops->part(f, &b, RESP_PART_CALL_ARGS, NULL, NULL, "{\"a\":1}", 7);
    struct resp_end end = {.finish = "stop", .u = {.prompt = 3, .completion = 4}};
    f->ops->close(f, &b, &end);
    size_t len;
    char *o = f->ops->object(f, &len);
    cJSON_Delete(require_json(o, len));
    free(o);
    dd_buf_free(&b);
    f->ops->destroy(f);
}

/* Bit 64 of byte 0: route 0 /v1/responses, 1 /v1/messages, else /v1/messages/count_tokens. */
static void fronts(int route, const struct api_ctx *ctx, const char *body, size_t len)
{
    struct api_req r;
    struct api_error e;
    if (route == 0) {
        struct api_responses_req rr;
        if (api_responses_parse(body, len, ctx, g_store, &r, &rr, &e)) {
            check_error(&e);
            return;
        }
        check_req(&r, ctx);
        run_front(
            resp_responses_create("resp_fuzz", "m", 0, rr.echo, rr.messages, rr.store, g_store));
        api_responses_req_free(&rr);
    } else if (route == 1) {
        struct api_messages_req mr;
        if (api_messages_parse(body, len, ctx, &r, &mr, &e)) {
            check_error(&e);
            return;
        }
        check_req(&r, ctx);
        run_front(resp_messages_create("msg_fuzz", "m", &mr));
    } else {
        size_t n;
        char *out = api_messages_count(ctx, body, len, &n, &e);
        if (out)
            cJSON_Delete(require_json(out, n));
        else
            check_error(&e);
        free(out);
        return;
    }
    api_req_free(&r);
}

/* The limits byte 0 selects: route, context size, nesting limit, default max_tokens. */
struct variant {
    int route;   /* 0 chat, 1 completions, 2 /tokenize, 3 /detokenize */
    bool fronts; /* bit 64: the Responses and Messages routes instead (see fronts) */
    struct api_ctx ctx;
};

static struct variant variant_of(uint8_t b)
{
    static const int64_t n_ctx[4] = {8, 64, 512, 4096};
    struct variant v = {b & 3,
                        (b & 64) != 0,
                        {g_model, n_ctx[(b >> 2) & 3], 4, (b & 32) ? 16 : 0, (b & 16) ? 8 : 64}};
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1 << 20))
        return 0;
    struct variant v = variant_of(data[0]);
    size_t len = size - 1;
    char *body = malloc(len ? len : 1); /* exact size: MHD bodies have no NUL after them */
    memcpy(body, data + 1, len);
    struct api_error e;
    if (v.fronts) {
        fronts(v.route, &v.ctx, body, len);
    } else if (v.route < 2) {
        struct api_req r;
        if (api_parse(v.route == 0 ? API_CHAT : API_COMPLETION, body, len, &v.ctx, &r, &e)) {
            check_error(&e);
        } else {
            check_req(&r, &v.ctx);
            api_req_free(&r);
        }
    } else {
        size_t out_len;
        char *out = v.route == 2 ? api_tokenize(&v.ctx, body, len, &out_len, &e)
                                 : api_detokenize(&v.ctx, body, len, &out_len, &e);
        if (out) {
            cJSON_Delete(require_json(out, out_len));
            free(out);
        } else {
            check_error(&e);
        }
    }
    free(body);
    return 0;
}

/*
 * api — parse and validate OpenAI chat / completions requests (see api.h).
 *
 * Rules (docs/openai-api.md section 7): unknown fields are ignored; a known field with the wrong
 * type or an out-of-range value is a 400 whose param names the field; null means "absent" for
 * every optional field. Validation happens in full before anything reaches the engine, so a
 * request either produces a complete api_req or an error, never half of one.
 *
 * Invariant: every prompt handed on has 1 <= n_ids < n_ctx and only ids < n_vocab.
 *
 * Ranges follow OpenAI where it defines one (temperature 0..2, top_p 0..1, penalties -2..2,
 * logit_bias -100..100, top_logprobs 0..20) and are the engine's limits otherwise (n <= slots,
 * stop <= ENG_MAX_STOP). Numbers must be finite; integers must be integral JSON numbers
 * (a string "10" or 1.5 is a 400, not a silent conversion).
 *
 * Sections: errors, typed field getters, sampling and output fields, prompts, parsing,
 * /tokenize and /detokenize.
 *
 * Thread safety: no shared state; called on HTTP threads.
 */
#include "api.h" // defines: api_parse, struct api_req

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "api_impl.h"         // defines: api__parse_chat, api__field
#include "engine/model/tok.h" // defines: tok_encode, tok_n_vocab
#include "engine/util.h"      // defines: xmalloc, dd_errf
#include "json.h"             // defines: json_parse_body, json_utf8_sanitize

/* ---- errors ------------------------------------------------------------------- */

void api_error_set(struct api_error *e, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...)
{
    memset(e, 0, sizeof *e);
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

/* The body guards of json.h, reported as a 400 without a param (the body as a whole). */
cJSON *api_json_parse(const char *body, size_t len, int max_depth, struct api_error *e)
{
    char err[160];
    cJSON *root = json_parse_body(body, len, max_depth, err, sizeof err);
    if (!root)
        api_error_set(e, E400, NULL, NULL, "%s", err);
    return root;
}

/* ---- typed field getters: absent or null leaves *out unchanged and returns 0 ------------ */

/* A member that is present and not null (clients send null for "default"). Keys are case
 * sensitive, and with duplicate keys the first wins, as in cJSON. */
const cJSON *api__field(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A JSON boolean (0 / 1 / "true" are type errors, not truthy). */
int api__get_bool(const cJSON *o, const char *key, bool *out, struct api_error *e)
{
    const cJSON *v = api__field(o, key);
    if (!v)
        return 0;
    if (!cJSON_IsBool(v)) {
        api_error_set(e, E400, NULL, key, "'%s' must be a boolean", key);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A finite number in [lo, hi]; NaN and infinities (1e999 parses as inf) fail the range. */
static int get_num(const cJSON *o, const char *key, double lo, double hi, double *out,
                   struct api_error *e)
{
    const cJSON *v = api__field(o, key);
    if (!v)
        return 0;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(d) || d < lo || d > hi) {
        api_error_set(e, E400, NULL, key, "'%s' must be a number between %g and %g", key, lo, hi);
        return -1;
    }
    *out = d;
    return 0;
}

/* get_num into a float field, which keeps its default when the key is absent. */
static int get_float(const cJSON *o, const char *key, double lo, double hi, float *out,
                     struct api_error *e)
{
    double d = *out;
    if (get_num(o, key, lo, hi, &d, e))
        return -1;
    *out = (float)d;
    return 0;
}

/* An integral JSON number in [lo, hi]. Bounds are checked as doubles before the cast, so a
 * huge value can never wrap into range. */
static int get_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   struct api_error *e)
{
    const cJSON *v = api__field(o, key);
    if (!v)
        return 0;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi) {
        api_error_set(e, E400, NULL, key, "'%s' must be an integer between %lld and %lld", key,
                      (long long)lo, (long long)hi);
        return -1;
    }
    *out = (int64_t)d;
    return 0;
}

/* A string; *out borrows from the tree (valid until cJSON_Delete). */
int api__get_str(const cJSON *o, const char *key, const char **out, struct api_error *e)
{
    const cJSON *v = api__field(o, key);
    if (!v)
        return 0;
    if (!cJSON_IsString(v)) {
        api_error_set(e, E400, NULL, key, "'%s' must be a string", key);
        return -1;
    }
    *out = v->valuestring;
    return 0;
}

/* An object-typed field; absent/null leaves *out NULL. */
int api__get_obj(const cJSON *o, const char *key, const cJSON **out, struct api_error *e)
{
    const cJSON *v = api__field(o, key);
    *out = NULL;
    if (!v)
        return 0;
    if (!cJSON_IsObject(v)) {
        api_error_set(e, E400, NULL, key, "'%s' must be an object", key);
        return -1;
    }
    *out = v;
    return 0;
}

/* ---- sampling and output fields shared by both endpoints ------------------------------- */

/* A seed for requests without one; getrandom cannot fail for 8 bytes on Linux, but a clock
 * value keeps the request going if it ever does. */
static uint64_t random_u64(void)
{
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x)
        x = (uint64_t)(dd_now() * 1e9) ^ 0x9E3779B97F4A7C15ull;
    return x;
}

/* seed: any integer JSON can represent exactly; -1 or absent picks a random one (llama.cpp's
 * convention). The same seed and request give the same text (STYLE rule 29). */
static int parse_seed(const cJSON *o, struct api_req *r, struct api_error *e)
{
    int64_t seed = -1;
    if (get_int(o, "seed", -(INT64_C(1) << 53), INT64_C(1) << 53, &seed, e))
        return -1;
    r->s.seed = seed == -1 ? random_u64() : (uint64_t)seed;
    return 0;
}

/* The sampler's fields with OpenAI's defaults; repeat_penalty (llama.cpp) and
 * repetition_penalty (vLLM) are aliases, the later key in this list winning. */
static int parse_sampling(const cJSON *o, struct api_req *r, struct api_error *e)
{
    struct smp_params *s = &r->s;
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->repetition_penalty = 1.0f;
    int64_t top_k = 0;
    if (get_float(o, "temperature", 0, 2, &s->temperature, e) ||
        get_float(o, "top_p", 0, 1, &s->top_p, e) || get_float(o, "min_p", 0, 1, &s->min_p, e) ||
        get_int(o, "top_k", 0, INT32_MAX, &top_k, e) ||
        get_float(o, "presence_penalty", -2, 2, &s->presence_penalty, e) ||
        get_float(o, "frequency_penalty", -2, 2, &s->frequency_penalty, e) ||
        get_float(o, "repeat_penalty", 1e-3, 10, &s->repetition_penalty, e) ||
        get_float(o, "repetition_penalty", 1e-3, 10, &s->repetition_penalty, e))
        return -1;
    s->top_k = (int32_t)top_k;
    return parse_seed(o, r, e);
}

/* logit_bias: {"<token id>": bias in [-100, 100]}, ids checked against the vocabulary. */
static int parse_logit_bias(const cJSON *o, int64_t n_vocab, struct api_req *r, struct api_error *e)
{
    const cJSON *lb;
    if (api__get_obj(o, "logit_bias", &lb, e))
        return -1;
    int n = lb ? cJSON_GetArraySize(lb) : 0;
    if (n == 0)
        return 0;
    if (n > API_MAX_LOGIT_BIAS) {
        api_error_set(e, E400, NULL, "logit_bias", "'logit_bias' has more than %d entries",
                      API_MAX_LOGIT_BIAS);
        return -1;
    }
    r->s.logit_bias = xcalloc((size_t)n, sizeof *r->s.logit_bias);
    const cJSON *v;
    cJSON_ArrayForEach(v, lb)
    {
        char *end;
        long long id = strtoll(v->string, &end, 10);
        double b = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!v->string[0] || *end || id < 0 || id >= n_vocab || !(b >= -100 && b <= 100)) {
            api_error_set(e, E400, NULL, "logit_bias",
                          "'logit_bias' entry '%.32s' needs a token id below %lld and a bias "
                          "between -100 and 100",
                          v->string, (long long)n_vocab);
            return -1;
        }
        r->s.logit_bias[r->s.n_logit_bias++] = (struct smp_logit_bias){(int32_t)id, (float)b};
    }
    return 0;
}

/* One stop string: non-empty (an empty one would stop at once) and bounded in length. */
static int add_stop(struct api_req *r, const cJSON *v, struct api_error *e)
{
    if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) > API_MAX_STOP_LEN) {
        api_error_set(e, E400, NULL, "stop",
                      "'stop' entries must be non-empty strings of at most %d bytes",
                      API_MAX_STOP_LEN);
        return -1;
    }
    if (r->n_stop == ENG_MAX_STOP) {
        api_error_set(e, E400, NULL, "stop", "'stop' has more than %d entries", ENG_MAX_STOP);
        return -1;
    }
    r->stop[r->n_stop++] = xstrdup(v->valuestring);
    return 0;
}

/* stop: a string or an array of strings, at most ENG_MAX_STOP of them. */
static int parse_stop(const cJSON *o, struct api_req *r, struct api_error *e)
{
    const cJSON *v = api__field(o, "stop");
    if (!v)
        return 0;
    if (cJSON_IsString(v))
        return add_stop(r, v, e);
    if (!cJSON_IsArray(v)) {
        api_error_set(e, E400, NULL, "stop", "'stop' must be a string or an array of strings");
        return -1;
    }
    const cJSON *s;
    cJSON_ArrayForEach(s, v) if (add_stop(r, s, e)) return -1;
    return 0;
}

/* max_tokens and (chat) max_completion_tokens: the smaller wins; huge values are clamped
 * later to the room left in the context. */
static int parse_max_tokens(const cJSON *o, const struct api_ctx *ctx, struct api_req *r,
                            struct api_error *e)
{
    int64_t a = 0, b = 0;
    const int64_t big = INT64_C(1) << 53;
    if (get_int(o, "max_tokens", 1, big, &a, e))
        return -1;
    if (r->kind == API_CHAT && get_int(o, "max_completion_tokens", 1, big, &b, e))
        return -1;
    int64_t m = a && b ? (a < b ? a : b) : (a ? a : b);
    r->max_tokens = m ? m : ctx->max_tokens_default;
    return 0;
}

/* stream and stream_options.include_usage (ignored without stream, as OpenAI does). */
static int parse_stream(const cJSON *o, struct api_req *r, struct api_error *e)
{
    const cJSON *so;
    if (api__get_bool(o, "stream", &r->stream, e) || api__get_obj(o, "stream_options", &so, e))
        return -1;
    if (so && api__get_bool(so, "include_usage", &r->include_usage, e)) {
        snprintf(e->param, sizeof e->param, "stream_options.include_usage");
        return -1;
    }
    return 0;
}

/* logprobs: chat takes a boolean plus top_logprobs 0..20; completions the legacy integer. */
static int parse_logprobs(const cJSON *o, struct api_req *r, struct api_error *e)
{
    int64_t top = 0;
    if (r->kind == API_COMPLETION) {
        int64_t lp = -1;
        if (get_int(o, "logprobs", 0, API_MAX_COMPLETION_LOGPROBS, &lp, e))
            return -1;
        r->logprobs = lp >= 0;
        r->top_logprobs = lp > 0 ? (int32_t)lp : 0;
        return 0;
    }
    if (api__get_bool(o, "logprobs", &r->logprobs, e) ||
        get_int(o, "top_logprobs", 0, ENG_MAX_TOP_LOGPROBS, &top, e))
        return -1;
    if (api__field(o, "top_logprobs") && !r->logprobs) {
        api_error_set(e, E400, NULL, "top_logprobs", "'top_logprobs' requires 'logprobs': true");
        return -1;
    }
    r->top_logprobs = (int32_t)top;
    return 0;
}

/* deltad extension "speculative": "none" | "ngram" | "mtp" | "ngram,mtp" (or a boolean:
 * false = none, true = the server's setting): a per-request override, limited to what the
 * server enabled. */
static int parse_spec(const cJSON *o, struct api_req *r, struct api_error *e)
{
    static const char *const names[] = {"none", "ngram", "mtp", "ngram,mtp"};
    static const unsigned masks[] = {0, ENG_SPEC_NGRAM, ENG_SPEC_MTP,
                                     ENG_SPEC_NGRAM | ENG_SPEC_MTP};
    const cJSON *v = api__field(o, "speculative");
    if (!v || cJSON_IsTrue(v))
        return 0;
    if (cJSON_IsFalse(v)) {
        r->spec_override = true;
        r->spec_types = 0;
        return 0;
    }
    for (int i = 0; i < 4 && cJSON_IsString(v); i++)
        if (strcmp(v->valuestring, names[i]) == 0) {
            r->spec_override = true;
            r->spec_types = masks[i];
            return 0;
        }
    api_error_set(e, E400, NULL, "speculative",
                  "'speculative' must be a boolean or one of none, ngram, mtp, ngram,mtp");
    return -1;
}

/* Fields both endpoints share. model and user are type-checked and otherwise ignored: one
 * model is served whatever the name (docs 7.1), and the response names it. */
static int parse_common(const cJSON *o, const struct api_ctx *ctx, struct api_req *r,
                        struct api_error *e)
{
    const char *ignored = NULL;
    int64_t n_max = ctx->n_slots > 0 ? ctx->n_slots : 1;
    r->n = 1;
    r->cache_prompt = true;
    if (api__get_str(o, "model", &ignored, e) || api__get_str(o, "user", &ignored, e) ||
        get_int(o, "n", 1, n_max, &r->n, e) ||
        api__get_bool(o, "cache_prompt", &r->cache_prompt, e) || parse_sampling(o, r, e) ||
        parse_logit_bias(o, tok_n_vocab(ctx->model->tok), r, e) || parse_stop(o, r, e) ||
        parse_max_tokens(o, ctx, r, e) || parse_stream(o, r, e) || parse_logprobs(o, r, e) ||
        parse_spec(o, r, e) || api__parse_constraint(o, r, e))
        return -1;
    return 0;
}

/* ---- prompts --------------------------------------------------------------------------- */

/* Append the tokens of s[0..n) to p->ids (capacity: the caller reserved n + 1 more). */
void api__encode_into(const tok_t *t, const char *s, size_t n, bool special, struct api_prompt *p)
{
    if (n == 0)
        return;
    int64_t got = tok_encode(t, s, n, special, p->ids + p->n_ids, (int64_t)n + 1);
    ASSERT(got >= 0 && got <= (int64_t)n + 1); /* byte-level BPE: at most one id per byte */
    p->n_ids += got;
}

/* The model's BOS when its tokenizer asks for one (Qwen's does not). */
void api__add_bos(const tok_t *t, struct api_prompt *p)
{
    if (tok_add_bos(t) && tok_bos(t) >= 0)
        p->ids[p->n_ids++] = tok_bos(t);
}

/* Every prompt must leave room for at least one generated token. */
static int check_prompts(const struct api_req *r, const struct api_ctx *ctx, const char *param,
                         struct api_error *e)
{
    for (int64_t i = 0; i < r->n_prompts; i++) {
        int64_t n = r->prompts[i].n_ids;
        if (n == 0) {
            api_error_set(e, E400, NULL, param, "the prompt is empty");
            return -1;
        }
        if (n >= ctx->n_ctx) {
            api_error_set(e, 400, "exceed_context_size_error", "context_length_exceeded", param,
                          "the request exceeds the available context size: the prompt has "
                          "%lld tokens and the context %lld",
                          (long long)n, (long long)ctx->n_ctx);
            e->n_prompt_tokens = n;
            e->n_ctx = ctx->n_ctx;
            return -1;
        }
    }
    return 0;
}

/* A text prompt (special tokens parsed: completions prompts are raw model input). */
static void text_prompt(const tok_t *t, const char *s, struct api_prompt *p)
{
    size_t n = strlen(s);
    p->ids = xmalloc((n + 2) * sizeof *p->ids);
    api__add_bos(t, p);
    api__encode_into(t, s, n, true, p);
    p->text = xstrdup(s);
    p->text_len = n;
}

/* The text of ids (malloc'd, valid UTF-8: broken sequences become U+FFFD). */
static char *decode_text(const tok_t *t, const int32_t *ids, int64_t n, size_t *len)
{
    size_t need = 0, piece;
    for (int64_t i = 0; i < n; i++)
        need += tok_piece(t, ids[i], &piece) ? piece : 0;
    char *raw = xmalloc(need + 1);
    tok_decode(t, ids, n, raw, need);
    char *text = json_utf8_sanitize(raw, need, len);
    free(raw);
    return text;
}

/* A token-id prompt: every element an integer id below n_vocab. */
static int id_prompt(const tok_t *t, const cJSON *arr, struct api_prompt *p, struct api_error *e)
{
    int n = cJSON_GetArraySize(arr);
    p->ids = xmalloc(((size_t)n + 1) * sizeof *p->ids);
    const cJSON *v;
    cJSON_ArrayForEach(v, arr)
    {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(d >= 0 && d < tok_n_vocab(t) && d == floor(d))) {
            api_error_set(e, E400, NULL, "prompt",
                          "Prompt contains invalid tokens: ids must be integers below %d",
                          (int)tok_n_vocab(t));
            return -1;
        }
        p->ids[p->n_ids++] = (int32_t)d;
    }
    p->text = decode_text(t, p->ids, p->n_ids, &p->text_len);
    return 0;
}

/* prompt: a string, an array of strings, an array of ids, or an array of id arrays. */
static int parse_prompt(const cJSON *root, const tok_t *t, struct api_req *r, struct api_error *e)
{
    const cJSON *p = api__field(root, "prompt");
    bool batch = cJSON_IsArray(p) && (cJSON_IsString(p->child) || cJSON_IsArray(p->child));
    int n = batch ? cJSON_GetArraySize(p) : 1;
    if (!p || (!cJSON_IsString(p) && !cJSON_IsArray(p)) || (cJSON_IsArray(p) && !p->child)) {
        api_error_set(e, E400, NULL, "prompt",
                      "'prompt' must be a string, an array of strings or an array of token ids");
        return -1;
    }
    if (n > API_MAX_PROMPTS) {
        api_error_set(e, E400, NULL, "prompt", "at most %d prompts per request", API_MAX_PROMPTS);
        return -1;
    }
    r->prompts = xcalloc((size_t)n, sizeof *r->prompts);
    r->n_prompts = n;
    /* one prompt: p itself (a string or one id array); a batch: each element */
    const cJSON *item = batch ? p->child : p;
    for (int i = 0; i < n; i++, item = item->next) {
        if (cJSON_IsString(item)) {
            text_prompt(t, item->valuestring, &r->prompts[i]);
        } else if (!cJSON_IsArray(item) || id_prompt(t, item, &r->prompts[i], e)) {
            if (!cJSON_IsArray(item))
                api_error_set(e, E400, NULL, "prompt",
                              "batched prompts must all be strings or all be token-id arrays");
            return -1;
        }
        if (batch && cJSON_IsString(item) != cJSON_IsString(p->child)) {
            api_error_set(e, E400, NULL, "prompt", "batched prompts must all have one type");
            return -1;
        }
    }
    return 0;
}

/* Completions: prompt, echo, suffix (only empty: no fill-in-the-middle), best_of (only 1). */
static int parse_completion_fields(const cJSON *root, const struct api_ctx *ctx, struct api_req *r,
                                   struct api_error *e)
{
    const char *suffix = NULL;
    int64_t best_of = 1;
    if (api__get_bool(root, "echo", &r->echo, e) || api__get_str(root, "suffix", &suffix, e) ||
        get_int(root, "best_of", 1, 1, &best_of, e))
        return -1;
    if (suffix && suffix[0]) {
        api_error_set(e, E400, NULL, "suffix", "'suffix' is not supported by this server");
        return -1;
    }
    return parse_prompt(root, ctx->model->tok, r, e);
}

/* Parse, then the common fields, then the endpoint's own, then the context check: the
 * first failure wins and is the one reported. */
int api_parse(enum api_kind kind, const char *body, size_t len, const struct api_ctx *ctx,
              struct api_req *out, struct api_error *e)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->n_ctx = ctx->n_ctx;
    cJSON *root = api_json_parse(body, len, ctx->max_json_depth, e);
    if (!root)
        return -1;
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        api_error_set(e, E400, NULL, NULL, "the request body must be a JSON object");
        goto out;
    }
    if (parse_common(root, ctx, out, e))
        goto out;
    if (kind == API_CHAT ? api__parse_chat(root, ctx, out, e)
                         : parse_completion_fields(root, ctx, out, e))
        goto out;
    rc = check_prompts(out, ctx, kind == API_CHAT ? "messages" : "prompt", e);
    if (rc == 0)
        rc = api__compile_constraint(ctx, out, e);
out:
    cJSON_Delete(root);
    if (rc)
        api_req_free(out);
    return rc;
}

/* Safe on a zeroed or half-filled request (api_parse's failure path uses it). */
void api_req_free(struct api_req *r)
{
    free(r->s.logit_bias);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    for (int64_t i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].ids);
        free(r->prompts[i].text);
        free(r->prompts[i].bounds);
    }
    free(r->prompts);
    free(r->tools_json);
    free(r->hook_output);
    free(r->constraint);
    gram_release(r->gram);
    memset(r, 0, sizeof *r);
}

/* Deep copies throughout: eng_req_create takes ownership of prompt, stop and logit_bias, and
 * the api_req is freed right after submission. */
void api_req_params(const struct api_req *r, int64_t prompt, int64_t choice, double deadline,
                    struct eng_req_params *out)
{
    const struct api_prompt *p = &r->prompts[prompt];
    memset(out, 0, sizeof *out);
    out->prompt = xmalloc((size_t)p->n_ids * sizeof *out->prompt);
    memcpy(out->prompt, p->ids, (size_t)p->n_ids * sizeof *out->prompt);
    out->n_prompt = p->n_ids;
    if (p->n_bounds) {
        out->bounds = xmalloc((size_t)p->n_bounds * sizeof *out->bounds);
        memcpy(out->bounds, p->bounds, (size_t)p->n_bounds * sizeof *out->bounds);
        out->n_bounds = p->n_bounds;
    }
    /* check_prompts guaranteed room >= 1; no cap at all means "until the context is full" */
    int64_t room = r->n_ctx - p->n_ids;
    out->max_tokens = r->max_tokens > 0 && r->max_tokens < room ? r->max_tokens : room;
    for (int i = 0; i < r->n_stop; i++)
        out->stop[i] = xstrdup(r->stop[i]);
    out->n_stop = r->n_stop;
    out->s = r->s;
    /* choice k of the request samples with seed + k: n choices differ, and each is
     * reproducible on its own */
    out->s.seed = r->s.seed + (uint64_t)(prompt * r->n + choice);
    out->logprobs = r->logprobs;
    out->top_logprobs = r->top_logprobs;
    if (r->s.n_logit_bias) {
        size_t bytes = (size_t)r->s.n_logit_bias * sizeof *r->s.logit_bias;
        out->s.logit_bias = xmalloc(bytes);
        memcpy(out->s.logit_bias, r->s.logit_bias, bytes);
    }
    out->deadline = deadline;
    out->cache_prompt = r->cache_prompt;
    out->spec_override = r->spec_override;
    out->spec_types = r->spec_types;
    if (r->gram) {
        gram_retain(r->gram);
        out->gram = r->gram;
    }
}

/* ---- /tokenize and /detokenize --------------------------------------------------------- */

/* Print compactly and delete o; the text is transferred. */
static char *print_json(cJSON *o, size_t *len)
{
    char *s = cJSON_PrintUnformatted(o);
    ASSERT(s);
    cJSON_Delete(o);
    *len = strlen(s);
    return s;
}

/* {"tokens": [id...]} or, with_pieces, {"tokens": [{"id": id, "piece": text}...]}. */
static cJSON *tokens_json(const tok_t *t, const int32_t *ids, int64_t n, bool with_pieces)
{
    /* a piece may be part of a UTF-8 character: pieces are shown sanitized */
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "tokens");
    for (int64_t i = 0; i < n; i++) {
        if (!with_pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            continue;
        }
        size_t len;
        const char *p = tok_piece(t, ids[i], &len);
        char *piece = json_utf8_sanitize(p ? p : "", p ? len : 0, NULL);
        cJSON *item = cJSON_CreateObject();
        cJSON_AddNumberToObject(item, "id", ids[i]);
        cJSON_AddStringToObject(item, "piece", piece);
        cJSON_AddItemToArray(arr, item);
        free(piece);
    }
    return o;
}

/* llama.cpp's shape and defaults: no BOS unless add_special, control tokens parsed. */
char *api_tokenize(const struct api_ctx *ctx, const char *body, size_t len, size_t *out_len,
                   struct api_error *e)
{
    cJSON *root = api_json_parse(body, len, ctx->max_json_depth, e);
    if (!root)
        return NULL;
    const char *content = NULL;
    bool add_special = false, parse_special = true, with_pieces = false;
    char *out = NULL;
    if (!cJSON_IsObject(root) || !cJSON_IsString(api__field(root, "content"))) {
        api_error_set(e, E400, NULL, "content", "expected {\"content\": string}");
        goto done;
    }
    content = api__field(root, "content")->valuestring;
    if (api__get_bool(root, "add_special", &add_special, e) ||
        api__get_bool(root, "parse_special", &parse_special, e) ||
        api__get_bool(root, "with_pieces", &with_pieces, e))
        goto done;
    const tok_t *t = ctx->model->tok;
    struct api_prompt p = {0};
    size_t n = strlen(content);
    p.ids = xmalloc((n + 2) * sizeof *p.ids);
    if (add_special)
        api__add_bos(t, &p);
    api__encode_into(t, content, n, parse_special, &p);
    out = print_json(tokens_json(t, p.ids, p.n_ids, with_pieces), out_len);
    free(p.ids);
done:
    cJSON_Delete(root);
    return out;
}

/* Ids are validated like a token prompt; the text comes back sanitized to UTF-8. */
char *api_detokenize(const struct api_ctx *ctx, const char *body, size_t len, size_t *out_len,
                     struct api_error *e)
{
    cJSON *root = api_json_parse(body, len, ctx->max_json_depth, e);
    if (!root)
        return NULL;
    const cJSON *arr = api__field(root, "tokens");
    char *out = NULL;
    struct api_prompt p = {0};
    if (!cJSON_IsObject(root) || !cJSON_IsArray(arr)) {
        api_error_set(e, E400, NULL, "tokens", "expected {\"tokens\": [token ids]}");
        goto done;
    }
    if (arr->child && id_prompt(ctx->model->tok, arr, &p, e)) {
        snprintf(e->param, sizeof e->param, "tokens");
        goto done;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", p.text ? p.text : "");
    out = print_json(o, out_len);
done:
    free(p.ids);
    free(p.text);
    cJSON_Delete(root);
    return out;
}

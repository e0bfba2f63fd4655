/*
 * api_chat — the chat endpoint's side of request parsing (see api.h): messages, tools and
 * tool_choice (validated by chat_check), template variables, response_format, the output
 * parsing switches (reasoning_format, parallel_tool_calls); then the prompt is rendered with
 * the model's template and tokenized. In the test-hook build only (see parse_hook), a fixed
 * assistant text.
 *
 * tool_choice: "none" keeps the tools in the prompt but turns tool-call parsing off. "required",
 * a named function and tools with strict: true are enforced by a grammar of the tool-call
 * syntax (api_format.c).
 *
 * Thread safety: no shared state; called on HTTP threads.
 */
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"               // defines: api__parse_chat
#include "chat.h"                   // defines: chat_render, chat_check, chat_tmpl_tool_form
#include "engine/model/tok.h"       // defines: tok_piece, tok_bos
#include "engine/model/tok_cache.h" // defines: tok_cache_encode
#include "engine/util.h"            // defines: xcalloc, xstrdup

/* ---- prompt ---------------------------------------------------------------------------- */

/* Tokenize a rendered chat prompt: template text with special tokens, user spans without, so
 * "<|im_end|>" typed by a user stays text. Cutting at span edges can split what whole-text
 * BPE would merge across the edge; the edges sit next to control tokens and newlines, where
 * the pre-tokenizer splits anyway. Capacity: every piece gets its length + 1 ids. */
void api__encode_chat(const tok_t *t, tok_cache_t *tc, const struct chat_prompt *cp,
                      struct api_prompt *p)
{
    p->ids = xmalloc((cp->text.len + 2 * (size_t)cp->n_spans + 2) * sizeof *p->ids);
    api__add_bos(t, p);
    size_t at = 0;
    for (int64_t i = 0; i < cp->n_spans; i++) {
        api__encode_into(t, cp->text.p + at, cp->spans[i].off - at, true, p);
        /* a message's text: a long one (a shared system prompt) is likely sent again */
        const size_t n = cp->spans[i].len;
        int64_t got = tok_cache_encode(tc, t, cp->text.p + cp->spans[i].off, n, false,
                                       p->ids + p->n_ids, (int64_t)n + 1);
        ASSERT(got >= 0 && got <= (int64_t)n + 1); /* byte-level BPE: at most one id per byte */
        p->n_ids += got;
        at = cp->spans[i].off + n;
    }
    api__encode_into(t, cp->text.p + at, cp->text.len - at, true, p);
    /* message ends: byte offsets to token positions, walking the tokens' bytes; an end inside
     * a token (no token boundary there) is dropped */
    if (cp->n_ends == 0)
        return;
    p->bounds = xmalloc((size_t)cp->n_ends * sizeof *p->bounds);
    int64_t j = 0, i = tok_add_bos(t) && tok_bos(t) >= 0 && p->n_ids && p->ids[0] == tok_bos(t);
    size_t bytes = 0;
    for (; i <= p->n_ids && j < cp->n_ends; i++) {
        while (j < cp->n_ends && cp->ends[j] < bytes)
            j++;
        if (j < cp->n_ends && cp->ends[j] == bytes) {
            p->bounds[p->n_bounds++] = i;
            j++;
        }
        size_t len = 0;
        if (i < p->n_ids)
            tok_piece(t, p->ids[i], &len);
        bytes += len;
    }
}

/* The text of chat_render without its spans (the buffer changes hands). */
int api_render_chat(const chat_tmpl_t *t, const cJSON *messages, const cJSON *tools,
                    const cJSON *kwargs, bool add_generation_prompt, char **out, char *err,
                    size_t errlen)
{
    struct chat_prompt cp;
    int rc = chat_render(t, messages, tools, kwargs, add_generation_prompt, &cp, err, errlen);
    if (rc)
        return rc;
    *out = dd_buf_take(&cp.text, NULL);
    chat_prompt_free(&cp);
    return 0;
}

/* ---- fields ---------------------------------------------------------------------------- */

/* reasoning_format (llama.cpp's field): none, or separate (also spelt deepseek or auto). */
static int parse_reasoning_format(const cJSON *root, const struct api_ctx *ctx, struct api_req *r,
                                  struct api_error *e)
{
    const char *f = NULL;
    if (api__get_str(root, "reasoning_format", &f, e))
        return -1;
    if (!f) {
        r->reasoning = ctx->reasoning == API_REASONING_SEPARATE;
        return 0;
    }
    static const char *const separate[] = {"separate", "deepseek", "deepseek-legacy", "auto"};
    r->reasoning = false;
    for (size_t i = 0; i < sizeof separate / sizeof separate[0]; i++)
        r->reasoning = r->reasoning || strcmp(f, separate[i]) == 0;
    if (r->reasoning || strcmp(f, "none") == 0)
        return 0;
    api_error_set(e, E400, NULL, "reasoning_format",
                  "'reasoning_format' must be none or separate (deepseek, auto)");
    return -1;
}

/* Tool-call parsing: on with a non-empty tools array unless tool_choice is "none";
 * parallel_tool_calls false keeps the first call only. */
static int parse_tool_switches(const cJSON *root, const cJSON *tools, const struct api_ctx *ctx,
                               struct api_req *r, struct api_error *e)
{
    bool parallel = true;
    if (api__get_bool(root, "parallel_tool_calls", &parallel, e))
        return -1;
    const cJSON *tc = api__field(root, "tool_choice");
    bool none = cJSON_IsString(tc) && strcmp(tc->valuestring, "none") == 0;
    r->tool_calls = tools && cJSON_GetArraySize(tools) > 0 && !none;
    r->max_calls = parallel ? 0 : 1;
    if (r->tool_calls)
        r->tools_json = cJSON_PrintUnformatted(tools);
    bool xml = chat_tmpl_tool_form(ctx->tmpl) == CHAT_TOOLS_XML;
    return r->tool_calls ? api__tool_constraint(tools, tc, parallel, xml, r, e) : 0;
}

#ifdef DELTAD_TEST_HOOKS
/*
 * Test-hook build only (make's build/<flavour>/tests/deltad-testhooks, compiled with
 * -DDELTAD_TEST_HOOKS; never the production deltad): with DELTAD_TEST_FORCED_OUTPUT=1 in the
 * environment, the request field "debug_forced_output" is the exact assistant text to emit
 * instead of the model's, so end-to-end tests of the output parsers need no trained model.
 * Without the variable, and in the production binary, the field is unknown and ignored.
 */
static int parse_hook(const cJSON *root, struct api_req *r, struct api_error *e)
{
    const char *on = getenv("DELTAD_TEST_FORCED_OUTPUT");
    const char *s = NULL;
    if (!on || strcmp(on, "1") != 0)
        return 0;
    if (api__get_str(root, "debug_forced_output", &s, e))
        return -1;
    r->hook_output = s ? xstrdup(s) : NULL;
    return 0;
}
#else
static int parse_hook(const cJSON *root, struct api_req *r, struct api_error *e)
{
    return 0;
}
#endif

/* The template variables: chat_template_kwargs, plus enable_thinking false for
 * reasoning_effort "none" (llama.cpp's spelling of "no thinking") unless the kwargs say
 * otherwise. Returns a tree the caller deletes, or NULL. */
static cJSON *template_kwargs(const cJSON *kwargs, const char *effort)
{
    cJSON *kw = kwargs ? cJSON_Duplicate(kwargs, true) : NULL;
    if (effort && strcmp(effort, "none") == 0 &&
        !cJSON_GetObjectItemCaseSensitive(kw, "enable_thinking")) {
        if (!kw)
            kw = cJSON_CreateObject();
        cJSON_AddFalseToObject(kw, "enable_thinking");
    }
    return kw;
}

/* Render (the template sees the validated tree; nothing of it survives this function) and
 * tokenize. A template error is the client's: a 400 with the template's message. */
static int render(const cJSON *msgs, const cJSON *tools, const cJSON *kw, const struct api_ctx *ctx,
                  struct api_req *r, struct api_error *e)
{
    struct chat_prompt cp;
    char err[512];
    if (chat_render(ctx->tmpl, msgs, tools, kw, true, &cp, err, sizeof err)) {
        api_error_set(e, E400, NULL, "messages", "%s", err);
        return -1;
    }
    r->prompts = xcalloc(1, sizeof *r->prompts);
    r->n_prompts = 1;
    r->think_open = cp.think_open;
    api__encode_chat(ctx->model->tok, ctx->toks, &cp, &r->prompts[0]);
    chat_prompt_free(&cp);
    return 0;
}

int api__parse_chat(const cJSON *root, const struct api_ctx *ctx, struct api_req *r,
                    struct api_error *e)
{
    const cJSON *msgs, *tools, *kwargs;
    const char *effort = NULL;
    struct chat_error ce;
    if (chat_check(root, &msgs, &tools, &ce)) {
        api_error_set(e, E400, NULL, ce.param, "%s", ce.message);
        return -1;
    }
    if (api__get_obj(root, "chat_template_kwargs", &kwargs, e) ||
        api__get_str(root, "reasoning_effort", &effort, e) ||
        parse_reasoning_format(root, ctx, r, e) || parse_tool_switches(root, tools, ctx, r, e) ||
        parse_hook(root, r, e))
        return -1;
    cJSON *kw = template_kwargs(kwargs, effort);
    int rc = render(msgs, tools, kw, ctx, r, e);
    cJSON_Delete(kw);
    return rc;
}

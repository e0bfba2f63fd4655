/*
 * api_messages — POST /v1/messages requests (see api_messages.h).
 *
 * Thread safety: no shared state; called on HTTP threads.
 */
#include "api_messages.h" // defines: api_messages_parse

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"    // defines: api__parse_translated, api__need_str, E400
#include "engine/util.h" // defines: xstrdup

static int bad(struct api_error *e, const char *param, const char *msg)
{
    api_error_set(e, E400, NULL, param, "%s: %s", param, msg);
    return -1;
}

/* The text of text blocks (or a string); NULL with *e set otherwise. */
static char *blocks_text(const cJSON *c, const char *param, struct api_error *e)
{
    if (cJSON_IsString(c))
        return xstrdup(c->valuestring);
    if (!cJSON_IsArray(c)) {
        bad(e, param, "must be a string or an array of text blocks");
        return NULL;
    }
    struct dd_buf b = {0};
    const cJSON *p;
    cJSON_ArrayForEach(p, c)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
            dd_buf_free(&b);
            bad(e, param,
                "blocks must be text blocks with a string text (images and documents "
                "are not supported)");
            return NULL;
        }
        dd_buf_puts(&b, text->valuestring);
    }
    return dd_buf_take(&b, NULL);
}

static void add_msg(cJSON *msgs, const char *role, const char *text)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", text);
    cJSON_AddItemToArray(msgs, m);
}

/* One content block of message i into msgs (text accumulates in *text). */
static int block(const cJSON *b, bool user, const char *param, cJSON *msgs, struct dd_buf *text,
                 struct api_error *e)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "text")) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(b, "text");
        if (!cJSON_IsString(s))
            return bad(e, param, "a text block needs a string text");
        dd_buf_puts(text, s->valuestring);
        return 0;
    }
    if (!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking"))
        return 0; /* earlier thinking is not shown to the model again */
    if (!strcmp(t, "tool_use") && !user) {
        const char *id = NULL, *name = NULL;
        const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
        if (api__need_str(b, "id", true, param, &id, e) ||
            api__need_str(b, "name", true, param, &name, e) || !cJSON_IsObject(input))
            return bad(e, param, "a tool_use block needs a string id and name and an object input");
        char *args = cJSON_PrintUnformatted(input);
        api__add_tool_call(msgs, id, name, args);
        free(args);
        return 0;
    }
    if (!strcmp(t, "tool_result") && user) {
        const char *id = NULL;
        if (api__need_str(b, "tool_use_id", true, param, &id, e))
            return bad(e, param, "a tool_result block needs a string tool_use_id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(b, "content");
        char *out = c ? blocks_text(c, param, e) : xstrdup("");
        if (!out)
            return -1;
        api__add_tool_result(msgs, id, out);
        free(out);
        return 0;
    }
    return bad(e, param,
               "unsupported content block type (text, tool_use in assistant turns, "
               "tool_result in user turns, thinking; no images or documents)");
}

/* messages: [{role: user | assistant, content: string | blocks}], required, non-empty. */
static int parse_messages(const cJSON *root, cJSON *msgs, struct api_error *e)
{
    const cJSON *arr = api__field(root, "messages");
    if (!cJSON_IsArray(arr) || !arr->child)
        return bad(e, "messages", "is required: a non-empty array of messages");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, arr)
    {
        char param[48];
        snprintf(param, sizeof param, "messages.%d", i++);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        bool user = cJSON_IsString(role) && !strcmp(role->valuestring, "user");
        bool asst = cJSON_IsString(role) && !strcmp(role->valuestring, "assistant");
        if (!cJSON_IsObject(m) || (!user && !asst))
            return bad(e, param, "role must be user or assistant");
        if (cJSON_IsString(content)) {
            if (asst)
                cJSON_ReplaceItemInObjectCaseSensitive(api__assistant_turn(msgs), "content",
                                                       cJSON_CreateString(content->valuestring));
            else
                add_msg(msgs, "user", content->valuestring);
            continue;
        }
        if (!cJSON_IsArray(content))
            return bad(e, param, "content must be a string or an array of content blocks");
        struct dd_buf text = {0};
        const cJSON *b;
        cJSON_ArrayForEach(b, content) if (block(b, user, param, msgs, &text, e))
        {
            dd_buf_free(&text);
            return -1;
        }
        if (asst)
            cJSON_ReplaceItemInObjectCaseSensitive(api__assistant_turn(msgs), "content",
                                                   cJSON_CreateString(text.p ? text.p : ""));
        else if (text.len || !cJSON_GetArraySize(content))
            add_msg(msgs, "user", text.p ? text.p : "");
        dd_buf_free(&text);
    }
    return 0;
}

/* tools [{name, description?, input_schema}] (custom tools; server tools are refused). */
static int parse_tools(const cJSON *root, cJSON *chat, struct api_error *e)
{
    const cJSON *tools = api__field(root, "tools");
    if (!tools)
        return 0;
    if (!cJSON_IsArray(tools))
        return bad(e, "tools", "must be an array of tools");
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        char param[48];
        snprintf(param, sizeof param, "tools.%d", i++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        if (type && !cJSON_IsNull(type) &&
            !(cJSON_IsString(type) && !strcmp(type->valuestring, "custom")))
            return bad(e, param,
                       "only custom tools with an input_schema are supported (no "
                       "server tools such as web_search)");
        if (!cJSON_IsString(name) || !name->valuestring[0] || !cJSON_IsObject(schema))
            return bad(e, param,
                       "a tool needs a non-empty string name and an object "
                       "input_schema");
        cJSON *c = cJSON_CreateObject(), *fn;
        cJSON_AddStringToObject(c, "type", "function");
        fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "description");
        if (cJSON_IsString(d))
            cJSON_AddStringToObject(fn, "description", d->valuestring);
        cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(schema, true));
        cJSON_AddItemToArray(out, c);
    }
    return 0;
}

/* tool_choice {type: auto | none | any | tool, name (tool), disable_parallel_tool_use?}: any
 * and tool become chat's "required" and a named function, enforced by the tool-call grammar
 * (api_format.c). */
static int parse_tool_choice(const cJSON *root, cJSON *chat, struct api_error *e)
{
    const cJSON *tc;
    if (api__get_obj(root, "tool_choice", &tc, e))
        return -1;
    if (!tc)
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    bool no_par = false;
    if (api__get_bool(tc, "disable_parallel_tool_use", &no_par, e))
        return -1;
    if (no_par)
        cJSON_AddFalseToObject(chat, "parallel_tool_calls");
    if (!strcmp(t, "auto") || !strcmp(t, "none") || !strcmp(t, "any")) {
        cJSON_AddStringToObject(chat, "tool_choice", !strcmp(t, "any") ? "required" : t);
        return 0;
    }
    if (strcmp(t, "tool") != 0)
        return bad(e, "tool_choice", "type must be auto, any, tool or none");
    const char *name = NULL;
    if (api__need_str(tc, "name", true, "tool_choice.name", &name, e))
        return bad(e, "tool_choice.name", "a tool_choice of type tool needs the tool's name");
    cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name);
    return 0;
}

/* thinking {type: enabled | disabled | adaptive, budget_tokens?}. */
static int parse_thinking(const cJSON *root, cJSON *chat, struct api_error *e)
{
    const cJSON *th;
    if (api__get_obj(root, "thinking", &th, e))
        return -1;
    if (!th)
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(th, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (strcmp(t, "enabled") && strcmp(t, "disabled") && strcmp(t, "adaptive"))
        return bad(e, "thinking", "type must be enabled, disabled or adaptive");
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(chat, "chat_template_kwargs"), "enable_thinking",
                          strcmp(t, "disabled") != 0);
    return 0;
}

static void pass(const cJSON *root, const char *key, cJSON *chat, const char *as)
{
    const cJSON *v = api__field(root, key);
    if (v)
        cJSON_AddItemToObject(chat, as, cJSON_Duplicate(v, true));
}

/* The chat body; count = count_tokens (max_tokens not required). */
static int translate(const cJSON *root, bool count, cJSON *chat, struct api_error *e)
{
    const char *model = NULL;
    if (!cJSON_IsObject(root))
        return bad(e, "body", "the request body must be a JSON object");
    if (api__need_str(root, "model", true, "model", &model, e))
        return -1;
    const cJSON *mt = api__field(root, "max_tokens");
    if (!count && !mt)
        return bad(e, "max_tokens", "Field required");
    const cJSON *stops = api__field(root, "stop_sequences");
    if (stops && !cJSON_IsArray(stops))
        return bad(e, "stop_sequences", "must be an array of strings");
    cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
    const cJSON *sys = api__field(root, "system");
    if (sys) {
        char *s = blocks_text(sys, "system", e);
        if (!s)
            return -1;
        add_msg(msgs, "system", s);
        free(s);
    }
    if (parse_messages(root, msgs, e) || parse_tools(root, chat, e) ||
        parse_tool_choice(root, chat, e) || parse_thinking(root, chat, e))
        return -1;
    if (!count)
        pass(root, "max_tokens", chat, "max_tokens");
    pass(root, "stop_sequences", chat, "stop");
    if (stops && cJSON_GetArraySize(stops) > 0) /* the job tells which one matched */
        cJSON_AddTrueToObject(chat, "logprobs");
    pass(root, "temperature", chat, "temperature");
    pass(root, "top_p", chat, "top_p");
    pass(root, "top_k", chat, "top_k");
    pass(root, "stream", chat, "stream");
    pass(root, "debug_forced_output", chat, "debug_forced_output"); /* test hook */
    pass(root, "seed", chat, "seed"); /* deltad extensions, as in chat */
    pass(root, "logit_bias", chat, "logit_bias");
    return 0;
}

static int parse(const char *body, size_t len, const struct api_ctx *ctx, bool count,
                 struct api_req *out, struct api_error *e)
{
    static const char *const rename[] = {"stop", "stop_sequences", NULL};
    memset(out, 0, sizeof *out);
    cJSON *root = api_json_parse(body, len, ctx->max_json_depth, e);
    if (!root)
        return -1;
    cJSON *chat = cJSON_CreateObject();
    int rc = translate(root, count, chat, e);
    cJSON_Delete(root);
    if (rc == 0)
        rc = api__parse_translated(chat, ctx, rename, out, e);
    cJSON_Delete(chat);
    return rc;
}

int api_messages_parse(const char *body, size_t len, const struct api_ctx *ctx, struct api_req *out,
                       struct api_messages_req *mr, struct api_error *e)
{
    if (parse(body, len, ctx, false, out, e))
        return -1;
    mr->input_tokens = out->prompts[0].n_ids;
    return 0;
}

char *api_messages_count(const struct api_ctx *ctx, const char *body, size_t len, size_t *out_len,
                         struct api_error *e)
{
    struct api_req r;
    if (parse(body, len, ctx, true, &r, e))
        return NULL;
    char text[64];
    *out_len = (size_t)snprintf(text, sizeof text, "{\"input_tokens\":%lld}",
                                (long long)r.prompts[0].n_ids);
    api_req_free(&r);
    return xstrdup(text);
}

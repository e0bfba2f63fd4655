/*
 * api_responses — POST /v1/responses requests (see api_responses.h).
 *
 * Every field is checked here before translation, so an error names the Responses field
 * (input[2].call_id, max_output_tokens); what the chat parser still rejects (a range, a
 * template error) is renamed by api__parse_translated.
 *
 * Thread safety: no shared state; called on HTTP threads.
 */
#include "api_responses.h" // defines: api_responses_parse

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"    // defines: api__field, api__get_obj, E400
#include "engine/util.h" // defines: xstrdup

/* ---- shared with api_messages.c -------------------------------------------------------- */

int api__parse_translated(const cJSON *chat, const struct api_ctx *ctx, const char *const *rename,
                          struct api_req *out, struct api_error *e)
{
    char *text = cJSON_PrintUnformatted(chat);
    ASSERT(text);
    struct api_ctx c = *ctx;
    c.max_json_depth += 4; /* the translation nests tools two levels deeper */
    int rc = api_parse(API_CHAT, text, strlen(text), &c, out, e);
    free(text);
    for (int i = 0; rc && rename && rename[i]; i += 2) {
        if (strcmp(e->param, rename[i]) != 0)
            continue;
        snprintf(e->param, sizeof e->param, "%s", rename[i + 1]);
        char q[80], *at; /* the message's 'name' too */
        size_t n = (size_t)snprintf(q, sizeof q, "'%s'", rename[i]);
        if ((at = strstr(e->message, q)) != NULL) {
            char rest[sizeof e->message];
            snprintf(rest, sizeof rest, "%s", at + n);
            snprintf(at, sizeof e->message - (size_t)(at - e->message), "'%s'%s", rename[i + 1],
                     rest);
        }
        break;
    }
    return rc;
}

int api__need_str(const cJSON *o, const char *key, bool required, const char *param,
                  const char **out, struct api_error *e)
{
    const cJSON *v = api__field(o, key);
    if (!v && !required)
        return 0;
    if (!cJSON_IsString(v)) {
        api_error_set(e, E400, NULL, param, "'%s' must be a string%s", param,
                      required ? " and is required" : "");
        return -1;
    }
    *out = v->valuestring;
    return 0;
}

/* ---- input items ------------------------------------------------------------------------ */

/* A param name "input[i].key" into e. */
static int bad_item(struct api_error *e, int i, const char *key, const char *msg)
{
    char param[64];
    snprintf(param, sizeof param, "input[%d]%s%s", i, key ? "." : "", key ? key : "");
    api_error_set(e, E400, NULL, param, "'%s' %s", param, msg);
    return -1;
}

/* The text of a content: a string, or text parts (input_text, output_text, text); images and
 * files are refused. Returns a malloc'd string or NULL with *e set. */
static char *content_text(const cJSON *c, int i, struct api_error *e)
{
    if (cJSON_IsString(c))
        return xstrdup(c->valuestring);
    if (!cJSON_IsArray(c)) {
        bad_item(e, i, "content", "must be a string or an array of content parts");
        return NULL;
    }
    struct dd_buf b = {0};
    const cJSON *p;
    cJSON_ArrayForEach(p, c)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        bool is_text = !strcmp(t, "input_text") || !strcmp(t, "output_text") || !strcmp(t, "text");
        if (is_text && cJSON_IsString(text)) {
            dd_buf_puts(&b, text->valuestring);
            continue;
        }
        dd_buf_free(&b);
        if (!strcmp(t, "input_image") || !strcmp(t, "input_file") || !strcmp(t, "input_audio"))
            bad_item(e, i, "content",
                     "holds an image, file or audio part: this server takes text "
                     "only");
        else
            bad_item(e, i, "content",
                     "parts must be input_text (or output_text) with a string "
                     "text");
        return NULL;
    }
    return dd_buf_take(&b, NULL);
}

/* The last message when it is an assistant turn (calls and text merge into it: chat allows
 * no two assistant turns in a row), else a new one appended. */
cJSON *api__assistant_turn(cJSON *msgs)
{
    int n = cJSON_GetArraySize(msgs);
    cJSON *last = n ? cJSON_GetArrayItem(msgs, n - 1) : NULL;
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(last, "role");
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "assistant"))
        return last;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddNullToObject(m, "content");
    cJSON_AddItemToArray(msgs, m);
    return m;
}

void api__add_tool_call(cJSON *msgs, const char *id, const char *name, const char *args)
{
    cJSON *m = api__assistant_turn(msgs);
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!calls)
        calls = cJSON_AddArrayToObject(m, "tool_calls");
    cJSON *c = cJSON_CreateObject(), *fn;
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    fn = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(fn, "name", name);
    cJSON_AddStringToObject(fn, "arguments", args);
    cJSON_AddItemToArray(calls, c);
}

void api__add_tool_result(cJSON *msgs, const char *call_id, const char *content)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", call_id);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(msgs, m);
}

/* A message item (type "message", or an easy input message without type). */
static int item_message(const cJSON *it, int i, cJSON *msgs, struct api_error *e)
{
    const char *role = NULL;
    if (api__need_str(it, "role", true, "input[].role", &role, e))
        return bad_item(e, i, "role", "must be user, system, developer or assistant");
    bool known = !strcmp(role, "user") || !strcmp(role, "system") || !strcmp(role, "developer") ||
                 !strcmp(role, "assistant");
    if (!known)
        return bad_item(e, i, "role", "must be user, system, developer or assistant");
    char *text = content_text(api__field(it, "content"), i, e);
    if (!text)
        return -1;
    cJSON *m;
    if (!strcmp(role, "assistant")) {
        m = api__assistant_turn(msgs);
        const cJSON *old = cJSON_GetObjectItemCaseSensitive(m, "content");
        char *joined =
            xmalloc(strlen(text) + (cJSON_IsString(old) ? strlen(old->valuestring) : 0) + 1);
        sprintf(joined, "%s%s", cJSON_IsString(old) ? old->valuestring : "", text);
        cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString(joined));
        free(joined);
    } else {
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", !strcmp(role, "developer") ? "system" : role);
        cJSON_AddStringToObject(m, "content", text);
        cJSON_AddItemToArray(msgs, m);
    }
    free(text);
    return 0;
}

/* function_call {call_id, name, arguments}: a tool call of the assistant turn. */
static int item_call(const cJSON *it, int i, cJSON *msgs, struct api_error *e)
{
    const char *id = NULL, *name = NULL, *args = NULL;
    if (api__need_str(it, "call_id", true, "", &id, e))
        return bad_item(e, i, "call_id", "must be a string and is required");
    if (api__need_str(it, "name", true, "", &name, e))
        return bad_item(e, i, "name", "must be a string and is required");
    if (api__need_str(it, "arguments", true, "", &args, e))
        return bad_item(e, i, "arguments", "must be a string (JSON text) and is required");
    api__add_tool_call(msgs, id, name, args);
    return 0;
}

/* function_call_output {call_id, output}: a tool message. */
static int item_output(const cJSON *it, int i, cJSON *msgs, struct api_error *e)
{
    const char *id = NULL;
    if (api__need_str(it, "call_id", true, "", &id, e))
        return bad_item(e, i, "call_id", "must be a string and is required");
    const cJSON *out = api__field(it, "output");
    if (!out)
        return bad_item(e, i, "output", "is required");
    char *text = content_text(out, i, e);
    if (!text)
        return -1;
    api__add_tool_result(msgs, id, text);
    free(text);
    return 0;
}

/* input: a string (one user message) or an array of items, appended to msgs. */
static int parse_input(const cJSON *root, cJSON *msgs, struct api_error *e)
{
    const cJSON *in = api__field(root, "input");
    if (cJSON_IsString(in)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", in->valuestring);
        cJSON_AddItemToArray(msgs, m);
        return 0;
    }
    if (!cJSON_IsArray(in)) {
        api_error_set(e, E400, NULL, "input",
                      "'input' is required: a string or an array of input items");
        return -1;
    }
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, in)
    {
        const cJSON *type = cJSON_IsObject(it) ? api__field(it, "type") : NULL;
        const char *t = cJSON_IsString(type) ? type->valuestring : NULL;
        int rc;
        if (!cJSON_IsObject(it) || (type && !t))
            return bad_item(e, i, NULL, "must be an object with a string type");
        if (!t || !strcmp(t, "message"))
            rc = item_message(it, i, msgs, e);
        else if (!strcmp(t, "function_call"))
            rc = item_call(it, i, msgs, e);
        else if (!strcmp(t, "function_call_output"))
            rc = item_output(it, i, msgs, e);
        else if (!strcmp(t, "reasoning"))
            rc = 0; /* earlier reasoning is not shown to the model again */
        else
            return bad_item(e, i, "type",
                            "is not a supported input item type (message, "
                            "function_call, function_call_output, reasoning)");
        if (rc)
            return -1;
        i++;
    }
    return 0;
}

/* ---- tools and options ------------------------------------------------------------------ */

/* tools: function tools {type, name, description?, parameters?, strict?} into chat tools;
 * built-in tools (web_search, file_search, ...) are refused. */
static int parse_tools(const cJSON *root, cJSON *chat, cJSON *echo, struct api_error *e)
{
    const cJSON *tools = api__field(root, "tools");
    if (!tools) {
        cJSON_AddArrayToObject(echo, "tools");
        return 0;
    }
    if (!cJSON_IsArray(tools)) {
        api_error_set(e, E400, NULL, "tools", "'tools' must be an array of function tools");
        return -1;
    }
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        char param[48];
        snprintf(param, sizeof param, "tools[%d]", i++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0) {
            api_error_set(e, E400, NULL, param,
                          "'%s': only function tools are supported (built-in tools such as "
                          "web_search or file_search are not)",
                          param);
            return -1;
        }
        if (!cJSON_IsString(name) || !name->valuestring[0]) {
            api_error_set(e, E400, NULL, param, "'%s.name' must be a non-empty string", param);
            return -1;
        }
        cJSON *c = cJSON_CreateObject(), *fn;
        cJSON_AddStringToObject(c, "type", "function");
        fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        const char *keys[] = {"description", "parameters", "strict"};
        for (int k = 0; k < 3; k++) {
            const cJSON *v = api__field(t, keys[k]);
            if (v)
                cJSON_AddItemToObject(fn, keys[k], cJSON_Duplicate(v, true));
        }
        cJSON_AddItemToArray(out, c);
    }
    cJSON_AddItemToObject(echo, "tools", cJSON_Duplicate(tools, true));
    return 0;
}

/* tool_choice: none | auto | required, or {"type": "function", "name"}. */
static int parse_tool_choice(const cJSON *root, cJSON *chat, cJSON *echo, struct api_error *e)
{
    const cJSON *tc = api__field(root, "tool_choice");
    if (!tc) {
        cJSON_AddStringToObject(echo, "tool_choice", "auto");
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (cJSON_IsString(tc) &&
        (!strcmp(tc->valuestring, "none") || !strcmp(tc->valuestring, "auto") ||
         !strcmp(tc->valuestring, "required"))) {
        cJSON_AddStringToObject(chat, "tool_choice", tc->valuestring);
    } else if (cJSON_IsObject(tc) && cJSON_IsString(type) &&
               !strcmp(type->valuestring, "function") && cJSON_IsString(name)) {
        cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice");
        cJSON_AddStringToObject(c, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name->valuestring);
    } else {
        api_error_set(e, E400, NULL, "tool_choice",
                      "'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                      "\"name\": ...}");
        return -1;
    }
    cJSON_AddItemToObject(echo, "tool_choice", cJSON_Duplicate(tc, true));
    return 0;
}

/* text.format: text, json_object, or json_schema {name, schema, description?, strict?} (the
 * Responses API's flat form) into the chat endpoint's response_format, so the constraint takes
 * the same path (api_format.c); the format is echoed as given. */
static int parse_text(const cJSON *root, cJSON *chat, cJSON *echo, struct api_error *e)
{
    const cJSON *text, *fmt = NULL;
    if (api__get_obj(root, "text", &text, e) || (text && api__get_obj(text, "format", &fmt, e))) {
        snprintf(e->param, sizeof e->param, "%s", text ? "text.format" : "text");
        return -1;
    }
    const cJSON *type = fmt ? cJSON_GetObjectItemCaseSensitive(fmt, "type") : NULL;
    const char *t = cJSON_IsString(type) ? type->valuestring : fmt ? "" : "text";
    bool schema = !strcmp(t, "json_schema");
    if (strcmp(t, "text") && strcmp(t, "json_object") && !schema) {
        api_error_set(e, E400, NULL, "text.format.type",
                      "'text.format.type' must be text, json_object or json_schema");
        return -1;
    }
    if (schema && !cJSON_IsObject(api__field(fmt, "schema"))) {
        api_error_set(e, E400, NULL, "text.format.schema",
                      "'text.format.schema' must be a JSON Schema (an object) and is required");
        return -1;
    }
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    cJSON_AddStringToObject(rf, "type", t);
    if (schema) {
        cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
        static const char *const keys[] = {"name", "description", "schema", "strict"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            const cJSON *v = api__field(fmt, keys[k]);
            if (v)
                cJSON_AddItemToObject(js, keys[k], cJSON_Duplicate(v, true));
        }
    }
    cJSON *out = cJSON_AddObjectToObject(echo, "text");
    if (fmt)
        cJSON_AddItemToObject(out, "format", cJSON_Duplicate(fmt, true));
    else
        cJSON_AddStringToObject(cJSON_AddObjectToObject(out, "format"), "type", "text");
    return 0;
}

/* reasoning {effort, summary}: effort none turns thinking off (enable_thinking false). */
static int parse_reasoning(const cJSON *root, cJSON *chat, cJSON *echo, struct api_error *e)
{
    const cJSON *r;
    const char *effort = NULL;
    if (api__get_obj(root, "reasoning", &r, e) ||
        (r && api__need_str(r, "effort", false, "reasoning.effort", &effort, e)))
        return -1;
    static const char *const ok[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    bool known = !effort;
    for (size_t i = 0; effort && i < sizeof ok / sizeof ok[0]; i++)
        known = known || !strcmp(effort, ok[i]);
    if (!known) {
        api_error_set(e, E400, NULL, "reasoning.effort",
                      "'reasoning.effort' must be none, minimal, low, medium, high or xhigh");
        return -1;
    }
    if (effort && !strcmp(effort, "none"))
        cJSON_AddFalseToObject(cJSON_AddObjectToObject(chat, "chat_template_kwargs"),
                               "enable_thinking");
    cJSON *re = cJSON_AddObjectToObject(echo, "reasoning");
    if (effort)
        cJSON_AddStringToObject(re, "effort", effort);
    else
        cJSON_AddNullToObject(re, "effort");
    cJSON_AddNullToObject(re, "summary");
    return 0;
}

/* metadata: at most 16 string values (the API's limits). */
static int parse_metadata(const cJSON *root, cJSON *echo, struct api_error *e)
{
    const cJSON *md;
    if (api__get_obj(root, "metadata", &md, e))
        return -1;
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, md) if (!cJSON_IsString(v) || ++n > 16 || strlen(v->valuestring) > 512)
    {
        api_error_set(e, E400, NULL, "metadata",
                      "'metadata' holds at most 16 string values of at most 512 characters");
        return -1;
    }
    cJSON_AddItemToObject(echo, "metadata", md ? cJSON_Duplicate(md, true) : cJSON_CreateObject());
    return 0;
}

/* Copy a field to the chat body (and echo it under its own name) when present. */
static void pass(const cJSON *root, const char *key, cJSON *chat, const char *as, cJSON *echo)
{
    const cJSON *v = api__field(root, key);
    if (v)
        cJSON_AddItemToObject(chat, as, cJSON_Duplicate(v, true));
    if (echo)
        cJSON_AddItemToObject(echo, key, v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
}

/* The conversation of previous_response_id, or a 404. */
static int previous(const cJSON *root, store_t *store, cJSON *msgs, cJSON *echo,
                    struct api_error *e)
{
    const char *id = NULL;
    char *text = NULL;
    if (api__need_str(root, "previous_response_id", false, "previous_response_id", &id, e))
        return -1;
    cJSON_AddItemToObject(echo, "previous_response_id",
                          id ? cJSON_CreateString(id) : cJSON_CreateNull());
    if (!id)
        return 0;
    if (!store_get(store, id, NULL, &text) || !text) {
        free(text);
        api_error_set(e, 404, "not_found_error", "not_found", "previous_response_id",
                      "Previous response with id '%.100s' not found.", id);
        return -1;
    }
    cJSON *old = cJSON_Parse(text);
    free(text);
    cJSON *m;
    while (old && (m = cJSON_DetachItemFromArray(old, 0)) != NULL)
        cJSON_AddItemToArray(msgs, m);
    cJSON_Delete(old);
    return 0;
}

/* Type checks of the fields that are only echoed or refused. */
static int check_misc(const cJSON *root, bool *store, struct api_error *e)
{
    bool background = false, b = false;
    const char *s = NULL;
    if (api__get_bool(root, "store", store, e) ||
        api__get_bool(root, "background", &background, e) ||
        api__get_bool(root, "parallel_tool_calls", &b, e) || api__get_bool(root, "stream", &b, e) ||
        api__need_str(root, "instructions", false, "instructions", &s, e))
        return -1;
    if (background) {
        api_error_set(e, E400, NULL, "background", "'background' mode is not supported");
        return -1;
    }
    const cJSON *mot = api__field(root, "max_output_tokens");
    if (mot && (!cJSON_IsNumber(mot) || mot->valuedouble < 1 || mot->valuedouble > 1e15 ||
                mot->valuedouble != (double)(int64_t)mot->valuedouble)) {
        api_error_set(e, E400, NULL, "max_output_tokens",
                      "'max_output_tokens' must be a positive integer");
        return -1;
    }
    return 0;
}

/* The chat body: messages (instructions first, then the stored turns, then input), tools and
 * the sampling fields. */
static int translate(const cJSON *root, store_t *store, cJSON *chat, struct api_responses_req *rr,
                     struct api_error *e)
{
    rr->store = true;
    if (!cJSON_IsObject(root)) {
        api_error_set(e, E400, NULL, NULL, "the request body must be a JSON object");
        return -1;
    }
    cJSON *echo = rr->echo, *msgs = cJSON_CreateArray();
    if (check_misc(root, &rr->store, e) || previous(root, store, msgs, echo, e) ||
        parse_input(root, msgs, e) || parse_tools(root, chat, echo, e) ||
        parse_tool_choice(root, chat, echo, e) || parse_text(root, chat, echo, e) ||
        parse_reasoning(root, chat, echo, e) || parse_metadata(root, echo, e)) {
        cJSON_Delete(msgs);
        return -1;
    }
    rr->messages = cJSON_PrintUnformatted(msgs);
    const cJSON *ins = api__field(root, "instructions");
    if (ins) {
        cJSON *sys = cJSON_CreateObject();
        cJSON_AddStringToObject(sys, "role", "system");
        cJSON_AddStringToObject(sys, "content", ins->valuestring);
        cJSON_InsertItemInArray(msgs, 0, sys);
    }
    cJSON_AddItemToObject(chat, "messages", msgs);
    cJSON_AddItemToObject(echo, "instructions",
                          ins ? cJSON_Duplicate(ins, true) : cJSON_CreateNull());
    pass(root, "max_output_tokens", chat, "max_tokens", echo);
    pass(root, "temperature", chat, "temperature", echo);
    pass(root, "top_p", chat, "top_p", echo);
    pass(root, "parallel_tool_calls", chat, "parallel_tool_calls", echo);
    pass(root, "stream", chat, "stream", NULL);
    pass(root, "model", chat, "model", NULL);
    pass(root, "debug_forced_output", chat, "debug_forced_output", NULL); /* test hook */
    pass(root, "seed", chat, "seed", NULL); /* deltad extensions, as in chat */
    pass(root, "logit_bias", chat, "logit_bias", NULL);
    cJSON_AddBoolToObject(echo, "store", rr->store);
    return 0;
}

int api_responses_parse(const char *body, size_t len, const struct api_ctx *ctx, store_t *store,
                        struct api_req *out, struct api_responses_req *rr, struct api_error *e)
{
    static const char *const rename[] = {"messages",
                                         "input",
                                         "max_tokens",
                                         "max_output_tokens",
                                         "response_format",
                                         "text.format",
                                         "response_format.json_schema",
                                         "text.format",
                                         "response_format.json_schema.schema",
                                         "text.format.schema",
                                         "response_format.json_schema.name",
                                         "text.format.name",
                                         "response_format.json_schema.description",
                                         "text.format.description",
                                         "response_format.json_schema.strict",
                                         "text.format.strict",
                                         NULL};
    memset(out, 0, sizeof *out);
    memset(rr, 0, sizeof *rr);
    cJSON *root = api_json_parse(body, len, ctx->max_json_depth, e);
    if (!root)
        return -1;
    rr->echo = cJSON_CreateObject();
    cJSON *chat = cJSON_CreateObject();
    int rc = translate(root, store, chat, rr, e);
    cJSON_Delete(root);
    if (rc == 0)
        rc = api__parse_translated(chat, ctx, rename, out, e);
    cJSON_Delete(chat);
    if (rc)
        api_responses_req_free(rr);
    return rc;
}

void api_responses_req_free(struct api_responses_req *rr)
{
    cJSON_Delete(rr->echo);
    free(rr->messages);
    memset(rr, 0, sizeof *rr);
}

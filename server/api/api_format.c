/*
 * api_format — output constraints of both endpoints (docs/structured-output.md):
 *
 *   response_format {"type": "text"}                         no constraint
 *   response_format {"type": "json_object"[, "schema": S]}   any JSON object (S: llama.cpp's
 *                                                            extension, as json_schema)
 *   response_format {"type": "json_schema", "json_schema": {"name", "schema", "strict",
 *                    "description"}}                         JSON valid under the schema
 *   json_schema: S           (llama.cpp, top level)          the same
 *   grammar: "GBNF text"     (llama.cpp, top level)          the grammar's sentences
 *
 * At most one of them may constrain a request. Schemas become GBNF (schema.c); a schema deltad
 * cannot enforce, an invalid schema and a grammar that does not compile are 400s naming the
 * field (a grammar error says line and column). The compiled grammar comes from the server's
 * cache (api_ctx.grams) keyed by the grammar text. When the chat template leaves a thinking
 * block open, the constraint starts after "</think>": the thinking is free text.
 *
 * Enforced tool choice (api__tool_constraint) is a grammar of the tool-call syntax the chat
 * template uses: the Qwen3 JSON form, whose arguments follow schema_rules, or the XML form of
 * Qwen3.5 / Qwen3-Coder, whose parameters follow schema_xml_params (toolcall.h reads both).
 *
 * Thread safety: no shared state beyond the (thread-safe) grammar cache; HTTP threads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"          // defines: api__parse_constraint, E400
#include "engine/sched/gram.h" // defines: gram_compile, gram_cache_get
#include "engine/util.h"       // defines: struct dd_buf
#include "schema.h"            // defines: schema_to_gbnf, schema_json_object_gbnf

/* The grammar of schema s into r (param: the field named in errors). */
static int from_schema(const cJSON *s, const char *param, struct api_req *r, struct api_error *e)
{
    struct dd_buf b = {0};
    char err[384];
    if (!cJSON_IsObject(s) && !cJSON_IsBool(s)) {
        api_error_set(e, E400, NULL, param, "'%s' must be a JSON Schema (an object)", param);
        return -1;
    }
    if (schema_to_gbnf(s, &b, err, sizeof err)) {
        api_error_set(e, E400, NULL, param, "'%s' cannot be used: %s", param, err);
        dd_buf_free(&b);
        return -1;
    }
    r->constraint_len = b.len;
    r->constraint = dd_buf_take(&b, NULL);
    r->constraint_param = param;
    return 0;
}

static void set_text(struct api_req *r, const char *text, const char *param)
{
    r->constraint_len = strlen(text);
    r->constraint = xstrdup(text);
    r->constraint_param = param;
}

/* response_format.json_schema: {"name"?, "description"?, "schema"?, "strict"?}; a missing
 * schema means any JSON value (OpenAI makes it optional). strict changes nothing: deltad never
 * generates undeclared properties. */
static int parse_json_schema_format(const cJSON *rf, struct api_req *r, struct api_error *e)
{
    const cJSON *js = api__field(rf, "json_schema");
    const char *name = NULL, *desc = NULL;
    bool strict = false;
    if (!cJSON_IsObject(js)) {
        api_error_set(e, E400, NULL, "response_format.json_schema",
                      "'response_format.json_schema' must be an object with a 'schema'");
        return -1;
    }
    if (api__get_str(js, "name", &name, e) || api__get_str(js, "description", &desc, e) ||
        api__get_bool(js, "strict", &strict, e)) {
        char k[sizeof e->param + 32];
        snprintf(k, sizeof k, "response_format.json_schema.%s", e->param);
        snprintf(e->param, sizeof e->param, "%.63s", k);
        return -1;
    }
    const cJSON *s = api__field(js, "schema");
    if (!s) {
        static const char any[] = "root ::= jvalue\n";
        struct dd_buf b = {0};
        dd_buf_puts(&b, any);
        dd_buf_puts(&b, strstr(schema_json_object_gbnf(), "\n") + 1);
        r->constraint_len = b.len;
        r->constraint = dd_buf_take(&b, NULL);
        r->constraint_param = "response_format.json_schema";
        return 0;
    }
    return from_schema(s, "response_format.json_schema.schema", r, e);
}

static int parse_response_format(const cJSON *root, struct api_req *r, struct api_error *e)
{
    const cJSON *rf;
    if (api__get_obj(root, "response_format", &rf, e))
        return -1;
    if (!rf)
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (strcmp(t, "text") == 0)
        return 0;
    if (strcmp(t, "json_object") == 0) {
        const cJSON *s = api__field(rf, "schema");
        if (s)
            return from_schema(s, "response_format.schema", r, e);
        set_text(r, schema_json_object_gbnf(), "response_format");
        return 0;
    }
    if (strcmp(t, "json_schema") == 0)
        return parse_json_schema_format(rf, r, e);
    api_error_set(e, E400, NULL, "response_format.type",
                  "'response_format.type' must be text, json_object or json_schema");
    return -1;
}

int api__parse_constraint(const cJSON *root, struct api_req *r, struct api_error *e)
{
    const cJSON *js = api__field(root, "json_schema");
    const char *grammar = NULL;
    if (api__get_str(root, "grammar", &grammar, e) || parse_response_format(root, r, e))
        return -1;
    int n = (r->constraint != NULL) + (js != NULL) + (grammar != NULL);
    if (n > 1) {
        api_error_set(e, E400, NULL, grammar ? "grammar" : "json_schema",
                      "only one of 'response_format' (json_object / json_schema), 'json_schema' "
                      "and 'grammar' may be given");
        return -1;
    }
    if (js)
        return from_schema(js, "json_schema", r, e);
    if (grammar) {
        if (strlen(grammar) > GRAM_MAX_TEXT) {
            api_error_set(e, E400, NULL, "grammar", "'grammar' is longer than %u bytes",
                          GRAM_MAX_TEXT);
            return -1;
        }
        set_text(r, grammar, "grammar");
    }
    return 0;
}

int api__compile_constraint(const struct api_ctx *ctx, struct api_req *r, struct api_error *e)
{
    if (!r->constraint)
        return 0;
    const char *start = NULL;
    if (r->think_open) { /* free thinking, then the constraint */
        struct dd_buf b = {0};
        dd_buf_put(&b, r->constraint, r->constraint_len);
        schema_think_prefix(&b, "deltad-think");
        free(r->constraint);
        r->constraint_len = b.len;
        r->constraint = dd_buf_take(&b, NULL);
        start = "deltad-think";
    }
    char err[384];
    int rc = ctx->grams
                 ? gram_cache_get(ctx->grams, r->constraint, r->constraint_len, start, &r->gram,
                                  err, sizeof err)
                 : gram_compile(r->constraint, r->constraint_len, start, &r->gram, err, sizeof err);
    if (rc) {
        bool user = strcmp(r->constraint_param, "grammar") == 0;
        api_error_set(e, E400, NULL, r->constraint_param, "%s: %s",
                      user ? "'grammar' does not compile" : "the schema's grammar does not compile",
                      err);
        return -1;
    }
    return 0;
}

/* ---- tool calls ------------------------------------------------------------------------- */

/* One call of tool i named name in the template's form: the head, the arguments (rule pre of
 * the parameters schema, or any object / no parameters without one) and the end, as the model
 * writes them (toolcall.h):
 *   JSON  "<tool_call>\n{\"name\": NAME, \"arguments\": " ARGS "}\n</tool_call>"
 *   XML   "<tool_call>\n<function=NAME>\n" PARAMS "</function>\n</tool_call>" */
static int call_alt(const char *name, const cJSON *params, int i, bool xml, struct dd_buf *rules,
                    struct dd_buf *alt, struct api_error *e)
{
    char pre[24], err[384];
    snprintf(pre, sizeof pre, "deltad-t%d", i);
    struct dd_buf head = {0};
    if (xml && (strlen(name) > 120 || strpbrk(name, "<>\n\r"))) {
        api_error_set(e, E400, NULL, "tools",
                      "'tools[%d].function.name' cannot be written in the model's XML tool-call "
                      "form (at most 120 bytes, no '<', '>' or newlines)",
                      i);
        return -1;
    }
    int rc = !params ? 0
             : xml   ? schema_xml_params(params, pre, rules, err, sizeof err)
                     : schema_rules(params, pre, rules, err, sizeof err);
    if (rc) {
        api_error_set(e, E400, NULL, "tools", "'tools[%d].function.parameters' cannot be used: %s",
                      i, err);
        return -1;
    }
    if (xml) {
        dd_buf_printf(&head, "<tool_call>\n<function=%s>\n", name);
        schema_gbnf_literal(alt, head.p, head.len);
        dd_buf_printf(alt, "%s\"</function>\\n</tool_call>\" ", params ? pre : "");
    } else {
        cJSON *js = cJSON_CreateString(name);
        char *q = cJSON_PrintUnformatted(js);
        dd_buf_printf(&head, "<tool_call>\n{\"name\": %s, \"arguments\": ", q);
        schema_gbnf_literal(alt, head.p, head.len);
        dd_buf_printf(alt, "%s \"}\\n</tool_call>\" ", params ? pre : "jobject");
        free(q);
        cJSON_Delete(js);
    }
    dd_buf_free(&head);
    return 0;
}

/* deltad-call ::= one alternative per tool (or only `only`), in the template's form. */
static int call_rules(const cJSON *tools, const char *only, bool xml, struct dd_buf *b,
                      struct api_error *e)
{
    struct dd_buf alts = {0};
    const cJSON *t;
    int k = 0, n = 0, rc = -1;
    cJSON_ArrayForEach(t, tools)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        int i = k++;
        if (!cJSON_IsString(name) || (only && strcmp(only, name->valuestring) != 0))
            continue;
        if (n++)
            dd_buf_puts(&alts, "| ");
        if (call_alt(name->valuestring, api__field(fn, "parameters"), i, xml, b, &alts, e))
            goto out;
    }
    dd_buf_puts(b, "deltad-call ::= ");
    dd_buf_put(b, alts.p, alts.len);
    dd_buf_putc(b, '\n');
    rc = 0;
out:
    dd_buf_free(&alts);
    return rc;
}

int api__tool_constraint(const cJSON *tools, const cJSON *tc, bool parallel, bool xml,
                         struct api_req *r, struct api_error *e)
{
    const char *only = NULL;
    bool now = cJSON_IsString(tc) && strcmp(tc->valuestring, "required") == 0, strict = false;
    if (cJSON_IsObject(tc)) { /* chat_check validated {"type": "function", "function": {name}} */
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        only = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
        now = only != NULL;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        strict = strict || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fn, "strict"));
    }
    if (!now && !strict)
        return 0; /* auto without strict tools: the model decides, nothing to enforce */
    if (r->constraint) {
        api_error_set(e, E400, NULL, "tool_choice",
                      "tool_choice \"required\", a named function or strict tools cannot be "
                      "combined with response_format, json_schema or grammar");
        return -1;
    }
    struct dd_buf b = {0};
    const char *calls = parallel ? "deltad-call ( \"\\n\" deltad-call )*" : "deltad-call";
    if (now)
        dd_buf_printf(&b, "root ::= %s\n", calls);
    else /* auto + strict: free text without "<tool_call>", then calls or nothing */
        dd_buf_printf(&b, "root ::= deltad-text-s0 ( %s )?\n", calls);
    if (call_rules(tools, only, xml, &b, e)) {
        dd_buf_free(&b);
        return -1;
    }
    if (!now)
        schema_text_until(&b, "deltad-text", "<tool_call>");
    if (xml)
        schema_primitives_xml(&b);
    else
        schema_primitives(&b);
    r->constraint_len = b.len;
    r->constraint = dd_buf_take(&b, NULL);
    r->constraint_param = "tool_choice";
    return 0;
}

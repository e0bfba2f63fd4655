/*
 * chat — message validation and the built-in ChatML rendering of an OpenAI messages array
 * (see chat.h); model templates render in chat_tmpl.c.
 *
 * What it is not: a Jinja interpreter. The ChatML renderer is the fallback for a GGUF without
 * a chat template: the one layout the Qwen family shares, with Qwen's tools block.
 *
 * Invariant: every byte that came from the request (contents, tool JSON, call arguments) is
 * covered by exactly one span, and nothing the template adds is; the api module tokenizes the
 * spans without special-token parsing.
 *
 * Thread safety: no shared state; any thread.
 *
 * Sections: output buffer, message pieces, turns (rendering), validation.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_impl.h"   // defines: chat__put, chat_render, struct chat_prompt
#include "engine/util.h" // defines: dd_buf_put, xrealloc, dd_errf, DD_EINVAL

/* ---- output buffer --------------------------------------------------------------------- */

/* Append template text (tokenized with special-token parsing). */
void chat__put(struct chat_prompt *p, const char *s, size_t n)
{
    dd_buf_put(&p->text, s, n);
}

/* chat__put() for a C string. */
static void puts_(struct chat_prompt *p, const char *s)
{
    chat__put(p, s, strlen(s));
}

/* Append user text and record its span (adjacent spans merge). */
void chat__put_user(struct chat_prompt *p, const char *s, size_t n)
{
    if (n == 0)
        return;
    struct chat_span *last = p->n_spans ? &p->spans[p->n_spans - 1] : NULL;
    if (last && last->off + last->len == p->text.len) {
        last->len += n;
    } else {
        if ((size_t)p->n_spans == p->cap_spans) {
            p->cap_spans = p->cap_spans ? 2 * p->cap_spans : 16;
            p->spans = xrealloc(p->spans, p->cap_spans * sizeof *p->spans);
        }
        p->spans[p->n_spans++] = (struct chat_span){p->text.len, n};
    }
    chat__put(p, s, n);
}

/* Append a cJSON value printed compactly, as user text. */
static void put_user_json(struct chat_prompt *p, const cJSON *v)
{
    char *s = cJSON_PrintUnformatted(v);
    if (s) {
        chat__put_user(p, s, strlen(s));
        free(s);
    }
}

/* Leaves *p zeroed, so freeing twice is harmless. */
void chat_prompt_free(struct chat_prompt *p)
{
    dd_buf_free(&p->text);
    free(p->spans);
    free(p->ends);
    memset(p, 0, sizeof *p);
}

/* ---- message pieces -------------------------------------------------------------------- */

/* Parts are joined without a separator, as OpenAI's text parts are pieces of one message;
 * non-text parts were refused by chat_check and are skipped here. */
const char *chat_content_text(const cJSON *content, char **owned)
{
    *owned = NULL;
    if (cJSON_IsString(content))
        return content->valuestring;
    if (!cJSON_IsArray(content))
        return NULL;
    size_t total = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, content)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (cJSON_IsString(t))
            total += strlen(t->valuestring);
    }
    char *s = xmalloc(total + 1), *w = s;
    cJSON_ArrayForEach(part, content)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (cJSON_IsString(t)) {
            size_t n = strlen(t->valuestring);
            memcpy(w, t->valuestring, n);
            w += n;
        }
    }
    *w = '\0';
    *owned = s;
    return s;
}

/* A message's content as user text (absent or null content renders nothing). */
static void put_content(struct chat_prompt *p, const cJSON *msg)
{
    char *owned;
    const char *text = chat_content_text(cJSON_GetObjectItemCaseSensitive(msg, "content"), &owned);
    if (text)
        chat__put_user(p, text, strlen(text));
    free(owned);
}

/* The tools block that opens the system turn: one JSON signature per line, each covered by a
 * span (tool definitions come from the request, like any user text). */
static void put_tools(struct chat_prompt *p, const cJSON *tools)
{
    puts_(p, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
             "The available function signatures are inside <tools></tools> tags:\n<tools>");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        puts_(p, "\n");
        put_user_json(p, t);
    }
    puts_(p, "\n</tools>\n\nTo call a function, answer with a JSON object holding its name and "
             "arguments inside <tool_call></tool_call> tags:\n<tool_call>\n"
             "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
}

/* Tool calls of an earlier assistant turn, one <tool_call> block each, so the model sees its
 * own calls in the format it is asked to produce. A string "arguments" is inserted as-is (it
 * holds JSON text); an object is printed. */
static void put_tool_calls(struct chat_prompt *p, const cJSON *calls, bool had_content)
{
    const cJSON *c;
    bool first = !had_content;
    cJSON_ArrayForEach(c, calls)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        puts_(p, first ? "<tool_call>\n{\"name\": \"" : "\n<tool_call>\n{\"name\": \"");
        first = false;
        if (cJSON_IsString(name))
            chat__put_user(p, name->valuestring, strlen(name->valuestring));
        puts_(p, "\", \"arguments\": ");
        if (cJSON_IsString(args))
            chat__put_user(p, args->valuestring, strlen(args->valuestring));
        else if (args)
            put_user_json(p, args);
        else
            puts_(p, "{}");
        puts_(p, "}\n</tool_call>");
    }
}

/* ---- turns ----------------------------------------------------------------------------- */

/* ChatML role of an OpenAI role: developer folds into system; tool results go back as a user
 * turn wrapped in <tool_response>, the way Qwen models were trained. */
static const char *turn_role(const char *role)
{
    if (strcmp(role, "developer") == 0)
        return "system";
    if (strcmp(role, "tool") == 0)
        return "user";
    return role;
}

/* One message as a turn; `open` leaves the turn unterminated (assistant prefill). */
static void put_turn(struct chat_prompt *p, const cJSON *msg, const cJSON *tools, bool open)
{
    const char *role = cJSON_GetObjectItemCaseSensitive(msg, "role")->valuestring;
    puts_(p, "<|im_start|>");
    puts_(p, turn_role(role));
    puts_(p, "\n");
    size_t before = p->text.len;
    if (strcmp(role, "tool") == 0) {
        puts_(p, "<tool_response>\n");
        put_content(p, msg);
        puts_(p, "\n</tool_response>");
    } else {
        put_content(p, msg);
    }
    if (tools && strcmp(turn_role(role), "system") == 0) {
        puts_(p, "\n\n");
        put_tools(p, tools);
    }
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    if (strcmp(role, "assistant") == 0 && cJSON_IsArray(calls) && cJSON_GetArraySize(calls) > 0)
        put_tool_calls(p, calls, p->text.len > before);
    if (!open)
        puts_(p, "<|im_end|>\n");
}

/* msg has exactly this string role. */
static bool is_role(const cJSON *msg, const char *role)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(msg, "role");
    return cJSON_IsString(r) && strcmp(r->valuestring, role) == 0;
}

/* Every message must be an object with a string role; chat_check covered the rest. */
static int render_precheck(const cJSON *messages, char *err, size_t errlen)
{
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0) {
        dd_errf(err, errlen, "messages must be a non-empty array");
        return DD_EINVAL;
    }
    const cJSON *msg;
    cJSON_ArrayForEach(msg, messages)
    {
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(msg, "role"))) {
            dd_errf(err, errlen, "every message needs a string role");
            return DD_EINVAL;
        }
    }
    return 0;
}

/* ---- message ends ---------------------------------------------------------------------- */

/* Is the end of message k (1-based) of n one that chat_render records (chat.h)? */
static bool want_end(int k, int n)
{
    return k == 1 || k > n - CHAT_TAIL_ENDS;
}

/* Record off as a message end (ascending; an empty prefix or a repeat is no boundary). */
static void add_end(struct chat_prompt *p, size_t off)
{
    if (off == 0 || (p->n_ends && p->ends[p->n_ends - 1] >= off))
        return;
    if (!p->ends)
        p->ends = xmalloc((1 + CHAT_TAIL_ENDS) * sizeof *p->ends);
    ASSERT(p->n_ends < 1 + CHAT_TAIL_ENDS);
    p->ends[p->n_ends++] = off;
}

/* The offset of the last control-token text in text[lo .. hi] (a turn starts there), or 0. */
static size_t last_ctl_at(const chat_tmpl_t *t, const char *text, size_t lo, size_t hi)
{
    for (size_t o = hi + 1; o-- > lo;) {
        if (!t->first[(unsigned char)text[o]])
            continue;
        for (int i = 0; i < t->n_ctl; i++)
            if (strncmp(text + o, t->ctl[i], t->ctl_len[i]) == 0)
                return o;
    }
    return 0;
}

/* Where the rendering of messages[0 .. k) ends inside full (0: unknown). Exact when the
 * template renders that conversation as a prefix of the whole; else (templates that refuse a
 * conversation without a user message, like Qwen3.5's) the turn start before the point where
 * full and the rendering of messages[0 .. k) + one placeholder user turn part. */
static size_t prefix_end(const chat_tmpl_t *t, const cJSON *messages, int k, const cJSON *tools,
                         const cJSON *kwargs, const struct chat_prompt *full, size_t prev)
{
    size_t at = 0;
    for (int probe = 0; probe < 2 && at == 0; probe++) {
        cJSON *sub = cJSON_CreateArray();
        for (int i = 0; i < k; i++)
            cJSON_AddItemReferenceToArray(sub, cJSON_GetArrayItem(messages, i));
        if (probe == 1) {
            cJSON *u = cJSON_CreateObject();
            cJSON_AddStringToObject(u, "role", "user");
            cJSON_AddStringToObject(u, "content", "\x01");
            cJSON_AddItemToArray(sub, u);
        }
        struct chat_prompt cp = {0}; /* chat__render_jinja appends to it */
        char err[128];
        if (chat__render_jinja(t, sub, tools, kwargs, false, &cp, err, sizeof err) == 0) {
            const char *a = cp.text.p, *b = full->text.p;
            size_t n = 0;
            while (n < cp.text.len && n < full->text.len && a[n] == b[n])
                n++;
            if (probe == 0 && n == cp.text.len)
                at = n;
            else if (probe == 1 && n > prev && n < full->text.len)
                at = last_ctl_at(t, b, prev + 1, n);
        }
        chat_prompt_free(&cp);
        cJSON_Delete(sub);
    }
    return at;
}

/* The Jinja path knows nothing of message ends: render each wanted prefix of the conversation
 * on its own (no generation prompt) and see where it ends in the whole. */
static void jinja_ends(const chat_tmpl_t *t, const cJSON *messages, const cJSON *tools,
                       const cJSON *kwargs, struct chat_prompt *out)
{
    const int n = cJSON_GetArraySize(messages);
    for (int k = 1; k <= n; k++)
        if (want_end(k, n))
            add_end(out, prefix_end(t, messages, k, tools, kwargs, out,
                                    out->n_ends ? out->ends[out->n_ends - 1] : 0));
}

/* Layout: [system turn with the tools block] turns... [open assistant turn]. With tools and
 * no leading system message, a system turn carrying only the tools block comes first. */
int chat_render(const chat_tmpl_t *t, const cJSON *messages, const cJSON *tools,
                const cJSON *kwargs, bool add_generation_prompt, struct chat_prompt *out, char *err,
                size_t errlen)
{
    memset(out, 0, sizeof *out);
    int rc = render_precheck(messages, err, errlen);
    if (rc)
        return rc;
    if (t && chat__tmpl_is_jinja(t)) {
        rc =
            chat__render_jinja(t, messages, tools, kwargs, add_generation_prompt, out, err, errlen);
        if (rc == 0)
            jinja_ends(t, messages, tools, kwargs, out);
        return rc;
    }
    if (tools && (!cJSON_IsArray(tools) || cJSON_GetArraySize(tools) == 0))
        tools = NULL;
    const cJSON *first = cJSON_GetArrayItem(messages, 0);
    bool system_first = is_role(first, "system") || is_role(first, "developer");
    if (tools && !system_first) {
        puts_(out, "<|im_start|>system\n");
        put_tools(out, tools);
        puts_(out, "<|im_end|>\n");
    }
    int n = cJSON_GetArraySize(messages);
    bool prefill = is_role(cJSON_GetArrayItem(messages, n - 1), "assistant");
    const cJSON *msg;
    int i = 0;
    cJSON_ArrayForEach(msg, messages)
    {
        bool last = ++i == n;
        put_turn(out, msg, i == 1 && system_first ? tools : NULL, last && prefill);
        if (want_end(i, n) && !(last && prefill))
            add_end(out, out->text.len);
    }
    if (add_generation_prompt && !prefill) {
        puts_(out, "<|im_start|>assistant\n");
        const cJSON *think = cJSON_GetObjectItemCaseSensitive(kwargs, "enable_thinking");
        if (cJSON_IsFalse(think))
            puts_(out, "<think>\n\n</think>\n\n");
    }
    if (!out->text.p)
        puts_(out, "");
    return 0;
}

/* ---- validation ------------------------------------------------------------------------ */

/* Fill *e and return -1, so checks read "return fail(...)". */
static int fail(struct chat_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct chat_error *e, const char *param, const char *fmt, ...)
{
    snprintf(e->param, sizeof e->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* A member that is present and not null. */
static const cJSON *member(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* The roles of docs 7.1; developer is OpenAI's newer name for system. */
static bool known_role(const char *r)
{
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(r, roles[i]) == 0)
            return true;
    return false;
}

/* One content part must be {"type": "text", "text": string}; media parts are refused. */
static int check_part(const cJSON *part, const char *param, struct chat_error *e)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "text") == 0 && cJSON_IsString(text))
        return 0;
    if (cJSON_IsString(type) && strcmp(type->valuestring, "text") != 0)
        return fail(e, param, "content part type '%.32s' is not supported by this text-only model",
                    type->valuestring);
    return fail(e, param, "'%s' parts must be {\"type\": \"text\", \"text\": string}", param);
}

/* content: a string, an array of text parts, or (assistant only) null / absent. */
static int check_content(const cJSON *msg, int i, bool assistant, struct chat_error *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    const cJSON *c = member(msg, "content");
    if (!c)
        return assistant ? 0 : fail(e, param, "'%s' is required", param);
    if (cJSON_IsString(c))
        return 0;
    if (!cJSON_IsArray(c))
        return fail(e, param, "'%s' must be a string or an array of parts", param);
    const cJSON *part;
    cJSON_ArrayForEach(part, c)
    {
        if (check_part(part, param, e))
            return -1;
    }
    return 0;
}

/* tool_calls of an assistant message: [{"function": {"name": str, "arguments": str}}]. */
static int check_tool_calls(const cJSON *msg, int i, struct chat_error *e)
{
    const cJSON *calls = member(msg, "tool_calls");
    if (!calls)
        return 0;
    bool ok = cJSON_IsArray(calls);
    const cJSON *c, *list = ok ? calls : NULL;
    cJSON_ArrayForEach(c, list)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        ok = ok && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name")) &&
             (!args || cJSON_IsString(args) || cJSON_IsObject(args));
    }
    char param[64];
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    return ok ? 0
              : fail(e, param,
                     "'%s' must be an array of {\"function\": {\"name\": string, "
                     "\"arguments\": string}}",
                     param);
}

/* One message of docs 7.3: an object, a known role (a missing one is refused, unlike
 * llama.cpp), no assistant right after an assistant, a string name, a tool_call_id on tool
 * results, then its content and tool calls. */
static int check_message(const cJSON *msg, int i, const char *prev_role, struct chat_error *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(msg))
        return fail(e, param, "'%s' must be an object", param);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    snprintf(param, sizeof param, "messages[%d].role", i);
    if (!cJSON_IsString(role) || !known_role(role->valuestring))
        return fail(e, param, "'%s' must be one of system, developer, user, assistant, tool",
                    param);
    bool assistant = strcmp(role->valuestring, "assistant") == 0;
    if (assistant && prev_role && strcmp(prev_role, "assistant") == 0)
        return fail(e, param, "'%s': two consecutive assistant messages", param);
    const cJSON *name = member(msg, "name");
    snprintf(param, sizeof param, "messages[%d].name", i);
    if (name && !cJSON_IsString(name))
        return fail(e, param, "'%s' must be a string", param);
    snprintf(param, sizeof param, "messages[%d].tool_call_id", i);
    if (strcmp(role->valuestring, "tool") == 0 && !cJSON_IsString(member(msg, "tool_call_id")))
        return fail(e, param, "tool messages need a string '%s'", param);
    if (check_content(msg, i, assistant, e))
        return -1;
    return assistant ? check_tool_calls(msg, i, e) : 0;
}

/* messages: a non-empty array, each element checked in order (the first error wins). */
static int check_messages(const cJSON *root, const cJSON **out, struct chat_error *e)
{
    const cJSON *msgs = member(root, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return fail(e, "messages", "'messages' must be a non-empty array");
    const cJSON *m;
    const char *prev = NULL;
    int i = 0;
    cJSON_ArrayForEach(m, msgs)
    {
        if (check_message(m, i++, prev, e))
            return -1;
        prev = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
    }
    *out = msgs;
    return 0;
}

/* tools: [{"type":"function","function":{"name": non-empty, "parameters"?: object}}]. */
static int check_tools(const cJSON *root, const cJSON **out, struct chat_error *e)
{
    const cJSON *tools = member(root, "tools");
    *out = NULL;
    if (!tools)
        return 0;
    bool ok = cJSON_IsArray(tools);
    const cJSON *t, *list = ok ? tools : NULL;
    cJSON_ArrayForEach(t, list)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *params = member(fn, "parameters");
        ok = ok && cJSON_IsString(type) && strcmp(type->valuestring, "function") == 0 &&
             cJSON_IsString(name) && name->valuestring[0] && (!params || cJSON_IsObject(params));
    }
    if (!ok)
        return fail(e, "tools",
                    "'tools' must be an array of {\"type\": \"function\", \"function\": "
                    "{\"name\": non-empty string, \"parameters\"?: object}}");
    *out = tools;
    return 0;
}

/* Some tool's function has this name. */
static bool tool_named(const cJSON *tools, const char *name)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return true;
    }
    return false;
}

/* tool_choice: none | auto | required | {"type":"function","function":{"name": a tool}};
 * required (and a named function) need tools: they could not be enforced without. */
static int check_tool_choice(const cJSON *root, const cJSON *tools, struct chat_error *e)
{
    const cJSON *tc = member(root, "tool_choice");
    if (!tc)
        return 0;
    if (cJSON_IsString(tc) &&
        (strcmp(tc->valuestring, "none") == 0 || strcmp(tc->valuestring, "auto") == 0))
        return 0;
    if (cJSON_IsString(tc) && strcmp(tc->valuestring, "required") == 0)
        return cJSON_GetArraySize(tools) > 0
                   ? 0
                   : fail(e, "tool_choice", "'tool_choice' \"required\" needs a non-empty 'tools'");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (cJSON_IsObject(tc) && cJSON_IsString(name) && tools && tool_named(tools, name->valuestring))
        return 0;
    return fail(e, "tool_choice",
                "'tool_choice' must be none, auto, required or a function named in 'tools'");
}

int chat_check(const cJSON *root, const cJSON **messages, const cJSON **tools, struct chat_error *e)
{
    if (check_messages(root, messages, e) || check_tools(root, tools, e))
        return -1;
    return check_tool_choice(root, *tools, e);
}

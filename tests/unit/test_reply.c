/*
 * test_reply — the chat output parsers: server/api/reasoning.c (<think> split),
 * server/api/toolcall.c (Qwen's JSON and XML tool-call forms) and server/api/reply.c, which
 * composes them and renders stream chunks.
 *
 * Every case runs three ways and must give the same message: the whole text at once
 * (reply_choice, the non-streaming path), cut at every byte boundary into two deltas, and fed
 * a byte at a time; the streamed ones are rebuilt from their SSE chunks, which also checks the
 * chunk rules of docs/openai-api.md section 3 (no empty content / reasoning deltas; a call's
 * first delta carries index, id, type and name with arguments ""; later ones only index and
 * arguments; "function" never holds an id).
 *
 * Usage: test_reply (no model needed).
 */
#include "engine/model/tok.h"
#include "engine/util.h"
#include "server/api/api.h"
#include "server/api/api_impl.h"
#include "server/api/chat.h"
#include "server/api/chat_impl.h"
#include "server/api/json.h"
#include "server/api/reasoning.h"
#include "server/api/reply.h"
#include "server/api/resp.h"
#include "server/api/toolcall.h"
#include "server/jinja/jinja.h"
#include "test.h"

#define MAXC 8

/* A message as a client sees it. */
struct msg {
    struct dd_buf content, reasoning;
    bool content_null;
    int n_calls;
    char name[MAXC][64];
    struct dd_buf args[MAXC];
    bool bad_chunk; /* a chunk broke the streaming rules */
};

static void msg_free(struct msg *m)
{
    dd_buf_free(&m->content);
    dd_buf_free(&m->reasoning);
    for (int i = 0; i < MAXC; i++)
        dd_buf_free(&m->args[i]);
    memset(m, 0, sizeof *m);
}

static const cJSON *g_tools;

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\"},"
    "\"days\":{\"type\":\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\"}}]";

struct opts {
    bool reasoning, think_open, tools;
    int max_calls;
};

static reply_t *make(const struct opts *o, bool stream)
{
    struct reply_opts ro = {o->reasoning, o->think_open, o->tools, o->max_calls, stream, g_tools};
    return reply_create(&ro);
}

/* The non-streaming message of text fed at once. */
static void whole(const struct opts *o, const char *text, struct msg *m)
{
    reply_t *r = make(o, false);
    reply_feed(r, text, strlen(text));
    reply_finish(r);
    struct resp_choice c = {0};
    reply_choice(r, &c);
    dd_buf_put(&m->content, c.text, c.len);
    if (c.reasoning)
        dd_buf_put(&m->reasoning, c.reasoning, c.reasoning_len);
    m->content_null = c.content_null;
    m->n_calls = (int)c.n_calls;
    for (int i = 0; i < m->n_calls && i < MAXC; i++) {
        snprintf(m->name[i], sizeof m->name[i], "%s", c.calls[i].name);
        dd_buf_put(&m->args[i], c.calls[i].args, c.calls[i].args_len);
        if (strncmp(c.calls[i].id, "call_", 5) != 0)
            m->bad_chunk = true;
    }
    reply_destroy(r);
}

/* One tool-call delta into m, checking the rules. */
static void take_call(struct msg *m, const cJSON *tc)
{
    int idx = cJSON_GetObjectItem(tc, "index")->valueint;
    const cJSON *id = cJSON_GetObjectItem(tc, "id"), *type = cJSON_GetObjectItem(tc, "type");
    const cJSON *fn = cJSON_GetObjectItem(tc, "function");
    const cJSON *name = cJSON_GetObjectItem(fn, "name");
    const cJSON *arg = cJSON_GetObjectItem(fn, "arguments");
    if (cJSON_GetObjectItem(fn, "id") || !cJSON_IsString(arg) || idx < 0 || idx >= MAXC) {
        m->bad_chunk = true;
        return;
    }
    if (idx == m->n_calls) { /* a new call */
        bool ok = cJSON_IsString(id) && strncmp(id->valuestring, "call_", 5) == 0 &&
                  cJSON_IsString(type) && strcmp(type->valuestring, "function") == 0 &&
                  cJSON_IsString(name) && name->valuestring[0] && !arg->valuestring[0];
        m->bad_chunk |= !ok;
        if (cJSON_IsString(name))
            snprintf(m->name[idx], sizeof m->name[idx], "%s", name->valuestring);
        m->n_calls++;
        return;
    }
    m->bad_chunk |= idx != m->n_calls - 1 || id || type || name;
    dd_buf_puts(&m->args[idx], arg->valuestring);
}

/* Rebuild a message from SSE chunks. */
static void from_sse(const struct dd_buf *b, struct msg *m)
{
    const char *p = b->p ? b->p : "";
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        cJSON *o = cJSON_ParseWithLength(p, (size_t)(end - p));
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        const cJSON *d = cJSON_GetObjectItem(ch, "delta");
        const cJSON *c = cJSON_GetObjectItem(d, "content");
        const cJSON *r = cJSON_GetObjectItem(d, "reasoning_content");
        const cJSON *tc = cJSON_GetObjectItem(d, "tool_calls");
        if ((c && (!cJSON_IsString(c) || !c->valuestring[0])) ||
            (r && (!cJSON_IsString(r) || !r->valuestring[0])))
            m->bad_chunk = true;
        if (c)
            dd_buf_puts(&m->content, c->valuestring);
        if (r)
            dd_buf_puts(&m->reasoning, r->valuestring);
        const cJSON *t;
        cJSON_ArrayForEach(t, tc) take_call(m, t);
        cJSON_Delete(o);
        p = end;
    }
    m->content_null = m->n_calls > 0 && m->content.len == 0;
}

/* The streamed message of text cut at the given offsets (sorted, within the text). */
static void streamed(const struct opts *o, const char *text, const size_t *cuts, int n_cuts,
                     struct msg *m)
{
    reply_t *r = make(o, true);
    struct resp_meta meta = {API_CHAT, "chatcmpl-t", 0, "m", NULL, false};
    struct dd_buf b = {0};
    size_t at = 0, n = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : n;
        reply_feed(r, text + at, to - at);
        reply_sse(r, &b, &meta, 0, NULL);
        at = to;
    }
    reply_finish(r);
    reply_sse(r, &b, &meta, 0, NULL);
    from_sse(&b, m);
    dd_buf_free(&b);
    reply_destroy(r);
}

static bool same(const struct msg *a, const struct msg *b)
{
    bool ok = a->content.len == b->content.len && a->reasoning.len == b->reasoning.len &&
              a->n_calls == b->n_calls && a->content_null == b->content_null && !b->bad_chunk;
    ok = ok && (!a->content.len || memcmp(a->content.p, b->content.p, a->content.len) == 0);
    ok = ok && (!a->reasoning.len || memcmp(a->reasoning.p, b->reasoning.p, a->reasoning.len) == 0);
    for (int i = 0; ok && i < a->n_calls && i < MAXC; i++)
        ok = strcmp(a->name[i], b->name[i]) == 0 && a->args[i].len == b->args[i].len &&
             (!a->args[i].len || memcmp(a->args[i].p, b->args[i].p, a->args[i].len) == 0);
    return ok;
}

/* The whole-text message, after checking that every two-piece cut and the byte-by-byte feed
 * stream the same message. */
static void parse_all_ways(const struct opts *o, const char *text, struct msg *out)
{
    whole(o, text, out);
    size_t n = strlen(text);
    int bad = 0;
    for (size_t k = 0; k <= n; k++) {
        struct msg m = {0};
        streamed(o, text, &k, 1, &m);
        if (!same(out, &m) && bad++ == 0)
            printf("  cut at %zu differs (content '%.*s', %d calls%s)\n", k, (int)m.content.len,
                   m.content.p ? m.content.p : "", m.n_calls, m.bad_chunk ? ", bad chunk" : "");
        msg_free(&m);
    }
    size_t *cuts = malloc((n + 1) * sizeof *cuts);
    for (size_t k = 0; k < n; k++)
        cuts[k] = k + 1;
    struct msg m = {0};
    streamed(o, text, cuts, (int)n, &m);
    bad += !same(out, &m);
    msg_free(&m);
    free(cuts);
    CHECK_EQ(bad, 0);
}

static const char *str(const struct dd_buf *b)
{
    return b->p ? b->p : "";
}

static const struct opts TOOLS_ON = {.reasoning = true, .tools = true};

TEST(json_form_one_call)
{
    struct msg m = {0};
    parse_all_ways(&TOOLS_ON,
                   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                   "\"Paris\", \"nested\": {\"a\": [1, \"}\"]}}}\n</tool_call>",
                   &m);
    CHECK_EQ(m.n_calls, 1);
    CHECK_STR_EQ(m.name[0], "get_weather");
    CHECK_STR_EQ(str(&m.args[0]), "{\"city\": \"Paris\", \"nested\": {\"a\": [1, \"}\"]}}");
    CHECK(m.content_null);
    msg_free(&m);
}

TEST(json_form_several_calls_with_text)
{
    struct msg m = {0};
    parse_all_ways(&TOOLS_ON,
                   "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                   "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"search\","
                   "\"arguments\":{}}\n</tool_call>\n",
                   &m);
    CHECK_STR_EQ(str(&m.content), "Let me check.");
    CHECK(!m.content_null);
    CHECK_EQ(m.n_calls, 2);
    CHECK_STR_EQ(m.name[1], "search");
    CHECK_STR_EQ(str(&m.args[0]), "{\"city\": \"Paris\"}");
    CHECK_STR_EQ(str(&m.args[1]), "{}");
    msg_free(&m);
}

TEST(xml_form)
{
    struct msg m = {0};
    parse_all_ways(&TOOLS_ON,
                   "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n"
                   "</parameter>\n<parameter=zip>\n10001\n</parameter>\n<parameter=days>\n3\n"
                   "</parameter>\n<parameter=opts>\n{\"unit\": \"C\"}\n</parameter>\n"
                   "</function>\n</tool_call>\n<tool_call>\n<function=search>\n</function>\n"
                   "</tool_call>",
                   &m);
    CHECK_EQ(m.n_calls, 2);
    CHECK_STR_EQ(str(&m.args[0]),
                 "{\"city\": \"New York\", \"zip\": \"10001\", \"days\": 3, \"opts\": "
                 "{\"unit\": \"C\"}}");
    CHECK_STR_EQ(str(&m.args[1]), "{}");
    cJSON *a = cJSON_Parse(str(&m.args[0]));
    CHECK(a != NULL);
    cJSON_Delete(a);
    msg_free(&m);
}

/* XML values read by the parameter's schema: text for a strings-only schema (a string type, a
 * string enum, through $ref), JSON when it parses as JSON of an allowed type, else text. */
TEST(xml_values_by_schema)
{
    static const char typed[] =
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
        "\"$defs\":{\"S\":{\"type\":\"string\"}},\"properties\":{"
        "\"zip\":{\"type\":\"string\"},\"code\":{\"enum\":[\"1\",\"2\"]},"
        "\"ref\":{\"$ref\":\"#/$defs/S\"},\"n\":{\"type\":\"integer\"},"
        "\"bad_n\":{\"type\":\"integer\"},\"arr_as_n\":{\"type\":\"integer\"},"
        "\"x\":{\"type\":\"number\"},\"b\":{\"type\":\"boolean\"},"
        "\"opt\":{\"type\":[\"string\",\"null\"]},\"opt2\":{\"anyOf\":[{\"type\":\"string\"},"
        "{\"type\":\"null\"}]},\"list\":{\"type\":\"array\"},\"free\":{}}}}}]";
    cJSON *tools = cJSON_Parse(typed);
    const cJSON *saved = g_tools;
    g_tools = tools;
    struct msg m = {0};
    parse_all_ways(&TOOLS_ON,
                   "<tool_call>\n<function=f>\n"
                   "<parameter=zip>\n10001\n</parameter>\n"
                   "<parameter=code>\n2\n</parameter>\n"
                   "<parameter=ref>\ntrue\n</parameter>\n"
                   "<parameter=n>\n 42 \n</parameter>\n"
                   "<parameter=bad_n>\nforty\n</parameter>\n"
                   "<parameter=arr_as_n>\n[1]\n</parameter>\n"
                   "<parameter=x>\n2.5\n</parameter>\n"
                   "<parameter=b>\nfalse\n</parameter>\n"
                   "<parameter=opt>\nnull\n</parameter>\n"
                   "<parameter=opt2>\n7\n</parameter>\n"
                   "<parameter=list>\n[1, \"a\"]\n</parameter>\n"
                   "<parameter=free>\n{\"k\": 1}\n</parameter>\n"
                   "<parameter=undeclared>\na < b\n\n</parameter>\n"
                   "</function>\n</tool_call>",
                   &m);
    CHECK_EQ(m.n_calls, 1);
    CHECK_STR_EQ(str(&m.args[0]),
                 "{\"zip\": \"10001\", \"code\": \"2\", \"ref\": \"true\", \"n\": 42, "
                 "\"bad_n\": \"forty\", \"arr_as_n\": \"[1]\", \"x\": 2.5, \"b\": false, "
                 "\"opt\": null, \"opt2\": \"7\", \"list\": [1, \"a\"], \"free\": {\"k\": 1}, "
                 "\"undeclared\": \"a < b\\n\"}");
    msg_free(&m);
    g_tools = saved;
    cJSON_Delete(tools);
}

TEST(whole_block_fallbacks)
{
    struct msg m = {0};
    parse_all_ways(&TOOLS_ON,
                   "<tool_call>\n{\"arguments\": {\"q\": 1}, \"name\": \"search\"}\n</tool_call>"
                   "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
                   "\\\"Oslo\\\"}\"}</tool_call>",
                   &m);
    CHECK_EQ(m.n_calls, 2);
    CHECK_STR_EQ(str(&m.args[0]), "{\"q\":1}");
    CHECK_STR_EQ(str(&m.args[1]), "{\"city\": \"Oslo\"}");
    msg_free(&m);
}

TEST(malformed_is_content)
{
    static const char *const bad[] = {
        "<tool_call>\nnot json\n</tool_call>",
        "Hi <tool_call>\n{\"name\": \"unknown_fn\", \"arguments\": {}}\n</tool_call> there",
        "<tool_call>\n{\"name\": \"get_wea",
        "<tool_call>\n<function=nope>\n</function>\n</tool_call>",
        "<tool_call",
        "a <tool_call>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct msg m = {0};
        parse_all_ways(&TOOLS_ON, bad[i], &m);
        CHECK_EQ(m.n_calls, 0);
        CHECK_STR_EQ(str(&m.content), bad[i]);
        msg_free(&m);
    }
}

TEST(parallel_false_keeps_first)
{
    struct opts o = TOOLS_ON;
    o.max_calls = 1;
    struct msg m = {0};
    parse_all_ways(&o,
                   "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": 1}}\n</tool_call>\n"
                   "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": 2}}\n</tool_call>",
                   &m);
    CHECK_EQ(m.n_calls, 1);
    CHECK_STR_EQ(str(&m.args[0]), "{\"q\": 1}");
    msg_free(&m);
}

TEST(tool_calls_off_is_content)
{
    struct opts o = {.reasoning = true};
    const char *t = "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>";
    struct msg m = {0};
    parse_all_ways(&o, t, &m);
    CHECK_EQ(m.n_calls, 0);
    CHECK_STR_EQ(str(&m.content), t);
    msg_free(&m);
}

TEST(reasoning_split)
{
    struct opts o = {.reasoning = true};
    struct msg m = {0};
    parse_all_ways(&o, "\n<think>\nThe user asks.\nCheck it.\n</think>\n\nParis.", &m);
    CHECK_STR_EQ(str(&m.reasoning), "The user asks.\nCheck it.");
    CHECK_STR_EQ(str(&m.content), "Paris.");
    msg_free(&m);
    parse_all_ways(&o, "Hi <think>not reasoning</think>", &m);
    CHECK_EQ(m.reasoning.len, 0);
    CHECK_STR_EQ(str(&m.content), "Hi <think>not reasoning</think>");
    msg_free(&m);
    parse_all_ways(&o, "<think>\ncut off by the token cap </thi", &m);
    CHECK_STR_EQ(str(&m.reasoning), "cut off by the token cap </thi");
    CHECK_EQ(m.content.len, 0);
    msg_free(&m);
    o.reasoning = false; /* reasoning_format none */
    parse_all_ways(&o, "<think>\nx\n</think>\n\ny", &m);
    CHECK_STR_EQ(str(&m.content), "<think>\nx\n</think>\n\ny");
    msg_free(&m);
}

TEST(reasoning_opened_by_the_prompt)
{
    struct opts o = {.reasoning = true, .think_open = true, .tools = true};
    struct msg m = {0};
    parse_all_ways(&o,
                   "I could call <tool_call>search</tool_call> here.\n</think>\n\n"
                   "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n"
                   "</tool_call>",
                   &m);
    CHECK_STR_EQ(str(&m.reasoning), "I could call <tool_call>search</tool_call> here.");
    CHECK_EQ(m.n_calls, 1);
    CHECK(m.content_null);
    msg_free(&m);
}

int main(void)
{
    cJSON *tools = cJSON_Parse(TOOLS);
    g_tools = tools;
    RUN(json_form_one_call);
    RUN(json_form_several_calls_with_text);
    RUN(xml_form);
    RUN(xml_values_by_schema);
    RUN(whole_block_fallbacks);
    RUN(malformed_is_content);
    RUN(parallel_false_keeps_first);
    RUN(tool_calls_off_is_content);
    RUN(reasoning_split);
    RUN(reasoning_opened_by_the_prompt);
    cJSON_Delete(tools);
    TEST_MAIN_END("test_reply");
}

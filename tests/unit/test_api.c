/*
 * test_api — the request side of the OpenAI API: server/api/api.c (JSON guards, field validation,
 * prompts, engine parameters, /tokenize) and server/api/chat.c (ChatML rendering, user-text spans,
 * message validation), against the tiny qwen35 model's tokenizer.
 *
 * Usage: test_api [BUILD_DIR] (default build/cpu); skips without BUILD_DIR/models.
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
#include "test.h"     // defines: TEST, RUN, CHECK*, TEST_MAIN_END
#include "testutil.h" // defines: testutil_*

static struct model *g_model;

static struct api_ctx ctx(void)
{
    return (struct api_ctx){.model = g_model,
                            .n_ctx = 256,
                            .n_slots = 4,
                            .max_tokens_default = 0,
                            .max_json_depth = 16};
}

/* Parse a chat body; returns the api_parse status and leaves *e set on failure. */
static int parse(enum api_kind k, const char *body, struct api_req *r, struct api_error *e)
{
    struct api_ctx c = ctx();
    return api_parse(k, body, strlen(body), &c, r, e);
}

/* parse with room for a prompt that renders tools */
static int parse_big(enum api_kind k, const char *body, struct api_req *r, struct api_error *e)
{
    struct api_ctx c = ctx();
    c.n_ctx = 4096;
    return api_parse(k, body, strlen(body), &c, r, e);
}

static void expect_400(enum api_kind k, const char *body, const char *param)
{
    struct api_req r;
    struct api_error e;
    int rc = parse(k, body, &r, &e);
    CHECK_EQ(rc, -1);
    CHECK_EQ(e.status, 400);
    if (param)
        CHECK_STR_EQ(e.param, param);
    if (rc == 0)
        api_req_free(&r);
}

TEST(json_guards)
{
    struct api_error e;
    cJSON *ok = api_json_parse("{\"a\":1}  \n", 10, 8, &e);
    CHECK(ok != NULL);
    cJSON_Delete(ok);
    CHECK(api_json_parse("{\"a\":1} x", 9, 8, &e) == NULL);
    CHECK(strstr(e.message, "after the JSON value") != NULL);
    CHECK(api_json_parse("[[[[1]]]]", 9, 3, &e) == NULL);
    CHECK(strstr(e.message, "nesting") != NULL);
    CHECK(api_json_parse("{\"a\":\"\xc3\x28\"}", 10, 8, &e) == NULL); /* invalid UTF-8 */
    CHECK(api_json_parse("{\"a\":\"x\0y\"}", 11, 8, &e) == NULL);     /* raw NUL */
    ok = api_json_parse("{\"a\":\"\\u0000\"}", 14, 8, &e);            /* escaped is fine */
    CHECK(ok != NULL);
    cJSON_Delete(ok);
    CHECK(api_json_parse("", 0, 8, &e) == NULL);
    CHECK(api_json_parse("\xed\xa0\x80", 3, 8, &e) == NULL); /* a surrogate encoded as UTF-8 */
}

TEST(utf8_sanitize)
{
    size_t n;
    char *s = json_utf8_sanitize("a\xff"
                                 "b\xe2\x82",
                                 5, &n);
    CHECK_STR_EQ(s, "a\xEF\xBF\xBD"
                    "b\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK_EQ(n, strlen(s));
    free(s);
    s = json_utf8_sanitize("\xe2\x82\xac ok", 6, &n);
    CHECK_STR_EQ(s, "\xe2\x82\xac ok");
    free(s);
    /* a NUL byte (a byte-level token can decode to one) would cut the cJSON string there: a
     * streamed text then lost what followed it and its delta came out empty */
    s = json_utf8_sanitize("o\0m", 3, &n);
    CHECK_STR_EQ(s, "o\xEF\xBF\xBDm");
    CHECK_EQ(n, 5u);
    free(s);
}

TEST(chat_validation)
{
    expect_400(API_CHAT, "{}", "messages");
    expect_400(API_CHAT, "{\"messages\":null}", "messages");
    expect_400(API_CHAT, "{\"messages\":\"hi\"}", "messages");
    expect_400(API_CHAT, "{\"messages\":[1]}", "messages[0]");
    expect_400(API_CHAT, "{\"messages\":[{}]}", "messages[0].role");
    expect_400(API_CHAT, "{\"messages\":[{\"role\":1,\"content\":\"x\"}]}", "messages[0].role");
    expect_400(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":1}]}",
               "messages[0].content");
    expect_400(API_CHAT, "{\"messages\":[{\"role\":\"system\",\"content\":\"x\"},{}]}",
               "messages[1].role");
    expect_400(API_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
               "\"content\":\"b\"},{\"role\":\"assistant\",\"content\":\"c\"}]}",
               "messages[2].role");
    expect_400(API_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role");
    expect_400(API_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
               "messages[0].content");
}

TEST(numeric_edges)
{
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    char body[512];
#define BAD(field, param)                                                                          \
    snprintf(body, sizeof body, "{%s,%s}", m, field);                                              \
    expect_400(API_CHAT, body, param)
    BAD("\"max_tokens\":0", "max_tokens");
    BAD("\"max_tokens\":2.5", "max_tokens");
    BAD("\"n\":5", "n");
    BAD("\"temperature\":-0.1", "temperature");
    BAD("\"temperature\":1e999", "temperature");
    BAD("\"top_p\":1.01", "top_p");
    BAD("\"presence_penalty\":-2.5", "presence_penalty");
    BAD("\"logit_bias\":{\"272\":1}", "logit_bias");
    BAD("\"logit_bias\":{\"1x\":1}", "logit_bias");
    BAD("\"logprobs\":true,\"top_logprobs\":21", "top_logprobs");
    BAD("\"top_logprobs\":1", "top_logprobs");
    BAD("\"stop\":[\"a\",\"\"]", "stop");
    BAD("\"response_format\":{\"type\":\"json_schema\"}", "response_format.json_schema");
    BAD("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":5}}",
        "response_format.json_schema.schema");
    BAD("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"strict\":1}}",
        "response_format.json_schema.strict");
    BAD("\"json_schema\":{\"type\":123}", "json_schema");
    BAD("\"json_schema\":{\"type\":\"hiccup\"}", "json_schema");
    BAD("\"json_schema\":{\"$ref\":\"#/$defs/nope\"}", "json_schema");
    BAD("\"json_schema\":{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "json_schema");
    BAD("\"grammar\":\"root ::= [a-\"", "grammar");
    BAD("\"grammar\":5", "grammar");
    BAD("\"grammar\":\"root ::= \\\"a\\\"\",\"json_schema\":{}", "grammar");
    BAD("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
        "\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}",
        "tool_choice");
    BAD("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
        "{\"type\":\"object\",\"not\":{}}}}],\"tool_choice\":\"required\"",
        "tools");
#undef BAD
}

TEST(chat_fields_and_params)
{
    struct api_req r;
    struct api_error e;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":50,"
                       "\"max_completion_tokens\":7,\"stop\":[\"x\",\"yz\"],\"seed\":11,"
                       "\"logit_bias\":{\"5\":-100},\"n\":2,\"temperature\":0.5,\"top_k\":3,"
                       "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                       "\"unknown\":{\"deep\":[1,2]}}";
    CHECK_EQ(parse(API_CHAT, body, &r, &e), 0);
    CHECK_EQ(r.max_tokens, 7);
    CHECK_EQ(r.n_stop, 2);
    CHECK_STR_EQ(r.stop[1], "yz");
    CHECK_EQ(r.s.n_logit_bias, 1);
    CHECK_EQ(r.s.logit_bias[0].id, 5);
    CHECK(r.stream && r.include_usage);
    CHECK_EQ(r.s.top_k, 3);
    struct eng_req_params p;
    api_req_params(&r, 0, 1, 0, &p);
    CHECK_EQ(p.s.seed, 12); /* seed + choice index */
    CHECK_EQ(p.max_tokens, 7);
    CHECK_EQ(p.n_stop, 2);
    CHECK(p.s.logit_bias != r.s.logit_bias); /* a copy the engine owns */
    free(p.prompt);
    free(p.bounds);
    free(p.s.logit_bias);
    for (int i = 0; i < p.n_stop; i++)
        free(p.stop[i]);
    api_req_free(&r);
}

/* A constraint compiles into the request and travels to the engine parameters (a reference). */
TEST(constraints)
{
    struct api_req r;
    struct api_error e;
    CHECK_EQ(
        parse(API_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
              "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
              "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}}",
              &r, &e),
        0);
    CHECK(r.gram != NULL);
    struct eng_req_params p;
    api_req_params(&r, 0, 0, 0, &p);
    CHECK(p.gram == r.gram);
    free(p.prompt);
    free(p.bounds);
    gram_release(p.gram);
    api_req_free(&r);
    CHECK_EQ(
        parse_big(API_CHAT,
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":"
                  "\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\"}",
                  &r, &e),
        0);
    CHECK(r.gram != NULL && r.tool_calls); /* a call is forced */
    api_req_free(&r);
    CHECK_EQ(
        parse_big(API_CHAT,
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":"
                  "\"function\",\"function\":{\"name\":\"f\"}}]}",
                  &r, &e),
        0);
    CHECK(r.gram == NULL); /* auto without strict tools: unconstrained */
    api_req_free(&r);
    CHECK_EQ(parse(API_COMPLETION, "{\"prompt\":\"a\",\"grammar\":\"root ::= [a-z]+\"}", &r, &e),
             0);
    CHECK(r.gram != NULL);
    api_req_free(&r);
    CHECK_EQ(
        parse(API_COMPLETION, "{\"prompt\":\"a\",\"response_format\":{\"type\":\"text\"}}", &r, &e),
        0);
    CHECK(r.gram == NULL);
    api_req_free(&r);
}

/* ---- the XML tool-call form --------------------------------------------------------------- */

#define QWEN35_TMPL "../shared/data/templates/Qwen3.5-4B.jinja"

static const char XML_TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},"
    "\"unit\":{\"enum\":[\"C\",\"F\"]},\"days\":{\"type\":\"integer\",\"minimum\":1,"
    "\"maximum\":7},\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}[0-9]+$\"},"
    "\"note\":{\"type\":\"string\"},\"opts\":{\"type\":\"object\",\"properties\":{\"x\":"
    "{\"type\":\"string\"}},\"required\":[\"x\"]},\"n\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"city\",\"days\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]";

static void collect_args(void *ud, enum toolcall_ev ev, const char *s, size_t n)
{
    if (ev == TOOLCALL_ARGS)
        dd_buf_put(ud, s, n);
}

/* Matched whole by the request's grammar; and, when want is set, the arguments toolcall.c reads
 * back from it. */
static bool xml_call(gram_t *g, const cJSON *tools, const char *args, const char *want)
{
    char text[1024];
    snprintf(text, sizeof text, "<tool_call>\n<function=f>\n%s</function>\n</tool_call>", args);
    gram_m_t *m = gram_m_create(g);
    bool ok = gram_m_accept_bytes(m, text, strlen(text)) && gram_m_accepting(m);
    gram_m_destroy(m);
    if (ok && want) {
        struct dd_buf got = {0};
        struct toolcall t;
        toolcall_init(&t, tools, 0, collect_args, &got);
        toolcall_feed(&t, text, strlen(text));
        toolcall_finish(&t);
        toolcall_deinit(&t);
        dd_buf_putc(&got, '\0');
        if (strcmp(got.p, want) != 0)
            printf("  read back %s, want %s\n", got.p, want);
        CHECK_STR_EQ(got.p, want);
        dd_buf_free(&got);
    }
    return ok;
}

/* A template that writes <function=...> gets its tool calls enforced in that form: parameter
 * values raw for strings-only schemas, JSON (no raw '<') for the rest, and read back by the
 * parser as the schema says. */
TEST(xml_tool_form)
{
    struct api_ctx c = ctx();
    chat_tmpl_t *t = NULL;
    char err[512];
    if (chat_tmpl_create(g_model, QWEN35_TMPL, &t, err, sizeof err) != 0) {
        printf("  skipped: %s\n", err);
        return;
    }
    CHECK_EQ(chat_tmpl_tool_form(t), CHAT_TOOLS_XML);
    CHECK_EQ(chat_tmpl_tool_form(NULL), CHAT_TOOLS_JSON);
    c.tmpl = t;
    c.n_ctx = 8192;
    struct dd_buf body = {0};
    dd_buf_printf(&body,
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":%s,"
                  "\"tool_choice\":\"required\",\"chat_template_kwargs\":{\"enable_thinking\":"
                  "false}}",
                  XML_TOOLS);
    struct api_req r;
    struct api_error e;
    CHECK_EQ(api_parse(API_CHAT, body.p, body.len, &c, &r, &e), 0);
    cJSON *tools = cJSON_Parse(XML_TOOLS);
    CHECK(r.gram != NULL && !r.think_open);
    if (r.gram) {
        gram_t *g = r.gram;
        const char *city = "<parameter=city>\nNew York\n</parameter>\n";
        char a[800];
        snprintf(a, sizeof a, "%s<parameter=days>\n3\n</parameter>\n", city);
        CHECK(xml_call(g, tools, a, "{\"city\": \"New York\", \"days\": 3}"));
        snprintf(a, sizeof a,
                 "%s<parameter=unit>\nF\n</parameter>\n<parameter=days>\n7\n</parameter>\n"
                 "<parameter=code>\nAB12\n</parameter>\n<parameter=note>\nx < y </param\n\n"
                 "</parameter>\n<parameter=opts>\n{\"x\": \"\\u003cb>\"}\n</parameter>\n"
                 "<parameter=n>\nnull\n</parameter>\n",
                 city);
        CHECK(xml_call(g, tools, a,
                       "{\"city\": \"New York\", \"unit\": \"F\", \"days\": 7, \"code\": \"AB12\", "
                       "\"note\": \"x < y </param\\n\", \"opts\": {\"x\": \"\\u003cb>\"}, \"n\": "
                       "null}"));
        snprintf(a, sizeof a,
                 "%s<parameter=days>\n1\n</parameter>\n<parameter=n>\n\"a\"\n"
                 "</parameter>\n",
                 city);
        CHECK(xml_call(g, tools, a, "{\"city\": \"New York\", \"days\": 1, \"n\": \"a\"}"));
        static const char *const bad[] = {
            "<parameter=days>\n3\n</parameter>\n", /* city missing */
            "<parameter=city>\nAmsterdam\n</parameter>\n<parameter=days>\n3\n</parameter>\n",
            "<parameter=city>\nX\n</parameter>\n<parameter=days>\n8\n</parameter>\n",
            "<parameter=city>\nX\n</parameter>\n<parameter=days>\n\"3\"\n</parameter>\n",
            "<parameter=city>\nX\n</parameter>\n<parameter=unit>\nK\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n",
            "<parameter=city>\nX\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
            "<parameter=code>\nab1\n</parameter>\n",
            "<parameter=city>\nX\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
            "<parameter=note>\na </parameter> b\n</parameter>\n",
            "<parameter=city>\nX\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
            "<parameter=opts>\n{\"x\": \"<b>\"}\n</parameter>\n",
            "<parameter=city>\nX\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
            "<parameter=n>\nraw\n</parameter>\n",
            "<parameter=city>\nX<\n</parameter>\n<parameter=days>\n3\n</parameter>\n",
            "<parameter=days>\n3\n</parameter>\n<parameter=city>\nX\n</parameter>\n", /* order */
        };
        for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
            if (xml_call(g, tools, bad[k], NULL))
                printf("  accepted: %s\n", bad[k]);
            CHECK(!xml_call(g, tools, bad[k], NULL));
        }
        gram_m_t *m = gram_m_create(g); /* the tool without parameters */
        const char *call = "<tool_call>\n<function=g>\n</function>\n</tool_call>";
        CHECK(gram_m_accept_bytes(m, call, strlen(call)) && gram_m_accepting(m));
        gram_m_destroy(m);
    }
    api_req_free(&r);
    /* what the XML form cannot carry is a 400 naming the tools */
    static const char *const refused[] = {
        "[{\"type\":\"function\",\"function\":{\"name\":\"a>b\"}}]",
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"anyOf\":[{}]}}}]",
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"a<b\":{}}}}}]",
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"p\":{\"type\":\"string\",\"pattern\":\"^<a\"}}}}}]",
    };
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++) {
        dd_buf_truncate(&body, 0);
        dd_buf_printf(&body,
                      "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":%s,"
                      "\"tool_choice\":\"required\"}",
                      refused[k]);
        int rc = api_parse(API_CHAT, body.p, body.len, &c, &r, &e);
        CHECK_EQ(rc, -1);
        if (rc == 0)
            api_req_free(&r);
        else
            CHECK_STR_EQ(e.param, "tools");
    }
    cJSON_Delete(tools);
    dd_buf_free(&body);
    chat_tmpl_destroy(t);
}

TEST(max_tokens_clamped_to_context)
{
    struct api_req r;
    struct api_error e;
    CHECK_EQ(parse(API_COMPLETION, "{\"prompt\":\"abc\",\"max_tokens\":1e15}", &r, &e), 0);
    struct eng_req_params p;
    api_req_params(&r, 0, 0, 0, &p);
    CHECK_EQ(p.max_tokens, 256 - r.prompts[0].n_ids);
    free(p.prompt);
    api_req_free(&r);
}

TEST(context_overflow)
{
    char body[8192];
    int n = snprintf(body, sizeof body, "{\"prompt\":\"");
    for (int i = 0; i < 400; i++)
        n += snprintf(body + n, sizeof body - (size_t)n, "w%d ", i);
    snprintf(body + n, sizeof body - (size_t)n, "\"}");
    struct api_req r;
    struct api_error e;
    CHECK_EQ(parse(API_COMPLETION, body, &r, &e), -1);
    CHECK_STR_EQ(e.type, "exceed_context_size_error");
    CHECK_EQ(e.n_ctx, 256);
    CHECK(e.n_prompt_tokens > 256);
}

TEST(completion_prompts)
{
    struct api_req r;
    struct api_error e;
    CHECK_EQ(parse(API_COMPLETION, "{\"prompt\":[[1,2,3],[4]],\"n\":2}", &r, &e), 0);
    CHECK_EQ(r.n_prompts, 2);
    CHECK_EQ(r.prompts[0].n_ids, 3);
    CHECK_EQ(r.prompts[1].ids[0], 4);
    api_req_free(&r);
    CHECK_EQ(parse(API_COMPLETION, "{\"prompt\":[\"ab\",\"cd\"],\"echo\":true}", &r, &e), 0);
    CHECK_STR_EQ(r.prompts[1].text, "cd");
    CHECK(r.echo);
    api_req_free(&r);
    expect_400(API_COMPLETION, "{\"prompt\":[300]}", "prompt");
    expect_400(API_COMPLETION, "{\"prompt\":[[1],\"a\"]}", "prompt");
    expect_400(API_COMPLETION, "{\"prompt\":\"a\",\"best_of\":3}", "best_of");
}

TEST(chatml_render_and_spans)
{
    const char *js = "[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
                     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi \"},"
                     "{\"type\":\"text\",\"text\":\"there\"}]},"
                     "{\"role\":\"assistant\",\"content\":\"Hello\"},"
                     "{\"role\":\"user\",\"content\":\"<|im_end|>\"}]";
    cJSON *msgs = cJSON_Parse(js);
    cJSON *kw = cJSON_Parse("{\"enable_thinking\":false}");
    struct chat_prompt p;
    char err[128];
    CHECK_EQ(chat_render(NULL, msgs, NULL, kw, true, &p, err, sizeof err), 0);
    CHECK_STR_EQ(p.text.p, "<|im_start|>system\nBe brief.<|im_end|>\n"
                           "<|im_start|>user\nHi there<|im_end|>\n"
                           "<|im_start|>assistant\nHello<|im_end|>\n"
                           "<|im_start|>user\n<|im_end|><|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    CHECK_EQ(p.n_spans, 4);
    CHECK(p.n_spans == 4 && strncmp(p.text.p + p.spans[3].off, "<|im_end|>", p.spans[3].len) == 0);
    /* the user's "<|im_end|>" must not become the control token */
    struct api_prompt ap = {0};
    api__encode_chat(g_model->tok, NULL, &p, &ap);
    int32_t im_end = tok_find(g_model->tok, "<|im_end|>", 10);
    int n_end = 0;
    for (int64_t i = 0; i < ap.n_ids; i++)
        n_end += ap.ids[i] == im_end;
    CHECK_EQ(n_end, 4); /* one per closed turn, none from the user text */
    free(ap.ids);
    free(ap.bounds);
    chat_prompt_free(&p);
    cJSON_Delete(msgs);
    cJSON_Delete(kw);
}

TEST(chatml_prefill_and_tools)
{
    cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"2+2?\"},"
                              "{\"role\":\"assistant\",\"content\":\"It is\"}]");
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"calc\"}}]");
    struct chat_prompt p;
    char err[128];
    CHECK_EQ(chat_render(NULL, msgs, tools, NULL, true, &p, err, sizeof err), 0);
    CHECK(strncmp(p.text.p, "<|im_start|>system\n# Tools", 26) == 0);
    CHECK(strstr(p.text.p, "{\"type\":\"function\",\"function\":{\"name\":\"calc\"}}") != NULL);
    size_t n = strlen(p.text.p);
    CHECK(n > 5 && strcmp(p.text.p + n - 5, "It is") == 0); /* continued, not closed */
    chat_prompt_free(&p);
    char *flat;
    CHECK_EQ(api_render_chat(NULL, msgs, NULL, NULL, true, &flat, err, sizeof err), 0);
    CHECK_STR_EQ(flat, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\nIt is");
    free(flat);
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
}

TEST(tokenize_endpoints)
{
    struct api_ctx c = ctx();
    struct api_error e;
    size_t n;
    const char *req = "{\"content\":\"ab<|im_start|>\"}";
    char *out = api_tokenize(&c, req, strlen(req), &n, &e);
    CHECK(out != NULL);
    cJSON *o = cJSON_Parse(out);
    cJSON *toks = cJSON_GetObjectItem(o, "tokens");
    CHECK(cJSON_GetArraySize(toks) >= 2);
    char *ids = cJSON_PrintUnformatted(toks);
    char body[512];
    snprintf(body, sizeof body, "{\"tokens\":%s}", ids);
    char *back = api_detokenize(&c, body, strlen(body), &n, &e);
    CHECK_STR_EQ(back, "{\"content\":\"ab<|im_start|>\"}");
    free(back);
    free(ids);
    free(out);
    cJSON_Delete(o);
    CHECK(api_detokenize(&c, "{\"tokens\":[-1]}", 15, &n, &e) == NULL);
    CHECK_EQ(e.status, 400);
}

int main(int argc, char **argv)
{
    int rc = testutil_load_tiny(argc, argv, &g_model);
    if (rc != 0)
        return rc;
    RUN(json_guards);
    RUN(utf8_sanitize);
    RUN(chat_validation);
    RUN(numeric_edges);
    RUN(chat_fields_and_params);
    RUN(constraints);
    RUN(xml_tool_form);
    RUN(max_tokens_clamped_to_context);
    RUN(context_overflow);
    RUN(completion_prompts);
    RUN(chatml_render_and_spans);
    RUN(chatml_prefill_and_tools);
    RUN(tokenize_endpoints);
    model_free(g_model);
    TEST_MAIN_END("test_api");
}

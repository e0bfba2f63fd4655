/*
 * test_resp — the response side: server/api/resp.c (error objects, SSE framing of every chunk kind,
 * whole responses with usage and both logprobs shapes, models, slots) and server/http/metrics.c
 * (Prometheus text: counters by endpoint and status, cumulative histogram buckets).
 *
 * Usage: test_resp [BUILD_DIR]; the logprobs cases need BUILD_DIR/models (token text) and skip
 * the rest of the program without it.
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
#include "server/http/metrics.h"
#include "server/jinja/jinja.h"
#include "test.h"     // defines: TEST, RUN, CHECK*, TEST_MAIN_END
#include "testutil.h" // defines: testutil_*

static struct model *g_model;

static struct resp_meta meta(enum api_kind k, bool logprobs)
{
    return (struct resp_meta){k, "chatcmpl-abc", 1700000000, "m", g_model->tok, logprobs};
}

/* The JSON of the one SSE event in b (asserts the framing), parsed. */
static cJSON *one_event(struct dd_buf *b)
{
    CHECK(b->len > 8 && strncmp(b->p, "data: ", 6) == 0);
    CHECK(b->len > 2 && strcmp(b->p + b->len - 2, "\n\n") == 0);
    cJSON *o = cJSON_ParseWithLength(b->p + 6, b->len - 8);
    CHECK(o != NULL);
    dd_buf_truncate(b, 0);
    return o;
}

TEST(error_object)
{
    struct api_error e;
    api_error_set(&e, 400, "invalid_request_error", NULL, "temperature", "bad %s", "value");
    char *s = resp_error(&e, NULL);
    CHECK_STR_EQ(s, "{\"error\":{\"message\":\"bad value\",\"type\":\"invalid_request_error\","
                    "\"param\":\"temperature\",\"code\":null}}");
    free(s);
    api_error_set(&e, 401, "authentication_error", "invalid_api_key", NULL, "no");
    s = resp_error(&e, NULL);
    CHECK(strstr(s, "\"param\":null,\"code\":\"invalid_api_key\"") != NULL);
    free(s);
}

TEST(sse_chunks)
{
    struct dd_buf b = {0};
    struct resp_meta m = meta(API_CHAT, false);
    resp_sse_role(&b, &m, 0);
    cJSON *o = one_event(&b);
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    CHECK_STR_EQ(cJSON_GetObjectItem(o, "object")->valuestring, "chat.completion.chunk");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "delta"), "content")));
    cJSON_Delete(o);
    resp_sse_text(&b, &m, 1, "h\xc3\xa9", 3, NULL);
    o = one_event(&b);
    ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    CHECK_EQ(cJSON_GetObjectItem(ch, "index")->valueint, 1);
    CHECK_STR_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "delta"), "content")->valuestring,
                 "h\xc3\xa9");
    cJSON_Delete(o);
    resp_sse_finish(&b, &m, 0, "length", NULL);
    CHECK(strstr(b.p, "\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"") != NULL);
    cJSON_Delete(one_event(&b));
    struct resp_usage u = {.prompt = 10, .completion = 5, .cached = 8};
    resp_sse_usage(&b, &m, &u);
    CHECK(strstr(b.p,
                 "\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,"
                 "\"total_tokens\":15,\"prompt_tokens_details\":{\"cached_tokens\":8}}") != NULL);
    cJSON_Delete(one_event(&b));
    resp_sse_error(&b, "unavailable_error", "going away");
    CHECK(strstr(b.p, "\"type\":\"unavailable_error\"") != NULL);
    cJSON_Delete(one_event(&b));
    resp_sse_done(&b);
    CHECK_STR_EQ(b.p, "data: [DONE]\n\n");
    dd_buf_free(&b);
}

TEST(completion_with_logprobs)
{
    struct eng_tok_info t[2] = {{.id = 'a' - 32,
                                 .logprob = -0.5f,
                                 .n_top = 2,
                                 .top_id = {'a' - 32, 'b' - 32},
                                 .top_logprob = {-0.5f, -1.0f}},
                                {.id = 'c' - 32, .logprob = -INFINITY}};
    struct resp_choice c = {.text = "ac", .len = 2, .finish = "stop", .toks = {t, 2, 0}};
    struct resp_usage u = {.prompt = 3, .completion = 2};
    struct resp_meta m = meta(API_CHAT, true);
    char *s = resp_completion(&m, &c, 1, &u, NULL);
    cJSON *o = cJSON_Parse(s);
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    cJSON *content = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "logprobs"), "content");
    CHECK_EQ(cJSON_GetArraySize(content), 2);
    cJSON *e0 = cJSON_GetArrayItem(content, 0);
    CHECK_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(e0, "top_logprobs")), 2);
    CHECK(cJSON_IsArray(cJSON_GetObjectItem(e0, "bytes")));
    double lp1 = cJSON_GetObjectItem(cJSON_GetArrayItem(content, 1), "logprob")->valuedouble;
    CHECK(isfinite(lp1) && lp1 < -1e30); /* -inf clamped to the lowest float */
    CHECK_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "total_tokens")->valueint, 5);
    cJSON_Delete(o);
    free(s);
    m = meta(API_COMPLETION, true);
    c.toks.text_offset = 4; /* after an echoed prompt */
    s = resp_completion(&m, &c, 1, &u, NULL);
    o = cJSON_Parse(s);
    ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    cJSON *lp = cJSON_GetObjectItem(ch, "logprobs");
    CHECK_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "tokens")), 2);
    cJSON *off = cJSON_GetObjectItem(lp, "text_offset");
    CHECK(cJSON_GetArrayItem(off, 0)->valueint == 4 && cJSON_GetArrayItem(off, 1)->valueint == 5);
    CHECK_STR_EQ(cJSON_GetObjectItem(o, "object")->valuestring, "text_completion");
    cJSON_Delete(o);
    free(s);
}

TEST(models_and_slots)
{
    size_t n;
    char *s = resp_models("m", 5, 0, 0, 0, false, &n);
    CHECK_STR_EQ(s, "{\"object\":\"list\",\"data\":[{\"id\":\"m\",\"object\":\"model\","
                    "\"created\":5,\"owned_by\":\"deltad\"}]}");
    free(s);
    struct eng_slot_stats st[2] = {{.state = 0}, {.state = 2, .n_past = 7}};
    s = resp_slots(st, 2, &n);
    CHECK(strstr(s, "\"id\":1,\"state\":\"decode\",\"is_processing\":true,\"n_past\":7") != NULL);
    free(s);
}

TEST(metrics_text)
{
    metrics_t *m = metrics_create();
    metrics_request(m, METRICS_EP_CHAT, 200);
    metrics_request(m, METRICS_EP_CHAT, 200);
    metrics_request(m, METRICS_EP_HEALTH, 418);
    struct metrics_gen g = {ENG_FINISH_LENGTH, 10.0, 10.04, 11.04, 11};
    metrics_generation(m, &g);
    struct eng_stats es = {.generated_tokens_total = 100, .busy_seconds = 4};
    size_t n;
    char *s = metrics_render(m, &es, &n);
    CHECK(strstr(s, "deltad_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"}"
                    " 2\n") != NULL);
    CHECK(strstr(s, "endpoint=\"/health\",status=\"other\"} 1\n") != NULL);
    CHECK(strstr(s, "deltad_time_to_first_token_seconds_bucket{le=\"0.025\"} 0\n") != NULL);
    CHECK(strstr(s, "deltad_time_to_first_token_seconds_bucket{le=\"0.05\"} 1\n") != NULL);
    CHECK(strstr(s, "deltad_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1\n") != NULL);
    CHECK(strstr(s, "deltad_inter_token_latency_seconds_count 10\n") != NULL); /* 10 gaps */
    CHECK(strstr(s, "deltad_inter_token_latency_seconds_bucket{le=\"0.1\"} 10\n") != NULL);
    CHECK(strstr(s, "deltad_generation_tokens_per_second 25\n") != NULL);
    CHECK(strstr(s, "deltad_request_success_total{finish_reason=\"length\"} 1\n") != NULL);
    free(s);
    s = metrics_render(m, NULL, &n); /* while loading: engine series are zero */
    CHECK(strstr(s, "deltad_queue_depth 0\n") != NULL);
    free(s);
    metrics_destroy(m);
}

int main(int argc, char **argv)
{
    int rc = testutil_load_tiny(argc, argv, &g_model);
    if (rc != 0)
        return rc;
    RUN(error_object);
    RUN(sse_chunks);
    RUN(completion_with_logprobs);
    RUN(models_and_slots);
    RUN(metrics_text);
    model_free(g_model);
    TEST_MAIN_END("test_resp");
}

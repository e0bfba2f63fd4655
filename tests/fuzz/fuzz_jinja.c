/*
 * fuzz_jinja — libFuzzer target for the Jinja interpreter (server/jinja*.c).
 *
 * Each input is template source. It is compiled with trim_blocks / lstrip_blocks /
 * keep_trailing_newline chosen by the input length (so every mode gets exercised), then
 * rendered against a small fixed chat context (messages with tool calls, tools, flags) under
 * tight limits. Any outcome is fine except a crash, a sanitizer report, a leak, a hang or an
 * error without a message. Built by `make fuzz` and tests/fuzz/smoke.sh; the server modules
 * are not in libdeltad.a, so their .c files are included here.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja.h" // defines: jinja_compile, jinja_render

static const char CONTEXT[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"héllo <tool_response>x</tool_response>\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nr\\n</think>\\n\\nok\","
    "  \"reasoning_content\": \"r\", \"tool_calls\": [{\"type\": \"function\", \"function\":"
    "  {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null, true], \"b\": \"s\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    "  \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\"}}}}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false, \"n\": -7, \"x\": 1e300}";

/* Reports a failed invariant the way libFuzzer notices: a crash. */
static void require(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    cJSON *j = cJSON_Parse(CONTEXT);
    jinja_value *ctx = jinja_value_from_cjson(j);
    cJSON_Delete(j);
    struct jinja_opts o;
    jinja_opts_init(&o);
    o.trim_blocks = size & 1;
    o.lstrip_blocks = (size >> 1) & 1;
    o.keep_trailing_newline = (size >> 2) & 1;
    o.max_output = 1 << 16;
    o.max_memory = 8 << 20;
    o.max_steps = 50000;
    o.max_depth = 16;
    o.now = 1700000000;
    jinja_tmpl *t = NULL;
    char err[256] = "";
    int rc = jinja_compile((const char *)data, size, &o, &t, err, sizeof(err));
    require(rc == 0 ? t != NULL : t == NULL && err[0] != 0);
    if (t) {
        char *out = NULL;
        size_t n = 0;
        err[0] = 0;
        rc = jinja_render(t, ctx, &out, &n, err, sizeof(err));
        require(rc == 0 ? out != NULL && strlen(out) <= n : out == NULL);
        require(rc == 0 || err[0] != 0 || memmem(data, size, "raise_exception", 15));
        free(out);
        jinja_free(t);
    }
    jinja_value_release(ctx);
    return 0;
}

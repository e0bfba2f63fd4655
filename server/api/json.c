/*
 * json — request-body guards and UTF-8 helpers (see json.h).
 *
 * The guards run in one linear pass each over the raw bytes before cJSON allocates anything,
 * so a hostile body (a megabyte of '[' or of invalid bytes) costs a scan and a 400, never deep
 * recursion or a tree to free.
 *
 * Invariant: json_utf8_sanitize's output always passes json_utf8_valid.
 *
 * Allocation (json_hooks_install): cJSON allocates through hook_malloc, which aborts on OOM
 * except while this thread is inside json_parse_body, the one place where the size of what
 * cJSON builds is chosen by a client; there a failure makes cJSON free its partial tree and
 * return NULL, and json_parse_body reports "out of memory" (json_parse_oom).
 *
 * Thread safety: no state; any thread.
 */
#include "json.h" // defines: json_parse_body, json_utf8_sanitize

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc, dd_errf

/* ---- UTF-8 ------------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when the bytes there are not one. The
 * second-byte ranges exclude overlong 3- and 4-byte forms, UTF-16 surrogates (ED A0..BF) and
 * code points above U+10FFFF (F4 90..). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (len == 0 || s[0] > 0xF4 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if (len == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0)))
        return 0;
    if (len == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90)))
        return 0;
    return len;
}

bool json_utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

char *json_utf8_sanitize(const char *s, size_t n, size_t *out_len)
{
    char *o = xmalloc(3 * n + 1); /* a bad byte becomes 3 bytes, a good one stays 1 */
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        /* a NUL byte too: a cJSON string ends there (a token may decode to one) */
        size_t k = s[i] ? utf8_seq((const unsigned char *)s + i, n - i) : 0;
        if (k == 0) {
            memcpy(o + w, "\xEF\xBF\xBD", 3); /* U+FFFD, one per offending byte */
            w += 3;
            i++;
            continue;
        }
        memcpy(o + w, s + i, k);
        w += k;
        i += k;
    }
    o[w] = '\0';
    if (out_len)
        *out_len = w;
    return o;
}

/* ---- cJSON allocation hooks ------------------------------------------------------------ */

static _Thread_local bool parse_fallible; /* inside json_parse_body */
static _Thread_local bool parse_oom;      /* an allocation failed there */

static void *hook_malloc(size_t n)
{
    if (!parse_fallible)
        return xmalloc(n);
    void *p = dd_try_malloc(n);
    if (!p)
        parse_oom = true;
    return p;
}

static void hook_free(void *p)
{
    free(p);
}

void json_hooks_install(void)
{
    cJSON_Hooks h = {hook_malloc, hook_free};
    cJSON_InitHooks(&h);
}

bool json_parse_oom(void)
{
    return parse_oom;
}

/* ---- body guards ------------------------------------------------------------------------ */

/* One pass over a JSON text: returns the deepest [ / { nesting (string contents skipped; the
 * scan stops once past max) and sets *bad to the offset of the first raw control character
 * (below 0x20: anywhere inside a string, and anything but \t \n \r outside), or to n. */
static int json_scan(const char *s, size_t n, int max, size_t *bad)
{
    int depth = 0, deepest = 0;
    bool in_str = false;
    *bad = n;
    for (size_t i = 0; i < n && deepest <= max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 && (in_str || (c != '\t' && c != '\n' && c != '\r'))) {
            *bad = i;
            return deepest;
        }
        if (in_str) {
            if (c == '\\')
                i++; /* the escaped byte cannot end the string */
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest)
                deepest = depth;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return deepest;
}

/* The guards that need no parse: empty, UTF-8, depth, control characters. */
static bool precheck(const char *body, size_t len, int max_depth, char *err, size_t errlen)
{
    if (len == 0) {
        dd_errf(err, errlen, "the request body is empty; expected a JSON object");
        return false;
    }
    if (!json_utf8_valid(body, len)) {
        dd_errf(err, errlen, "the request body is not valid UTF-8");
        return false;
    }
    size_t bad;
    int limit = max_depth > 0 ? max_depth : INT32_MAX;
    if (json_scan(body, len, limit, &bad) > limit) {
        dd_errf(err, errlen, "JSON nesting deeper than %d levels", max_depth);
        return false;
    }
    if (bad < len) {
        dd_errf(err, errlen, "invalid JSON: raw control character at byte %zu", bad);
        return false;
    }
    return true;
}

cJSON *json_parse_body(const char *body, size_t len, int max_depth, char *err, size_t errlen)
{
    parse_oom = false;
    if (!precheck(body, len, max_depth, err, errlen))
        return NULL;
    const char *end = NULL;
    parse_fallible = true;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    parse_fallible = false;
    if (!root && parse_oom) {
        dd_errf(err, errlen, "out of memory while parsing the request body; retry later");
        return NULL;
    }
    if (!root) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        dd_errf(err, errlen, "invalid JSON near byte %zu", at);
        return NULL;
    }
    /* only whitespace may follow the value */
    size_t at = (size_t)(end - body);
    while (at < len &&
           (body[at] == ' ' || body[at] == '\t' || body[at] == '\r' || body[at] == '\n'))
        at++;
    if (at < len) {
        cJSON_Delete(root);
        dd_errf(err, errlen, "unexpected data after the JSON value at byte %zu", at);
        return NULL;
    }
    return root;
}

/*
 * json — JSON at the edge (STYLE rule 28): the guards a request body passes before cJSON parses
 * it, and the UTF-8 helpers every response builder uses.
 *
 * A body is accepted only when it is strict UTF-8, nested no deeper than a limit, free of raw
 * control characters (JSON forbids them in strings; cJSON would read them as whitespace
 * elsewhere), and one JSON value with nothing after it. Parsing uses the exact length (MHD
 * bodies are not NUL-terminated) and reports errors from the parse end, never from cJSON's
 * global error pointer.
 *
 * Thread safety: pure functions; any thread.
 */
#ifndef DELTAD_JSON_H
#define DELTAD_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* Route cJSON's allocations through util's allocators (STYLE rules 16 and 28): outside
 * json_parse_body they abort on OOM like xmalloc (response trees are internal and bounded);
 * inside it they may fail (dd_try_malloc: a real OOM, or DELTAD_FAIL_ALLOC in fault builds), and
 * the parse then fails cleanly. Call once at start-up, before any thread uses cJSON. Without it
 * cJSON uses plain malloc (unit tests, fuzzers). */
void json_hooks_install(void);

/* Parse body[0..len) with the guards above (max_depth <= 0: cJSON's own limit only). Returns
 * the tree (transferred: cJSON_Delete) or NULL with a client-facing reason in err. */
cJSON *json_parse_body(const char *body, size_t len, int max_depth, char *err, size_t errlen);

/* True when the calling thread's last json_parse_body failed for lack of memory rather than
 * because of the body (the caller may answer 503 instead of 400). */
bool json_parse_oom(void);

/* Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
bool json_utf8_valid(const char *s, size_t n);

/* A copy of s[0..n) with every byte that does not start a valid sequence, and every NUL byte
 * (which would end the string that cJSON is given), replaced by U+FFFD; malloc'd,
 * NUL-terminated (transferred), length in *out_len when not NULL. */
char *json_utf8_sanitize(const char *s, size_t n, size_t *out_len);

#endif

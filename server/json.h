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

/* Parse body[0..len) with the guards above (max_depth <= 0: cJSON's own limit only). Returns
 * the tree (transferred: cJSON_Delete) or NULL with a client-facing reason in err. */
cJSON *json_parse_body(const char *body, size_t len, int max_depth, char *err, size_t errlen);

/* Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
bool json_utf8_valid(const char *s, size_t n);

/* A copy of s[0..n) with every byte that does not start a valid sequence replaced by U+FFFD;
 * malloc'd, NUL-terminated (transferred), length in *out_len when not NULL. */
char *json_utf8_sanitize(const char *s, size_t n, size_t *out_len);

#endif

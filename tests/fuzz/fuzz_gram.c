/*
 * fuzz_gram — libFuzzer target for constrained decoding: the GBNF parser and the matcher
 * (engine/sched/gram.c, gram_match.c) and the JSON Schema compiler (server/api/schema.c).
 *
 * Input: byte 0 bit 0 = the rest is GBNF (0) or a JSON Schema (1), bit 1 = the schema is a
 * tool's parameters in the XML tool-call form (schema_xml_params); the text runs to the first
 * NUL, the bytes after it are fed to the matcher.
 *
 * Invariants checked (a violation aborts):
 *   - a grammar is compiled or refused with "line L, column C: ..."; a schema is compiled to a
 *     grammar or refused with "#...: ..."; a grammar generated from a schema compiles unless
 *     the schema refers to itself without consuming anything (left recursion);
 *   - on a small vocabulary (every byte, some multi-byte pieces, an end-of-generation token),
 *     the mask equals brute force (each token through a saved and restored matcher) before and
 *     after each fed byte that the matcher accepts;
 *   - a refused byte leaves the state as it was.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/sched/gram.h" // defines: gram_compile, gram_m_*
#include "engine/util.h"       // defines: struct dd_buf
#include "server/api/schema.h" // defines: schema_to_gbnf, schema_xml_params

static void require(int ok, const char *what, const char *detail)
{
    if (!ok) {
        fprintf(stderr, "fuzz_gram: invariant failed: %s\n%s\n", what, detail ? detail : "");
        abort();
    }
}

static gram_vocab_t *vocab(void)
{
    static gram_vocab_t *v;
    if (v)
        return v;
    static const char *const multi[] = {"\xc3\xa9", "\xc3", "\xa9", "\xe2\x82\xac", "\xe2\x82",
                                        "ab",       "{\"",  "\":",  "true",         "<eos>"};
    enum { N = 256 + 10 };
    static char one[256];
    const char *piece[N];
    size_t len[N];
    uint8_t kind[N];
    for (int c = 0; c < 256; c++) {
        one[c] = (char)c;
        piece[c] = &one[c];
        len[c] = 1;
        kind[c] = c == 0 ? GRAM_TOK_NEVER : GRAM_TOK_TEXT;
    }
    for (int k = 0; k < 10; k++) {
        piece[256 + k] = multi[k];
        len[256 + k] = strlen(multi[k]);
        kind[256 + k] = k == 9 ? GRAM_TOK_EOG : GRAM_TOK_TEXT;
    }
    v = gram_vocab_create(N, piece, len, kind);
    return v;
}

static void check_mask(gram_m_t *m, const gram_vocab_t *v)
{
    uint32_t bits[(256 + 10 + 31) / 32];
    int64_t cnt = gram_m_mask(m, v, bits), brute = 0;
    for (int32_t t = 0; t < gram_vocab_n(v); t++) {
        gram_m_push(m);
        bool ok = gram_m_accept_token(m, v, t);
        gram_m_pop(m);
        require(ok == (bits[t / 32] >> (t % 32) & 1), "mask == brute force", NULL);
        brute += ok;
    }
    require(cnt == brute, "mask count", NULL);
}

static void run(gram_t *g, const uint8_t *feed, size_t n)
{
    gram_m_t *m = gram_m_create(g);
    const gram_vocab_t *v = vocab();
    check_mask(m, v);
    for (size_t k = 0; k < n && k < 64; k++) {
        bool acc = gram_m_accepting(m);
        if (gram_m_accept_bytes(m, (const char *)feed + k, 1))
            check_mask(m, v);
        else
            require(gram_m_accepting(m) == acc, "a refused byte keeps the state", NULL);
    }
    gram_m_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool schema = data[0] & 1;
    const uint8_t *text = data + 1, *nul = memchr(text, 0, size - 1);
    size_t tn = nul ? (size_t)(nul - text) : size - 1;
    const uint8_t *feed = nul ? nul + 1 : text + tn;
    size_t fn = (size_t)(data + size - feed);
    char err[512];
    gram_t *g = NULL;
    if (!schema) {
        if (gram_compile((const char *)text, tn, NULL, &g, err, sizeof err) != 0) {
            require(strncmp(err, "line ", 5) == 0 || strstr(err, "bytes; the limit") != NULL,
                    "grammar errors give a line", err);
            return 0;
        }
    } else {
        cJSON *j = cJSON_ParseWithLength((const char *)text, tn);
        if (!j)
            return 0;
        struct dd_buf b = {0};
        bool xml = data[0] & 2;
        int rc = xml ? schema_xml_params(j, "root", &b, err, sizeof err)
                     : schema_to_gbnf(j, &b, err, sizeof err);
        if (rc == 0 && xml)
            schema_primitives_xml(&b);
        cJSON_Delete(j);
        if (rc) {
            require(err[0] == '#', "schema errors name a JSON pointer", err);
            dd_buf_free(&b);
            return 0;
        }
        rc = gram_compile(b.p, b.len, NULL, &g, err, sizeof err);
        if (rc)
            require(strstr(err, "left-recursive") != NULL, "a schema's grammar compiles", err);
        dd_buf_free(&b);
        if (rc)
            return 0;
    }
    run(g, feed, fn);
    gram_release(g);
    return 0;
}

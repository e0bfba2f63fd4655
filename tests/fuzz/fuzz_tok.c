/*
 * fuzz_tok — libFuzzer target for the tokenizer (engine/model/tok.c, pretok.c, uni.c):
 * tok_encode, tok_decode, tok_piece, tok_find and the streaming detokenizer, over two real
 * vocabularies: the tiny test model's (DELTAD_FUZZ_MODEL, default
 * build/cpu/models/tiny-qwen35.gguf) and, when present, the Qwen3 tokenizer converted with
 * tok2gguf (DELTAD_FUZZ_TOKENIZER, default build/fuzz/qwen3-tok.gguf; tests/fuzz/run.sh makes
 * it from ../shared/data/tokenizers/qwen3/tokenizer.json).
 *
 * Input: byte 0 = flags (bit 0: which vocabulary, bit 1: parse_special, bit 2: the rest is
 * token ids rather than text); the rest is the text or little-endian int32 ids.
 *
 * Invariants checked (a violation aborts):
 *   - text: at most one id per byte, every id below n_vocab; a short id buffer is never
 *     overrun and the count needed does not change; decode(encode(text)) == text, with and
 *     without special-token parsing; decoding into a short buffer never overruns;
 *   - stream: every chunk the streaming detokenizer releases is valid UTF-8, and for valid
 *     UTF-8 text the chunks plus the flush are exactly the text;
 *   - ids: arbitrary ids (out of range included) decode without a crash and tok_piece answers
 *     NULL exactly for the out-of-range ones.
 * Buffers are heap-allocated at their exact size so ASan catches one byte too far.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/tok.h" // defines: tok_encode, tok_decode, tok_stream_*
#include "engine/model/uni.h" // defines: uni_utf8_check
#include "fz_model.h"         // defines: fz_model_load

static const struct model *g_model[2]; /* kept reachable: LeakSanitizer runs at exit */
static const tok_t *g_tok[2]; /* [0] the tiny model's, [1] Qwen3's (or the tiny one again) */

static void require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_tok: invariant failed: %s\n", what);
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_model[0] = fz_model_load("DELTAD_FUZZ_MODEL", "build/cpu/models/tiny-qwen35.gguf");
    g_tok[0] = g_model[0]->tok;
    const char *q = getenv("DELTAD_FUZZ_TOKENIZER");
    FILE *f = fopen(q ? q : "build/fuzz/qwen3-tok.gguf", "rb");
    g_tok[1] = g_tok[0];
    if (f) {
        fclose(f);
        g_model[1] = fz_model_load("DELTAD_FUZZ_TOKENIZER", "build/fuzz/qwen3-tok.gguf");
        g_tok[1] = g_model[1]->tok;
    } else {
        fprintf(stderr, "fuzz_tok: no Qwen3 tokenizer GGUF; fuzzing the tiny vocabulary only\n");
    }
    return 0;
}

static int utf8_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = uni_utf8_check((const uint8_t *)s + i, n - i);
        if (k <= 0)
            return 0;
        i += (size_t)k;
    }
    return 1;
}

/* The streaming detokenizer over ids: valid UTF-8 chunk by chunk; the text back when the
 * input was valid UTF-8. */
static void check_stream(const tok_t *t, const int32_t *ids, int64_t n, const char *text,
                         size_t len)
{
    struct tok_stream s;
    tok_stream_init(&s);
    size_t cap = 64, at = 0; /* every byte may become a 3-byte U+FFFD */
    for (int64_t i = 0; i < n; i++) {
        size_t plen = 0;
        tok_piece(t, ids[i], &plen);
        cap += 3 * plen + 3;
    }
    char *out = malloc(cap);
    for (int64_t i = 0; i < n; i++) {
        size_t plen = 0;
        tok_piece(t, ids[i], &plen);
        size_t ccap = 256 + plen;
        char *chunk = malloc(ccap);
        size_t k = tok_stream_push(t, &s, ids[i], chunk, ccap);
        require(k <= ccap, "stream chunk longer than its buffer");
        require(utf8_ok(chunk, k), "stream chunk is not valid UTF-8");
        require(at + k <= cap, "stream produced more than expected");
        memcpy(out + at, chunk, k);
        at += k;
        free(chunk);
    }
    char tail[64];
    size_t k = tok_stream_flush(&s, tail, sizeof tail);
    require(utf8_ok(tail, k) && at + k <= cap, "flush is not valid UTF-8");
    memcpy(out + at, tail, k);
    at += k;
    if (text && utf8_ok(text, len))
        require(at == len && memcmp(out, text, len) == 0, "stream output differs from the text");
    free(out);
}

/* Text: encode (full and short buffers), decode back, stream back. */
static void fuzz_text(const tok_t *t, const char *text, size_t len, bool special)
{
    int64_t need = tok_encode(t, text, len, special, NULL, 0);
    require(need >= 0 && need <= (int64_t)len, "more ids than bytes");
    int32_t *ids = malloc(((size_t)need + 1) * sizeof *ids);
    require(tok_encode(t, text, len, special, ids, need) == need, "count changed");
    for (int64_t i = 0; i < need; i++)
        require(ids[i] >= 0 && ids[i] < tok_n_vocab(t), "id out of range");
    if (need > 1) { /* a short buffer: exact size, the same count */
        int64_t half = need / 2;
        int32_t *few = malloc((size_t)half * sizeof *few);
        require(tok_encode(t, text, len, special, few, half) == need, "short-buffer count");
        require(memcmp(few, ids, (size_t)half * sizeof *few) == 0, "short-buffer prefix");
        free(few);
    }
    char *back = malloc(len ? len : 1);
    require(tok_decode(t, ids, need, back, len) == len, "decoded length differs");
    require(memcmp(back, text, len) == 0, "decode(encode(text)) != text");
    if (len > 1) { /* a short output buffer: exact size, never overrun */
        char *half = malloc(len / 2);
        require(tok_decode(t, ids, need, half, len / 2) == len, "short decode length");
        free(half);
    }
    free(back);
    check_stream(t, ids, need, text, len);
    free(ids);
}

/* Ids: arbitrary values through tok_piece and tok_decode; valid ones through the stream. */
static void fuzz_ids(const tok_t *t, const uint8_t *data, size_t size)
{
    int64_t n = (int64_t)(size / 4);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    size_t need = 0;
    for (int64_t i = 0; i < n; i++) {
        memcpy(&ids[i], data + 4 * i, 4);
        size_t len = 0;
        const char *p = tok_piece(t, ids[i], &len);
        bool valid = ids[i] >= 0 && ids[i] < tok_n_vocab(t);
        require((p != NULL) == valid, "tok_piece NULL-ness differs from the id range");
        need += p ? len : 0;
        if (p)
            require(tok_find(t, p, len) >= -1, "tok_find");
    }
    char *out = malloc(need ? need : 1);
    require(tok_decode(t, ids, n, out, need) == need, "decode length differs from pieces");
    free(out);
    for (int64_t i = 0; i < n; i++) /* only the engine streams, and only valid ids */
        ids[i] = (int32_t)((uint32_t)ids[i] % (uint32_t)tok_n_vocab(t));
    check_stream(t, ids, n, NULL, 0);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 8192)
        return 0;
    uint8_t flags = data[0];
    const tok_t *t = g_tok[flags & 1];
    if (flags & 4) {
        fuzz_ids(t, data + 1, size - 1);
        return 0;
    }
    char *text = malloc(size - 1 ? size - 1 : 1); /* exact size, no NUL */
    memcpy(text, data + 1, size - 1);
    fuzz_text(t, text, size - 1, flags & 2);
    require(tok_find(t, text, size - 1) >= -1, "tok_find");
    free(text);
    return 0;
}

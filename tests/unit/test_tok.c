/*
 * test_tok — engine/model/tok.c (with pretok.c and uni.c) and tools/tok2gguf.
 *
 * The Qwen3 tokenizer.json from ../shared is converted with the real tok2gguf binary into a
 * temporary directory, then checked against llama.cpp's qwen2 reference vectors, round trips,
 * special-token parsing and the streaming detokenizer. The tiny vocabulary of docs/models.md
 * §9.2 is built in memory with the gguf writer; variants of it drive the error cases. Parts that
 * need ../shared are skipped (with a note) when it is absent.
 */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/model/gguf.h"        // defines: gguf_open, gguf_open_mem
#include "engine/model/gguf_writer.h" // defines: gguf_writer_*
#include "engine/model/pretok.h"      // defines: pretok_next
#include "engine/model/tok.h"         // defines: tok_*
#include "engine/model/uni.h"         // defines: uni_*
#include "engine/util.h"              // defines: dd_now, DD_E*
#include "test.h"

#define SHARED "../shared/data/tokenizers"

static const char *build_dir = "build/cpu";
static char tmp_dir[64];
static tok_t *qwen; /* the converted Qwen3 tokenizer, NULL when ../shared is absent */

/* ---- helpers ------------------------------------------------------------------------------ */

/* Read a whole file into a NUL-terminated heap buffer (caller frees); NULL if unreadable. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[got] = 0;
    *len = got;
    return b;
}

static bool valid_utf8(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int r = uni_utf8_check((const uint8_t *)s + i, n - i);
        if (r <= 0)
            return false;
        i += (size_t)r;
    }
    return true;
}

/* Encode into a fixed buffer; returns the count (or the negative error). */
static int64_t enc(const tok_t *t, const char *s, size_t n, bool special, int32_t *ids, int64_t max)
{
    int64_t got = tok_encode(t, s, n, special, ids, max);
    CHECK(got <= max);
    return got;
}

/* decode(encode(s)) == s */
static bool round_trips(const tok_t *t, const char *s, size_t n)
{
    int64_t need = tok_encode(t, s, n, false, NULL, 0);
    int32_t *ids = malloc((size_t)(need + 1) * sizeof(int32_t));
    tok_encode(t, s, n, false, ids, need);
    char *out = malloc(n + 1);
    size_t got = tok_decode(t, ids, need, out, n);
    bool ok = got == n && memcmp(out, s, n) == 0;
    free(ids);
    free(out);
    return ok;
}

/* ---- the tiny vocabulary of docs/models.md 9.2 -------------------------------------------- */

/* Knobs for the error cases. */
struct tiny_opts {
    const char *model;     /* tokenizer.ggml.model, NULL = omit */
    bool no_tokens;        /* omit tokenizer.ggml.tokens */
    const char *bad_merge; /* replaces the last merge */
    bool duplicate;        /* token 271 repeats token 270 */
    uint32_t eos;          /* eos id */
};

static uint32_t gpt2_cp(int b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return (uint32_t)b;
    int n = 0;
    for (int c = 0; c < b; c++)
        n += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
    return 0x100 + (uint32_t)n;
}

/* Build the tiny GGUF in memory (*buf transferred to the caller) and create the tokenizer. */
static int tiny_create(const struct tiny_opts *o, tok_t **t, char *err, size_t errlen)
{
    static const char *merges[8] = {"Ġ t", "h e", "Ġt he", "i n", "e r", "Ġ a", "o n", "Ġ s"};
    static const char *rest[16] = {
        "Ġt",       "he",       "Ġthe",          "in",           "er",         "Ġa",
        "on",       "Ġs",       "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>",
        "</think>", "[PAD269]", "[PAD270]",      "[PAD271]"};
    char bytes[256][4];
    const char *tokens[272];
    int32_t types[272];
    for (int b = 0; b < 256; b++) {
        int n = uni_encode(gpt2_cp(b), bytes[b]);
        bytes[b][n] = 0;
        tokens[b] = bytes[b];
        types[b] = 1;
    }
    for (int i = 0; i < 16; i++) {
        tokens[256 + i] = rest[i];
        types[256 + i] = i < 8 ? 1 : i < 13 ? 3 : 5;
    }
    if (o->duplicate)
        tokens[271] = tokens[270];
    const char *m[8];
    memcpy(m, merges, sizeof(m));
    if (o->bad_merge)
        m[7] = o->bad_merge;
    gguf_writer_t *w = gguf_writer_create(0);
    if (o->model)
        gguf_writer_set_str(w, "tokenizer.ggml.model", o->model);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen35");
    if (!o->no_tokens)
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, NULL, 272);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, 272);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", m, NULL, 8);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 264);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", o->eos);
    gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 264);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    void *buf;
    size_t len;
    int rc = gguf_writer_write_mem(w, &buf, &len);
    gguf_writer_destroy(w);
    gguf_t *g = NULL;
    if (rc == 0)
        rc = gguf_open_mem(buf, len, &g, err, errlen);
    if (rc == 0)
        rc = tok_create(g, t, err, errlen);
    gguf_close(g);
    free(buf);
    return rc;
}

static const struct tiny_opts tiny_ok = {.model = "gpt2", .eos = 266};

/* ---- tests -------------------------------------------------------------------------------- */

TEST(unicode)
{
    uint32_t cp;
    CHECK_EQ(uni_decode((const uint8_t *)"\xE4\xB8\x96", 3, &cp), 3);
    CHECK_EQ(cp, 0x4E16);
    CHECK_EQ(uni_utf8_check((const uint8_t *)"\xF0\x9F", 2), 0);          /* incomplete */
    CHECK_EQ(uni_utf8_check((const uint8_t *)"\xC0\x80", 2), -1);         /* overlong */
    CHECK_EQ(uni_utf8_check((const uint8_t *)"\xED\xA0\x80", 3), -1);     /* surrogate */
    CHECK_EQ(uni_utf8_check((const uint8_t *)"\xF4\x90\x80\x80", 4), -1); /* > U+10FFFF */
    CHECK_EQ(uni_decode((const uint8_t *)"\xFF", 1, &cp), 1);
    CHECK_EQ(cp, UNI_BAD);
    char b[4];
    CHECK_EQ(uni_encode(0x1F999, b), 4);
    CHECK(memcmp(b, "\xF0\x9F\xA6\x99", 4) == 0);
    CHECK_EQ(uni_encode(0xD800, b), 0);
    CHECK_EQ(uni_flags('a'), UNI_F_LETTER);
    CHECK_EQ(uni_flags(0x4E16), UNI_F_LETTER);
    CHECK_EQ(uni_flags(0x0301), UNI_F_MARK);
    CHECK_EQ(uni_flags(0x00BD), UNI_F_NUMBER); /* ½ is No */
    CHECK_EQ(uni_flags(0x3000), UNI_F_SPACE);
    CHECK_EQ(uni_flags(0x85), UNI_F_SPACE);
    CHECK_EQ(uni_flags(0x1C), 0);   /* isspace() in Python, but not White_Space */
    CHECK_EQ(uni_flags(0x200B), 0); /* zero width space is not White_Space */
    CHECK_EQ(uni_flags(UNI_BAD), 0);
    CHECK_EQ(uni_fold_ascii('S'), 's');
    CHECK_EQ(uni_fold_ascii(0x17F), 's');
    CHECK_EQ(uni_fold_ascii('1'), 0);
}

/* Split s with kind k and compare with the '|'-separated expectation. */
static void check_split(enum pretok_kind k, const char *s, const char *want)
{
    char got[256];
    size_t n = strlen(s), pos = 0, w = 0;
    while (pos < n) {
        size_t len = pretok_next(k, (const uint8_t *)s + pos, n - pos);
        if (w)
            got[w++] = '|';
        memcpy(got + w, s + pos, len);
        w += len;
        pos += len;
    }
    got[w] = 0;
    CHECK_STR_EQ(got, want);
}

TEST(pretok_splits)
{
    check_split(PRETOK_QWEN2, "Hello, world!", "Hello|,| world|!");
    check_split(PRETOK_QWEN2, "I'M here 'lL", "I|'M| here| '|lL");
    check_split(PRETOK_QWEN2, "x\xC5\xBF", "x\xC5\xBF");      /* ſ is a letter */
    check_split(PRETOK_QWEN2, "it'\xC5\xBF", "it|'\xC5\xBF"); /* and folds to s */
    check_split(PRETOK_QWEN2, "12345", "1|2|3|4|5");
    check_split(PRETOK_LLAMA3, "12345", "123|45");
    check_split(PRETOK_QWEN2, "a  b", "a| | b");
    check_split(PRETOK_QWEN2, "a \n\n b  ", "a| \n\n| b|  ");
    check_split(PRETOK_QWEN2, "x...\n\ny", "x|...\n\n|y");
    check_split(PRETOK_QWEN2, " (\xFF\xFE)", " (\xFF\xFE)"); /* bad bytes are symbols */
    /* e + combining acute: the mark splits qwen2 letter runs but not qwen35 ones. */
    check_split(PRETOK_QWEN2, "cafe\xCC\x81s", "cafe|\xCC\x81s");
    check_split(PRETOK_QWEN35, "cafe\xCC\x81s", "cafe\xCC\x81s");
}

TEST(tiny_vocab)
{
    char err[256] = "";
    tok_t *t = NULL;
    CHECK_EQ(tiny_create(&tiny_ok, &t, err, sizeof(err)), 0);
    if (!t) {
        printf("  %s\n", err);
        return;
    }
    static const int32_t want[] = {116, 257, 32,  99, 97,  116, 263, 97,  116, 32, 262,
                                   258, 32,  109, 97, 116, 32,  259, 258, 114, 266};
    const char *s = "the cat sat on the mat in ther<|im_end|>";
    int32_t ids[64];
    int64_t n = enc(t, s, strlen(s), true, ids, 64);
    CHECK_EQ(n, 21);
    for (int i = 0; i < 21 && i < n; i++)
        CHECK_EQ(ids[i], want[i]);
    CHECK_EQ(tok_n_vocab(t), 272);
    CHECK_EQ(tok_bos(t), 264);
    CHECK_EQ(tok_eos(t), 266);
    CHECK(!tok_add_bos(t));
    CHECK(tok_is_eog(t, 266) && tok_is_eog(t, 264) && !tok_is_eog(t, 265));
    CHECK_EQ(tok_token_type(t, 265), TOK_CONTROL);
    CHECK_EQ(tok_find(t, "Ġthe", strlen("Ġthe")), 258);
    size_t len;
    const char *p = tok_piece(t, 258, &len);
    CHECK(len == 4 && memcmp(p, " the", 4) == 0);
    p = tok_piece(t, 266, &len);
    CHECK(len == 10 && memcmp(p, "<|im_end|>", 10) == 0);
    CHECK(tok_piece(t, 272, &len) == NULL);
    /* Without special parsing the marker is plain text. */
    n = enc(t, s, strlen(s), false, ids, 64);
    for (int i = 0; i < n && i < 64; i++)
        CHECK(ids[i] < 264);
    /* Truncated output still reports the full count. */
    CHECK_EQ(tok_encode(t, s, strlen(s), true, ids, 3), 21);
    tok_destroy(t);
}

/* Expect tok_create to fail with code rc and a message containing needle. */
static void check_error(const struct tiny_opts *o, int rc, const char *needle)
{
    char err[256] = "";
    tok_t *t = NULL;
    CHECK_EQ(tiny_create(o, &t, err, sizeof(err)), rc);
    CHECK(t == NULL);
    if (!strstr(err, needle))
        printf("  message '%s' lacks '%s'\n", err, needle);
    CHECK(strstr(err, needle) != NULL);
    tok_destroy(t);
}

TEST(errors)
{
    struct tiny_opts o = tiny_ok;
    o.no_tokens = true;
    check_error(&o, DD_ENOTFOUND, "tokenizer.ggml.tokens");
    o = tiny_ok;
    o.model = "llama";
    check_error(&o, DD_EUNSUPPORTED, "'llama'");
    o.model = NULL;
    check_error(&o, DD_ENOTFOUND, "tokenizer.ggml.model");
    o = tiny_ok;
    o.bad_merge = "Ġ zz";
    check_error(&o, DD_EFORMAT, "entry 7 'Ġ zz'");
    o.bad_merge = "a b c";
    check_error(&o, DD_EFORMAT, "is not two tokens");
    o.bad_merge = "i e"; /* both known, "ie" is not a token */
    check_error(&o, DD_EFORMAT, "merged token");
    o = tiny_ok;
    o.duplicate = true;
    check_error(&o, DD_EFORMAT, "duplicates entry 270");
    o = tiny_ok;
    o.eos = 272;
    check_error(&o, DD_ERANGE, "tokenizer.ggml.eos_token_id");
}

/* Split the .inp file into cases and compare each with the .out line. */
TEST(qwen2_vectors)
{
    if (!qwen)
        return;
    size_t in_len, out_len;
    char *in = slurp(SHARED "/vectors/qwen2.gguf.inp", &in_len);
    char *out = slurp(SHARED "/vectors/qwen2.gguf.out", &out_len);
    CHECK(in && out);
    if (!in || !out)
        goto done;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *cur = in, *line = out;
    int cases = 0;
    for (char *end; (end = strstr(cur, sep)); cur = end + strlen(sep), cases++) {
        char *nl = strchr(line, '\n');
        if (!nl)
            break;
        *nl = 0;
        int32_t ids[1024], want[1024];
        int nw = 0, off;
        for (char *p = line; nw < 1024 && sscanf(p, "%d%n", &want[nw], &off) == 1; p += off)
            nw++;
        int64_t n = enc(qwen, cur, (size_t)(end - cur), false, ids, 1024);
        bool same = n == nw && memcmp(ids, want, (size_t)nw * sizeof(int32_t)) == 0;
        if (!same)
            printf("  case %d '%.*s': got %lld ids, want %d\n", cases, (int)(end - cur), cur,
                   (long long)n, nw);
        CHECK(same);
        CHECK(round_trips(qwen, cur, (size_t)(end - cur)));
        line = nl + 1;
    }
    CHECK_EQ(cases, 46);
done:
    free(in);
    free(out);
}

/* 2000 random strings: raw bytes, valid UTF-8 mixes, and mixes with stray bytes. */
static size_t random_text(unsigned long long *rng, char *s, size_t cap)
{
    static const uint32_t pool[] = {' ',  '\n',  '\t',   'a',     'Z',    '7',    '\'',     '.',
                                    0xE9, 0x301, 0x4E16, 0x1F600, 0x200D, 0x3000, 0x10FFFF, 0xA0};
    int mode = (int)(test_rng_next(rng) % 3);
    size_t n = test_rng_next(rng) % 64, w = 0;
    for (size_t i = 0; i < n && w + 4 <= cap; i++) {
        unsigned long long r = test_rng_next(rng);
        if (mode == 0 || (mode == 2 && r % 5 == 0)) {
            s[w++] = (char)(r >> 8);
            continue;
        }
        uint32_t cp = r % 3 ? pool[(r >> 8) % 16] : (uint32_t)((r >> 8) % 0x30000);
        int len = uni_encode(cp, s + w);
        w += (size_t)len;
    }
    return w;
}

TEST(round_trip_random)
{
    char err[256];
    tok_t *tiny = NULL;
    tiny_create(&tiny_ok, &tiny, err, sizeof(err));
    unsigned long long rng = 0x9E3779B97F4A7C15ull;
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        char s[300];
        size_t n = random_text(&rng, s, sizeof(s));
        bad += tiny && !round_trips(tiny, s, n);
        bad += qwen && !round_trips(qwen, s, n);
    }
    CHECK_EQ(bad, 0);
    tok_destroy(tiny);
}

TEST(specials)
{
    if (!qwen)
        return;
    const char *s = "<|im_start|>user\nhi<|im_end|>";
    int32_t ids[64];
    int64_t n = enc(qwen, s, strlen(s), true, ids, 64);
    CHECK(n >= 3);
    CHECK_EQ(ids[0], 151644);
    CHECK_EQ(ids[n - 1], 151645);
    for (int64_t i = 1; i + 1 < n; i++)
        CHECK(ids[i] < 151643);
    n = enc(qwen, s, strlen(s), false, ids, 64);
    for (int64_t i = 0; i < n; i++)
        CHECK(ids[i] < 151643);
    /* User-defined tokens are matched too, and the longest one wins. */
    const char *u = "<think>x</think><tool_call>";
    n = enc(qwen, u, strlen(u), true, ids, 64);
    CHECK_EQ(n, 4);
    CHECK_EQ(ids[0], 151667);
    CHECK_EQ(ids[2], 151668);
    CHECK_EQ(ids[3], 151657);
    CHECK_EQ(tok_eos(qwen), 151645);
    CHECK_EQ(tok_bos(qwen), -1);
    CHECK(tok_is_eog(qwen, 151645) && tok_is_eog(qwen, 151643) && !tok_is_eog(qwen, 151644));
    CHECK_EQ(tok_token_type(qwen, 151667), TOK_USER_DEFINED);
}

/* Feed ids one by one; every chunk must be valid UTF-8 and the chunks must add up to s. */
static void check_stream(const tok_t *t, const char *s)
{
    int32_t ids[512];
    int64_t n = enc(t, s, strlen(s), false, ids, 512);
    struct tok_stream st;
    tok_stream_init(&st);
    char all[2048], chunk[1024];
    size_t w = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t got = tok_stream_push(t, &st, ids[i], chunk, sizeof(chunk));
        CHECK(valid_utf8(chunk, got));
        memcpy(all + w, chunk, got);
        w += got;
    }
    CHECK_EQ(tok_stream_flush(&st, chunk, sizeof(chunk)), 0);
    CHECK(w == strlen(s) && memcmp(all, s, w) == 0);
}

TEST(stream)
{
    const char *s = "Hello 世界! 🦙🚀 naïve café 😶‍🌫️ 我想在apple工作 ～ "
                    "កាន់តែពិសេស";
    char err[256];
    tok_t *tiny = NULL;
    tiny_create(&tiny_ok, &tiny, err, sizeof(err));
    if (tiny)
        check_stream(tiny, s); /* byte tokens: every multi-byte char is split */
    if (qwen)
        check_stream(qwen, s);
    if (!tiny)
        return;
    /* A stray byte becomes U+FFFD at once; an incomplete tail is released by flush. */
    struct tok_stream st;
    tok_stream_init(&st);
    char out[512];
    size_t n = tok_stream_push(tiny, &st, 0xE4, out, sizeof(out)); /* byte 0xE4 (lead) */
    CHECK_EQ(n, 0);
    n = tok_stream_push(tiny, &st, 'A', out, sizeof(out));
    CHECK(n == 4 && memcmp(out,
                           "\xEF\xBF\xBD"
                           "A",
                           4) == 0);
    n = tok_stream_push(tiny, &st, 0xF0, out, sizeof(out));
    CHECK_EQ(n, 0);
    n = tok_stream_flush(&st, out, sizeof(out));
    CHECK(n == 3 && memcmp(out, "\xEF\xBF\xBD", 3) == 0);
    tok_destroy(tiny);
}

/* ---- the converter on a hand-written tokenizer.json --------------------------------------- */

/* Write s to dir/name; returns false on failure. */
static bool write_text(const char *name, const char *s)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fputs(s, f);
    return fclose(f) == 0;
}

/* Run tok2gguf on dir/tok.json (+ dir/cfg.json) with extra arguments; returns its exit code. */
static int run_tok2gguf(bool with_cfg, const char *extra)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s/tools/tok2gguf %s/tok.json %s%s -o %s/small.gguf %s 2>&1",
             build_dir, tmp_dir, with_cfg ? tmp_dir : "", with_cfg ? "/cfg.json" : "", tmp_dir,
             extra);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* A Split regex of qwen35, JSON-escaped into tok.json along with a small vocabulary. */
static void write_small_tokenizer(const char *merges)
{
    static const char regex[] =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{L}\\\\p{M}]+|\\\\p{N}| "
        "?[^"
        "\\\\s\\\\p{L}\\\\p{M}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+";
    char json[2048];
    snprintf(json, sizeof(json),
             "{\"added_tokens\": [{\"id\": 5, \"content\": \"<|im_end|>\", \"special\": true},"
             " {\"id\": 6, \"content\": \"<think>\", \"special\": false}],"
             " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
             "\"Split\", \"pattern\": {\"Regex\": \"%s\"}}]},"
             " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, "
             "\"\u0120\": 4}, \"merges\": %s}}",
             regex, merges);
    CHECK(write_text("tok.json", json));
}

static gguf_t *open_small(void)
{
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/small.gguf", tmp_dir);
    gguf_t *g = NULL;
    if (gguf_open(path, &g, err, sizeof(err)) != 0)
        printf("  %s\n", err);
    return g;
}

TEST(converter)
{
    write_small_tokenizer("[[\"a\", \"b\"]]");
    CHECK(write_text("cfg.json", "{\"bos_token\": null, \"eos_token\": {\"content\": "
                                 "\"<|im_end|>\"}, \"pad_token\": \"<|im_end|>\", "
                                 "\"add_bos_token\": true, \"chat_template\": \"{{x}}\"}"));
    CHECK_EQ(run_tok2gguf(true, "--vocab-size 8 >/dev/null"), 0);
    gguf_t *g = open_small();
    CHECK(g != NULL);
    if (!g)
        return;
    const char *s;
    size_t len;
    int64_t v;
    CHECK(gguf_get_str(g, "tokenizer.ggml.pre", &s, &len) == 0 && len == 6 &&
          !memcmp(s, "qwen35", 6));
    CHECK(gguf_arr_str(g, "tokenizer.ggml.tokens", 3, &s, &len) == 0 && len == 6 &&
          !memcmp(s, "[PAD3]", 6));
    CHECK(gguf_arr_str(g, "tokenizer.ggml.tokens", 7, &s, &len) == 0 && len == 6);
    CHECK(gguf_arr_str(g, "tokenizer.ggml.tokens", 8, &s, &len) != 0);
    CHECK(gguf_arr_int(g, "tokenizer.ggml.token_type", 3, &v) == 0 && v == TOK_UNUSED);
    CHECK(gguf_arr_int(g, "tokenizer.ggml.token_type", 5, &v) == 0 && v == TOK_CONTROL);
    CHECK(gguf_arr_int(g, "tokenizer.ggml.token_type", 6, &v) == 0 && v == TOK_USER_DEFINED);
    CHECK(gguf_arr_str(g, "tokenizer.ggml.merges", 0, &s, &len) == 0 && len == 3 &&
          !memcmp(s, "a b", 3));
    CHECK(gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v) == 0 && v == 5);
    CHECK(gguf_get_int(g, "tokenizer.ggml.padding_token_id", &v) == 0 && v == 5);
    CHECK_EQ(gguf_find_key(g, "tokenizer.ggml.bos_token_id"), -1);
    bool b = false;
    CHECK(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == 0 && b);
    CHECK(gguf_get_str(g, "tokenizer.chat_template", &s, &len) == 0 && len == 5);
    gguf_close(g);
    /* Failures: a merge that is neither form, an unknown regex without --pre, broken JSON. */
    write_small_tokenizer("[[\"a\"]]");
    CHECK(run_tok2gguf(false, ">/dev/null") != 0);
    CHECK(write_text("tok.json", "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}}"));
    CHECK(run_tok2gguf(false, ">/dev/null") != 0);
    CHECK_EQ(run_tok2gguf(false, "--pre qwen2 >/dev/null"), 0);
    CHECK(write_text("tok.json", "{\"model\": {"));
    CHECK(run_tok2gguf(false, "--pre qwen2 >/dev/null") != 0);
}

/* Load time and encode throughput, for the report (no thresholds beyond sanity). */
TEST(perf)
{
    if (!qwen)
        return;
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/qwen3.gguf", tmp_dir);
    gguf_t *g = NULL;
    tok_t *t = NULL;
    double t0 = dd_now();
    CHECK_EQ(gguf_open(path, &g, err, sizeof(err)), 0);
    CHECK_EQ(tok_create(g, &t, err, sizeof(err)), 0);
    double load = dd_now() - t0;
    gguf_close(g);
    size_t len;
    char *text = slurp(SHARED "/vectors/qwen2.gguf.inp", &len);
    size_t reps = 400, total = 0;
    int64_t cap = (int64_t)len * 2, n_ids = 0;
    int32_t *ids = malloc((size_t)cap * sizeof(int32_t));
    t0 = dd_now();
    for (size_t i = 0; t && text && i < reps; i++) {
        n_ids += tok_encode(t, text, len, false, ids, cap);
        total += len;
    }
    double secs = dd_now() - t0;
    printf("  perf: load %.1f ms (151669 tokens, 151387 merges); encode %.1f MB/s, %.2f M tok/s\n",
           load * 1e3, total / secs / 1e6, n_ids / secs / 1e6);
    CHECK(load < 3.0); /* about 0.1 s in a plain build; sanitizers make it ~10x slower */
    free(ids);
    free(text);
    tok_destroy(t);
}

/* ---- main --------------------------------------------------------------------------------- */

/* Convert the Qwen3 tokenizer with the real tool and load it; NULL when ../shared is absent. */
static tok_t *load_qwen(void)
{
    if (access(SHARED "/qwen3/tokenizer.json", R_OK) != 0) {
        printf("note: %s absent; Qwen3 checks skipped\n", SHARED);
        return NULL;
    }
    char cmd[512], path[128], err[256];
    snprintf(path, sizeof(path), "%s/qwen3.gguf", tmp_dir);
    snprintf(cmd, sizeof(cmd),
             "%s/tools/tok2gguf %s/qwen3/tokenizer.json %s/qwen3/tokenizer_config.json -o %s",
             build_dir, SHARED, SHARED, path);
    CHECK_EQ(system(cmd), 0);
    gguf_t *g = NULL;
    tok_t *t = NULL;
    if (gguf_open(path, &g, err, sizeof(err)) != 0 || tok_create(g, &t, err, sizeof(err)) != 0) {
        printf("  load: %s\n", err);
        CHECK(0);
    }
    gguf_close(g);
    return t;
}

int main(int argc, char **argv)
{
    const char *env = getenv("DELTAD_TEST_BUILD");
    build_dir = argc > 1 ? argv[1] : env ? env : build_dir;
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/deltad-tok-XXXXXX");
    if (!mkdtemp(tmp_dir))
        TEST_SKIP("cannot create a temporary directory");
    qwen = load_qwen();
    RUN(unicode);
    RUN(pretok_splits);
    RUN(tiny_vocab);
    RUN(errors);
    RUN(qwen2_vectors);
    RUN(round_trip_random);
    RUN(specials);
    RUN(stream);
    RUN(converter);
    RUN(perf);
    tok_destroy(qwen);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp_dir);
    if (system(cmd) != 0)
        printf("note: could not remove %s\n", tmp_dir);
    TEST_MAIN_END("test_tok");
}

/*
 * tok2gguf — convert a Hugging Face tokenizer.json (byte-level BPE) and optionally its
 * tokenizer_config.json into a GGUF holding only tokenizer metadata (no tensors):
 *
 *   tok2gguf tokenizer.json [tokenizer_config.json] -o out.gguf [--pre NAME] [--vocab-size N]
 *
 * Vocabulary: model.vocab gives the normal tokens; added_tokens are stored as their raw text,
 * type 3 (control) when "special", else 4 (user-defined); id gaps (and ids up to --vocab-size,
 * the model's embedding rows) are filled with "[PAD<id>]" of type 5. Merges are written as
 * "left right" whichever of the two JSON forms the file uses. The pre-tokenizer name comes from
 * --pre or is recognised from the split regex. bos/eos/pad, add_bos_token and chat_template come
 * from the config.
 *
 * What it is not: a general converter. Only tokenizer.* keys are written.
 *
 * Ownership: the strings collected in struct vocab are borrowed from the cJSON trees, which live
 * until main's cleanup; only the "[PAD<id>]" fillers and merge lines are allocated here.
 * Single-threaded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/model/gguf_writer.h" // defines: gguf_writer_*
#include "engine/model/pretok.h"      // defines: pretok_from_name
#include "engine/util.h"              // defines: xmalloc, xcalloc, dd_errf

#define MAX_VOCAB (1 << 24) /* ids beyond this are refused: they would mean a huge padded table */
#define ERRLEN 512

/* The token table being built. */
struct vocab {
    int32_t n;     /* entries in use (max id + 1) */
    int32_t cap;   /* entries allocated, <= 2 * MAX_VOCAB */
    char **text;   /* [cap] borrowed from cJSON, or owned when owned[i]; NULL = unassigned */
    bool *owned;   /* [cap] text[i] was allocated here */
    int32_t *type; /* [cap] enum tok_type values; 0 = not yet assigned */
};

/* Command line. */
struct args {
    const char *tokenizer, *config, *out, *pre;
    long vocab_size;
};

/* ---- small helpers ------------------------------------------------------------------------ */

/* Read a whole file; *buf is transferred to the caller (free()). */
static int read_file(const char *path, char **buf, size_t *len, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        dd_errf(err, ERRLEN, "%s: cannot open: %s", path, strerror(errno));
        return DD_EIO;
    }
    size_t cap = 1 << 20, n = 0;
    char *b = xmalloc(cap);
    size_t got;
    while ((got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap)
            b = xrealloc(b, cap *= 2);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        dd_errf(err, ERRLEN, "%s: read error", path);
        return DD_EIO;
    }
    *buf = b;
    *len = n;
    return 0;
}

/* Parse a JSON file; the tree is transferred to the caller (cJSON_Delete). */
static int parse_json(const char *path, cJSON **out, char *err)
{
    char *buf;
    size_t len;
    int rc = read_file(path, &buf, &len, err);
    if (rc)
        return rc;
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!*out) {
        dd_errf(err, ERRLEN, "%s: invalid JSON near byte %zu", path,
                end ? (size_t)(end - buf) : (size_t)0);
        rc = DD_EFORMAT;
    }
    free(buf);
    return rc;
}

/* A JSON number that is an integer in [0, MAX_VOCAB). */
static bool json_id(const cJSON *v, int32_t *id)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d < MAX_VOCAB) || d != (double)(int32_t)d)
        return false;
    *id = (int32_t)d;
    return true;
}

/* Make ids [0, n) addressable; new entries are unassigned. Grows geometrically. */
static void vocab_grow(struct vocab *v, int32_t n)
{
    if (n > v->cap) {
        int32_t cap = n > 2 * v->cap ? n : 2 * v->cap;
        v->text = xrealloc(v->text, (size_t)cap * sizeof(char *));
        v->owned = xrealloc(v->owned, (size_t)cap * sizeof(bool));
        v->type = xrealloc(v->type, (size_t)cap * sizeof(int32_t));
        for (int32_t i = v->cap; i < cap; i++) {
            v->text[i] = NULL;
            v->owned[i] = false;
            v->type[i] = 0;
        }
        v->cap = cap;
    }
    if (n > v->n)
        v->n = n;
}

static void vocab_free(struct vocab *v)
{
    for (int32_t i = 0; i < v->n; i++) {
        if (v->owned[i])
            free(v->text[i]);
    }
    free(v->text);
    free(v->owned);
    free(v->type);
}

/* Put text at id; an id already holding a different string is an error. */
static int vocab_set(struct vocab *v, int32_t id, char *text, int32_t type, const char *what,
                     char *err)
{
    vocab_grow(v, id + 1);
    if (v->text[id] && strcmp(v->text[id], text) != 0) {
        dd_errf(err, ERRLEN, "%s: id %d is both '%s' and '%s'", what, id, v->text[id], text);
        return DD_EFORMAT;
    }
    v->text[id] = text;
    v->type[id] = type;
    return 0;
}

/* ---- tokenizer.json ----------------------------------------------------------------------- */

/* model.type must be BPE (absent is accepted); model.vocab maps each GPT-2 form string to its
 * id. These are the normal tokens (type 1). */
static int read_model_vocab(const cJSON *model, struct vocab *v, char *err)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0)) {
        dd_errf(err, ERRLEN, "model.type: '%s' is not supported (only BPE)",
                cJSON_IsString(type) ? type->valuestring : "?");
        return DD_EUNSUPPORTED;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) {
        dd_errf(err, ERRLEN, "model.vocab: missing or not an object");
        return DD_EFORMAT;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab)
    {
        int32_t id;
        if (!json_id(e, &id)) {
            dd_errf(err, ERRLEN, "model.vocab: '%s' has no valid id", e->string);
            return DD_EFORMAT;
        }
        int rc = vocab_set(v, id, e->string, 1, "model.vocab", err);
        if (rc)
            return rc;
    }
    return 0;
}

/* added_tokens carry raw text (not GPT-2 form). One may repeat a model.vocab entry with the same
 * string, which only changes its type; lstrip/rstrip/single_word flags are not kept. */
static int read_added_tokens(const cJSON *root, struct vocab *v, char *err)
{
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!added)
        return 0;
    if (!cJSON_IsArray(added)) {
        dd_errf(err, ERRLEN, "added_tokens: not an array");
        return DD_EFORMAT;
    }
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, added)
    {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        const cJSON *special = cJSON_GetObjectItemCaseSensitive(e, "special");
        int32_t id;
        if (!json_id(cJSON_GetObjectItemCaseSensitive(e, "id"), &id) || !cJSON_IsString(content)) {
            dd_errf(err, ERRLEN, "added_tokens[%d]: needs an integer id and a string content", k);
            return DD_EFORMAT;
        }
        int rc = vocab_set(v, id, content->valuestring, cJSON_IsTrue(special) ? 3 : 4,
                           "added_tokens", err);
        if (rc)
            return rc;
        k++;
    }
    return 0;
}

/* Fill unassigned ids (up to vocab_size) with "[PAD<id>]", type 5 (unused). */
static void fill_gaps(struct vocab *v, long vocab_size)
{
    if (vocab_size > v->n)
        vocab_grow(v, (int32_t)vocab_size);
    for (int32_t i = 0; i < v->n; i++) {
        if (v->text[i])
            continue;
        char buf[32];
        snprintf(buf, sizeof(buf), "[PAD%d]", i);
        v->text[i] = xstrdup(buf);
        v->owned[i] = true;
        v->type[i] = 5;
    }
}

/* One merge as "left right" (heap string, transferred to the caller). */
static char *merge_line(const cJSON *m)
{
    if (cJSON_IsString(m))
        return xstrdup(m->valuestring);
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2)
        return NULL;
    const cJSON *a = cJSON_GetArrayItem(m, 0), *b = cJSON_GetArrayItem(m, 1);
    if (!cJSON_IsString(a) || !cJSON_IsString(b) || strchr(a->valuestring, ' ') ||
        strchr(b->valuestring, ' '))
        return NULL;
    size_t la = strlen(a->valuestring), lb = strlen(b->valuestring);
    char *s = xmalloc(la + lb + 2);
    memcpy(s, a->valuestring, la);
    s[la] = ' ';
    memcpy(s + la + 1, b->valuestring, lb + 1);
    return s;
}

/* Collect model.merges; *lines (each heap string) transferred to the caller. */
static int read_merges(const cJSON *model, char ***lines, int *n, char *err)
{
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) {
        dd_errf(err, ERRLEN, "model.merges: missing or not an array");
        return DD_EFORMAT;
    }
    int count = cJSON_GetArraySize(merges), k = 0;
    *lines = xcalloc((size_t)count + 1, sizeof(char *));
    *n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges)
    {
        (*lines)[k] = merge_line(m);
        if (!(*lines)[k]) {
            dd_errf(err, ERRLEN, "model.merges[%d]: expected \"a b\" or [\"a\", \"b\"]", k);
            return DD_EFORMAT;
        }
        *n = ++k;
    }
    return 0;
}

/* ---- pre-tokenizer name ------------------------------------------------------------------- */

/* The split regexes we implement, as tokenizer.json spells them. */
static const struct {
    const char *name, *regex;
} known_pre[] = {
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}"
              "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"qwen35", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s"
               "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^"
                  "\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

/* First Split regex found in the pre_tokenizer tree (directly or inside a Sequence). */
static const char *find_split_regex(const cJSON *pt)
{
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
    const cJSON *regex = cJSON_GetObjectItemCaseSensitive(pattern, "Regex");
    if (cJSON_IsString(regex))
        return regex->valuestring;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers"))
    {
        const char *r = find_split_regex(e);
        if (r)
            return r;
    }
    return NULL;
}

/* Name the pre-tokenizer by exact comparison of the split regex: anything else might split
 * differently, so it needs an explicit --pre. */
static int detect_pre(const cJSON *root, const char **pre, char *err)
{
    const char *regex = find_split_regex(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    for (size_t i = 0; regex && i < sizeof(known_pre) / sizeof(known_pre[0]); i++) {
        if (strcmp(regex, known_pre[i].regex) == 0) {
            *pre = known_pre[i].name;
            return 0;
        }
    }
    dd_errf(err, ERRLEN,
            "pre_tokenizer: split regex %s%s%s is not one we recognise\n"
            "HINT: pass --pre qwen2|qwen35|llama-bpe if it is equivalent to one of them",
            regex ? "'" : "", regex ? regex : "(none)", regex ? "'" : "");
    return DD_EUNSUPPORTED;
}

/* ---- tokenizer_config.json ---------------------------------------------------------------- */

/* Id of a config token entry (a string or an {"content": ...} object); -1 for null/absent. */
static int config_token(const cJSON *cfg, const char *key, const struct vocab *v, int32_t *id,
                        char *err)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(cfg, key);
    *id = -1;
    if (!e || cJSON_IsNull(e))
        return 0;
    if (cJSON_IsObject(e))
        e = cJSON_GetObjectItemCaseSensitive(e, "content");
    if (!cJSON_IsString(e)) {
        dd_errf(err, ERRLEN, "tokenizer_config: %s: expected a string or null", key);
        return DD_EFORMAT;
    }
    for (int32_t i = 0; i < v->n; i++) {
        if (strcmp(v->text[i], e->valuestring) == 0) {
            *id = i;
            return 0;
        }
    }
    dd_errf(err, ERRLEN, "tokenizer_config: %s: '%s' is not in the vocabulary", key,
            e->valuestring);
    return DD_ENOTFOUND;
}

/* chat_template: a string, or a list of {name, template} of which "default" is taken. */
static const char *config_template(const cJSON *cfg)
{
    const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(tpl))
        return tpl->valuestring;
    const cJSON *e;
    cJSON_ArrayForEach(e, tpl)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *body = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0 &&
            cJSON_IsString(body))
            return body->valuestring;
    }
    return NULL;
}

/* bos/eos/pad ids (a null entry is omitted), add_bos_token (false unless true in the config)
 * and the chat template. */
static int write_config(gguf_writer_t *w, const cJSON *cfg, const struct vocab *v, char *err)
{
    static const char *const keys[][2] = {
        {"bos_token", "tokenizer.ggml.bos_token_id"},
        {"eos_token", "tokenizer.ggml.eos_token_id"},
        {"pad_token", "tokenizer.ggml.padding_token_id"},
    };
    for (int i = 0; i < 3; i++) {
        int32_t id;
        int rc = config_token(cfg, keys[i][0], v, &id, err);
        if (rc)
            return rc;
        if (id >= 0)
            gguf_writer_set_u32(w, keys[i][1], (uint32_t)id);
    }
    const cJSON *add_bos = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", cJSON_IsTrue(add_bos));
    const char *tpl = config_template(cfg);
    if (tpl)
        gguf_writer_set_str(w, "tokenizer.chat_template", tpl);
    return 0;
}

/* ---- main --------------------------------------------------------------------------------- */

static int usage(void)
{
    fprintf(stderr, "usage: tok2gguf tokenizer.json [tokenizer_config.json] -o out.gguf "
                    "[--pre qwen2|qwen35|llama-bpe] [--vocab-size N]\n");
    return 2;
}

/* Positional: tokenizer.json, then an optional tokenizer_config.json. -1 on any misuse. */
static int parse_args(int argc, char **argv, struct args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if ((!strcmp(s, "-o") || !strcmp(s, "--pre") || !strcmp(s, "--vocab-size")) &&
            i + 1 >= argc)
            return -1;
        if (!strcmp(s, "-o"))
            a->out = argv[++i];
        else if (!strcmp(s, "--pre"))
            a->pre = argv[++i];
        else if (!strcmp(s, "--vocab-size"))
            a->vocab_size = strtol(argv[++i], NULL, 10);
        else if (s[0] == '-' || (a->tokenizer && a->config))
            return -1;
        else if (!a->tokenizer)
            a->tokenizer = s;
        else
            a->config = s;
    }
    enum pretok_kind kind;
    bool size_ok = a->vocab_size >= 0 && a->vocab_size <= MAX_VOCAB;
    bool pre_ok = !a->pre || pretok_from_name(a->pre, strlen(a->pre), &kind) == 0;
    return a->tokenizer && a->out && size_ok && pre_ok ? 0 : -1;
}

/* Build the vocabulary and merges from tokenizer.json. */
static int read_tokenizer(const cJSON *root, const struct args *a, struct vocab *v, char ***merges,
                          int *n_merges, char *err)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    int rc;
    if (!cJSON_IsObject(model)) {
        dd_errf(err, ERRLEN, "model: missing or not an object");
        return DD_EFORMAT;
    }
    if ((rc = read_model_vocab(model, v, err)) || (rc = read_added_tokens(root, v, err)) ||
        (rc = read_merges(model, merges, n_merges, err)))
        return rc;
    if (v->n == 0) {
        dd_errf(err, ERRLEN, "model.vocab: empty");
        return DD_EFORMAT;
    }
    fill_gaps(v, a->vocab_size);
    return 0;
}

static void write_tokenizer(gguf_writer_t *w, const struct vocab *v, char **merges, int n_merges,
                            const char *pre)
{
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->text, NULL,
                            (uint64_t)v->n);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", v->type, (uint64_t)v->n);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, NULL,
                            (uint64_t)n_merges);
}

/* Read, validate, write; every failure path ends at out: with the message in err. */
int main(int argc, char **argv)
{
    struct args a = {0};
    if (parse_args(argc, argv, &a) != 0)
        return usage();
    char err[ERRLEN] = "";
    struct vocab v = {0};
    cJSON *root = NULL, *cfg = NULL;
    char **merges = NULL;
    int n_merges = 0, rc;
    gguf_writer_t *w = NULL;
    if ((rc = parse_json(a.tokenizer, &root, err)) ||
        (a.config && (rc = parse_json(a.config, &cfg, err))) ||
        (rc = read_tokenizer(root, &a, &v, &merges, &n_merges, err)) ||
        (!a.pre && (rc = detect_pre(root, &a.pre, err))))
        goto out;
    w = gguf_writer_create(0);
    write_tokenizer(w, &v, merges, n_merges, a.pre);
    if ((cfg && (rc = write_config(w, cfg, &v, err))) ||
        (rc = gguf_writer_write_file(w, a.out, err, sizeof(err))))
        goto out;
    printf("tok2gguf: %s: %d tokens, %d merges, pre %s\n", a.out, v.n, n_merges, a.pre);
out:
    if (rc)
        fprintf(stderr, "tok2gguf: %s\n", err);
    if (w)
        gguf_writer_destroy(w);
    for (int i = 0; merges && merges[i]; i++)
        free(merges[i]);
    free(merges);
    vocab_free(&v);
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return rc ? 1 : 0;
}

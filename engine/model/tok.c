/*
 * tok — byte-level BPE over a GGUF vocabulary (tokenizer.ggml.model = "gpt2").
 *
 * Encoding runs in three stages: special-token strings are cut out of the text (only when the
 * caller asks for it), each remaining stretch is split by the pre-tokenizer (pretok.c), and
 * each piece is merged by BPE, starting from one symbol per byte. Merges are looked up by the
 * pair of token ids in an open-addressing table, and applied lowest rank first, leftmost first
 * on ties, exactly as HF tokenizers does.
 *
 * Invariants after tok_create:
 *   - token strings are unique; every merge names two known tokens and its result is a token;
 *   - each of the 256 bytes has a single-character token (byte_tok), so every byte string
 *     encodes;
 *   - bos/eos/eot/eom/pad are -1 or valid ids.
 *
 * Thread safety: a tok_t is read-only after tok_create; encoding allocates its scratch per call,
 * so any number of threads may encode and decode at once.
 */
#include "tok.h" // defines: tok_t, tok_create, tok_encode

#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xmalloc, dd_errf, DD_E*, LOG_W
#include "pretok.h"      // defines: pretok_next, pretok_from_name
#include "uni.h"         // defines: uni_decode, uni_encode, uni_utf8_check

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_MERGES "tokenizer.ggml.merges"

/* One merge rule in the pair table; key = left id << 32 | right id, UINT64_MAX = empty. */
struct merge_slot {
    uint64_t key;
    int32_t rank; /* index in tokenizer.ggml.merges: lower merges first */
    int32_t id;   /* token of the concatenation */
};

/* A token in the string hash; tag (the hash's high bits) skips most string compares. */
struct index_slot {
    uint32_t tag;
    int32_t id; /* -1 = empty */
};

/* A special (control or user-defined) token as the text matcher sees it. */
struct special {
    int32_t id;
    uint32_t len;
    uint8_t first; /* the text's first byte */
};

struct tok {
    int32_t n_vocab;
    enum pretok_kind pre;
    char *text;               /* token strings back to back, GPT-2 byte-encoded form */
    uint32_t *text_off;       /* [n_vocab + 1] token i is text[text_off[i] .. text_off[i+1]) */
    char *piece;              /* the raw bytes of each token, back to back */
    uint32_t *piece_off;      /* [n_vocab + 1] */
    uint8_t *type;            /* [n_vocab] enum tok_type */
    uint8_t *eog;             /* [n_vocab] 1 = ends generation */
    struct index_slot *index; /* [index_mask + 1] string hash of the token ids */
    uint64_t index_mask;
    struct merge_slot *merges; /* [merge_mask + 1] */
    uint64_t merge_mask;
    int32_t byte_tok[256];    /* token of each single byte */
    struct special *specials; /* [n_specials] by first byte, then longest first */
    int32_t n_specials;
    int32_t special_start[257]; /* specials starting with byte b: [start[b], start[b+1]) */
    int32_t bos, eos, eot, eom, pad;
    bool add_bos;
};

/* ---- GPT-2 byte <-> unicode mapping ------------------------------------------------------- */

/* GPT-2 shows printable Latin-1 bytes as themselves and shifts the other 68 bytes (controls,
 * space, DEL, NBSP, soft hyphen) to U+0100.. in byte order, so every byte is a visible char. */
static uint32_t gpt2_byte_to_cp(uint8_t b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return b;
    uint32_t shifted = 0;
    for (int c = 0; c < b; c++) {
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE))
            shifted++;
    }
    return 0x100 + shifted;
}

/* Inverse table: cp_to_byte[cp] for cp < 0x144, -1 where cp is no byte's image. */
#define GPT2_CP_LIMIT 0x144
static void gpt2_inverse(int16_t cp_to_byte[GPT2_CP_LIMIT])
{
    for (int i = 0; i < GPT2_CP_LIMIT; i++)
        cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++)
        cp_to_byte[gpt2_byte_to_cp((uint8_t)b)] = (int16_t)b;
}

/* Decode a GPT-2 form string into raw bytes (dst has room for n bytes). False when it holds a
 * character that is no byte's image. */
static bool gpt2_decode(const int16_t *cp_to_byte, const char *s, size_t n, char *dst,
                        size_t *out_len)
{
    size_t i = 0, k = 0;
    while (i < n) {
        uint32_t cp;
        i += (size_t)uni_decode((const uint8_t *)s + i, n - i, &cp);
        if (cp >= GPT2_CP_LIMIT || cp_to_byte[cp] < 0)
            return false;
        dst[k++] = (char)cp_to_byte[cp];
    }
    *out_len = k;
    return true;
}

/* ---- hash tables -------------------------------------------------------------------------- */

/* FNV-1a, fed in pieces so a merge's "left" + "right" hashes like the merged token without
 * building the string. Tokens are short (a few bytes on average), where FNV is hard to beat. */
static uint64_t fnv_step(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* Table sizes are powers of two (>= 16) so probing wraps with a mask. */
static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t cap = 16;
    while (cap < n)
        cap <<= 1;
    return cap;
}

/* The vocabulary string of a valid id (GPT-2 form, not NUL-terminated). */
static const char *tok_text(const tok_t *t, int32_t id, size_t *len)
{
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

/* Id of the token spelled a[0..an) followed by b[0..bn), or -1. */
static int32_t index_find2(const tok_t *t, const char *a, size_t an, const char *b, size_t bn)
{
    uint64_t h = fnv_step(fnv_step(1469598103934665603ull, a, an), b, bn);
    uint32_t tag = (uint32_t)(h >> 32);
    for (h &= t->index_mask;; h = (h + 1) & t->index_mask) {
        const struct index_slot *slot = &t->index[h];
        if (slot->id < 0)
            return -1;
        if (slot->tag != tag)
            continue;
        size_t len;
        const char *s = tok_text(t, slot->id, &len);
        if (len == an + bn && memcmp(s, a, an) == 0 && memcmp(s + an, b, bn) == 0)
            return slot->id;
    }
}

/* Insert token id; returns the id of an earlier token with the same string, or -1. */
static int32_t index_insert(tok_t *t, int32_t id)
{
    size_t len;
    const char *s = tok_text(t, id, &len);
    uint64_t h = fnv_step(1469598103934665603ull, s, len);
    uint32_t tag = (uint32_t)(h >> 32);
    for (h &= t->index_mask; t->index[h].id >= 0; h = (h + 1) & t->index_mask) {
        size_t olen;
        const char *o = tok_text(t, t->index[h].id, &olen);
        if (t->index[h].tag == tag && olen == len && memcmp(o, s, len) == 0)
            return t->index[h].id;
    }
    t->index[h] = (struct index_slot){tag, id};
    return -1;
}

/* Fibonacci hashing: the product's high bits mix both ids; shifting by 29 keeps 35 of them,
 * more than any table here needs. */
static uint64_t merge_hash(uint64_t key, uint64_t mask)
{
    return ((key * 0x9E3779B97F4A7C15ull) >> 29) & mask;
}

/* Rank slot of the pair (left, right), or NULL when they do not merge. */
static const struct merge_slot *merge_find(const tok_t *t, int32_t left, int32_t right)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t h = merge_hash(key, t->merge_mask);; h = (h + 1) & t->merge_mask) {
        const struct merge_slot *m = &t->merges[h];
        if (m->key == key)
            return m;
        if (m->key == UINT64_MAX)
            return NULL;
    }
}

/* Add a merge; a repeated pair keeps its first (lowest) rank. */
static void merge_insert(tok_t *t, int32_t left, int32_t right, int32_t rank, int32_t id)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t h = merge_hash(key, t->merge_mask);
    for (; t->merges[h].key != UINT64_MAX; h = (h + 1) & t->merge_mask) {
        if (t->merges[h].key == key)
            return;
    }
    t->merges[h] = (struct merge_slot){key, rank, id};
}

/* ---- loading ------------------------------------------------------------------------------ */

/* tokenizer.ggml.model must be "gpt2"; tokenizer.ggml.pre picks the split flavour. */
static int load_kind(tok_t *t, const gguf_t *g, char *err, size_t errlen)
{
    const char *s;
    size_t len;
    int rc = gguf_get_str(g, KEY_MODEL, &s, &len);
    if (rc) {
        dd_errf(err, errlen, "%s: %s (expected the string \"gpt2\")", KEY_MODEL,
                rc == DD_ENOTFOUND ? "missing" : "not a string");
        return rc;
    }
    if (len != 4 || memcmp(s, "gpt2", 4) != 0) {
        dd_errf(err, errlen, "%s: '%.*s' is not supported (only \"gpt2\", byte-level BPE)",
                KEY_MODEL, (int)(len > 64 ? 64 : len), s);
        return DD_EUNSUPPORTED;
    }
    rc = gguf_get_str(g, KEY_PRE, &s, &len);
    if (rc == DD_ENOTFOUND) {
        LOG_W("%s missing; using the qwen2 pre-tokenizer", KEY_PRE);
        t->pre = PRETOK_QWEN2;
        return 0;
    }
    if (rc || pretok_from_name(s, len, &t->pre) != 0) {
        dd_errf(err, errlen, "%s: '%.*s' is not supported (known: qwen2, qwen35, llama-bpe)",
                KEY_PRE, rc ? 0 : (int)(len > 64 ? 64 : len), rc ? "" : s);
        return DD_EUNSUPPORTED;
    }
    if (len == 7 && memcmp(s, "default", 7) == 0)
        LOG_W("%s is 'default'; using the qwen2 pre-tokenizer", KEY_PRE);
    return 0;
}

/* Copy the token strings into one blob (text, text_off). Offsets are 32-bit, so the blob is
 * capped at 4 GiB; real vocabularies use a few MiB. */
static int copy_tokens(tok_t *t, const gguf_t *g, char *err, size_t errlen)
{
    uint64_t n = (uint64_t)t->n_vocab, total = 0;
    t->text_off = xmalloc((n + 1) * sizeof(uint32_t));
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        gguf_arr_str(g, KEY_TOKENS, i, &s, &len);
        t->text_off[i] = (uint32_t)total;
        total += len;
        if (total > UINT32_MAX) {
            dd_errf(err, errlen, "%s: strings exceed 4 GiB", KEY_TOKENS);
            return DD_EFORMAT;
        }
    }
    t->text_off[n] = (uint32_t)total;
    t->text = xmalloc(total);
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        gguf_arr_str(g, KEY_TOKENS, i, &s, &len);
        memcpy(t->text + t->text_off[i], s, len);
    }
    return 0;
}

/* Build the string hash; a repeated string is an error (ids would be ambiguous). */
static int index_tokens(tok_t *t, char *err, size_t errlen)
{
    t->index_mask = pow2_at_least(2 * (uint64_t)t->n_vocab) - 1;
    t->index = xmalloc((t->index_mask + 1) * sizeof(struct index_slot));
    memset(t->index, 0xff, (t->index_mask + 1) * sizeof(struct index_slot));
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int32_t dup = index_insert(t, i);
        if (dup >= 0) {
            size_t len;
            const char *s = tok_text(t, i, &len);
            dd_errf(err, errlen, "%s: entry %d '%.*s' duplicates entry %d", KEY_TOKENS, i,
                    (int)(len > 64 ? 64 : len), s, dup);
            return DD_EFORMAT;
        }
    }
    return 0;
}

/* The vocabulary: a non-empty string array, copied and indexed. */
static int load_tokens(tok_t *t, const gguf_t *g, char *err, size_t errlen)
{
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    int rc = gguf_get_arr(g, KEY_TOKENS, &et, &n, &data);
    if (rc == DD_ENOTFOUND) {
        dd_errf(err, errlen, "%s: missing (the vocabulary is required)", KEY_TOKENS);
        return rc;
    }
    if (rc || et != GGUF_T_STRING || n == 0 || n > INT32_MAX / 4) {
        dd_errf(err, errlen, "%s: expected a non-empty array of strings", KEY_TOKENS);
        return rc ? rc : DD_ETYPE;
    }
    t->n_vocab = (int32_t)n;
    if ((rc = copy_tokens(t, g, err, errlen)))
        return rc;
    return index_tokens(t, err, errlen);
}

/* Token types, optional (all normal when absent). 0 (llama.cpp's "undefined") reads as normal. */
static int load_types(tok_t *t, const gguf_t *g, char *err, size_t errlen)
{
    t->type = xmalloc((size_t)t->n_vocab);
    memset(t->type, TOK_NORMAL, (size_t)t->n_vocab);
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    int rc = gguf_get_arr(g, KEY_TYPES, &et, &n, &data);
    if (rc == DD_ENOTFOUND)
        return 0;
    if (rc || n != (uint64_t)t->n_vocab) {
        dd_errf(err, errlen, "%s: expected an integer array of %d entries (one per token)",
                KEY_TYPES, t->n_vocab);
        return rc ? rc : DD_EFORMAT;
    }
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int64_t v;
        rc = gguf_arr_int(g, KEY_TYPES, (uint64_t)i, &v);
        if (rc || v < 0 || v > TOK_BYTE) {
            dd_errf(err, errlen, "%s: entry %d is not a token type 0..6", KEY_TYPES, i);
            return rc ? rc : DD_EFORMAT;
        }
        t->type[i] = v ? (uint8_t)v : TOK_NORMAL;
    }
    return 0;
}

/* The single-byte tokens every byte-level vocabulary has; BPE starts from them. */
static int load_byte_tokens(tok_t *t, char *err, size_t errlen)
{
    for (int b = 0; b < 256; b++) {
        char u[4];
        int n = uni_encode(gpt2_byte_to_cp((uint8_t)b), u);
        t->byte_tok[b] = index_find2(t, u, (size_t)n, "", 0);
        if (t->byte_tok[b] < 0) {
            dd_errf(err, errlen, "%s: no token for byte 0x%02X ('%.*s'); gpt2 needs all 256",
                    KEY_TOKENS, b, n, u);
            return DD_EFORMAT;
        }
    }
    return 0;
}

/* Parse merge i ("left right") into the pair table. */
static int load_merge(tok_t *t, const char *s, size_t len, uint64_t i, char *err, size_t errlen)
{
    const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
    int shown = (int)(len > 64 ? 64 : len);
    if (!sp || sp + 1 == s + len || memchr(sp + 1, ' ', (size_t)(s + len - sp - 1))) {
        dd_errf(err, errlen, "%s: entry %llu '%.*s' is not two tokens", KEY_MERGES,
                (unsigned long long)i, shown, s);
        return DD_EFORMAT;
    }
    size_t ln = (size_t)(sp - s), rn = len - ln - 1;
    int32_t left = index_find2(t, s, ln, "", 0);
    int32_t right = index_find2(t, sp + 1, rn, "", 0);
    int32_t id = index_find2(t, s, ln, sp + 1, rn);
    if (left < 0 || right < 0 || id < 0) {
        dd_errf(err, errlen, "%s: entry %llu '%.*s': %s is not in the vocabulary", KEY_MERGES,
                (unsigned long long)i, shown, s,
                left < 0    ? "the left token"
                : right < 0 ? "the right token"
                            : "the merged token");
        return DD_EFORMAT;
    }
    merge_insert(t, left, right, (int32_t)i, id);
    return 0;
}

static int load_merges(tok_t *t, const gguf_t *g, char *err, size_t errlen)
{
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    int rc = gguf_get_arr(g, KEY_MERGES, &et, &n, &data);
    if (rc || et != GGUF_T_STRING || n > INT32_MAX / 4) {
        dd_errf(err, errlen, "%s: %s", KEY_MERGES,
                rc == DD_ENOTFOUND ? "missing (required for gpt2)"
                                   : "expected an array of strings");
        return rc ? rc : DD_ETYPE;
    }
    t->merge_mask = pow2_at_least(n + n / 2) - 1; /* load factor <= 2/3 */
    t->merges = xmalloc((t->merge_mask + 1) * sizeof(struct merge_slot));
    memset(t->merges, 0xff, (t->merge_mask + 1) * sizeof(struct merge_slot));
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        gguf_arr_str(g, KEY_MERGES, i, &s, &len);
        rc = load_merge(t, s, len, i, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* An optional token id key: -1 when absent, else validated against the vocabulary. */
static int load_id(const tok_t *t, const gguf_t *g, const char *key, int32_t *out, char *err,
                   size_t errlen)
{
    int64_t v;
    *out = -1;
    int rc = gguf_get_int(g, key, &v);
    if (rc == DD_ENOTFOUND)
        return 0;
    if (rc || v < 0 || v >= t->n_vocab) {
        dd_errf(err, errlen, "%s: %s %lld is not a token id (n_vocab %d)", key, rc ? "value" : "id",
                rc ? -1LL : (long long)v, t->n_vocab);
        return rc ? rc : DD_ERANGE;
    }
    *out = (int32_t)v;
    return 0;
}

static int load_ids(tok_t *t, const gguf_t *g, char *err, size_t errlen)
{
    int rc;
    if ((rc = load_id(t, g, "tokenizer.ggml.bos_token_id", &t->bos, err, errlen)) ||
        (rc = load_id(t, g, "tokenizer.ggml.eos_token_id", &t->eos, err, errlen)) ||
        (rc = load_id(t, g, "tokenizer.ggml.eot_token_id", &t->eot, err, errlen)) ||
        (rc = load_id(t, g, "tokenizer.ggml.eom_token_id", &t->eom, err, errlen)) ||
        (rc = load_id(t, g, "tokenizer.ggml.padding_token_id", &t->pad, err, errlen)))
        return rc;
    rc = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    if (rc == DD_ENOTFOUND) {
        t->add_bos = false;
        rc = 0;
    } else if (rc) {
        dd_errf(err, errlen, "tokenizer.ggml.add_bos_token: expected a bool");
    }
    return rc;
}

/* Raw bytes per token: control and user-defined tokens are their text, the rest GPT-2
 * decoded (falling back to the text for a string that is not in GPT-2 form). */
static void build_pieces(tok_t *t)
{
    int16_t cp_to_byte[GPT2_CP_LIMIT];
    gpt2_inverse(cp_to_byte);
    /* Decoding never lengthens a string, so the text blob's size is enough. */
    t->piece = xmalloc(t->text_off[t->n_vocab] + 1);
    t->piece_off = xmalloc(((size_t)t->n_vocab + 1) * sizeof(uint32_t));
    uint32_t at = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        size_t len, out_len = 0;
        const char *s = tok_text(t, i, &len);
        bool raw = t->type[i] == TOK_CONTROL || t->type[i] == TOK_USER_DEFINED;
        if (raw || !gpt2_decode(cp_to_byte, s, len, t->piece + at, &out_len)) {
            memcpy(t->piece + at, s, len);
            out_len = len;
        }
        t->piece_off[i] = at;
        at += (uint32_t)out_len;
    }
    t->piece_off[t->n_vocab] = at;
}

/* Order: first byte, then longest first, then id. */
static int special_cmp(const void *a, const void *b)
{
    const struct special *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Index the control and user-defined tokens by first byte, longest first, for the matcher. */
static void build_specials(tok_t *t)
{
    t->specials = xmalloc((size_t)t->n_vocab * sizeof(struct special));
    t->n_specials = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        size_t len;
        const char *s = tok_text(t, i, &len);
        if ((t->type[i] == TOK_CONTROL || t->type[i] == TOK_USER_DEFINED) && len > 0)
            t->specials[t->n_specials++] = (struct special){i, (uint32_t)len, (uint8_t)s[0]};
    }
    qsort(t->specials, (size_t)t->n_specials, sizeof(struct special), special_cmp);
    int32_t k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < t->n_specials && t->specials[k].first < b)
            k++;
        t->special_start[b] = k;
    }
}

/* End of generation: the declared eos/eot/eom plus tokens whose text says so (llama.cpp marks
 * these too, since many files declare only one of them). */
static void mark_eog(tok_t *t)
{
    static const char *const names[] = {
        "<|im_end|>",    "<|endoftext|>",   "<|eot_id|>", "<|eom_id|>", "<|end|>",
        "<end_of_turn>", "<|end_of_text|>", "<EOT>",      "<|return|>", "<|call|>",
    };
    t->eog = xcalloc((size_t)t->n_vocab, 1);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        int32_t id = index_find2(t, names[i], strlen(names[i]), "", 0);
        if (id >= 0)
            t->eog[id] = 1;
    }
    int32_t declared[3] = {t->eos, t->eot, t->eom};
    for (int i = 0; i < 3; i++) {
        if (declared[i] >= 0)
            t->eog[declared[i]] = 1;
    }
}

/* Each loader names the key in its error message; the build_* steps cannot fail. */
int tok_create(const gguf_t *g, tok_t **out, char *err, size_t errlen)
{
    tok_t *t = xcalloc(1, sizeof(*t));
    int rc;
    *out = NULL;
    if ((rc = load_kind(t, g, err, errlen)) || (rc = load_tokens(t, g, err, errlen)) ||
        (rc = load_types(t, g, err, errlen)) || (rc = load_byte_tokens(t, err, errlen)) ||
        (rc = load_merges(t, g, err, errlen)) || (rc = load_ids(t, g, err, errlen)))
        goto fail;
    build_pieces(t);
    build_specials(t);
    mark_eog(t);
    *out = t;
    return 0;
fail:
    tok_destroy(t);
    return rc;
}

void tok_destroy(tok_t *t)
{
    if (!t)
        return;
    free(t->text);
    free(t->text_off);
    free(t->piece);
    free(t->piece_off);
    free(t->type);
    free(t->eog);
    free(t->index);
    free(t->merges);
    free(t->specials);
    free(t);
}

/* ---- queries ------------------------------------------------------------------------------ */

int32_t tok_n_vocab(const tok_t *t)
{
    return t->n_vocab;
}

int32_t tok_bos(const tok_t *t)
{
    return t->bos;
}

int32_t tok_eos(const tok_t *t)
{
    return t->eos;
}

bool tok_add_bos(const tok_t *t)
{
    return t->add_bos;
}

bool tok_is_eog(const tok_t *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

/* Out-of-range ids read as TOK_UNUSED. */
enum tok_type tok_token_type(const tok_t *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? (enum tok_type)t->type[id] : TOK_UNUSED;
}

int32_t tok_find(const tok_t *t, const char *text, size_t len)
{
    return index_find2(t, text, len, "", 0);
}

const char *tok_piece(const tok_t *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->piece + t->piece_off[id];
}

/* ---- BPE ---------------------------------------------------------------------------------- */

/* A symbol of the word being merged; a symbol absorbed by its left neighbour has len 0. */
struct sym {
    int32_t id;
    int32_t prev, next; /* neighbours, -1 at the ends */
    int32_t len;        /* bytes covered */
};

/* A candidate merge of symbols left and right. Stale once either has changed, which shows as
 * left.next != right or a different combined length. */
struct cand {
    int32_t rank, left, right, len, id;
};

/* Per-call encoder state: the output and the scratch (sized for the longest word so far). */
struct enc {
    const tok_t *t;
    int32_t *ids;
    int64_t max_ids, count;
    struct sym *sym;   /* [cap] */
    struct cand *heap; /* [3 * cap]: n-1 initial pairs plus at most 2 per merge */
    size_t cap, n_heap;
};

/* Store an id if it fits; count it either way so the caller learns the size needed. */
static void emit(struct enc *e, int32_t id)
{
    if (e->count < e->max_ids)
        e->ids[e->count] = id;
    e->count++;
}

/* Grow the scratch for a word of n bytes; the size follows the caller's text, so failure is an
 * error, not an abort (STYLE rule 16). */
static int reserve(struct enc *e, size_t n)
{
    if (n <= e->cap)
        return 0;
    size_t cap = n < 64 ? 64 : n;
    struct sym *s = realloc(e->sym, cap * sizeof(*s));
    if (s)
        e->sym = s;
    struct cand *h =
        s && cap <= SIZE_MAX / 3 / sizeof(*h) ? realloc(e->heap, 3 * cap * sizeof(*h)) : NULL;
    if (!h)
        return DD_ENOMEM;
    e->heap = h;
    e->cap = cap;
    return 0;
}

/* Heap order: lowest rank first, then leftmost (HF's tie rule). */
static bool cand_less(const struct cand *a, const struct cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

/* Queue the merge of symbols l and r if the vocabulary has one. */
static void heap_push_pair(struct enc *e, int32_t l, int32_t r)
{
    const struct merge_slot *m = merge_find(e->t, e->sym[l].id, e->sym[r].id);
    if (!m)
        return;
    struct cand c = {m->rank, l, r, e->sym[l].len + e->sym[r].len, m->id};
    size_t i = e->n_heap++;
    while (i > 0 && cand_less(&c, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = c;
}

/* Remove and return the smallest candidate (sift the last entry down from the root). */
static struct cand heap_pop(struct enc *e)
{
    struct cand top = e->heap[0], last = e->heap[--e->n_heap];
    size_t i = 0, n = e->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && cand_less(&e->heap[c + 1], &e->heap[c]))
            c++;
        if (!cand_less(&e->heap[c], &last))
            break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    e->heap[i] = last;
    return top;
}

/* Merge the word w[0..n) (one pre-token) and emit its ids. Symbols start as single bytes and
 * live in a linked list over the array; candidates for every adjacent pair wait in a heap, and
 * merging two symbols queues the new pairs with both neighbours. Stale candidates are skipped
 * when popped, so each merge costs O(log n). */
static int bpe_word(struct enc *e, const uint8_t *w, size_t n)
{
    if (n == 1) {
        emit(e, e->t->byte_tok[w[0]]);
        return 0;
    }
    if (n > INT32_MAX || reserve(e, n))
        return DD_ENOMEM;
    struct sym *s = e->sym;
    for (size_t i = 0; i < n; i++)
        s[i] = (struct sym){e->t->byte_tok[w[i]], (int32_t)i - 1, (int32_t)i + 1, 1};
    s[n - 1].next = -1;
    e->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++)
        heap_push_pair(e, (int32_t)i, (int32_t)i + 1);
    while (e->n_heap > 0) {
        struct cand c = heap_pop(e);
        struct sym *l = &s[c.left], *r = &s[c.right];
        if (l->len == 0 || l->next != c.right || l->len + r->len != c.len)
            continue; /* stale */
        l->id = c.id;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (l->next >= 0)
            s[l->next].prev = c.left;
        if (l->prev >= 0)
            heap_push_pair(e, l->prev, c.left);
        if (l->next >= 0)
            heap_push_pair(e, c.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = s[i].next)
        emit(e, s[i].id);
    return 0;
}

/* ---- encoding ----------------------------------------------------------------------------- */

/* Pre-tokenize and merge plain text (no special-token parsing). */
static int encode_plain(struct enc *e, const uint8_t *s, size_t n)
{
    size_t pos = 0;
    while (pos < n) {
        size_t len = pretok_next(e->t->pre, s + pos, n - pos);
        int rc = bpe_word(e, s + pos, len);
        if (rc)
            return rc;
        pos += len;
    }
    return 0;
}

/* Length of the longest special token at s[0..n), or 0; its id in *id. */
static size_t match_special(const tok_t *t, const uint8_t *s, size_t n, int32_t *id)
{
    for (int32_t k = t->special_start[s[0]]; k < t->special_start[s[0] + 1]; k++) {
        const struct special *sp = &t->specials[k];
        if (sp->len <= n && memcmp(t->text + t->text_off[sp->id], s, sp->len) == 0) {
            *id = sp->id;
            return sp->len;
        }
    }
    return 0;
}

/* Cut special tokens out of s (leftmost, then longest) and encode the stretches between them
 * as plain text. The scan is per byte, but special_start makes a non-candidate byte cost one
 * table read. */
static int encode_text(struct enc *e, const uint8_t *s, size_t n, bool parse_special)
{
    if (!parse_special || e->t->n_specials == 0)
        return encode_plain(e, s, n);
    size_t seg = 0, pos = 0;
    while (pos < n) {
        int32_t id;
        size_t len = match_special(e->t, s + pos, n - pos, &id);
        if (len == 0) {
            pos++;
            continue;
        }
        int rc = encode_plain(e, s + seg, pos - seg);
        if (rc)
            return rc;
        emit(e, id);
        pos += len;
        seg = pos;
    }
    return encode_plain(e, s + seg, n - seg);
}

int64_t tok_encode(const tok_t *t, const char *text, size_t len, bool parse_special, int32_t *ids,
                   int64_t max_ids)
{
    if ((!text && len > 0) || (!ids && max_ids > 0))
        return DD_EINVAL;
    struct enc e = {.t = t, .ids = ids, .max_ids = max_ids < 0 ? 0 : max_ids};
    int rc = encode_text(&e, (const uint8_t *)text, len, parse_special);
    free(e.sym);
    free(e.heap);
    return rc ? rc : e.count;
}

/* ---- decoding ----------------------------------------------------------------------------- */

/* Raw concatenation of the pieces (no UTF-8 repair: decode(encode(x)) == x for any bytes);
 * out-of-range ids contribute nothing. A short cap truncates but the full size is returned. */
size_t tok_decode(const tok_t *t, const int32_t *ids, int64_t n, char *out, size_t cap)
{
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *p = tok_piece(t, ids[i], &len);
        if (!p)
            continue;
        if (total + len <= cap)
            memcpy(out + total, p, len);
        else if (total < cap)
            memcpy(out + total, p, cap - total);
        total += len;
    }
    return total;
}

void tok_stream_init(struct tok_stream *s)
{
    s->npend = 0;
}

/* Append n bytes to out[*w..cap). The caller sizes cap per the header; should a piece of many
 * invalid bytes (3 output bytes each) still overflow it, the excess is dropped, never
 * written past cap. */
static void put(char *out, size_t cap, size_t *w, const void *src, size_t n)
{
    if (*w + n > cap) {
        LOG_W("stream output exceeds %zu bytes; dropping %zu", cap, n);
        return;
    }
    memcpy(out + *w, src, n);
    *w += n;
}

size_t tok_stream_push(const tok_t *t, struct tok_stream *s, int32_t id, char *out, size_t cap)
{
    size_t len, w = 0;
    const char *p = tok_piece(t, id, &len);
    if (!p)
        return 0;
    /* Walk the held-back bytes followed by the piece as one sequence. */
    size_t total = (size_t)s->npend + len, i = 0;
    uint8_t c[4];
    while (i < total) {
        size_t avail = total - i < 4 ? total - i : 4;
        for (size_t k = 0; k < avail; k++)
            c[k] = (uint8_t)(i + k < (size_t)s->npend ? s->pend[i + k] : p[i + k - s->npend]);
        int r = uni_utf8_check(c, avail);
        if (r == 0)
            break; /* a valid prefix at the very end: hold it back */
        if (r < 0) {
            put(out, cap, &w, "\xEF\xBF\xBD", 3);
            i++;
            continue;
        }
        put(out, cap, &w, c, (size_t)r);
        i += (size_t)r;
    }
    /* Fewer than 4 bytes remain; c still holds them, as the last check read them. */
    s->npend = (int)(total - i);
    memcpy(s->pend, c, (size_t)s->npend);
    return w;
}

size_t tok_stream_flush(struct tok_stream *s, char *out, size_t cap)
{
    size_t w = 0;
    if (s->npend > 0)
        put(out, cap, &w, "\xEF\xBF\xBD", 3);
    s->npend = 0;
    return w;
}

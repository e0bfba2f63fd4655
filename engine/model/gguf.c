/*
 * gguf — reader of GGUF v2/v3 containers (the writer is gguf_writer.c).
 *
 * The file is mapped read-only (or a caller buffer is borrowed) and validated completely
 * at open, before anything is handed out: every count, length and offset is checked against the
 * bytes that remain, so no later access can leave the buffer. All loops are bounded by the file
 * size (a count is rejected before any allocation when the remaining bytes cannot hold that many
 * minimal elements), which keeps open linear in the file size even for hostile input.
 *
 * Invariants of an open gguf_t:
 *   - kv[i].off / tensor data lie inside [0, size); every string array has an offset table so
 *     gguf_arr_str is O(1);
 *   - keys and tensor names are unique, NUL-free and indexed by open-addressing hash tables;
 *   - tensors are aligned, inside the data section and pairwise disjoint.
 *
 * Threads: an open gguf_t is immutable and may be read from any thread.
 */
#include "gguf.h" // defines: gguf_open, gguf_t, GGUF_MAGIC, ...

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/util.h" // defines: xmalloc, dd_errf, DD_E*

#define GGUF_MAX_DEPTH 8     /* nesting limit of array-of-array values */
#define GGUF_MIN_KV_BYTES 13 /* key length u64 + 1 key byte + type u32 + 1 value byte */
#define GGUF_MIN_TI_BYTES 32 /* name length u64 + n_dims u32 + ne u64 + type u32 + offset u64 */

/* ---- ggml type table --------------------------------------------------------------------- */

/* The container only needs each type's block geometry: a tensor's byte size is
 * ne0 / block_elems * block_bytes per row, and ne0 must be a whole number of blocks. Whether
 * our kernels can compute with a type is a separate question (kernels/cpu/kq.h). */

struct type_info {
    const char *name;
    uint32_t blck;  /* elements per block */
    uint32_t bytes; /* bytes per block */
};

/* Indexed by ggml type id; gaps (removed ids 4, 5, 31-33, 36-38) have name NULL and are
 * rejected like unknown ids. Block sizes are those of ggml's block structs. */
static const struct type_info type_table[] = {
    [0] = {"f32", 1, 4},         [1] = {"f16", 1, 2},         [2] = {"q4_0", 32, 18},
    [3] = {"q4_1", 32, 20},      [6] = {"q5_0", 32, 22},      [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},      [9] = {"q8_1", 32, 36},      [10] = {"q2_K", 256, 84},
    [11] = {"q3_K", 256, 110},   [12] = {"q4_K", 256, 144},   [13] = {"q5_K", 256, 176},
    [14] = {"q6_K", 256, 210},   [15] = {"q8_K", 256, 292},   [16] = {"iq2_xxs", 256, 66},
    [17] = {"iq2_xs", 256, 74},  [18] = {"iq3_xxs", 256, 98}, [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},   [21] = {"iq3_s", 256, 110},  [22] = {"iq2_s", 256, 82},
    [23] = {"iq4_xs", 256, 136}, [24] = {"i8", 1, 1},         [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},        [27] = {"i64", 1, 8},        [28] = {"f64", 1, 8},
    [29] = {"iq1_m", 256, 56},   [30] = {"bf16", 1, 2},       [34] = {"tq1_0", 256, 54},
    [35] = {"tq2_0", 256, 66},   [39] = {"mxfp4", 32, 17},    [40] = {"nvfp4", 64, 36},
};

bool gguf_type_info(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes, const char **name)
{
    if (type >= sizeof(type_table) / sizeof(type_table[0]) || !type_table[type].name)
        return false;
    if (block_elems)
        *block_elems = type_table[type].blck;
    if (block_bytes)
        *block_bytes = type_table[type].bytes;
    if (name)
        *name = type_table[type].name;
    return true;
}

size_t gguf_vtype_size(uint32_t t)
{
    static const uint8_t sz[GGUF_T_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < GGUF_T_COUNT ? sz[t] : 0;
}

static const char *vtype_name(uint32_t t)
{
    static const char *const names[GGUF_T_COUNT] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                    "i32", "f32", "bool", "string", "array",
                                                    "u64", "i64", "f64"};
    return t < GGUF_T_COUNT ? names[t] : "?";
}

/* ---- the open file ------------------------------------------------------------------------ */

/* One key/value. Values are never copied: `off` locates them in the file, and the getters
 * memcpy scalars out (the file gives no alignment guarantee for them). */
struct kv {
    char *key;       /* NUL-terminated copy */
    uint32_t type;   /* enum gguf_vtype */
    uint32_t etype;  /* arrays: element type */
    uint64_t n;      /* strings: byte length; arrays: element count */
    size_t off;      /* scalars: the value; strings: first byte; arrays: first element */
    size_t *str_off; /* string arrays only: [n] offsets of each element's u64 length */
};

/* Open-addressing hash table from a name to its index; slot value -1 = empty. */
struct name_index {
    int64_t *slot; /* [mask + 1] */
    uint64_t mask;
};

/* An open file. During parsing n_kv / n_tensors count the entries whose names are already
 * owned, so gguf_close can release a half-built object on any error path. */
struct gguf {
    const uint8_t *base; /* [size] the mapping (mapped) or the caller's buffer (borrowed) */
    size_t size;
    bool mapped;
    uint32_t version;   /* 2 or 3 */
    uint32_t alignment; /* general.alignment or 32; a power of two */
    size_t data_off;    /* start of the data section, a multiple of alignment */
    int64_t n_kv;
    struct kv *kv; /* [n_kv] in file order */
    struct name_index kv_idx;
    int64_t n_tensors;
    struct gguf_tensor *t; /* [n_tensors] in file order, names owned */
    struct name_index t_idx;
};

/* ---- name index --------------------------------------------------------------------------- */

/* Keys and tensor names are looked up by exact string. The table stores only indexes; names
 * are read back through name_of, so one implementation serves both tables. Load factor is at
 * most 1/2, so probes stay short even for the 150k-entry worst case of a hostile file (names
 * are unique, which bounds the probe chains by the number of colliding hashes). */

typedef const char *(*name_of_fn)(const gguf_t *g, int64_t i);

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static void index_init(struct name_index *x, int64_t n)
{
    uint64_t cap = 8;
    while (cap < (uint64_t)n * 2)
        cap <<= 1;
    x->slot = xmalloc(cap * sizeof(int64_t));
    memset(x->slot, 0xff, cap * sizeof(int64_t));
    x->mask = cap - 1;
}

/* Index of `name` or -1. */
static int64_t index_find(const gguf_t *g, const struct name_index *x, name_of_fn name_of,
                          const char *name)
{
    if (!x->slot)
        return -1;
    for (uint64_t h = hash_name(name) & x->mask;; h = (h + 1) & x->mask) {
        int64_t i = x->slot[h];
        if (i < 0 || strcmp(name_of(g, i), name) == 0)
            return i;
    }
}

/* Insert entry i; returns the index of an existing entry with the same name, else -1. */
static int64_t index_insert(const gguf_t *g, struct name_index *x, name_of_fn name_of, int64_t i)
{
    const char *name = name_of(g, i);
    uint64_t h = hash_name(name) & x->mask;
    for (; x->slot[h] >= 0; h = (h + 1) & x->mask) {
        if (strcmp(name_of(g, x->slot[h]), name) == 0)
            return x->slot[h];
    }
    x->slot[h] = i;
    return -1;
}

static const char *kv_name_of(const gguf_t *g, int64_t i)
{
    return g->kv[i].key;
}

static const char *tensor_name_of(const gguf_t *g, int64_t i)
{
    return g->t[i].name;
}

/* ---- bounded cursor ----------------------------------------------------------------------- */

/* The parse position over [0, size). Every read goes through need(), so no parse function can
 * step past the end; the first failure formats the message and parsing unwinds with
 * DD_EFORMAT. */
struct rd {
    const uint8_t *p; /* [size] */
    size_t size;
    size_t pos;
    const char *path;
    char *err;
    size_t errlen;
    char field[192]; /* what is being parsed, e.g. "kv 3 'general.name'" */
};

/* Formats "<path>: <field>: <problem> (at byte N)" and returns DD_EFORMAT. N is the offset of
 * the offending field itself (not of the cursor), so a hex dump shows the culprit at once. */
static int fail(struct rd *r, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct rd *r, size_t at, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    dd_errf(r->err, r->errlen, "%s: %s: %s (at byte %zu)", r->path, r->field, msg, at);
    return DD_EFORMAT;
}

/* Bytes between the cursor and the end of the buffer. */
static size_t left(const struct rd *r)
{
    return r->size - r->pos;
}

/* At least n bytes must remain for `what`; otherwise the file is truncated there. */
static int need(struct rd *r, size_t n, const char *what)
{
    if (left(r) < n)
        return fail(r, r->pos, "truncated: %s needs %zu bytes, %zu left", what, n, left(r));
    return 0;
}

/* Little-endian scalars (we only run on little-endian hosts, like ggml). */
static int rd_u32(struct rd *r, const char *what, uint32_t *v)
{
    if (need(r, 4, what))
        return DD_EFORMAT;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(struct rd *r, const char *what, uint64_t *v)
{
    if (need(r, 8, what))
        return DD_EFORMAT;
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}

/* A string: u64 length + bytes. Sets *off to the first byte and *len. The length is checked
 * against the remaining bytes before anything else, so a length of 2^60 fails at once. */
static int rd_str(struct rd *r, const char *what, size_t *off, uint64_t *len)
{
    size_t at = r->pos;
    if (rd_u64(r, what, len))
        return DD_EFORMAT;
    if (*len > left(r))
        return fail(r, at, "%s length %llu exceeds the %zu bytes left", what,
                    (unsigned long long)*len, left(r));
    *off = r->pos;
    r->pos += *len;
    return 0;
}

/* A name (key or tensor name): non-empty, no NUL; returns a NUL-terminated copy in *out
 * (transferred to the caller). Embedded NULs are rejected because lookups compare C strings:
 * "a\0b" would otherwise shadow "a". */
static int rd_name(struct rd *r, const char *what, char **out)
{
    size_t at = r->pos, off;
    uint64_t len;
    if (rd_str(r, what, &off, &len))
        return DD_EFORMAT;
    if (len == 0)
        return fail(r, at, "empty %s", what);
    if (memchr(r->p + off, 0, len))
        return fail(r, at, "%s contains a NUL byte", what);
    *out = xmalloc(len + 1);
    memcpy(*out, r->p + off, len);
    (*out)[len] = '\0';
    return 0;
}

/* ---- metadata values ---------------------------------------------------------------------- */

/* Values are validated recursively. Work stays linear in the file size: every element,
 * however nested, consumes at least one byte (fixed types), 8 bytes (strings) or 12 bytes
 * (arrays), and a count is compared with what the remaining bytes can hold before the loop. */

static int parse_value(struct rd *r, uint32_t type, int depth, struct kv *kv);

/* n fixed-size elements of type t starting at the cursor. Bools must be 0 or 1: other bytes
 * are undefined in the format and usually mean the parse is misaligned. */
static int parse_fixed(struct rd *r, uint32_t t, uint64_t n)
{
    size_t esz = gguf_vtype_size(t);
    if (n > left(r) / esz)
        return fail(r, r->pos, "%llu %s values need more than the %zu bytes left",
                    (unsigned long long)n, vtype_name(t), left(r));
    if (t == GGUF_T_BOOL) {
        for (uint64_t i = 0; i < n; i++) {
            if (r->p[r->pos + i] > 1)
                return fail(r, r->pos + i, "bool value %u is not 0 or 1", r->p[r->pos + i]);
        }
    }
    r->pos += (size_t)(n * esz);
    return 0;
}

/* Array body after the element type and count. For a top-level string array, kv gets the
 * per-element offset table. */
static int parse_array_elems(struct rd *r, uint32_t et, uint64_t n, int depth, struct kv *kv)
{
    if (et != GGUF_T_STRING && et != GGUF_T_ARRAY)
        return parse_fixed(r, et, n);
    uint64_t min = et == GGUF_T_STRING ? 8 : 12;
    if (n > left(r) / min)
        return fail(r, r->pos, "array count %llu exceeds what the %zu bytes left can hold",
                    (unsigned long long)n, left(r));
    if (kv && et == GGUF_T_STRING)
        kv->str_off = xmalloc((size_t)(n ? n : 1) * sizeof(size_t));
    for (uint64_t i = 0; i < n; i++) {
        if (kv && kv->str_off)
            kv->str_off[i] = r->pos;
        if (parse_value(r, et, depth + 1, NULL))
            return DD_EFORMAT;
    }
    return 0;
}

/* An array value: element type u32, count u64, elements. Depth counts enclosing arrays; the
 * limit keeps recursion (and the C stack) bounded whatever the file says. */
static int parse_array(struct rd *r, int depth, struct kv *kv)
{
    size_t at = r->pos;
    uint32_t et;
    uint64_t n;
    if (depth >= GGUF_MAX_DEPTH)
        return fail(r, at, "arrays nested deeper than %d levels", GGUF_MAX_DEPTH);
    if (rd_u32(r, "array element type", &et) || rd_u64(r, "array count", &n))
        return DD_EFORMAT;
    if (et >= GGUF_T_COUNT)
        return fail(r, at, "unknown array element type %u", et);
    if (kv) {
        kv->etype = et;
        kv->n = n;
        kv->off = r->pos;
    }
    return parse_array_elems(r, et, n, depth, kv);
}

/* One value of `type` at the cursor; kv (top level only) records where it lives. Nested
 * values pass kv = NULL: their positions are not kept, only their validity. */
static int parse_value(struct rd *r, uint32_t type, int depth, struct kv *kv)
{
    if (type == GGUF_T_ARRAY)
        return parse_array(r, depth, kv);
    if (type == GGUF_T_STRING) {
        size_t off;
        uint64_t len;
        if (rd_str(r, "string", &off, &len))
            return DD_EFORMAT;
        if (kv) {
            kv->off = off;
            kv->n = len;
        }
        return 0;
    }
    if (kv)
        kv->off = r->pos;
    return parse_fixed(r, type, 1);
}

/* ---- header and key/values ---------------------------------------------------------------- */

/* Header: magic, version, tensor_count, kv_count. Both counts are bounded by the smallest
 * possible encoding of an entry, so the arrays allocated from them are at most a small
 * multiple of the file size. */
static int parse_header(struct rd *r, gguf_t *g, uint64_t *n_tensors, uint64_t *n_kv)
{
    snprintf(r->field, sizeof(r->field), "header");
    if (need(r, 4, "magic"))
        return DD_EFORMAT;
    if (memcmp(r->p, GGUF_MAGIC, 4) != 0)
        return fail(r, 0, "bad magic (not a GGUF file)");
    r->pos = 4;
    if (rd_u32(r, "version", &g->version))
        return DD_EFORMAT;
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return fail(r, 4, "big-endian GGUF files are not supported");
    if (g->version != 2 && g->version != 3)
        return fail(r, 4, "unsupported version %u (only 2 and 3)", g->version);
    if (rd_u64(r, "tensor_count", n_tensors) || rd_u64(r, "kv_count", n_kv))
        return DD_EFORMAT;
    if (*n_kv > left(r) / GGUF_MIN_KV_BYTES)
        return fail(r, 16, "kv_count %llu exceeds what the %zu bytes left can hold",
                    (unsigned long long)*n_kv, left(r));
    if (*n_tensors > left(r) / GGUF_MIN_TI_BYTES)
        return fail(r, 8, "tensor_count %llu exceeds what the %zu bytes left can hold",
                    (unsigned long long)*n_tensors, left(r));
    return 0;
}

/* Key/value i: name, value type, value. Duplicate keys are rejected (llama.cpp does too):
 * which of two values wins would otherwise depend on the reader. */
static int parse_kv(struct rd *r, gguf_t *g, int64_t i)
{
    struct kv *kv = &g->kv[i];
    size_t at = r->pos;
    snprintf(r->field, sizeof(r->field), "kv %lld", (long long)i);
    if (rd_name(r, "key", &kv->key))
        return DD_EFORMAT;
    g->n_kv = i + 1; /* key and str_off are owned from here on, for gguf_close */
    snprintf(r->field, sizeof(r->field), "kv %lld '%.120s'", (long long)i, kv->key);
    int64_t dup = index_insert(g, &g->kv_idx, kv_name_of, i);
    if (dup >= 0)
        return fail(r, at, "duplicate key (also kv %lld)", (long long)dup);
    size_t tat = r->pos;
    if (rd_u32(r, "value type", &kv->type))
        return DD_EFORMAT;
    if (kv->type >= GGUF_T_COUNT)
        return fail(r, tat, "unknown value type %u", kv->type);
    return parse_value(r, kv->type, 0, kv);
}

/* All key/values, in file order, indexed by name as they are read. */
static int parse_kvs(struct rd *r, gguf_t *g, uint64_t n_kv)
{
    g->kv = xcalloc((size_t)(n_kv ? n_kv : 1), sizeof(struct kv));
    index_init(&g->kv_idx, (int64_t)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        if (parse_kv(r, g, (int64_t)i))
            return DD_EFORMAT;
    }
    return 0;
}

/* general.alignment: optional, u32, a power of two. It must be known before the tensor infos
 * are read because every tensor offset is checked against it. */
static int parse_alignment(struct rd *r, gguf_t *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_find_key(g, "general.alignment");
    if (i < 0)
        return 0;
    const struct kv *kv = &g->kv[i];
    snprintf(r->field, sizeof(r->field), "kv %lld 'general.alignment'", (long long)i);
    if (kv->type != GGUF_T_U32)
        return fail(r, kv->off, "type %s, expected u32", vtype_name(kv->type));
    uint32_t a;
    memcpy(&a, r->p + kv->off, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return fail(r, kv->off, "alignment %u is not a power of two", a);
    g->alignment = a;
    return 0;
}

/* ---- tensor infos ------------------------------------------------------------------------- */

/* Tensor info: name, n_dims u32, ne[n_dims] u64, ggml type u32, offset u64. Shapes are checked
 * in int64 arithmetic with explicit overflow tests; a zero dimension is legal (an empty
 * tensor) and makes the size 0. */
/* ne[] read from the file: each in [0, INT64_MAX], product too; unused dims set to 1. */
static int parse_dims(struct rd *r, struct gguf_tensor *t, int64_t *nelem)
{
    size_t at = r->pos;
    if (rd_u32(r, "n_dims", &t->n_dims))
        return DD_EFORMAT;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return fail(r, at, "n_dims %u outside 1..%d", t->n_dims, GGUF_MAX_DIMS);
    *nelem = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t v = 1;
        at = r->pos;
        if (d < t->n_dims && rd_u64(r, "ne", &v))
            return DD_EFORMAT;
        if (v > (uint64_t)INT64_MAX)
            return fail(r, at, "ne[%u] = %llu is out of range", d, (unsigned long long)v);
        if (v != 0 && *nelem > INT64_MAX / (int64_t)v)
            return fail(r, at, "element count overflows at ne[%u] = %llu", d,
                        (unsigned long long)v);
        t->ne[d] = (int64_t)v;
        *nelem *= (int64_t)v;
    }
    return 0;
}

/* ggml type and byte size of a tensor with nelem elements. */
static int parse_type(struct rd *r, struct gguf_tensor *t, int64_t nelem)
{
    size_t at = r->pos;
    uint32_t blck, bytes;
    if (rd_u32(r, "type", &t->type))
        return DD_EFORMAT;
    if (!gguf_type_info(t->type, &blck, &bytes, NULL))
        return fail(r, at, "unknown ggml type %u", t->type);
    if (t->ne[0] % blck != 0)
        return fail(r, at, "ne[0] = %lld is not a multiple of the block size %u of %s",
                    (long long)t->ne[0], blck, type_table[t->type].name);
    uint64_t blocks = (uint64_t)nelem / blck;
    if (blocks > SIZE_MAX / bytes)
        return fail(r, at, "byte size overflows");
    t->size = (size_t)(blocks * bytes);
    return 0;
}

/* Tensor info i. *info_pos receives the byte of its offset field, for the layout checks that
 * can only run once the data section start is known. */
static int parse_tensor_info(struct rd *r, gguf_t *g, int64_t i, size_t *info_pos)
{
    struct gguf_tensor *t = &g->t[i];
    char *name = NULL;
    int64_t nelem = 0;
    size_t at = r->pos;
    snprintf(r->field, sizeof(r->field), "tensor %lld", (long long)i);
    if (rd_name(r, "name", &name))
        return DD_EFORMAT;
    t->name = name;
    g->n_tensors = i + 1;
    snprintf(r->field, sizeof(r->field), "tensor %lld '%.120s'", (long long)i, name);
    if (index_insert(g, &g->t_idx, tensor_name_of, i) >= 0)
        return fail(r, at, "duplicate tensor name");
    if (parse_dims(r, t, &nelem) || parse_type(r, t, nelem))
        return DD_EFORMAT;
    *info_pos = r->pos;
    if (rd_u64(r, "offset", &t->offset))
        return DD_EFORMAT;
    if (t->offset % g->alignment != 0)
        return fail(r, *info_pos, "data offset %llu is not a multiple of the alignment %u",
                    (unsigned long long)t->offset, g->alignment);
    return 0;
}

/* ---- data section ------------------------------------------------------------------------- */

/* A tensor's byte range inside the data section, for the overlap check. Ties in offset sort
 * the smaller size first, so an empty tensor sharing its offset with a real one is accepted. */
struct span {
    uint64_t off;
    uint64_t size;
    int64_t i;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    if (x->size != y->size)
        return x->size < y->size ? -1 : 1;
    return 0;
}

/* Every tensor inside the file; no two overlap. info_pos[i] = byte of tensor i's offset field.
 * The range test is written as `offset > room || size > room - offset` so that it cannot
 * overflow for offsets near 2^64. Overlaps are found in O(n log n) by sorting the ranges and
 * comparing neighbours; the error names both tensors. */
static int check_layout(struct rd *r, gguf_t *g, const size_t *info_pos)
{
    if (g->n_tensors > 0 && g->data_off > g->size) {
        snprintf(r->field, sizeof(r->field), "data section");
        return fail(r, g->size, "starts at byte %zu, past the end of the file", g->data_off);
    }
    size_t room = g->data_off <= g->size ? g->size - g->data_off : 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->t[i];
        snprintf(r->field, sizeof(r->field), "tensor %lld '%.120s'", (long long)i, t->name);
        if (t->offset > room || t->size > room - t->offset)
            return fail(r, info_pos[i],
                        "data offset %llu + size %zu exceeds the %zu data bytes of the file "
                        "(data section at %zu, file size %zu)",
                        (unsigned long long)t->offset, t->size, room, g->data_off, g->size);
        t->data = g->base + g->data_off + t->offset;
    }
    struct span *s = xmalloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof(*s));
    for (int64_t i = 0; i < g->n_tensors; i++)
        s[i] = (struct span){g->t[i].offset, g->t[i].size, i};
    qsort(s, (size_t)g->n_tensors, sizeof(*s), span_cmp);
    int rc = 0;
    for (int64_t k = 0; k + 1 < g->n_tensors && rc == 0; k++) {
        if (s[k].off + s[k].size <= s[k + 1].off)
            continue;
        const struct gguf_tensor *t = &g->t[s[k + 1].i];
        snprintf(r->field, sizeof(r->field), "tensor %lld '%.120s'", (long long)s[k + 1].i,
                 t->name);
        rc = fail(r, info_pos[s[k + 1].i], "data overlaps tensor %lld '%.80s'", (long long)s[k].i,
                  g->t[s[k].i].name);
    }
    free(s);
    return rc;
}

/* All tensor infos, then the data section start (the next multiple of the alignment after
 * the infos) and the layout checks. A file without tensors may end before that start. */
static int parse_tensors(struct rd *r, gguf_t *g, uint64_t n_tensors)
{
    size_t *info_pos = xmalloc((size_t)(n_tensors ? n_tensors : 1) * sizeof(size_t));
    int rc = 0;
    g->t = xcalloc((size_t)(n_tensors ? n_tensors : 1), sizeof(struct gguf_tensor));
    index_init(&g->t_idx, (int64_t)n_tensors);
    for (uint64_t i = 0; i < n_tensors && rc == 0; i++)
        rc = parse_tensor_info(r, g, (int64_t)i, &info_pos[i]);
    if (rc == 0) {
        g->data_off = r->pos + (g->alignment - r->pos % g->alignment) % g->alignment;
        rc = check_layout(r, g, info_pos);
    }
    free(info_pos);
    return rc;
}

/* ---- open / close ------------------------------------------------------------------------- */

/* Both open paths build the same object and share parse_all; they differ only in who owns
 * the bytes. On failure nothing is returned and everything built so far is released. */

/* Parses and validates g->base[0..size); g is freshly zeroed except base/size/mapped. The
 * order matters: the alignment comes from the key/values and is needed by the tensor infos. */
static int parse_all(gguf_t *g, const char *path, char *err, size_t errlen)
{
    struct rd r = {.p = g->base, .size = g->size, .path = path, .err = err, .errlen = errlen};
    uint64_t n_tensors, n_kv;
    if (parse_header(&r, g, &n_tensors, &n_kv) || parse_kvs(&r, g, n_kv) ||
        parse_alignment(&r, g) || parse_tensors(&r, g, n_tensors))
        return DD_EFORMAT;
    return 0;
}

/* The buffer is borrowed; error messages name it "<memory>". */
int gguf_open_mem(const void *data, size_t size, gguf_t **out, char *err, size_t errlen)
{
    gguf_t *g = xcalloc(1, sizeof(*g));
    g->base = data;
    g->size = size;
    *out = NULL;
    int rc = parse_all(g, "<memory>", err, errlen);
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* Maps `path` read-only; sets *base / *size. The descriptor is closed before returning: the
 * mapping keeps the file alive. Files shorter than a header are rejected here because a
 * zero-length mapping is an error for mmap. */
static int map_file(const char *path, const uint8_t **base, size_t *size, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block us */
    struct stat st;
    int rc = DD_EIO;
    if (fd < 0) {
        dd_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return errno == ENOENT ? DD_ENOTFOUND : DD_EIO;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        dd_errf(err, errlen, "%s: not a regular file", path);
        goto out;
    }
    if (st.st_size < 24) {
        dd_errf(err, errlen, "%s: header: file of %lld bytes is too small (at byte 0)", path,
                (long long)st.st_size);
        rc = DD_EFORMAT;
        goto out;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        dd_errf(err, errlen, "%s: mmap failed: %s", path, strerror(errno));
        goto out;
    }
    /* Ask for 2 MiB pages: page faults then read ahead (and map) whole 2 MiB folios of the
     * file, so the weights the matmuls stream are mapped without 4 KiB TLB misses (measured:
     * a cold 0.55 GB model fully PMD-mapped instead of ~85%, decode ~10% faster by CPU time).
     * Only a hint: a kernel or filesystem without file THP refuses it and nothing changes. */
#ifdef MADV_HUGEPAGE
    (void)madvise(p, (size_t)st.st_size, MADV_HUGEPAGE);
#endif
    *base = p;
    *size = (size_t)st.st_size;
    rc = 0;
out:
    close(fd);
    return rc;
}

int gguf_open(const char *path, gguf_t **out, char *err, size_t errlen)
{
    const uint8_t *base;
    size_t size;
    *out = NULL;
    int rc = map_file(path, &base, &size, err, errlen);
    if (rc)
        return rc;
    gguf_t *g = xcalloc(1, sizeof(*g));
    g->base = base;
    g->size = size;
    g->mapped = true;
    rc = parse_all(g, path, err, errlen);
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* Releases names, offset tables, indexes and the mapping (a borrowed buffer is left alone). */
void gguf_close(gguf_t *g)
{
    if (!g)
        return;
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str_off);
    }
    for (int64_t i = 0; i < g->n_tensors; i++)
        free((char *)g->t[i].name);
    free(g->kv);
    free(g->t);
    free(g->kv_idx.slot);
    free(g->t_idx.slot);
    if (g->mapped)
        munmap((void *)g->base, g->size);
    free(g);
}

/* ---- reader accessors --------------------------------------------------------------------- */

/* All accessors are read-only lookups on the immutable object; any thread may call them. */

uint32_t gguf_version(const gguf_t *g)
{
    return g->version;
}

uint32_t gguf_alignment(const gguf_t *g)
{
    return g->alignment;
}

size_t gguf_file_size(const gguf_t *g)
{
    return g->size;
}

const void *gguf_base(const gguf_t *g)
{
    return g->base;
}

size_t gguf_data_offset(const gguf_t *g)
{
    return g->data_off;
}

int64_t gguf_n_kv(const gguf_t *g)
{
    return g->n_kv;
}

int64_t gguf_find_key(const gguf_t *g, const char *key)
{
    return index_find(g, &g->kv_idx, kv_name_of, key);
}

const char *gguf_key_name(const gguf_t *g, int64_t i)
{
    ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].key;
}

enum gguf_vtype gguf_kv_type(const gguf_t *g, int64_t i)
{
    ASSERT(i >= 0 && i < g->n_kv);
    return (enum gguf_vtype)g->kv[i].type;
}

/* The kv of `key` if it exists and has exactly `type` (rc 0); else DD_ENOTFOUND / DD_ETYPE.
 * No conversions: a u32 read as i32 is a type error, as in llama.cpp. */
static int kv_typed(const gguf_t *g, const char *key, uint32_t type, const struct kv **kv)
{
    int64_t i = gguf_find_key(g, key);
    if (i < 0)
        return DD_ENOTFOUND;
    *kv = &g->kv[i];
    return (*kv)->type == type ? 0 : DD_ETYPE;
}

static int get_scalar(const gguf_t *g, const char *key, uint32_t type, void *out)
{
    const struct kv *kv;
    int rc = kv_typed(g, key, type, &kv);
    if (rc == 0)
        memcpy(out, g->base + kv->off, gguf_vtype_size(type));
    return rc;
}

int gguf_get_u32(const gguf_t *g, const char *key, uint32_t *out)
{
    return get_scalar(g, key, GGUF_T_U32, out);
}

int gguf_get_i32(const gguf_t *g, const char *key, int32_t *out)
{
    return get_scalar(g, key, GGUF_T_I32, out);
}

int gguf_get_u64(const gguf_t *g, const char *key, uint64_t *out)
{
    return get_scalar(g, key, GGUF_T_U64, out);
}

int gguf_get_f32(const gguf_t *g, const char *key, float *out)
{
    return get_scalar(g, key, GGUF_T_F32, out);
}

int gguf_get_bool(const gguf_t *g, const char *key, bool *out)
{
    uint8_t b;
    int rc = get_scalar(g, key, GGUF_T_BOOL, &b);
    if (rc == 0)
        *out = b != 0;
    return rc;
}

int gguf_get_str(const gguf_t *g, const char *key, const char **s, size_t *len)
{
    const struct kv *kv;
    int rc = kv_typed(g, key, GGUF_T_STRING, &kv);
    if (rc == 0) {
        *s = (const char *)g->base + kv->off;
        *len = (size_t)kv->n;
    }
    return rc;
}

/* Integer value of type t at p as int64 (DD_ETYPE for non-integers, DD_ERANGE for big u64).
 * Bools count as integers so that flags stored either way read the same. */
static int int_at(const uint8_t *p, uint32_t t, int64_t *out)
{
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
    } v;
    size_t sz = gguf_vtype_size(t);
    if (sz == 0 || t == GGUF_T_F32 || t == GGUF_T_F64)
        return DD_ETYPE;
    memcpy(&v, p, sz);
    switch (t) {
    case GGUF_T_U8:
    case GGUF_T_BOOL:
        *out = v.u8;
        return 0;
    case GGUF_T_I8:
        *out = v.i8;
        return 0;
    case GGUF_T_U16:
        *out = v.u16;
        return 0;
    case GGUF_T_I16:
        *out = v.i16;
        return 0;
    case GGUF_T_U32:
        *out = v.u32;
        return 0;
    case GGUF_T_I32:
        *out = v.i32;
        return 0;
    case GGUF_T_I64:
        *out = v.i64;
        return 0;
    default:
        break;
    }
    if (v.u64 > (uint64_t)INT64_MAX)
        return DD_ERANGE;
    *out = (int64_t)v.u64;
    return 0;
}

int gguf_get_int(const gguf_t *g, const char *key, int64_t *out)
{
    int64_t i = gguf_find_key(g, key);
    if (i < 0)
        return DD_ENOTFOUND;
    return int_at(g->base + g->kv[i].off, g->kv[i].type, out);
}

/* Raw view of an array: packed elements for fixed-size types, NULL for strings and nested
 * arrays (their elements have variable size; use gguf_arr_str for strings). */
int gguf_get_arr(const gguf_t *g, const char *key, enum gguf_vtype *etype, uint64_t *n,
                 const void **data)
{
    const struct kv *kv;
    int rc = kv_typed(g, key, GGUF_T_ARRAY, &kv);
    if (rc)
        return rc;
    *etype = (enum gguf_vtype)kv->etype;
    *n = kv->n;
    *data = gguf_vtype_size(kv->etype) ? (const void *)(g->base + kv->off) : NULL;
    return 0;
}

/* Element i of array `key`: its kv, or DD_ENOTFOUND / DD_ETYPE / DD_ERANGE. */
static int arr_elem(const gguf_t *g, const char *key, uint64_t i, const struct kv **kv)
{
    int rc = kv_typed(g, key, GGUF_T_ARRAY, kv);
    if (rc)
        return rc;
    return i < (*kv)->n ? 0 : DD_ERANGE;
}

int gguf_arr_int(const gguf_t *g, const char *key, uint64_t i, int64_t *out)
{
    const struct kv *kv;
    int rc = arr_elem(g, key, i, &kv);
    if (rc)
        return rc;
    size_t sz = gguf_vtype_size(kv->etype);
    if (sz == 0)
        return DD_ETYPE;
    return int_at(g->base + kv->off + i * sz, kv->etype, out);
}

int gguf_arr_f32(const gguf_t *g, const char *key, uint64_t i, float *out)
{
    const struct kv *kv;
    int rc = arr_elem(g, key, i, &kv);
    if (rc)
        return rc;
    if (kv->etype != GGUF_T_F32)
        return DD_ETYPE;
    memcpy(out, g->base + kv->off + i * 4, 4);
    return 0;
}

int gguf_arr_str(const gguf_t *g, const char *key, uint64_t i, const char **s, size_t *len)
{
    const struct kv *kv;
    int rc = arr_elem(g, key, i, &kv);
    if (rc)
        return rc;
    if (kv->etype != GGUF_T_STRING)
        return DD_ETYPE;
    uint64_t n;
    memcpy(&n, g->base + kv->str_off[i], 8);
    *s = (const char *)g->base + kv->str_off[i] + 8;
    *len = (size_t)n;
    return 0;
}

int64_t gguf_n_tensors(const gguf_t *g)
{
    return g->n_tensors;
}

const struct gguf_tensor *gguf_tensor_at(const gguf_t *g, int64_t i)
{
    ASSERT(i >= 0 && i < g->n_tensors);
    return &g->t[i];
}

const struct gguf_tensor *gguf_find_tensor(const gguf_t *g, const char *name)
{
    int64_t i = index_find(g, &g->t_idx, tensor_name_of, name);
    return i < 0 ? NULL : &g->t[i];
}

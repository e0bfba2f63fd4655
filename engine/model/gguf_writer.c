/*
 * gguf_writer — serialises GGUF v3 files: keys and tensors are collected in memory (tensor data
 * is copied at add time, offsets assigned then) and written in one sequential pass, to a heap
 * buffer or to a file written as tmp + rename.
 *
 * Only the tools (mkmodel, tok2gguf), the tests and the fuzz seed generator write GGUF files; the
 * daemon only reads them (gguf.c). The writer refuses shapes the reader would reject, so every
 * file it writes opens again.
 *
 * Threads: a writer belongs to the thread that created it.
 */
#include "gguf_writer.h" // defines: gguf_writer_create, ...

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/util.h" // defines: xmalloc, xrealloc, xstrdup, dd_errf, ASSERT, DD_E*
#include "gguf.h"        // defines: gguf_type_info, gguf_vtype_size, GGUF_MAGIC, GGUF_T_*

/* ---- byte buffer -------------------------------------------------------------------------- */

/* The writer keeps each key's encoded value (type + bytes) and a private copy of each
 * tensor's data. Offsets are assigned at add time, so the layout is fixed before writing and
 * serialisation is one sequential pass. Writing again after a failure is allowed. */

/* Growable byte buffer; doubling keeps appends amortised O(1). */
struct buf {
    uint8_t *p;
    size_t len, cap;
};

static void buf_put(struct buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = b->cap ? b->cap : 256;
        while (b->cap < b->len + n)
            b->cap *= 2;
        b->p = xrealloc(b->p, b->cap);
    }
    if (n)
        memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void buf_u32(struct buf *b, uint32_t v)
{
    buf_put(b, &v, 4);
}

static void buf_u64(struct buf *b, uint64_t v)
{
    buf_put(b, &v, 8);
}

static void buf_str(struct buf *b, const char *s, size_t n)
{
    buf_u64(b, n);
    buf_put(b, s, n);
}

/* Zero bytes up to the next multiple of `align`. */
static void buf_pad(struct buf *b, uint32_t align)
{
    static const uint8_t zeros[64];
    while (b->len % align) {
        size_t k = align - b->len % align;
        buf_put(b, zeros, k < sizeof(zeros) ? k : sizeof(zeros));
    }
}

/* One key: its name and its encoded value, replaced wholesale when the key is set again. */
struct wkv {
    char *key;
    struct buf val; /* value type u32 + encoded value */
};

/* One tensor as it will be written. */
struct wtensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint32_t type;
    void *data; /* [size] owned copy */
    size_t size;
    uint64_t offset; /* relative to the data section, aligned */
};

struct gguf_writer {
    uint32_t alignment;
    struct wkv *kv; /* [n_kv], insertion order */
    size_t n_kv, cap_kv;
    struct wtensor *t; /* [n_t] */
    size_t n_t, cap_t;
    uint64_t data_size; /* aligned end of the last tensor */
};

gguf_writer_t *gguf_writer_create(uint32_t alignment)
{
    gguf_writer_t *w = xcalloc(1, sizeof(*w));
    w->alignment = alignment ? alignment : GGUF_DEFAULT_ALIGNMENT;
    ASSERT((w->alignment & (w->alignment - 1)) == 0);
    if (w->alignment != GGUF_DEFAULT_ALIGNMENT)
        gguf_writer_set_u32(w, "general.alignment", w->alignment);
    return w;
}

/* Returns the (cleared) value buffer of `key`, replacing an earlier value of the same key. */
static struct buf *kv_slot(gguf_writer_t *w, const char *key, uint32_t type)
{
    struct wkv *kv = NULL;
    for (size_t i = 0; i < w->n_kv && !kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0)
            kv = &w->kv[i];
    }
    if (!kv) {
        if (w->n_kv == w->cap_kv) {
            w->cap_kv = w->cap_kv ? 2 * w->cap_kv : 16;
            w->kv = xrealloc(w->kv, w->cap_kv * sizeof(*w->kv));
        }
        kv = &w->kv[w->n_kv++];
        *kv = (struct wkv){.key = xstrdup(key)};
    }
    kv->val.len = 0;
    buf_u32(&kv->val, type);
    return &kv->val;
}

/* A scalar of fixed-size type. The writer owns general.alignment: callers may not store it
 * under another type (the reader would then reject the file). */
static void set_fixed(gguf_writer_t *w, const char *key, uint32_t type, const void *v)
{
    ASSERT(strcmp(key, "general.alignment") != 0 || type == GGUF_T_U32);
    buf_put(kv_slot(w, key, type), v, gguf_vtype_size(type));
}

void gguf_writer_set_u32(gguf_writer_t *w, const char *key, uint32_t v)
{
    ASSERT(strcmp(key, "general.alignment") != 0 || v == w->alignment);
    set_fixed(w, key, GGUF_T_U32, &v);
}

void gguf_writer_set_i32(gguf_writer_t *w, const char *key, int32_t v)
{
    set_fixed(w, key, GGUF_T_I32, &v);
}

void gguf_writer_set_u64(gguf_writer_t *w, const char *key, uint64_t v)
{
    set_fixed(w, key, GGUF_T_U64, &v);
}

void gguf_writer_set_f32(gguf_writer_t *w, const char *key, float v)
{
    set_fixed(w, key, GGUF_T_F32, &v);
}

void gguf_writer_set_bool(gguf_writer_t *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    set_fixed(w, key, GGUF_T_BOOL, &b);
}

void gguf_writer_set_str(gguf_writer_t *w, const char *key, const char *s)
{
    buf_str(kv_slot(w, key, GGUF_T_STRING), s, strlen(s));
}

/* Array of fixed-size elements: type, count, packed little-endian elements. */
static void set_arr_fixed(gguf_writer_t *w, const char *key, uint32_t et, const void *v, uint64_t n)
{
    struct buf *b = kv_slot(w, key, GGUF_T_ARRAY);
    buf_u32(b, et);
    buf_u64(b, n);
    buf_put(b, v, (size_t)n * gguf_vtype_size(et));
}

void gguf_writer_set_arr_i32(gguf_writer_t *w, const char *key, const int32_t *v, uint64_t n)
{
    set_arr_fixed(w, key, GGUF_T_I32, v, n);
}

void gguf_writer_set_arr_u32(gguf_writer_t *w, const char *key, const uint32_t *v, uint64_t n)
{
    set_arr_fixed(w, key, GGUF_T_U32, v, n);
}

void gguf_writer_set_arr_f32(gguf_writer_t *w, const char *key, const float *v, uint64_t n)
{
    set_arr_fixed(w, key, GGUF_T_F32, v, n);
}

void gguf_writer_set_arr_str(gguf_writer_t *w, const char *key, const char *const *strs,
                             const size_t *lens, uint64_t n)
{
    struct buf *b = kv_slot(w, key, GGUF_T_ARRAY);
    buf_u32(b, GGUF_T_STRING);
    buf_u64(b, n);
    for (uint64_t i = 0; i < n; i++)
        buf_str(b, strs[i], lens ? lens[i] : strlen(strs[i]));
}

/* Byte size implied by type and ne, or 0 with *ok false when the shape is not representable. */
static size_t shape_bytes(uint32_t n_dims, const int64_t *ne, uint32_t type, bool *ok)
{
    uint32_t blck, bytes;
    int64_t nelem = 1;
    *ok = n_dims >= 1 && n_dims <= GGUF_MAX_DIMS && gguf_type_info(type, &blck, &bytes, NULL);
    for (uint32_t d = 0; *ok && d < n_dims; d++) {
        *ok = ne[d] >= 0 && (ne[d] == 0 || nelem <= INT64_MAX / ne[d]);
        nelem *= *ok ? ne[d] : 1;
    }
    if (!*ok || ne[0] % blck != 0) {
        *ok = false;
        return 0;
    }
    return (size_t)(nelem / blck) * bytes;
}

/* Validates the shape like the reader would, copies the data and assigns the next aligned
 * offset. Duplicate names are refused here rather than producing an unreadable file. */
int gguf_writer_add_tensor(gguf_writer_t *w, const char *name, uint32_t n_dims, const int64_t *ne,
                           uint32_t type, const void *data, size_t size)
{
    bool ok;
    size_t want = shape_bytes(n_dims, ne, type, &ok);
    if (!ok || want != size || name[0] == '\0')
        return DD_EINVAL;
    for (size_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->t[i].name, name) == 0)
            return DD_EINVAL;
    }
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 16;
        w->t = xrealloc(w->t, w->cap_t * sizeof(*w->t));
    }
    struct wtensor *t = &w->t[w->n_t++];
    *t = (struct wtensor){.name = xstrdup(name), .n_dims = n_dims, .type = type, .size = size};
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->data = xmalloc(size);
    memcpy(t->data, data, size);
    t->offset = w->data_size;
    w->data_size = t->offset + (size + w->alignment - 1) / w->alignment * w->alignment;
    return 0;
}

/* Header, key/values and tensor infos, padded to the alignment (the data section start).
 * Always version 3; general.alignment, when needed, is an ordinary key set at create time. */
static void write_meta(const gguf_writer_t *w, struct buf *b)
{
    buf_put(b, GGUF_MAGIC, 4);
    buf_u32(b, 3);
    buf_u64(b, w->n_t);
    buf_u64(b, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        buf_str(b, w->kv[i].key, strlen(w->kv[i].key));
        buf_put(b, w->kv[i].val.p, w->kv[i].val.len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        buf_str(b, t->name, strlen(t->name));
        buf_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            buf_u64(b, (uint64_t)t->ne[d]);
        buf_u32(b, t->type);
        buf_u64(b, t->offset);
    }
    buf_pad(b, w->alignment);
}

/* Output target: a FILE, or (f == NULL) a memory buffer. */
struct sink {
    FILE *f;
    struct buf *mem;
};

static int sink_put(struct sink *s, const void *p, size_t n)
{
    if (!s->f) {
        buf_put(s->mem, p, n);
        return 0;
    }
    return fwrite(p, 1, n, s->f) == n ? 0 : DD_EIO;
}

/* The whole file: metadata, then each tensor padded to the alignment. The last tensor is
 * padded too, as ggml's writer does: some readers load the data section as one padded blob. */
static int write_all(const gguf_writer_t *w, struct sink *s)
{
    static const uint8_t zeros[64];
    struct buf meta = {0};
    write_meta(w, &meta);
    int rc = sink_put(s, meta.p, meta.len);
    free(meta.p);
    for (size_t i = 0; i < w->n_t && rc == 0; i++) {
        const struct wtensor *t = &w->t[i];
        rc = sink_put(s, t->data, t->size);
        for (size_t pad = (w->alignment - t->size % w->alignment) % w->alignment; pad && !rc;) {
            size_t k = pad < sizeof(zeros) ? pad : sizeof(zeros);
            rc = sink_put(s, zeros, k);
            pad -= k;
        }
    }
    return rc;
}

/* Memory sink: cannot fail (allocation aborts on OOM). */
int gguf_writer_write_mem(gguf_writer_t *w, void **buf, size_t *len)
{
    struct buf b = {0};
    struct sink s = {.mem = &b};
    write_all(w, &s);
    *buf = b.p;
    *len = b.len;
    return 0;
}

/* Writes to a temporary file next to `path`, then renames it over `path`. Durability (fsync) is
 * deliberately not requested: readers only need never to see a half-written file. */
int gguf_writer_write_file(gguf_writer_t *w, const char *path, char *err, size_t errlen)
{
    size_t n = strlen(path);
    char *tmp = xmalloc(n + 8);
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".XXXXXX", 8);
    FILE *f = NULL;
    int rc = DD_EIO;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        dd_errf(err, errlen, "%s: cannot create a temporary file: %s", path, strerror(errno));
        goto out;
    }
    fchmod(fd, 0644);
    f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        goto fail;
    }
    struct sink s = {.f = f};
    rc = write_all(w, &s);
    if (fclose(f) != 0 || rc != 0)
        goto fail;
    if (rename(tmp, path) != 0)
        goto fail;
    rc = 0;
    goto out;
fail:
    rc = DD_EIO;
    dd_errf(err, errlen, "%s: write failed: %s", path, strerror(errno));
    unlink(tmp);
out:
    free(tmp);
    return rc;
}

/* Frees keys, tensor copies and the writer; NULL is a no-op. */
void gguf_writer_destroy(gguf_writer_t *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

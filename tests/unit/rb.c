/*
 * rb — the raw GGUF byte builder of rb.h. Test-only; linked into the test programs (through the
 * tests' helper library) and into tests/fuzz/gguf_seeds.
 */
#include "rb.h" // defines: struct rb, rb_*

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/gguf.h" // defines: GGUF_MAGIC, GGUF_T_U32

void rb_put(struct rb *b, const void *src, size_t n)
{
    if (b->n + n > sizeof(b->p))
        abort();
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

void rb_u8(struct rb *b, uint8_t v)
{
    rb_put(b, &v, 1);
}

void rb_u32(struct rb *b, uint32_t v)
{
    rb_put(b, &v, 4);
}

void rb_u64(struct rb *b, uint64_t v)
{
    rb_put(b, &v, 8);
}

void rb_str(struct rb *b, const char *s)
{
    rb_u64(b, strlen(s));
    rb_put(b, s, strlen(s));
}

void rb_header(struct rb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    rb_put(b, GGUF_MAGIC, 4);
    rb_u32(b, version);
    rb_u64(b, n_tensors);
    rb_u64(b, n_kv);
}

void rb_kv(struct rb *b, const char *key, uint32_t type, const void *v, size_t n)
{
    rb_str(b, key);
    rb_u32(b, type);
    rb_put(b, v, n);
}

void rb_kv_u32(struct rb *b, const char *key, uint32_t v)
{
    rb_kv(b, key, GGUF_T_U32, &v, 4);
}

void rb_tinfo(struct rb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
              uint64_t off)
{
    rb_str(b, name);
    rb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        rb_u64(b, ne[d]);
    rb_u32(b, type);
    rb_u64(b, off);
}

void rb_pad(struct rb *b, size_t align)
{
    while (b->n % align)
        rb_u8(b, 0);
}

void rb_zeros(struct rb *b, size_t n)
{
    while (n--)
        rb_u8(b, 0);
}

int rb_save(const struct rb *b, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t wrote = fwrite(b->p, 1, b->n, f);
    return (fclose(f) != 0 || wrote != b->n) ? -1 : 0;
}

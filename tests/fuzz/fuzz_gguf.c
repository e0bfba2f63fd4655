/*
 * fuzz_gguf — libFuzzer target for the GGUF reader.
 *
 * Every input goes through gguf_open_mem; an accepted file is then walked completely (every
 * key through the typed getters, every array element, every tensor's first and last data byte)
 * so that ASan/UBSan see each access the validated offsets allow. A rejected input must carry a
 * message. Built by `make fuzz` and tests/fuzz/smoke.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/gguf.h" // defines: gguf_open_mem, gguf_get_*, gguf_arr_*

/* Folds bytes into a sink the optimiser cannot drop. */
static volatile uint8_t sink;

static void touch(const void *p, size_t n)
{
    if (n) {
        sink ^= ((const uint8_t *)p)[0];
        sink ^= ((const uint8_t *)p)[n - 1];
    }
}

static void walk_array(const gguf_t *g, const char *key)
{
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    if (gguf_get_arr(g, key, &et, &n, &data) != 0)
        abort();
    for (uint64_t i = 0; i < n && i < 4096; i++) {
        int64_t v;
        float f;
        const char *s;
        size_t len;
        if (gguf_arr_int(g, key, i, &v) == 0)
            sink ^= (uint8_t)v;
        if (gguf_arr_f32(g, key, i, &f) == 0)
            sink ^= (uint8_t)(f != f);
        if (gguf_arr_str(g, key, i, &s, &len) == 0)
            touch(s, len);
    }
    if (n && gguf_arr_int(g, key, n, &(int64_t){0}) == 0)
        abort(); /* one past the end must fail */
}

static void walk_kv(const gguf_t *g, int64_t i)
{
    const char *key = gguf_key_name(g, i);
    if (gguf_find_key(g, key) != i)
        abort();
    int64_t v;
    const char *s;
    size_t len;
    float f;
    if (gguf_get_int(g, key, &v) == 0)
        sink ^= (uint8_t)v;
    if (gguf_get_f32(g, key, &f) == 0)
        sink ^= (uint8_t)(f != f);
    if (gguf_get_str(g, key, &s, &len) == 0)
        touch(s, len);
    if (gguf_kv_type(g, i) == GGUF_T_ARRAY)
        walk_array(g, key);
}

static void walk_tensor(const gguf_t *g, int64_t i)
{
    const struct gguf_tensor *t = gguf_tensor_at(g, i);
    if (gguf_find_tensor(g, t->name) != t)
        abort();
    touch(t->data, t->size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_t *g = NULL;
    char err[512] = "";
    if (gguf_open_mem(data, size, &g, err, sizeof(err)) != 0) {
        if (g != NULL || err[0] == '\0')
            abort();
        return 0;
    }
    for (int64_t i = 0; i < gguf_n_kv(g); i++)
        walk_kv(g, i);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++)
        walk_tensor(g, i);
    gguf_close(g);
    return 0;
}

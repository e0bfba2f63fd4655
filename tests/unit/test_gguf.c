/*
 * test_gguf — engine/model/gguf.c and gguf_writer.c: writer → reader round trips (memory and
 * file), strict getters, and a catalogue of malformed files that must be rejected with a message
 * and without a crash.
 *
 * Malformed files are built byte by byte with the `rb` builder (gguf_raw.h), so each case states
 * exactly which field is broken.
 */
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "engine/model/gguf.h"        // defines: gguf_open, gguf_get_*, GGUF_T_*
#include "engine/model/gguf_writer.h" // defines: gguf_writer_*
#include "engine/util.h"              // defines: DD_E*
#include "gguf_raw.h"                 // defines: struct gguf_raw, rb_*
#include "test.h"                     // defines: TEST, RUN, CHECK*, TEST_MAIN_END

/* ---- rejection check ---------------------------------------------------------------------- */

/* Must be rejected: negative rc, no gguf_t, a message naming a byte offset. */
static int expect_reject(const struct gguf_raw *b, const char *needle)
{
    char err[512] = "";
    gguf_t *g = (gguf_t *)1;
    int rc = gguf_open_mem(b->p, b->n, &g, err, sizeof(err));
    int ok = rc < 0 && g == NULL && strstr(err, "(at byte ") != NULL;
    if (ok && needle && !strstr(err, needle))
        ok = 0;
    if (!ok)
        printf("  expected rejection containing '%s', got rc %d: '%s'\n", needle ? needle : "", rc,
               err);
    if (rc == 0)
        gguf_close(g);
    return ok;
}

/* ---- fixtures ----------------------------------------------------------------------------- */

static const char *const strs[] = {"alpha", "", "γάμμα", "a\0b"};
static const size_t str_lens[] = {5, 0, 10, 3};

/* A writer holding every kind of key the writer can produce and three tensors. */
static gguf_writer_t *make_sample(uint32_t alignment, float *f32_data, uint16_t *f16_data,
                                  uint8_t *q8_data)
{
    gguf_writer_t *w = gguf_writer_create(alignment);
    gguf_writer_set_str(w, "general.architecture", "test");
    gguf_writer_set_u32(w, "k.u32", 4000000000u);
    gguf_writer_set_i32(w, "k.i32", -7);
    gguf_writer_set_u64(w, "k.u64", 0xfffffffffffffff0ull);
    gguf_writer_set_f32(w, "k.f32", 1.5f);
    gguf_writer_set_bool(w, "k.bool", true);
    gguf_writer_set_str(w, "k.str", "hello");
    gguf_writer_set_str(w, "k.replaced", "old");
    gguf_writer_set_str(w, "k.replaced", "new value");
    const int32_t ai[3] = {-1, 2, 3};
    const uint32_t au[2] = {7, 4294967295u};
    const float af[2] = {0.25f, -2.0f};
    gguf_writer_set_arr_i32(w, "k.arr_i32", ai, 3);
    gguf_writer_set_arr_u32(w, "k.arr_u32", au, 2);
    gguf_writer_set_arr_f32(w, "k.arr_f32", af, 2);
    gguf_writer_set_arr_str(w, "k.arr_str", strs, str_lens, 4);
    const char *plain[2] = {"x", "yz"};
    gguf_writer_set_arr_str(w, "k.arr_str0", plain, NULL, 2);
    gguf_writer_set_arr_i32(w, "k.arr_empty", ai, 0);

    unsigned long long s = 42;
    for (int i = 0; i < 64 * 3; i++)
        f32_data[i] = test_rng_uniform(&s);
    for (int i = 0; i < 10; i++)
        f16_data[i] = (uint16_t)(i * 1000);
    for (int i = 0; i < 2 * 34; i++)
        q8_data[i] = (uint8_t)(i * 7);
    const int64_t ne_a[2] = {64, 3}, ne_b[1] = {10}, ne_c[3] = {32, 1, 2};
    CHECK_EQ(gguf_writer_add_tensor(w, "a.weight", 2, ne_a, 0, f32_data, 64 * 3 * 4), 0);
    CHECK_EQ(gguf_writer_add_tensor(w, "b", 1, ne_b, 1, f16_data, 20), 0);
    CHECK_EQ(gguf_writer_add_tensor(w, "c.q8", 3, ne_c, 8, q8_data, 68), 0);
    return w;
}

/* Checks everything make_sample wrote. */
static void check_sample(const gguf_t *g, uint32_t alignment, const float *f32_data,
                         const uint16_t *f16_data, const uint8_t *q8_data)
{
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    bool b;
    const char *s;
    size_t len;
    CHECK_EQ(gguf_version(g), 3);
    CHECK_EQ(gguf_alignment(g), alignment);
    CHECK_EQ(gguf_find_key(g, "general.alignment") >= 0, alignment != 32);
    CHECK_EQ(gguf_n_kv(g), 14 + (alignment != 32));
    CHECK_EQ(gguf_get_u32(g, "k.u32", &u32), 0);
    CHECK_EQ(u32, 4000000000u);
    CHECK_EQ(gguf_get_i32(g, "k.i32", &i32), 0);
    CHECK_EQ(i32, -7);
    CHECK_EQ(gguf_get_u64(g, "k.u64", &u64), 0);
    CHECK(u64 == 0xfffffffffffffff0ull);
    CHECK_EQ(gguf_get_f32(g, "k.f32", &f), 0);
    CHECK(f == 1.5f);
    CHECK_EQ(gguf_get_bool(g, "k.bool", &b), 0);
    CHECK(b);
    CHECK_EQ(gguf_get_str(g, "k.str", &s, &len), 0);
    CHECK(len == 5 && memcmp(s, "hello", 5) == 0);
    CHECK_EQ(gguf_get_str(g, "k.replaced", &s, &len), 0);
    CHECK(len == 9 && memcmp(s, "new value", 9) == 0);
    int64_t k = gguf_find_key(g, "k.str");
    CHECK(k >= 0);
    CHECK_STR_EQ(gguf_key_name(g, k), "k.str");
    CHECK_EQ(gguf_kv_type(g, k), GGUF_T_STRING);

    int64_t v;
    float fv;
    CHECK_EQ(gguf_arr_int(g, "k.arr_i32", 0, &v), 0);
    CHECK_EQ(v, -1);
    CHECK_EQ(gguf_arr_int(g, "k.arr_i32", 2, &v), 0);
    CHECK_EQ(v, 3);
    CHECK_EQ(gguf_arr_int(g, "k.arr_i32", 3, &v), DD_ERANGE);
    CHECK_EQ(gguf_arr_int(g, "k.arr_u32", 1, &v), 0);
    CHECK_EQ(v, 4294967295ll);
    CHECK_EQ(gguf_arr_f32(g, "k.arr_f32", 1, &fv), 0);
    CHECK(fv == -2.0f);
    CHECK_EQ(gguf_arr_f32(g, "k.arr_i32", 0, &fv), DD_ETYPE);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(gguf_arr_str(g, "k.arr_str", (uint64_t)i, &s, &len), 0);
        CHECK(len == str_lens[i] && memcmp(s, strs[i], len) == 0);
    }
    CHECK_EQ(gguf_arr_str(g, "k.arr_str", 4, &s, &len), DD_ERANGE);
    CHECK_EQ(gguf_arr_str(g, "k.arr_str0", 1, &s, &len), 0);
    CHECK(len == 2 && memcmp(s, "yz", 2) == 0);
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    CHECK_EQ(gguf_get_arr(g, "k.arr_empty", &et, &n, &data), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(et, GGUF_T_I32);
    CHECK_EQ(gguf_get_arr(g, "k.arr_str", &et, &n, &data), 0);
    CHECK(et == GGUF_T_STRING && n == 4 && data == NULL);

    CHECK_EQ(gguf_n_tensors(g), 3);
    const struct gguf_tensor *t = gguf_find_tensor(g, "a.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK(t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 3 && t->ne[2] == 1 && t->ne[3] == 1);
        CHECK(t->type == 0 && t->size == 64 * 3 * 4);
        CHECK(memcmp(t->data, f32_data, t->size) == 0);
        CHECK_EQ(((const uint8_t *)t->data - (const uint8_t *)gguf_base(g)) % alignment, 0);
    }
    t = gguf_find_tensor(g, "b");
    CHECK(t && t->type == 1 && t->size == 20 && memcmp(t->data, f16_data, 20) == 0);
    t = gguf_find_tensor(g, "c.q8");
    CHECK(t && t->n_dims == 3 && t->ne[2] == 2 && t->size == 68 &&
          memcmp(t->data, q8_data, 68) == 0);
    CHECK(t == gguf_tensor_at(g, 2));
    CHECK(gguf_find_tensor(g, "missing") == NULL);
    CHECK_EQ(gguf_data_offset(g) % alignment, 0);
}

/* ---- round trips -------------------------------------------------------------------------- */

/* Writer → memory → reader, with the default alignment given as 0 and 32, and with 64. */
TEST(roundtrip_mem)
{
    float f32_data[192];
    uint16_t f16_data[10];
    uint8_t q8_data[68];
    uint32_t aligns[3] = {0, 32, 64};
    for (int a = 0; a < 3; a++) {
        gguf_writer_t *w = make_sample(aligns[a], f32_data, f16_data, q8_data);
        void *buf;
        size_t len;
        CHECK_EQ(gguf_writer_write_mem(w, &buf, &len), 0);
        char err[256] = "";
        gguf_t *g;
        int rc = gguf_open_mem(buf, len, &g, err, sizeof(err));
        CHECK_EQ(rc, 0);
        if (rc == 0) {
            check_sample(g, aligns[a] ? aligns[a] : 32, f32_data, f16_data, q8_data);
            CHECK_EQ(gguf_file_size(g), len);
            gguf_close(g);
        } else {
            printf("  %s\n", err);
        }
        free(buf);
        gguf_writer_destroy(w);
    }
}

/* Writer → file (tmp + rename) → mmap reader; the file equals the memory image. */
TEST(roundtrip_file)
{
    float f32_data[192];
    uint16_t f16_data[10];
    uint8_t q8_data[68];
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    gguf_writer_t *w = make_sample(128, f32_data, f16_data, q8_data);
    char err[256] = "";
    CHECK_EQ(gguf_writer_write_file(w, path, err, sizeof(err)), 0);
    void *buf;
    size_t len;
    gguf_writer_write_mem(w, &buf, &len);
    gguf_t *g;
    int rc = gguf_open(path, &g, err, sizeof(err));
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        check_sample(g, 128, f32_data, f16_data, q8_data);
        CHECK_EQ(gguf_file_size(g), len);
        CHECK(memcmp(gguf_base(g), buf, len) == 0); /* file and memory images agree */
        gguf_close(g);
    }
    unlink(path);
    CHECK(gguf_open(path, &g, err, sizeof(err)) == DD_ENOTFOUND);
    CHECK(strstr(err, path) != NULL);
    CHECK(gguf_writer_write_file(w, "/nonexistent-dir/x.gguf", err, sizeof(err)) == DD_EIO);
    free(buf);
    gguf_writer_destroy(w);
}

/* Typed getters never convert: a wrong type is DD_ETYPE, a missing key DD_ENOTFOUND. */
TEST(strict_getters)
{
    float f32_data[192];
    uint16_t f16_data[10];
    uint8_t q8_data[68];
    gguf_writer_t *w = make_sample(0, f32_data, f16_data, q8_data);
    void *buf;
    size_t len;
    gguf_writer_write_mem(w, &buf, &len);
    gguf_t *g;
    CHECK_EQ(gguf_open_mem(buf, len, &g, NULL, 0), 0);
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    bool b;
    const char *s;
    size_t n;
    int64_t v;
    CHECK_EQ(gguf_get_u32(g, "k.i32", &u32), DD_ETYPE);
    CHECK_EQ(gguf_get_i32(g, "k.u32", &i32), DD_ETYPE);
    CHECK_EQ(gguf_get_u64(g, "k.u32", &u64), DD_ETYPE);
    CHECK_EQ(gguf_get_f32(g, "k.i32", &f), DD_ETYPE);
    CHECK_EQ(gguf_get_bool(g, "k.u32", &b), DD_ETYPE);
    CHECK_EQ(gguf_get_str(g, "k.arr_str", &s, &n), DD_ETYPE);
    CHECK_EQ(gguf_get_u32(g, "nope", &u32), DD_ENOTFOUND);
    CHECK_EQ(gguf_get_str(g, "nope", &s, &n), DD_ENOTFOUND);
    CHECK_EQ(gguf_get_int(g, "k.i32", &v), 0);
    CHECK_EQ(v, -7);
    CHECK_EQ(gguf_get_int(g, "k.u32", &v), 0);
    CHECK_EQ(v, 4000000000ll);
    CHECK_EQ(gguf_get_int(g, "k.bool", &v), 0);
    CHECK_EQ(v, 1);
    CHECK_EQ(gguf_get_int(g, "k.u64", &v), DD_ERANGE);
    CHECK_EQ(gguf_get_int(g, "k.f32", &v), DD_ETYPE);
    CHECK_EQ(gguf_get_int(g, "k.str", &v), DD_ETYPE);
    CHECK_EQ(gguf_get_int(g, "nope", &v), DD_ENOTFOUND);
    enum gguf_vtype et;
    const void *data;
    CHECK_EQ(gguf_get_arr(g, "k.u32", &et, &u64, &data), DD_ETYPE);
    CHECK_EQ(gguf_arr_int(g, "k.arr_f32", 0, &v), DD_ETYPE);
    CHECK_EQ(gguf_arr_int(g, "k.arr_str", 0, &v), DD_ETYPE);
    CHECK_EQ(gguf_arr_str(g, "k.arr_i32", 0, &s, &n), DD_ETYPE);
    CHECK_EQ(gguf_arr_str(g, "k.i32", 0, &s, &n), DD_ETYPE);
    CHECK_EQ(gguf_arr_f32(g, "nope", 0, &f), DD_ENOTFOUND);
    gguf_close(g);
    free(buf);
    gguf_writer_destroy(w);
}

/* Value types the writer has no setter for, and nested arrays, built by hand. */
TEST(all_value_types)
{
    struct gguf_raw b = {0};
    gguf_raw_header(&b, 2, 0, 10);
    gguf_raw_str(&b, "u8"), gguf_raw_u32(&b, GGUF_T_U8), gguf_raw_u8(&b, 200);
    gguf_raw_str(&b, "i8"), gguf_raw_u32(&b, GGUF_T_I8), gguf_raw_u8(&b, 0x80);
    gguf_raw_str(&b, "u16"), gguf_raw_u32(&b, GGUF_T_U16), gguf_raw_u8(&b, 0xff),
        gguf_raw_u8(&b, 0xff);
    gguf_raw_str(&b, "i16"), gguf_raw_u32(&b, GGUF_T_I16), gguf_raw_u8(&b, 0xfe),
        gguf_raw_u8(&b, 0xff);
    gguf_raw_str(&b, "i64"), gguf_raw_u32(&b, GGUF_T_I64), gguf_raw_u64(&b, (uint64_t)-5);
    double d = 2.5;
    gguf_raw_str(&b, "f64"), gguf_raw_u32(&b, GGUF_T_F64), gguf_raw_put(&b, &d, 8);
    /* [[1, 2], [], [3]] of u16, then [["a", "bc"]] */
    gguf_raw_str(&b, "nested"), gguf_raw_u32(&b, GGUF_T_ARRAY), gguf_raw_u32(&b, GGUF_T_ARRAY),
        gguf_raw_u64(&b, 3);
    gguf_raw_u32(&b, GGUF_T_U16), gguf_raw_u64(&b, 2), gguf_raw_u32(&b, 0x00020001);
    gguf_raw_u32(&b, GGUF_T_U16), gguf_raw_u64(&b, 0);
    gguf_raw_u32(&b, GGUF_T_U16), gguf_raw_u64(&b, 1), gguf_raw_u8(&b, 3), gguf_raw_u8(&b, 0);
    gguf_raw_str(&b, "nested_str"), gguf_raw_u32(&b, GGUF_T_ARRAY), gguf_raw_u32(&b, GGUF_T_ARRAY),
        gguf_raw_u64(&b, 1);
    gguf_raw_u32(&b, GGUF_T_STRING), gguf_raw_u64(&b, 2), gguf_raw_str(&b, "a"),
        gguf_raw_str(&b, "bc");
    gguf_raw_str(&b, "bools"), gguf_raw_u32(&b, GGUF_T_ARRAY), gguf_raw_u32(&b, GGUF_T_BOOL),
        gguf_raw_u64(&b, 3);
    gguf_raw_u8(&b, 1), gguf_raw_u8(&b, 0), gguf_raw_u8(&b, 1);
    gguf_raw_str(&b, "i8s"), gguf_raw_u32(&b, GGUF_T_ARRAY), gguf_raw_u32(&b, GGUF_T_I8),
        gguf_raw_u64(&b, 2);
    gguf_raw_u8(&b, 0xff), gguf_raw_u8(&b, 5);
    gguf_t *g;
    char err[256] = "";
    int rc = gguf_open_mem(b.p, b.n, &g, err, sizeof(err));
    CHECK_EQ(rc, 0);
    if (rc) {
        printf("  %s\n", err);
        return;
    }
    int64_t v;
    CHECK(gguf_get_int(g, "u8", &v) == 0 && v == 200);
    CHECK(gguf_get_int(g, "i8", &v) == 0 && v == -128);
    CHECK(gguf_get_int(g, "u16", &v) == 0 && v == 65535);
    CHECK(gguf_get_int(g, "i16", &v) == 0 && v == -2);
    CHECK(gguf_get_int(g, "i64", &v) == 0 && v == -5);
    CHECK_EQ(gguf_get_int(g, "f64", &v), DD_ETYPE);
    CHECK_EQ(gguf_kv_type(g, gguf_find_key(g, "f64")), GGUF_T_F64);
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    CHECK_EQ(gguf_get_arr(g, "nested", &et, &n, &data), 0);
    CHECK(et == GGUF_T_ARRAY && n == 3 && data == NULL);
    CHECK_EQ(gguf_arr_int(g, "nested", 0, &v), DD_ETYPE);
    CHECK_EQ(gguf_get_arr(g, "nested_str", &et, &n, &data), 0);
    CHECK(et == GGUF_T_ARRAY && n == 1);
    CHECK(gguf_arr_int(g, "bools", 1, &v) == 0 && v == 0);
    CHECK(gguf_arr_int(g, "bools", 2, &v) == 0 && v == 1);
    CHECK(gguf_arr_int(g, "i8s", 0, &v) == 0 && v == -1);
    CHECK_EQ(gguf_version(g), 2);
    CHECK_EQ(gguf_n_tensors(g), 0);
    gguf_close(g);
}

/* A 150k-entry string array: every element reachable, lookups constant time. */
TEST(big_string_array)
{
    enum { N = 150000 };
    char **s = malloc(N * sizeof(char *));
    for (int i = 0; i < N; i++) {
        s[i] = malloc(16);
        snprintf(s[i], 16, "tok%d", i);
    }
    gguf_writer_t *w = gguf_writer_create(0);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)s, NULL, N);
    void *buf;
    size_t len;
    gguf_writer_write_mem(w, &buf, &len);
    gguf_t *g;
    CHECK_EQ(gguf_open_mem(buf, len, &g, NULL, 0), 0);
    double t0 = dd_now();
    int bad = 0;
    for (int rep = 0; rep < 10; rep++) {
        for (int i = N - 1; i >= 0; i -= 7) {
            const char *p;
            size_t n;
            bad += gguf_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)i, &p, &n) != 0 ||
                   n != strlen(s[i]) || memcmp(p, s[i], n) != 0;
        }
    }
    CHECK_EQ(bad, 0);
    CHECK(dd_now() - t0 < 1.0); /* ~214k lookups: linear scans would take minutes */
    gguf_close(g);
    free(buf);
    gguf_writer_destroy(w);
    for (int i = 0; i < N; i++)
        free(s[i]);
    free(s);
}

/* Block geometry of every ggml type id, and rejection of removed / unknown ids. */
TEST(type_table)
{
    uint32_t be, bb;
    const char *name;
    struct {
        uint32_t id, be, bb;
    } want[] = {{0, 1, 4},      {1, 1, 2},      {2, 32, 18},    {3, 32, 20},    {6, 32, 22},
                {7, 32, 24},    {8, 32, 34},    {9, 32, 36},    {10, 256, 84},  {11, 256, 110},
                {12, 256, 144}, {13, 256, 176}, {14, 256, 210}, {15, 256, 292}, {16, 256, 66},
                {17, 256, 74},  {18, 256, 98},  {19, 256, 50},  {20, 32, 18},   {21, 256, 110},
                {22, 256, 82},  {23, 256, 136}, {24, 1, 1},     {25, 1, 2},     {26, 1, 4},
                {27, 1, 8},     {28, 1, 8},     {29, 256, 56},  {30, 1, 2},     {34, 256, 54},
                {35, 256, 66},  {39, 32, 17}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        CHECK(gguf_type_info(want[i].id, &be, &bb, &name));
        CHECK_EQ(be, want[i].be);
        CHECK_EQ(bb, want[i].bb);
    }
    CHECK(gguf_type_info(12, NULL, NULL, &name) && strcmp(name, "q4_K") == 0);
    uint32_t removed[] = {4, 5, 31, 32, 33, 36, 37, 38, 1000, 0xffffffffu};
    for (size_t i = 0; i < sizeof(removed) / sizeof(removed[0]); i++)
        CHECK(!gguf_type_info(removed[i], &be, &bb, &name));
}

/* The writer refuses tensors the reader would reject. */
TEST(writer_rejects)
{
    gguf_writer_t *w = gguf_writer_create(0);
    float x[64] = {0};
    const int64_t ne[2] = {16, 4}, bad_q8[1] = {48}, neg[1] = {-1};
    CHECK_EQ(gguf_writer_add_tensor(w, "t", 2, ne, 0, x, 256), 0);
    CHECK_EQ(gguf_writer_add_tensor(w, "t", 2, ne, 0, x, 256), DD_EINVAL);    /* duplicate */
    CHECK_EQ(gguf_writer_add_tensor(w, "u", 2, ne, 0, x, 255), DD_EINVAL);    /* size */
    CHECK_EQ(gguf_writer_add_tensor(w, "v", 0, ne, 0, x, 4), DD_EINVAL);      /* n_dims */
    CHECK_EQ(gguf_writer_add_tensor(w, "v", 5, ne, 0, x, 4), DD_EINVAL);      /* n_dims */
    CHECK_EQ(gguf_writer_add_tensor(w, "v", 1, bad_q8, 8, x, 51), DD_EINVAL); /* ne0 % 32 */
    CHECK_EQ(gguf_writer_add_tensor(w, "v", 1, ne, 4, x, 64), DD_EINVAL);     /* type id */
    CHECK_EQ(gguf_writer_add_tensor(w, "v", 1, neg, 0, x, 0), DD_EINVAL);     /* ne < 0 */
    CHECK_EQ(gguf_writer_add_tensor(w, "", 1, ne, 0, x, 64), DD_EINVAL);      /* empty name */
    gguf_writer_destroy(w);
}

/* ---- malformed files ---------------------------------------------------------------------- */

/* A valid two-tensor file: 2 kvs, tensors "a" (f32 [8]) and "b" (q8_0 [32, 2]). */
static void build_valid(struct gguf_raw *b)
{
    const uint64_t ne_a[1] = {8}, ne_b[2] = {32, 2};
    gguf_raw_header(b, 3, 2, 2);
    gguf_raw_str(b, "general.architecture"), gguf_raw_u32(b, GGUF_T_STRING), gguf_raw_str(b, "x");
    gguf_raw_kv_u32(b, "x.count", 5);
    gguf_raw_tinfo(b, "a", 1, ne_a, 0, 0);
    gguf_raw_tinfo(b, "b", 2, ne_b, 8, 32);
    gguf_raw_pad(b, 32);
    for (int i = 0; i < 32 + 68; i++)
        gguf_raw_u8(b, (uint8_t)i);
}

/* The base file opens; each of its strict prefixes (every byte offset) is rejected. */
TEST(valid_base_and_truncation)
{
    struct gguf_raw b = {0};
    build_valid(&b);
    gguf_t *g;
    char err[256] = "";
    CHECK_EQ(gguf_open_mem(b.p, b.n, &g, err, sizeof(err)), 0);
    if (g)
        gguf_close(g);
    /* Every strict prefix must be rejected, including the empty one. */
    int bad = 0;
    for (size_t n = 0; n < b.n; n++) {
        err[0] = '\0';
        g = NULL;
        int rc = gguf_open_mem(b.p, n, &g, err, sizeof(err));
        if (rc >= 0 || g || !strstr(err, "(at byte ")) {
            printf("  prefix %zu accepted or no message: rc %d '%s'\n", n, rc, err);
            bad++;
            gguf_close(g);
        }
    }
    CHECK_EQ(bad, 0);
}

/* Magic, versions 1 / 99 / byte-swapped 3, and counts of 2^60 and 2^64 - 1. */
TEST(bad_header)
{
    struct gguf_raw b = {0};
    build_valid(&b);
    b.p[0] = 'X';
    CHECK(expect_reject(&b, "bad magic"));
    struct gguf_raw v1 = {0}, v99 = {0}, be = {0};
    gguf_raw_header(&v1, 1, 0, 0);
    CHECK(expect_reject(&v1, "version 1"));
    gguf_raw_header(&v99, 99, 0, 0);
    CHECK(expect_reject(&v99, "version 99"));
    gguf_raw_header(&be, 0x03000000u, 0, 0);
    CHECK(expect_reject(&be, "big-endian"));
    struct gguf_raw hk = {0}, ht = {0};
    gguf_raw_header(&hk, 3, 0, 1ull << 60);
    gguf_raw_zeros(&hk, 64);
    CHECK(expect_reject(&hk, "kv_count"));
    gguf_raw_header(&ht, 3, 0xffffffffffffffffull, 0);
    gguf_raw_zeros(&ht, 64);
    CHECK(expect_reject(&ht, "tensor_count"));
}

TEST(bad_kvs)
{
    /* Key length 2^60: must fail on the length, before allocating. */
    struct gguf_raw b = {0};
    gguf_raw_header(&b, 3, 0, 1);
    gguf_raw_u64(&b, 1ull << 60), gguf_raw_put(&b, "abc", 3);
    gguf_raw_zeros(&b, 16);
    CHECK(expect_reject(&b, "key length"));

    /* String value longer than the file. */
    struct gguf_raw s = {0};
    gguf_raw_header(&s, 3, 0, 1);
    gguf_raw_str(&s, "k"), gguf_raw_u32(&s, GGUF_T_STRING), gguf_raw_u64(&s, 0x7fffffffffffffffull);
    gguf_raw_zeros(&s, 16);
    CHECK(expect_reject(&s, "string length"));

    /* Value type 13 does not exist. */
    struct gguf_raw t = {0};
    gguf_raw_header(&t, 3, 0, 1);
    gguf_raw_str(&t, "k"), gguf_raw_u32(&t, 13), gguf_raw_u32(&t, 0);
    CHECK(expect_reject(&t, "unknown value type 13"));

    /* Array of an unknown element type. */
    struct gguf_raw e = {0};
    gguf_raw_header(&e, 3, 0, 1);
    gguf_raw_str(&e, "k"), gguf_raw_u32(&e, GGUF_T_ARRAY), gguf_raw_u32(&e, 77),
        gguf_raw_u64(&e, 0);
    CHECK(expect_reject(&e, "unknown array element type 77"));

    /* Array counts that the remaining bytes cannot hold: fixed-size and string elements. */
    struct gguf_raw c = {0};
    gguf_raw_header(&c, 3, 0, 1);
    gguf_raw_str(&c, "k"), gguf_raw_u32(&c, GGUF_T_ARRAY), gguf_raw_u32(&c, GGUF_T_U32),
        gguf_raw_u64(&c, 1ull << 60);
    gguf_raw_zeros(&c, 32);
    CHECK(expect_reject(&c, "u32 values"));

    struct gguf_raw cs = {0};
    gguf_raw_header(&cs, 3, 0, 1);
    gguf_raw_str(&cs, "k"), gguf_raw_u32(&cs, GGUF_T_ARRAY), gguf_raw_u32(&cs, GGUF_T_STRING),
        gguf_raw_u64(&cs, 1ull << 60);
    gguf_raw_zeros(&cs, 32);
    CHECK(expect_reject(&cs, "array count"));

    /* The same key twice. */
    struct gguf_raw d = {0};
    gguf_raw_header(&d, 3, 0, 2);
    gguf_raw_kv_u32(&d, "dup", 1);
    gguf_raw_kv_u32(&d, "dup", 2);
    CHECK(expect_reject(&d, "duplicate key"));

    /* A bool byte other than 0 / 1, an empty key and a key with a NUL byte. */
    struct gguf_raw bo = {0};
    gguf_raw_header(&bo, 3, 0, 1);
    gguf_raw_str(&bo, "k"), gguf_raw_u32(&bo, GGUF_T_BOOL), gguf_raw_u8(&bo, 2);
    CHECK(expect_reject(&bo, "bool value 2"));

    struct gguf_raw ek = {0};
    gguf_raw_header(&ek, 3, 0, 1);
    gguf_raw_kv_u32(&ek, "", 1);
    CHECK(expect_reject(&ek, "empty key"));

    struct gguf_raw nk = {0};
    gguf_raw_header(&nk, 3, 0, 1);
    gguf_raw_u64(&nk, 3), gguf_raw_put(&nk, "a\0b", 3), gguf_raw_u32(&nk, GGUF_T_U8),
        gguf_raw_u8(&nk, 0);
    CHECK(expect_reject(&nk, "NUL"));
}

TEST(nesting_depth)
{
    /* Arrays nested 7 or 8 levels deep are accepted, 9 levels are not. */
    for (int depth = 7; depth <= 9; depth++) {
        struct gguf_raw b = {0};
        gguf_raw_header(&b, 3, 0, 1);
        gguf_raw_str(&b, "deep"), gguf_raw_u32(&b, GGUF_T_ARRAY);
        for (int i = 0; i < depth - 1; i++)
            gguf_raw_u32(&b, GGUF_T_ARRAY), gguf_raw_u64(&b, 1);
        gguf_raw_u32(&b, GGUF_T_U8), gguf_raw_u64(&b, 0);
        gguf_t *g = NULL;
        char err[256] = "";
        int rc = gguf_open_mem(b.p, b.n, &g, err, sizeof(err));
        if (depth <= 8) {
            CHECK_EQ(rc, 0);
            gguf_close(g);
        } else {
            CHECK(expect_reject(&b, "nested deeper"));
        }
    }
}

/* general.alignment 0 and 3 (not powers of two), then stored as i32 and u64. */
TEST(bad_alignment)
{
    const uint32_t vals[2] = {0, 3};
    for (int i = 0; i < 2; i++) {
        struct gguf_raw b = {0};
        gguf_raw_header(&b, 3, 0, 1);
        gguf_raw_kv_u32(&b, "general.alignment", vals[i]);
        CHECK(expect_reject(&b, "power of two"));
    }
    struct gguf_raw t = {0};
    gguf_raw_header(&t, 3, 0, 1);
    gguf_raw_str(&t, "general.alignment"), gguf_raw_u32(&t, GGUF_T_I32), gguf_raw_u32(&t, 32);
    CHECK(expect_reject(&t, "expected u32"));
    struct gguf_raw u = {0};
    gguf_raw_header(&u, 3, 0, 1);
    gguf_raw_str(&u, "general.alignment"), gguf_raw_u32(&u, GGUF_T_U64), gguf_raw_u64(&u, 32);
    CHECK(expect_reject(&u, "expected u32"));
}

/* One tensor info with the given fields followed by enough data for a small tensor. */
static void one_tensor(struct gguf_raw *b, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t off)
{
    gguf_raw_header(b, 3, 1, 0);
    gguf_raw_tinfo(b, "t", n_dims, ne, type, off);
    gguf_raw_pad(b, 32);
    gguf_raw_zeros(b, 128);
}

/* One broken field per case: n_dims, ne range and products, type id, block multiple, offset
 * alignment, and data ranges past the end of the file. */
TEST(bad_tensor_infos)
{
    const uint64_t ne4[4] = {4, 1, 1, 1}, ne5[5] = {4, 1, 1, 1, 1};
    struct gguf_raw b0 = {0}, b5 = {0}, ok4 = {0};
    one_tensor(&b0, 0, ne4, 0, 0);
    CHECK(expect_reject(&b0, "n_dims 0"));
    one_tensor(&b5, 5, ne5, 0, 0);
    CHECK(expect_reject(&b5, "n_dims 5"));
    one_tensor(&ok4, 4, ne4, 0, 0);
    gguf_t *g;
    CHECK_EQ(gguf_open_mem(ok4.p, ok4.n, &g, NULL, 0), 0);
    gguf_close(g);

    const uint64_t huge[1] = {1ull << 63}, ovf[2] = {1ull << 32, 1ull << 32};
    struct gguf_raw h = {0}, o = {0};
    one_tensor(&h, 1, huge, 0, 0);
    CHECK(expect_reject(&h, "out of range"));
    one_tensor(&o, 2, ovf, 0, 0);
    CHECK(expect_reject(&o, "overflows"));
    const uint64_t big[2] = {1ull << 31, 1ull << 31}; /* 2^62 elements of 4 bytes */
    struct gguf_raw bs = {0};
    one_tensor(&bs, 2, big, 0, 0);
    CHECK(expect_reject(&bs, "overflows"));

    const uint64_t ne32[1] = {32};
    struct gguf_raw ty = {0}, ty4 = {0}, blk = {0}, mis = {0}, eof = {0};
    one_tensor(&ty, 1, ne32, 41, 0);
    CHECK(expect_reject(&ty, "unknown ggml type 41"));
    one_tensor(&ty4, 1, ne32, 4, 0);
    CHECK(expect_reject(&ty4, "unknown ggml type 4"));
    const uint64_t ne33[1] = {33};
    one_tensor(&blk, 1, ne33, 8, 0);
    CHECK(expect_reject(&blk, "block size"));
    one_tensor(&mis, 1, ne32, 0, 16);
    CHECK(expect_reject(&mis, "not a multiple of the alignment"));
    one_tensor(&eof, 1, ne32, 0, 64); /* 128 data bytes: 64 + 128 > 128 */
    CHECK(expect_reject(&eof, "exceeds"));
    struct gguf_raw far = {0};
    one_tensor(&far, 1, ne32, 0, 0xffffffffffffffe0ull);
    CHECK(expect_reject(&far, "exceeds"));
}

/* Properties of the tensor set: overlapping data, duplicate names, empty names. */
TEST(bad_tensor_sets)
{
    const uint64_t ne[1] = {16};
    struct gguf_raw ov = {0};
    gguf_raw_header(&ov, 3, 2, 0);
    gguf_raw_tinfo(&ov, "a", 1, ne, 0, 32);
    gguf_raw_tinfo(&ov, "b", 1, ne, 0, 64); /* a covers [32, 96) */
    gguf_raw_pad(&ov, 32);
    gguf_raw_zeros(&ov, 256);
    CHECK(expect_reject(&ov, "overlaps"));

    struct gguf_raw dup = {0};
    gguf_raw_header(&dup, 3, 2, 0);
    gguf_raw_tinfo(&dup, "a", 1, ne, 0, 0);
    gguf_raw_tinfo(&dup, "a", 1, ne, 0, 64);
    gguf_raw_pad(&dup, 32);
    gguf_raw_zeros(&dup, 256);
    CHECK(expect_reject(&dup, "duplicate tensor name"));

    struct gguf_raw en = {0};
    one_tensor(&en, 1, ne, 0, 0);
    memset(en.p + 24, 0, 8); /* the name length */
    CHECK(expect_reject(&en, NULL));

    /* Zero-sized tensors sharing an offset with a real one are not overlaps. */
    const uint64_t zero[1] = {0};
    struct gguf_raw z = {0};
    gguf_raw_header(&z, 3, 2, 0);
    gguf_raw_tinfo(&z, "big", 1, ne, 0, 0);
    gguf_raw_tinfo(&z, "empty", 1, zero, 0, 0);
    gguf_raw_pad(&z, 32);
    gguf_raw_zeros(&z, 64);
    gguf_t *g;
    char err[256] = "";
    CHECK_EQ(gguf_open_mem(z.p, z.n, &g, err, sizeof(err)), 0);
    if (g) {
        CHECK_EQ(gguf_find_tensor(g, "empty")->size, 0);
        gguf_close(g);
    }
}

/* Messages from gguf_open name the path. */
TEST(file_errors)
{
    struct gguf_raw b = {0};
    build_valid(&b);
    b.p[4] = 1; /* version 1 */
    char path[] = "/tmp/test_gguf_bad_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, b.p, b.n) == (ssize_t)b.n);
    close(fd);
    gguf_t *g = NULL;
    char err[512] = "";
    CHECK_EQ(gguf_open(path, &g, err, sizeof(err)), DD_EFORMAT);
    CHECK(g == NULL && strstr(err, path) == err && strstr(err, "header: unsupported version 1"));
    fd = open(path, O_WRONLY | O_TRUNC);
    close(fd);
    CHECK_EQ(gguf_open(path, &g, err, sizeof(err)), DD_EFORMAT); /* empty file */
    unlink(path);
    CHECK(gguf_open("/tmp", &g, err, sizeof(err)) < 0);
}

/* Random byte flips of a valid file never crash (ASan/UBSan catch what a plain run misses). */
TEST(random_flips)
{
    struct gguf_raw base = {0};
    build_valid(&base);
    unsigned long long s = 7;
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        struct gguf_raw b = base;
        int flips = 1 + (int)(test_rng_next(&s) % 4);
        for (int k = 0; k < flips; k++)
            b.p[test_rng_next(&s) % b.n] ^= (uint8_t)(1u << (test_rng_next(&s) % 8));
        gguf_t *g = NULL;
        char err[256] = "";
        int rc = gguf_open_mem(b.p, b.n, &g, err, sizeof(err));
        if (rc == 0) {
            accepted++;
            for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
                const struct gguf_tensor *t = gguf_tensor_at(g, i);
                CHECK((const uint8_t *)t->data + t->size <= (const uint8_t *)gguf_base(g) + b.n);
            }
            gguf_close(g);
        } else {
            CHECK(err[0] != '\0');
        }
    }
    CHECK(accepted > 0); /* flips in tensor data keep the file valid */
}

int main(void)
{
    RUN(roundtrip_mem);
    RUN(roundtrip_file);
    RUN(strict_getters);
    RUN(all_value_types);
    RUN(big_string_array);
    RUN(type_table);
    RUN(writer_rejects);
    RUN(valid_base_and_truncation);
    RUN(bad_header);
    RUN(bad_kvs);
    RUN(nesting_depth);
    RUN(bad_alignment);
    RUN(bad_tensor_infos);
    RUN(bad_tensor_sets);
    RUN(file_errors);
    RUN(random_flips);
    TEST_MAIN_END("test_gguf");
}

/*
 * test_kq — kernels/cpu/kq.c and its SIMD implementations.
 *
 * 1. Layouts: one hand-assembled block per type, its bytes written field by field from the GGUF
 *    layout (not via kq.c), dequantises to values computed here.
 * 2. Conversions: f16 against the F16C instructions over all 65536 halves and random floats;
 *    bf16 rounding cases.
 * 3. Reference quantisers: round-trip relative RMS error per type.
 * 4. Scalar dot = double dot of the dequantised weight and activation rows.
 * 5. Every SIMD ISA this CPU has = scalar: activation quantisers byte for byte, kq_dot and
 *    kq_matmul over token counts, row ranges, strides and row lengths; the packed types give
 *    bit-identical outputs for a token whatever the batch around it (from 2 tokens on), and
 *    kq_matmul_tagged gives kq_matmul's outputs bit for bit.
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/cpu/kq.h" // defines: kq_*
#include "test.h"

static unsigned long long rng = 0x9e3779b97f4a7c15ull;

/* Little-endian field writers for the hand-assembled blocks. */
static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32f(uint8_t *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Max |got - want| over n values. */
static double maxdiff(const float *got, const float *want, int n)
{
    double m = 0.0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs((double)got[i] - want[i]));
    return m;
}

/* ================================ type facts ================================================ */

TEST(type_facts)
{
    static const struct {
        enum kq_type t;
        int elems;
        size_t bytes;
        const char *name;
        enum kq_type act;
    } want[] = {
        {KQ_F32, 1, 4, "f32", KQ_F32},        {KQ_F16, 1, 2, "f16", KQ_F32},
        {KQ_BF16, 1, 2, "bf16", KQ_F32},      {KQ_Q8_0, 32, 34, "q8_0", KQ_Q8_0},
        {KQ_Q4_0, 32, 18, "q4_0", KQ_Q8_0},   {KQ_Q4_K, 256, 144, "q4_K", KQ_Q8_K},
        {KQ_Q5_K, 256, 176, "q5_K", KQ_Q8_K}, {KQ_Q6_K, 256, 210, "q6_K", KQ_Q8_K},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK(kq_type_supported(want[i].t));
        CHECK_EQ(kq_block_elems(want[i].t), want[i].elems);
        CHECK_EQ(kq_block_bytes(want[i].t), want[i].bytes);
        CHECK_STR_EQ(kq_type_name(want[i].t), want[i].name);
        CHECK_EQ(kq_act_type(want[i].t), want[i].act);
        CHECK_EQ(kq_row_bytes(want[i].t, 512), 512 / want[i].elems * want[i].bytes);
    }
    CHECK_EQ(kq_block_bytes(KQ_Q8_K), 292);
    CHECK(!kq_type_supported(KQ_Q8_K));
    CHECK(!kq_type_supported(3)); /* Q4_1 */
    CHECK_STR_EQ(kq_type_name(99), "?");
    CHECK_EQ(kq_act_row_bytes(KQ_Q4_K, 512), 2 * 292);
}

/* ================================ conversions =============================================== */

/* The F16C instructions as an independent f16 oracle (compiled for F16C here only). */
__attribute__((target("f16c"))) static float hw_h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

__attribute__((target("f16c"))) static uint16_t hw_f2h(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

/* Bit-identical, or both NaN (payloads may differ). */
static int same_float(float a, float b)
{
    return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b));
}

TEST(f16_known)
{
    CHECK_EQ(kq_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ(kq_f32_to_f16(-2.0f), 0xc000);
    CHECK_EQ(kq_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ(kq_f32_to_f16(65520.0f), 0x7c00);            /* rounds up to infinity */
    CHECK_EQ(kq_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);     /* tie to even */
    CHECK_EQ(kq_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie to even, upwards */
    CHECK_EQ(kq_f32_to_f16(0x1p-24f), 0x0001);            /* smallest subnormal */
    CHECK_EQ(kq_f32_to_f16(0x1p-25f), 0x0000);            /* tie to even: zero */
    CHECK_EQ(kq_f32_to_f16(0x1.8p-25f), 0x0001);
    CHECK(kq_f16_to_f32(0x3555) > 0.333f && kq_f16_to_f32(0x3555) < 0.3334f);
    CHECK(kq_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(isinf(kq_f16_to_f32(0xfc00)) && kq_f16_to_f32(0xfc00) < 0);
    CHECK(isnan(kq_f16_to_f32(0x7e00)));
    CHECK(isnan(kq_f16_to_f32(kq_f32_to_f16(NAN))));
}

TEST(f16_vs_f16c)
{
    /* clang 14 cannot query "f16c"; every AVX2 CPU has it. */
    if (!__builtin_cpu_supports("avx2")) {
        printf("  (no F16C on this CPU: hardware comparison skipped)\n");
        return;
    }
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = kq_f16_to_f32((uint16_t)h);
        bad += !same_float(f, hw_h2f((uint16_t)h));
        if (!isnan(f))
            bad += kq_f32_to_f16(f) != h; /* exact round trip */
    }
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = (uint32_t)test_rng_next(&rng);
        if (i % 2) /* half of the draws near the f16 range, where rounding matters */
            bits = (bits & 0x807fffffu) | ((uint32_t)(100 + (bits >> 24) % 45) << 23);
        float f;
        memcpy(&f, &bits, 4);
        if (isnan(f))
            continue;
        bad += kq_f32_to_f16(f) != hw_f2h(f);
    }
    CHECK_EQ(bad, 0);
}

TEST(bf16)
{
    CHECK_EQ(kq_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ(kq_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie to even */
    CHECK_EQ(kq_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie to even, upwards */
    CHECK_EQ(kq_f32_to_bf16(1.0f + 0x1.8p-8f), 0x3f81);
    CHECK_EQ(kq_f32_to_bf16(-3.0f), 0xc040);
    CHECK(isnan(kq_bf16_to_f32(kq_f32_to_bf16(NAN))));
    CHECK(kq_bf16_to_f32(0x4049) == 3.140625f);
}

/* ================================ hand-assembled blocks ===================================== */

TEST(block_float)
{
    uint8_t b[8];
    float y[4];
    put16(b, 0x3c00), put16(b + 2, 0xc000), put16(b + 4, 0x0001), put16(b + 6, 0x7bff);
    kq_dequantize_row(KQ_F16, b, y, 4);
    CHECK(y[0] == 1.0f && y[1] == -2.0f && y[2] == 0x1p-24f && y[3] == 65504.0f);
    put16(b, 0x3f80), put16(b + 2, 0x4049), put16(b + 4, 0xc040), put16(b + 6, 0x0000);
    kq_dequantize_row(KQ_BF16, b, y, 4);
    CHECK(y[0] == 1.0f && y[1] == 3.140625f && y[2] == -3.0f && y[3] == 0.0f);
    put32f(b, 1.5f), put32f(b + 4, -0.25f);
    kq_dequantize_row(KQ_F32, b, y, 2);
    CHECK(y[0] == 1.5f && y[1] == -0.25f);
}

TEST(block_q8_0)
{
    uint8_t b[34];
    float y[32];
    put16(b, 0x3800); /* d = 0.5 */
    for (int i = 0; i < 32; i++)
        b[2 + i] = (uint8_t)(int8_t)(3 * i - 50);
    kq_dequantize_row(KQ_Q8_0, b, y, 32);
    for (int i = 0; i < 32; i++)
        CHECK(y[i] == 0.5f * (float)(3 * i - 50));
}

TEST(block_q4_0)
{
    uint8_t b[18];
    float y[32];
    put16(b, 0x4000); /* d = 2 */
    for (int i = 0; i < 16; i++)
        b[2 + i] = (uint8_t)(i | (15 - i) << 4); /* element i: nibble i; element 16 + i: 15 - i */
    kq_dequantize_row(KQ_Q4_0, b, y, 32);
    for (int i = 0; i < 16; i++) {
        CHECK(y[i] == 2.0f * (float)(i - 8));
        CHECK(y[16 + i] == 2.0f * (float)(7 - i));
    }
}

/*
 * Scales / mins of the K-quant test blocks and their 12 packed bytes, worked out by hand:
 * bytes 0-3 = sc[j] | (sc[j+4] >> 4) << 6, bytes 4-7 = m[j] | (m[j+4] >> 4) << 6,
 * bytes 8-11 = (sc[j+4] & 15) | (m[j+4] & 15) << 4.
 */
static const int k_sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
static const int k_m[8] = {0, 5, 10, 15, 20, 40, 16, 63};
static const uint8_t k_packed[12] = {0x41, 0x82, 0xc3, 0xc4, 0x40, 0x85,
                                     0x4a, 0xcf, 0x41, 0x81, 0x02, 0xff};

/* Nibble of element e of a K-quant qs[128]: group e / 64, low nibbles first, then high. */
static int k_nibble(const uint8_t *qs, int e)
{
    const int g = e / 64, l = e % 64;
    return l < 32 ? qs[32 * g + l] & 15 : qs[32 * g + l - 32] >> 4;
}

TEST(block_q4_k)
{
    uint8_t b[144];
    float y[256];
    put16(b, 0x3c00);     /* d = 1 */
    put16(b + 2, 0x3800); /* dmin = 0.5 */
    memcpy(b + 4, k_packed, 12);
    for (int i = 0; i < 128; i++)
        b[16 + i] = (uint8_t)(i * 7 + 3);
    kq_dequantize_row(KQ_Q4_K, b, y, 256);
    int bad = 0;
    for (int e = 0; e < 256; e++)
        bad += y[e] != (float)(k_sc[e / 32] * k_nibble(b + 16, e)) - 0.5f * (float)k_m[e / 32];
    CHECK_EQ(bad, 0);
    /* Spot values: element 0 = 1 * 1 * (3 & 15) - 0; element 255 = 63 * (b[143] >> 4) - 31.5. */
    CHECK(y[0] == 3.0f);
    CHECK(y[255] == 63.0f * (float)(b[143] >> 4) - 31.5f);
}

/* Q4_KX (kq.h): step k, 4-byte group j holds elements 4k..4k+3 of sub-block j, as nibbles
 * packed like Q4_K's (step k in the low nibbles of qs[32 (k / 2) ..] for even k, else high). */
static int kx_nibble(const uint8_t *qs, int e)
{
    const int j = e / 32, k = e % 32 / 4, t = e % 4;
    return (qs[32 * (k / 2) + 4 * j + t] >> (4 * (k % 2))) & 15;
}

TEST(block_q4_kx)
{
    CHECK(!kq_type_supported(KQ_Q4_KX));
    CHECK(!kq_type_supported(KQ_Q8_KX));
    CHECK_STR_EQ(kq_type_name(KQ_Q4_KX), "q4_Kx");
    CHECK_EQ(kq_act_type(KQ_Q4_KX), KQ_Q8_KX);
    CHECK_EQ(kq_row_bytes(KQ_Q4_KX, 512), 288);
    CHECK_EQ(kq_repack_type(KQ_Q4_K), kq_isa_active() == KQ_ISA_SCALAR ? KQ_Q4_K : KQ_Q4_KX);
    CHECK_EQ(kq_repack_type(KQ_Q8_0), kq_isa_active() >= KQ_ISA_AVX2 ? KQ_Q8_0X : KQ_Q8_0);
    uint8_t b[2][144], x[2][144], back[2][144];
    for (int r = 0; r < 2; r++) {
        put16(b[r], 0x3c00);
        put16(b[r] + 2, 0x3800);
        memcpy(b[r] + 4, k_packed, 12);
        for (int i = 0; i < 128; i++)
            b[r][16 + i] = (uint8_t)(i * 7 + 3 + 50 * r);
    }
    CHECK(kq_repack_rows(KQ_Q4_K, KQ_Q4_KX, b, x, 256, 2));
    int bad = 0;
    for (int r = 0; r < 2; r++) {
        bad += memcmp(x[r], b[r], 16) != 0; /* d, dmin, scales unchanged */
        for (int e = 0; e < 256; e++)
            bad += kx_nibble(x[r] + 16, e) != k_nibble(b[r] + 16, e);
    }
    CHECK_EQ(bad, 0);
    float yb[512], yx[512];
    kq_dequantize_row(KQ_Q4_K, b, yb, 512);
    kq_dequantize_row(KQ_Q4_KX, x, yx, 512);
    CHECK(memcmp(yb, yx, sizeof yb) == 0);
    CHECK(kq_repack_rows(KQ_Q4_KX, KQ_Q4_K, x, back, 256, 2));
    CHECK(memcmp(back, b, sizeof b) == 0);
    CHECK(!kq_repack_rows(KQ_Q8_0, KQ_Q4_KX, b, back, 256, 1));
    /* The reference dots agree bit for bit; the activation is the Q8_K one reordered alike. */
    float a[512];
    uint8_t ak[2 * 292], akx[2 * 292];
    for (int i = 0; i < 512; i++)
        a[i] = (float)((i * 37) % 101 - 50) / 7.0f;
    const enum kq_isa isa = kq_isa_active();
    kq_isa_force(KQ_ISA_SCALAR);
    kq_quantize_act(KQ_Q4_K, a, ak, 512);
    kq_quantize_act(KQ_Q4_KX, a, akx, 512);
    for (int blk = 0; blk < 2; blk++) {
        const int8_t *q = (const int8_t *)(ak + 292 * blk + 4),
                     *qx = (const int8_t *)(akx + 292 * blk + 4);
        for (int e = 0; e < 256; e++) /* element e of sub-block j at step k, group j */
            bad += qx[32 * (e % 32 / 4) + 4 * (e / 32) + e % 4] != q[e];
        bad += memcmp(ak + 292 * blk, akx + 292 * blk, 4) != 0;
        bad += memcmp(ak + 292 * blk + 260, akx + 292 * blk + 260, 32) != 0; /* bsums */
    }
    CHECK_EQ(bad, 0);
    const float dk = kq_dot(KQ_Q4_K, 512, b, ak), dx = kq_dot(KQ_Q4_KX, 512, x, akx);
    CHECK(dk == dx);
    kq_isa_force(isa);
}

/* Q8_0X (kq.h): a row of 19 blocks = 19 f16 scales, then a group of 16 blocks (byte i of word
 * k of block l at 38 + 64 k + 4 l + i, stored + 128) and one of 3 (at 38 + 512 + 12 k + 4 l +
 * i); round trip, the dequantised values and the reference dot equal Q8_0's bit for bit. */
TEST(block_q8_0x)
{
    enum { NB = 19, N = 32 * NB, RB = 34 * NB };
    CHECK(!kq_type_supported(KQ_Q8_0X));
    CHECK_STR_EQ(kq_type_name(KQ_Q8_0X), "q8_0x");
    CHECK_EQ(kq_act_type(KQ_Q8_0X), KQ_Q8_0);
    CHECK_EQ(kq_row_bytes(KQ_Q8_0X, N), RB);
    uint8_t b[2][RB], x[2][RB], back[2][RB];
    for (int r = 0; r < 2; r++)
        for (int blk = 0; blk < NB; blk++) {
            put16(b[r] + 34 * blk, (uint16_t)(0x3c00 + blk + 32 * r));
            for (int i = 0; i < 32; i++) /* -128 included */
                b[r][34 * blk + 2 + i] = (uint8_t)(i * 29 + blk * 7 + r);
        }
    CHECK(kq_repack_rows(KQ_Q8_0, KQ_Q8_0X, b, x, N, 2));
    int bad = 0;
    for (int r = 0; r < 2; r++)
        for (int blk = 0; blk < NB; blk++) {
            const int l = blk % 16, m = blk < 16 ? 16 : 3, g0 = 2 * NB + 512 * (blk / 16);
            bad += memcmp(x[r] + 2 * blk, b[r] + 34 * blk, 2) != 0;
            for (int e = 0; e < 32; e++)
                bad += x[r][g0 + 4 * m * (e / 4) + 4 * l + e % 4] !=
                       (uint8_t)(b[r][34 * blk + 2 + e] ^ 0x80);
        }
    CHECK_EQ(bad, 0);
    float yb[2 * N], yx[2 * N];
    kq_dequantize_row(KQ_Q8_0, b, yb, 2 * N);
    for (int r = 0; r < 2; r++)
        kq_dequantize_row(KQ_Q8_0X, x[r], yx + r * N, N);
    CHECK(memcmp(yb, yx, sizeof yb) == 0);
    CHECK(kq_repack_rows(KQ_Q8_0X, KQ_Q8_0, x, back, N, 2));
    CHECK(memcmp(back, b, sizeof b) == 0);
    CHECK(!kq_repack_rows(KQ_Q8_0X, KQ_Q4_K, x, back, 256, 1));
    float a[N];
    uint8_t aq[RB];
    for (int i = 0; i < N; i++)
        a[i] = (float)((i * 37) % 101 - 50) / 7.0f;
    const enum kq_isa isa = kq_isa_active();
    kq_isa_force(KQ_ISA_SCALAR);
    kq_quantize_act(KQ_Q8_0X, a, aq, N);
    for (int r = 0; r < 2; r++)
        CHECK(kq_dot(KQ_Q8_0, N, b[r], aq) == kq_dot(KQ_Q8_0X, N, x[r], aq));
    kq_isa_force(isa);
}

/* Q4_0X (kq.h): a row of 17 blocks = 17 f16 scales, then a group of 16 (byte j of block l's
 * qs at 34 + 64 (j / 4) + 4 l + j % 4, unchanged) and one of 1 block (at 34 + 256 + 4 (j / 4) +
 * j % 4); round trip, the dequantised values and the reference dot equal Q4_0's bit for bit. */
TEST(block_q4_0x)
{
    enum { NB = 17, N = 32 * NB, RB = 18 * NB };
    CHECK(!kq_type_supported(KQ_Q4_0X));
    CHECK_STR_EQ(kq_type_name(KQ_Q4_0X), "q4_0x");
    CHECK_EQ(kq_act_type(KQ_Q4_0X), KQ_Q8_0);
    CHECK_EQ(kq_row_bytes(KQ_Q4_0X, N), RB);
    CHECK_EQ(kq_repack_type(KQ_Q4_0), kq_isa_active() >= KQ_ISA_AVX2 ? KQ_Q4_0X : KQ_Q4_0);
    uint8_t b[RB], x[RB], back[RB];
    for (int blk = 0; blk < NB; blk++) {
        put16(b + 18 * blk, (uint16_t)(0x3c00 + 3 * blk));
        for (int i = 0; i < 16; i++)
            b[18 * blk + 2 + i] = (uint8_t)(i * 37 + blk * 11);
    }
    CHECK(kq_repack_rows(KQ_Q4_0, KQ_Q4_0X, b, x, N, 1));
    int bad = 0;
    for (int blk = 0; blk < NB; blk++) {
        const int l = blk % 16, m = blk < 16 ? 16 : 1, g0 = 2 * NB + 256 * (blk / 16);
        bad += memcmp(x + 2 * blk, b + 18 * blk, 2) != 0;
        for (int j = 0; j < 16; j++)
            bad += x[g0 + 4 * m * (j / 4) + 4 * l + j % 4] != b[18 * blk + 2 + j];
    }
    CHECK_EQ(bad, 0);
    float yb[N], yx[N];
    kq_dequantize_row(KQ_Q4_0, b, yb, N);
    kq_dequantize_row(KQ_Q4_0X, x, yx, N);
    CHECK(memcmp(yb, yx, sizeof yb) == 0);
    CHECK(kq_repack_rows(KQ_Q4_0X, KQ_Q4_0, x, back, N, 1));
    CHECK(memcmp(back, b, sizeof b) == 0);
    CHECK(!kq_repack_rows(KQ_Q4_0, KQ_Q8_0X, b, back, N, 1));
    float a[N];
    uint8_t aq[34 * NB];
    for (int i = 0; i < N; i++)
        a[i] = (float)((i * 41) % 97 - 48) / 5.0f;
    const enum kq_isa isa = kq_isa_active();
    kq_isa_force(KQ_ISA_SCALAR);
    kq_quantize_act(KQ_Q4_0X, a, aq, N);
    CHECK(kq_dot(KQ_Q4_0, N, b, aq) == kq_dot(KQ_Q4_0X, N, x, aq));
    kq_isa_force(isa);
}

TEST(block_q5_k)
{
    uint8_t b[176];
    float y[256];
    put16(b, 0x3400);     /* d = 0.25 */
    put16(b + 2, 0x4000); /* dmin = 2 */
    memcpy(b + 4, k_packed, 12);
    for (int i = 0; i < 32; i++)
        b[16 + i] = (uint8_t)(i * 37 + 11); /* qh */
    for (int i = 0; i < 128; i++)
        b[48 + i] = (uint8_t)(i * 13 + 5); /* qs */
    kq_dequantize_row(KQ_Q5_K, b, y, 256);
    int bad = 0;
    for (int e = 0; e < 256; e++) {
        const int j = e / 32, q = k_nibble(b + 48, e) + 16 * ((b[16 + e % 32] >> j) & 1);
        bad += y[e] != 0.25f * (float)(k_sc[j] * q) - 2.0f * (float)k_m[j];
    }
    CHECK_EQ(bad, 0);
}

TEST(block_q6_k)
{
    uint8_t b[210];
    float y[256];
    for (int i = 0; i < 128; i++)
        b[i] = (uint8_t)(i * 29 + 7); /* ql */
    for (int i = 0; i < 64; i++)
        b[128 + i] = (uint8_t)(i * 53 + 1); /* qh */
    for (int j = 0; j < 16; j++)
        b[192 + j] = (uint8_t)(int8_t)(j * 17 - 128); /* scales -128 .. 127 */
    put16(b + 208, 0x3400);                           /* d = 0.25 */
    kq_dequantize_row(KQ_Q6_K, b, y, 256);
    int bad = 0;
    for (int e = 0; e < 256; e++) {
        /* Half h; chunk c of 32: low 4 bits from ql[64h + l] (c = 0, 2) or ql[64h + 32 + l]
         * (c = 1, 3), low nibble for c < 2, high for c >= 2; high 2 bits = bits 2c of qh[32h+l]. */
        const int h = e / 128, c = (e % 128) / 32, l = e % 32;
        const uint8_t qlb = b[64 * h + (c == 1 || c == 3 ? 32 : 0) + l];
        const int lo = c < 2 ? qlb & 15 : qlb >> 4;
        const int hi = (b[128 + 32 * h + l] >> (2 * c)) & 3;
        const int sc = (int8_t)b[192 + e / 16];
        bad += y[e] != 0.25f * (float)(sc * ((lo | hi << 4) - 32));
    }
    CHECK_EQ(bad, 0);
}

/*
 * Q5_KX and Q6_KX (kq.h): element 4s + i of sub-block j (32 elements for Q5, 16 for Q6) has its
 * low 4 bits in byte 4j + i of step s (Q5: qs[32 (s / 2) ..], Q6: ql[64 (s / 2) ..]; low nibble
 * for even s, high for odd) and its high bits in byte 4j + i of qh: Q5 bit s, Q6 bits 2s..2s+1.
 */
static void fill(float *x, int n, int kind);

static int kx5_level(const uint8_t *b, int e)
{
    const int j = e / 32, s = e % 32 / 4, i = e % 4;
    return ((b[48 + 32 * (s / 2) + 4 * j + i] >> (4 * (s % 2))) & 15) |
           ((b[16 + 4 * j + i] >> s) & 1) << 4;
}

static int kx6_level(const uint8_t *b, int e)
{
    const int j = e / 16, s = e % 16 / 4, i = e % 4;
    return ((b[64 * (s / 2) + 4 * j + i] >> (4 * (s % 2))) & 15) |
           ((b[128 + 4 * j + i] >> (2 * s)) & 3) << 4;
}

/* Plain level e of a Q5_K / Q6_K block (the layouts of block_q5_k / block_q6_k). */
static int k5_level(const uint8_t *b, int e)
{
    return k_nibble(b + 48, e) + 16 * ((b[16 + e % 32] >> (e / 32)) & 1);
}

static int k6_level(const uint8_t *b, int e)
{
    const int h = e / 128, c = (e % 128) / 32, l = e % 32;
    const uint8_t qlb = b[64 * h + (c == 1 || c == 3 ? 32 : 0) + l];
    return (c < 2 ? qlb & 15 : qlb >> 4) | ((b[128 + 32 * h + l] >> (2 * c)) & 3) << 4;
}

/* Three random blocks of plain type t (bytes bb, a row of 768) repacked to x: the non-level
 * bytes stay, every level sits where `xl` says, dequantised values and the reference dot are
 * the plain type's bit for bit, and the way back gives the same bytes. */
static void check_kx_layout(enum kq_type t, enum kq_type x, size_t bb,
                            int (*pl)(const uint8_t *, int), int (*xl)(const uint8_t *, int),
                            size_t lv0, size_t lv1)
{
    enum { NB = 3, N = 256 * NB };
    uint8_t b[NB * 210 + 176 * NB], xb[sizeof b], back[sizeof b];
    float yb[N], yx[N];
    memset(b, 0, sizeof b);
    for (size_t i = 0; i < NB * bb; i++)
        b[i] = (uint8_t)(test_rng_next(&rng) >> 24);
    for (int k = 0; k < NB; k++) /* finite scales: d (and dmin) small f16 */
        if (t == KQ_Q6_K)
            put16(b + k * bb + 208, (uint16_t)(0x2c00 + k));
        else
            put16(b + k * bb, (uint16_t)(0x2c00 + k)),
                put16(b + k * bb + 2, (uint16_t)(0x2400 + k));
    CHECK(!kq_type_supported(x));
    CHECK_EQ(kq_block_bytes(x), bb);
    CHECK(kq_repack_rows(t, x, b, xb, 256, NB));
    int bad = 0;
    for (int k = 0; k < NB; k++) {
        const uint8_t *p = b + k * bb, *q = xb + k * bb;
        bad += memcmp(p, q, lv0) != 0 || memcmp(p + lv1, q + lv1, bb - lv1) != 0;
        for (int e = 0; e < 256; e++)
            bad += xl(q, e) != pl(p, e);
    }
    CHECK_EQ(bad, 0);
    kq_dequantize_row(t, b, yb, N);
    kq_dequantize_row(x, xb, yx, N);
    CHECK(memcmp(yb, yx, sizeof yb) == 0);
    CHECK(kq_repack_rows(x, t, xb, back, N, 1));
    CHECK(memcmp(back, b, NB * bb) == 0);
    CHECK(!kq_repack_rows(t, KQ_Q4_KX, b, back, 256, 1));
    CHECK(!kq_repack_rows(x, KQ_Q4_K, xb, back, 256, 1));
    /* quantise straight into x = quantise plain, then repack */
    float w[N], a[N];
    fill(w, N, 1);
    fill(a, N, 0);
    kq_quantize_row(t, w, b, N);
    kq_quantize_row(x, w, back, N);
    CHECK(kq_repack_rows(t, x, b, xb, N, 1));
    CHECK(memcmp(back, xb, NB * bb) == 0);
    /* the reference dots agree bit for bit, each on its own activation type */
    const enum kq_isa isa = kq_isa_active();
    kq_isa_force(KQ_ISA_SCALAR);
    uint8_t ap[NB * 292], ax[NB * 292];
    kq_quantize_act(t, a, ap, N);
    kq_quantize_act(x, a, ax, N);
    CHECK(kq_dot(t, N, b, ap) == kq_dot(x, N, xb, ax));
    kq_isa_force(isa);
}

TEST(block_q5_kx)
{
    check_kx_layout(KQ_Q5_K, KQ_Q5_KX, 176, k5_level, kx5_level, 16, 176);
    CHECK_STR_EQ(kq_type_name(KQ_Q5_KX), "q5_Kx");
    CHECK_EQ(kq_act_type(KQ_Q5_KX), KQ_Q8_KX);
    CHECK_EQ(kq_repack_type(KQ_Q5_K), kq_isa_active() == KQ_ISA_AVX512 ? KQ_Q5_KX : KQ_Q5_K);
}

TEST(block_q6_kx)
{
    check_kx_layout(KQ_Q6_K, KQ_Q6_KX, 210, k6_level, kx6_level, 0, 192);
    CHECK_STR_EQ(kq_type_name(KQ_Q6_KX), "q6_Kx");
    CHECK_EQ(kq_act_type(KQ_Q6_KX), KQ_Q8_K);
    CHECK_EQ(kq_repack_type(KQ_Q6_K), kq_isa_active() == KQ_ISA_AVX512 ? KQ_Q6_KX : KQ_Q6_K);
}

TEST(block_q8_k)
{
    uint8_t b[292];
    float y[256];
    put32f(b, 0.125f);
    for (int i = 0; i < 256; i++)
        b[4 + i] = (uint8_t)(int8_t)(i % 255 - 127);
    memset(b + 260, 0, 32);
    kq_dequantize_row(KQ_Q8_K, b, y, 256);
    for (int i = 0; i < 256; i += 17)
        CHECK(y[i] == 0.125f * (float)(i % 255 - 127));
}

/* ================================ reference quantisers ====================================== */

/* n values: uniform in [-1, 1) (kind 0) or bell-shaped, sigma 0.58 (kind 1). */
static void fill(float *x, int n, int kind)
{
    for (int i = 0; i < n; i++) {
        float v = test_rng_uniform(&rng);
        if (kind == 1)
            v = (v + test_rng_uniform(&rng) + test_rng_uniform(&rng) + test_rng_uniform(&rng)) *
                0.5f;
        x[i] = v;
    }
}

/* ||a - b|| / ||b||: the round-trip error measure of the thresholds below. */
static double rel_rms(const float *a, const float *b, int n)
{
    double e = 0.0, s = 0.0;
    for (int i = 0; i < n; i++)
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), s += (double)b[i] * b[i];
    return sqrt(e / s);
}

/* Limits from the task: Q8_0 1%, Q4_0 12%, Q4_K 8%, Q5_K 4%, Q6_K 2%, f16/bf16 tiny. */
TEST(round_trip)
{
    static const struct {
        enum kq_type t;
        double max_err;
    } cases[] = {{KQ_F16, 1e-3},  {KQ_BF16, 4e-3}, {KQ_Q8_0, 0.01}, {KQ_Q4_0, 0.12},
                 {KQ_Q4_K, 0.08}, {KQ_Q5_K, 0.04}, {KQ_Q6_K, 0.02}, {KQ_Q8_K, 0.01}};
    enum { N = 8192 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int kind = 0; kind < 2; kind++) {
            fill(x, N, kind);
            kq_quantize_row(cases[c].t, x, q, N);
            kq_dequantize_row(cases[c].t, q, y, N);
            const double err = rel_rms(y, x, N);
            printf("  round trip %-5s %s: rel rms %.4f (limit %.3f)\n", kq_type_name(cases[c].t),
                   kind ? "bell   " : "uniform", err, cases[c].max_err);
            CHECK(err < cases[c].max_err);
            uint8_t q2[sizeof q];
            kq_quantize_row(cases[c].t, x, q2, N); /* deterministic */
            CHECK(memcmp(q, q2, kq_row_bytes(cases[c].t, N)) == 0);
        }
    }
    /* All-zero and constant rows stay finite and exact. */
    memset(x, 0, sizeof x);
    kq_quantize_row(KQ_Q4_K, x, q, 256);
    kq_dequantize_row(KQ_Q4_K, q, y, 256);
    CHECK(maxdiff(y, x, 256) == 0.0);
    for (int i = 0; i < 256; i++)
        x[i] = -0.75f;
    kq_quantize_row(KQ_Q6_K, x, q, 256);
    kq_dequantize_row(KQ_Q6_K, q, y, 256);
    CHECK(maxdiff(y, x, 256) < 1e-3);
}

/* ================================ dot products ============================================== */

static const enum kq_type wtypes[] = {KQ_F32,   KQ_F16,   KQ_BF16, KQ_Q8_0,  KQ_Q4_0,
                                      KQ_Q4_K,  KQ_Q5_K,  KQ_Q6_K, KQ_Q4_KX, KQ_Q5_KX,
                                      KQ_Q6_KX, KQ_Q8_0X, KQ_Q4_0X};
#define N_WTYPES (sizeof wtypes / sizeof wtypes[0])

/* Test problem: rows x n weights of type t and nt activation rows, quantised. */
struct prob {
    enum kq_type t;
    int n, rows, nt;
    size_t ws, as;  /* row strides (bytes) */
    uint8_t *w, *a; /* [rows][ws], [nt][as] */
    float *wd, *ad; /* dequantised [rows][n], [nt][n] */
};

/* Random weights (alternating uniform / bell rows) and activations; pad widens the strides. */
static void prob_init(struct prob *p, enum kq_type t, int n, int rows, int nt, size_t pad)
{
    p->t = t, p->n = n, p->rows = rows, p->nt = nt;
    p->ws = kq_row_bytes(t, n) + pad;
    p->as = kq_act_row_bytes(t, n) + pad;
    p->w = calloc((size_t)rows, p->ws);
    p->a = calloc((size_t)nt, p->as);
    p->wd = malloc(sizeof(float) * (size_t)n * (size_t)(rows + nt));
    p->ad = p->wd + (size_t)n * rows;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int r = 0; r < rows; r++) {
        fill(x, n, r % 2);
        kq_quantize_row(t, x, p->w + r * p->ws, n);
        kq_dequantize_row(t, p->w + r * p->ws, p->wd + (size_t)r * n, n);
    }
    for (int i = 0; i < nt; i++) {
        fill(x, n, 1);
        kq_quantize_act(t, x, p->a + i * p->as, n);
        kq_dequantize_row(kq_act_type(t), p->a + i * p->as, p->ad + (size_t)i * n, n);
    }
    free(x);
}

static void prob_free(struct prob *p)
{
    free(p->w), free(p->a), free(p->wd);
}

/* Exact dot of dequantised rows and the sum of |products| (the scale of rounding errors). */
static double ref_dot(const struct prob *p, int r, int t, double *mag)
{
    double s = 0.0, m = 0.0;
    for (int i = 0; i < p->n; i++) {
        const double v = (double)p->wd[(size_t)r * p->n + i] * p->ad[(size_t)t * p->n + i];
        s += v, m += fabs(v);
    }
    *mag = m;
    return s;
}

/* The reference dot must equal the exact dot of what the blocks decode to, up to f32 sums. */
TEST(scalar_dot_vs_dequantised)
{
    kq_isa_force(KQ_ISA_SCALAR);
    static const int ns[] = {256, 4352, 8448};
    for (size_t k = 0; k < N_WTYPES; k++) {
        double worst = 0.0;
        for (size_t j = 0; j < 3; j++) {
            struct prob p;
            prob_init(&p, wtypes[k], ns[j], 3, 2, 0);
            for (int r = 0; r < 3; r++)
                for (int t = 0; t < 2; t++) {
                    double mag, want = ref_dot(&p, r, t, &mag);
                    const float got = kq_dot(p.t, p.n, p.w + r * p.ws, p.a + t * p.as);
                    worst = fmax(worst, fabs(got - want) / mag);
                }
            prob_free(&p);
        }
        printf("  scalar dot %-5s: max |err| / sum|w*a| = %.2e\n", kq_type_name(wtypes[k]), worst);
        CHECK(worst < 2e-6);
    }
}

/* A SIMD kernel path: an ISA, and for AVX2 whether AVX-VNNI is used. */
struct path {
    enum kq_isa isa;
    bool vnni;
};

/* The paths this CPU has, into p[0..): AVX2 without AVX-VNNI, AVX2 with it (where the CPU has
 * it), AVX-512. Returns their count. */
static int simd_paths(struct path p[3])
{
    const enum kq_isa best = kq_isa_best();
    int n = 0;
    if (best >= KQ_ISA_AVX2) {
        p[n++] = (struct path){KQ_ISA_AVX2, false};
        if (kq_avx2_vnni_force(true))
            p[n++] = (struct path){KQ_ISA_AVX2, true};
    }
    if (best >= KQ_ISA_AVX512)
        p[n++] = (struct path){KQ_ISA_AVX512, false};
    return n;
}

static void path_force(const struct path *p)
{
    kq_isa_force(p->isa);
    kq_avx2_vnni_force(p->vnni);
}

static const char *path_name(const struct path *p)
{
    return p->isa != KQ_ISA_AVX2 ? kq_isa_name(p->isa) : p->vnni ? "avx2+vnni" : "avx2";
}

/* Back to the best ISA, AVX-VNNI on where the CPU has it. */
static void path_reset(void)
{
    kq_isa_force(kq_isa_best());
    kq_avx2_vnni_force(true);
}

/* Row ranges [r0, r1) of an 11-row matrix exercised for every ISA. */
static const int ranges[][2] = {{0, 11}, {3, 10}, {1, 2}, {5, 5}};

/* kq_matmul on `path` vs the scalar reference; returns the max relative difference. */
static double check_matmul(const struct prob *p, const struct path *path, int *bad)
{
    const int ys = p->rows + 3;
    float *ref = malloc(sizeof(float) * (size_t)ys * p->nt);
    float *got = malloc(sizeof(float) * (size_t)ys * p->nt);
    double worst = 0.0;
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
        const int r0 = ranges[k][0], r1 = ranges[k][1];
        for (int i = 0; i < ys * p->nt; i++)
            ref[i] = got[i] = -777.0f; /* guard: untouched entries must stay */
        kq_isa_force(KQ_ISA_SCALAR);
        kq_matmul(p->t, p->n, p->w, p->ws, r0, r1, p->a, p->as, p->nt, ref, ys);
        path_force(path);
        kq_matmul(p->t, p->n, p->w, p->ws, r0, r1, p->a, p->as, p->nt, got, ys);
        for (int t = 0; t < p->nt; t++)
            for (int r = 0; r < ys; r++) {
                const float g = got[t * ys + r], e = ref[t * ys + r];
                if (r < r0 || r >= r1) {
                    *bad += g != -777.0f;
                    continue;
                }
                double mag;
                ref_dot(p, r, t, &mag);
                worst = fmax(worst, fabs((double)g - e) / (mag + 1e-30));
            }
    }
    free(ref), free(got);
    return worst;
}

/*
 * Every ISA (AVX2 with and without AVX-VNNI) against scalar over n (one block, several, odd
 * block counts, long rows; 896 = 28 blocks: a Q8_0X / Q4_0X row of one stored group and a tail
 * of 12 blocks; 17 for the float tails), nt = 1 (decode), 2..7 (batched decode), 8, 13 (tile
 * edges), 40 (more than a token chunk), padded strides and row sub-ranges.
 */
TEST(simd_matmul_vs_scalar)
{
    struct path paths[3];
    const int np = simd_paths(paths);
    if (np == 0) {
        printf("  (no SIMD ISA on this CPU)\n");
        return;
    }
    /* K-quant X groups: 256 and 4352 end in a lone super-block of Q4_KX / Q5_KX, 2048 does not;
     * 896: a 12-block partial group of Q8_0X / Q4_0X */
    static const int ns[] = {32, 256, 4352, 8448, 96, 896, 17, 2048, 32768};
    /* 2..7: batched decode (packed Q8_0/Q4_0/Q4_K; the tiles' 2-, 3- and 4-token shapes and their
     * remainders); 40: several token chunks of the packed prefill */
    static const int nts[] = {1, 2, 3, 4, 5, 6, 7, 8, 13, 40};
    for (int ip = 0; ip < np; ip++) {
        for (size_t k = 0; k < N_WTYPES; k++) {
            double worst = 0.0;
            int bad = 0;
            for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
                if (ns[j] % kq_block_elems(wtypes[k]))
                    continue;
                for (size_t m = 0; m < sizeof nts / sizeof nts[0]; m++) {
                    struct prob p;
                    prob_init(&p, wtypes[k], ns[j], 11, nts[m], nts[m] == 8 ? 64 : 0);
                    worst = fmax(worst, check_matmul(&p, &paths[ip], &bad));
                    prob_free(&p);
                }
            }
            printf("  %-9s matmul %-5s: max |simd - scalar| / sum|w*a| = %.2e\n",
                   path_name(&paths[ip]), kq_type_name(wtypes[k]), worst);
            CHECK(worst < 2e-6);
            CHECK_EQ(bad, 0);
        }
    }
    path_reset();
}

/*
 * Batch invariance: from 2 tokens on, every output of Q8_0 / Q4_0 / Q4_K depends on its own row
 * and token only, and from 1 token on for the stored layouts (Q4_KX, Q8_0X, Q4_0X: decode runs
 * the same arithmetic), so the first tokens of a 40-token matmul equal, bit for bit, a matmul
 * of just them (1, 2 and 7 tokens), over any row range. On AVX2 the stored layouts' outputs
 * are also the same with and without AVX-VNNI.
 */
TEST(packed_batch_invariance)
{
    struct path paths[3];
    const int np = simd_paths(paths);
    static const enum kq_type types[] = {KQ_Q8_0,  KQ_Q4_0,  KQ_Q4_K,  KQ_Q4_KX,
                                         KQ_Q5_KX, KQ_Q6_KX, KQ_Q8_0X, KQ_Q4_0X};
    enum { NT = 40, R = 37 };
    for (int ip = 0; ip < np; ip++) {
        path_force(&paths[ip]);
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            struct prob p;
            prob_init(&p, types[k], 4352, R, NT, 0);
            float *all = malloc(sizeof(float) * R * NT), *few = malloc(sizeof(float) * R * 7);
            kq_matmul(p.t, p.n, p.w, p.ws, 0, R, p.a, p.as, NT, all, R);
            int bad = 0;
            /* the X types decode with the same arithmetic as they batch: from one token (Q5_KX,
             * Q6_KX on AVX2: the scalar reference, per row and token too) */
            const bool x = types[k] == KQ_Q8_0X || types[k] == KQ_Q4_0X || types[k] == KQ_Q4_KX ||
                           types[k] == KQ_Q5_KX || types[k] == KQ_Q6_KX;
            if (x && paths[ip].isa == KQ_ISA_AVX2 && paths[ip].vnni) { /* VNNI = no VNNI */
                float *off = malloc(sizeof(float) * R * NT);
                kq_avx2_vnni_force(false);
                kq_matmul(p.t, p.n, p.w, p.ws, 0, R, p.a, p.as, NT, off, R);
                kq_avx2_vnni_force(true);
                bad += memcmp(off, all, sizeof(float) * R * NT) != 0;
                free(off);
            }
            for (int nt = x ? 1 : 2; nt <= 7; nt += nt == 1 ? 1 : 5)
                for (int r0 = 0; r0 <= 16; r0 += 16) {
                    kq_matmul(p.t, p.n, p.w, p.ws, r0, R, p.a, p.as, nt, few, R);
                    for (int t = 0; t < nt; t++)
                        for (int r = r0; r < R; r++)
                            bad += memcmp(&few[t * R + r], &all[t * R + r], sizeof(float)) != 0;
                }
            CHECK_EQ(bad, 0);
            free(all), free(few);
            prob_free(&p);
        }
    }
    path_reset();
}

/* Each output of rows [r0, r1) of an AVX-512 matmul, for every span of spans and 1..few tokens,
 * is the same bits as in a 40-token matmul of all 37 rows; checked for each type and n. */
static void avx512_invariance(const enum kq_type *types, size_t n_types, const int *ns, size_t n_ns,
                              const int (*spans)[2], size_t n_spans, int few_max)
{
    enum { ROWS = 37, NT = 40 };
    for (size_t k = 0; k < n_types; k++)
        for (size_t j = 0; j < n_ns; j++) {
            struct prob p;
            prob_init(&p, types[k], ns[j], ROWS, NT, 0);
            float *all = malloc(sizeof(float) * ROWS * NT),
                  *few = malloc(sizeof(float) * ROWS * (size_t)few_max);
            kq_matmul(p.t, p.n, p.w, p.ws, 0, ROWS, p.a, p.as, NT, all, ROWS);
            int bad = 0;
            for (int nt = 1; nt <= few_max; nt++)
                for (size_t q = 0; q < n_spans; q++) {
                    const int r0 = spans[q][0], r1 = spans[q][1];
                    kq_matmul(p.t, p.n, p.w, p.ws, r0, r1, p.a, p.as, nt, few, ROWS);
                    for (int t = 0; t < nt; t++)
                        for (int r = r0; r < r1; r++)
                            bad += memcmp(&few[t * ROWS + r], &all[t * ROWS + r], 4) != 0;
                }
            CHECK_EQ(bad, 0);
            free(all), free(few);
            prob_free(&p);
        }
}

/* Q8_0X / Q4_0X on AVX-512: every tile shape (rows 1..3 x tokens 1..4), super-block and token
 * chunk edge gives an output the same bits as any other: rows with and without a partial last
 * group and shorter than one group (n = 256), rows split into panels of 9 or more rows (1..7
 * tokens) and of 18 or more (the 40 tokens they are checked against; n = 4352, 32768), row
 * ranges starting and ending anywhere, token counts 1..7, and a row long enough (n = 32768)
 * that 40 tokens take several chunks. */
TEST(xq_shape_invariance)
{
    if (kq_isa_best() != KQ_ISA_AVX512) {
        printf("  (no AVX-512 on this CPU)\n");
        return;
    }
    kq_isa_force(KQ_ISA_AVX512);
    static const enum kq_type types[] = {KQ_Q8_0X, KQ_Q4_0X};
    static const int ns[] = {256, 2048, 4352, 32768};
    static const int spans[][2] = {{0, 37}, {1, 37}, {2, 35}, {17, 36}, {5, 6}};
    avx512_invariance(types, 2, ns, 4, spans, sizeof spans / sizeof spans[0], 7);
}

/* Q4_KX / Q5_KX / Q6_KX on AVX-512: every tile gives an output the same bits as any other: the
 * 4-row tiles of 1-3 tokens (decode: 1), the 4 x 1..4 tiles with their accumulators in
 * memory (4 tokens on) and the 1-row tiles of a range's last rows, with the
 * row's scales unpacked in the tile or kept from the first token tile; rows ending in a lone
 * super-block (n = 256, 4352) or not, row ranges starting and ending anywhere, token counts 1..9,
 * and a row long enough (n = 32768) that 40 tokens take several chunks. */
TEST(kx_shape_invariance)
{
    if (kq_isa_best() != KQ_ISA_AVX512) {
        printf("  (no AVX-512 on this CPU)\n");
        return;
    }
    kq_isa_force(KQ_ISA_AVX512);
    static const enum kq_type types[] = {KQ_Q4_KX, KQ_Q5_KX, KQ_Q6_KX};
    static const int ns[] = {256, 2048, 4352, 32768};
    static const int spans[][2] = {{0, 37}, {1, 37}, {2, 35}, {17, 36}, {5, 6}, {4, 12}};
    avx512_invariance(types, 3, ns, 4, spans, sizeof spans / sizeof spans[0], 9);
}

/*
 * The AVX2 stored-layout tiles (kq_avx2x.h), with and without AVX-VNNI: every tile shape the
 * two builds compile (Q8_0X 3 x 3; Q4_0X 4 x 2 with VNNI, 3 x 3 without; Q4_KX 4 x 2 /
 * 4 x 3, its row scales kept from 3 / 4 tokens on, and 1 x 1 decode of rows over 1024) and
 * their remainders, row ranges starting and ending anywhere, token counts 1..9 and
 * 40 (several token chunks): each output the same bits as in a 40-token matmul of all rows, and
 * the same bits in both builds.
 */
TEST(avx2x_shape_invariance)
{
    struct path paths[3];
    const int np = simd_paths(paths);
    static const enum kq_type types[] = {KQ_Q8_0X, KQ_Q4_0X, KQ_Q4_KX};
    static const int ns[] = {256, 896, 2048, 4352};
    static const int spans[][2] = {{0, 37}, {1, 37}, {2, 35}, {3, 36}, {17, 36}, {5, 6}};
    enum { ROWS = 37, NT = 40 };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
            if (ns[j] % kq_block_elems(types[k]))
                continue;
            struct prob p;
            prob_init(&p, types[k], ns[j], ROWS, NT, 0);
            float *ref = NULL, *all = malloc(sizeof(float) * ROWS * NT),
                  *few = malloc(sizeof(float) * ROWS * NT);
            int bad = 0, runs = 0;
            for (int ip = 0; ip < np; ip++) {
                if (paths[ip].isa != KQ_ISA_AVX2)
                    continue;
                path_force(&paths[ip]);
                kq_matmul(p.t, p.n, p.w, p.ws, 0, ROWS, p.a, p.as, NT, all, ROWS);
                if (!ref) {
                    ref = malloc(sizeof(float) * ROWS * NT);
                    memcpy(ref, all, sizeof(float) * ROWS * NT);
                }
                bad += memcmp(ref, all, sizeof(float) * ROWS * NT) != 0; /* VNNI = no VNNI */
                for (int nt = 1; nt <= 9; nt++)
                    for (size_t q = 0; q < sizeof spans / sizeof spans[0]; q++) {
                        const int r0 = spans[q][0], r1 = spans[q][1];
                        kq_matmul(p.t, p.n, p.w, p.ws, r0, r1, p.a, p.as, nt, few, ROWS);
                        for (int t = 0; t < nt; t++)
                            for (int r = r0; r < r1; r++)
                                bad += memcmp(&few[t * ROWS + r], &all[t * ROWS + r], 4) != 0;
                        runs++;
                    }
            }
            CHECK_EQ(bad, 0);
            if (np > 0)
                CHECK(runs > 0);
            free(ref), free(all), free(few);
            prob_free(&p);
        }
    path_reset();
}

/* count random rows of n for weights of type t: the weights themselves (kq_row_bytes apart),
 * or with act their activation rows (kq_act_row_bytes apart). */
static uint8_t *rand_rows(enum kq_type t, int n, int count, bool act)
{
    const size_t rb = act ? kq_act_row_bytes(t, n) : kq_row_bytes(t, n);
    uint8_t *w = malloc(rb * (size_t)count);
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int r = 0; r < count; r++) {
        fill(x, n, r % 2);
        if (act)
            kq_quantize_act(t, x, w + r * rb, n);
        else
            kq_quantize_row(t, x, w + r * rb, n);
    }
    free(x);
    return w;
}

/*
 * kq_matmul_tagged equals kq_matmul bit for bit on every path, for the stored layouts whose
 * kernels keep their packed activation per thread (kq_avx512.c, kq_avx512_k.c, kq_avx2x.h).
 * Each step below copies its activation rows into one shared buffer (the same pointer every
 * time, as the CPU device's scratch is) and runs the rows as the device does, in row chunks of
 * one tag; its reference is kq_matmul over the same chunks, all computed before the tagged
 * steps run one after the other: one tag's chunks; a second weight type with the same
 * activation format on the same tagged rows (Q4_0X after Q8_0X, Q5_KX after Q4_KX); new
 * content in the same place under a new tag; fewer tokens; a shorter row; an untagged call on
 * other content between two calls of one tag; 40 tokens of long rows, more than one packed
 * chunk holds; one token (decode, which AVX2 runs apart for rows over 1024), twice, new content
 * under a new tag.
 */
TEST(tagged_matmul)
{
    struct path paths[3];
    const int np = simd_paths(paths);
    static const enum kq_type fam[][2] = {
        {KQ_Q8_0X, KQ_Q4_0X}, {KQ_Q4_KX, KQ_Q5_KX}, {KQ_Q6_KX, KQ_Q6_KX}};
    enum { ROWS = 37, NT = 8, NT_MANY = 40, N_LONG = 32768, N_STEPS = 11 };
    static const int chunks[][2] = {{0, 16}, {16, 17}, {17, 37}};
    for (int ip = 0; ip < np; ip++) {
        path_force(&paths[ip]);
        for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
            const enum kq_type t1 = fam[f][0], t2 = fam[f][1];
            const int n1 = 4352, n2 = 1024;
            uint8_t *w1 = rand_rows(t1, n1, ROWS, false), *w2 = rand_rows(t2, n1, ROWS, false);
            uint8_t *w3 = rand_rows(t1, n2, ROWS, false), *w4 = rand_rows(t1, N_LONG, ROWS, false);
            uint8_t *c[4] = {rand_rows(t1, n1, NT, true), rand_rows(t1, n1, NT, true),
                             rand_rows(t1, n2, NT, true), rand_rows(t1, n1, NT, true)};
            uint8_t *c_long = rand_rows(t1, N_LONG, NT_MANY, true);
            const uint64_t tag = kq_act_tags(8);
            /* the steps: weights, row length, tokens, content, tag (0: untagged) */
            const struct {
                enum kq_type t;
                const uint8_t *w, *c;
                int n, nt;
                uint64_t tag;
            } st[N_STEPS] = {
                {t1, w1, c[0], n1, NT, tag},
                {t2, w2, c[0], n1, NT, tag},
                {t1, w1, c[1], n1, NT, tag + 1},
                {t1, w1, c[1], n1, 5, tag + 2},
                {t1, w3, c[2], n2, NT, tag + 3},
                {t1, w1, c[0], n1, NT, tag + 4},
                {t1, w1, c[3], n1, NT, 0},
                {t1, w1, c[0], n1, NT, tag + 4},
                {t1, w4, c_long, N_LONG, NT_MANY, tag + 5},
                {t1, w1, c[1], n1, 1, tag + 6},
                {t1, w1, c[3], n1, 1, tag + 7},
            };
            const size_t as_max = kq_act_row_bytes(t1, N_LONG);
            uint8_t *a = malloc(as_max * NT_MANY);
            float *ref[N_STEPS], *got = malloc(sizeof(float) * ROWS * NT_MANY);
            for (int pass = 0; pass < 2; pass++) /* 0: the references, 1: the tagged steps */
                for (int k = 0; k < N_STEPS; k++) {
                    const size_t as = kq_act_row_bytes(st[k].t, st[k].n);
                    const size_t ws = kq_row_bytes(st[k].t, st[k].n);
                    memcpy(a, st[k].c, as * (size_t)st[k].nt);
                    float *y = pass ? got : (ref[k] = malloc(sizeof(float) * ROWS * NT_MANY));
                    for (int i = 0; i < ROWS * NT_MANY; i++)
                        y[i] = -777.0f;
                    for (size_t q = 0; q < sizeof chunks / sizeof chunks[0]; q++)
                        kq_matmul_tagged(st[k].t, st[k].n, st[k].w, ws, chunks[q][0], chunks[q][1],
                                         a, as, st[k].nt, y, ROWS, pass ? st[k].tag : 0);
                    if (pass && memcmp(got, ref[k], sizeof(float) * ROWS * NT_MANY) != 0) {
                        printf("  %s %s step %d: tagged != untagged\n", path_name(&paths[ip]),
                               kq_type_name(st[k].t), k);
                        CHECK(false);
                    }
                }
            for (int k = 0; k < N_STEPS; k++)
                free(ref[k]);
            free(a), free(got), free(w1), free(w2), free(w3), free(w4), free(c_long);
            for (int i = 0; i < 4; i++)
                free(c[i]);
        }
    }
    path_reset();
}

/* A Q8_0 level of -128 (no quantiser here writes one, but a GGUF file may hold it): the fast
 * products of the AVX2 packed prefill would overflow on it, so rows holding one must take the
 * exact path; the AVX2 Q8_0X kernels must be exact on it too (it is stored as 0). Rows 0, 3,
 * 6, 9 get -128 at scattered positions. */
TEST(q8_0_lowest_level)
{
    struct path paths[3];
    const int np = simd_paths(paths);
    for (int ip = 0; ip < np; ip++)
        for (int nt = 1; nt <= 40; nt += 13)
            for (int x = 0; x < 2; x++) {
                struct prob p;
                prob_init(&p, KQ_Q8_0, 4352, 11, nt, 0);
                for (int r = 0; r < 11; r += 3) {
                    uint8_t *row = p.w + r * p.ws;
                    for (int b = 0; b < 4352 / 32; b++)
                        row[34 * b + 2 + (b * 7 + r) % 32] = 0x80;
                    kq_dequantize_row(KQ_Q8_0, row, p.wd + (size_t)r * p.n, p.n);
                }
                if (x) { /* the same rows stored as Q8_0X */
                    uint8_t *w = malloc(p.ws * 11);
                    CHECK(kq_repack_rows(KQ_Q8_0, KQ_Q8_0X, p.w, w, p.n, 11));
                    free(p.w);
                    p.w = w, p.t = KQ_Q8_0X;
                }
                int bad = 0;
                const double worst = check_matmul(&p, &paths[ip], &bad);
                CHECK(worst < 2e-6);
                CHECK_EQ(bad, 0);
                prob_free(&p);
            }
    path_reset();
}

TEST(simd_dot_vs_scalar)
{
    struct path paths[3];
    const int np = simd_paths(paths);
    for (int ip = 0; ip < np; ip++) {
        for (size_t k = 0; k < N_WTYPES; k++) {
            const int n = kq_block_elems(wtypes[k]) == 1 ? 1001 : 4352;
            struct prob p;
            prob_init(&p, wtypes[k], n, 1, 1, 0);
            kq_isa_force(KQ_ISA_SCALAR);
            const float ref = kq_dot(p.t, n, p.w, p.a);
            path_force(&paths[ip]);
            const float got = kq_dot(p.t, n, p.w, p.a);
            double mag;
            ref_dot(&p, 0, 0, &mag);
            CHECK(fabs((double)got - ref) <= 2e-6 * mag);
            prob_free(&p);
        }
    }
    path_reset();
}

/* Activation rows must be byte-identical across ISAs (zero blocks included). */
TEST(simd_act_quantisers)
{
    const enum kq_isa best = kq_isa_best();
    static const int ns[] = {256, 512, 4352, 8448};
    static const enum kq_type acts[] = {KQ_F32, KQ_Q8_0, KQ_Q4_K, KQ_Q4_KX};
    for (int isa = KQ_ISA_AVX2; isa <= (int)best; isa++) {
        int diff_bytes = 0;
        for (size_t j = 0; j < 4; j++)
            for (size_t k = 0; k < 4; k++) {
                const int n = ns[j];
                const size_t bytes = kq_act_row_bytes(acts[k], n);
                float *x = malloc(sizeof(float) * n);
                uint8_t *ref = malloc(bytes), *got = malloc(bytes);
                fill(x, n, (int)j % 2);
                x[7] = 0.0f;
                if (j == 1)
                    memset(x, 0, 64 * sizeof(float)); /* all-zero blocks */
                kq_isa_force(KQ_ISA_SCALAR);
                kq_quantize_act(acts[k], x, ref, n);
                kq_isa_force((enum kq_isa)isa);
                kq_quantize_act(acts[k], x, got, n);
                for (size_t b = 0; b < bytes; b++)
                    diff_bytes += ref[b] != got[b];
                free(x), free(ref), free(got);
            }
        printf("  %-6s act quantisers: %d differing bytes\n", kq_isa_name((enum kq_isa)isa),
               diff_bytes);
        CHECK_EQ(diff_bytes, 0);
    }
    kq_isa_force(best);
}

/* Runs first: DELTAD_ISA is read once, on the first use of the kernels. "avx2-novnni" is AVX2
 * with AVX-VNNI off. */
TEST(isa_env)
{
    setenv("DELTAD_ISA", "avx2-novnni", 1);
    const enum kq_isa want = kq_isa_best() < KQ_ISA_AVX2 ? kq_isa_best() : KQ_ISA_AVX2;
    CHECK_EQ(kq_isa_active(), want);
    CHECK(!kq_avx2_vnni());
    setenv("DELTAD_ISA", "scalar", 1); /* read once: no effect now */
    CHECK_EQ(kq_isa_active(), want);
    CHECK(!kq_avx2_vnni());
    unsetenv("DELTAD_ISA");
}

TEST(isa_selection)
{
    const enum kq_isa best = kq_isa_best();
    CHECK_EQ(kq_isa_force(KQ_ISA_SCALAR), KQ_ISA_SCALAR);
    CHECK_EQ(kq_isa_active(), KQ_ISA_SCALAR);
    CHECK_EQ(kq_isa_force(KQ_ISA_AVX512), best); /* clamped to the CPU */
    CHECK_STR_EQ(kq_isa_name(KQ_ISA_AVX2), "avx2");
    CHECK(!kq_avx2_vnni_force(false));
    CHECK(!kq_avx2_vnni());
    const bool vnni = kq_avx2_vnni_force(true); /* clamped to the CPU */
    CHECK_EQ(kq_avx2_vnni(), vnni);
    if (best < KQ_ISA_AVX2)
        CHECK(!vnni);
    printf("  best ISA here: %s; AVX-VNNI %s\n", kq_isa_name(best), vnni ? "yes" : "no");
}

/* kq_kernel_ops runs the real kernel for every file type on every ISA here (so a type whose
 * repacked layout or kernel is missing shows as 0), and declines what it cannot run. */
TEST(kernel_ops)
{
    static const enum kq_type types[] = {KQ_F32,  KQ_F16,  KQ_BF16, KQ_Q8_0,
                                         KQ_Q4_0, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K};
    const enum kq_isa best = kq_isa_best();
    for (int isa = KQ_ISA_SCALAR; isa <= (int)best; isa++) {
        kq_isa_force((enum kq_isa)isa);
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            CHECK(kq_kernel_ops(types[i], 512, 0.001) > 0.0);
    }
    kq_isa_force(best);
    CHECK_EQ(kq_kernel_ops(KQ_Q8_0, 48, 0.001), 0.0);  /* not whole blocks */
    CHECK_EQ(kq_kernel_ops(KQ_Q4_K, 128, 0.001), 0.0); /* a K block is 256 */
    CHECK_EQ(kq_kernel_ops(KQ_Q8_0, 0, 0.001), 0.0);
    CHECK_EQ(kq_kernel_ops(KQ_Q8_0X, 512, 0.001), 0.0); /* an internal layout, not a file type */
    CHECK_EQ(kq_kernel_ops(KQ_Q8_K, 512, 0.001), 0.0);  /* activation-only */
}

int main(void)
{
    RUN(isa_env);
    RUN(type_facts);
    RUN(f16_known);
    RUN(f16_vs_f16c);
    RUN(bf16);
    RUN(block_float);
    RUN(block_q8_0);
    RUN(block_q4_0);
    RUN(block_q4_k);
    RUN(block_q4_kx);
    RUN(block_q8_0x);
    RUN(block_q4_0x);
    RUN(block_q5_k);
    RUN(block_q6_k);
    RUN(block_q5_kx);
    RUN(block_q6_kx);
    RUN(block_q8_k);
    RUN(round_trip);
    RUN(scalar_dot_vs_dequantised);
    RUN(simd_act_quantisers);
    RUN(simd_dot_vs_scalar);
    RUN(simd_matmul_vs_scalar);
    RUN(packed_batch_invariance);
    RUN(xq_shape_invariance);
    RUN(kx_shape_invariance);
    RUN(avx2x_shape_invariance);
    RUN(tagged_matmul);
    RUN(q8_0_lowest_level);
    RUN(isa_selection);
    RUN(kernel_ops);
    TEST_MAIN_END("test_kq");
}

/*
 * uni — UTF-8 coding and category lookups over the generated range tables.
 *
 * Invariants: uni_ranges is sorted by lo and its ranges are disjoint (the generator guarantees
 * it). ASCII is answered by comparisons that agree with the table (the generator checks this),
 * so the pre-tokenizer's hot path never binary-searches.
 *
 * Thread safety: no mutable state; any thread may call anything here.
 */
#include "uni.h" // defines: uni_flags, uni_decode, UNI_F_*

struct uni_range {
    uint32_t lo, hi;
    uint32_t flags;
};

struct uni_fold {
    uint32_t cp;
    char lower;
};

#include "uni_tables.h" // defines: uni_ranges, uni_folds, UNI_TABLES_VERSION

#define N_RANGES (sizeof(uni_ranges) / sizeof(uni_ranges[0]))
#define N_FOLDS (sizeof(uni_folds) / sizeof(uni_folds[0]))

/* ---- UTF-8 -------------------------------------------------------------------------------- */

/* Valid range of the second byte for a lead byte b0 (the first continuation is the one that
 * excludes overlong forms, surrogates and values above U+10FFFF). Returns the sequence length,
 * or 0 when b0 is not a lead byte. */
static int lead_info(uint8_t b0, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF)
        return 2;
    if (b0 >= 0xE0 && b0 <= 0xEF) {
        if (b0 == 0xE0)
            *lo = 0xA0;
        else if (b0 == 0xED)
            *hi = 0x9F;
        return 3;
    }
    if (b0 >= 0xF0 && b0 <= 0xF4) {
        if (b0 == 0xF0)
            *lo = 0x90;
        else if (b0 == 0xF4)
            *hi = 0x8F;
        return 4;
    }
    return 0;
}

int uni_utf8_check(const uint8_t *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    uint8_t lo, hi;
    int need = lead_info(s[0], &lo, &hi);
    if (need == 0)
        return -1;
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n)
            return 0; /* everything so far was valid; more bytes may complete it */
        if (s[i] < lo || s[i] > hi)
            return -1;
        lo = 0x80;
        hi = 0xBF;
    }
    return need;
}

int uni_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    int len = uni_utf8_check(s, n);
    if (len <= 0) {
        *cp = UNI_BAD;
        return 1;
    }
    static const uint8_t lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t v = s[0] & lead_mask[len];
    for (int i = 1; i < len; i++)
        v = (v << 6) | (s[i] & 0x3F);
    *cp = v;
    return len;
}

int uni_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF)
        return 0;
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- categories --------------------------------------------------------------------------- */

static unsigned search_flags(uint32_t cp)
{
    size_t lo = 0, hi = N_RANGES;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < uni_ranges[mid].lo)
            hi = mid;
        else if (cp > uni_ranges[mid].hi)
            lo = mid + 1;
        else
            return uni_ranges[mid].flags;
    }
    return 0;
}

unsigned uni_flags(uint32_t cp)
{
    /* ASCII: letters, digits and the six white-space characters. */
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
            return UNI_F_LETTER;
        if (cp >= '0' && cp <= '9')
            return UNI_F_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D))
            return UNI_F_SPACE;
        return 0;
    }
    return search_flags(cp);
}

char uni_fold_ascii(uint32_t cp)
{
    if (cp < 0x80)
        return ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') ? (char)(cp | 0x20) : 0;
    for (size_t i = 0; i < N_FOLDS; i++) {
        if (uni_folds[i].cp == cp)
            return uni_folds[i].lower;
    }
    return 0;
}

const char *uni_version(void)
{
    return UNI_TABLES_VERSION;
}

/*
 * pretok — hand-written matchers for the pre-tokenizer regexes (see pretok.h).
 *
 * How the regex maps to code: every character matches at least one alternative (a letter the
 * letter run, a digit the number, white space one of the three \s branches, anything else the
 * symbol run), so matches are contiguous and pretok_next only has to decide which alternative
 * wins at the current position, in the regex's order. The white-space branches are resolved from
 * one scan of the white-space run (see match_space).
 *
 * Invariant: all scanning goes through next_cp, which never reads past s[n-1].
 *
 * Thread safety: no state.
 */
#include "pretok.h" // defines: pretok_next, enum pretok_kind

#include <string.h>

#include "engine/util.h" // defines: DD_EUNSUPPORTED
#include "uni.h"         // defines: uni_decode, uni_flags, uni_fold_ascii

/* Class masks of one pre-tokenizer flavour. */
struct flavour {
    unsigned letter; /* what a letter run consumes: L, or L|M for qwen35 */
    unsigned symbol; /* a symbol-run character has none of these flags */
    int max_digits;  /* \p{N} (1) or \p{N}{1,3} (3) */
};

static const struct flavour flavours[] = {
    [PRETOK_QWEN2] = {UNI_F_LETTER, UNI_F_SPACE | UNI_F_LETTER | UNI_F_NUMBER, 1},
    [PRETOK_QWEN35] = {UNI_F_LETTER | UNI_F_MARK,
                       UNI_F_SPACE | UNI_F_LETTER | UNI_F_MARK | UNI_F_NUMBER, 1},
    [PRETOK_LLAMA3] = {UNI_F_LETTER, UNI_F_SPACE | UNI_F_LETTER | UNI_F_NUMBER, 3},
};

int pretok_from_name(const char *s, size_t len, enum pretok_kind *out)
{
    static const struct {
        const char *name;
        enum pretok_kind kind;
    } names[] = {
        {"qwen2", PRETOK_QWEN2},     {"deepseek-r1-qwen", PRETOK_QWEN2}, {"default", PRETOK_QWEN2},
        {"qwen35", PRETOK_QWEN35},   {"llama-bpe", PRETOK_LLAMA3},       {"llama3", PRETOK_LLAMA3},
        {"llama-v3", PRETOK_LLAMA3},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strlen(names[i].name) == len && memcmp(names[i].name, s, len) == 0) {
            *out = names[i].kind;
            return 0;
        }
    }
    return DD_EUNSUPPORTED;
}

const char *pretok_name(enum pretok_kind k)
{
    static const char *const names[] = {"qwen2", "qwen35", "llama-bpe"};
    return names[k];
}

/* ---- scanning helpers --------------------------------------------------------------------- */

/* Decode the code point at byte offset i (< n); returns its flags and sets *cp and *len. */
static unsigned next_cp(const uint8_t *s, size_t n, size_t i, uint32_t *cp, size_t *len)
{
    *len = (size_t)uni_decode(s + i, n - i, cp);
    return uni_flags(*cp);
}

static int is_newline(uint32_t cp)
{
    return cp == '\r' || cp == '\n';
}

/* End of the run starting at i of characters having some flag in `any` (want_set) or none of
 * them (!want_set). */
static size_t scan_run(const uint8_t *s, size_t n, size_t i, unsigned any, int want_set)
{
    while (i < n) {
        uint32_t cp;
        size_t len;
        unsigned f = next_cp(s, n, i, &cp, &len);
        if (((f & any) != 0) != want_set)
            break;
        i += len;
    }
    return i;
}

/* ---- the alternatives, in regex order; each returns the match length or 0 ----------------- */

/* (?i:'s|'t|'re|'ve|'m|'ll|'d), s[0] is the apostrophe. Folding is Unicode's (U+017F ſ is s). */
static size_t match_contraction(const uint8_t *s, size_t n)
{
    if (n < 2)
        return 0;
    uint32_t c1, c2;
    size_t l1, l2;
    next_cp(s, n, 1, &c1, &l1);
    char a = uni_fold_ascii(c1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 1 + l1;
    if ((a != 'r' && a != 'v' && a != 'l') || 1 + l1 >= n)
        return 0;
    next_cp(s, n, 1 + l1, &c2, &l2);
    char b = uni_fold_ascii(c2);
    if ((a == 'l' && b == 'l') || (a != 'l' && b == 'e'))
        return 1 + l1 + l2;
    return 0;
}

/* [^\r\n\p{L}\p{N}]?LETTER+ where LETTER is the flavour's letter class. */
static size_t match_letters(const struct flavour *fl, const uint8_t *s, size_t n, uint32_t c0,
                            unsigned f0, size_t l0)
{
    if (f0 & fl->letter)
        return scan_run(s, n, l0, fl->letter, 1);
    if (is_newline(c0) || (f0 & (UNI_F_LETTER | UNI_F_NUMBER)) || l0 >= n)
        return 0;
    uint32_t c1;
    size_t l1;
    if (!(next_cp(s, n, l0, &c1, &l1) & fl->letter))
        return 0;
    return scan_run(s, n, l0 + l1, fl->letter, 1);
}

/* \p{N} or \p{N}{1,3}. */
static size_t match_digits(const struct flavour *fl, const uint8_t *s, size_t n)
{
    size_t i = 0;
    for (int k = 0; k < fl->max_digits && i < n; k++) {
        uint32_t cp;
        size_t len;
        if (!(next_cp(s, n, i, &cp, &len) & UNI_F_NUMBER))
            break;
        i += len;
    }
    return i;
}

/* " ?SYMBOL+[\r\n]*" where SYMBOL has none of the flavour's symbol-excluded flags. */
static size_t match_symbols(const struct flavour *fl, const uint8_t *s, size_t n, uint32_t c0,
                            unsigned f0, size_t l0)
{
    size_t i = 0;
    if (!(f0 & fl->symbol)) {
        i = l0;
    } else if (c0 == ' ' && l0 < n) {
        uint32_t c1;
        size_t l1;
        if (next_cp(s, n, l0, &c1, &l1) & fl->symbol)
            return 0;
        i = l0 + l1;
    } else {
        return 0;
    }
    i = scan_run(s, n, i, fl->symbol, 0);
    while (i < n && (s[i] == '\r' || s[i] == '\n'))
        i++;
    return i;
}

/*
 * The three white-space branches over the run s[0..end):
 *   \s*[\r\n]+  ends right after the run's last \r or \n, if it has one;
 *   \s+(?!\S)   takes the whole run at the end of the text, else all but its last character
 *               (when that leaves at least one);
 *   \s+         takes the whole run.
 */
static size_t match_space(const uint8_t *s, size_t n)
{
    size_t i = 0, last_nl_end = 0, last_start = 0;
    while (i < n) {
        uint32_t cp;
        size_t len;
        if (!(next_cp(s, n, i, &cp, &len) & UNI_F_SPACE))
            break;
        last_start = i;
        i += len;
        if (is_newline(cp))
            last_nl_end = i;
    }
    if (last_nl_end)
        return last_nl_end;
    if (i == n || last_start == 0)
        return i;
    return last_start;
}

size_t pretok_next(enum pretok_kind k, const uint8_t *s, size_t n)
{
    const struct flavour *fl = &flavours[k];
    uint32_t c0;
    size_t l0, m;
    unsigned f0 = next_cp(s, n, 0, &c0, &l0);
    if (c0 == '\'' && (m = match_contraction(s, n)))
        return m;
    if ((m = match_letters(fl, s, n, c0, f0, l0)))
        return m;
    if ((f0 & UNI_F_NUMBER) && (m = match_digits(fl, s, n)))
        return m;
    if ((m = match_symbols(fl, s, n, c0, f0, l0)))
        return m;
    m = match_space(s, n);
    /* Every character matches some branch; a non-space here would be a table bug. */
    return ALWAYS(m > 0) ? m : l0;
}

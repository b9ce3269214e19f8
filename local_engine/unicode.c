/*
 * unicode.c: code point lookups over the generated UCD tables and a strict
 * UTF-8 decoder, for the BPE pre-tokenizers in tokenizer.c.
 *
 * The decoder never fails: a byte that does not begin a well-formed
 * sequence is its own unit (LE_UCP_INVALID), so a tokenizer can keep the
 * original bytes and round-trip any input, valid UTF-8 or not.
 */
#include "unicode_data.h"

static const struct le_ucd_range *
range_find(const struct le_ucd_range *a, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < a[mid].lo)
            hi = mid;
        else if (cp > a[mid].hi)
            lo = mid + 1;
        else
            return &a[mid];
    }
    return NULL;
}

enum le_ucat
le_ucp_cat(uint32_t cp)
{
    if (cp > 0x10FFFF)
        return LE_UCAT_NONE;
    const struct le_ucd_range *r =
        range_find(le_ucd_cat_ranges, le_ucd_n_cat_ranges, cp);
    return r ? (enum le_ucat)(r->val & 15u) : LE_UCAT_NONE;
}

static unsigned
flags_slow(uint32_t cp)
{
    static const unsigned cat_flag[8] = {
        0,           LE_UF_LETTER, LE_UF_NUMBER,    LE_UF_PUNCT,
        LE_UF_SYMBOL, LE_UF_MARK,  LE_UF_SEPARATOR, LE_UF_CONTROL};
    const struct le_ucd_range *r =
        range_find(le_ucd_cat_ranges, le_ucd_n_cat_ranges, cp);
    unsigned f = r ? cat_flag[r->val & 7u] : 0;
    if (r && (r->val & LE_UCD_LU_LT))
        f |= LE_UF_LU_LT;
    if (r && (r->val & LE_UCD_LL))
        f |= LE_UF_LL;
    if (range_find(le_ucd_ws_ranges, le_ucd_n_ws_ranges, cp))
        f |= LE_UF_SPACE;
    return f;
}

unsigned
le_ucp_flags(uint32_t cp)
{
    if (cp < 128)
        return le_ucd_ascii_flags[cp];
    if (cp > 0x10FFFF)
        return 0;
    return flags_slow(cp);
}

uint32_t
le_ucp_lower(uint32_t cp)
{
    if (cp < 128)
        return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    size_t lo = 0, hi = le_ucd_n_lower;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < le_ucd_lower[mid].lo)
            hi = mid;
        else if (cp > le_ucd_lower[mid].hi)
            lo = mid + 1;
        else
            return (uint32_t)((int64_t)cp + le_ucd_lower[mid].delta);
    }
    return cp;
}

int
le_ucp_decomp(uint32_t cp, uint32_t out[2])
{
    size_t lo = 0, hi = le_ucd_n_nfd;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < le_ucd_nfd[mid].cp) {
            hi = mid;
        } else if (cp > le_ucd_nfd[mid].cp) {
            lo = mid + 1;
        } else {
            out[0] = le_ucd_nfd[mid].to[0];
            out[1] = le_ucd_nfd[mid].to[1];
            return out[1] ? 2 : 1;
        }
    }
    return 0;
}

size_t
le_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t c = s[0];
    size_t len;
    uint32_t v, min;
    *cp = LE_UCP_INVALID;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 1;
    }
    if (len > n)
        return 1;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 1;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 1;
    *cp = v;
    return len;
}

size_t
le_utf8_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

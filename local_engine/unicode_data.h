/*
 * unicode_data.h: Unicode facts for the tokenizers (local_engine only).
 *
 * The tables live in unicode_data.c, generated once by gen_unicode.py from
 * the Unicode Character Database; unicode.c wraps them in lookups.  What is
 * here is all the BPE pre-tokenizers and the WordPiece normaliser need:
 * the general-category class of a code point, White_Space, simple
 * lowercase and canonical decomposition.  SentencePiece needs none of it.
 */
#ifndef LLMUX_LE_UNICODE_DATA_H
#define LLMUX_LE_UNICODE_DATA_H

#include <stddef.h>
#include <stdint.h>

/* General-category classes (first letter of the category). */
enum le_ucat {
    LE_UCAT_NONE = 0, /* unassigned (Cn), or an invalid UTF-8 byte */
    LE_UCAT_L = 1,    /* letter */
    LE_UCAT_N = 2,    /* number */
    LE_UCAT_P = 3,    /* punctuation */
    LE_UCAT_S = 4,    /* symbol */
    LE_UCAT_M = 5,    /* mark */
    LE_UCAT_Z = 6,    /* separator */
    LE_UCAT_C = 7     /* control, format, surrogate, private use */
};

struct le_ucd_range {
    uint32_t lo, hi; /* inclusive */
    uint32_t val;    /* cat ranges: enum le_ucat | LE_UCD_LU_LT | LE_UCD_LL */
};

#define LE_UCD_LU_LT 16u /* letter of category Lu or Lt */
#define LE_UCD_LL 32u    /* letter of category Ll */

struct le_ucd_delta {
    uint32_t lo, hi; /* inclusive; maps cp to cp + delta */
    int32_t delta;
};

struct le_ucd_decomp {
    uint32_t cp;
    uint32_t to[2]; /* to[1] == 0 for a singleton decomposition */
};

extern const struct le_ucd_range le_ucd_cat_ranges[];
extern const size_t le_ucd_n_cat_ranges;
extern const struct le_ucd_range le_ucd_ws_ranges[];
extern const size_t le_ucd_n_ws_ranges;
extern const struct le_ucd_delta le_ucd_lower[];
extern const size_t le_ucd_n_lower;
extern const struct le_ucd_decomp le_ucd_nfd[];
extern const size_t le_ucd_n_nfd;
extern const unsigned short le_ucd_ascii_flags[128]; /* LE_UF_* below */

/* ------------------------------------------------------------------ */
/* Lookups (unicode.c).                                                 */

/* Code point flags as the pre-tokenizers use them. */
#define LE_UF_LETTER 0x01u
#define LE_UF_NUMBER 0x02u
#define LE_UF_PUNCT 0x04u
#define LE_UF_SYMBOL 0x08u
#define LE_UF_MARK 0x10u
#define LE_UF_SEPARATOR 0x20u
#define LE_UF_CONTROL 0x40u
#define LE_UF_SPACE 0x80u /* White_Space */
#define LE_UF_LU_LT 0x100u /* uppercase or titlecase letter (Lu, Lt) */
#define LE_UF_LL 0x200u    /* lowercase letter (Ll) */

/* Not a code point: what le_utf8_decode reports for a byte that does not
 * start a valid UTF-8 sequence.  Its flags are 0. */
#define LE_UCP_INVALID 0xFFFFFFFFu

/* General-category class of cp (LE_UCAT_NONE if unassigned / invalid). */
enum le_ucat le_ucp_cat(uint32_t cp);
/* LE_UF_* flags of cp; O(1) below 0x80, a binary search above.  A letter
 * without LE_UF_LU_LT or LE_UF_LL is Lm or Lo. */
unsigned le_ucp_flags(uint32_t cp);
/* Simple lowercase of cp (cp itself if none). */
uint32_t le_ucp_lower(uint32_t cp);
/* Canonical decomposition of cp: writes up to 2 code points to out and
 * returns how many (0 if cp does not decompose).  One level only. */
int le_ucp_decomp(uint32_t cp, uint32_t out[2]);

/* Decodes one UTF-8 sequence from s[0..n) (n >= 1) into *cp and returns
 * its length.  A byte that does not start a well-formed sequence
 * (stray continuation, overlong form, surrogate, > U+10FFFF, truncated)
 * gives *cp = LE_UCP_INVALID and length 1, so every byte of any input
 * belongs to exactly one unit. */
size_t le_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* Encodes cp (<= 0x10FFFF) into out (4 bytes room); returns the length. */
size_t le_utf8_encode(uint32_t cp, char *out);

#endif

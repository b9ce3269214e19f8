/*
 * Unit tests for secret scrubbing (providers/scrub.c): every form of every
 * kind of provider secret is masked, lengths are kept, harmless text and
 * short or plain values are left alone.
 */
#include "../providers/providers.h"
#include "harness.h"

/* The fuzz target's entry point, run here on the seeds' truncations so CI
 * exercises its properties without libFuzzer. */
#include "fuzz/fuzz_scrub.c"

#include <stdlib.h>
#include <string.h>

#define KEY "sk-proj-ABCdef0123456789xyzXYZ"
#define HDR "hdr-tok-0123456789abcdef"
#define PW "p%40ss-word-123456"  /* URL-encoded '@' */

static struct cfg_header hdrs[] = {
    {"api-key", HDR},
    {"X-Title", "MyApp"},              /* plain, short: left alone */
    {"X-Org", "organisation-long-name"}, /* plain: full match only */
    {"Authorization", "Bearer tok-bearer-0123456789"},
    {"Proxy-Authorization", "Basic dXNlcjpzM2NyZXQtcGFzc3dvcmQ="},
};

static struct cfg_provider prov = {
    .name = "p",
    .base_url = "https://bob:" PW "@relay.example/v1",
    .api_key = KEY,
    .headers = hdrs,
    .n_headers = sizeof(hdrs) / sizeof(hdrs[0]),
};

/* Scrubs a copy of in; returns it (static buffer). */
static const char *
scrubbed(struct pv_scrub *s, const char *in, size_t *hits)
{
    static char buf[4096];
    snprintf(buf, sizeof(buf), "%s", in);
    size_t h = pv_scrub(s, buf, strlen(buf));
    if (hits)
        *hits = h;
    T_EQ_INT(strlen(buf), strlen(in)); /* same length */
    return buf;
}

static int
clean(struct pv_scrub *s, const char *in)
{
    const char *out = scrubbed(s, in, NULL);
    int ok = strchr(out, '*') != NULL;
    if (!ok)
        fprintf(stderr, "  not masked: %s\n", in);
    return ok;
}

static void
test_forms(void)
{
    struct pv_scrub *s = pv_scrub_new(&prov);
    T_CHECK(s != NULL);
    size_t hits;
    /* raw */
    T_EQ_STR(scrubbed(s, "key=" KEY ".", &hits),
             "key=******************************.");
    T_EQ_INT(hits, 1);
    /* JSON-escaped: \/ and \u in any mix, the whole escaped span masked */
    T_EQ_STR(scrubbed(s, "\"\\u0073k-proj-ABCdef0123456789xyzXYZ\"", NULL),
             "\"***********************************\"");
    T_CHECK(clean(s, "{\"m\":\"sk\\u002dproj\\u002dABCdef0123456789xyzXYZ\"}"));
    T_CHECK(!pv_scrub_has(s, scrubbed(s, "a \\u0073\\u006b\\u002d\\u0070"
                                         "\\u0072\\u006f\\u006a\\u002dABC",
                                      NULL),
                          60));
    /* prefix: cut by a few characters, or only its first 8 */
    T_CHECK(clean(s, "Incorrect key sk-proj-ABCdef01234567..."));
    T_CHECK(clean(s, "starts sk-proj-A"));
    /* seven leading characters are not a leak */
    T_EQ_STR(scrubbed(s, "sk-proj", &hits), "sk-proj");
    /* header value (credential name), and its base64 */
    T_CHECK(clean(s, "echo: " HDR));
    T_CHECK(clean(s, "YXBpLWtleTogaGRyLXRvay0wMTIzNDU2Nzg5YWJjZGVm")); /* "api-key: hdr-tok-0123456789abcdef" */
    /* Bearer token, the token alone, and base64 of it at an odd offset */
    T_CHECK(clean(s, "tok-bearer-0123456789"));
    T_CHECK(clean(s, "QXV0aG9yaXphdGlvbjogQmVhcmVyIHRvay1iZWFyZXItMDEyMzQ1Njc4OQ=="));
    /* Basic: the decoded user:pass and the password */
    T_CHECK(clean(s, "user:s3cret-password"));
    T_CHECK(clean(s, "pw s3cret-password"));
    /* URL userinfo: raw, %-decoded, and as the Basic header curl sends */
    T_CHECK(clean(s, "https://bob:" PW "@relay"));
    T_CHECK(clean(s, "p@ss-word-123456"));
    T_CHECK(clean(s, "Basic Ym9iOnBAc3Mtd29yZC0xMjM0NTY=")); /* bob:p@ss-word-123456 */
    /* plain header values: the full value only; short ones never */
    T_CHECK(clean(s, "organisation-long-name"));
    T_EQ_STR(scrubbed(s, "organisation-lo", NULL), "organisation-lo");
    T_EQ_STR(scrubbed(s, "Hello from MyApp", NULL), "Hello from MyApp");
    /* ordinary text is left as is; "Bearer x" is not a secret */
    const char *plain = "{\"choices\":[{\"message\":{\"content\":\"Bearer "
                        "tokens and keys: sk-\\n\\\"x\\\"\"}}]}";
    T_EQ_STR(scrubbed(s, plain, &hits), plain);
    T_EQ_INT(hits, 0);
    T_CHECK(!pv_scrub_has(s, plain, strlen(plain)));
    /* several in one text */
    scrubbed(s, KEY " and " HDR " and " KEY, &hits);
    T_EQ_INT(hits, 3);
    pv_scrub_free(s);
}

/* %-encoded and hex forms, whole or as a long enough prefix. */
static void
test_encodings(void)
{
    struct pv_scrub *s = pv_scrub_new(&prov);
    T_CHECK(s != NULL);
    size_t hits;
    /* %-encoded: reserved characters only, every character, any mix */
    T_EQ_STR(scrubbed(s, "u=sk%2Dproj%2DABCdef0123456789xyzXYZ&", &hits),
             "u=**********************************&");
    T_EQ_INT(hits, 1);
    T_CHECK(clean(s, "%73%6B%2D%70%72%6F%6A%2D%41%42%43%64%65%66"));
    T_CHECK(clean(s, "%73k-pr%6fj-ABCdef0123456789xyzXYZ"));
    /* the URL userinfo password, %-encoded once more by an echo */
    T_CHECK(clean(s, "p%2540ss-word-123456"));
    /* hex of the key, lower and upper case, inside longer hex */
    const char *lo = "736b2d70726f6a2d4142436465663031323334353637383978797a58595a";
    const char *up = "736B2D70726F6A2D4142436465663031323334353637383978797A58595A";
    char b[256];
    snprintf(b, sizeof(b), "dump: 00ff%s00", lo);
    T_EQ_STR(scrubbed(s, b, &hits),
             "dump: 00ff************************************************"
             "************00");
    T_EQ_INT(hits, 1);
    T_CHECK(clean(s, up));
    /* and in any mix of the two (a dump tool, a hand-made echo) */
    T_EQ_STR(scrubbed(s, "x=736B2d70726F6a2D4142436465663031323334353637383978797A58595a;", &hits),
             "x=************************************************************;");
    T_EQ_INT(hits, 1);
    T_CHECK(clean(s, "736B2D70726f6A2d"));
    /* with a separator between the bytes, as dump tools write them */
    T_EQ_STR(scrubbed(s, "[73:6b:2d:70:72:6f:6a:2d:41:42] and 73 6B 2d 70 72 6f 6a 2d, 73-6b-2d-70-72-6f-6a-2d", &hits),
             "[*****************************] and ***********************, ***********************");
    T_EQ_INT(hits, 3);
    /* two separators, or one inside a byte, are not a dump of it */
    const char *apart = "73::6b:2d:70:72:6f:6a:2d 7:36b2d70726f6a2d";
    T_EQ_STR(scrubbed(s, apart, &hits), apart);
    T_EQ_INT(hits, 0);
    /* a hex prefix counts from 16 digits (8 bytes of the key) */
    T_CHECK(clean(s, "736b2d70726f6a2d"));
    T_EQ_STR(scrubbed(s, "736b2d70726f6a", &hits), "736b2d70726f6a");
    /* the header token in hex, and a JSON-escaped %-form */
    T_CHECK(clean(s, "6864722d746f6b2d30313233343536373839616263646566"));
    /* hex of a base64 form: the Basic header curl sends for the URL
     * userinfo (bob:p@ss-word-123456), dumped as hex */
    T_CHECK(clean(s, "0x596d39694f6e424163334d74643239795a4330784d6a4d304e5459"));
    /* ordinary text with '%' and hex is left alone */
    const char *plain = "100% of 0xdeadbeef, %zz, %2, 736b2d707, 736B2D707";
    T_EQ_STR(scrubbed(s, plain, &hits), plain);
    T_EQ_INT(hits, 0);
    pv_scrub_free(s);
}

/* 1 when pre form post comes out as pre, form all '*', post. */
static int
masks_span(struct pv_scrub *s, const char *pre, const char *form,
           const char *post)
{
    char in[1024], want[1024];
    snprintf(in, sizeof(in), "%s%s%s", pre, form, post);
    snprintf(want, sizeof(want), "%s%*s%s", pre, (int)strlen(form), "", post);
    memset(want + strlen(pre), '*', strlen(form));
    const char *out = scrubbed(s, in, NULL);
    if (strcmp(out, want) != 0) {
        fprintf(stderr, "  in:   %s\n  got:  %s\n  want: %s\n", in, out, want);
        return 0;
    }
    return 1;
}

/* Hex written as escapes: "\x73" (C, Python, JS; x and digits in any
 * case), "\\x73" inside a JSON string, C arrays' "0x73, 0x6b". */
static void
test_escaped_hex(void)
{
    struct pv_scrub *s = pv_scrub_new(&prov);
    T_CHECK(s != NULL);
    size_t hits;
    /* the prefix rule: 8 bytes of the key as \x escapes, and the rest */
    T_CHECK(masks_span(s, "b'", "\\x73\\x6b\\x2d\\x70\\x72\\x6f\\x6a\\x2d", "'"));
    T_CHECK(masks_span(s, "s = \"", "\\x73\\X6B\\x2D\\X70\\x72\\x6F\\x6a\\x2dABCdef", "\";"));
    /* mixed with raw characters, and inside a JSON string */
    T_CHECK(masks_span(s, "", "\\x73k-\\x70roj-A", " end"));
    T_CHECK(masks_span(s, "{\"content\":\"", "\\\\x73\\\\x6b\\\\x2d\\\\x70\\\\x72\\\\x6f\\\\x6a\\\\x2d\\\\x41", "\"}"));
    /* C byte lists, with or without the space, any case; the separator
     * after the last byte is not the secret's */
    T_CHECK(masks_span(s, "{", "0x73, 0x6b, 0x2d, 0x70, 0x72, 0x6f, 0x6a, 0x2d, 0x41, 0x42, 0x43", ", 0x00}"));
    T_CHECK(masks_span(s, "char k[] = {", "0X73,0X6B,0X2D,0X70,0X72,0X6F,0X6A,0X2D,0X41", "};"));
    /* the whole key as a byte list is one match */
    scrubbed(s, "0x73, 0x6b, 0x2d, 0x70, 0x72, 0x6f, 0x6a, 0x2d, 0x41, 0x42, "
                "0x43, 0x64, 0x65, 0x66, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, "
                "0x36, 0x37, 0x38, 0x39, 0x78, 0x79, 0x7a, 0x58, 0x59, 0x5a",
             &hits);
    T_EQ_INT(hits, 1);
    /* seven bytes are no leak; other escapes and byte lists are text */
    const char *plain = "\\x73\\x6b\\x2d\\x70\\x72\\x6f\\x6a {0x73, 0x6b, 0x2d, "
                        "0x70, 0x72, 0x6f, 0x6a} 0x1f, 0x20 \\x00\\x7 0x7 \\x "
                        "0x73,, 0x6b 0x73;0x6b";
    T_EQ_STR(scrubbed(s, plain, &hits), plain);
    T_EQ_INT(hits, 0);
    pv_scrub_free(s);
    /* a whole-only value that ends in '0' (which could start a "0x"),
     * at the text's very end: raw and in hex */
    struct cfg_header h[] = {{"X-Org", "organisation-2020"}};
    struct cfg_provider pr = {.name = "o", .headers = h, .n_headers = 1};
    s = pv_scrub_new(&pr);
    T_CHECK(s != NULL);
    T_CHECK(masks_span(s, "org ", "organisation-2020", ""));
    T_CHECK(masks_span(s, "", "6f7267616e69736174696f6e2d32303230", ""));
    T_CHECK(masks_span(s, "", "0x6f, 0x72, 0x67, 0x61, 0x6e, 0x69, 0x73, 0x61, 0x74, 0x69, 0x6f, 0x6e, 0x2d, 0x32, 0x30, 0x32, 0x30", ""));
    pv_scrub_free(s);
}

/* A JSON escape written as text: the model's "\u0073\u006b-..." is
 * "\\u0073\\u006b-..." in the JSON string that carries it, and a
 * client that decodes it once more gets the key. */
static void
test_text_json_escape(void)
{
    struct pv_scrub *s = pv_scrub_new(&prov);
    T_CHECK(s != NULL);
    T_CHECK(masks_span(s, "{\"content\":\"", "\\\\u0073\\\\u006b\\\\u002d\\\\u0070\\\\u0072\\\\u006F\\\\u006a\\\\u002d", "\"}"));
    T_CHECK(masks_span(s, "{\"content\":\"", "\\\\u0073k-\\\\u0070roj-A", "\"}"));
    /* \\u beyond ASCII, or cut short, is text */
    size_t hits;
    const char *plain = "\\\\u0173k-proj-AB \\\\u07k-proj-AB \\\\u0073\\\\u006b-pro";
    T_EQ_STR(scrubbed(s, plain, &hits), plain);
    T_EQ_INT(hits, 0);
    pv_scrub_free(s);
}

/* Runs events through one stream's carry; out gets each as sent (joined
 * with '|').  Returns the masks made. */
static int
stream(struct pv_scrub *s, const char *const *ev, size_t n, char *out,
       size_t outlen)
{
    struct pv_scrub_carry cy;
    memset(&cy, 0, sizeof(cy));
    int hits = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        char *m = NULL;
        int h = pv_scrub_event(s, &cy, ev[i], strlen(ev[i]), &m);
        T_CHECK(h >= 0);
        T_CHECK((h > 0) == (m != NULL));
        size_t used = strlen(out);
        snprintf(out + used, outlen - used, "%s%.*s", i ? "|" : "",
                 (int)strlen(ev[i]), m ? m : ev[i]);
        hits += h > 0 ? h : 0;
        free(m);
    }
    return hits;
}

#define CHUNK(t) "{\"choices\":[{\"delta\":{\"content\":\"" t "\"}}]}"
#define ADELTA(t)                                                          \
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"  \
    "\"text_delta\",\"text\":\"" t "\"}}"

/* A key that itself starts with "0x" (an Ethereum-style private key) or
 * holds "0x" and "%41" as text: its bytes as they are still match, whole,
 * as a prefix and split across events, and so does its byte list. */
static void
test_key_with_0x(void)
{
    struct cfg_provider pr = {
        .name = "e", .api_key = "0x4c0883a69102937d6231471b5dbb6204fe51296170"};
    struct pv_scrub *s = pv_scrub_new(&pr);
    T_CHECK(s != NULL);
    T_CHECK(masks_span(s, "k=", "0x4c0883a69102937d6231471b5dbb6204fe51296170", "."));
    T_CHECK(masks_span(s, "k=", "0x4c0883a6", "..."));
    T_CHECK(masks_span(s, "", "0x30, 0x78, 0x34, 0x63, 0x30, 0x38, 0x38, 0x33", ""));
    char out[1024];
    const char *a[] = {CHUNK("key 0x4c08"), CHUNK("83a69102 and")};
    T_EQ_INT(stream(s, a, 2, out, sizeof(out)), 1);
    T_EQ_STR(out, CHUNK("key 0x4c08") "|" CHUNK("******** and"));
    const char *b[] = {CHUNK("key 0"), CHUNK("x4c0883a69 and")};
    T_EQ_INT(stream(s, b, 2, out, sizeof(out)), 1);
    T_EQ_STR(out, CHUNK("key 0") "|" CHUNK("********** and"));
    pv_scrub_free(s);
    struct cfg_provider pr2 = {.name = "f", .api_key = "ab0x41%41-secret-0123"};
    s = pv_scrub_new(&pr2);
    T_CHECK(s != NULL);
    T_CHECK(masks_span(s, "k=", "ab0x41%41-secret-0123", "."));
    pv_scrub_free(s);
}

/* A secret split across the events of one stream. */
static void
test_stream_split(void)
{
    struct pv_scrub *s = pv_scrub_new(&prov);
    T_CHECK(s != NULL);
    char out[2048];
    /* "sk-pr" then the rest: the continuation masked, the text after it
     * and everything before kept; the first part was already sent. */
    const char *a[] = {CHUNK("key: sk-pr"),
                       CHUNK("oj-ABCdef0123456789xyzXYZ, done")};
    T_EQ_INT(stream(s, a, 2, out, sizeof(out)), 1);
    T_EQ_STR(out, CHUNK("key: sk-pr") "|" CHUNK("*************************, done"));
    /* over three events, JSON-escaped, with a ping between (Anthropic):
     * 6 characters do not count yet, the third event's part does */
    const char *b[] = {ADELTA("s"), ADELTA("k\\u002dpro"), "{\"type\":\"ping\"}",
                       ADELTA("j-ABCdef0123"), ADELTA("456789xyzXYZ!")};
    T_EQ_INT(stream(s, b, 5, out, sizeof(out)), 2);
    T_EQ_STR(out, ADELTA("s") "|" ADELTA("k\\u002dpro") "|{\"type\":\"ping\"}|"
                  ADELTA("************") "|" ADELTA("************!"));
    /* hex and %-encoded forms split too */
    const char *c[] = {CHUNK("736b2d70726f"),
                       CHUNK("6a2d41424364656630 end")};
    T_EQ_INT(stream(s, c, 2, out, sizeof(out)), 1);
    T_EQ_STR(out, CHUNK("736b2d70726f") "|" CHUNK("****************** end"));
    const char *c3[] = {CHUNK("73:6b:2d:70:"), CHUNK("72:6f:6a:2d:41 end")};
    T_EQ_INT(stream(s, c3, 2, out, sizeof(out)), 1);
    T_EQ_STR(out, CHUNK("73:6b:2d:70:") "|" CHUNK("************** end"));
    const char *c2[] = {CHUNK("736B2d70726F"),
                        CHUNK("6a2D41424364656630 end")};
    T_EQ_INT(stream(s, c2, 2, out, sizeof(out)), 1);
    T_EQ_STR(out, CHUNK("736B2d70726F") "|" CHUNK("****************** end"));
    const char *d[] = {CHUNK("sk%2Dp"), CHUNK("roj%2DAB and")};
    T_EQ_INT(stream(s, d, 2, out, sizeof(out)), 1);
    T_EQ_STR(out, CHUNK("sk%2Dp") "|" CHUNK("******** and"));
    /* a %XX cut by the event's end, after the secret began or before */
    const char *d2[] = {CHUNK("sk%2"), CHUNK("Dproj%2"), CHUNK("DAB and")};
    T_EQ_INT(stream(s, d2, 3, out, sizeof(out)), 1); /* 7, then 8 */
    T_EQ_STR(out, CHUNK("sk%2") "|" CHUNK("Dproj%2") "|" CHUNK("*** and"));
    const char *d3[] = {CHUNK("x %"), CHUNK("7"), CHUNK("3k%2Dproj-AB.")};
    T_EQ_INT(stream(s, d3, 3, out, sizeof(out)), 1);
    T_EQ_STR(out, CHUNK("x %") "|" CHUNK("7") "|" CHUNK("************."));
    /* keys escaped too (\u0063ontent is "content") */
    const char *d4[] = {"{\"\\u0063ontent\":\"sk-pr\"}",
                        "{\"c\\u006fntent\":\"oj-ABC!\"}"};
    T_EQ_INT(stream(s, d4, 2, out, sizeof(out)), 1);
    T_EQ_STR(out, "{\"\\u0063ontent\":\"sk-pr\"}|{\"c\\u006fntent\":\"******!\"}");
    /* a whole-only secret (plain header value): masked once complete */
    const char *e[] = {CHUNK("organisation-"), CHUNK("long"),
                       CHUNK("-name.")};
    T_EQ_INT(stream(s, e, 3, out, sizeof(out)), 1);
    T_EQ_STR(out, CHUNK("organisation-") "|" CHUNK("long") "|"
                  CHUNK("*****."));
    /* what does not go on, or goes on under another key, is left */
    const char *f[] = {CHUNK("sk-pr"), CHUNK("ose and sk-"),
                       "{\"choices\":[{\"delta\":{\"role\":\"proj-ABCdef01\"}}]}"};
    T_EQ_INT(stream(s, f, 3, out, sizeof(out)), 0);
    /* a secret whole inside one event is masked there, as pv_scrub does */
    const char *g[] = {CHUNK("a " KEY " b")};
    T_EQ_INT(stream(s, g, 1, out, sizeof(out)), 1);
    T_CHECK(strstr(out, "ABCdef") == NULL);
    /* a prefix cut by the event's end (8 characters: masked there) goes on
     * masked in the next */
    const char *h[] = {CHUNK("sk-proj-ABC"), CHUNK("def0123456789xyz"),
                       CHUNK("XYZ tail")};
    T_EQ_INT(stream(s, h, 3, out, sizeof(out)), 3);
    T_EQ_STR(out, CHUNK("***********") "|" CHUNK("****************") "|"
                  CHUNK("*** tail"));
    /* no secret: nothing copied (the bytes pass through) */
    struct pv_scrub_carry cy;
    memset(&cy, 0, sizeof(cy));
    char *m = (char *)1;
    T_EQ_INT(pv_scrub_event(s, &cy, CHUNK("hello"), strlen(CHUNK("hello")),
                            &m),
             0);
    T_CHECK(m == NULL);
    T_EQ_INT(pv_scrub_event(NULL, &cy, "x", 1, &m), 0);
    T_CHECK(m == NULL);
    pv_scrub_free(s);
}

#define OACHUNK(t)                                                         \
    "{\"id\":\"chatcmpl-B9MHDbslfk\",\"object\":\"chat.completion.chunk\","   \
    "\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_4d4c1b3d87\"," \
    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" t "\"}}]}"
#define MANY_SK                                                            \
    "sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk " \
    "sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk sk "

/* The stream scan's shortcuts (it walks the JSON only when a value may
 * end in a partial match or one is carried, and looks for partial matches
 * only where it saw a place one may start): each kind of event still
 * carries what the full walk carries. */
static void
test_stream_shortcuts(void)
{
    struct pv_scrub *s = pv_scrub_new(&prov);
    T_CHECK(s != NULL);
    char out[4096];
    /* a real chunk's keys end in 's' ("choices") and its values in digits
     * (hex forms start with them); the delta's last byte starts the key */
    const char *a[] = {OACHUNK("sessions is"), OACHUNK("k-proj-ABCdef!"),
                       OACHUNK("fine")};
    T_EQ_INT(stream(s, a, 3, out, sizeof(out)), 1);
    T_EQ_STR(out, OACHUNK("sessions is") "|" OACHUNK("*************!") "|"
                  OACHUNK("fine"));
    /* more places a match may start than the scan keeps, before the cut */
    const char *b[] = {CHUNK(MANY_SK "sk-pr"), CHUNK("oj-ABCdef!")};
    T_EQ_INT(stream(s, b, 2, out, sizeof(out)), 1);
    T_EQ_STR(out, CHUNK(MANY_SK "sk-pr") "|" CHUNK("*********!"));
    /* a match in the event, then the cut one in the same value */
    const char *c[] = {CHUNK(KEY " and sk-pr"), CHUNK("oj-ABCdef!")};
    T_EQ_INT(stream(s, c, 2, out, sizeof(out)), 2);
    T_EQ_STR(out, CHUNK("****************************** and sk-pr") "|"
                  CHUNK("*********!"));
    /* an escape elsewhere in the event: keys are decoded, still found */
    const char *d[] = {"{\"x\":\"a\\nb\",\"content\":\"sk-pr\"}",
                       "{\"x\":\"%41\",\"content\":\"oj-ABCdef!\"}"};
    T_EQ_INT(stream(s, d, 2, out, sizeof(out)), 1);
    T_EQ_STR(out, "{\"x\":\"a\\nb\",\"content\":\"sk-pr\"}|"
                  "{\"x\":\"%41\",\"content\":\"*********!\"}");
    /* a carried match goes on through events of its own (no place of
     * theirs needs the walk) */
    const char *e[] = {CHUNK("sk-proj-"), CHUNK("ABCdef"), CHUNK("!")};
    T_EQ_INT(stream(s, e, 3, out, sizeof(out)), 2);
    T_EQ_STR(out, CHUNK("********") "|" CHUNK("******") "|" CHUNK("!"));
    /* a key's last byte ends no value: "s" as a key, "k-proj" after it */
    const char *f[] = {"{\"content\":1,\"s\":2}",
                       "{\"content\":\"k-proj-ABCdef\"}"};
    T_EQ_INT(stream(s, f, 2, out, sizeof(out)), 0);
    pv_scrub_free(s);
}

/* Escaped hex and byte lists split across a stream's events, the cut
 * anywhere in an escape, before the secret began or after. */
static void
test_stream_escaped_hex(void)
{
    struct pv_scrub *s = pv_scrub_new(&prov);
    T_CHECK(s != NULL);
    char out[4096];
    static const struct {
        const char *ev[3];
        size_t n;
        const char *want; /* the events as sent, joined with '|' */
    } t[] = {
        {{CHUNK("\\\\x73\\\\x6b\\\\x2d\\\\x7"), CHUNK("0\\\\x72\\\\x6f\\\\x6a\\\\x2d\\\\x41 end")},
         2,
         CHUNK("\\\\x73\\\\x6b\\\\x2d\\\\x7") "|" CHUNK("************************** end")},
        {{CHUNK("0x73, 0"), CHUNK("x6b, 0x2d, 0x70, 0x72, 0x6f, 0x6a, 0x2d, 0x41 end")},
         2,
         CHUNK("0x73, 0") "|" CHUNK("********************************************* end")},
        {{CHUNK("key: 0"), CHUNK("x73, 0x6b, 0x2d, 0x70, 0x72, 0x6f, 0x6a, 0x2d, 0x41.")},
         2,
         CHUNK("key: 0") "|" CHUNK("***************************************************.")},
        {{CHUNK("a \\\\"), CHUNK("x73\\\\x6b\\\\x2d\\\\x70\\\\x72\\\\x6f\\\\x6a\\\\x2d\\\\x41.")},
         2,
         CHUNK("a \\\\") "|" CHUNK("*******************************************.")},
        {{CHUNK("0x73, 0x6b,"), CHUNK(" 0x2d, 0x70, 0x72, 0x6f, 0x6a, 0x2d, 0x41, 0x20")},
         2,
         CHUNK("0x73, 0x6b,") "|" CHUNK("*****************************************, 0x20")},
        {{CHUNK("0x73, 0x6b, 0x2d"), CHUNK(", 0x70, 0x72, 0x6f, 0x6a, 0x2d, 0x41")},
         2,
         CHUNK("0x73, 0x6b, 0x2d") "|" CHUNK("************************************")},
        {{CHUNK("0x73, 0x6b, 0x2d, 0x70, "), CHUNK("0"), CHUNK("x72, 0x6f, 0x6a, 0x2d, 0x41!")},
         3,
         CHUNK("0x73, 0x6b, 0x2d, 0x70, ") "|" CHUNK("0") "|" CHUNK("***************************!")},
        /* a JSON escape written as text, cut after "\\u00" */
        {{CHUNK("\\\\u0073\\\\u006b-\\\\u00"), CHUNK("70roj-AB end")},
         2,
         CHUNK("\\\\u0073\\\\u006b-\\\\u00") "|" CHUNK("******** end")},
        {{CHUNK("see \\\\"), CHUNK("u0073k-proj-AB end")},
         2,
         CHUNK("see \\\\") "|" CHUNK("************** end")},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        T_EQ_INT(stream(s, t[i].ev, t[i].n, out, sizeof(out)), 1);
        T_EQ_STR(out, t[i].want);
    }
    /* a "0" or "\\\\" that goes on as no escape of the secret */
    const char *n1[] = {CHUNK("version 2.0"), CHUNK("x41, 0x42 and \\\\"),
                        CHUNK("x41\\\\x42 fine")};
    T_EQ_INT(stream(s, n1, 3, out, sizeof(out)), 0);
    pv_scrub_free(s);
}

/* More partial matches at once than the carry holds (a hundred values
 * ending in "sk", under keys of their own): the real one, further on,
 * still goes on into the next event. */
static void
test_carry_crowded(void)
{
    struct pv_scrub *s = pv_scrub_new(&prov);
    T_CHECK(s != NULL);
    char ev[4096];
    size_t o = 0;
    o += (size_t)snprintf(ev + o, sizeof(ev) - o, "{");
    for (int i = 0; i < 100; i++)
        o += (size_t)snprintf(ev + o, sizeof(ev) - o, "\"k%d\":\"a sk\",", i);
    snprintf(ev + o, sizeof(ev) - o, "\"content\":\"key sk-proj\"}");
    T_CHECK(strlen(ev) < sizeof(ev) - 1);
    struct pv_scrub_carry cy;
    memset(&cy, 0, sizeof(cy));
    char *m = NULL;
    T_EQ_INT(pv_scrub_event(s, &cy, ev, strlen(ev), &m), 0);
    T_EQ_INT(cy.n, PV_SCRUB_CARRY); /* full */
    const char *next = "{\"content\":\"-ABCdef!\"}";
    T_EQ_INT(pv_scrub_event(s, &cy, next, strlen(next), &m), 1);
    /* m: the masked copy, strlen(next) bytes, no NUL */
    T_CHECK(m && !memcmp(m, "{\"content\":\"*******!\"}", strlen(next)));
    free(m);
    /* and a crowd that comes after the real one does not push it out */
    memset(&cy, 0, sizeof(cy));
    snprintf(ev, sizeof(ev), "{\"content\":\"key sk-proj\"}");
    T_EQ_INT(pv_scrub_event(s, &cy, ev, strlen(ev), &m), 0);
    o = (size_t)snprintf(ev, sizeof(ev), "{");
    for (int i = 0; i < 100; i++)
        o += (size_t)snprintf(ev + o, sizeof(ev) - o, "%s\"k%d\":\"a sk\"",
                              i ? "," : "", i);
    snprintf(ev + o, sizeof(ev) - o, "}");
    T_EQ_INT(pv_scrub_event(s, &cy, ev, strlen(ev), &m), 0);
    T_EQ_INT(pv_scrub_event(s, &cy, next, strlen(next), &m), 1);
    /* m: the masked copy, strlen(next) bytes, no NUL */
    T_CHECK(m && !memcmp(m, "{\"content\":\"*******!\"}", strlen(next)));
    free(m);
    pv_scrub_free(s);
}

static void
test_nothing_to_scrub(void)
{
    struct cfg_provider p = {.name = "x", .base_url = "http://h/v1"};
    T_CHECK(pv_scrub_new(&p) == NULL);
    T_CHECK(pv_scrub_new(NULL) == NULL);
    char b[] = "sk-anything";
    T_EQ_INT(pv_scrub(NULL, b, strlen(b)), 0);
    T_EQ_INT(pv_scrub_has(NULL, b, strlen(b)), 0);
    pv_scrub_free(NULL);
}

/* pv_scrub_share hands the scrubber out again only for a provider with
 * the same secret fields, byte for byte, wherever they are stored. */
/* A secret whose first byte is not ASCII: its hex form starts with a
 * letter, matched in either case there too. */
static void
test_hex_letter_first(void)
{
    struct cfg_provider pr = {.name = "u", .api_key = "\xc3\xa9t\xc3\xa9-secret-0123"};
    struct pv_scrub *s = pv_scrub_new(&pr);
    T_CHECK(s != NULL);
    /* c3a9 74 c3a9 2d 736563726574 2d 30313233 */
    T_CHECK(clean(s, "c3a974c3a92d7365637265742d30313233"));
    T_CHECK(clean(s, "C3A974C3A92D7365637265742D30313233"));
    T_CHECK(clean(s, "C3a974c3A92d7365637265742D30313233"));
    T_CHECK(clean(s, "c3A974C3a92D7365637265742d30313233"));
    size_t hits;
    const char *plain = "c3a974c3 C3A974 ca fe";
    T_EQ_STR(scrubbed(s, plain, &hits), plain);
    T_EQ_INT(hits, 0);
    pv_scrub_free(s);
}

static void
test_share(void)
{
    struct pv_scrub *s = pv_scrub_new(&prov);
    T_CHECK(s != NULL);
    struct cfg_header h2[sizeof(hdrs) / sizeof(hdrs[0])];
    char key[] = KEY, url[256], name[32];
    snprintf(url, sizeof(url), "%s", prov.base_url);
    memcpy(h2, hdrs, sizeof(h2));
    snprintf(name, sizeof(name), "%s", hdrs[0].name);
    h2[0].name = name;
    struct cfg_provider q = prov; /* copies at other addresses */
    q.api_key = key;
    q.base_url = url;
    q.headers = h2;
    struct pv_scrub *t = pv_scrub_share(s, &q);
    T_CHECK(t == s);
    pv_scrub_free(t); /* one holder left: s still works */
    size_t hits = 0;
    t = pv_scrub_share(s, &prov);
    T_CHECK(t == s);
    T_CHECK(strstr(scrubbed(t, "k=" KEY, &hits), "ABCdef") == NULL);
    T_EQ_INT(hits, 1);
    pv_scrub_free(t);
    key[5] = 'X'; /* a new key */
    T_CHECK(pv_scrub_share(s, &q) == NULL);
    key[5] = KEY[5];
    url[9] = 'X'; /* new userinfo */
    T_CHECK(pv_scrub_share(s, &q) == NULL);
    url[9] = prov.base_url[9];
    q.n_headers--; /* a header fewer */
    T_CHECK(pv_scrub_share(s, &q) == NULL);
    q.n_headers++;
    h2[1].value = "MyApp2"; /* a header value changed */
    T_CHECK(pv_scrub_share(s, &q) == NULL);
    h2[1].value = hdrs[1].value;
    q.api_key = NULL; /* no key */
    T_CHECK(pv_scrub_share(s, &q) == NULL);
    q.api_key = key;
    t = pv_scrub_share(s, &q); /* all back: the same again */
    T_CHECK(t == s);
    pv_scrub_free(t);
    T_CHECK(pv_scrub_share(NULL, &prov) == NULL);
    pv_scrub_free(s);
}

/* Every truncation of every escaped form: no read past the end. */
static void
test_edges(void)
{
    struct pv_scrub *s = pv_scrub_new(&prov);
    static const char *const in[] = {"\\u00", "\\", "\\u0073k-proj-AB",
                                     KEY, "\\/\\/\\u0"};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        size_t n = strlen(in[i]);
        for (size_t k = 0; k <= n; k++) {
            char *b = malloc(k ? k : 1);
            memcpy(b, in[i], k);
            size_t hits = pv_scrub(s, b, k);
            /* the key cut anywhere: a leak from 8 characters on */
            if (i == 3)
                T_EQ_INT(hits, k >= 8);
            free(b);
        }
    }
    pv_scrub_free(s);
}

static void
test_fuzz_entry(void)
{
    static const char *const seeds[] = {
        "{\"error\":{\"message\":\"key sk-proj-ABCdef0123456789xy\"}}",
        "{\"m\":\"\\u0073k-proj-ABCdef0123456789xyzXYZ a\\/b\"}",
        "Basic Ym9iOnBAc3Mtd29yZC0xMjM0NTY=; aGRyLXRvay0wMTIzNDU2Nzg5YWJjZGVm",
        "{\"c\":\"\\\\x73\\\\x6B\\\\X2d\\\\x70\\\\x72\\\\x6f\\\\x6a\\\\x2d\\\\x41\"}",
        "{0x73, 0x6b,0x2d, 0X70, 0x72, 0x6f, 0x6a, 0x2d, 0x41, 0x42}",
    };
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
        for (size_t n = 0; n <= strlen(seeds[i]); n++)
            T_EQ_INT(LLVMFuzzerTestOneInput((const uint8_t *)seeds[i], n),
                     0);
}

int
main(void)
{
    T_RUN(test_forms);
    T_RUN(test_nothing_to_scrub);
    T_RUN(test_encodings);
    T_RUN(test_escaped_hex);
    T_RUN(test_text_json_escape);
    T_RUN(test_stream_split);
    T_RUN(test_stream_shortcuts);
    T_RUN(test_stream_escaped_hex);
    T_RUN(test_carry_crowded);
    T_RUN(test_key_with_0x);
    T_RUN(test_hex_letter_first);
    T_RUN(test_share);
    T_RUN(test_edges);
    T_RUN(test_fuzz_entry);
    return T_END();
}

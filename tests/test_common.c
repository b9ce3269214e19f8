#include "../common/common.h"
#include "harness.h"

static void
test_buf_cap(void)
{
    struct gx_buf b;
    gx_buf_init(&b, 10);
    T_EQ_INT(gx_buf_append(&b, "hello", 5), GX_OK);
    T_EQ_INT(gx_buf_append(&b, "world", 5), GX_OK);
    T_EQ_INT(gx_buf_append(&b, "!", 1), GX_ETOOBIG);
    T_EQ_STR(b.data, "helloworld");
    gx_buf_reset(&b);
    T_EQ_INT(gx_buf_printf(&b, "%d-%s", 42, "x"), GX_OK);
    T_EQ_STR(b.data, "42-x");
    gx_buf_cleanup(&b);
}

static void
test_utf8(void)
{
    T_CHECK(gx_utf8_valid("abc", 3));
    T_CHECK(gx_utf8_valid("\xc3\xa9", 2));
    T_CHECK(gx_utf8_valid("\xf0\x9f\x98\x80", 4));
    T_CHECK(!gx_utf8_valid("\xc3", 1));           /* truncated */
    T_CHECK(!gx_utf8_valid("\xc0\xaf", 2));       /* overlong */
    T_CHECK(!gx_utf8_valid("\xed\xa0\x80", 3));   /* surrogate */
    T_CHECK(!gx_utf8_valid("\xff", 1));
}

static void
test_secure_equal(void)
{
    T_CHECK(gx_secure_equal("abc", 3, "abc", 3));
    T_CHECK(!gx_secure_equal("abc", 3, "abd", 3));
    T_CHECK(!gx_secure_equal("abc", 3, "abcd", 4));
}

int
main(void)
{
    T_RUN(test_buf_cap);
    T_RUN(test_utf8);
    T_RUN(test_secure_equal);
    return T_END();
}

/* fake_stats: see fake_stats.h. */
#include "fake_stats.h"

#include <stdio.h>

#include "e2e.h"

json_t *
fake_stats(const char *fake_url)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/fake/stats", fake_url);
    struct e2e_resp r;
    json_t *j = NULL;
    if (e2e_http("GET", url, NULL, NULL, 5000, &r) == 0)
        j = json_loads(r.body ? r.body : "", 0, NULL);
    e2e_resp_free(&r);
    return j;
}

long long
fake_stats_requests(const char *fake_url)
{
    json_t *s = fake_stats(fake_url);
    const json_t *n = json_object_get(s, "requests");
    long long v = json_is_integer(n) ? (long long)json_integer_value(n) : -1;
    json_decref(s);
    return v;
}

long long
e2e_row_int(const char *db, const char *rid, const char *col)
{
    char sql[512];
    snprintf(sql, sizeof(sql), "SELECT %s FROM usage WHERE request_id = '%s'",
             col, rid);
    return e2e_db_int(db, sql);
}

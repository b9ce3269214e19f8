/*
 * keys.c: the keys table, SQLite backend, and the backend-independent
 * key calls (pr_key_*).  The one owner of the keys table's rows: the
 * gateway (admin API, `llmux keys`, the periodic reload) calls these;
 * only the ledger writer adds committed cost to spent_pusd.
 *
 * Each call opens its own connection through pr_db_open (the one SQLite
 * open helper) and closes it: the calls are rare (admin writes, a reload
 * every second) and run on the aux thread or in the CLI.
 */
#include "pricing.h"
#include "pricing_int.h"

#include <stdio.h>
#include <string.h>

static const struct pr_store_ops *
ops_for(const char *database)
{
    return pr_store_is_pg(database) ? &pr_store_pg : &pr_store_sqlite;
}

enum gx_status
pr_key_create(const char *database, const struct pr_key *k, int64_t *id_out,
              char *err, size_t errlen)
{
    if (!database || !k || !k->name || !id_out)
        return GX_EINVAL;
    return ops_for(database)->key_create(database, k, id_out, err, errlen);
}

enum gx_status
pr_key_revoke(const char *database, int64_t id, int64_t now_ms, char *err,
              size_t errlen)
{
    if (!database)
        return GX_EINVAL;
    return ops_for(database)->key_revoke(database, id, now_ms, err, errlen);
}

enum gx_status
pr_key_list(const char *database, pr_key_cb cb, void *ud, char *err,
            size_t errlen)
{
    if (!database || !cb)
        return GX_EINVAL;
    return ops_for(database)->key_list(database, cb, ud, err, errlen);
}

void
pr_digest_hex(const unsigned char d[32], char hex[65])
{
    static const char xd[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = xd[d[i] >> 4];
        hex[2 * i + 1] = xd[d[i] & 15];
    }
    hex[64] = '\0';
}

static int
hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int
pr_hex_digest(const char *hex, unsigned char out[32])
{
    if (!hex || strlen(hex) != 64)
        return -1;
    for (int i = 0; i < 32; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* SQLite.                                                              */

static void
bind_opt(sqlite3_stmt *st, int i, int64_t v, int64_t null_below)
{
    if (v < null_below)
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_int64(st, i, v);
}

static int64_t
col_i64(sqlite3_stmt *st, int i, int64_t null_value)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL
               ? null_value
               : sqlite3_column_int64(st, i);
}

enum gx_status
pr_sq_key_create(const char *path, const struct pr_key *k, int64_t *id_out,
                 char *err, size_t errlen)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    enum gx_status rs = GX_EIO;
    if (pr_db_open(path, 0, &db, err, errlen) != SQLITE_OK)
        return GX_EIO;
    char hex[65];
    pr_digest_hex(k->hash, hex);
    if (sqlite3_prepare_v2(db,
                           "INSERT INTO keys (name, hash, created_ms,"
                           " expires_ms, budget_pusd, spent_pusd, rpm, tpm,"
                           " models) VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?7,"
                           " ?8)",
                           -1, &st, NULL) != SQLITE_OK) {
        gx_errf(err, errlen, "keys table: %s", sqlite3_errmsg(db));
        goto out;
    }
    sqlite3_bind_text(st, 1, k->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, hex, 64, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, k->created_ms ? k->created_ms : gx_now_ms());
    bind_opt(st, 4, k->expires_ms, 0);
    bind_opt(st, 5, k->budget_pusd, 0);
    bind_opt(st, 6, k->rpm, 1);
    bind_opt(st, 7, k->tpm, 1);
    if (k->models && k->models[0])
        sqlite3_bind_text(st, 8, k->models, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 8);
    if (sqlite3_step(st) != SQLITE_DONE) {
        gx_errf(err, errlen, "cannot insert the key: %s", sqlite3_errmsg(db));
        goto out;
    }
    *id_out = sqlite3_last_insert_rowid(db);
    rs = GX_OK;
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rs;
}

enum gx_status
pr_sq_key_revoke(const char *path, int64_t id, int64_t now_ms, char *err,
                 size_t errlen)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    enum gx_status rs = GX_EIO;
    if (pr_db_open(path, 0, &db, err, errlen) != SQLITE_OK)
        return GX_EIO;
    if (sqlite3_prepare_v2(db,
                           "UPDATE keys SET revoked_ms = coalesce(revoked_ms,"
                           " ?1) WHERE id = ?2",
                           -1, &st, NULL) != SQLITE_OK) {
        gx_errf(err, errlen, "keys table: %s", sqlite3_errmsg(db));
        goto out;
    }
    sqlite3_bind_int64(st, 1, now_ms);
    sqlite3_bind_int64(st, 2, id);
    if (sqlite3_step(st) != SQLITE_DONE) {
        gx_errf(err, errlen, "cannot revoke: %s", sqlite3_errmsg(db));
        goto out;
    }
    if (sqlite3_changes(db) == 0) {
        gx_errf(err, errlen, "no key with id %lld", (long long)id);
        rs = GX_ENOTFOUND;
        goto out;
    }
    rs = GX_OK;
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rs;
}

enum gx_status
pr_sq_key_list(const char *path, pr_key_cb cb, void *ud, char *err,
               size_t errlen)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    enum gx_status rs = GX_EIO;
    if (pr_db_open(path, 1, &db, err, errlen) != SQLITE_OK)
        return GX_EIO;
    if (sqlite3_prepare_v2(db,
                           "SELECT id, name, hash, created_ms, expires_ms,"
                           " revoked_ms, budget_pusd, spent_pusd, rpm, tpm,"
                           " models FROM keys ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK) {
        gx_errf(err, errlen, "keys table: %s", sqlite3_errmsg(db));
        goto out;
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct pr_key k;
        memset(&k, 0, sizeof(k));
        k.id = sqlite3_column_int64(st, 0);
        k.name = (const char *)sqlite3_column_text(st, 1);
        if (pr_hex_digest((const char *)sqlite3_column_text(st, 2), k.hash))
            memset(k.hash, 0, sizeof(k.hash)); /* matches no secret */
        k.created_ms = col_i64(st, 3, 0);
        k.expires_ms = col_i64(st, 4, -1);
        k.revoked_ms = col_i64(st, 5, -1);
        k.budget_pusd = col_i64(st, 6, -1);
        k.spent_pusd = col_i64(st, 7, 0);
        k.rpm = col_i64(st, 8, 0);
        k.tpm = col_i64(st, 9, 0);
        k.models = (const char *)sqlite3_column_text(st, 10);
        if (!k.name)
            k.name = "";
        if (cb(ud, &k)) {
            rs = GX_ECANCELED;
            goto out;
        }
    }
    if (rc != SQLITE_DONE) {
        gx_errf(err, errlen, "keys table: %s", sqlite3_errmsg(db));
        goto out;
    }
    rs = GX_OK;
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rs;
}

/*
 * tls: HTTPS on the listener when the config has "tls": {"cert", "key"}.
 *
 * One SSL_CTX for the process, built before the workers start and only
 * read afterwards (OpenSSL allows sharing a context across threads once it
 * is set up); each accepted connection gets its own SSL inside a libevent
 * OpenSSL bufferevent that conn.c uses in place of a plain socket one, so
 * the HTTP code above does not change.
 *
 * Not done here: client certificates, SNI with several certificates,
 * reloading the certificate without a restart.
 */
#include <stdio.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "gw_int.h"

static void
ssl_err(char *err, size_t errlen, const char *what, const char *path)
{
    char e[256] = "";
    unsigned long code = ERR_get_error();
    if (code)
        ERR_error_string_n(code, e, sizeof(e));
    ERR_clear_error();
    gx_errf(err, errlen, "tls: %s %s%s%s", what, path ? path : "",
            e[0] ? ": " : "", e);
}

enum gx_status
gw_tls_new(const struct cfg *c, void **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!c->tls_cert || !c->tls_key)
        return GX_OK;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        ssl_err(err, errlen, "cannot create a context", NULL);
        return GX_ENOMEM;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE);
    if (SSL_CTX_use_certificate_chain_file(ctx, c->tls_cert) != 1) {
        ssl_err(err, errlen, "cannot load the certificate", c->tls_cert);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, c->tls_key, SSL_FILETYPE_PEM) != 1) {
        ssl_err(err, errlen, "cannot load the private key", c->tls_key);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ssl_err(err, errlen, "the private key does not match the certificate",
                c->tls_cert);
        goto fail;
    }
    *out = ctx;
    return GX_OK;
fail:
    SSL_CTX_free(ctx);
    return GX_EINVAL;
}

struct bufferevent *
gw_tls_bev(struct event_base *base, int fd, void *ctx)
{
    SSL *ssl = SSL_new(ctx);
    if (!ssl)
        return NULL;
    /* The SSL is freed and fd closed with the bufferevent
     * (BEV_OPT_CLOSE_ON_FREE). */
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        SSL_free(ssl);
        return NULL;
    }
    /* Many clients close without close_notify; that is not an error for
     * a request that was answered. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

void
gw_tls_attach(struct gw_worker *w, void *ctx)
{
    w->tls_ctx = ctx;
}

void
gw_tls_free(void *ctx)
{
    SSL_CTX_free(ctx);
}

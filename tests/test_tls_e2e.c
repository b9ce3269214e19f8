/*
 * End to end: HTTPS on the listener (config "tls": {cert, key}).  The test
 * makes its own self-signed certificate (P-256, subjectAltName
 * IP:127.0.0.1) with the OpenSSL library, serves the real binary with it
 * in front of the fake provider, and talks to it with libcurl verifying
 * the chain against that certificate.  Also: plain HTTP on the TLS port
 * fails cleanly, a client that does not trust the certificate is refused,
 * bearer keys work over TLS, parallel TLS connections, a broken key file
 * stops `serve` with exit 1.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "harness.h"
#include "lib/e2e.h"

#define SECRET "sk-upstream-SECRET-tls-77aa01"

static struct e2e_proc fake, gw;
static char dir[512], cert_path[600], key_path[600], dbpath[600];
static char base[128];
static const char *bin;
static char key[128];

static int
make_cert(void)
{
    int ok = -1;
    EVP_PKEY *pk = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    FILE *f = NULL;
    if (!pk || !x)
        goto out;
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, pk);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               (const unsigned char *)"127.0.0.1", -1, -1, 0);
    X509_set_issuer_name(x, name);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
    const char *exts[][2] = {{"subjectAltName", "IP:127.0.0.1"},
                             {"basicConstraints", "critical,CA:TRUE"},
                             {"keyUsage", "digitalSignature,keyCertSign"}};
    for (size_t i = 0; i < 3; i++) {
        X509_EXTENSION *e =
            X509V3_EXT_conf(NULL, &ctx, exts[i][0], exts[i][1]);
        if (!e)
            goto out;
        X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
    }
    if (!X509_sign(x, pk, EVP_sha256()))
        goto out;
    f = fopen(cert_path, "w");
    if (!f || !PEM_write_X509(f, x))
        goto out;
    fclose(f);
    f = fopen(key_path, "w");
    if (!f || !PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL))
        goto out;
    ok = 0;
out:
    if (f)
        fclose(f);
    X509_free(x);
    EVP_PKEY_free(pk);
    return ok;
}

struct grow {
    char *p;
    size_t n;
};

static size_t
grow_cb(char *data, size_t size, size_t nmemb, void *ud)
{
    struct grow *g = ud;
    size_t n = size * nmemb;
    char *q = realloc(g->p, g->n + n + 1);
    if (!q)
        return 0;
    memcpy(q + g->n, data, n);
    g->n += n;
    q[g->n] = '\0';
    g->p = q;
    return n;
}

/* One HTTPS request; trust: the certificate file as the only CA, or NULL
 * for the system store.  Returns the CURLcode; *status and *body (caller
 * frees) on a response. */
static int
https(const char *url, const char *trust, const char *bearer,
      const char *body, long *status, char **out)
{
    CURL *c = curl_easy_init();
    struct grow b = {0};
    struct curl_slist *hl = NULL;
    char auth[256];
    if (bearer) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", bearer);
        hl = curl_slist_append(hl, auth);
    }
    if (body)
        hl = curl_slist_append(hl, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    if (trust)
        curl_easy_setopt(c, CURLOPT_CAINFO, trust);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    if (body)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, grow_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 15000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    *status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    if (out)
        *out = b.p ? b.p : strdup("");
    else
        free(b.p);
    return (int)rc;
}

static int
start_gateway(const char *cert, const char *pkey, struct e2e_proc *p)
{
    char cfg[4096];
    snprintf(cfg, sizeof(cfg),
             "{\n"
             " \"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s\", \"require_keys\": true,\n"
             " \"tls\": {\"cert\": \"%s\", \"key\": \"%s\"},\n"
             " \"providers\": {\n"
             "  \"fake\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:%d/v1\",\n"
             "   \"api_key\": \"%s\", \"models\": {\"gpt-4.1\": {}}}\n"
             " }\n"
             "}\n",
             dbpath, cert, pkey, fake.port, SECRET);
    char *path = e2e_write_temp("tls.json", cfg);
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(p, argv, "listening on https://127.0.0.1:", 15000);
    free(path);
    return rc;
}

static void
test_https(void)
{
    long st;
    char *body = NULL, url[256];
    snprintf(url, sizeof(url), "%s/health", base);
    T_EQ_INT(https(url, cert_path, NULL, NULL, &st, &body), CURLE_OK);
    T_EQ_INT(st, 200);
    T_CHECK(body && strstr(body, "\"ok\""));
    free(body);

    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    const char *chat = "{\"model\":\"gpt-4.1\",\"messages\":[{\"role\":"
                       "\"user\",\"content\":\"hello over tls\"}]}";
    T_EQ_INT(https(url, cert_path, key, chat, &st, &body), CURLE_OK);
    T_EQ_INT(st, 200);
    T_CHECK(body && strstr(body, "choices") && !strstr(body, SECRET));
    free(body);
    T_EQ_INT(https(url, cert_path, NULL, chat, &st, &body), CURLE_OK);
    T_EQ_INT(st, 401);
    free(body);
}

static void
test_untrusted_and_plain(void)
{
    long st;
    char url[256];
    /* A client that does not trust our self-signed cert is refused by
     * its own verification: the server really presents that cert. */
    snprintf(url, sizeof(url), "%s/health", base);
    int rc = https(url, NULL, NULL, NULL, &st, NULL);
    T_CHECK(rc == CURLE_PEER_FAILED_VERIFICATION ||
            rc == CURLE_SSL_CACERT_BADFILE || rc == CURLE_SSL_CONNECT_ERROR);
    /* Plain HTTP on the TLS port: no HTTP answer. */
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/health", gw.port);
    struct e2e_resp r;
    rc = e2e_http("GET", url, NULL, NULL, 5000, &r);
    T_CHECK(rc != 0 || r.status != 200);
    e2e_resp_free(&r);
    /* Still serving TLS. */
    snprintf(url, sizeof(url), "%s/health", base);
    T_EQ_INT(https(url, cert_path, NULL, NULL, &st, NULL), CURLE_OK);
    T_EQ_INT(st, 200);
}

struct par {
    int ok;
};

static void *
par_main(void *arg)
{
    struct par *p = arg;
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    const char *chat = "{\"model\":\"gpt-4.1\",\"messages\":[{\"role\":"
                       "\"user\",\"content\":\"hi\"}],\"stream\":true}";
    for (int i = 0; i < 5; i++) {
        long st;
        char *body = NULL;
        int rc = https(url, cert_path, key, chat, &st, &body);
        if (rc == CURLE_OK && st == 200 && body &&
            strstr(body, "data: [DONE]"))
            p->ok++;
        else
            fprintf(stderr, "  parallel: curl %d status %ld body %.200s\n",
                    rc, st, body ? body : "");
        free(body);
    }
    return NULL;
}

static void
test_parallel(void)
{
    pthread_t th[4];
    struct par p[4] = {{0}, {0}, {0}, {0}};
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, par_main, &p[i]);
    int ok = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ok += p[i].ok;
    }
    T_EQ_INT(ok, 20);
}

static void
test_bad_key_file(void)
{
    /* The certificate as its own key: serve refuses to start, exit 1,
     * and names the problem. */
    struct e2e_proc p;
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"database\": \"%s\","
             " \"require_keys\": false,"
             " \"tls\": {\"cert\": \"%s\", \"key\": \"%s\"},"
             " \"providers\": {\"fake\": {\"kind\": \"openai\", "
             "\"base_url\": \"http://127.0.0.1:%d/v1\", \"api_key\": \"%s\","
             " \"models\": {\"gpt-4.1\": {}}}}}",
             dbpath, cert_path, cert_path, fake.port, SECRET);
    char *path = e2e_write_temp("badtls.json", cfg);
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    /* It never prints the marker; e2e_start gives up when it exits. */
    T_CHECK(e2e_start(&p, argv, "listening on", 10000) != 0);
    free(path);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *d = e2e_temp_dir();
    snprintf(dir, sizeof(dir), "%s", d);
    free(d);
    snprintf(cert_path, sizeof(cert_path), "%s/cert.pem", dir);
    snprintf(key_path, sizeof(key_path), "%s/key.pem", dir);
    snprintf(dbpath, sizeof(dbpath), "%s/tls.db", dir);
    if (make_cert() != 0) {
        fprintf(stderr, "could not make a certificate\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    /* A key, made by the CLI. */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s keys create --name tls --db %s 2>/dev/null",
             bin, dbpath);
    FILE *pp = popen(cmd, "r");
    if (!pp || !fgets(key, sizeof(key), pp)) {
        fprintf(stderr, "could not create a key\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    pclose(pp);
    key[strcspn(key, "\r\n")] = '\0';
    if (e2e_start_fake(&fake) != 0 ||
        start_gateway(cert_path, key_path, &gw) != 0) {
        fprintf(stderr, "could not start the fake provider or llmux\n");
        e2e_stop(&fake, SIGKILL, 1000);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(base, sizeof(base), "https://127.0.0.1:%d", gw.port);
    T_RUN(test_https);
    T_RUN(test_untrusted_and_plain);
    T_RUN(test_parallel);
    T_RUN(test_bad_key_file);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 20000), 0);
    e2e_stop(&fake, SIGTERM, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}

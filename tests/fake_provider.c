/*
 * fake_provider: a misbehaving OpenAI-compatible upstream for end-to-end
 * tests and benchmarks.  A real libevent evhttp server on 127.0.0.1.
 *
 *   fake_provider --port 0 [--host 127.0.0.1] [--threads N]
 *                 [--max-seconds S] [--tls-cert FILE --tls-key FILE]
 *
 * Prints "PORT <n>" on stdout (flushed) once listening; exits 0 on
 * SIGTERM/SIGINT or after --max-seconds (default 300) so it can never hang
 * a test run.  --threads N runs N event loops on the same port
 * (SO_REUSEPORT) for benchmarks.  With --tls-cert and --tls-key (PEM files)
 * it speaks HTTPS only (libevent's bufferevent_openssl under evhttp, so
 * HTTP/1.1 only: evhttp has no h2, ALPN offers are ignored); every
 * directive works the same over TLS.
 *
 * Endpoints
 *   POST /v1/chat/completions, /chat/completions   an OpenAI answer
 *   POST /f/<DIRECTIVES>/v1/chat/completions        same, with directives
 *                                                   (so a base_url can
 *                                                   carry a behaviour)
 *   POST /v1/messages                               an Anthropic Messages
 *                                                   answer (x-api-key
 *                                                   required: else 401)
 *   POST /v1beta/models/M:generateContent           a Gemini answer; with
 *        /v1beta/models/M:streamGenerateContent?alt=sse  a Gemini stream
 *                                                   (x-goog-api-key
 *                                                   required: else 403)
 *        (both also under /f/<DIRECTIVES>/)
 *   POST /v1/embeddings                             deterministic vectors
 *                                                   (EMB_DIM floats from
 *                                                   an FNV-1a hash of each
 *                                                   input; float or
 *                                                   base64 encoding_format,
 *                                                   "dimensions" honoured),
 *                                                   usage prompt_tokens =
 *                                                   bytes / 4 + 1 per input
 *   POST /v1/completions                            a legacy completion
 *                                                   ("text_completion",
 *                                                   stream or not, usage
 *                                                   chunk with
 *                                                   include_usage)
 *        (both also under /f/<DIRECTIVES>/; they honour status=N,
 *        message=, content=, prompt_tokens= and completion_tokens=)
 *   GET  /v1/models                                 a one-model list
 *   GET  /fake/stats   {"requests","completed","streams","connections",
 *                       "by_model":{},"by_status":{},"by_path":{},
 *                       "by_tag":{},"last":{"path","model","headers",
 *                       "body","raw","answer"}}   (counts since start or
 *                       reset; raw: the request's exact bytes, answer:
 *                       the exact bytes of the answer built for it, the
 *                       body or the stream's events, both as JSON strings
 *                       up to 64 KiB)
 *   POST /fake/reset   zeroes the counters
 *
 * Behaviour per request, from (later wins) the /f/ path prefix, the
 * X-Fake header, and the last user message when it starts with "fake:";
 * a list of directives separated by ';':
 *   status=N            answer N with an OpenAI error body (stream or not)
 *   message=TEXT        that error's message
 *   retry_after=S       add Retry-After: S
 *   retry_after_http=S  add Retry-After as an HTTP-date S seconds ahead
 *   delay_ms=N          wait before answering at all
 *   slow_first_byte_ms=N  send the headers at once, the body after N ms
 *   headers_then_hang   send 200 headers, then nothing (hang_ms, default
 *                       30000, then end the response)
 *   reset               close the connection (RST) without answering
 *   malformed           200 with broken JSON (non-stream) or a broken SSE
 *                       data line after the role chunk (stream)
 *   error_after=N       stream: after N events an error object
 *                       ({"error":{...}}) and the end, without [DONE]
 *   drop_after=N        stream: close the connection after N events,
 *                       without [DONE]
 *   chunks=N            N content chunks (default: one per word)
 *   chunk_delay_ms=N    wait between stream events
 *   content=TEXT        answer text (default "Hello from fake provider")
 *   echo                answer with the last user message
 *   big=N               answer text of N 'x' bytes
 *   no_usage            no usage object / usage chunk
 *   prompt_tokens=N completion_tokens=N cached=N   usage numbers (defaults:
 *                       9, the number of content chunks, 0)
 *   tag=NAME            count this request under by_tag.NAME (tell apart
 *                       providers that share one fake, via their headers)
 *   crlf                stream lines end in CRLF
 *   cr                  stream lines end in a bare CR
 *   comments            a ": ping" comment before each stream event
 *   multiline           stream: each event's JSON pretty-printed over
 *                       several data lines (every other one "data:"
 *                       without the space), after "event: message" and
 *                       "id: N" fields and a comment
 *   echo_headers[=FORM] every request header ("name: value; ...") as the
 *                       error message (with status=N) or as the answer
 *                       text (otherwise), and the Authorization value in
 *                       an x-ratelimit-echo response header.  FORM: json
 *                       (default: the JSON body as jansson escapes it),
 *                       slash ("/" as "\/"), u (every letter and digit
 *                       of every JSON string as \u00XX), b64 (each value
 *                       base64), trunc (each value less its last 3
 *                       characters), text (error: a text/plain body),
 *                       hex / HEX (each value's bytes as lower / upper
 *                       case hex), url (each value %-encoded, every byte
 *                       but letters and digits as %XX), xesc (each byte
 *                       as \x73 / \X6B, alternately), clist (a C byte
 *                       list: 0x73, 0x6b,0x2d, ...), utext (each byte as
 *                       the text \u0073, which the answer's JSON string
 *                       carries as \\u0073)
 *   rl_headers          x-ratelimit-* and x-request-id on the answer
 *   cache_write=N       native: Anthropic cache_creation_input_tokens
 *                       (prompt_tokens stays the total: input_tokens is
 *                       prompt - cached - cache_write); cached=N is
 *                       cache_read_input_tokens / cachedContentTokenCount
 *   odd                 Anthropic: an answer (or stream) that is valid
 *                       JSON but that a parse and re-serialise would
 *                       change: key order, whitespace, \u00e9 and \/
 *                       escapes, 1.0, 1e2, -0.0, a thinking block with its
 *                       signature, redacted_thinking, a block type and an
 *                       event type nobody knows yet (anth_odd); the usage
 *                       from the directives; error_after=N works on it
 *   thoughts=N          native: N thinking tokens (Gemini
 *                       thoughtsTokenCount and a thought part; Anthropic a
 *                       thinking block, counted in output_tokens)
 *   (Gemini, no directive: a request with generationConfig.responseLogprobs
 *   gets a logprobsResult on each text chunk, a chosen candidate a word,
 *   generationConfig.logprobs top candidates each)
 *   tool=NAME           answer with a call of tool NAME instead of the
 *                       plain text (native: after a short text; OpenAI: a
 *                       tool_calls answer, finish_reason tool_calls,
 *                       streamed as the id/name chunk and the arguments
 *                       in two pieces), unless the conversation ends
 *                       with a tool result (a "tool" message, a
 *                       tool_result block, a functionResponse part): then
 *                       the plain text
 *   tool_args=JSON      its arguments (default {"city":"Paris"}), streamed
 *                       in three pieces (Anthropic input_json_delta; two
 *                       OpenAI argument deltas)
 * Native modes answer in the upstream's own JSON and SSE shapes (Anthropic
 * events message_start, content_block_start/delta/stop, ping,
 * message_delta, message_stop; Gemini one GenerateContentResponse per
 * event, finishReason and usageMetadata on the last), errors in their own
 * shape ({"type":"error","error":{"type","message"}};
 * {"error":{"code","message","status"}}), and validate requests as those
 * APIs do in the parts llmux relies on (Anthropic: max_tokens, roles
 * alternating from user, tool_result after a matching tool_use).
 * "reset" reads the whole request first (evhttp hands it over complete),
 * then resets: a read-then-reset upstream.  Every copy that arrives counts
 * in "requests" and by_tag, so a test sees how many copies were sent.
 * The usage chunk is sent only when the request has
 * stream_options.include_usage true, as OpenAI does.
 *
 * Deterministic: fixed "created", ids numbered per process.  Every wait is
 * bounded (delays capped at 60 s).
 */
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>
#include <event2/bufferevent_ssl.h>
#include <jansson.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#define FP_MAX_THREADS 16
#define FP_MAX_DELAY_MS 60000
#define FP_MAX_BIG (64 * 1024 * 1024)
#define FP_LAST_BODY_MAX 65536

/* ---- shared counters ---------------------------------------------------- */

static SSL_CTX *tls_ctx; /* NULL: plain HTTP */

static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
static long st_requests, st_streams, st_connections, st_ids, st_completed;
static json_t *st_by_model, *st_by_status, *st_by_path, *st_by_tag, *st_last;

/* obj[key] += 1; call with st_mu held. */
static void
count_in(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    json_object_set_new(obj, key,
                        json_integer(v ? json_integer_value(v) + 1 : 1));
}

static void
stats_completed(void)
{
    pthread_mutex_lock(&st_mu);
    st_completed++;
    pthread_mutex_unlock(&st_mu);
}

static void
stats_count_status(int status)
{
    char k[16];
    snprintf(k, sizeof(k), "%d", status);
    pthread_mutex_lock(&st_mu);
    count_in(st_by_status, k);
    pthread_mutex_unlock(&st_mu);
}

/* ---- workers -------------------------------------------------------------- */

struct job;

struct worker {
    int idx;
    struct event_base *base;
    struct evhttp *http;
    pthread_t thread;
    struct job *jobs; /* in flight, freed at exit */
};

static struct worker workers[FP_MAX_THREADS];
static int n_workers = 1;

struct opts {
    int status; /* 0: a normal 200 */
    int retry_after;
    int retry_after_http; /* -1, or seconds from now as an HTTP-date */
    int delay_ms;
    int slow_first_byte_ms;
    int headers_then_hang;
    int hang_ms;
    int reset;
    int malformed;
    int drop_after; /* -1: no drop */
    int error_after; /* -1: none */
    int chunks;
    int chunk_delay_ms;
    int echo;
    long big;
    int no_usage;
    long prompt_tokens, completion_tokens, cached;
    int crlf, comments, cr, multiline, rl_headers;
    int echo_headers; /* 0 none, else an ECHO_* form */
    char content[1024];
    int has_content;
    char message[256]; /* error.message for status=N */
    char tag[64];      /* counted in /fake/stats by_tag */
    long cache_write, thoughts;
    int odd; /* anthropic: answers re-serialising would change */
    char tool[64];
    char tool_args[512];
};

enum fmt { FMT_OPENAI = 0, FMT_ANTHROPIC, FMT_GEMINI };

enum {
    ECHO_JSON = 1, ECHO_SLASH, ECHO_U, ECHO_B64, ECHO_TRUNC, ECHO_TEXT,
    ECHO_HEX, ECHO_HEX_UP, ECHO_URL, ECHO_XESC, ECHO_CLIST, ECHO_UTEXT
};

enum job_stage { J_BEGIN, J_BODY, J_EVENTS, J_HANG, J_DROP };

struct job {
    struct worker *w;
    struct evhttp_request *req; /* NULL once evhttp took it back */
    struct event *timer;
    struct opts o;
    enum job_stage stage;
    int stream;
    char *body;       /* non-stream body */
    char *echo;       /* echo_headers: the headers text, in its form */
    long id;
    char **events;    /* stream events, each a full "data: ...\n\n" */
    size_t n_events, next;
    struct job *prev, *nextj;
    enum fmt fmt;
    /* Gemini: generationConfig.responseLogprobs and .logprobs asked */
    int gem_lp, gem_top;
};

static int
clampi(long v, long lo, long hi)
{
    return (int)(v < lo ? lo : v > hi ? hi : v);
}

static void
opts_default(struct opts *o)
{
    memset(o, 0, sizeof(*o));
    o->retry_after = -1;
    o->retry_after_http = -1;
    o->drop_after = -1;
    o->error_after = -1;
    o->hang_ms = 30000;
    o->prompt_tokens = -1;
    o->completion_tokens = -1;
}

/* Parses "a=1;b;c=x" into o.  Unknown names are ignored. */
static void
opts_parse(struct opts *o, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != ';')
            j++;
        const char *p = s + i;
        size_t len = j - i;
        while (len && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t' ||
                       p[len - 1] == '\n' || p[len - 1] == '\r'))
            len--;
        const char *eq = memchr(p, '=', len);
        size_t nl = eq ? (size_t)(eq - p) : len;
        char name[32], val[1024];
        if (nl < sizeof(name)) {
            memcpy(name, p, nl);
            name[nl] = '\0';
            size_t vl = eq ? len - nl - 1 : 0;
            if (vl >= sizeof(val))
                vl = sizeof(val) - 1;
            if (eq)
                memcpy(val, eq + 1, vl);
            val[vl] = '\0';
            long v = strtol(val, NULL, 10);
#define IS(x) (strcmp(name, (x)) == 0)
            if (IS("status"))
                o->status = clampi(v, 0, 999);
            else if (IS("retry_after"))
                o->retry_after = clampi(v, 0, 86400);
            else if (IS("retry_after_http"))
                o->retry_after_http = clampi(v, 0, 86400);
            else if (IS("delay_ms"))
                o->delay_ms = clampi(v, 0, FP_MAX_DELAY_MS);
            else if (IS("slow_first_byte_ms"))
                o->slow_first_byte_ms = clampi(v, 0, FP_MAX_DELAY_MS);
            else if (IS("headers_then_hang"))
                o->headers_then_hang = 1;
            else if (IS("hang_ms"))
                o->hang_ms = clampi(v, 0, FP_MAX_DELAY_MS);
            else if (IS("reset"))
                o->reset = 1;
            else if (IS("malformed"))
                o->malformed = 1;
            else if (IS("error_after"))
                o->error_after = clampi(v, 0, 100000);
            else if (IS("drop_after"))
                o->drop_after = clampi(v, 0, 100000);
            else if (IS("chunks"))
                o->chunks = clampi(v, 0, 100000);
            else if (IS("chunk_delay_ms"))
                o->chunk_delay_ms = clampi(v, 0, FP_MAX_DELAY_MS);
            else if (IS("echo"))
                o->echo = 1;
            else if (IS("big"))
                o->big = clampi(v, 0, FP_MAX_BIG);
            else if (IS("no_usage"))
                o->no_usage = 1;
            else if (IS("prompt_tokens"))
                o->prompt_tokens = clampi(v, 0, 1000000000);
            else if (IS("completion_tokens"))
                o->completion_tokens = clampi(v, 0, 1000000000);
            else if (IS("cached"))
                o->cached = clampi(v, 0, 1000000000);
            else if (IS("cache_write"))
                o->cache_write = clampi(v, 0, 1000000000);
            else if (IS("odd"))
                o->odd = 1;
            else if (IS("thoughts"))
                o->thoughts = clampi(v, 0, 1000000000);
            else if (IS("tool"))
                snprintf(o->tool, sizeof(o->tool), "%.63s", val);
            else if (IS("tool_args"))
                snprintf(o->tool_args, sizeof(o->tool_args), "%.511s", val);
            else if (IS("crlf"))
                o->crlf = 1;
            else if (IS("comments"))
                o->comments = 1;
            else if (IS("cr"))
                o->cr = 1;
            else if (IS("multiline"))
                o->multiline = 1;
            else if (IS("rl_headers"))
                o->rl_headers = 1;
            else if (IS("echo_headers"))
                o->echo_headers = !strcmp(val, "slash")   ? ECHO_SLASH
                                  : !strcmp(val, "u")     ? ECHO_U
                                  : !strcmp(val, "b64")   ? ECHO_B64
                                  : !strcmp(val, "trunc") ? ECHO_TRUNC
                                  : !strcmp(val, "text")  ? ECHO_TEXT
                                  : !strcmp(val, "hex")   ? ECHO_HEX
                                  : !strcmp(val, "HEX")   ? ECHO_HEX_UP
                                  : !strcmp(val, "url")   ? ECHO_URL
                                  : !strcmp(val, "xesc")  ? ECHO_XESC
                                  : !strcmp(val, "clist") ? ECHO_CLIST
                                  : !strcmp(val, "utext") ? ECHO_UTEXT
                                                          : ECHO_JSON;
            else if (IS("tag"))
                snprintf(o->tag, sizeof(o->tag), "%.63s", val);
            else if (IS("message"))
                snprintf(o->message, sizeof(o->message), "%.255s", val);
            else if (IS("content")) {
                snprintf(o->content, sizeof(o->content), "%s", val);
                o->has_content = 1;
            }
#undef IS
        }
        i = j + 1;
    }
}

/* The text of a message's content: a string, or the text parts. */
static const char *
message_text(json_t *msg)
{
    json_t *c = json_object_get(msg, "content");
    if (json_is_string(c))
        return json_string_value(c);
    if (json_is_array(c)) {
        size_t i;
        json_t *part;
        json_array_foreach(c, i, part) {
            json_t *t = json_object_get(part, "text");
            if (json_is_string(t))
                return json_string_value(t);
        }
    }
    return NULL;
}

static const char *
last_user_text(json_t *body)
{
    json_t *contents = json_object_get(body, "contents");
    for (size_t i = json_array_size(contents); i > 0; i--) {
        json_t *c = json_array_get(contents, i - 1);
        json_t *role = json_object_get(c, "role");
        if (json_is_string(role) && !strcmp(json_string_value(role), "user")) {
            json_t *t = json_object_get(
                json_array_get(json_object_get(c, "parts"), 0), "text");
            return json_is_string(t) ? json_string_value(t) : NULL;
        }
    }
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs))
        return NULL;
    for (size_t i = json_array_size(msgs); i > 0; i--) {
        json_t *m = json_array_get(msgs, i - 1);
        json_t *role = json_object_get(m, "role");
        if (json_is_string(role) &&
            strcmp(json_string_value(role), "user") == 0)
            return message_text(m);
    }
    return NULL;
}

/* 1 if the last message of body is a tool's result, in any format. */
static int
ends_with_tool_result(json_t *body)
{
    json_t *contents = json_object_get(body, "contents");
    json_t *last = json_array_get(contents, json_array_size(contents) - 1);
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(last, "parts"), i, p)
        if (json_object_get(p, "functionResponse"))
            return 1;
    json_t *msgs = json_object_get(body, "messages");
    last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *role = json_string_value(json_object_get(last, "role"));
    if (role && !strcmp(role, "tool"))
        return 1;
    json_array_foreach(json_object_get(last, "content"), i, p) {
        const char *t = json_string_value(json_object_get(p, "type"));
        if (t && !strcmp(t, "tool_result"))
            return 1;
    }
    return 0;
}

static void
job_free(struct job *j)
{
    if (!j)
        return;
    struct worker *w = j->w;
    if (j->prev)
        j->prev->nextj = j->nextj;
    else if (w->jobs == j)
        w->jobs = j->nextj;
    if (j->nextj)
        j->nextj->prev = j->prev;
    if (j->timer)
        event_free(j->timer);
    free(j->body);
    free(j->echo);
    for (size_t i = 0; i < j->n_events; i++)
        free(j->events[i]);
    free(j->events);
    free(j);
}

static void
add_common_headers(struct evhttp_request *req, const char *ctype)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", ctype);
}

static void
send_json(struct evhttp_request *req, int status, const char *text)
{
    struct evbuffer *b = evbuffer_new();
    if (b)
        evbuffer_add(b, text, strlen(text));
    add_common_headers(req, "application/json");
    evhttp_send_reply(req, status, status == 200 ? "OK" : "Error", b);
    if (b)
        evbuffer_free(b);
    stats_count_status(status);
}

static void
add_retry_after_http(struct evhttp_request *req, int seconds)
{
    char date[64];
    time_t t = time(NULL) + seconds;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After",
                      date);
}

static char *
b64n(const void *in, size_t n)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    char *out = malloc(n / 3 * 4 + 5);
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)in;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = i + 1 < n ? tab[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static char *
b64(const char *in)
{
    return b64n(in, strlen(in));
}

/* in as hex (ECHO_HEX, ECHO_HEX_UP), %-encoded (ECHO_URL) or as hex
 * escapes (ECHO_XESC, ECHO_CLIST, ECHO_UTEXT).  malloc'd. */
static char *
encoded(const char *in, int form)
{
    const char *d = form == ECHO_HEX ? "0123456789abcdef" : "0123456789ABCDEF";
    size_t n = strlen(in), o = 0;
    char *out = malloc(6 * n + 1);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (form == ECHO_XESC || form == ECHO_CLIST || form == ECHO_UTEXT) {
            o += (size_t)sprintf(out + o,
                                 form == ECHO_UTEXT ? "\\u%04x"
                                 : form == ECHO_CLIST
                                     ? (i + 1 == n  ? "0x%02x"
                                        : i % 3 == 2 ? "0x%02x,"
                                                     : "0x%02x, ")
                                 : i % 2 ? "\\X%02X"
                                         : "\\x%02x",
                                 c);
            continue;
        }
        if (form == ECHO_URL && isalnum(c)) {
            out[o++] = (char)c;
            continue;
        }
        if (form == ECHO_URL)
            out[o++] = '%';
        out[o++] = d[c >> 4];
        out[o++] = d[c & 15];
    }
    out[o] = '\0';
    return out;
}

/* echo_headers: "name: value; ..." of every request header, each value in
 * the form (b64, trunc) or as is.  malloc'd. */
static char *
headers_text(struct evhttp_request *req, int form)
{
    size_t cap = 256, len = 0;
    char *t = malloc(cap);
    if (!t)
        return NULL;
    t[0] = '\0';
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    for (struct evkeyval *kv = in->tqh_first; kv; kv = kv->next.tqe_next) {
        char *v = form == ECHO_B64                           ? b64(kv->value)
                  : form == ECHO_HEX || form == ECHO_HEX_UP ||
                          form == ECHO_URL || form >= ECHO_XESC
                      ? encoded(kv->value, form)
                      : strdup(kv->value);
        if (!v)
            continue;
        if (form == ECHO_TRUNC) {
            size_t vl = strlen(v);
            v[vl > 3 ? vl - 3 : 0] = '\0';
        }
        size_t need = len + strlen(kv->key) + strlen(v) + 8;
        if (need > cap) {
            char *nt = realloc(t, need * 2);
            if (!nt) {
                free(v);
                break;
            }
            t = nt;
            cap = need * 2;
        }
        len += (size_t)snprintf(t + len, cap - len, "%s%s: %s",
                                len ? "; " : "", kv->key, v);
        free(v);
    }
    return t;
}

/* Every letter and digit inside the JSON strings of text as \u00XX (still
 * the same JSON value).  malloc'd; takes text. */
static char *
u_escape(char *text)
{
    if (!text)
        return NULL;
    size_t n = strlen(text);
    char *out = malloc(n * 6 + 1);
    if (!out) {
        free(text);
        return NULL;
    }
    size_t o = 0;
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = text[i];
        if (in_str && ch == '\\' && i + 1 < n) {
            out[o++] = ch;
            out[o++] = text[++i];
            continue;
        }
        if (ch == '"')
            in_str = !in_str;
        if (in_str && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                       (ch >= '0' && ch <= '9')))
            o += (size_t)sprintf(out + o, "\\u%04x", (unsigned)ch);
        else
            out[o++] = ch;
    }
    out[o] = '\0';
    free(text);
    return out;
}

/* json_dumps in the job's echo form (slash, u); o may be NULL. */
static char *
dump_json(const struct opts *o, const json_t *v)
{
    int slash = o && o->echo_headers == ECHO_SLASH;
    char *t = json_dumps(v, JSON_COMPACT | (slash ? JSON_ESCAPE_SLASH : 0));
    return o && o->echo_headers == ECHO_U ? u_escape(t) : t;
}

static void send_error_opts(struct evhttp_request *req, const struct opts *o,
                            int status, int retry_after, const char *message);

static void
send_error(struct evhttp_request *req, int status, int retry_after,
           const char *message)
{
    send_error_opts(req, NULL, status, retry_after, message);
}

static void
send_error_opts(struct evhttp_request *req, const struct opts *o, int status,
                int retry_after, const char *message)
{
    const char *type = status == 429   ? "rate_limit_exceeded"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    json_t *e = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message",
                          message, "type", type, "param", "code", type);
    char *text = e ? dump_json(o, e) : NULL;
    json_decref(e);
    if (retry_after >= 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", retry_after);
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Retry-After", ra);
    }
    if (o && o->echo_headers == ECHO_TEXT) {
        struct evbuffer *b = evbuffer_new();
        if (b)
            evbuffer_add(b, message, strlen(message));
        add_common_headers(req, "text/plain");
        evhttp_send_reply(req, status, "Error", b);
        if (b)
            evbuffer_free(b);
        stats_count_status(status);
    } else {
        send_json(req, status, text ? text : "{}");
    }
    free(text);
}

static json_t *
usage_json(const struct opts *o, long completion)
{
    long prompt = o->prompt_tokens >= 0 ? o->prompt_tokens : 9;
    long comp = o->completion_tokens >= 0 ? o->completion_tokens : completion;
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens",
                     (json_int_t)prompt, "completion_tokens",
                     (json_int_t)comp, "total_tokens",
                     (json_int_t)(prompt + comp), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)o->cached);
}

/* Splits text into pieces: n pieces by bytes (on UTF-8 boundaries) when
 * n > 0, else one per word (each but the first starting with its space).
 * Returns the count; *out holds malloc'd strings. */
static size_t
split_text(const char *text, int n, char ***out)
{
    size_t len = strlen(text);
    size_t cap = n > 0 ? (size_t)n : 1;
    if (n <= 0)
        for (size_t i = 1; i < len; i++)
            if (text[i] == ' ')
                cap++;
    char **v = calloc(cap, sizeof(*v));
    if (!v)
        return 0;
    size_t k = 0, start = 0;
    if (n > 0) {
        for (size_t i = 0; i < cap; i++) {
            size_t end = i + 1 == cap ? len : len * (i + 1) / cap;
            while (end < len && ((unsigned char)text[end] & 0xC0) == 0x80)
                end++;
            if (end < start)
                end = start;
            v[k] = strndup(text + start, end - start);
            k++;
            start = end;
        }
    } else {
        for (size_t i = 1; i <= len; i++) {
            if (i == len || text[i] == ' ') {
                v[k++] = strndup(text + start, i - start);
                start = i;
            }
        }
        if (k == 0)
            v[k++] = strdup("");
    }
    *out = v;
    return k;
}

static char *
sse_event(const struct opts *o, json_t *chunk, const char *raw)
{
    char *text = NULL;
    if (!raw && o->multiline) {
        text = json_dumps(chunk, JSON_INDENT(1) |
                                     (o->echo_headers == ECHO_SLASH
                                          ? JSON_ESCAPE_SLASH
                                          : 0));
        if (o->echo_headers == ECHO_U)
            text = u_escape(text);
    } else if (!raw) {
        text = dump_json(o, chunk);
    }
    const char *d = raw ? raw : text ? text : "{}";
    const char *nl = o->crlf ? "\r\n" : o->cr ? "\r" : "\n";
    size_t need = strlen(d) * 5 + 128; /* >= 2 bytes of d per line */
    char *s = malloc(need);
    if (s && o->multiline) {
        /* event and id fields, a comment, then one data line per line of
         * the pretty-printed JSON, alternating "data: " and "data:". */
        static long sse_id;
        size_t off = (size_t)snprintf(s, need, "event: message%sid: %ld%s"
                                               ": multi-line event%s",
                                      nl, ++sse_id, nl, nl);
        const char *p = d;
        int k = 0;
        for (;;) {
            const char *e = strchr(p, '\n');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            off += (size_t)snprintf(s + off, need - off, "data:%s%.*s%s",
                                    k++ % 2 ? "" : " ", (int)l, p, nl);
            if (!e)
                break;
            p = e + 1;
        }
        snprintf(s + off, need - off, "%s", nl);
    } else if (s) {
        snprintf(s, need, "%s%s%sdata: %s%s%s", o->comments ? ": ping" : "",
                 o->comments ? nl : "", o->comments ? nl : "", d, nl, nl);
    }
    free(text);
    json_decref(chunk);
    return s;
}

static json_t *
chunk_new(long id, const char *model, json_t *delta, const char *finish)
{
    char ids[48];
    snprintf(ids, sizeof(ids), "chatcmpl-fake-%ld", id);
    return json_pack("{s:s,s:s,s:i,s:s,s:[{s:i,s:o,s:o}]}", "id", ids,
                     "object", "chat.completion.chunk", "created", 1700000000,
                     "model", model, "choices", "index", 0, "delta", delta,
                     "finish_reason",
                     finish ? json_string(finish) : json_null());
}

/* ---- native modes: Anthropic Messages and Gemini generateContent ------- */

static const char *
native_err_type(int fmt, int status)
{
    if (fmt == FMT_ANTHROPIC)
        return status == 400   ? "invalid_request_error"
               : status == 401 ? "authentication_error"
               : status == 403 ? "permission_error"
               : status == 404 ? "not_found_error"
               : status == 413 ? "request_too_large"
               : status == 429 ? "rate_limit_error"
               : status == 529 ? "overloaded_error"
                               : "api_error";
    return status == 400   ? "INVALID_ARGUMENT"
           : status == 403 ? "PERMISSION_DENIED"
           : status == 404 ? "NOT_FOUND"
           : status == 429 ? "RESOURCE_EXHAUSTED"
           : status == 503 ? "UNAVAILABLE"
           : status == 504 ? "DEADLINE_EXCEEDED"
                           : "INTERNAL";
}

/* An error in the API's own shape. */
static void
send_native_error(struct evhttp_request *req, int fmt, int status,
                  int retry_after, const char *message)
{
    json_t *e = fmt == FMT_ANTHROPIC
                    ? json_pack("{s:s,s:{s:s,s:s},s:s}", "type", "error",
                                "error", "type",
                                native_err_type(fmt, status), "message",
                                message, "request_id", "req_fake")
                    : json_pack("{s:{s:i,s:s,s:s}}", "error", "code", status,
                                "message", message, "status",
                                native_err_type(fmt, status));
    char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    if (retry_after >= 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", retry_after);
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Retry-After", ra);
    }
    send_json(req, status, text ? text : "{}");
    free(text);
}

/* What the real APIs check that llmux's translation must get right:
 * returns 0, or an HTTP status with the reason in why. */
static int
native_check(struct evhttp_request *req, int fmt, json_t *body, char *why,
             size_t len)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    if (fmt == FMT_GEMINI) {
        if (!evhttp_find_header(in, "x-goog-api-key")) {
            snprintf(why, len, "Method doesn't allow unregistered callers "
                               "(no x-goog-api-key)");
            return 403;
        }
        json_t *c = json_object_get(body, "contents");
        if (!json_is_array(c) || !json_array_size(c)) {
            snprintf(why, len, "* GenerateContentRequest.contents: contents "
                               "is not specified");
            return 400;
        }
        size_t i;
        json_t *x;
        json_array_foreach(c, i, x) {
            const char *r = json_string_value(json_object_get(x, "role"));
            if (!r || (strcmp(r, "user") && strcmp(r, "model")) ||
                !json_array_size(json_object_get(x, "parts"))) {
                snprintf(why, len, "contents[%zu]: bad role or no parts", i);
                return 400;
            }
        }
        return 0;
    }
    if (!evhttp_find_header(in, "x-api-key")) {
        snprintf(why, len, "x-api-key header is required");
        return 401;
    }
    if (!evhttp_find_header(in, "anthropic-version")) {
        snprintf(why, len, "anthropic-version: header is required");
        return 400;
    }
    if (!json_is_integer(json_object_get(body, "max_tokens"))) {
        snprintf(why, len, "max_tokens: Field required");
        return 400;
    }
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs)) {
        snprintf(why, len, "messages: at least one message is required");
        return 400;
    }
    size_t i;
    json_t *m;
    json_t *prev_uses = NULL;
    json_array_foreach(msgs, i, m) {
        const char *r = json_string_value(json_object_get(m, "role"));
        const char *want = i % 2 ? "assistant" : "user";
        if (!r || strcmp(r, want)) {
            snprintf(why, len, "messages.%zu.role: roles must alternate "
                               "between user and assistant, starting "
                               "with user",
                     i);
            return 400;
        }
        json_t *content = json_object_get(m, "content");
        size_t k;
        json_t *b;
        json_array_foreach(content, k, b) {
            const char *t = json_string_value(json_object_get(b, "type"));
            if (t && !strcmp(t, "tool_result")) {
                const char *id =
                    json_string_value(json_object_get(b, "tool_use_id"));
                int found = 0;
                size_t q;
                json_t *u;
                json_array_foreach(prev_uses, q, u) {
                    const char *ut = json_string_value(json_object_get(u,
                                                                   "type"));
                    const char *uid = json_string_value(json_object_get(u,
                                                                    "id"));
                    if (ut && !strcmp(ut, "tool_use") && uid && id &&
                        !strcmp(uid, id))
                        found = 1;
                }
                if (!found) {
                    snprintf(why, len, "messages.%zu.content.%zu: "
                                       "unexpected tool_use_id found in "
                                       "tool_result blocks",
                             i, k);
                    return 400;
                }
            }
        }
        prev_uses = content;
    }
    return 0;
}

/* "event: NAME\ndata: JSON\n\n" (Anthropic), or a data-only event. */
static char *
sse_named(const struct opts *o, const char *name, json_t *data,
          const char *raw)
{
    char *text = raw ? NULL : json_dumps(data, JSON_COMPACT);
    json_decref(data);
    const char *d = raw ? raw : text ? text : "{}";
    const char *nl = o->crlf ? "\r\n" : o->cr ? "\r" : "\n";
    size_t need = strlen(d) + (name ? strlen(name) : 0) + 32;
    char *s = malloc(need);
    if (s && name)
        snprintf(s, need, "event: %s%sdata: %s%s%s", name, nl, d, nl, nl);
    else if (s)
        snprintf(s, need, "data: %s%s%s", d, nl, nl);
    free(text);
    return s;
}

static const char *
tool_args_of(const struct opts *o)
{
    return o->tool_args[0] ? o->tool_args : "{\"city\":\"Paris\"}";
}

struct nat_usage {
    long prompt, completion, cached, cache_write, thoughts;
};

static struct nat_usage
nat_usage(const struct opts *o, long words)
{
    struct nat_usage u;
    u.prompt = o->prompt_tokens >= 0 ? o->prompt_tokens : 9;
    u.completion = o->completion_tokens >= 0 ? o->completion_tokens : words;
    u.cached = o->cached;
    u.cache_write = o->cache_write;
    u.thoughts = o->thoughts;
    return u;
}

static json_t *
anth_usage(const struct nat_usage *u, int output_only)
{
    long in = u->prompt - u->cached - u->cache_write;
    if (output_only)
        return json_pack("{s:I}", "output_tokens",
                         (json_int_t)(u->completion + u->thoughts));
    return json_pack("{s:I,s:I,s:I,s:I}", "input_tokens",
                     (json_int_t)(in > 0 ? in : 0),
                     "cache_creation_input_tokens", (json_int_t)u->cache_write,
                     "cache_read_input_tokens", (json_int_t)u->cached,
                     "output_tokens",
                     (json_int_t)(u->completion + u->thoughts));
}

static json_t *
gem_usage(const struct nat_usage *u)
{
    json_t *m = json_pack("{s:I,s:I,s:I}", "promptTokenCount",
                          (json_int_t)u->prompt, "candidatesTokenCount",
                          (json_int_t)u->completion, "totalTokenCount",
                          (json_int_t)(u->prompt + u->completion +
                                       u->thoughts));
    if (m && u->cached)
        json_object_set_new(m, "cachedContentTokenCount",
                            json_integer(u->cached));
    if (m && u->thoughts)
        json_object_set_new(m, "thoughtsTokenCount",
                            json_integer(u->thoughts));
    return m;
}

static int
events_add(struct job *j, char *ev, size_t *cap)
{
    if (!ev)
        return -1;
    if (j->n_events + 1 >= *cap) {
        size_t nc = *cap * 2 + 8;
        char **ne = realloc(j->events, nc * sizeof(*ne));
        if (!ne) {
            free(ev);
            return -1;
        }
        j->events = ne;
        *cap = nc;
    }
    j->events[j->n_events++] = ev;
    return 0;
}

/* error_after=N: the events from N on give way to an error event. */
static int
anth_error_after(struct job *j, size_t *cap)
{
    const struct opts *o = &j->o;
    if (o->error_after < 0 || (size_t)o->error_after >= j->n_events)
        return 0;
    for (size_t i = (size_t)o->error_after; i < j->n_events; i++)
        free(j->events[i]);
    j->n_events = (size_t)o->error_after;
    return events_add(j, sse_named(o, "error", NULL,
                                   "{\"type\":\"error\",\"error\":{"
                                   "\"type\":\"overloaded_error\","
                                   "\"message\":\"Overloaded\"}}"),
                      cap);
}

/* odd: an answer that is valid JSON but that a parse and re-serialise
 * would change (key order, whitespace, "\u00e9" and "\/" escapes, 1.0,
 * 1e2, -0.0, a long real), with a thinking block and its
 * signature, a redacted_thinking block, and a block type and (stream) an
 * event type no client knows yet; a passthrough must hand it on byte for
 * byte.  The usage is the directives' (cached, cache_write, ...). */
static int
anth_odd(struct job *j, const char *model, const struct nat_usage *u,
         const char *mid)
{
    long in = u->prompt - u->cached - u->cache_write;
    long out = u->completion + u->thoughts;
    char mj[300];
    /* The model as the request had it (plain names only: else a
     * placeholder, never broken JSON). */
    snprintf(mj, sizeof(mj), "%s",
             strpbrk(model, "\"\\") || strlen(model) > 200 ? "odd" : model);
    if (in < 0)
        in = 0;
    if (!j->stream) {
        char b[4096];
        snprintf(b, sizeof(b),
                 "{ \"id\" : \"%s\",\n\t\"type\":\"message\", "
                 "\"role\":\"assistant\",\n"
                 " \"content\":[\n"
                 "  {\"type\":\"thinking\",\"thinking\":\"Caf\\u00e9 \\/ "
                 "r\\u00e9sum\\u00e9 \\ud83d\\ude00 \\\"q\\\"\","
                 "\"signature\":\"EqQBCkYIARgCKkD+/0a1b2c3d4e5f==\"},\n"
                 "  {\"type\":\"redacted_thinking\",\"data\":"
                 "\"RWFybHkgYmlyZA==\"},\n"
                 "  {\"type\":\"text\",\"text\":\"Hello\\u0021 caf\xc3\xa9" "\","
                 "\"citations\":null,\"x\":{\"n\":1.0,\"m\":1e2,\"z\":-0.0,"
                 "\"big\":12345678901234567890.5e-3}},\n"
                 "  {\"type\":\"future_block_v9\",\"payload\":{\"z\":1,"
                 "\"a\":[1.50,2E+3,true,false,null]}}\n"
                 " ],\n"
                 " \"stop_reason\":\"end_turn\",  \"stop_sequence\":null,\n"
                 " \"model\" :  \"%s\",\n"
                 " \"usage\":{\"output_tokens\":%ld, \"input_tokens\":%ld,"
                 "\"cache_creation_input_tokens\":%ld,"
                 "\"cache_read_input_tokens\":%ld,\"service_tier\":"
                 "\"standard\"}\n}\n",
                 mid, mj, out, in, u->cache_write, u->cached);
        j->body = strdup(b);
        return j->body ? 0 : -1;
    }
    char ev[16][1024];
    const char *name[16];
    int n = 0;
#define ODD(nm, ...)                                                         \
    (name[n] = (nm), snprintf(ev[n], sizeof(ev[n]), __VA_ARGS__), n++)
    ODD("message_start",
        "{\"type\": \"message_start\", \"message\": {\"id\":\"%s\", "
        "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],"
        "\"model\":  \"%s\" ,\"stop_reason\":null,\"stop_sequence\":null,"
        "\"usage\":{\"input_tokens\":%ld,\"cache_creation_input_tokens\":%ld,"
        "\"cache_read_input_tokens\":%ld,\"output_tokens\":1}}}",
        mid, mj, in, u->cache_write, u->cached);
    ODD("ping", "{\"type\": \"ping\"}");
    ODD("content_block_start",
        "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
        "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}");
    ODD("content_block_delta",
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
        "\"thinking_delta\",\"thinking\":\"Caf\\u00e9 \\/ 1.0\"}}");
    ODD("content_block_delta",
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
        "\"signature_delta\",\"signature\":\"EqQBCkYIARgCKkD+/0a1b2c3d4e5f==\"}}");
    ODD("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0 }");
    ODD("content_block_start",
        "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":"
        "{\"type\":\"redacted_thinking\",\"data\":\"RWFybHkgYmlyZA==\"}}");
    ODD("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":1}");
    ODD("future_event_v9", "{\"type\":\"future_event_v9\",\"n\":1e2,\"x\":1.0}");
    ODD("content_block_start",
        "{\"index\":2,\"type\":\"content_block_start\",\"content_block\":"
        "{\"type\":\"text\",\"text\":\"\"}}");
    ODD("content_block_delta",
        "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":"
        "\"text_delta\",\"text\":\"Hello\\u0021 caf\\u00e9\"}}");
    ODD("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":2}");
    ODD("content_block_start",
        "{\"type\":\"content_block_start\",\"index\":3,\"content_block\":"
        "{\"type\":\"future_block_v9\",\"payload\":{\"z\":1,\"a\":[1.50,2E+3]}}}");
    ODD("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":3}");
    ODD("message_delta",
        "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\","
        "\"stop_sequence\":null},\"usage\":{\"output_tokens\":%ld}}",
        out);
    ODD("message_stop", "{\"type\":\"message_stop\"   }");
#undef ODD
    size_t cap = 0;
    int rc = 0;
    for (int k = 0; k < n; k++)
        rc |= events_add(j, sse_named(&j->o, name[k], NULL, ev[k]), &cap);
    return rc || anth_error_after(j, &cap) ? -1 : 0;
}

/* The Anthropic answer (non-stream) or events. */
static int
anth_build(struct job *j, const char *model, const char *text, char **pieces,
           size_t np, long words)
{
    const struct opts *o = &j->o;
    struct nat_usage u = nat_usage(o, words);
    char mid[48], tid[48];
    snprintf(mid, sizeof(mid), "msg_fake_%ld", j->id);
    snprintf(tid, sizeof(tid), "toolu_fake_%ld", j->id);
    if (o->odd)
        return anth_odd(j, model, &u, mid);
    const char *stop = o->tool[0] ? "tool_use" : "end_turn";
    if (!j->stream) {
        json_t *content = json_array();
        if (o->thoughts)
            json_array_append_new(content,
                                  json_pack("{s:s,s:s,s:s}", "type",
                                            "thinking", "thinking",
                                            "Thinking it over.", "signature",
                                            "c2lnbmF0dXJl"));
        json_array_append_new(content, json_pack("{s:s,s:s}", "type", "text",
                                                 "text", text));
        if (o->tool[0]) {
            json_t *in = json_loads(tool_args_of(o), 0, NULL);
            json_array_append_new(content,
                                  json_pack("{s:s,s:s,s:s,s:o}", "type",
                                            "tool_use", "id", tid, "name",
                                            o->tool, "input",
                                            in ? in : json_object()));
        }
        json_t *r = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:n}", "id", mid,
                              "type", "message", "role", "assistant",
                              "model", model, "content", content,
                              "stop_reason", stop, "stop_sequence");
        if (r && !o->no_usage)
            json_object_set_new(r, "usage", anth_usage(&u, 0));
        j->body = r ? json_dumps(r, JSON_COMPACT) : NULL;
        json_decref(r);
        if (j->body && o->malformed)
            j->body[strlen(j->body) / 2] = '\0';
        return j->body ? 0 : -1;
    }
    size_t cap = 0;
    int rc = 0;
    json_t *start = json_pack(
        "{s:s,s:{s:s,s:s,s:s,s:[],s:s,s:n,s:n}}", "type", "message_start",
        "message", "id", mid, "type", "message", "role", "assistant",
        "content", "model", model, "stop_reason", "stop_sequence");
    if (start && !o->no_usage) {
        struct nat_usage u1 = u;
        u1.completion = 1;
        u1.thoughts = 0;
        json_object_set_new(json_object_get(start, "message"), "usage",
                            anth_usage(&u1, 0));
    }
    rc |= events_add(j, sse_named(o, "message_start", start, NULL), &cap);
    int bi = 0;
    if (o->thoughts) {
        rc |= events_add(j, sse_named(o, "content_block_start",
                                      json_pack("{s:s,s:i,s:{s:s,s:s}}",
                                                "type", "content_block_start",
                                                "index", bi, "content_block",
                                                "type", "thinking",
                                                "thinking", ""),
                                      NULL),
                         &cap);
        rc |= events_add(j, sse_named(o, "content_block_delta",
                                      json_pack("{s:s,s:i,s:{s:s,s:s}}",
                                                "type", "content_block_delta",
                                                "index", bi, "delta", "type",
                                                "thinking_delta", "thinking",
                                                "Thinking it over."),
                                      NULL),
                         &cap);
        rc |= events_add(j, sse_named(o, "content_block_delta",
                                      json_pack("{s:s,s:i,s:{s:s,s:s}}",
                                                "type", "content_block_delta",
                                                "index", bi, "delta", "type",
                                                "signature_delta", "signature",
                                                "c2lnbmF0dXJl"),
                                      NULL),
                         &cap);
        rc |= events_add(j, sse_named(o, "content_block_stop",
                                      json_pack("{s:s,s:i}", "type",
                                                "content_block_stop", "index",
                                                bi),
                                      NULL),
                         &cap);
        bi++;
    }
    rc |= events_add(j, sse_named(o, "content_block_start",
                                  json_pack("{s:s,s:i,s:{s:s,s:s}}", "type",
                                            "content_block_start", "index",
                                            bi, "content_block", "type",
                                            "text", "text", ""),
                                  NULL),
                     &cap);
    rc |= events_add(j, sse_named(o, "ping", NULL, "{\"type\": \"ping\"}"),
                     &cap);
    for (size_t i = 0; i < np; i++) {
        if (i == 0 && o->malformed) {
            rc |= events_add(j, sse_named(o, "content_block_delta", NULL,
                                          "{\"type\":\"content_block_delta\","
                                          "\"index\":"),
                             &cap);
            continue;
        }
        rc |= events_add(j, sse_named(o, "content_block_delta",
                                      json_pack("{s:s,s:i,s:{s:s,s:s}}",
                                                "type", "content_block_delta",
                                                "index", bi, "delta", "type",
                                                "text_delta", "text",
                                                pieces[i]),
                                      NULL),
                         &cap);
    }
    rc |= events_add(j, sse_named(o, "content_block_stop",
                                  json_pack("{s:s,s:i}", "type",
                                            "content_block_stop", "index", bi),
                                  NULL),
                     &cap);
    if (o->tool[0]) {
        bi++;
        rc |= events_add(j, sse_named(o, "content_block_start",
                                      json_pack("{s:s,s:i,s:{s:s,s:s,s:s,s:{}}}",
                                                "type", "content_block_start",
                                                "index", bi, "content_block",
                                                "type", "tool_use", "id", tid,
                                                "name", o->tool, "input"),
                                      NULL),
                         &cap);
        const char *a = tool_args_of(o);
        size_t al = strlen(a);
        for (int k = 0; k < 3; k++) {
            size_t s0 = al * (size_t)k / 3, s1 = al * (size_t)(k + 1) / 3;
            char part[512];
            snprintf(part, sizeof(part), "%.*s", (int)(s1 - s0), a + s0);
            rc |= events_add(j, sse_named(o, "content_block_delta",
                                          json_pack("{s:s,s:i,s:{s:s,s:s}}",
                                                    "type",
                                                    "content_block_delta",
                                                    "index", bi, "delta",
                                                    "type", "input_json_delta",
                                                    "partial_json", part),
                                          NULL),
                             &cap);
        }
        rc |= events_add(j, sse_named(o, "content_block_stop",
                                      json_pack("{s:s,s:i}", "type",
                                                "content_block_stop", "index",
                                                bi),
                                      NULL),
                         &cap);
    }
    json_t *md = json_pack("{s:s,s:{s:s,s:n}}", "type", "message_delta",
                           "delta", "stop_reason", stop, "stop_sequence");
    if (md && !o->no_usage)
        json_object_set_new(md, "usage", anth_usage(&u, 1));
    rc |= events_add(j, sse_named(o, "message_delta", md, NULL), &cap);
    rc |= events_add(j, sse_named(o, "message_stop", NULL,
                                  "{\"type\":\"message_stop\"}"),
                     &cap);
    if (!rc)
        rc = anth_error_after(j, &cap);
    return rc ? -1 : 0;
}

/* Gemini's logprobsResult for text: a chosen candidate a word (its
 * leading space with it), logProbability -0.25, -0.5, ... by position,
 * and gem_top top candidates each (the chosen one first, then made-up
 * "alt" tokens less likely). */
static json_t *
gem_logprobs(const struct job *j, const char *text)
{
    json_t *chosen = json_array(), *top = json_array();
    int k = 0;
    for (const char *p = text; p && *p; k++) {
        const char *e = p + 1;
        while (*e && *e != ' ')
            e++;
        double lp = -0.25 * (k % 8 + 1);
        json_t *c = json_pack("{s:s%,s:i,s:f}", "token", p, (size_t)(e - p),
                              "tokenId", 100 + k, "logProbability", lp);
        json_t *alts = json_array();
        for (int a = 0; a < j->gem_top; a++)
            json_array_append_new(
                alts, a == 0 ? json_deep_copy(c)
                             : json_pack("{s:s,s:i,s:f}", "token", " alt",
                                         "tokenId", 900 + a,
                                         "logProbability", lp - 1.0 * a));
        json_array_append_new(chosen, c);
        json_array_append_new(top, json_pack("{s:o}", "candidates", alts));
        p = e;
    }
    return json_pack("{s:o,s:o}", "topCandidates", top, "chosenCandidates",
                     chosen);
}

static json_t *
gem_chunk(const struct job *j, const char *model, json_t *parts,
          const char *finish, json_t *usage, const char *lp_text)
{
    char rid[48];
    snprintf(rid, sizeof(rid), "fake-resp-%ld", j->id);
    json_t *cand = json_pack("{s:{s:s,s:o},s:i}", "content", "role", "model",
                             "parts", parts, "index", 0);
    if (cand && finish)
        json_object_set_new(cand, "finishReason", json_string(finish));
    if (cand && lp_text && j->gem_lp)
        json_object_set_new(cand, "logprobsResult", gem_logprobs(j, lp_text));
    json_t *c = json_pack("{s:[o],s:s,s:s}", "candidates", cand,
                          "modelVersion", model, "responseId", rid);
    if (c && usage)
        json_object_set_new(c, "usageMetadata", usage);
    else
        json_decref(usage);
    return c;
}

static int
gem_build(struct job *j, const char *model, const char *text, char **pieces,
          size_t np, long words)
{
    const struct opts *o = &j->o;
    struct nat_usage u = nat_usage(o, words);
    json_t *fc = NULL;
    if (o->tool[0]) {
        json_t *args = json_loads(tool_args_of(o), 0, NULL);
        fc = json_pack("{s:{s:s,s:o}}", "functionCall", "name", o->tool,
                       "args", args ? args : json_object());
    }
    if (!j->stream) {
        json_t *parts = json_array();
        if (o->thoughts)
            json_array_append_new(parts, json_pack("{s:s,s:b}", "text",
                                                   "Thinking it over.",
                                                   "thought", 1));
        json_array_append_new(parts, json_pack("{s:s}", "text", text));
        if (fc)
            json_array_append_new(parts, fc);
        json_t *r = gem_chunk(j, model, parts, "STOP",
                              o->no_usage ? NULL : gem_usage(&u), text);
        j->body = r ? json_dumps(r, JSON_COMPACT) : NULL;
        json_decref(r);
        if (j->body && o->malformed)
            j->body[strlen(j->body) / 2] = '\0';
        return j->body ? 0 : -1;
    }
    size_t cap = 0;
    int rc = 0;
    if (o->thoughts)
        rc |= events_add(j, sse_named(o, NULL,
                                      gem_chunk(j, model,
                                                json_pack("[{s:s,s:b}]",
                                                          "text",
                                                          "Thinking it over.",
                                                          "thought", 1),
                                                NULL, NULL, NULL),
                                      NULL),
                         &cap);
    for (size_t i = 0; i < np; i++) {
        if (i == 0 && o->malformed) {
            rc |= events_add(j, sse_named(o, NULL, NULL,
                                          "{\"candidates\":[{\"content\":"),
                             &cap);
            continue;
        }
        int last = i + 1 == np && !fc;
        /* Gemini sends usage on every chunk; the last one is final. */
        struct nat_usage ui = u;
        if (!last)
            ui.completion = (long)i + 1 < u.completion ? (long)i + 1
                                                       : u.completion;
        rc |= events_add(j, sse_named(o, NULL,
                                      gem_chunk(j, model,
                                                json_pack("[{s:s}]", "text",
                                                          pieces[i]),
                                                last ? "STOP" : NULL,
                                                o->no_usage ? NULL
                                                            : gem_usage(&ui),
                                                pieces[i]),
                                      NULL),
                         &cap);
    }
    if (fc)
        rc |= events_add(j, sse_named(o, NULL,
                                      gem_chunk(j, model, json_pack("[o]", fc),
                                                "STOP",
                                                o->no_usage ? NULL
                                                            : gem_usage(&u),
                                                NULL),
                                      NULL),
                         &cap);
    if (!rc && o->error_after >= 0 && (size_t)o->error_after < j->n_events) {
        for (size_t i = (size_t)o->error_after; i < j->n_events; i++)
            free(j->events[i]);
        j->n_events = (size_t)o->error_after;
        rc |= events_add(j, sse_named(o, NULL, NULL,
                                      "{\"error\":{\"code\":503,\"message\":"
                                      "\"The model is overloaded.\","
                                      "\"status\":\"UNAVAILABLE\"}}"),
                         &cap);
    }
    return rc ? -1 : 0;
}

static int
native_build(struct job *j, const char *model, const char *text,
             char **pieces, size_t np)
{
    long words = 1;
    for (const char *p = text; *p; p++)
        if (*p == ' ')
            words++;
    if (j->stream)
        words = (long)np;
    return j->fmt == FMT_ANTHROPIC ? anth_build(j, model, text, pieces, np,
                                                words)
                                   : gem_build(j, model, text, pieces, np,
                                               words);
}

/* Builds the answer (body or events) for j from the request. */
/* OpenAI format, tool=NAME: one call of it (see the top). */
static int
oa_tool_build(struct job *j, const char *model, const char *ids,
              int include_usage)
{
    const struct opts *o = &j->o;
    const char *args = tool_args_of(o);
    char cid[64];
    snprintf(cid, sizeof(cid), "call_fake_%ld", j->id);
    if (!j->stream) {
        json_t *r = json_pack(
            "{s:s,s:s,s:i,s:s,s:[{s:i,s:{s:s,s:n,s:[{s:s,s:s,s:{s:s,s:s}}]},"
            "s:n,s:s}]}",
            "id", ids, "object", "chat.completion", "created", 1700000000,
            "model", model, "choices", "index", 0, "message", "role",
            "assistant", "content", "tool_calls", "id", cid, "type",
            "function", "function", "name", o->tool, "arguments", args,
            "logprobs", "finish_reason", "tool_calls");
        if (r && !o->no_usage)
            json_object_set_new(r, "usage", usage_json(o, 5));
        j->body = r ? dump_json(o, r) : NULL;
        json_decref(r);
        return j->body ? 0 : -1;
    }
    j->events = calloc(8, sizeof(char *));
    if (!j->events)
        return -1;
    j->events[j->n_events++] = sse_event(
        o,
        chunk_new(j->id, model,
                  json_pack("{s:s,s:n,s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "role",
                            "assistant", "content", "tool_calls", "index", 0,
                            "id", cid, "type", "function", "function", "name",
                            o->tool, "arguments", ""),
                  NULL),
        NULL);
    size_t n = strlen(args), half = n / 2 + 1; /* two argument deltas */
    for (size_t off = 0; off < n; off += half) {
        size_t l = n - off < half ? n - off : half;
        j->events[j->n_events++] = sse_event(
            o,
            chunk_new(j->id, model,
                      json_pack("{s:[{s:i,s:{s:s%}}]}", "tool_calls", "index",
                                0, "function", "arguments", args + off, l),
                      NULL),
            NULL);
    }
    j->events[j->n_events++] =
        sse_event(o, chunk_new(j->id, model, json_object(), "tool_calls"),
                  NULL);
    if (include_usage && !o->no_usage) {
        json_t *u = json_pack("{s:s,s:s,s:i,s:s,s:[]}", "id", ids, "object",
                              "chat.completion.chunk", "created", 1700000000,
                              "model", model, "choices");
        if (u)
            json_object_set_new(u, "usage", usage_json(o, 5));
        j->events[j->n_events++] = sse_event(o, u, NULL);
    }
    j->events[j->n_events++] = sse_event(o, NULL, "[DONE]");
    for (size_t i = 0; i < j->n_events; i++)
        if (!j->events[i])
            return -1;
    return 0;
}

static int
job_build(struct job *j, json_t *body, const char *model, int include_usage)
{
    const struct opts *o = &j->o;
    long id;
    pthread_mutex_lock(&st_mu);
    id = ++st_ids;
    j->id = id;
    pthread_mutex_unlock(&st_mu);
    char *big = NULL; /* owned text: big=N, or the generated tokens */
    const char *text = "Hello from fake provider";
    if (ends_with_tool_result(body))
        j->o.tool[0] = '\0'; /* a model answers a tool's result in words */
    if (o->big > 0) {
        big = malloc((size_t)o->big + 1);
        if (!big)
            return -1;
        memset(big, 'x', (size_t)o->big);
        big[o->big] = '\0';
        text = big;
    } else if (j->echo) {
        text = j->echo;
    } else if (o->has_content) {
        text = o->content;
    } else if (o->echo) {
        const char *t = last_user_text(body);
        text = t ? t : "";
    } else if (o->chunks > 0) {
        size_t cap = (size_t)o->chunks * 12 + 1, used = 0;
        big = malloc(cap);
        if (!big)
            return -1;
        big[0] = '\0';
        for (int i = 1; i <= o->chunks && used + 13 < cap; i++)
            used += (size_t)snprintf(big + used, cap - used, "%stok%d",
                                     i > 1 ? " " : "", i);
        text = big;
    }
    char **pieces = NULL;
    size_t np = 0;
    if (j->stream) {
        int n = o->chunks;
        if (n > 0 && !o->has_content && !o->echo && !j->echo &&
            o->big <= 0)
            n = 0; /* generated words: already one per chunk */
        np = split_text(text, n, &pieces);
        if (!pieces) {
            free(big);
            return -1;
        }
    }
    if (j->fmt != FMT_OPENAI) {
        int rc = native_build(j, model, text, pieces, np);
        for (size_t i = 0; i < np; i++)
            free(pieces[i]);
        free(pieces);
        free(big);
        return rc;
    }
    char ids[48];
    snprintf(ids, sizeof(ids), "chatcmpl-fake-%ld", id);
    if (o->tool[0]) { /* cleared above after a tool result */
        for (size_t i = 0; i < np; i++)
            free(pieces[i]);
        free(pieces);
        free(big);
        return oa_tool_build(j, model, ids, include_usage);
    }
    if (!j->stream) {
        long words = 1;
        for (const char *p = text; *p; p++)
            if (*p == ' ')
                words++;
        json_t *r = json_pack(
            "{s:s,s:s,s:i,s:s,s:[{s:i,s:{s:s,s:s},s:n,s:s}]}", "id", ids,
            "object", "chat.completion", "created", 1700000000, "model", model,
            "choices", "index", 0, "message", "role", "assistant", "content",
            text, "logprobs", "finish_reason", "stop");
        if (r && !o->no_usage)
            json_object_set_new(r, "usage", usage_json(o, words));
        j->body = r ? dump_json(o, r) : NULL;
        json_decref(r);
        free(big);
        if (!j->body)
            return -1;
        if (o->malformed) {
            /* Cut it in the middle: valid prefix, broken JSON. */
            size_t l = strlen(j->body);
            j->body[l / 2] = '\0';
        }
        return 0;
    }
    size_t cap = np + 4;
    j->events = calloc(cap, sizeof(char *));
    if (!j->events)
        goto fail;
    j->events[j->n_events++] = sse_event(
        o,
        chunk_new(id, model, json_pack("{s:s,s:s}", "role", "assistant",
                                       "content", ""),
                  NULL),
        NULL);
    for (size_t i = 0; i < np; i++) {
        if (i == 0 && o->malformed)
            j->events[j->n_events++] =
                sse_event(o, NULL, "{\"id\":\"broken\",\"choices\":[{");
        else
            j->events[j->n_events++] = sse_event(
                o,
                chunk_new(id, model, json_pack("{s:s}", "content", pieces[i]),
                          NULL),
                NULL);
    }
    j->events[j->n_events++] =
        sse_event(o, chunk_new(id, model, json_object(), "stop"), NULL);
    if (include_usage && !o->no_usage) {
        json_t *u = json_pack("{s:s,s:s,s:i,s:s,s:[]}", "id", ids, "object",
                              "chat.completion.chunk", "created", 1700000000,
                              "model", model, "choices");
        if (u)
            json_object_set_new(u, "usage", usage_json(o, (long)np));
        j->events[j->n_events++] = sse_event(o, u, NULL);
    }
    j->events[j->n_events++] = sse_event(o, NULL, "[DONE]");
    if (o->error_after >= 0 && (size_t)o->error_after < j->n_events) {
        /* An OpenAI-style error object in place of the rest, then the
         * end of the response without [DONE]. */
        for (size_t i = (size_t)o->error_after; i < j->n_events; i++)
            free(j->events[i]);
        j->n_events = (size_t)o->error_after;
        j->events[j->n_events++] = sse_event(
            o, NULL,
            "{\"error\":{\"message\":\"fake mid-stream error\","
            "\"type\":\"server_error\",\"param\":null,\"code\":null}}");
    }
    for (size_t i = 0; i < j->n_events; i++)
        if (!j->events[i])
            goto fail;
    for (size_t i = 0; i < np; i++)
        free(pieces[i]);
    free(pieces);
    free(big);
    return 0;
fail:
    for (size_t i = 0; i < np; i++)
        free(pieces[i]);
    free(pieces);
    free(big);
    return -1;
}

static void job_step(evutil_socket_t fd, short what, void *arg);

static void
job_wait(struct job *j, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(j->timer, &tv);
}

/* Closes j's connection with an RST, without a (further) answer. */
static void
job_kill_connection(struct job *j)
{
    struct evhttp_connection *evcon =
        j->req ? evhttp_request_get_connection(j->req) : NULL;
    if (evcon) {
        struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
        evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
        if (fd >= 0) {
            struct linger l = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        }
        evhttp_connection_free(evcon); /* frees j->req too */
    } else if (j->req) {
        evhttp_request_free(j->req); /* orphaned by a client close */
    }
    j->req = NULL;
}

static void
drop_flushed_cb(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    struct job *j = arg;
    /* Close from a fresh event, not from inside evhttp's write path. */
    j->stage = J_DROP;
    job_wait(j, 0);
}

static void
job_step(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct job *j = arg;
    struct evhttp_request *req = j->req;
    if (!req)
        goto done;
    if (!evhttp_request_get_connection(req)) {
        /* The client went away; evhttp handed the request back to us. */
        evhttp_request_free(req);
        j->req = NULL;
        goto done;
    }
    switch (j->stage) {
    case J_BEGIN:
        if (j->o.reset) {
            job_kill_connection(j);
            goto done;
        }
        if (j->o.rl_headers) {
            struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
            char rid[64];
            snprintf(rid, sizeof(rid), "req_fake_%ld", j->id);
            evhttp_add_header(oh, "x-ratelimit-limit-requests", "500");
            evhttp_add_header(oh, "x-ratelimit-remaining-requests", "499");
            evhttp_add_header(oh, "x-ratelimit-reset-requests", "120ms");
            evhttp_add_header(oh, "x-ratelimit-limit-tokens", "30000");
            evhttp_add_header(oh, "x-ratelimit-remaining-tokens", "29000");
            evhttp_add_header(oh, "x-request-id", rid);
        }
        if (j->o.echo_headers) {
            const char *az = evhttp_find_header(
                evhttp_request_get_input_headers(req), "Authorization");
            if (az)
                evhttp_add_header(evhttp_request_get_output_headers(req),
                                  "x-ratelimit-echo", az);
        }
        if (j->o.status && j->o.status != 200) {
            char msg[300];
            if (j->echo) {
                if (j->o.retry_after_http >= 0)
                    add_retry_after_http(req, j->o.retry_after_http);
                send_error_opts(req, &j->o, j->o.status, j->o.retry_after,
                                j->echo);
                j->req = NULL;
                goto done;
            }
            if (j->o.message[0])
                snprintf(msg, sizeof(msg), "%s", j->o.message);
            else
                snprintf(msg, sizeof(msg), "fake error: status %d",
                         j->o.status);
            if (j->o.retry_after_http >= 0)
                add_retry_after_http(req, j->o.retry_after_http);
            if (j->fmt != FMT_OPENAI)
                send_native_error(req, j->fmt, j->o.status, j->o.retry_after,
                                  msg);
            else
                send_error(req, j->o.status, j->o.retry_after, msg);
            j->req = NULL;
            goto done;
        }
        if (j->o.retry_after >= 0) {
            char ra[16];
            snprintf(ra, sizeof(ra), "%d", j->o.retry_after);
            evhttp_add_header(evhttp_request_get_output_headers(req),
                              "Retry-After", ra);
        }
        if (j->o.headers_then_hang) {
            add_common_headers(req, j->stream ? "text/event-stream"
                                              : "application/json");
            evhttp_send_reply_start(req, 200, "OK");
            stats_count_status(200);
            j->stage = J_HANG;
            job_wait(j, j->o.hang_ms);
            return;
        }
        if (!j->stream) {
            if (!j->o.slow_first_byte_ms) {
                send_json(req, 200, j->body);
                stats_completed();
                j->req = NULL;
                goto done;
            }
            add_common_headers(req, "application/json");
            evhttp_send_reply_start(req, 200, "OK");
            stats_count_status(200);
            j->stage = J_BODY;
            job_wait(j, j->o.slow_first_byte_ms);
            return;
        }
        add_common_headers(req, "text/event-stream");
        evhttp_add_header(evhttp_request_get_output_headers(req),
                          "Cache-Control", "no-cache");
        evhttp_send_reply_start(req, 200, "OK");
        stats_count_status(200);
        j->stage = J_EVENTS;
        if (j->o.slow_first_byte_ms) {
            job_wait(j, j->o.slow_first_byte_ms);
            return;
        }
        /* fall through */
    case J_EVENTS:
        if (j->o.drop_after == 0) {
            /* Nothing to flush but the headers: give them a moment. */
            j->stage = J_DROP;
            job_wait(j, 20);
            return;
        }
        while (j->next < j->n_events) {
            int last = j->o.drop_after > 0 &&
                       j->next + 1 >= (size_t)j->o.drop_after;
            struct evbuffer *b = evbuffer_new();
            if (b) {
                evbuffer_add(b, j->events[j->next],
                             strlen(j->events[j->next]));
                /* The drop waits until this event left our buffer, so
                 * the client surely gets N events before the close. */
                evhttp_send_reply_chunk_with_cb(
                    req, b, last ? drop_flushed_cb : NULL, last ? j : NULL);
                evbuffer_free(b);
            }
            j->next++;
            if (last)
                return;
            if (j->o.chunk_delay_ms && j->next < j->n_events) {
                job_wait(j, j->o.chunk_delay_ms);
                return;
            }
        }
        evhttp_send_reply_end(req);
        stats_completed();
        j->req = NULL;
        goto done;
    case J_BODY: {
        struct evbuffer *b = evbuffer_new();
        if (b) {
            evbuffer_add(b, j->body, strlen(j->body));
            evhttp_send_reply_chunk(req, b);
            evbuffer_free(b);
        }
        evhttp_send_reply_end(req);
        stats_completed();
        j->req = NULL;
        goto done;
    }
    case J_HANG:
        evhttp_send_reply_end(req);
        j->req = NULL;
        goto done;
    case J_DROP:
        job_kill_connection(j);
        goto done;
    }
done:
    job_free(j);
}

static void
record_last(struct evhttp_request *req, const char *path, const char *model,
            json_t *body, const char *raw, size_t raw_len)
{
    json_t *h = json_object();
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    for (struct evkeyval *kv = in->tqh_first; kv; kv = kv->next.tqe_next) {
        char lower[128];
        size_t n = strlen(kv->key);
        if (n >= sizeof(lower))
            continue;
        for (size_t i = 0; i <= n; i++)
            lower[i] = (char)(kv->key[i] >= 'A' && kv->key[i] <= 'Z'
                                  ? kv->key[i] + 32
                                  : kv->key[i]);
        json_object_set_new(h, lower, json_string(kv->value));
    }
    json_t *last = json_pack("{s:s,s:s,s:o}", "path", path, "model", model,
                             "headers", h);
    /* Shared, not copied: jansson's reference counts are atomic, and the
     * object is only read from now on. */
    if (last && raw_len <= FP_LAST_BODY_MAX) {
        json_object_set(last, "body", body);
        /* The exact bytes (a JSON string holds them when they are UTF-8,
         * which a JSON body is). */
        json_object_set_new(last, "raw", json_stringn(raw, raw_len));
    }
    pthread_mutex_lock(&st_mu);
    json_decref(st_last);
    st_last = last;
    pthread_mutex_unlock(&st_mu);
}

/* The answer's exact bytes as "answer" in the last request's record
 * (the body, or the stream's events one after the other), up to
 * FP_LAST_BODY_MAX. */
static void
record_answer_text(const char *t, size_t n)
{
    json_t *a = n <= FP_LAST_BODY_MAX ? json_stringn(t, n) : NULL;
    pthread_mutex_lock(&st_mu);
    if (st_last && a)
        json_object_set(st_last, "answer", a);
    pthread_mutex_unlock(&st_mu);
    json_decref(a);
}

static void
record_answer(const struct job *j)
{
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return;
    if (j->body)
        evbuffer_add(b, j->body, strlen(j->body));
    for (size_t i = 0; i < j->n_events; i++)
        evbuffer_add(b, j->events[i], strlen(j->events[i]));
    record_answer_text((const char *)evbuffer_pullup(b, -1),
                       evbuffer_get_length(b));
    evbuffer_free(b);
}

static void
handle_chat(struct worker *w, struct evhttp_request *req, const char *path,
            const char *path_directives, enum fmt fmt, const char *path_model,
            int path_stream)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    char *raw = malloc(len + 1);
    if (!raw) {
        send_error(req, 500, -1, "fake: out of memory");
        return;
    }
    evbuffer_copyout(in, raw, len);
    raw[len] = '\0';
    json_error_t je;
    json_t *body = json_loadb(raw, len, 0, &je);
    if (!json_is_object(body)) {
        free(raw);
        json_decref(body);
        send_error(req, 400, -1, "fake: request body is not a JSON object");
        return;
    }
    json_t *m = json_object_get(body, "model");
    const char *model = json_is_string(m) ? json_string_value(m) : "";
    int stream = json_is_true(json_object_get(body, "stream"));
    if (fmt == FMT_GEMINI) {
        model = path_model;
        stream = path_stream;
    }
    if (fmt != FMT_OPENAI) {
        char why[256];
        int st = native_check(req, fmt, body, why, sizeof(why));
        if (st) {
            pthread_mutex_lock(&st_mu);
            st_requests++;
            count_in(st_by_path, path);
            pthread_mutex_unlock(&st_mu);
            record_last(req, path, model, body, raw, len);
            free(raw);
            json_decref(body);
            send_native_error(req, fmt, st, -1, why);
            return;
        }
    }
    json_t *so = json_object_get(body, "stream_options");
    int include_usage = json_is_true(json_object_get(so, "include_usage"));

    struct job *j = calloc(1, sizeof(*j));
    if (!j) {
        free(raw);
        json_decref(body);
        send_error(req, 500, -1, "fake: out of memory");
        return;
    }
    j->w = w;
    j->req = req;
    j->stream = stream;
    if (fmt == FMT_GEMINI) {
        const json_t *gc = json_object_get(body, "generationConfig");
        j->gem_lp = json_is_true(json_object_get(gc, "responseLogprobs"));
        j->gem_top = clampi((long)json_integer_value(
                                json_object_get(gc, "logprobs")),
                            0, 20);
    }
    j->fmt = fmt;
    opts_default(&j->o);
    if (path_directives)
        opts_parse(&j->o, path_directives, strlen(path_directives));
    const char *hx =
        evhttp_find_header(evhttp_request_get_input_headers(req), "X-Fake");
    if (hx)
        opts_parse(&j->o, hx, strlen(hx));
    const char *ut = last_user_text(body);
    if (ut && strncmp(ut, "fake:", 5) == 0)
        opts_parse(&j->o, ut + 5, strlen(ut + 5));
    pthread_mutex_lock(&st_mu);
    st_requests++;
    if (stream)
        st_streams++;
    count_in(st_by_model, model);
    count_in(st_by_path, path);
    if (j->o.tag[0])
        count_in(st_by_tag, j->o.tag);
    pthread_mutex_unlock(&st_mu);
    record_last(req, path, model, body, raw, len);
    if (j->o.echo_headers)
        j->echo = headers_text(req, j->o.echo_headers);
    j->nextj = w->jobs;
    if (w->jobs)
        w->jobs->prev = j;
    w->jobs = j;
    j->timer = evtimer_new(w->base, job_step, j);
    int ok = j->timer && job_build(j, body, model, include_usage) == 0;
    if (ok)
        record_answer(j);
    json_decref(body);
    free(raw);
    if (!ok) {
        job_free(j);
        send_error(req, 500, -1, "fake: could not build the answer");
        return;
    }
    j->stage = J_BEGIN;
    if (j->o.delay_ms || j->o.reset)
        job_wait(j, j->o.delay_ms); /* reset: from a fresh event too */
    else
        job_step(-1, 0, j);
}

/* ---- /v1/embeddings and /v1/completions (OpenAI only) ------------------ */

#define EMB_DIM 8

static uint32_t
fnv1a(const char *s, size_t n, uint32_t h)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* One input's vector: each component from the hash, in [-0.5, 0.5]. */
static json_t *
emb_vector(const json_t *in, int dim, int base64)
{
    char *t = json_dumps(in, JSON_COMPACT | JSON_ENCODE_ANY);
    uint32_t h = fnv1a(t ? t : "", t ? strlen(t) : 0, 2166136261u);
    free(t);
    float v[64];
    for (int k = 0; k < dim; k++) {
        h = h * 1103515245u + 12345u;
        v[k] = (float)((h >> 8) & 0xffff) / 65535.0f - 0.5f;
    }
    if (base64) {
        char *b = b64n(v, sizeof(float) * (size_t)dim);
        json_t *s = b ? json_string(b) : NULL;
        free(b);
        return s;
    }
    json_t *a = json_array();
    for (int k = 0; k < dim; k++)
        json_array_append_new(a, json_real(v[k]));
    return a;
}

/* 200 with o (stolen) as the body (recorded as the last answer). */
static void
send_obj(struct evhttp_request *req, json_t *o)
{
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    record_answer_text(t ? t : "{}", t ? strlen(t) : 2);
    send_json(req, 200, t ? t : "{}");
    free(t);
    json_decref(o);
}

static long
aux_tokens(const json_t *in)
{
    if (json_is_string(in))
        return (long)json_string_length(in) / 4 + 1;
    if (json_is_integer(in))
        return 1;
    long n = 0;
    size_t i;
    const json_t *x;
    json_array_foreach(in, i, x) {
        if (json_is_array(x))
            n += (long)json_array_size(x);
        else
            n += aux_tokens(x);
    }
    return n;
}

static void
handle_aux(struct evhttp_request *req, const char *path,
           const char *directives, int completions)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    json_t *body = json_loadb((const char *)evbuffer_pullup(in, -1), len, 0,
                              NULL);
    struct opts o;
    opts_default(&o);
    if (directives)
        opts_parse(&o, directives, strlen(directives));
    const char *hx =
        evhttp_find_header(evhttp_request_get_input_headers(req), "X-Fake");
    if (hx)
        opts_parse(&o, hx, strlen(hx));
    const json_t *m = json_object_get(body, "model");
    const char *model = json_is_string(m) ? json_string_value(m) : "";
    const json_t *input = json_object_get(body, completions ? "prompt"
                                                            : "input");
    pthread_mutex_lock(&st_mu);
    st_requests++;
    count_in(st_by_path, path);
    count_in(st_by_model, model);
    if (o.tag[0])
        count_in(st_by_tag, o.tag);
    pthread_mutex_unlock(&st_mu);
    if (json_is_object(body))
        record_last(req, path, model, body,
                    (const char *)evbuffer_pullup(in, -1), len);
    if (!json_is_object(body) || !input) {
        json_decref(body);
        send_error(req, 400, -1,
                   completions ? "fake: no prompt" : "fake: no input");
        return;
    }
    if (o.status) {
        json_decref(body);
        send_error_opts(req, &o, o.status, o.retry_after,
                        o.message[0] ? o.message : "fake: status asked for");
        return;
    }
    long pt = o.prompt_tokens > 0 ? o.prompt_tokens : aux_tokens(input);
    json_t *out = NULL;
    if (!completions) {
        const char *enc =
            json_string_value(json_object_get(body, "encoding_format"));
        int base64 = enc && !strcmp(enc, "base64");
        const json_t *dv = json_object_get(body, "dimensions");
        int dim = json_is_integer(dv) ? clampi(json_integer_value(dv), 1, 64)
                                      : EMB_DIM;
        json_t *data = json_array();
        int ids = json_is_array(input) &&
                  json_is_integer(json_array_get(input, 0));
        if (json_is_array(input) && !ids) {
            size_t i;
            const json_t *x;
            json_array_foreach(input, i, x)
                json_array_append_new(
                    data, json_pack("{s:s,s:i,s:o}", "object", "embedding",
                                    "index", (int)i, "embedding",
                                    emb_vector(x, dim, base64)));
        } else {
            json_array_append_new(
                data, json_pack("{s:s,s:i,s:o}", "object", "embedding",
                                "index", 0, "embedding",
                                emb_vector(input, dim, base64)));
        }
        out = json_pack("{s:s,s:o,s:s,s:{s:i,s:i}}", "object", "list",
                        "data", data, "model", model, "usage",
                        "prompt_tokens", (int)pt, "total_tokens", (int)pt);
        send_obj(req, out);
        json_decref(body);
        return;
    }
    const char *text = o.has_content ? o.content : "Once upon a time";
    long ct = o.completion_tokens > 0 ? o.completion_tokens : 4;
    json_t *usage = json_pack("{s:i,s:i,s:i}", "prompt_tokens", (int)pt,
                              "completion_tokens", (int)ct, "total_tokens",
                              (int)(pt + ct));
    if (!json_is_true(json_object_get(body, "stream"))) {
        out = json_pack("{s:s,s:s,s:i,s:s,s:[{s:s,s:i,s:n,s:s}],s:o}", "id",
                        "cmpl-fake", "object", "text_completion", "created",
                        1700000000, "model", model, "choices", "text", text,
                        "index", 0, "logprobs", "finish_reason", "stop",
                        "usage", usage);
        send_obj(req, out);
        json_decref(body);
        return;
    }
    int iu = json_is_true(
        json_object_get(json_object_get(body, "stream_options"),
                        "include_usage"));
    struct evbuffer *b = evbuffer_new();
    const char *p = text;
    while (*p) { /* one chunk per word (with its leading space) */
        const char *e = p + 1;
        while (*e && *e != ' ')
            e++;
        json_t *c = json_pack("{s:s,s:s,s:s,s:[{s:s%,s:i,s:n,s:n}]}", "id",
                              "cmpl-fake", "object", "text_completion",
                              "model", model, "choices", "text", p,
                              (size_t)(e - p), "index", 0, "logprobs",
                              "finish_reason");
        char *t = json_dumps(c, JSON_COMPACT);
        evbuffer_add_printf(b, "data: %s\n\n", t ? t : "{}");
        free(t);
        json_decref(c);
        p = e;
    }
    json_t *last = json_pack("{s:s,s:s,s:s,s:[{s:s,s:i,s:n,s:s}]}", "id",
                             "cmpl-fake", "object", "text_completion",
                             "model", model, "choices", "text", "", "index",
                             0, "logprobs", "finish_reason", "stop");
    char *t = json_dumps(last, JSON_COMPACT);
    evbuffer_add_printf(b, "data: %s\n\n", t ? t : "{}");
    free(t);
    json_decref(last);
    if (iu) {
        json_t *u = json_pack("{s:s,s:s,s:s,s:[],s:O}", "id", "cmpl-fake",
                              "object", "text_completion", "model", model,
                              "choices", "usage", usage);
        t = json_dumps(u, JSON_COMPACT);
        evbuffer_add_printf(b, "data: %s\n\n", t ? t : "{}");
        free(t);
        json_decref(u);
    }
    evbuffer_add_printf(b, "data: [DONE]\n\n");
    json_decref(usage);
    json_decref(body);
    pthread_mutex_lock(&st_mu);
    st_streams++;
    pthread_mutex_unlock(&st_mu);
    add_common_headers(req, "text/event-stream");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
    stats_count_status(200);
}

static void
handle_stats(struct evhttp_request *req)
{
    pthread_mutex_lock(&st_mu);
    json_t *s = json_pack(
        "{s:I,s:I,s:I,s:I,s:O,s:O,s:O,s:O,s:O}", "requests",
        (json_int_t)st_requests, "completed", (json_int_t)st_completed,
        "streams", (json_int_t)st_streams, "connections",
        (json_int_t)st_connections, "by_model", st_by_model, "by_status",
        st_by_status, "by_path", st_by_path, "by_tag", st_by_tag, "last",
        st_last ? st_last : json_null());
    char *text = s ? json_dumps(s, JSON_COMPACT) : NULL;
    json_decref(s);
    pthread_mutex_unlock(&st_mu);
    send_json(req, 200, text ? text : "{}");
    free(text);
}

static void
stats_reset(void)
{
    pthread_mutex_lock(&st_mu);
    st_requests = st_streams = st_connections = st_completed = 0;
    json_object_clear(st_by_model);
    json_object_clear(st_by_status);
    json_object_clear(st_by_path);
    json_object_clear(st_by_tag);
    json_decref(st_last);
    st_last = NULL;
    pthread_mutex_unlock(&st_mu);
}

static void
http_cb(struct evhttp_request *req, void *arg)
{
    struct worker *w = arg;
    const char *uri = evhttp_request_get_uri(req);
    if (!uri) {
        /* evhttp calls back again on some connection errors: detach any
         * job still holding this request, then answer to release it. */
        for (struct job *j = w->jobs; j; j = j->nextj)
            if (j->req == req)
                j->req = NULL;
        evhttp_send_error(req, 500, NULL);
        return;
    }
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    char path[1024];
    size_t pl = strcspn(uri, "?");
    if (pl >= sizeof(path))
        pl = sizeof(path) - 1;
    memcpy(path, uri, pl);
    path[pl] = '\0';
    char *directives = NULL;
    const char *route = path;
    if (strncmp(path, "/f/", 3) == 0) {
        char *seg = path + 3;
        char *slash = strchr(seg, '/');
        if (slash) {
            *slash = '\0';
            directives = evhttp_uridecode(seg, 0, NULL);
            *slash = '/';
            route = slash;
        }
    }
    static const char gpre[] = "/v1beta/models/";
    const char *colon = strncmp(route, gpre, sizeof(gpre) - 1) == 0
                            ? strchr(route + sizeof(gpre) - 1, ':')
                            : NULL;
    if (cmd == EVHTTP_REQ_POST && (strcmp(route, "/v1/chat/completions") == 0 ||
                                   strcmp(route, "/chat/completions") == 0)) {
        handle_chat(w, req, path, directives, FMT_OPENAI, NULL, 0);
    } else if (cmd == EVHTTP_REQ_POST && strcmp(route, "/v1/messages") == 0) {
        handle_chat(w, req, path, directives, FMT_ANTHROPIC, NULL, 0);
    } else if (cmd == EVHTTP_REQ_POST && colon &&
               (!strcmp(colon, ":generateContent") ||
                !strcmp(colon, ":streamGenerateContent"))) {
        char gm[128];
        size_t ml = (size_t)(colon - route) - (sizeof(gpre) - 1);
        snprintf(gm, sizeof(gm), "%.*s", (int)ml, route + sizeof(gpre) - 1);
        int gs = !strcmp(colon, ":streamGenerateContent");
        if (gs && !strstr(uri, "alt=sse"))
            send_native_error(req, FMT_GEMINI, 400, -1,
                              "fake: streamGenerateContent without alt=sse "
                              "(llmux must ask for SSE)");
        else
            handle_chat(w, req, path, directives, FMT_GEMINI, gm, gs);
    } else if (cmd == EVHTTP_REQ_POST &&
               (!strcmp(route, "/v1/embeddings") ||
                !strcmp(route, "/embeddings"))) {
        handle_aux(req, path, directives, 0);
    } else if (cmd == EVHTTP_REQ_POST &&
               (!strcmp(route, "/v1/completions") ||
                !strcmp(route, "/completions"))) {
        handle_aux(req, path, directives, 1);
    } else if (cmd == EVHTTP_REQ_GET && strcmp(route, "/fake/stats") == 0) {
        handle_stats(req);
    } else if (cmd == EVHTTP_REQ_POST && strcmp(route, "/fake/reset") == 0) {
        stats_reset();
        send_json(req, 200, "{\"ok\":true}");
    } else if (cmd == EVHTTP_REQ_GET && (strcmp(route, "/v1/models") == 0 ||
                                         strcmp(route, "/models") == 0)) {
        send_json(req, 200,
                  "{\"object\":\"list\",\"data\":[{\"id\":\"fake-model\","
                  "\"object\":\"model\",\"created\":1700000000,"
                  "\"owned_by\":\"fake\"}]}");
    } else {
        send_error(req, 404, -1, "fake: no such endpoint");
    }
    free(directives);
}

/* Called by evhttp once per accepted connection: count it. */
static struct bufferevent *
bev_cb(struct event_base *base, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&st_mu);
    st_connections++;
    pthread_mutex_unlock(&st_mu);
    if (!tls_ctx)
        return bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    SSL *ssl = SSL_new(tls_ctx);
    if (!ssl)
        return NULL;
    /* On success the bufferevent owns ssl (freed with it). */
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        SSL_free(ssl);
        return NULL;
    }
    /* Clients (and our own reset/drop directives) close without a TLS
     * close_notify; that is an ordinary end, not an error. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

/* Loads a PEM certificate chain and key into tls_ctx; 0 on success. */
static int
tls_setup(const char *cert, const char *key)
{
    tls_ctx = SSL_CTX_new(TLS_server_method());
    if (!tls_ctx)
        return -1;
    SSL_CTX_set_min_proto_version(tls_ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(tls_ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(tls_ctx, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(tls_ctx) != 1) {
        ERR_print_errors_fp(stderr);
        return -1;
    }
    return 0;
}

static int
listen_socket(const char *host, int port, int reuseport)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (reuseport)
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    /* Inherited by accepted sockets (Linux): a stream's end is not held
     * by Nagle against llmux's delayed ACK, as a real provider's edge
     * does not hold it. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(fd, 1024) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    event_base_loop(w->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static void
stop_all(void)
{
    for (int i = 0; i < n_workers; i++)
        if (workers[i].base)
            event_base_loopbreak(workers[i].base);
}

static void
stop_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    stop_all();
}

static void
usage(void)
{
    fprintf(stderr, "usage: fake_provider --port N [--host ADDR] "
                    "[--threads N] [--max-seconds S] "
                    "[--tls-cert FILE --tls-key FILE]\n");
}

int
main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    const char *tls_cert = NULL, *tls_key = NULL;
    int port = -1, max_seconds = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--host") && i + 1 < argc)
            host = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            n_workers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-seconds") && i + 1 < argc)
            max_seconds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tls-cert") && i + 1 < argc)
            tls_cert = argv[++i];
        else if (!strcmp(argv[i], "--tls-key") && i + 1 < argc)
            tls_key = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    if (port < 0 || port > 65535 || n_workers < 1 ||
        n_workers > FP_MAX_THREADS || max_seconds < 1 ||
        !tls_cert != !tls_key) {
        usage();
        return 2;
    }
    if (tls_cert && tls_setup(tls_cert, tls_key) != 0) {
        fprintf(stderr, "fake_provider: cannot load %s / %s\n", tls_cert,
                tls_key);
        SSL_CTX_free(tls_ctx);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    evthread_use_pthreads();
    st_by_model = json_object();
    st_by_status = json_object();
    st_by_path = json_object();
    st_by_tag = json_object();

    int rc = 1;
    for (int i = 0; i < n_workers; i++) {
        struct worker *w = &workers[i];
        w->idx = i;
        w->base = event_base_new();
        w->http = w->base ? evhttp_new(w->base) : NULL;
        if (!w->http) {
            fprintf(stderr, "fake_provider: libevent setup failed\n");
            goto out;
        }
        evhttp_set_gencb(w->http, http_cb, w);
        evhttp_set_bevcb(w->http, bev_cb, w);
        evhttp_set_max_body_size(w->http, 64 * 1024 * 1024);
        evhttp_set_timeout(w->http, 120);
        int fd = listen_socket(host, port, n_workers > 1);
        if (fd < 0) {
            fprintf(stderr, "fake_provider: cannot listen on %s:%d: %s\n",
                    host, port, strerror(errno));
            goto out;
        }
        if (i == 0 && port == 0) {
            struct sockaddr_in sa;
            socklen_t sl = sizeof(sa);
            getsockname(fd, (struct sockaddr *)&sa, &sl);
            port = ntohs(sa.sin_port);
        }
        if (!evhttp_accept_socket_with_handle(w->http, fd)) {
            close(fd);
            fprintf(stderr, "fake_provider: accept setup failed\n");
            goto out;
        }
    }
    struct event *sigterm = evsignal_new(workers[0].base, SIGTERM, stop_cb, NULL);
    struct event *sigint = evsignal_new(workers[0].base, SIGINT, stop_cb, NULL);
    struct event *deadline = evtimer_new(workers[0].base, stop_cb, NULL);
    struct timeval tv = {max_seconds, 0};
    if (sigterm)
        evsignal_add(sigterm, NULL);
    if (sigint)
        evsignal_add(sigint, NULL);
    if (deadline)
        evtimer_add(deadline, &tv);
    printf("PORT %d\n", port);
    fflush(stdout);
    for (int i = 1; i < n_workers; i++)
        pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
    event_base_loop(workers[0].base, EVLOOP_NO_EXIT_ON_EMPTY);
    stop_all();
    for (int i = 1; i < n_workers; i++)
        pthread_join(workers[i].thread, NULL);
    if (sigterm)
        event_free(sigterm);
    if (sigint)
        event_free(sigint);
    if (deadline)
        event_free(deadline);
    rc = 0;
out:
    for (int i = 0; i < n_workers; i++) {
        struct worker *w = &workers[i];
        while (w->jobs)
            job_free(w->jobs); /* their requests die with evhttp_free */
        if (w->http)
            evhttp_free(w->http);
        if (w->base)
            event_base_free(w->base);
    }
    json_decref(st_by_model);
    json_decref(st_by_status);
    json_decref(st_by_path);
    json_decref(st_by_tag);
    json_decref(st_last);
    SSL_CTX_free(tls_ctx);
    return rc;
}

/* libFuzzer target of the front door's translation (src/sandbridge/relay/front/_front_translate.c),
 * linked with it alone: clang -fsanitize=fuzzer,address,undefined (tests/fuzz/test_fuzz_front_c.py).
 *
 * It checks properties, not only crashes (a failed one aborts with what was wrong):
 * - a response relayed from C is one a strict reference reader written here accepts, with
 *   the Python relay's limits (header count, header section size); its body is exactly the
 *   Content-Length declared; every strict prefix of it waits for more; the browser's head
 *   is a well-formed head in the one form the relay sends (keep-alive, one Content-Length
 *   equal to the app's, a Referrer-Policy, no hop-by-hop field, no relay cookie);
 * - a response waiting for more is not yet a whole message by that reader's rule;
 * - a request relayed from C has a request line the Python parser accepts (GET or
 *   OPTIONS, an origin-form target within MAX_TARGET, HTTP/1.1), the cached block
 *   exactly, and a head of the method, the target under the base-path rule and the
 *   cached translation.
 * The Python relay's own verdict on the corpus this grows is the test's second half
 * (test_fuzz_front_c.py runs tests/relay/front/test_front_translation.py's check over it).
 *
 * Input: byte 0 chooses (bit 0: a HEAD request's response; bit 1: a request, not a
 * response; bit 2: the app's base path is /app, not /); the rest is the bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_front_translate.h"

/* parser.MAX_HEAD_BYTES: the Python reader's header section limit, name + value + 4 a field */
#define PYTHON_MAX_HEAD_BYTES (64 * 1024)
/* the translation adds at most a Referrer-Policy line beside what it keeps of the app's */
#define REFERRER_LINE 30

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "fuzz_translate: property failed: %s (line %d)\n", #cond,       \
                    __LINE__);                                                              \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

static int is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static int is_vchar_or_ws(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7F); }

static int same_lower(const char *a, size_t len, const char *lower) {
    if (strlen(lower) != len)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = a[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c + 32);
        if (c != lower[i])
            return 0;
    }
    return 1;
}

/* What the reference reader learns of a head: -1 refused, else the head's length. */
typedef struct {
    long head_len;
    int status;
    long content_length; /* -1: none */
    int lengths, connection_keep_alive, connections, referrers, set_cookies_relay;
    int transfer_encoding, fields;
    size_t python_size;
} head_t;

/* A strict reader of one HTTP/1.1 head at data[0..n), written apart from the C under test:
 * line by line, every field "token: value" without trailing whitespace. */
static head_t read_head(const char *data, size_t n) {
    head_t h;
    memset(&h, 0, sizeof h);
    h.head_len = -1;
    h.content_length = -1;
    size_t end = 0;
    while (end + 3 < n && memcmp(data + end, "\r\n\r\n", 4) != 0)
        end++;
    if (end + 3 >= n)
        return h;
    if (end < 13 || memcmp(data, "HTTP/1.1 ", 9) != 0)
        return h;
    for (int k = 9; k < 12; k++)
        if (data[k] < '0' || data[k] > '9')
            return h;
    h.status = (data[9] - '0') * 100 + (data[10] - '0') * 10 + (data[11] - '0');
    if (h.status < 200 || h.status > 599 || data[12] != ' ')
        return h;
    size_t line = 13;
    while (line < end && data[line] != '\r')
        if (!is_vchar_or_ws((unsigned char)data[line++]))
            return h;
    line += 2;
    while (line < end + 2) {
        size_t eol = line;
        while (eol < end + 2 && data[eol] != '\r')
            eol++;
        size_t colon = line;
        while (colon < eol && is_tchar((unsigned char)data[colon]))
            colon++;
        if (colon == line || colon >= eol || data[colon] != ':')
            return h;
        size_t v = colon + 1;
        while (v < eol && (data[v] == ' ' || data[v] == '\t'))
            v++;
        for (size_t k = v; k < eol; k++)
            if (!is_vchar_or_ws((unsigned char)data[k]))
                return h;
        if (eol > v && (data[eol - 1] == ' ' || data[eol - 1] == '\t'))
            return h;
        const char *name = data + line, *value = data + v;
        size_t name_len = colon - line, value_len = eol - v;
        h.fields++;
        h.python_size += name_len + value_len + 4;
        if (same_lower(name, name_len, "content-length")) {
            h.lengths++;
            if (value_len == 0 || value_len > 15)
                return h;
            long length = 0;
            for (size_t k = 0; k < value_len; k++) {
                if (value[k] < '0' || value[k] > '9')
                    return h;
                length = length * 10 + (value[k] - '0');
            }
            h.content_length = length;
        } else if (same_lower(name, name_len, "connection")) {
            h.connections++;
            h.connection_keep_alive = same_lower(value, value_len, "keep-alive");
        } else if (same_lower(name, name_len, "transfer-encoding")) {
            h.transfer_encoding = 1;
        } else if (same_lower(name, name_len, "referrer-policy")) {
            h.referrers++;
        } else if (same_lower(name, name_len, "set-cookie")) {
            size_t k = 0;
            while (k < value_len && strchr(" \t\n\r\f\v=", value[k]) != NULL && value[k])
                k++;
            if (value_len - k >= 11 && same_lower(value + k, 11, "sandbridge_"))
                h.set_cookies_relay++;
        }
        line = eol + 2;
    }
    h.head_len = (long)end + 4;
    return h;
}

static void check_response(const char *data, size_t n, int head_request) {
    char *out = NULL;
    size_t out_len = 0, whole = 0;
    int verdict = translate_response(data, n, head_request, &out, &out_len, &whole);
    CHECK(verdict == TR_OK || verdict == TR_INCOMPLETE || verdict == TR_BAIL);
    head_t app = read_head(data, n);
    int no_body = 0;
    long body = 0;
    if (app.head_len >= 0) {
        no_body = head_request || app.status == 204 || app.status == 304;
        body = no_body ? 0 : app.content_length;
    }
    if (verdict == TR_INCOMPLETE) {
        CHECK(out == NULL && n < PEEK_MAX);
        /* not yet whole: no head, or a declared body not all here */
        CHECK(app.head_len < 0 || body < 0 || (size_t)(app.head_len + body) > n);
        return;
    }
    if (verdict == TR_BAIL) {
        CHECK(out == NULL);
        return;
    }
    /* relayed: the reference reader accepts it, within the Python relay's limits */
    CHECK(app.head_len > 0);
    CHECK(app.fields <= MAX_FIELDS && app.python_size <= PYTHON_MAX_HEAD_BYTES);
    CHECK(app.lengths <= 1 && !app.transfer_encoding);
    CHECK(app.connections == 0 || app.connection_keep_alive);
    CHECK(body >= 0 && whole == (size_t)(app.head_len + body) && whole == n);
    CHECK(whole <= PEEK_MAX);
    /* the browser's head */
    /* a field may gain the one space after its colon */
    CHECK(out != NULL &&
          out_len <= (size_t)app.head_len + (size_t)app.fields + REFERRER_LINE + 26);
    head_t browser = read_head(out, out_len);
    CHECK(browser.head_len == (long)out_len && browser.status == app.status);
    CHECK(browser.connections == 1 && browser.connection_keep_alive);
    CHECK(out_len >= 26 && memcmp(out + out_len - 26, "Connection: keep-alive\r\n\r\n", 26) == 0);
    CHECK(browser.referrers >= 1 && browser.set_cookies_relay == 0 && !browser.transfer_encoding);
    CHECK(browser.lengths <= 1 && browser.fields <= app.fields + 2);
    if (!(no_body && app.status == 204))
        CHECK(browser.content_length == app.content_length);
    else
        CHECK(browser.lengths == 0);
    free(out);
    /* every strict prefix waits for more (long ones: sampled) */
    size_t step = n <= 4096 ? 1 : 509;
    for (size_t cut = 0; cut < n; cut += step) {
        char *o = NULL;
        size_t ol = 0, w = 0;
        CHECK(translate_response(data, cut, head_request, &o, &ol, &w) == TR_INCOMPLETE);
    }
}

static const char TRANSLATED[] = "Host: 127.0.0.1:5000\r\nX-Forwarded-Proto: http\r\n\r\n";

static void check_request(const char *data, size_t n, int app_base) {
    const char *base = app_base ? "/app" : "/";
    size_t base_len = strlen(base);
    /* the cache holds the block after this request's first line, as if Python had
     * checked it before: a hit is the common case, and the C must still check the line */
    size_t eol = 0;
    while (eol + 1 < n && !(data[eol] == '\r' && data[eol + 1] == '\n'))
        eol++;
    entry_t cache[CACHE_ENTRIES];
    memset(cache, 0, sizeof cache);
    if (eol + 1 < n) {
        cache[0].ip = 0x0100007F;
        cache[0].method = METHOD_GET;
        cache[0].block = (char *)data + eol + 2;
        cache[0].block_len = n - eol - 2;
        cache[0].out = (char *)TRANSLATED;
        cache[0].out_len = sizeof TRANSLATED - 1;
        cache[1] = cache[0];
        cache[1].method = METHOD_OPTIONS;
    }
    int method = 0;
    size_t out_len = 0;
    uint64_t clock = 0;
    char *out = translate_request(cache, base, base_len, 0x0100007F, data, n, &method,
                                  &out_len, &clock);
    if (out == NULL)
        return;
    /* the request line, read here apart: METHOD SP /target SP HTTP/1.1 CRLF */
    size_t m_len = method == METHOD_GET ? 3 : 7;
    CHECK(method == METHOD_GET || method == METHOD_OPTIONS);
    CHECK(memcmp(data, method == METHOD_GET ? "GET " : "OPTIONS ", m_len + 1) == 0);
    size_t t = m_len + 1, sp = t;
    while (sp < n && data[sp] != ' ')
        sp++;
    size_t t_len = sp - t;
    CHECK(t_len >= 1 && t_len <= MAX_TARGET && data[t] == '/');
    for (size_t k = t; k < sp; k++)
        CHECK(data[k] > 0x20 && data[k] < 0x7F && data[k] != '#' && data[k] != '"' &&
              data[k] != '<' && data[k] != '>' && data[k] != '\\' && data[k] != '^' &&
              data[k] != '`' && data[k] != '{' && data[k] != '|' && data[k] != '}' &&
              data[k] != '[' && data[k] != ']');
    CHECK(n - sp >= 11 && memcmp(data + sp, " HTTP/1.1\r\n", 11) == 0);
    CHECK(sp + 11 == eol + 2);
    CHECK(clock == 1 && cache[method == METHOD_GET ? 0 : 1].used == 1);
    /* the app's head: method, the target under the base-path rule, the translation */
    const char *target = data + t;
    int under = base_len == 1 ||
                (t_len >= base_len && memcmp(target, base, base_len) == 0 &&
                 (t_len == base_len || target[base_len] == '/' || target[base_len] == '?'));
    size_t prefix = under ? 0 : base_len;
    CHECK(out_len == m_len + 1 + prefix + t_len + 11 + sizeof TRANSLATED - 1);
    CHECK(memcmp(out, data, m_len + 1) == 0);
    CHECK(memcmp(out + m_len + 1, base, prefix) == 0);
    CHECK(memcmp(out + m_len + 1 + prefix, target, t_len) == 0);
    CHECK(memcmp(out + m_len + 1 + prefix + t_len, " HTTP/1.1\r\n", 11) == 0);
    CHECK(memcmp(out + out_len - (sizeof TRANSLATED - 1), TRANSLATED, sizeof TRANSLATED - 1) ==
          0);
    free(out);
}

/* libFuzzer saves an input that crashed or broke a property (crash-<sha1>, oom-..., leak-...,
 * timeout-...) where -artifact_prefix= says, else in the working directory: a run by hand
 * from the checkout's root left one there, and it was committed. Without the flag, this
 * target adds one naming a new private directory under $TMPDIR (or /tmp), said on stderr.
 * libFuzzer reads its flags after this call. */
#define ARTIFACT_FLAG "-artifact_prefix="

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (int i = 1; i < *argc; i++)
        if (strncmp((*argv)[i], ARTIFACT_FLAG, sizeof ARTIFACT_FLAG - 1) == 0)
            return 0;
    const char *tmp = getenv("TMPDIR");
    static char dir[4096];
    static char flag[sizeof ARTIFACT_FLAG + sizeof dir + 1];
    snprintf(dir, sizeof dir, "%s/fuzz_translate-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("fuzz_translate: no directory for the artifacts (give -artifact_prefix=)");
        exit(1);
    }
    snprintf(flag, sizeof flag, "%s%s/", ARTIFACT_FLAG, dir);
    char **args = calloc((size_t)*argc + 2, sizeof *args);
    if (args == NULL)
        abort();
    memcpy(args, *argv, (size_t)*argc * sizeof *args);
    args[(*argc)++] = flag;
    *argv = args; /* libFuzzer's for the whole run: never freed */
    fprintf(stderr, "fuzz_translate: artifacts go to %s/\n", dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *input, size_t size) {
    if (size < 1)
        return 0;
    int mode = input[0];
    /* a copy of exactly the bytes, no terminator: a read past them is ASan's to find */
    size_t n = size - 1;
    char *data = malloc(n ? n : 1);
    if (data == NULL)
        return 0;
    memcpy(data, input + 1, n);
    if (mode & 2)
        check_request(data, n, (mode & 4) != 0);
    else
        check_response(data, n, mode & 1);
    free(data);
    return 0;
}

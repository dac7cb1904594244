/* The front door's translation of one exchange: see _front_translate.h. */
#include "_front_translate.h"

#include <stdlib.h>
#include <string.h>

/* ---- requests ------------------------------------------------------------------------ */

static int target_char(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return strchr("-._~!$&'()*+,;=:@/?%", c) != NULL && c != 0;
}

char *translate_request(entry_t cache[CACHE_ENTRIES], const char *base, size_t base_len,
                        uint32_t ip, const char *data, size_t n, int *method, size_t *out_len,
                        uint64_t *clock) {
    size_t m_len;
    if (n >= 4 && memcmp(data, "GET ", 4) == 0) {
        *method = METHOD_GET;
        m_len = 3;
    } else if (n >= 8 && memcmp(data, "OPTIONS ", 8) == 0) {
        *method = METHOD_OPTIONS;
        m_len = 7;
    } else {
        return NULL;
    }
    size_t t = m_len + 1, i = t;
    while (i < n && i - t <= MAX_TARGET && target_char((unsigned char)data[i]))
        i++;
    size_t t_len = i - t;
    if (t_len == 0 || t_len > MAX_TARGET || data[t] != '/')
        return NULL;
    if (n - i < 11 || memcmp(data + i, " HTTP/1.1\r\n", 11) != 0)
        return NULL;
    const char *block = data + i + 11;
    size_t block_len = n - (i + 11);
    entry_t *hit = NULL;
    for (int e = 0; e < CACHE_ENTRIES; e++) {
        entry_t *c = &cache[e];
        if (c->block && c->ip == ip && c->method == *method && c->block_len == block_len &&
            memcmp(c->block, block, block_len) == 0) {
            hit = c;
            break;
        }
    }
    if (hit == NULL)
        return NULL;
    hit->used = ++*clock;
    /* protocol/http/base_path.py's rule */
    const char *target = data + t;
    int prefix = 0;
    if (!(base_len == 1 && base[0] == '/')) {
        int under = t_len >= base_len && memcmp(target, base, base_len) == 0 &&
                    (t_len == base_len || target[base_len] == '/' ||
                     target[base_len] == '?');
        prefix = !under;
    }
    size_t len = m_len + 1 + (prefix ? base_len : 0) + t_len + 11 + hit->out_len;
    char *out = malloc(len);
    if (out == NULL)
        return NULL;
    char *p = out;
    memcpy(p, data, m_len + 1);
    p += m_len + 1;
    if (prefix) {
        memcpy(p, base, base_len);
        p += base_len;
    }
    memcpy(p, target, t_len);
    p += t_len;
    memcpy(p, " HTTP/1.1\r\n", 11);
    p += 11;
    memcpy(p, hit->out, hit->out_len);
    *out_len = len;
    return out;
}

/* ---- responses ----------------------------------------------------------------------- */

size_t head_length(const char *buf, size_t n) {
    for (size_t i = 0; i + 3 < n; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n')
            return i + 4;
    return 0;
}

static int tchar(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int field_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7F); }

static int name_is(const char *name, size_t len, const char *lower) {
    size_t l = strlen(lower);
    if (len != l)
        return 0;
    for (size_t i = 0; i < l; i++) {
        char c = name[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c + 32);
        if (c != lower[i])
            return 0;
    }
    return 1;
}

static int is_relay_set_cookie(const char *v, size_t len) {
    /* private_access._RELAY_SET_COOKIE: [\s=]* then "sandbridge_", any case */
    size_t i = 0;
    while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r' ||
                       v[i] == '\f' || v[i] == '\v' || v[i] == '='))
        i++;
    static const char prefix[] = "sandbridge_";
    size_t p = sizeof prefix - 1;
    if (len - i < p)
        return 0;
    for (size_t k = 0; k < p; k++) {
        char c = v[i + k];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c + 32);
        if (c != prefix[k])
            return 0;
    }
    return 1;
}

/* The decimal number of digits[0..len) (digits only, checked before), or limit + 1 if it
 * is past limit: read within its bytes, never past them (a wire buffer has no NUL), and
 * never overflowing however many digits come. */
static size_t decimal_at_most(const char *digits, size_t len, size_t limit) {
    size_t value = 0;
    for (size_t i = 0; i < len; i++) {
        value = value * 10 + (size_t)(digits[i] - '0');
        if (value > limit)
            return limit + 1;
    }
    return value;
}

typedef struct {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} field_t;

static const char REFERRER[] = "Referrer-Policy: same-origin\r\n";
static const char KEEP[] = "Connection: keep-alive\r\n\r\n";

int translate_response(const char *buf, size_t n, int head_request, char **out,
                       size_t *out_len, size_t *whole) {
    static const char version[] = "HTTP/1.1 ";
    size_t cmp = n < 9 ? n : 9;
    if (memcmp(buf, version, cmp) != 0)
        return TR_BAIL;
    size_t head_len = head_length(buf, n);
    if (head_len == 0)
        return n >= PEEK_MAX ? TR_BAIL : TR_INCOMPLETE;
    const char *end = buf + head_len - 4;
    const char *p = buf + 9;
    if (end - p < 4 || p[0] < '2' || p[0] > '5' || p[1] < '0' || p[1] > '9' || p[2] < '0' ||
        p[2] > '9' || p[3] != ' ')
        return TR_BAIL;
    int status = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
    const char *reason = p + 4, *q = reason;
    while (q < end && *q != '\r') {
        if (!field_char((unsigned char)*q))
            return TR_BAIL;
        q++;
    }
    if (*q != '\r' || q[1] != '\n')
        return TR_BAIL;
    size_t reason_len = (size_t)(q - reason);
    q += 2;
    field_t fields[MAX_FIELDS];
    int count = 0, lengths = 0, has_referrer = 0;
    const char *length = NULL;
    size_t length_len = 0;
    size_t kept_bytes = 0, python_size = 0;
    int lines = 0;
    while (q < end + 2) {
        if (++lines > MAX_FIELDS)
            return TR_BAIL;
        const char *name = q;
        while (q < end && tchar((unsigned char)*q))
            q++;
        if (q == name || q >= end || *q != ':')
            return TR_BAIL;
        size_t name_len = (size_t)(q - name);
        q++;
        while (q < end && (*q == ' ' || *q == '\t'))
            q++;
        const char *value = q;
        while (q < end + 2 && *q != '\r') {
            if (!field_char((unsigned char)*q))
                return TR_BAIL;
            q++;
        }
        if (q[1] != '\n')
            return TR_BAIL;
        size_t value_len = (size_t)(q - value);
        if (value_len && (value[value_len - 1] == ' ' || value[value_len - 1] == '\t'))
            return TR_BAIL; /* trailing whitespace: not a form compared with llhttp's here */
        q += 2;
        /* the Python reader refuses a head whose fields count past its limit, however
         * short their lines (a field without a space after its colon counts one more):
         * a head it would refuse is not relayed from here */
        python_size += name_len + value_len + 4;
        if (python_size > MAX_HEAD_BYTES)
            return TR_BAIL;
        int keep = 1;
        if (name_is(name, name_len, "connection")) {
            if (!name_is(value, value_len, "keep-alive"))
                return TR_BAIL;
            keep = 0;
        } else if (name_is(name, name_len, "content-length")) {
            if (++lengths > 1 || value_len == 0 || value_len > 15)
                return TR_BAIL;
            for (size_t k = 0; k < value_len; k++)
                if (value[k] < '0' || value[k] > '9')
                    return TR_BAIL;
            length = value;
            length_len = value_len;
            keep = 0;
        } else if (name_is(name, name_len, "transfer-encoding") ||
                   name_is(name, name_len, "proxy-connection") ||
                   name_is(name, name_len, "location") ||
                   name_is(name, name_len, "content-location")) {
            return TR_BAIL;
        } else if (name_is(name, name_len, "keep-alive") ||
                   name_is(name, name_len, "te") || name_is(name, name_len, "trailer") ||
                   name_is(name, name_len, "upgrade") ||
                   name_is(name, name_len, "proxy-authenticate") ||
                   name_is(name, name_len, "proxy-authorization")) {
            keep = 0;
        } else if (name_is(name, name_len, "set-cookie")) {
            keep = !is_relay_set_cookie(value, value_len);
        } else if (name_is(name, name_len, "referrer-policy")) {
            has_referrer = 1;
        }
        if (keep) {
            fields[count].name = name;
            fields[count].name_len = name_len;
            fields[count].value = value;
            fields[count].value_len = value_len;
            kept_bytes += name_len + 2 + value_len + 2;
            count++;
        }
        if (q == end + 2)
            break;
    }
    int no_body = head_request || status == 204 || status == 304;
    size_t total = head_len;
    if (!no_body) {
        if (length == NULL)
            return TR_BAIL; /* close-delimited: the Python relay re-frames it */
        size_t body = decimal_at_most(length, length_len, PEEK_MAX);
        if (body > PEEK_MAX)
            return TR_BAIL;
        total = head_len + body;
    }
    if (total > PEEK_MAX)
        return TR_BAIL;
    if (n < total)
        return TR_INCOMPLETE;
    if (n > total)
        return TR_BAIL; /* bytes after the response answer nothing */
    int length_line = length != NULL && !(no_body && status == 204);
    size_t len = 9 + 4 + reason_len + 2 + kept_bytes +
                 (has_referrer ? 0 : sizeof REFERRER - 1) +
                 (length_line ? 16 + length_len + 2 : 0) + sizeof KEEP - 1;
    char *o = malloc(len);
    if (o == NULL)
        return TR_BAIL;
    char *w = o;
    memcpy(w, buf, 13); /* "HTTP/1.1 DDD " */
    w += 13;
    memcpy(w, reason, reason_len);
    w += reason_len;
    *w++ = '\r';
    *w++ = '\n';
    for (int k = 0; k < count; k++) {
        memcpy(w, fields[k].name, fields[k].name_len);
        w += fields[k].name_len;
        *w++ = ':';
        *w++ = ' ';
        memcpy(w, fields[k].value, fields[k].value_len);
        w += fields[k].value_len;
        *w++ = '\r';
        *w++ = '\n';
    }
    if (!has_referrer) {
        memcpy(w, REFERRER, sizeof REFERRER - 1);
        w += sizeof REFERRER - 1;
    }
    if (length_line) {
        memcpy(w, "Content-Length: ", 16);
        w += 16;
        memcpy(w, length, length_len);
        w += length_len;
        *w++ = '\r';
        *w++ = '\n';
    }
    memcpy(w, KEEP, sizeof KEEP - 1);
    w += sizeof KEEP - 1;
    *out = o;
    *out_len = (size_t)(w - o);
    *whole = total;
    return TR_OK;
}


int retryable(const char *data, size_t n) {
    return (n >= 4 && memcmp(data, "GET ", 4) == 0) || (n >= 5 && memcmp(data, "HEAD ", 5) == 0) ||
           (n >= 8 && memcmp(data, "OPTIONS ", 8) == 0);
}

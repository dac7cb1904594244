/* The relay's front door for new browser connections, in C: sandbridge.relay._front.
 *
 * Why: a new browser connection's first byte came 1.4-1.6x later through the relay than
 * through nginx's two hops, and eight rounds of work on the relay's Python showed the
 * time is the interpreter's and its event loop's at every new connection (its code run
 * cold), not any one function (docs/benchmarks.md). This thread takes the commonest first
 * exchange out of the interpreter altogether: it accepts, checks the connection's owner,
 * and relays a request the relay's Python has already checked and translated once (its
 * exact bytes, see below) on an idle app connection, and the app's whole response when it
 * is one the rules below can state exactly. Anything else goes to the Python relay at
 * once, as if it had been there from the accept (docs/relay.md, "The front door").
 *
 * What keeps it exact:
 * - requests: this file parses only the request line (GET or OPTIONS, an
 *   origin-form target of plain URL characters, HTTP/1.1). The header block must equal,
 *   byte for byte, a block the Python relay parsed, checked and translated for the same
 *   client address, listener and method, and handed here with its translation
 *   (front.py: only bodiless, keep-alive, non-upgrade requests of a public app, with
 *   every value in the one form llhttp reads back unchanged). No header is parsed here;
 *   the Host, Origin, cookie and forwarding rules are the Python relay's alone.
 * - responses: a strict subset of HTTP/1.1 is read (status line, token names, values of
 *   visible characters, one Content-Length, the whole body in hand) and translated as
 *   protocol/http/forwarding.py's build_browser_response does; any other response (a
 *   Location, chunked or close-delimited bodies, 1xx, HTTP/1.0, Connection other than
 *   keep-alive, a body not yet whole within 64 KiB) is left unread for the Python relay.
 *   tests/relay/test_front_translation.py compares both on generated heads.
 * - every send and recv is MSG_DONTWAIT, and a listening socket must be non-blocking:
 *   no descriptor's flags can block this thread.
 * - one mutex guards all state; this thread never takes the GIL, and Python's calls
 *   into it only take the mutex.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_LISTENERS 1024     /* listeners of one process */
#define MAX_CONNS 1024         /* connections held here at once, process-wide */
#define CACHE_ENTRIES 32       /* translated request blocks per listener */
#define READ_MAX 16384         /* a browser's request, read here whole or not at all */
#define PEEK_MAX 65536         /* an app's response, relayed here whole or not at all */
#define MAX_TARGET 8192        /* parser.MAX_TARGET_BYTES */
#define MAX_FIELDS 100         /* parser.MAX_HEADER_COUNT */
#define MAX_POOL 64
#define MAX_BATCH 64
#define MAX_QUEUE 256          /* handoffs waiting for the event loop; past it, accepts wait */

enum { TAG_LISTENER = 1, TAG_BROWSER = 2, TAG_APP = 3, TAG_WAKE = 4 };
enum { FREE = 0, FIRST, AWAIT, IDLE };
enum { KIND_FRESH = 0, KIND_SENT = 1, KIND_RETRY = 2 };
/* a handoff's owner check: not asked (or not the owner's), the owner's, the owner's and
 * still counted in the front's held connections */
enum { UNCHECKED = 0, CHECKED = 1, COUNTED = 2 };
enum { METHOD_GET = 1, METHOD_OPTIONS = 3 };

typedef struct {
    int fd;
    double deadline;
} parked_t;

typedef struct {
    uint32_t ip;
    int method;
    char *block;
    size_t block_len;
    char *out;
    size_t out_len;
    uint64_t used;
} entry_t;

/* The listeners of one session share its connection limit. */
typedef struct {
    uint64_t key;
    int refs;
    int room; /* what the session's limit leaves beside the Python relay's connections */
    int held;
} scope_t;

typedef struct {
    int active;
    uint32_t gen;
    int fd;
    int sid;
    int paused;
    int queue_paused;
    int refused_said; /* another user's connection was handed over once: the rest close here */
    double paused_until;
    uint16_t port;
    int pool_size;
    double pool_idle;
    double keepalive;
    double grace;
    int room;
    int held;
    uint64_t relayed; /* exchanges relayed here whole */
    uint64_t handed;  /* connections handed to the Python relay */
    char *base;
    size_t base_len;
    entry_t cache[CACHE_ENTRIES];
    parked_t pool[MAX_POOL];
    int pooled;
} listener_t;

typedef struct {
    int state;
    uint32_t gen;
    int lid;
    int bfd, afd;
    int b_polled, a_polled;
    uint32_t ip;
    uint16_t port;
    double deadline;
    char *req;
    size_t req_len;
    int retried;
} conn_t;

typedef struct handoff {
    struct handoff *next;
    uint32_t gen;
    int lid, kind, bfd, afd, checked;
    uint32_t ip;
    uint16_t port;
    char *data;
    size_t data_len;
    char *pending;
    size_t pending_len;
} handoff_t;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_t thread;
    int started;
    int stop;
    int epfd;
    int wakefd;   /* this thread's: Python's calls wake it (a stop) */
    int notifyfd; /* Python's: handoffs are waiting */
    int netlink;
    uint32_t sequence;
    uint32_t owner;
    uint64_t clock;
    listener_t *listeners;
    scope_t *scopes;
    conn_t *conns;
    int conn_top; /* conns[0..conn_top) may be in use */
    int held;
    handoff_t *queue, *queue_tail;
    int queued;
    char *buf;
} Front;

/* ------------------------------------------------------------------------------------ */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t tag(int kind, uint32_t gen, int index) {
    return ((uint64_t)kind << 56) | ((uint64_t)(gen & 0xFFFFFF) << 32) | (uint32_t)index;
}

static void unpoll(Front *f, int fd, int *polled) {
    if (*polled) {
        epoll_ctl(f->epfd, EPOLL_CTL_DEL, fd, NULL);
        *polled = 0;
    }
}

static int poll_fd(Front *f, int fd, int *polled, uint32_t events, uint64_t data) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = events;
    ev.data.u64 = data;
    if (epoll_ctl(f->epfd, *polled ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0)
        return -1;
    *polled = 1;
    return 0;
}

/* ---- the owner check (relay/local_peer.py, in C) ----------------------------------- */

/* 1: the owner's (or root's), 0: another user's, -1: unknown (the Python relay decides) */
static int owner_check(Front *f, const struct sockaddr_in *peer, uint16_t port) {
    if (f->netlink < 0)
        return -1;
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 r;
    } req;
    memset(&req, 0, sizeof req);
    req.nlh.nlmsg_len = sizeof req;
    req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.nlh.nlmsg_flags = NLM_F_REQUEST;
    req.nlh.nlmsg_seq = ++f->sequence;
    req.r.sdiag_family = AF_INET;
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_states = 0xFFFFFFFF;
    /* the client's socket: its source is our peer, its destination our listener */
    req.r.id.idiag_sport = peer->sin_port;
    req.r.id.idiag_dport = htons(port);
    req.r.id.idiag_src[0] = peer->sin_addr.s_addr;
    req.r.id.idiag_dst[0] = htonl(INADDR_LOOPBACK);
    req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    if (send(f->netlink, &req, sizeof req, MSG_DONTWAIT) != (ssize_t)sizeof req)
        return -1;
    for (;;) {
        char answer[512] __attribute__((aligned(8)));
        ssize_t n = recv(f->netlink, answer, sizeof answer, MSG_DONTWAIT);
        if (n < (ssize_t)sizeof(struct nlmsghdr))
            return -1; /* the kernel answers within send(): none is coming */
        struct nlmsghdr *h = (struct nlmsghdr *)answer;
        if (h->nlmsg_seq != f->sequence)
            continue; /* an earlier, abandoned question's */
        if (h->nlmsg_type == NLMSG_ERROR ||
            (size_t)n < NLMSG_HDRLEN + sizeof(struct inet_diag_msg))
            return -1;
        struct inet_diag_msg *m = (struct inet_diag_msg *)NLMSG_DATA(h);
        if (m->idiag_inode == 0)
            return 0; /* closed by its process already (TIME_WAIT says uid 0): nobody's */
        return (m->idiag_uid == f->owner || m->idiag_uid == 0) ? 1 : 0;
    }
}

/* ---- requests ------------------------------------------------------------------------ */

static int target_char(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return strchr("-._~!$&'()*+,;=:@/?%", c) != NULL && c != 0;
}

/* The app's request head for a browser request whose block Python translated before,
 * or NULL (the Python relay reads it). *method gets the method. */
static char *translate_request(listener_t *L, uint32_t ip, const char *data, size_t n,
                               int *method, size_t *out_len, uint64_t *clock) {
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
        entry_t *c = &L->cache[e];
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
    if (!(L->base_len == 1 && L->base[0] == '/')) {
        int under = t_len >= L->base_len && memcmp(target, L->base, L->base_len) == 0 &&
                    (t_len == L->base_len || target[L->base_len] == '/' ||
                     target[L->base_len] == '?');
        prefix = !under;
    }
    size_t len = m_len + 1 + (prefix ? L->base_len : 0) + t_len + 11 + hit->out_len;
    char *out = malloc(len);
    if (out == NULL)
        return NULL;
    char *p = out;
    memcpy(p, data, m_len + 1);
    p += m_len + 1;
    if (prefix) {
        memcpy(p, L->base, L->base_len);
        p += L->base_len;
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

/* The length of the head at the start of buf (through its empty line), or 0. */
static size_t head_length(const char *buf, size_t n) {
    for (size_t i = 0; i + 3 < n; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n')
            return i + 4;
    return 0;
}

enum { TR_OK = 0, TR_INCOMPLETE = 1, TR_BAIL = 2 };

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

typedef struct {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} field_t;

static const char REFERRER[] = "Referrer-Policy: same-origin\r\n";
static const char KEEP[] = "Connection: keep-alive\r\n\r\n";

/* TR_OK: *out is the browser's head (malloc'd), and the response is exactly *whole
 * bytes of buf (head and body); TR_INCOMPLETE: more may make it one; TR_BAIL: never. */
static int translate_response(const char *buf, size_t n, int head_request, char **out,
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
    size_t kept_bytes = 0;
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
        unsigned long long body = strtoull(length, NULL, 10);
        if (body > PEEK_MAX)
            return TR_BAIL;
        total = head_len + (size_t)body;
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

/* ---- pools, connections, handoffs --------------------------------------------------- */

static void close_fd(int fd) {
    if (fd >= 0)
        close(fd);
}

/* An idle app connection still is: nothing from the app (bytes answering nothing, or
 * its end) came on it while it waited. */
static int still_idle(int fd) {
    char probe;
    return recv(fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
           (errno == EAGAIN || errno == EWOULDBLOCK);
}

static int pool_take(listener_t *L, double now) {
    while (L->pooled > 0) {
        parked_t p = L->pool[--L->pooled];
        if (p.deadline > now && still_idle(p.fd))
            return p.fd;
        close(p.fd); /* expired, or closed or written to by the app while it waited */
    }
    return -1;
}

static void pool_put(listener_t *L, int fd, double now) {
    if (!L->active || L->pool_size <= 0) {
        close(fd);
        return;
    }
    if (L->pooled >= L->pool_size) {
        close(L->pool[0].fd);
        memmove(&L->pool[0], &L->pool[1], sizeof(parked_t) * (size_t)(L->pooled - 1));
        L->pooled--;
    }
    L->pool[L->pooled].fd = fd;
    L->pool[L->pooled].deadline = now + L->pool_idle;
    L->pooled++;
}

static void signal_python(Front *f) {
    uint64_t one = 1;
    ssize_t ignored = write(f->notifyfd, &one, sizeof one);
    (void)ignored;
}

static void enqueue(Front *f, int lid, int kind, int bfd, int afd, int checked, uint32_t ip,
                    uint16_t port, const char *data, size_t data_len, const char *pending,
                    size_t pending_len) {
    handoff_t *h = calloc(1, sizeof *h);
    char *d = data_len ? malloc(data_len) : NULL;
    char *pd = pending_len ? malloc(pending_len) : NULL;
    if (h == NULL || (data_len && d == NULL) || (pending_len && pd == NULL)) {
        free(h);
        free(d);
        free(pd);
        close_fd(bfd); /* out of memory: dropped, as an accept that failed */
        close_fd(afd);
        return;
    }
    if (data_len)
        memcpy(d, data, data_len);
    if (pending_len)
        memcpy(pd, pending, pending_len);
    h->lid = lid;
    h->gen = f->listeners[lid].gen;
    h->kind = kind;
    h->bfd = bfd;
    h->afd = afd;
    h->checked = checked;
    h->ip = ip;
    h->port = port;
    h->data = d;
    h->data_len = data_len;
    h->pending = pd;
    h->pending_len = pending_len;
    f->listeners[lid].handed++;
    if (f->queue_tail)
        f->queue_tail->next = h;
    else
        f->queue = h;
    f->queue_tail = h;
    if (f->queued++ == 0)
        signal_python(f);
}

static conn_t *conn_new(Front *f) {
    for (int i = 0; i < MAX_CONNS; i++) {
        conn_t *c = &f->conns[i];
        if (c->state == FREE) {
            uint32_t gen = c->gen + 1;
            memset(c, 0, sizeof *c);
            c->gen = gen;
            c->bfd = c->afd = -1;
            if (i >= f->conn_top)
                f->conn_top = i + 1;
            f->held++;
            return c;
        }
    }
    return NULL;
}

/* counted: a connection handed to the Python relay stays counted here until the relay
 * has counted it (Front.adopted): its place in the limits is never free in between. */
static void conn_release(Front *f, conn_t *c, int counted) {
    unpoll(f, c->bfd, &c->b_polled);
    if (c->afd >= 0)
        unpoll(f, c->afd, &c->a_polled);
    free(c->req);
    c->req = NULL;
    if (!counted && c->lid >= 0 && f->listeners[c->lid].active) {
        f->listeners[c->lid].held--;
        f->scopes[f->listeners[c->lid].sid].held--;
    }
    c->state = FREE;
    f->held--;
    while (f->conn_top > 0 && f->conns[f->conn_top - 1].state == FREE)
        f->conn_top--;
}

static void conn_free(Front *f, conn_t *c) { conn_release(f, c, 0); }

/* To the Python relay: the browser's bytes not yet sent (data), an idle app connection
 * that goes with it (or -1), bytes of a response still to write to the browser. */
static void hand_fresh(Front *f, conn_t *c, const char *data, size_t len, const char *pending,
                       size_t pending_len, int retried) {
    int bfd = c->bfd, afd = c->afd;
    int lid = c->lid;
    uint32_t ip = c->ip;
    uint16_t port = c->port;
    conn_release(f, c, 1);
    enqueue(f, lid, retried ? KIND_RETRY : KIND_FRESH, bfd, afd, COUNTED, ip, port, data, len,
            pending, pending_len);
}

/* To the Python relay: the request (data) went out on the app connection; nothing of
 * its response has been read. */
static void hand_sent(Front *f, conn_t *c) {
    int bfd = c->bfd, afd = c->afd;
    int lid = c->lid;
    uint32_t ip = c->ip;
    uint16_t port = c->port;
    char *req = c->req;
    size_t req_len = c->req_len;
    c->req = NULL;
    conn_release(f, c, 1);
    enqueue(f, lid, KIND_SENT, bfd, afd, COUNTED, ip, port, req, req_len, NULL, 0);
    free(req);
}

static int send_whole(int fd, const char *data, size_t len) {
    ssize_t sent = send(fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    return sent == (ssize_t)len ? 0 : -1;
}

/* A request line the relay's pool rule may let take an idle app connection
 * (app_pool.RETRYABLE_METHODS); the rest of that rule is the relay's. */
static int retryable(const char *data, size_t n) {
    return (n >= 4 && memcmp(data, "GET ", 4) == 0) || (n >= 5 && memcmp(data, "HEAD ", 5) == 0) ||
           (n >= 8 && memcmp(data, "OPTIONS ", 8) == 0);
}

/* A request from the browser of c (data, n bytes): relayed from here, or handed over. */
static void serve_request(Front *f, conn_t *c, const char *data, size_t n, double now) {
    listener_t *L = &f->listeners[c->lid];
    int method = 0;
    size_t out_len = 0;
    char *out = n < READ_MAX ? translate_request(L, c->ip, data, n, &method, &out_len, &f->clock)
                          : NULL;
    if (out == NULL) {
        /* the relay's: with an idle app connection, for a request that may take one */
        if (c->afd < 0 && retryable(data, n))
            c->afd = pool_take(L, now);
        hand_fresh(f, c, data, n, NULL, 0, 0);
        return;
    }
    if (c->afd >= 0 && !still_idle(c->afd)) {
        close(c->afd); /* the app wrote to it, or closed it, between two requests */
        c->afd = -1;
    }
    if (c->afd < 0)
        c->afd = pool_take(L, now);
    char *req = c->afd >= 0 ? malloc(n) : NULL;
    if (req == NULL || send_whole(c->afd, out, out_len) != 0) {
        /* no idle app connection (or it failed as the request went: nothing of it is
         * answered, and the relay sends it once more, on a new connection) */
        free(out);
        free(req);
        int failed = c->afd >= 0;
        close_fd(c->afd);
        c->afd = -1;
        hand_fresh(f, c, data, n, NULL, 0, failed);
        return;
    }
    free(out);
    memcpy(req, data, n);
    free(c->req);
    c->req = req;
    c->req_len = n;
    c->retried = 0;
    c->state = AWAIT;
    c->deadline = now + L->grace;
    unpoll(f, c->bfd, &c->b_polled);
    if (poll_fd(f, c->afd, &c->a_polled, EPOLLIN | EPOLLET | EPOLLRDHUP,
                tag(TAG_APP, c->gen, (int)(c - f->conns))) != 0)
        hand_sent(f, c);
}

/* Both connections closed, as the relay drops an exchange it cannot go on with. */
static void drop_both(Front *f, conn_t *c) {
    if (c->afd >= 0) {
        unpoll(f, c->afd, &c->a_polled);
        close(c->afd);
        c->afd = -1;
    }
    unpoll(f, c->bfd, &c->b_polled);
    close(c->bfd);
    conn_free(f, c);
}

static void browser_gone(Front *f, conn_t *c, double now) {
    listener_t *L = &f->listeners[c->lid];
    int afd = c->afd;
    c->afd = -1;
    if (afd >= 0) {
        unpoll(f, afd, &c->a_polled);
        pool_put(L, afd, now);
    }
    close(c->bfd);
    conn_free(f, c);
}

static void on_app(Front *f, conn_t *c, double now) {
    ssize_t n = recv(c->afd, f->buf, PEEK_MAX, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        /* The app closed the idle connection as the request went out (its own
         * keep-alive ran out): the relay sends it once more, on a new connection, as the
         * pool's rule says. */
        unpoll(f, c->afd, &c->a_polled);
        close(c->afd);
        c->afd = -1;
        char *req = c->req;
        size_t len = c->req_len;
        c->req = NULL;
        hand_fresh(f, c, req, len, NULL, 0, 1);
        free(req);
        return;
    }
    char *out = NULL;
    size_t out_len = 0, whole = 0;
    int r = translate_response(f->buf, (size_t)n, 0, &out, &out_len, &whole);
    if (r == TR_INCOMPLETE)
        return; /* the rest comes with a next edge, or the grace ends */
    if (r != TR_OK) {
        hand_sent(f, c);
        return;
    }
    ssize_t taken = recv(c->afd, f->buf, whole, MSG_DONTWAIT);
    if (taken != (ssize_t)whole) {
        /* cannot be (it was peeked whole); the connection is in an unknown state */
        free(out);
        drop_both(f, c);
        return;
    }
    /* the body is what follows the app's head */
    size_t app_head = head_length(f->buf, whole);
    struct iovec iov[2] = {{out, out_len}, {f->buf + app_head, whole - app_head}};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = whole > app_head ? 2 : 1;
    size_t total = out_len + (whole - app_head);
    ssize_t sent = sendmsg(c->bfd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    unpoll(f, c->afd, &c->a_polled);
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        free(out);
        browser_gone(f, c, now);
        return;
    }
    if (sent < (ssize_t)total) {
        size_t done = sent < 0 ? 0 : (size_t)sent;
        /* the rest goes from the Python relay, with the connection */
        char *rest = malloc(total - done);
        if (rest == NULL) {
            free(out);
            drop_both(f, c);
            return;
        }
        size_t w = 0;
        for (int k = 0; k < (int)msg.msg_iovlen; k++) {
            size_t len = iov[k].iov_len;
            const char *base = iov[k].iov_base;
            if (done >= len) {
                done -= len;
                continue;
            }
            memcpy(rest + w, base + done, len - done);
            w += len - done;
            done = 0;
        }
        free(out);
        hand_fresh(f, c, NULL, 0, rest, w, 0);
        free(rest);
        return;
    }
    free(out);
    free(c->req);
    c->req = NULL;
    f->listeners[c->lid].relayed++;
    c->state = IDLE;
    c->deadline = now + f->listeners[c->lid].keepalive;
    if (poll_fd(f, c->bfd, &c->b_polled, EPOLLIN | EPOLLRDHUP,
                tag(TAG_BROWSER, c->gen, (int)(c - f->conns))) != 0)
        hand_fresh(f, c, NULL, 0, NULL, 0, 0);
}

static void on_browser(Front *f, conn_t *c, double now) {
    ssize_t n = recv(c->bfd, f->buf, READ_MAX, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        browser_gone(f, c, now);
        return;
    }
    serve_request(f, c, f->buf, (size_t)n, now);
}

static void on_listener(Front *f, int lid, double now) {
    listener_t *L = &f->listeners[lid];
    for (int k = 0; k < MAX_BATCH && L->active; k++) {
        if (f->queued >= MAX_QUEUE) {
            /* the event loop is behind: new connections wait in the kernel's queue until
             * it has taken what waits here (Front_take starts the listener again) */
            struct epoll_event ev = {0};
            ev.data.u64 = tag(TAG_LISTENER, L->gen, lid);
            epoll_ctl(f->epfd, EPOLL_CTL_MOD, L->fd, &ev);
            L->queue_paused = 1;
            return;
        }
        struct sockaddr_in peer;
        socklen_t peer_len = sizeof peer;
        int fd = accept4(L->fd, (struct sockaddr *)&peer, &peer_len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* out of descriptors: the queue waits a tenth of a second, not a spin */
                struct epoll_event ev = {0};
                ev.data.u64 = tag(TAG_LISTENER, L->gen, lid);
                epoll_ctl(f->epfd, EPOLL_CTL_MOD, L->fd, &ev);
                L->paused = 1;
                L->paused_until = now + 0.1;
            }
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        uint32_t ip = peer.sin_addr.s_addr;
        uint16_t port = ntohs(peer.sin_port);
        int owner = peer_len == sizeof peer && peer.sin_family == AF_INET
                        ? owner_check(f, &peer, L->port)
                        : -1;
        if (owner == 0 && L->refused_said) {
            close(fd); /* another user's: closed unanswered, as the Python relay does */
            continue;
        }
        if (owner != 1) {
            /* unknown, or another user's first: the Python relay checks again, refuses
             * and says so (once per listener) */
            L->refused_said |= owner == 0;
            enqueue(f, lid, KIND_FRESH, fd, -1, UNCHECKED, ip, port, NULL, 0, NULL, 0);
            continue;
        }
        scope_t *S = &f->scopes[L->sid];
        conn_t *c = (f->held < MAX_CONNS && L->held < L->room && S->held < S->room)
                        ? conn_new(f)
                        : NULL;
        if (c == NULL) {
            enqueue(f, lid, KIND_FRESH, fd, -1, CHECKED, ip, port, NULL, 0, NULL, 0);
            continue;
        }
        c->lid = lid;
        c->bfd = fd;
        c->ip = ip;
        c->port = port;
        L->held++;
        S->held++;
        ssize_t n = recv(fd, f->buf, READ_MAX, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* the request comes after the connection: it waits here for it, counted, and
             * is closed after the keep-alive timeout if it never comes (as the Python
             * relay's doorstep does) */
            c->state = FIRST;
            c->deadline = now + L->keepalive;
            if (poll_fd(f, fd, &c->b_polled, EPOLLIN | EPOLLRDHUP,
                        tag(TAG_BROWSER, c->gen, (int)(c - f->conns))) != 0)
                hand_fresh(f, c, NULL, 0, NULL, 0, 0);
            continue;
        }
        if (n <= 0) {
            hand_fresh(f, c, NULL, 0, NULL, 0, 0); /* the end, or an error: Python's */
            continue;
        }
        serve_request(f, c, f->buf, (size_t)n, now);
    }
}

static double next_deadline(Front *f, double now) {
    double next = now + 1.0;
    for (int i = 0; i < f->conn_top; i++)
        if (f->conns[i].state != FREE && f->conns[i].deadline < next)
            next = f->conns[i].deadline;
    for (int l = 0; l < MAX_LISTENERS; l++) {
        listener_t *L = &f->listeners[l];
        if (!L->active)
            continue;
        if (L->pooled > 0 && L->pool[0].deadline < next)
            next = L->pool[0].deadline;
        if (L->paused && L->paused_until < next)
            next = L->paused_until;
    }
    return next;
}

static void expire(Front *f, double now) {
    for (int i = 0; i < f->conn_top; i++) {
        conn_t *c = &f->conns[i];
        if (c->state == FREE || c->deadline > now)
            continue;
        if (c->state == AWAIT)
            hand_sent(f, c); /* the app is slow: the Python relay waits on, with its timeout */
        else
            browser_gone(f, c, now); /* silent for the keep-alive timeout: closed */
    }
    for (int l = 0; l < MAX_LISTENERS; l++) {
        listener_t *L = &f->listeners[l];
        if (!L->active)
            continue;
        int kept = 0;
        for (int p = 0; p < L->pooled; p++) {
            if (L->pool[p].deadline <= now)
                close(L->pool[p].fd);
            else
                L->pool[kept++] = L->pool[p];
        }
        L->pooled = kept;
        if (L->paused && L->paused_until <= now && !L->queue_paused) {
            struct epoll_event ev = {0};
            ev.events = EPOLLIN;
            ev.data.u64 = tag(TAG_LISTENER, L->gen, l);
            epoll_ctl(f->epfd, EPOLL_CTL_MOD, L->fd, &ev);
            L->paused = 0;
        }
    }
}

static void *run(void *arg) {
    Front *f = arg;
    struct epoll_event events[MAX_BATCH];
    for (;;) {
        pthread_mutex_lock(&f->lock);
        if (f->stop) {
            pthread_mutex_unlock(&f->lock);
            return NULL;
        }
        double now = now_seconds();
        double next = next_deadline(f, now);
        pthread_mutex_unlock(&f->lock);
        int timeout = (int)((next - now) * 1000.0) + 1;
        if (timeout < 0)
            timeout = 0;
        int n = epoll_wait(f->epfd, events, MAX_BATCH, timeout);
        pthread_mutex_lock(&f->lock);
        now = now_seconds();
        for (int i = 0; i < n && !f->stop; i++) {
            uint64_t data = events[i].data.u64;
            int kind = (int)(data >> 56);
            uint32_t gen = (uint32_t)((data >> 32) & 0xFFFFFF);
            int index = (int)(uint32_t)data;
            if (kind == TAG_WAKE) {
                uint64_t count;
                ssize_t ignored = read(f->wakefd, &count, sizeof count);
                (void)ignored;
            } else if (kind == TAG_LISTENER) {
                if (index < MAX_LISTENERS && f->listeners[index].active &&
                    (f->listeners[index].gen & 0xFFFFFF) == gen)
                    on_listener(f, index, now);
            } else if (index < MAX_CONNS) {
                conn_t *c = &f->conns[index];
                if ((c->gen & 0xFFFFFF) != gen)
                    continue; /* an event of a connection already gone */
                if (kind == TAG_APP && c->state == AWAIT)
                    on_app(f, c, now);
                else if (kind == TAG_BROWSER && (c->state == IDLE || c->state == FIRST))
                    on_browser(f, c, now);
            }
        }
        if (!f->stop)
            expire(f, now);
        pthread_mutex_unlock(&f->lock);
    }
}

/* ---- the Python side ---------------------------------------------------------------- */

static void free_handoff(handoff_t *h) {
    free(h->data);
    free(h->pending);
    free(h);
}

static void clear_cache(listener_t *L) {
    for (int e = 0; e < CACHE_ENTRIES; e++) {
        free(L->cache[e].block);
        free(L->cache[e].out);
        memset(&L->cache[e], 0, sizeof L->cache[e]);
    }
}

static void close_listener(Front *f, int lid) {
    listener_t *L = &f->listeners[lid];
    if (!L->active)
        return;
    for (int i = 0; i < f->conn_top; i++) {
        conn_t *c = &f->conns[i];
        if (c->state != FREE && c->lid == lid) {
            int bfd = c->bfd, afd = c->afd;
            conn_free(f, c);
            close_fd(bfd);
            close_fd(afd);
        }
    }
    /* what is left counted: handoffs not yet adopted (queued, or taken by Python) */
    f->scopes[L->sid].held -= L->held;
    L->held = 0;
    epoll_ctl(f->epfd, EPOLL_CTL_DEL, L->fd, NULL);
    close(L->fd);
    for (int p = 0; p < L->pooled; p++)
        close(L->pool[p].fd);
    L->pooled = 0;
    clear_cache(L);
    free(L->base);
    L->base = NULL;
    if (--f->scopes[L->sid].refs == 0)
        memset(&f->scopes[L->sid], 0, sizeof(scope_t));
    L->active = 0;
    L->gen++;
    /* handoffs of this listener not yet taken: closed */
    handoff_t **link = &f->queue;
    f->queue_tail = NULL;
    while (*link) {
        handoff_t *h = *link;
        if (h->lid == lid) {
            *link = h->next;
            close_fd(h->bfd);
            close_fd(h->afd);
            free_handoff(h);
            f->queued--;
        } else {
            f->queue_tail = h;
            link = &h->next;
        }
    }
}

static void wake(Front *f) {
    uint64_t one = 1;
    ssize_t ignored = write(f->wakefd, &one, sizeof one);
    (void)ignored;
}

static void Front_stop(Front *f) {
    if (f->listeners == NULL)
        return; /* never initialised */
    if (f->started) {
        pthread_mutex_lock(&f->lock);
        f->stop = 1;
        wake(f);
        pthread_mutex_unlock(&f->lock);
        Py_BEGIN_ALLOW_THREADS pthread_join(f->thread, NULL);
        Py_END_ALLOW_THREADS f->started = 0;
    }
    if (f->listeners) {
        for (int l = 0; l < MAX_LISTENERS; l++)
            close_listener(f, l);
    }
    while (f->queue) {
        handoff_t *h = f->queue;
        f->queue = h->next;
        close_fd(h->bfd);
        close_fd(h->afd);
        free_handoff(h);
    }
    f->queue_tail = NULL;
    f->queued = 0;
    if (f->epfd >= 0)
        close(f->epfd);
    if (f->wakefd >= 0)
        close(f->wakefd);
    if (f->notifyfd >= 0)
        close(f->notifyfd);
    if (f->netlink >= 0)
        close(f->netlink);
    f->epfd = f->wakefd = f->notifyfd = f->netlink = -1;
}

static void Front_dealloc(Front *f) {
    Front_stop(f);
    if (f->listeners != NULL)
        pthread_mutex_destroy(&f->lock);
    free(f->listeners);
    free(f->scopes);
    free(f->conns);
    free(f->buf);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

static int Front_init(Front *f, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"owner", NULL};
    unsigned int owner;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "I", kwlist, &owner))
        return -1;
    if (f->listeners != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Front is made once");
        return -1;
    }
    f->owner = owner;
    f->epfd = f->wakefd = f->notifyfd = f->netlink = -1;
    pthread_mutex_init(&f->lock, NULL);
    f->listeners = calloc(MAX_LISTENERS, sizeof(listener_t));
    for (int l = 0; f->listeners != NULL && l < MAX_LISTENERS; l++)
        f->listeners[l].fd = -1;
    f->conns = calloc(MAX_CONNS, sizeof(conn_t));
    f->scopes = calloc(MAX_LISTENERS, sizeof(scope_t));
    f->buf = malloc(PEEK_MAX);
    if (!f->listeners || !f->conns || !f->buf || !f->scopes) {
        PyErr_NoMemory();
        return -1;
    }
    f->epfd = epoll_create1(EPOLL_CLOEXEC);
    f->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    f->notifyfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (f->epfd < 0 || f->wakefd < 0 || f->notifyfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    f->netlink = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    struct epoll_event ev = {0};
    ev.events = EPOLLIN;
    ev.data.u64 = tag(TAG_WAKE, 0, 0);
    epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->wakefd, &ev);
    /* signals are the main thread's: the thread starts with all of them blocked */
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &before);
    int started = pthread_create(&f->thread, NULL, run, f);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    if (started != 0) {
        PyErr_SetString(PyExc_OSError, "could not start the front's thread");
        return -1;
    }
    f->started = 1;
    return 0;
}

static int not_ready(Front *f) {
    if (f->listeners == NULL || f->epfd < 0) {
        PyErr_SetString(PyExc_ValueError, "the front is not started, or closed");
        return 1;
    }
    return 0;
}

static PyObject *Front_fileno(Front *f, PyObject *unused) {
    if (not_ready(f))
        return NULL;
    return PyLong_FromLong(f->notifyfd);
}

static PyObject *Front_add_listener(Front *f, PyObject *args, PyObject *kwds) {
    if (not_ready(f))
        return NULL;
    static char *kwlist[] = {"fd",    "port", "base_path", "pool_size",  "pool_idle",
                             "keepalive", "grace", "room", "scope", "scope_room", NULL};
    int fd, port, pool_size, room, scope_room;
    unsigned long long scope;
    double pool_idle, keepalive, grace;
    const char *base;
    Py_ssize_t base_len;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iiy#idddiKi", kwlist, &fd, &port, &base,
                                     &base_len, &pool_size, &pool_idle, &keepalive, &grace,
                                     &room, &scope, &scope_room))
        return NULL;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || !(flags & O_NONBLOCK)) {
        PyErr_SetString(PyExc_ValueError, "the listening socket must be non-blocking");
        return NULL;
    }
    if (base_len < 1 || base[0] != '/' || port <= 0 || port > 65535) {
        PyErr_SetString(PyExc_ValueError, "a base path starting with / and a port");
        return NULL;
    }
    if (pool_size > MAX_POOL)
        pool_size = MAX_POOL;
    pthread_mutex_lock(&f->lock);
    int lid = -1;
    for (int l = 0; l < MAX_LISTENERS; l++) {
        if (!f->listeners[l].active) {
            lid = l;
            break;
        }
    }
    if (lid < 0) {
        pthread_mutex_unlock(&f->lock);
        PyErr_SetString(PyExc_OSError, "the front serves no more listeners");
        return NULL;
    }
    int sid = -1, free_sid = -1;
    for (int s = 0; s < MAX_LISTENERS; s++) {
        if (f->scopes[s].refs > 0 && f->scopes[s].key == (uint64_t)scope) {
            sid = s;
            break;
        }
        if (f->scopes[s].refs == 0 && free_sid < 0)
            free_sid = s;
    }
    if (sid < 0) {
        sid = free_sid; /* (a free one exists: there are as many as listeners) */
        f->scopes[sid].key = (uint64_t)scope;
        f->scopes[sid].held = 0;
    }
    f->scopes[sid].room = scope_room;
    listener_t *L = &f->listeners[lid];
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    char *copy = malloc((size_t)base_len);
    if (own < 0 || copy == NULL) {
        if (f->scopes[sid].refs == 0)
            memset(&f->scopes[sid], 0, sizeof(scope_t));
        pthread_mutex_unlock(&f->lock);
        close_fd(own);
        free(copy);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    f->scopes[sid].refs++;
    memcpy(copy, base, (size_t)base_len);
    uint32_t gen = L->gen + 1;
    memset(L, 0, sizeof *L);
    L->gen = gen;
    L->fd = own;
    L->port = (uint16_t)port;
    L->base = copy;
    L->base_len = (size_t)base_len;
    L->pool_size = pool_size;
    L->pool_idle = pool_idle;
    L->keepalive = keepalive;
    L->grace = grace;
    L->room = room;
    L->sid = sid;
    L->active = 1;
    struct epoll_event ev = {0};
    ev.events = EPOLLIN;
    ev.data.u64 = tag(TAG_LISTENER, L->gen, lid);
    if (epoll_ctl(f->epfd, EPOLL_CTL_ADD, own, &ev) != 0) {
        int error = errno;
        close_listener(f, lid);
        pthread_mutex_unlock(&f->lock);
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    pthread_mutex_unlock(&f->lock);
    return PyLong_FromLong(lid);
}

static listener_t *listener_arg(Front *f, int lid) {
    if (lid < 0 || lid >= MAX_LISTENERS || !f->listeners[lid].active)
        return NULL;
    return &f->listeners[lid];
}

static PyObject *Front_remove_listener(Front *f, PyObject *args) {
    if (not_ready(f))
        return NULL;
    int lid;
    if (!PyArg_ParseTuple(args, "i", &lid))
        return NULL;
    pthread_mutex_lock(&f->lock);
    if (listener_arg(f, lid))
        close_listener(f, lid);
    pthread_mutex_unlock(&f->lock);
    Py_RETURN_NONE;
}

static PyObject *Front_set_room(Front *f, PyObject *args) {
    if (not_ready(f))
        return NULL;
    int lid, room, scope_room;
    if (!PyArg_ParseTuple(args, "iii", &lid, &room, &scope_room))
        return NULL;
    pthread_mutex_lock(&f->lock);
    listener_t *L = listener_arg(f, lid);
    if (L) {
        L->room = room;
        f->scopes[L->sid].room = scope_room;
    }
    pthread_mutex_unlock(&f->lock);
    Py_RETURN_NONE;
}

/* scope(key, room): the connections held for the listeners of session `key`; a room of
 * 0 or more is what its limit leaves now (from a listener the front does not serve). */
static PyObject *Front_scope(Front *f, PyObject *args) {
    if (not_ready(f))
        return NULL;
    unsigned long long key;
    int room;
    if (!PyArg_ParseTuple(args, "Ki", &key, &room))
        return NULL;
    int held = 0;
    pthread_mutex_lock(&f->lock);
    for (int s = 0; s < MAX_LISTENERS; s++) {
        if (f->scopes[s].refs > 0 && f->scopes[s].key == (uint64_t)key) {
            if (room >= 0)
                f->scopes[s].room = room;
            held = f->scopes[s].held;
            break;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return PyLong_FromLong(held);
}

static PyObject *Front_held(Front *f, PyObject *args) {
    if (not_ready(f))
        return NULL;
    int lid;
    if (!PyArg_ParseTuple(args, "i", &lid))
        return NULL;
    pthread_mutex_lock(&f->lock);
    listener_t *L = listener_arg(f, lid);
    int held = L ? L->held : 0;
    int pooled = L ? L->pooled : 0;
    int scope_held = L ? f->scopes[L->sid].held : 0;
    unsigned long long relayed = L ? L->relayed : 0, handed = L ? L->handed : 0;
    pthread_mutex_unlock(&f->lock);
    return Py_BuildValue("(iiKKi)", held, pooled, relayed, handed, scope_held);
}

static PyObject *Front_adopted(Front *f, PyObject *args) {
    if (not_ready(f))
        return NULL;
    int lid;
    unsigned int gen;
    if (!PyArg_ParseTuple(args, "iI", &lid, &gen))
        return NULL;
    pthread_mutex_lock(&f->lock);
    listener_t *L = listener_arg(f, lid);
    if (L && L->gen == gen && L->held > 0) {
        L->held--;
        f->scopes[L->sid].held--;
    }
    pthread_mutex_unlock(&f->lock);
    Py_RETURN_NONE;
}

static PyObject *Front_remember(Front *f, PyObject *args) {
    if (not_ready(f))
        return NULL;
    int lid;
    const char *ip, *method, *block, *out;
    Py_ssize_t ip_len, method_len, block_len, out_len;
    if (!PyArg_ParseTuple(args, "iy#y#y#y#", &lid, &ip, &ip_len, &method, &method_len, &block,
                          &block_len, &out, &out_len))
        return NULL;
    int m = 0;
    if (method_len == 3 && memcmp(method, "GET", 3) == 0)
        m = METHOD_GET;
    else if (method_len == 7 && memcmp(method, "OPTIONS", 7) == 0)
        m = METHOD_OPTIONS;
    if (ip_len != 4 || m == 0 || block_len < 2 || block_len >= READ_MAX) {
        PyErr_SetString(PyExc_ValueError, "an IPv4 address, GET or OPTIONS, a block");
        return NULL;
    }
    uint32_t address;
    memcpy(&address, ip, 4);
    pthread_mutex_lock(&f->lock);
    listener_t *L = listener_arg(f, lid);
    if (L == NULL) {
        pthread_mutex_unlock(&f->lock);
        Py_RETURN_FALSE;
    }
    f->clock++;
    entry_t *slot = NULL, *empty = NULL, *oldest = &L->cache[0];
    for (int e = 0; e < CACHE_ENTRIES; e++) {
        entry_t *c = &L->cache[e];
        if (c->block == NULL) {
            if (empty == NULL)
                empty = c;
            continue;
        }
        if (c->ip == address && c->method == m && c->block_len == (size_t)block_len &&
            memcmp(c->block, block, (size_t)block_len) == 0) {
            slot = c; /* the same block again: its translation is the new one */
            break;
        }
        if (c->used < oldest->used || oldest->block == NULL)
            oldest = c;
    }
    if (slot == NULL)
        slot = empty != NULL ? empty : oldest;
    char *b = malloc((size_t)block_len), *o = malloc((size_t)out_len);
    if (b == NULL || o == NULL) {
        pthread_mutex_unlock(&f->lock);
        free(b);
        free(o);
        return PyErr_NoMemory();
    }
    memcpy(b, block, (size_t)block_len);
    memcpy(o, out, (size_t)out_len);
    free(slot->block);
    free(slot->out);
    slot->ip = address;
    slot->method = m;
    slot->block = b;
    slot->block_len = (size_t)block_len;
    slot->out = o;
    slot->out_len = (size_t)out_len;
    slot->used = f->clock;
    pthread_mutex_unlock(&f->lock);
    Py_RETURN_TRUE;
}

static PyObject *Front_park(Front *f, PyObject *args) {
    if (not_ready(f))
        return NULL;
    int lid, fd;
    if (!PyArg_ParseTuple(args, "ii", &lid, &fd))
        return NULL;
    pthread_mutex_lock(&f->lock);
    listener_t *L = listener_arg(f, lid);
    if (L == NULL || L->pool_size <= 0 || L->pooled >= L->pool_size) {
        pthread_mutex_unlock(&f->lock);
        Py_RETURN_FALSE;
    }
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (own < 0) {
        pthread_mutex_unlock(&f->lock);
        Py_RETURN_FALSE;
    }
    pool_put(L, own, now_seconds());
    pthread_mutex_unlock(&f->lock);
    Py_RETURN_TRUE;
}

static PyObject *Front_take(Front *f, PyObject *unused) {
    if (not_ready(f))
        return NULL;
    uint64_t count;
    ssize_t ignored = read(f->notifyfd, &count, sizeof count);
    (void)ignored;
    pthread_mutex_lock(&f->lock);
    handoff_t *first = f->queue;
    f->queue = f->queue_tail = NULL;
    f->queued = 0;
    for (int l = 0; l < MAX_LISTENERS; l++) {
        listener_t *L = &f->listeners[l];
        if (L->active && L->queue_paused) {
            struct epoll_event ev = {0};
            ev.events = L->paused ? 0 : EPOLLIN;
            ev.data.u64 = tag(TAG_LISTENER, L->gen, l);
            epoll_ctl(f->epfd, EPOLL_CTL_MOD, L->fd, &ev);
            L->queue_paused = 0;
        }
    }
    pthread_mutex_unlock(&f->lock);
    PyObject *list = PyList_New(0);
    for (handoff_t *h = first; h && list; h = h->next) {
        char address[INET_ADDRSTRLEN];
        struct in_addr in = {h->ip};
        inet_ntop(AF_INET, &in, address, sizeof address);
        PyObject *item = Py_BuildValue(
            "(iiiisiy#y#OOI)", h->lid, h->kind, h->bfd, h->afd, address, (int)h->port,
            h->data ? h->data : "", (Py_ssize_t)h->data_len, h->pending ? h->pending : "",
            (Py_ssize_t)h->pending_len, h->checked != UNCHECKED ? Py_True : Py_False,
            h->checked == COUNTED ? Py_True : Py_False, (unsigned int)h->gen);
        if (item == NULL || PyList_Append(list, item) != 0)
            Py_CLEAR(list);
        Py_XDECREF(item);
    }
    for (handoff_t *h = first; h;) {
        handoff_t *next = h->next;
        if (list == NULL) { /* none reaches Python: none stays open */
            close_fd(h->bfd);
            close_fd(h->afd);
        }
        free_handoff(h);
        h = next;
    }
    return list;
}

static PyObject *Front_close(Front *f, PyObject *unused) {
    Front_stop(f);
    Py_RETURN_NONE;
}

static PyMethodDef Front_methods[] = {
    {"fileno", (PyCFunction)Front_fileno, METH_NOARGS,
     "The descriptor that is readable while handoffs wait."},
    {"add_listener", (PyCFunction)(void (*)(void))Front_add_listener,
     METH_VARARGS | METH_KEYWORDS, "Serve a listening socket (a duplicate is kept); its id."},
    {"remove_listener", (PyCFunction)Front_remove_listener, METH_VARARGS,
     "Close everything held for a listener."},
    {"set_room", (PyCFunction)Front_set_room, METH_VARARGS,
     "How many connections of a listener may be held here."},
    {"held", (PyCFunction)Front_held, METH_VARARGS,
     "(connections held, app connections parked, exchanges relayed whole, connections "
     "handed over) of a listener."},
    {"scope", (PyCFunction)Front_scope, METH_VARARGS,
     "scope(key, room): a session's held connections; room >= 0 sets what its limit leaves."},
    {"adopted", (PyCFunction)Front_adopted, METH_VARARGS,
     "adopted(id, generation): the relay counts a counted handoff now; the front no more."},
    {"remember", (PyCFunction)Front_remember, METH_VARARGS,
     "remember(id, ip4, method, block, translated): a checked request block."},
    {"park", (PyCFunction)Front_park, METH_VARARGS,
     "Keep a duplicate of an idle app connection; False: no room."},
    {"take", (PyCFunction)Front_take, METH_NOARGS,
     "The handoffs waiting: (id, kind, browser fd, app fd, host, port, data, pending, "
     "checked, counted, generation)."},
    {"close", (PyCFunction)Front_close, METH_NOARGS, "Stop the thread, close everything."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FrontType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sandbridge.relay._front.Front",
    .tp_basicsize = sizeof(Front),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Front_init,
    .tp_dealloc = (destructor)Front_dealloc,
    .tp_methods = Front_methods,
    .tp_doc = "The relay's front door for new browser connections (a thread).",
};

/* Pure functions, for the tests that compare them with the Python relay's. */
static PyObject *py_translate_response(PyObject *self, PyObject *args) {
    const char *buf;
    Py_ssize_t n;
    int head;
    if (!PyArg_ParseTuple(args, "y#p", &buf, &n, &head))
        return NULL;
    char *out = NULL;
    size_t out_len = 0, whole = 0;
    int r = translate_response(buf, (size_t)n, head, &out, &out_len, &whole);
    if (r != TR_OK)
        return Py_BuildValue("(iOn)", r, Py_None, (Py_ssize_t)0);
    PyObject *result = Py_BuildValue("(iy#n)", r, out, (Py_ssize_t)out_len, (Py_ssize_t)whole);
    free(out);
    return result;
}

static PyMethodDef module_methods[] = {
    {"translate_response", py_translate_response, METH_VARARGS,
     "translate_response(data, head_request) -> (0 ok | 1 incomplete | 2 not here, head, "
     "whole)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "sandbridge.relay._front",
                                    "The relay's front door, in C.", -1, module_methods};

PyMODINIT_FUNC PyInit__front(void) {
    if (PyType_Ready(&FrontType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FrontType);
    if (PyModule_AddObject(m, "Front", (PyObject *)&FrontType) < 0) {
        Py_DECREF(&FrontType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "FRESH", KIND_FRESH);
    PyModule_AddIntConstant(m, "SENT", KIND_SENT);
    PyModule_AddIntConstant(m, "RETRY", KIND_RETRY);
    PyModule_AddIntConstant(m, "READ_MAX", READ_MAX);
    PyModule_AddIntConstant(m, "PEEK_MAX", PEEK_MAX);
    return m;
}

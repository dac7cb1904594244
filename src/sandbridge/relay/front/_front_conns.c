/* The front door's connections, pools and handoffs: see _front_thread.h. Every function
 * here runs with the front's mutex held. */
#include "_front_thread.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t tag(int kind, uint32_t gen, int index) {
    return ((uint64_t)kind << 56) | ((uint64_t)(gen & 0xFFFFFF) << 32) | (uint32_t)index;
}

void unpoll(front_t *f, int fd, int *polled) {
    if (*polled) {
        epoll_ctl(f->epfd, EPOLL_CTL_DEL, fd, NULL);
        *polled = 0;
    }
}

int poll_fd(front_t *f, int fd, int *polled, uint32_t events, uint64_t data) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = events;
    ev.data.u64 = data;
    if (epoll_ctl(f->epfd, *polled ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0)
        return -1;
    *polled = 1;
    return 0;
}

/* The one way the thread closes a descriptor: out of its epoll set first, while the number
 * still names it (closed first, the number may already be another descriptor's, of this
 * thread's next accept or of Python's, and the removal would miss, or remove that one).
 * polled: the descriptor's flag of the set, NULL for one never put in it. */
void close_fd(front_t *f, int *fd, int *polled) {
    if (polled != NULL)
        unpoll(f, *fd, polled);
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* An idle app connection still is: nothing from the app (bytes answering nothing, or
 * its end) came on it while it waited. */
int still_idle(int fd) {
    char probe;
    return recv(fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
           (errno == EAGAIN || errno == EWOULDBLOCK);
}

int pool_take(front_t *f, listener_t *L, double now) {
    while (L->pooled > 0) {
        parked_t p = L->pool[--L->pooled];
        if (p.deadline > now && still_idle(p.fd))
            return p.fd;
        close_fd(f, &p.fd, NULL); /* expired, or closed or written to while it waited */
    }
    return -1;
}

void pool_put(front_t *f, listener_t *L, int fd, double now) {
    if (!L->active || L->pool_size <= 0) {
        close_fd(f, &fd, NULL);
        return;
    }
    if (L->pooled >= L->pool_size) {
        close_fd(f, &L->pool[0].fd, NULL);
        memmove(&L->pool[0], &L->pool[1], sizeof(parked_t) * (size_t)(L->pooled - 1));
        L->pooled--;
    }
    L->pool[L->pooled].fd = fd;
    L->pool[L->pooled].deadline = now + L->pool_idle;
    L->pooled++;
}

static void signal_python(front_t *f) {
    uint64_t one = 1;
    ssize_t ignored = write(f->notifyfd, &one, sizeof one);
    (void)ignored;
}

void enqueue(front_t *f, int lid, int kind, int bfd, int afd, int checked, uint32_t ip,
                    uint16_t port, const char *data, size_t data_len, const char *pending,
                    size_t pending_len) {
    handoff_t *h = fault(FAULT_HANDOFF) ? NULL : calloc(1, sizeof *h);
    char *d = data_len ? malloc(data_len) : NULL;
    char *pd = pending_len ? malloc(pending_len) : NULL;
    if (h == NULL || (data_len && d == NULL) || (pending_len && pd == NULL)) {
        free(h);
        free(d);
        free(pd);
        close_fd(f, &bfd, NULL); /* out of memory: dropped, as an accept that failed */
        close_fd(f, &afd, NULL);
        if (checked == COUNTED) /* and its place in the limits with it */
            uncount(f, lid, f->listeners[lid].gen);
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
    f->listeners[lid].handed += kind != KIND_WANT; /* (a WANT hands over no connection) */
    if (f->queue_tail)
        f->queue_tail->next = h;
    else
        f->queue = h;
    f->queue_tail = h;
    if (f->queued++ == 0)
        signal_python(f);
}

conn_t *conn_new(front_t *f) {
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
void conn_release(front_t *f, conn_t *c, int counted) {
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

void conn_free(front_t *f, conn_t *c) { conn_release(f, c, 0); }

/* To the Python relay: the browser's bytes not yet sent (data), an idle app connection
 * that goes with it (or -1), bytes of a response still to write to the browser. */
void hand_fresh(front_t *f, conn_t *c, const char *data, size_t len, const char *pending,
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
void hand_sent(front_t *f, conn_t *c) {
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

/* To the Python relay: the request c keeps (c->req), unanswered: a waiting one (WAIT),
 * or (retried) one the app closed its kept connection on, to be sent once more. */
void hand_kept_request(front_t *f, conn_t *c, int retried) {
    char *req = c->req;
    size_t len = c->req_len;
    c->req = NULL;
    hand_fresh(f, c, req, len, NULL, 0, retried);
    free(req);
}

/* Both connections closed, as the relay drops an exchange it cannot go on with. */
void drop_both(front_t *f, conn_t *c) {
    close_fd(f, &c->afd, &c->a_polled);
    close_fd(f, &c->bfd, &c->b_polled);
    conn_free(f, c);
}

void browser_gone(front_t *f, conn_t *c, double now) {
    listener_t *L = &f->listeners[c->lid];
    int afd = c->afd;
    c->afd = -1;
    if (afd >= 0) {
        unpoll(f, afd, &c->a_polled);
        pool_put(f, L, afd, now);
    }
    close_fd(f, &c->bfd, &c->b_polled);
    conn_free(f, c);
}

void free_handoff(handoff_t *h) {
    free(h->data);
    free(h->pending);
    free(h);
}

/* A connection counted here (handed over COUNTED) that the relay will never count: its
 * place is its lease's again (1). Nothing if listener lid is gone or was re-added since (gen): its
 * counts went with it. */
int uncount(front_t *f, int lid, uint32_t gen) {
    listener_t *L = listener_at(f, lid);
    if (!L || L->gen != gen || L->held <= 0)
        return 0;
    L->held--;
    f->scopes[L->sid].held--;
    return 1;
}

#ifdef SANDBRIDGE_FAULTS
static int armed[FAULT_SITES];

int fault(int site) {
    int left = __atomic_load_n(&armed[site], __ATOMIC_SEQ_CST);
    while (left > 0)
        if (__atomic_compare_exchange_n(&armed[site], &left, left - 1, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            return 1;
    return 0;
}

void fault_arm(int site, int count) { __atomic_store_n(&armed[site], count, __ATOMIC_SEQ_CST); }
#endif

void wake(front_t *f) {
    uint64_t one = 1;
    ssize_t ignored = write(f->wakefd, &one, sizeof one);
    (void)ignored;
}

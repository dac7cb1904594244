/* The front door's thread: it accepts, checks the connection's owner, and relays what the
 * translation (_front_translate.h) states exactly; anything else goes to the Python relay
 * at once, as if it had been there from the accept (docs/relay.md, "The front door"). */
#define _GNU_SOURCE /* accept4 */
#include "_front_thread.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <signal.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "_front_owner.h"

static int send_whole(int fd, const char *data, size_t len) {
    ssize_t sent = send(fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    return sent == (ssize_t)len ? 0 : -1;
}

#define EDGE (EPOLLIN | EPOLLRDHUP | EPOLLET)

static void on_browser(front_t *f, conn_t *c, double now);

/* c's request (data, n bytes), its translation known, and no idle app connection: it
 * waits for the one the relay opens for it (a request the relay would otherwise take,
 * with the connection for good). */
static void wait_for_app(front_t *f, conn_t *c, const char *data, size_t n, double now) {
    listener_t *L = &f->listeners[c->lid];
    char *req = fault(FAULT_REQUEST) ? NULL : malloc(n);
    if (req == NULL ||
        (!c->b_polled && poll_fd(f, c->bfd, &c->b_polled, EDGE,
                                 tag(TAG_BROWSER, c->gen, (int)(c - f->conns))))) {
        free(req);
        hand_fresh(f, c, data, n, NULL, 0, 0);
        return;
    }
    memcpy(req, data, n);
    free(c->req);
    c->req = req;
    c->req_len = n;
    if (c->state != WAIT) /* (waiting again: its grace is the one it had) */
        c->deadline = now + L->grace;
    c->state = WAIT;
    enqueue(f, c->lid, KIND_WANT, -1, -1, UNCHECKED, c->ip, c->port, NULL, 0, NULL, 0);
}

/* A request from the browser of c (data, n bytes): relayed from here, or handed over. */
void serve_request(front_t *f, conn_t *c, const char *data, size_t n, double now) {
    listener_t *L = &f->listeners[c->lid];
    int method = 0;
    if (c->afd >= 0 && !still_idle(c->afd)) { /* the app wrote to it, or closed it, */
        close_fd(f, &c->afd, &c->a_polled);    /* between two requests */
        c->a_new = 0;
    }
    size_t out_len = 0;
    char *out = n < READ_MAX ? translate_request(L->cache, L->base, L->base_len, c->ip, data, n,
                                                 &method, &out_len, &f->clock)
                          : NULL;
    if (out == NULL) {
        /* the relay's: with an idle app connection, for a request that may take one */
        if (c->afd < 0 && retryable(data, n))
            c->afd = pool_take(f, L, now);
        hand_fresh(f, c, data, n, NULL, 0, 0);
        return;
    }
    if (c->afd < 0)
        c->afd = pool_take(f, L, now);
    if (c->afd < 0) {
        free(out);
        wait_for_app(f, c, data, n, now);
        return;
    }
    char *req = fault(FAULT_REQUEST) ? NULL : malloc(n);
    int failed = req != NULL && send_whole(c->afd, out, out_len) != 0;
    if (req == NULL || failed) {
        /* no memory (nothing sent), or it failed as the request went: nothing of it is
         * answered, and the relay sends it once more, on a new connection */
        free(out);
        free(req);
        close_fd(f, &c->afd, &c->a_polled);
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
    int index = (int)(c - f->conns);
    if ((!c->b_polled && poll_fd(f, c->bfd, &c->b_polled, EDGE, tag(TAG_BROWSER, c->gen, index))) ||
        (!c->a_polled && poll_fd(f, c->afd, &c->a_polled, EDGE, tag(TAG_APP, c->gen, index))))
        hand_sent(f, c);
}

/* The app's side of c became readable while its request was out. */
static void on_app(front_t *f, conn_t *c, double now) {
    ssize_t n = recv(c->afd, f->buf, PEEK_MAX, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0 && c->a_new) {
        /* A connection opened for this request, closed unanswered: the relay reads that
         * end as its answer (a 502), as it does on a connection of its own. */
        hand_sent(f, c);
        return;
    }
    if (n <= 0) {
        /* The app closed the idle connection as the request went out (its own
         * keep-alive ran out): the relay sends it once more, on a new connection, as the
         * pool's rule says. */
        close_fd(f, &c->afd, &c->a_polled);
        hand_kept_request(f, c, 1);
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
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        free(out);
        browser_gone(f, c, now);
        return;
    }
    if (sent < (ssize_t)total) {
        size_t done = sent < 0 ? 0 : (size_t)sent;
        /* the rest goes from the Python relay, with the connection */
        char *rest = fault(FAULT_REST) ? NULL : malloc(total - done);
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
    c->a_new = 0; /* (used once: from now on it is a kept one) */
    f->listeners[c->lid].relayed++;
    c->state = IDLE;
    c->deadline = now + f->listeners[c->lid].keepalive;
    if (c->b_ready) /* the browser's next request (or its end) came meanwhile */
        on_browser(f, c, now);
}

static void on_browser(front_t *f, conn_t *c, double now) {
    c->b_ready = 0; /* read now: what came before is in what this reads */
    ssize_t n = recv(c->bfd, f->buf, READ_MAX, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        browser_gone(f, c, now);
        return;
    }
    serve_request(f, c, f->buf, (size_t)n, now);
}

/* A connection accepted and its owner asked (owner_check's answer). */
typedef struct {
    int fd; /* -1: none (error: accept4's errno) */
    int error;
    int owner;
    struct sockaddr_in peer;
} arrival_t;

/* One accept on listener lid, and the netlink question about its owner, without the mutex
 * (called with it, returns with it): they are the thread's slowest calls, and Python's
 * calls wait for that mutex holding the GIL, the event loop with them. Only this thread
 * uses the netlink socket; a listening socket Python removes meanwhile is closed here. */
static arrival_t accept_unlocked(front_t *f, int lid) {
    listener_t *L = &f->listeners[lid];
    int listening = L->fd;
    uint16_t listening_port = L->port;
    f->accepting = lid;
    f->accepting_fd = listening;
    pthread_mutex_unlock(&f->lock);
    arrival_t a = {.fd = -1, .error = 0, .owner = -1};
    socklen_t peer_len = sizeof a.peer;
    a.fd = accept4(listening, (struct sockaddr *)&a.peer, &peer_len,
                   SOCK_NONBLOCK | SOCK_CLOEXEC);
    a.error = errno;
    if (a.fd >= 0) {
        int one = 1;
        setsockopt(a.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (peer_len == sizeof a.peer && a.peer.sin_family == AF_INET)
            a.owner = owner_check(f->netlink, &f->sequence, f->owner, &a.peer, listening_port);
    }
    pthread_mutex_lock(&f->lock);
    f->accepting = f->accepting_fd = -1;
    close_fd(f, &f->deferred_close, NULL);
    return a;
}

static void on_listener(front_t *f, int lid, double now) {
    listener_t *L = &f->listeners[lid];
    uint32_t gen = L->gen;
    for (int k = 0; k < MAX_BATCH && L->active && L->gen == gen && !f->stop; k++) {
        if (f->queued >= MAX_QUEUE) {
            /* the event loop is behind: new connections wait in the kernel's queue until
             * it has taken what waits here (Front_take starts the listener again) */
            struct epoll_event ev = {0};
            ev.data.u64 = tag(TAG_LISTENER, L->gen, lid);
            epoll_ctl(f->epfd, EPOLL_CTL_MOD, L->fd, &ev);
            L->queue_paused = 1;
            return;
        }
        arrival_t a = accept_unlocked(f, lid);
        int fd = a.fd;
        if (!L->active || L->gen != gen || f->stop) {
            close_fd(f, &fd, NULL); /* the listener went meanwhile */
            return;
        }
        if (fd < 0) {
            int error = a.error;
            if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
                /* out of descriptors: the queue waits a tenth of a second, not a spin */
                struct epoll_event ev = {0};
                ev.data.u64 = tag(TAG_LISTENER, L->gen, lid);
                epoll_ctl(f->epfd, EPOLL_CTL_MOD, L->fd, &ev);
                L->paused = 1;
                L->paused_until = now + 0.1;
            }
            return;
        }
        uint32_t ip = a.peer.sin_addr.s_addr;
        uint16_t port = ntohs(a.peer.sin_port);
        int owner = a.owner;
        if (owner == 0 && L->refused_said) {
            /* another user's: closed unanswered, as the Python relay does */
            close_fd(f, &fd, NULL);
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
            if (poll_fd(f, fd, &c->b_polled, EDGE, tag(TAG_BROWSER, c->gen, (int)(c - f->conns))))
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

static double next_deadline(front_t *f, double now) {
    double next = now + 1.0;
    for (int i = 0; i < f->conn_top; i++)
        if (f->conns[i].state != FREE && f->conns[i].deadline < next)
            next = f->conns[i].deadline;
    for (int i = 0; i < f->live_count; i++) {
        listener_t *L = &f->listeners[f->live[i]];
        if (L->pooled > 0 && L->pool[0].deadline < next)
            next = L->pool[0].deadline;
        if (L->paused && L->paused_until < next)
            next = L->paused_until;
    }
    return next;
}

static void expire(front_t *f, double now) {
    for (int i = 0; i < f->conn_top; i++) {
        conn_t *c = &f->conns[i];
        if (c->state == FREE || c->deadline > now)
            continue;
        if (c->state == AWAIT)
            hand_sent(f, c); /* the app is slow: the Python relay waits on, with its timeout */
        else if (c->state == WAIT)
            hand_kept_request(f, c, 0); /* no app connection came: the relay sends it */
        else
            browser_gone(f, c, now); /* silent for the keep-alive timeout: closed */
    }
    for (int i = 0; i < f->live_count; i++) {
        int l = f->live[i];
        listener_t *L = &f->listeners[l];
        int kept = 0;
        for (int p = 0; p < L->pooled; p++) {
            if (L->pool[p].deadline <= now)
                close_fd(f, &L->pool[p].fd, NULL);
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

void *front_run(void *arg) {
    front_t *f = arg;
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
                else if (kind == TAG_BROWSER) /* its request is out: read once it is answered */
                    c->b_ready = 1;
            }
        }
        if (!f->stop)
            expire(f, now);
        pthread_mutex_unlock(&f->lock);
    }
}

int front_start(front_t *f, uint32_t owner) {
    f->owner = owner;
    f->accepting = f->accepting_fd = f->deferred_close = -1;
    f->epfd = f->wakefd = f->notifyfd = f->netlink = -1;
    pthread_mutex_init(&f->lock, NULL);
    f->lock_ready = 1;
    f->listeners = calloc(MAX_LISTENERS, sizeof(listener_t));
    for (int l = 0; f->listeners != NULL && l < MAX_LISTENERS; l++)
        f->listeners[l].fd = -1;
    f->conns = calloc(MAX_CONNS, sizeof(conn_t));
    f->scopes = calloc(MAX_LISTENERS, sizeof(scope_t));
    f->buf = malloc(PEEK_MAX);
    if (!f->listeners || !f->conns || !f->buf || !f->scopes)
        return ENOMEM;
    f->epfd = epoll_create1(EPOLL_CLOEXEC);
    f->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    f->notifyfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (f->epfd < 0 || f->wakefd < 0 || f->notifyfd < 0)
        return errno;
    /* -1 where netlink is refused: every owner is then the Python relay's to check */
    f->netlink = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    int wake_polled = 0;
    if (poll_fd(f, f->wakefd, &wake_polled, EPOLLIN, tag(TAG_WAKE, 0, 0)) != 0)
        return errno;
    /* signals are the main thread's: the thread starts with all of them blocked */
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &before);
    int started = pthread_create(&f->thread, NULL, front_run, f);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    if (started != 0)
        return started;
    f->started = 1;
    return 0;
}

void front_stop(front_t *f) {
    if (f->listeners == NULL)
        return; /* never initialised */
    if (f->started) {
        pthread_mutex_lock(&f->lock);
        f->stop = 1;
        wake(f);
        pthread_mutex_unlock(&f->lock);
        pthread_join(f->thread, NULL);
        f->started = 0;
    }
    for (int l = 0; l < MAX_LISTENERS; l++)
        close_listener(f, l);
    while (f->queue) {
        handoff_t *h = f->queue;
        f->queue = h->next;
        close_fd(f, &h->bfd, NULL);
        close_fd(f, &h->afd, NULL);
        free_handoff(h);
    }
    f->queue_tail = NULL;
    f->queued = 0;
    /* the epoll set first: the descriptors still in it (the wake-up's) leave with it */
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

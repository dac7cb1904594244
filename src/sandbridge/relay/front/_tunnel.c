/* sandbridge.relay.front._tunnel: an upgraded connection's bytes (a WebSocket after its 101),
 * copied both ways by a thread of its own, without the interpreter (relay/listener/tunnel.py).
 *
 * The Python tunnel (two Pump protocols) costs a wake-up of the event loop, a Python
 * callback, a bytes object and uvloop's bookkeeping per message; here a message costs
 * the epoll_wait that reports it, one recv and one send (docs/benchmarks.md). The rules
 * are the Python tunnel's, which tests/relay/listener/test_tunnel_c.py checks side by side:
 *
 * - bytes go both ways untouched, in order; a direction holds at most one read (READ_MAX)
 *   that its destination did not take, and reads nothing more from its source until the
 *   destination has taken it (backpressure end to end, as the pumps' pause_reading);
 * - an end of stream is passed on as a half close (shutdown SHUT_WR) once what came
 *   before it is written; the other direction goes on for the tunnel's grace, then both
 *   sockets are closed; both ended: both closed at once;
 * - an error on either socket (a reset, a failed send) closes both at once;
 * - every tunnel ends in closed(): Python learns it there, woken by an eventfd.
 *
 * Every recv and send is MSG_DONTWAIT: no descriptor's flags can block the thread. One
 * mutex guards the table; Python's calls only take it for a few syscalls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_MAX (256 * 1024) /* one read, as the Python relay's READ_BYTES */
#define MAX_TUNNELS 65536     /* past it, tunnels stay with the Python relay */
#define MAX_EVENTS 64
#define WAKE_TAG UINT64_MAX

typedef struct {
    int active;
    uint32_t gen;
    int fd[2];
    uint32_t mask[2]; /* the events fd[k] is in the epoll set for; 0: not in it */
    char *pend[2];    /* read from fd[d], not yet taken by fd[1 - d] */
    size_t pend_off[2], pend_len[2];
    int eof[2];  /* fd[d] ended */
    int shut[2]; /* that end was passed on to fd[1 - d] */
    double grace;    /* how long the other direction may go on after the first end */
    double deadline; /* after the first end: when both are closed; 0: none */
} tunnel_t;

static struct {
    pthread_mutex_t lock;
    pthread_t thread;
    int started, epfd, wakefd, notifyfd;
    tunnel_t *slots;
    int top;   /* slots[0..top) may be active */
    int count; /* active tunnels */
    int timed; /* active tunnels with a deadline: the only reason to look at the clock */
    uint64_t *closed;
    size_t closed_len, closed_cap;
    char *buf;
} T = {.lock = PTHREAD_MUTEX_INITIALIZER, .epfd = -1, .wakefd = -1, .notifyfd = -1};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t tunnel_id(int index, uint32_t gen) { return ((uint64_t)gen << 32) | (uint32_t)index; }

static uint64_t fd_tag(int index, uint32_t gen, int k) {
    return ((uint64_t)gen << 32) | ((uint64_t)k << 31) | (uint32_t)index;
}

/* Puts fd[k] in the epoll set for what it is waited on for: readable while its direction
 * reads (no end yet, nothing held back), writable while the other direction holds bytes
 * for it. Out of the set when neither (level-triggered: a hung-up socket nobody waits
 * on would be reported at every wait). */
static int update_mask(tunnel_t *t, int index, int k) {
    uint32_t want = 0;
    if (!t->eof[k] && t->pend_len[k] == 0)
        want |= EPOLLIN;
    if (t->pend_len[1 - k] > 0)
        want |= EPOLLOUT;
    if (want == t->mask[k])
        return 0;
    if (want == 0) {
        epoll_ctl(T.epfd, EPOLL_CTL_DEL, t->fd[k], NULL);
        t->mask[k] = 0;
        return 0;
    }
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = want;
    ev.data.u64 = fd_tag(index, t->gen, k);
    if (epoll_ctl(T.epfd, t->mask[k] ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, t->fd[k], &ev) != 0)
        return -1;
    t->mask[k] = want;
    return 0;
}

static void notify_python(void) {
    uint64_t one = 1;
    ssize_t ignored = write(T.notifyfd, &one, sizeof one);
    (void)ignored;
}

/* The one way a tunnel's socket is closed: out of the epoll set first, while the number
 * still names it (closed first, the number may already be another descriptor's). */
static void close_fd(int *fd, uint32_t *mask) {
    if (*mask)
        epoll_ctl(T.epfd, EPOLL_CTL_DEL, *fd, NULL);
    *mask = 0;
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Both sockets out of the set, closed, the tunnel reported to closed(). */
static void finish(int index) {
    tunnel_t *t = &T.slots[index];
    for (int k = 0; k < 2; k++) {
        close_fd(&t->fd[k], &t->mask[k]);
        free(t->pend[k]);
    }
    uint64_t id = tunnel_id(index, t->gen);
    uint32_t gen = t->gen;
    if (t->deadline > 0)
        T.timed--;
    memset(t, 0, sizeof *t);
    t->gen = gen + 1;
    T.count--;
    while (T.top > 0 && !T.slots[T.top - 1].active)
        T.top--;
    T.closed[T.closed_len++] = id; /* room: add() keeps one a tunnel */
    notify_python();
}

/* Sends what direction d holds back; 0: all of it went, 1: the rest waits, -1: failed. */
static int flush(tunnel_t *t, int d) {
    while (t->pend_len[d] > 0) {
        ssize_t s = send(t->fd[1 - d], t->pend[d] + t->pend_off[d], t->pend_len[d],
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (s < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
        t->pend_off[d] += (size_t)s;
        t->pend_len[d] -= (size_t)s;
    }
    free(t->pend[d]);
    t->pend[d] = NULL;
    t->pend_off[d] = 0;
    return 0;
}

/* One read of direction d passed on; -1: the tunnel failed. */
static int carry(tunnel_t *t, int d) {
    ssize_t n = recv(t->fd[d], T.buf, READ_MAX, MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    if (n == 0) {
        t->eof[d] = 1;
        return 0;
    }
    ssize_t s = send(t->fd[1 - d], T.buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (s < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        return -1;
    size_t sent = s < 0 ? 0 : (size_t)s;
    if (sent < (size_t)n) {
        t->pend[d] = malloc((size_t)n - sent);
        if (t->pend[d] == NULL)
            return -1;
        memcpy(t->pend[d], T.buf + sent, (size_t)n - sent);
        t->pend_len[d] = (size_t)n - sent;
    }
    return 0;
}

/* What fd[k]'s readiness (events) allows, for both directions it is part of. */
static void serve(int index, int k, uint32_t events, double now) {
    tunnel_t *t = &T.slots[index];
    int failed = 0;
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) && t->pend_len[1 - k] > 0)
        failed |= flush(t, 1 - k) < 0;
    if (!failed && (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) && !t->eof[k] && t->pend_len[k] == 0)
        failed |= carry(t, k) < 0;
    for (int d = 0; d < 2 && !failed; d++) {
        if (t->eof[d] && !t->shut[d] && t->pend_len[d] == 0) {
            shutdown(t->fd[1 - d], SHUT_WR); /* (a socket already gone: its error comes next) */
            t->shut[d] = 1;
            if (t->deadline == 0) {
                t->deadline = now + t->grace;
                T.timed++;
            }
        }
    }
    if (failed || (t->shut[0] && t->shut[1]) || update_mask(t, index, 0) != 0 ||
        update_mask(t, index, 1) != 0)
        finish(index);
}

static int next_timeout_ms(double now) {
    double first = 0;
    for (int i = 0; T.timed > 0 && i < T.top; i++)
        if (T.slots[i].active && T.slots[i].deadline > 0 &&
            (first == 0 || T.slots[i].deadline < first))
            first = T.slots[i].deadline;
    if (first == 0)
        return -1;
    double ms = (first - now) * 1000.0 + 1.0;
    return ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms;
}

static void *run(void *unused) {
    struct epoll_event events[MAX_EVENTS];
    pthread_mutex_lock(&T.lock);
    for (;;) {
        int timeout = next_timeout_ms(now_seconds());
        pthread_mutex_unlock(&T.lock);
        int n = epoll_wait(T.epfd, events, MAX_EVENTS, timeout);
        pthread_mutex_lock(&T.lock);
        double now = now_seconds();
        for (int e = 0; e < n; e++) {
            uint64_t tag = events[e].data.u64;
            if (tag == WAKE_TAG) {
                uint64_t drained;
                ssize_t ignored = read(T.wakefd, &drained, sizeof drained);
                (void)ignored;
                continue;
            }
            int index = (int)(tag & 0x7FFFFFFF);
            int k = (int)((tag >> 31) & 1);
            uint32_t gen = (uint32_t)(tag >> 32);
            if (index >= T.top || !T.slots[index].active || T.slots[index].gen != gen)
                continue; /* finished earlier in this batch, or by abort() */
            serve(index, k, events[e].events, now);
        }
        for (int i = 0; T.timed > 0 && i < T.top; i++)
            if (T.slots[i].active && T.slots[i].deadline > 0 && T.slots[i].deadline <= now)
                finish(i);
    }
    return NULL;
}

static int start_locked(void) {
    if (T.started)
        return 0;
    T.buf = malloc(READ_MAX);
    T.slots = calloc(MAX_TUNNELS, sizeof *T.slots);
    T.epfd = epoll_create1(EPOLL_CLOEXEC);
    T.wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    T.notifyfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.u64 = WAKE_TAG;
    if (T.buf == NULL || T.slots == NULL || T.epfd < 0 || T.wakefd < 0 || T.notifyfd < 0 ||
        epoll_ctl(T.epfd, EPOLL_CTL_ADD, T.wakefd, &ev) != 0)
        goto failed;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int started = pthread_create(&T.thread, &attr, run, NULL);
    pthread_attr_destroy(&attr);
    if (started != 0)
        goto failed;
    T.started = 1;
    return 0;
failed:
    free(T.buf);
    free(T.slots);
    T.buf = NULL;
    T.slots = NULL;
    for (int *fd = &T.epfd; fd <= &T.notifyfd; fd++) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
    }
    return -1;
}

static PyObject *tunnel_start(PyObject *self, PyObject *unused) {
    pthread_mutex_lock(&T.lock);
    int failed = start_locked();
    int fd = T.notifyfd;
    pthread_mutex_unlock(&T.lock);
    if (failed)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(fd);
}

static PyObject *tunnel_add(PyObject *self, PyObject *args) {
    int a, b;
    double grace;
    if (!PyArg_ParseTuple(args, "iid", &a, &b, &grace))
        return NULL;
    if (a < 0 || b < 0 || a == b || !(grace >= 0)) {
        PyErr_SetString(PyExc_ValueError, "two distinct descriptors and a grace >= 0");
        return NULL;
    }
    pthread_mutex_lock(&T.lock);
    if (!T.started) {
        pthread_mutex_unlock(&T.lock);
        PyErr_SetString(PyExc_RuntimeError, "start() first");
        return NULL;
    }
    int index = -1;
    for (int i = 0; i < MAX_TUNNELS; i++)
        if (!T.slots[i].active) {
            index = i;
            break;
        }
    if (index < 0) {
        pthread_mutex_unlock(&T.lock);
        PyErr_SetString(PyExc_OverflowError, "too many tunnels");
        return NULL;
    }
    /* room to report every open tunnel's end: finish() never allocates */
    if (T.closed_cap < T.closed_len + (size_t)T.count + 1) {
        size_t cap = (T.closed_len + (size_t)T.count + 1) * 2;
        uint64_t *grown = realloc(T.closed, cap * sizeof *grown);
        if (grown == NULL) {
            pthread_mutex_unlock(&T.lock);
            return PyErr_NoMemory();
        }
        T.closed = grown;
        T.closed_cap = cap;
    }
    tunnel_t *t = &T.slots[index];
    t->active = 1;
    t->fd[0] = a;
    t->fd[1] = b;
    t->grace = grace;
    if (index >= T.top)
        T.top = index + 1;
    T.count++;
    uint64_t id = tunnel_id(index, t->gen);
    if (update_mask(t, index, 0) != 0 || update_mask(t, index, 1) != 0) {
        int saved = errno;
        for (int k = 0; k < 2; k++)
            if (t->mask[k])
                epoll_ctl(T.epfd, EPOLL_CTL_DEL, t->fd[k], NULL);
        uint32_t gen = t->gen;
        memset(t, 0, sizeof *t);
        t->gen = gen + 1;
        T.count--;
        while (T.top > 0 && !T.slots[T.top - 1].active)
            T.top--;
        pthread_mutex_unlock(&T.lock);
        errno = saved;
        return PyErr_SetFromErrno(PyExc_OSError); /* the caller still owns both descriptors */
    }
    pthread_mutex_unlock(&T.lock);
    return PyLong_FromUnsignedLongLong(id);
}

static PyObject *tunnel_abort(PyObject *self, PyObject *arg) {
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (id == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    int index = (int)(id & 0xFFFFFFFF);
    uint32_t gen = (uint32_t)(id >> 32);
    pthread_mutex_lock(&T.lock);
    int found = T.started && index < T.top && T.slots[index].active && T.slots[index].gen == gen;
    if (found)
        finish(index);
    pthread_mutex_unlock(&T.lock);
    return PyBool_FromLong(found);
}

static PyObject *tunnel_closed(PyObject *self, PyObject *unused) {
    pthread_mutex_lock(&T.lock);
    if (T.notifyfd >= 0) {
        uint64_t drained;
        ssize_t ignored = read(T.notifyfd, &drained, sizeof drained);
        (void)ignored;
    }
    PyObject *list = PyList_New((Py_ssize_t)T.closed_len);
    for (size_t i = 0; list != NULL && i < T.closed_len; i++) {
        PyObject *id = PyLong_FromUnsignedLongLong(T.closed[i]);
        if (id == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, id);
    }
    if (list != NULL)
        T.closed_len = 0;
    pthread_mutex_unlock(&T.lock);
    return list;
}

static PyObject *tunnel_count(PyObject *self, PyObject *unused) {
    pthread_mutex_lock(&T.lock);
    int count = T.count;
    pthread_mutex_unlock(&T.lock);
    return PyLong_FromLong(count);
}

static PyMethodDef methods[] = {
    {"start", tunnel_start, METH_NOARGS,
     "start() -> int: start the thread (once); the eventfd that is readable when closed() "
     "has tunnels to report"},
    {"add", tunnel_add, METH_VARARGS,
     "add(fd_a, fd_b, grace) -> int: copy between two stream sockets from now on; the "
     "tunnel owns (and closes) both descriptors; an OSError leaves them the caller's"},
    {"abort", tunnel_abort, METH_O, "abort(id) -> bool: close both sockets now"},
    {"closed", tunnel_closed, METH_NOARGS, "closed() -> list[int]: tunnels ended since the last call"},
    {"count", tunnel_count, METH_NOARGS, "count() -> int: tunnels open"},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tunnel",
    "An upgraded connection's bytes copied both ways by a thread (relay/listener/tunnel.py).", 0,
    methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__tunnel(void) { return PyModuleDef_Init(&module); }

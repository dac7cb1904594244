/* The relay's front door for new browser connections, in C: sandbridge.relay._front.
 *
 * Why: a new browser connection's first byte came 1.4-1.6x later through the relay than
 * through nginx's two hops, and eight rounds of work on the relay's Python showed the
 * time is the interpreter's and its event loop's at every new connection (its code run
 * cold), not any one function (docs/benchmarks.md). This thread takes the commonest first
 * exchange out of the interpreter altogether: it accepts, checks the connection's owner,
 * and relays a request the relay's Python has already checked and translated once (its
 * exact bytes) on an idle app connection, and the app's whole response when it is one the
 * translation can state exactly. Anything else goes to the Python relay at once, as if it
 * had been there from the accept (docs/relay.md, "The front door").
 *
 * The parts, one file each (docs/architecture.md, "The C front door"):
 *   _front_translate.c  requests and responses translated: pure, no I/O (fuzzed alone)
 *   _front_owner.c      the owner check (sock_diag over netlink)
 *   _front_conns.c      connections, pools, handoffs (the thread's state)
 *   _front_thread.c     the epoll thread
 *   _front_module.c     this: the Python module and its Front type
 *
 * What keeps requests exact: the header block must equal, byte for byte, a block the
 * Python relay parsed, checked and translated for the same client address, listener and
 * method, and handed here with its translation (front.py: only bodiless, keep-alive,
 * non-upgrade requests of a public app, with every value in the one form llhttp reads back
 * unchanged). No header is parsed in C; the Host, Origin, cookie and forwarding rules are
 * the Python relay's alone.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "_front_thread.h"

typedef struct {
    PyObject_HEAD
    front_t core;
} Front;

static void Front_stop(front_t *f) {
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

static void Front_dealloc(Front *self) {
    front_t *f = &self->core;
    Front_stop(f);
    if (f->listeners != NULL)
        pthread_mutex_destroy(&f->lock);
    free(f->listeners);
    free(f->scopes);
    free(f->conns);
    free(f->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Front_init(Front *self, PyObject *args, PyObject *kwds) {
    front_t *f = &self->core;
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
    int started = pthread_create(&f->thread, NULL, front_run, f);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    if (started != 0) {
        PyErr_SetString(PyExc_OSError, "could not start the front's thread");
        return -1;
    }
    f->started = 1;
    return 0;
}

static int not_ready(front_t *f) {
    if (f->listeners == NULL || f->epfd < 0) {
        PyErr_SetString(PyExc_ValueError, "the front is not started, or closed");
        return 1;
    }
    return 0;
}

static PyObject *Front_fileno(Front *self, PyObject *unused) {
    front_t *f = &self->core;
    if (not_ready(f))
        return NULL;
    return PyLong_FromLong(f->notifyfd);
}

static PyObject *Front_add_listener(Front *self, PyObject *args, PyObject *kwds) {
    front_t *f = &self->core;
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
        close_fd(f, &own, NULL);
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
    L->polled = 1;
    pthread_mutex_unlock(&f->lock);
    return PyLong_FromLong(lid);
}

static listener_t *listener_arg(front_t *f, int lid) {
    if (lid < 0 || lid >= MAX_LISTENERS || !f->listeners[lid].active)
        return NULL;
    return &f->listeners[lid];
}

static PyObject *Front_remove_listener(Front *self, PyObject *args) {
    front_t *f = &self->core;
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

static PyObject *Front_set_room(Front *self, PyObject *args) {
    front_t *f = &self->core;
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
static PyObject *Front_scope(Front *self, PyObject *args) {
    front_t *f = &self->core;
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

static PyObject *Front_held(Front *self, PyObject *args) {
    front_t *f = &self->core;
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

static PyObject *Front_adopted(Front *self, PyObject *args) {
    front_t *f = &self->core;
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

static PyObject *Front_remember(Front *self, PyObject *args) {
    front_t *f = &self->core;
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

static PyObject *Front_park(Front *self, PyObject *args) {
    front_t *f = &self->core;
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
    pool_put(f, L, own, now_seconds());
    pthread_mutex_unlock(&f->lock);
    Py_RETURN_TRUE;
}

static PyObject *Front_take(Front *self, PyObject *unused) {
    front_t *f = &self->core;
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
            close_fd(f, &h->bfd, NULL);
            close_fd(f, &h->afd, NULL);
        }
        free_handoff(h);
        h = next;
    }
    return list;
}

static PyObject *Front_close(Front *self, PyObject *unused) {
    front_t *f = &self->core;
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

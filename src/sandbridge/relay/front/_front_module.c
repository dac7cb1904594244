/* The relay's front door for new browser connections, in C: sandbridge.relay.front._front.
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
 *   _front_listeners.c  listeners added and removed, their caches and pools
 *   _front_thread.c     the epoll thread, started and stopped
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
#include <structmember.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>

#include "_front_thread.h"

/* The module's types (multi-phase initialisation, PEP 489: one set per interpreter). */
typedef struct {
    PyTypeObject *front;
    PyTypeObject *handoff;
    PyTypeObject *held;
    PyTypeObject *translation;
} module_state;

typedef struct {
    PyObject_HEAD
    front_t core;
} Front;

/* ---- named values crossing to Python -------------------------------------------------- */

static PyStructSequence_Field handoff_fields[] = {
    {"listener", "the listener's id (add_listener's)"},
    {"kind", "FRESH, SENT or RETRY"},
    {"browser_fd", "the browser's connection, now the receiver's"},
    {"app_fd", "an idle app connection that goes with it, or -1"},
    {"host", "the client's address"},
    {"port", "the client's port"},
    {"data", "FRESH, RETRY: the browser's bytes not yet sent; SENT: the request sent"},
    {"pending", "bytes of a response still to write to the browser"},
    {"checked", "the front found the connection the owner's"},
    {"counted", "the front counts it until adopted()"},
    {"generation", "the listener's generation, for adopted()"},
    {NULL, NULL},
};

static PyStructSequence_Desc handoff_desc = {
    "sandbridge.relay.front._front.Handoff",
    "A connection the front door hands to the Python relay.", handoff_fields, 11,
};

static PyStructSequence_Field held_fields[] = {
    {"held", "browser connections held for the listener"},
    {"pooled", "idle app connections parked for it"},
    {"relayed", "exchanges relayed whole from C"},
    {"handed", "connections handed to the Python relay"},
    {"scope_held", "browser connections held for its session's listeners together"},
    {"room", "the listener's lease: how many it may hold (relay/host/budget.py)"},
    {"scope_room", "its session's lease, for its listeners together"},
    {NULL, NULL},
};

static PyStructSequence_Desc held_desc = {
    "sandbridge.relay.front._front.Held", "What the front door holds of a listener.", held_fields, 7,
};

static PyStructSequence_Field translation_fields[] = {
    {"verdict", "RELAYED, INCOMPLETE (more may make it one) or LEFT (never the front's)"},
    {"head", "RELAYED: the browser's head; else None"},
    {"whole", "RELAYED: the response's length in the bytes given (head and body); else 0"},
    {NULL, NULL},
};

static PyStructSequence_Desc translation_desc = {
    "sandbridge.relay.front._front.Translation",
    "What translate_response makes of an app's response.", translation_fields, 3,
};

/* A named value (a structseq) given its fields' new references; NULL if any is NULL. */
static PyObject *filled(PyObject *value, PyObject **fields, size_t count) {
    int failed = 0;
    for (size_t k = 0; k < count; k++) {
        failed |= fields[k] == NULL;
        PyStructSequence_SetItem(value, (Py_ssize_t)k, fields[k]); /* (cleared with it) */
    }
    if (failed)
        Py_CLEAR(value);
    return value;
}

static PyObject *handoff_value(PyTypeObject *type, const handoff_t *h) {
    char address[INET_ADDRSTRLEN];
    struct in_addr in = {h->ip};
    inet_ntop(AF_INET, &in, address, sizeof address);
    PyObject *item = PyStructSequence_New(type);
    if (item == NULL)
        return NULL;
    PyObject *values[] = {
        PyLong_FromLong(h->lid),
        PyLong_FromLong(h->kind),
        PyLong_FromLong(h->bfd),
        PyLong_FromLong(h->afd),
        PyUnicode_FromString(address),
        PyLong_FromLong(h->port),
        PyBytes_FromStringAndSize(h->data ? h->data : "", (Py_ssize_t)h->data_len),
        PyBytes_FromStringAndSize(h->pending ? h->pending : "", (Py_ssize_t)h->pending_len),
        PyBool_FromLong(h->checked != UNCHECKED),
        PyBool_FromLong(h->checked == COUNTED),
        PyLong_FromUnsignedLong(h->gen),
    };
    return filled(item, values, sizeof values / sizeof values[0]);
}

/* ---- the preamble of every method ---------------------------------------------------- */

static module_state *state_of(PyObject *self) {
    return PyType_GetModuleState(Py_TYPE(self));
}

/* The front of self, open, with args parsed by format (NULL: none) and its mutex taken;
 * NULL with an exception set (the mutex not taken). Every method but close starts so. */
static front_t *enter(Front *self, PyObject *args, const char *format, ...) {
    front_t *f = &self->core;
    if (f->listeners == NULL || f->epfd < 0) {
        PyErr_SetString(PyExc_ValueError, "the front is not started, or closed");
        return NULL;
    }
    if (format != NULL) {
        va_list vargs;
        va_start(vargs, format);
        int parsed = PyArg_VaParse(args, format, vargs);
        va_end(vargs);
        if (!parsed)
            return NULL;
    }
    pthread_mutex_lock(&f->lock);
    return f;
}

static void leave(front_t *f) { pthread_mutex_unlock(&f->lock); }

/* ---- the Front type ------------------------------------------------------------------- */

static void Front_dealloc(Front *self) {
    front_t *f = &self->core;
    PyTypeObject *type = Py_TYPE(self);
    Py_BEGIN_ALLOW_THREADS front_stop(f);
    Py_END_ALLOW_THREADS if (f->lock_ready) pthread_mutex_destroy(&f->lock);
    free(f->listeners);
    free(f->scopes);
    free(f->conns);
    free(f->buf);
    type->tp_free((PyObject *)self);
    Py_DECREF(type); /* a heap type's instances hold it */
}

static int Front_init(Front *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"owner", NULL};
    unsigned int owner;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "I", kwlist, &owner))
        return -1;
    if (self->core.listeners != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Front is made once");
        return -1;
    }
    int error = front_start(&self->core, owner);
    if (error != 0) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

static PyObject *Front_fileno(Front *self, PyObject *unused) {
    front_t *f = enter(self, NULL, NULL);
    if (f == NULL)
        return NULL;
    int fd = f->notifyfd;
    leave(f);
    return PyLong_FromLong(fd);
}

static PyObject *Front_add_listener(Front *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"fd",    "port", "base_path", "pool_size",  "pool_idle",
                             "keepalive", "grace", "room", "scope", "scope_room", NULL};
    int port;
    unsigned long long scope;
    Py_ssize_t base_len;
    listener_spec_t spec;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iiy#idddiKi", kwlist, &spec.fd, &port,
                                     &spec.base, &base_len, &spec.pool_size, &spec.pool_idle,
                                     &spec.keepalive, &spec.grace, &spec.room, &scope,
                                     &spec.scope_room))
        return NULL;
    int flags = fcntl(spec.fd, F_GETFL);
    if (flags < 0 || !(flags & O_NONBLOCK)) {
        PyErr_SetString(PyExc_ValueError, "the listening socket must be non-blocking");
        return NULL;
    }
    if (base_len < 1 || spec.base[0] != '/' || port <= 0 || port > 65535) {
        PyErr_SetString(PyExc_ValueError, "a base path starting with / and a port");
        return NULL;
    }
    if (spec.pool_size < 0 || spec.pool_size > MAX_POOL) {
        /* never cut silently: protocol/relay_settings.py (MAX_POOL_SIZE) bounds what a session may ask */
        PyErr_Format(PyExc_ValueError, "pool_size must be 0 to %d, got %d", MAX_POOL,
                     spec.pool_size);
        return NULL;
    }
    spec.port = (uint16_t)port;
    spec.base_len = (size_t)base_len;
    spec.scope = (uint64_t)scope;
    front_t *f = enter(self, NULL, NULL);
    if (f == NULL)
        return NULL;
    int lid = -1;
    int error = listener_add(f, &spec, &lid);
    leave(f);
    if (error == ENOSPC) {
        PyErr_SetString(PyExc_OSError, "the front serves no more listeners");
        return NULL;
    }
    if (error != 0) {
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(lid);
}

static PyObject *Front_remove_listener(Front *self, PyObject *args) {
    int lid;
    front_t *f = enter(self, args, "i", &lid);
    if (f == NULL)
        return NULL;
    if (listener_at(f, lid))
        close_listener(f, lid);
    leave(f);
    Py_RETURN_NONE;
}

/* lease(key, id, room, scope_room): the leases the budget (relay/host/budget.py) gives the
 * listener `id` (-1: none, the session's only) and the session `key`. */
static PyObject *Front_lease(Front *self, PyObject *args) {
    unsigned long long key;
    int lid, room, scope_room;
    front_t *f = enter(self, args, "Kiii", &key, &lid, &room, &scope_room);
    if (f == NULL)
        return NULL;
    listener_t *L = listener_at(f, lid);
    scope_t *S = scope_of(f, (uint64_t)key);
    if (L && S == &f->scopes[L->sid])
        L->room = room;
    if (S)
        S->room = scope_room;
    leave(f);
    Py_RETURN_NONE;
}

/* give_back(key, id): one place of the session's lease that no connection uses, and of
 * the listener's too (id -1: the session's only), given back to the budget; False: none
 * unused (the front holds what it was lent). */
static PyObject *Front_give_back(Front *self, PyObject *args) {
    unsigned long long key;
    int lid;
    front_t *f = enter(self, args, "Ki", &key, &lid);
    if (f == NULL)
        return NULL;
    scope_t *S = scope_of(f, (uint64_t)key);
    listener_t *L = lid >= 0 ? listener_at(f, lid) : NULL;
    int given = S && S->room > S->held &&
                (lid < 0 || (L && S == &f->scopes[L->sid] && L->room > L->held));
    if (given) {
        S->room--;
        if (L)
            L->room--;
    }
    leave(f);
    return PyBool_FromLong(given);
}

static PyObject *Front_held(Front *self, PyObject *args) {
    int lid;
    front_t *f = enter(self, args, "i", &lid);
    if (f == NULL)
        return NULL;
    listener_t *L = listener_at(f, lid);
    int held = L ? L->held : 0;
    int pooled = L ? L->pooled : 0;
    int scope_held = L ? f->scopes[L->sid].held : 0;
    int room = L ? L->room : 0, scope_room = L ? f->scopes[L->sid].room : 0;
    unsigned long long relayed = L ? L->relayed : 0, handed = L ? L->handed : 0;
    leave(f);
    PyObject *value = PyStructSequence_New(state_of((PyObject *)self)->held);
    if (value == NULL)
        return NULL;
    PyObject *values[] = {PyLong_FromLong(held),
                          PyLong_FromLong(pooled),
                          PyLong_FromUnsignedLongLong(relayed),
                          PyLong_FromUnsignedLongLong(handed),
                          PyLong_FromLong(scope_held),
                          PyLong_FromLong(room),
                          PyLong_FromLong(scope_room)};
    return filled(value, values, sizeof values / sizeof values[0]);
}

/* adopted(id, generation, kept): the relay has a connection the front handed over
 * counted; kept: it counts it now (its place leaves the lease with it), else it closed it
 * (its place is the lease's again). False: the listener is gone, and the count with it. */
static PyObject *Front_adopted(Front *self, PyObject *args) {
    int lid, kept;
    unsigned int gen;
    front_t *f = enter(self, args, "iIp", &lid, &gen, &kept);
    if (f == NULL)
        return NULL;
    listener_t *L = listener_at(f, lid);
    int counted = uncount(f, lid, gen);
    if (counted && kept) {
        L->room--;
        f->scopes[L->sid].room--;
    }
    leave(f);
    return PyBool_FromLong(counted);
}

static PyObject *Front_remember(Front *self, PyObject *args) {
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
    front_t *f = enter(self, NULL, NULL);
    if (f == NULL)
        return NULL;
    listener_t *L = listener_at(f, lid);
    int error = L ? listener_remember(f, L, address, m, block, (size_t)block_len, out,
                                      (size_t)out_len)
                  : 0;
    leave(f);
    if (error != 0)
        return PyErr_NoMemory();
    return PyBool_FromLong(L != NULL);
}

static PyObject *Front_park(Front *self, PyObject *args) {
    int lid, fd, opened = 0;
    front_t *f = enter(self, args, "ii|p", &lid, &fd, &opened);
    if (f == NULL)
        return NULL;
    listener_t *L = listener_at(f, lid);
    int parked = L ? listener_park(f, L, fd, opened) : 0;
    leave(f);
    return PyBool_FromLong(parked);
}

static PyObject *Front_take(Front *self, PyObject *unused) {
    front_t *f = enter(self, NULL, NULL);
    if (f == NULL)
        return NULL;
    uint64_t count;
    ssize_t ignored = read(f->notifyfd, &count, sizeof count);
    (void)ignored;
    handoff_t *first = take_handoffs(f);
    leave(f);
    PyTypeObject *type = state_of((PyObject *)self)->handoff;
    PyObject *list = fault(FAULT_TAKE) ? PyErr_NoMemory() : PyList_New(0);
    for (handoff_t *h = first; h && list; h = h->next) {
        PyObject *item = handoff_value(type, h);
        if (item == NULL || PyList_Append(list, item) != 0)
            Py_CLEAR(list);
        Py_XDECREF(item);
    }
    if (list == NULL) { /* none reaches Python: none stays open, none stays counted */
        pthread_mutex_lock(&f->lock);
        for (handoff_t *h = first; h; h = h->next) {
            close_fd(f, &h->bfd, NULL);
            close_fd(f, &h->afd, NULL);
            if (h->checked == COUNTED)
                uncount(f, h->lid, h->gen);
        }
        pthread_mutex_unlock(&f->lock);
    }
    for (handoff_t *h = first; h;) {
        handoff_t *next = h->next;
        free_handoff(h);
        h = next;
    }
    return list;
}

static PyObject *Front_close(Front *self, PyObject *unused) {
    Py_BEGIN_ALLOW_THREADS front_stop(&self->core);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}
static PyMethodDef Front_methods[] = {
    {"fileno", (PyCFunction)Front_fileno, METH_NOARGS,
     "The descriptor that is readable while handoffs wait."},
    {"add_listener", (PyCFunction)(void (*)(void))Front_add_listener,
     METH_VARARGS | METH_KEYWORDS, "Serve a listening socket (a duplicate is kept); its id."},
    {"remove_listener", (PyCFunction)Front_remove_listener, METH_VARARGS,
     "Close everything held for a listener."},
    {"lease", (PyCFunction)Front_lease, METH_VARARGS,
     "lease(key, id, room, scope_room): what the budget lends a listener and its session."},
    {"give_back", (PyCFunction)Front_give_back, METH_VARARGS,
     "give_back(key, id) -> bool: one unused place of the leases back to the budget."},
    {"held", (PyCFunction)Front_held, METH_VARARGS,
     "held(id) -> Held: what the front holds of a listener."},
    {"adopted", (PyCFunction)Front_adopted, METH_VARARGS,
     "adopted(id, generation, kept) -> bool: a counted handoff is the relay's now."},
    {"remember", (PyCFunction)Front_remember, METH_VARARGS,
     "remember(id, ip4, method, block, translated): a checked request block."},
    {"park", (PyCFunction)Front_park, METH_VARARGS,
     "park(id, fd, opened=False) -> bool: an idle app connection (a duplicate is kept) for "
     "the oldest waiting request, else the pool; opened: for it; fd -1: none comes."},
    {"take", (PyCFunction)Front_take, METH_NOARGS,
     "take() -> [Handoff]: the handoffs waiting."},
    {"close", (PyCFunction)Front_close, METH_NOARGS, "Stop the thread, close everything."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot front_slots[] = {
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, Front_init},
    {Py_tp_dealloc, Front_dealloc},
    {Py_tp_methods, Front_methods},
    {Py_tp_doc, "The relay's front door for new browser connections (a thread)."},
    {0, NULL},
};

static PyType_Spec front_spec = {
    "sandbridge.relay.front._front.Front", sizeof(Front), 0, Py_TPFLAGS_DEFAULT, front_slots,
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
    PyObject *value = PyStructSequence_New(((module_state *)PyModule_GetState(self))->translation);
    if (value == NULL) {
        free(out);
        return NULL;
    }
    PyObject *values[] = {
        PyLong_FromLong(r),
        r == TR_OK ? PyBytes_FromStringAndSize(out, (Py_ssize_t)out_len) : Py_NewRef(Py_None),
        PyLong_FromSize_t(r == TR_OK ? whole : 0),
    };
    free(out);
    return filled(value, values, sizeof values / sizeof values[0]);
}

#ifdef SANDBRIDGE_FAULTS
/* _fail_next(site, count=1): the next `count` asks of a fault site fail (_front_thread.h). */
static PyObject *py_fail_next(PyObject *self, PyObject *args) {
    static const char *const sites[FAULT_SITES] = {"handoff", "take", "request", "rest"};
    const char *name;
    int count = 1;
    if (!PyArg_ParseTuple(args, "s|i", &name, &count))
        return NULL;
    for (int site = 0; site < FAULT_SITES; site++) {
        if (strcmp(name, sites[site]) == 0) {
            fault_arm(site, count);
            Py_RETURN_NONE;
        }
    }
    return PyErr_Format(PyExc_ValueError, "no fault site %R: handoff, take, request or rest",
                        PyTuple_GET_ITEM(args, 0));
}
#endif

static PyMethodDef module_methods[] = {
#ifdef SANDBRIDGE_FAULTS
    {"_fail_next", py_fail_next, METH_VARARGS,
     "_fail_next(site, count=1): the next asks of a fault site fail (test builds only)."},
#endif
    {"translate_response", py_translate_response, METH_VARARGS,
     "translate_response(data, head_request) -> Translation(verdict, head, whole)"},
    {NULL, NULL, 0, NULL},
};

static int add_type(PyObject *m, PyTypeObject *type, const char *name) {
    return type == NULL ? -1 : PyModule_AddObjectRef(m, name, (PyObject *)type);
}

static int module_exec(PyObject *m) {
    module_state *state = PyModule_GetState(m);
    state->front = (PyTypeObject *)PyType_FromModuleAndSpec(m, &front_spec, NULL);
    state->handoff = PyStructSequence_NewType(&handoff_desc);
    state->held = PyStructSequence_NewType(&held_desc);
    state->translation = PyStructSequence_NewType(&translation_desc);
    if (add_type(m, state->front, "Front") < 0 || add_type(m, state->handoff, "Handoff") < 0 ||
        add_type(m, state->held, "Held") < 0 ||
        add_type(m, state->translation, "Translation") < 0)
        return -1;
    static const struct {
        const char *name;
        long value;
    } constants[] = {
        {"FRESH", KIND_FRESH}, {"SENT", KIND_SENT}, {"RETRY", KIND_RETRY}, {"WANT", KIND_WANT},
        {"READ_MAX", READ_MAX}, {"PEEK_MAX", PEEK_MAX}, {"MAX_POOL", MAX_POOL},
        /* a connection's states (relay/listener/connection_stage.py maps them onto its stages) */
        {"FREE", FREE},         {"FIRST", FIRST},       {"AWAIT", AWAIT},
        {"IDLE", IDLE},         {"WAIT", WAIT},
        /* translate_response's verdicts */
        {"RELAYED", TR_OK},     {"INCOMPLETE", TR_INCOMPLETE}, {"LEFT", TR_BAIL},
#ifdef SANDBRIDGE_FAULTS
        {"FAULTS", 1},
#else
        {"FAULTS", 0},
#endif
    };
    for (size_t k = 0; k < sizeof constants / sizeof constants[0]; k++)
        if (PyModule_AddIntConstant(m, constants[k].name, constants[k].value) < 0)
            return -1;
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg) {
    module_state *state = PyModule_GetState(m);
    Py_VISIT(state->front);
    Py_VISIT(state->handoff);
    Py_VISIT(state->held);
    Py_VISIT(state->translation);
    return 0;
}

static int module_clear(PyObject *m) {
    module_state *state = PyModule_GetState(m);
    Py_CLEAR(state->front);
    Py_CLEAR(state->handoff);
    Py_CLEAR(state->held);
    Py_CLEAR(state->translation);
    return 0;
}

static void module_free(void *m) { module_clear((PyObject *)m); }

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sandbridge.relay.front._front",
    .m_doc = "The relay's front door, in C.",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__front(void) { return PyModuleDef_Init(&module); }

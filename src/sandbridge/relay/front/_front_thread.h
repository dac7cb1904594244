/* The front door's state and its thread (sandbridge.relay.front._front): what the epoll thread
 * holds (listeners, connections, pools, handoffs waiting for the event loop), shared by
 * _front_conns.c (connections, pools, handoffs), _front_thread.c (the thread's loop) and
 * _front_module.c (Python's calls). No Python.h: the thread never takes the GIL.
 *
 * - every send and recv is MSG_DONTWAIT, and a listening socket must be non-blocking:
 *   no descriptor's flags can block this thread.
 * - one mutex guards all state; Python's calls into it only take the mutex.
 */
#ifndef SANDBRIDGE_FRONT_THREAD_H
#define SANDBRIDGE_FRONT_THREAD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "_front_translate.h"

#define MAX_LISTENERS 1024 /* listeners of one process */
#define MAX_CONNS 1024     /* connections held here at once, process-wide */
#define MAX_POOL 64
#define MAX_BATCH 64
#define MAX_QUEUE 256 /* handoffs waiting for the event loop; past it, accepts wait */

enum { TAG_LISTENER = 1, TAG_BROWSER = 2, TAG_APP = 3, TAG_WAKE = 4 };
/* WAIT: its request read and translated, waiting for the app connection the relay opens
 * for it (KIND_WANT), or for its grace to end (then it is the relay's) */
enum { FREE = 0, FIRST, AWAIT, IDLE, WAIT };
/* KIND_WANT asks the relay for an app connection for a waiting request (no descriptor):
 * it parks one (Front.park), or parks -1 when it cannot open one */
enum { KIND_FRESH = 0, KIND_SENT = 1, KIND_RETRY = 2, KIND_WANT = 3 };
/* a handoff's owner check: not asked (or not the owner's), the owner's, the owner's and
 * still counted in the front's held connections */
enum { UNCHECKED = 0, CHECKED = 1, COUNTED = 2 };

typedef struct {
    int fd;
    double deadline;
} parked_t;


/* The listeners of one session share its connection limit. */
typedef struct {
    uint64_t key;
    int refs;
    int room; /* the session's lease from its budget (relay/host/budget.py) */
    int held;
} scope_t;

typedef struct {
    int active;
    uint32_t gen;
    int fd;
    int polled;     /* fd is in the epoll set */
    int live_index; /* its place in front_t.live */
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
    int room; /* the listener's lease from its session's budget: held <= room */
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
    /* Both stay in the epoll set, edge-triggered, while the connection holds them (a
     * registration per exchange was four epoll_ctl calls of its eleven system calls). The
     * browser's edge while its request is out is remembered (b_ready: it wrote, or
     * closed), not lost; the app's edges between two requests are not: the kept app
     * connection is looked at (still_idle) just before the next request goes out, as an
     * edge not yet dispatched would come too late. */
    int b_polled, a_polled;
    int b_ready;
    /* the app connection was opened for this request (the relay gave it: never reused);
     * the app closing it unanswered is the app's answer, not its keep-alive ending */
    int a_new;
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
    pthread_mutex_t lock;
    int lock_ready; /* lock initialised (front_start ran) */
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
    /* the ids of the active listeners, in no order: what the thread's rounds go through
     * (not the 1,024 slots at every wake-up) */
    int live[MAX_LISTENERS];
    int live_count;
    /* the listener whose socket the thread accepts on, and asks netlink about, without
     * the mutex (-1: none); a socket Python's remove_listener took from it meanwhile is
     * left for the thread to close (deferred_close) when it takes the mutex again */
    int accepting;
    int accepting_fd; /* the socket itself: the slot may get another while it accepts */
    int deferred_close;
    int held;
    handoff_t *queue, *queue_tail;
    int queued;
    char *buf;
} front_t;

double now_seconds(void);
uint64_t tag(int kind, uint32_t gen, int index);
void unpoll(front_t *f, int fd, int *polled);
int poll_fd(front_t *f, int fd, int *polled, uint32_t events, uint64_t data);
void close_fd(front_t *f, int *fd, int *polled);

int still_idle(int fd);
int pool_take(front_t *f, listener_t *L, double now);
void pool_put(front_t *f, listener_t *L, int fd, double now);
void enqueue(front_t *f, int lid, int kind, int bfd, int afd, int checked, uint32_t ip,
             uint16_t port, const char *data, size_t data_len, const char *pending,
             size_t pending_len);
conn_t *conn_new(front_t *f);
void conn_release(front_t *f, conn_t *c, int counted);
void conn_free(front_t *f, conn_t *c);
void hand_fresh(front_t *f, conn_t *c, const char *data, size_t len, const char *pending,
                size_t pending_len, int retried);
void hand_sent(front_t *f, conn_t *c);
void hand_kept_request(front_t *f, conn_t *c, int retried);
void drop_both(front_t *f, conn_t *c);
void browser_gone(front_t *f, conn_t *c, double now);
void free_handoff(handoff_t *h);
int uncount(front_t *f, int lid, uint32_t gen);
void wake(front_t *f);

/* Fault injection, compiled only with -DSANDBRIDGE_FAULTS (the sanitizer builds of
 * tests/relay/front/front_sanitizers.py): fault(site) says yes to the next `count` asks of a
 * site that Python's _front._fail_next(name, count) armed, so that the tests drive the
 * failure paths of real calls, without mocks. Elsewhere it is the constant 0. */
enum { FAULT_HANDOFF = 0, FAULT_TAKE, FAULT_REQUEST, FAULT_REST, FAULT_SITES };
#ifdef SANDBRIDGE_FAULTS
int fault(int site);
void fault_arm(int site, int count);
#else
#define fault(site) 0
#endif

/* What Python declares of a listener it adds (front.py: FrontDoor.add). */
typedef struct {
    int fd; /* the listening socket, non-blocking (a duplicate is kept) */
    uint16_t port;
    const char *base; /* the app's base path, starting with / */
    size_t base_len;
    int pool_size; /* 0..MAX_POOL */
    double pool_idle, keepalive, grace;
    int room;
    uint64_t scope;
    int scope_room;
} listener_spec_t;

/* _front_listeners.c, with the mutex held: 0 or an errno. */
listener_t *listener_at(front_t *f, int lid); /* NULL: no listener of that id now */
int listener_add(front_t *f, const listener_spec_t *spec, int *lid_out);
void close_listener(front_t *f, int lid);
void clear_cache(listener_t *L);
int listener_remember(front_t *f, listener_t *L, uint32_t address, int method,
                      const char *block, size_t block_len, const char *out, size_t out_len);
/* an idle app connection from the relay: to the listener's oldest waiting request, else
 * to its pool; fd -1: none comes, the oldest waiting request is the relay's now; opened:
 * one the relay opened for that request (never used), else a kept one it parks */
int listener_park(front_t *f, listener_t *L, int fd, int opened); /* 1: taken, 0: no room */
void serve_request(front_t *f, conn_t *c, const char *data, size_t n, double now);
scope_t *scope_of(front_t *f, uint64_t key);          /* NULL: none */
handoff_t *take_handoffs(front_t *f); /* the queue, emptied; paused listeners resumed */

/* _front_thread.c: open the state and start the thread (0, or an errno: front_stop
 * closes what was opened); stop the thread and close everything (without the mutex). */
int front_start(front_t *f, uint32_t owner);
void front_stop(front_t *f);

/* The thread's body (pthread_create's start routine; arg: the front_t). */
void *front_run(void *arg);

#endif

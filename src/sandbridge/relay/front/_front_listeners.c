/* The front door's listeners: added, removed, their caches of translated requests and
 * their pools, as Python's calls ask (_front_module.c). Every function here runs with the
 * front's mutex held. */
#define _GNU_SOURCE /* F_DUPFD_CLOEXEC */
#include "_front_thread.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

listener_t *listener_at(front_t *f, int lid) {
    if (lid < 0 || lid >= MAX_LISTENERS || !f->listeners[lid].active)
        return NULL;
    return &f->listeners[lid];
}

void clear_cache(listener_t *L) {
    for (int e = 0; e < CACHE_ENTRIES; e++) {
        free(L->cache[e].block);
        free(L->cache[e].out);
        memset(&L->cache[e], 0, sizeof L->cache[e]);
    }
}

void close_listener(front_t *f, int lid) {
    listener_t *L = &f->listeners[lid];
    if (!L->active)
        return;
    for (int i = 0; i < f->conn_top; i++) {
        conn_t *c = &f->conns[i];
        if (c->state != FREE && c->lid == lid)
            drop_both(f, c);
    }
    /* what is left counted: handoffs not yet adopted (queued, or taken by Python) */
    f->scopes[L->sid].held -= L->held;
    L->held = 0;
    if (f->accepting == lid && L->fd == f->accepting_fd) {
        /* the thread is in accept4 on this very socket, without the mutex: out of epoll
         * now, closed by the thread when it has the mutex again (its number stays taken
         * until then). A socket added to the slot since is not the thread's: closed now. */
        unpoll(f, L->fd, &L->polled);
        f->deferred_close = L->fd;
        L->fd = -1;
    } else {
        close_fd(f, &L->fd, &L->polled);
    }
    int at = L->live_index;
    f->live[at] = f->live[--f->live_count];
    f->listeners[f->live[at]].live_index = at;
    for (int p = 0; p < L->pooled; p++)
        close_fd(f, &L->pool[p].fd, NULL);
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
            close_fd(f, &h->bfd, NULL);
            close_fd(f, &h->afd, NULL);
            free_handoff(h);
            f->queued--;
        } else {
            f->queue_tail = h;
            link = &h->next;
        }
    }
}


int listener_add(front_t *f, const listener_spec_t *spec, int *lid_out) {
    int lid = -1;
    for (int l = 0; l < MAX_LISTENERS; l++) {
        if (!f->listeners[l].active) {
            lid = l;
            break;
        }
    }
    if (lid < 0)
        return ENOSPC;
    int sid = -1, free_sid = -1;
    for (int s = 0; s < MAX_LISTENERS; s++) {
        if (f->scopes[s].refs > 0 && f->scopes[s].key == spec->scope) {
            sid = s;
            break;
        }
        if (f->scopes[s].refs == 0 && free_sid < 0)
            free_sid = s;
    }
    if (sid < 0) {
        sid = free_sid; /* (a free one exists: there are as many as listeners) */
        f->scopes[sid].key = spec->scope;
        f->scopes[sid].held = 0;
    }
    f->scopes[sid].room = spec->scope_room;
    listener_t *L = &f->listeners[lid];
    int own = fcntl(spec->fd, F_DUPFD_CLOEXEC, 3);
    char *copy = malloc(spec->base_len);
    if (own < 0 || copy == NULL) {
        int error = own < 0 ? errno : ENOMEM;
        if (f->scopes[sid].refs == 0)
            memset(&f->scopes[sid], 0, sizeof(scope_t));
        close_fd(f, &own, NULL);
        free(copy);
        return error;
    }
    f->scopes[sid].refs++;
    memcpy(copy, spec->base, spec->base_len);
    uint32_t gen = L->gen + 1;
    memset(L, 0, sizeof *L);
    L->gen = gen;
    L->fd = own;
    L->port = spec->port;
    L->base = copy;
    L->base_len = spec->base_len;
    L->pool_size = spec->pool_size;
    L->pool_idle = spec->pool_idle;
    L->keepalive = spec->keepalive;
    L->grace = spec->grace;
    L->room = spec->room;
    L->sid = sid;
    L->active = 1;
    L->live_index = f->live_count;
    f->live[f->live_count++] = lid;
    if (poll_fd(f, own, &L->polled, EPOLLIN, tag(TAG_LISTENER, L->gen, lid)) != 0) {
        int error = errno;
        close_listener(f, lid);
        return error;
    }
    *lid_out = lid;
    return 0;
}

int listener_remember(front_t *f, listener_t *L, uint32_t address, int method,
                      const char *block, size_t block_len, const char *out, size_t out_len) {
    f->clock++;
    entry_t *slot = NULL, *empty = NULL, *oldest = &L->cache[0];
    for (int e = 0; e < CACHE_ENTRIES; e++) {
        entry_t *c = &L->cache[e];
        if (c->block == NULL) {
            if (empty == NULL)
                empty = c;
            continue;
        }
        if (c->ip == address && c->method == method && c->block_len == block_len &&
            memcmp(c->block, block, block_len) == 0) {
            slot = c; /* the same block again: its translation is the new one */
            break;
        }
        if (c->used < oldest->used || oldest->block == NULL)
            oldest = c;
    }
    if (slot == NULL)
        slot = empty != NULL ? empty : oldest;
    char *b = malloc(block_len), *o = malloc(out_len ? out_len : 1);
    if (b == NULL || o == NULL) {
        free(b);
        free(o);
        return ENOMEM;
    }
    memcpy(b, block, block_len);
    memcpy(o, out, out_len);
    free(slot->block);
    free(slot->out);
    slot->ip = address;
    slot->method = method;
    slot->block = b;
    slot->block_len = block_len;
    slot->out = o;
    slot->out_len = out_len;
    slot->used = f->clock;
    return 0;
}

/* The listener's waiting request that has waited longest (WAIT), or NULL. */
static conn_t *oldest_waiting(front_t *f, listener_t *L) {
    int lid = (int)(L - f->listeners);
    conn_t *oldest = NULL;
    for (int i = 0; i < f->conn_top; i++) {
        conn_t *c = &f->conns[i];
        if (c->state == WAIT && c->lid == lid && (oldest == NULL || c->deadline < oldest->deadline))
            oldest = c;
    }
    return oldest;
}

int listener_park(front_t *f, listener_t *L, int fd, int opened) {
    conn_t *waiting = oldest_waiting(f, L);
    if (waiting != NULL) {
        /* none comes, or one the app wrote to or closed already (it answers nothing that
         * is asked: a banner, an app at its limit): the request is the relay's now, not
         * asked for once more (each ask would start its grace again) */
        int own = fd < 0 || !still_idle(fd) ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (own < 0) {
            hand_kept_request(f, waiting, 0);
            return 0;
        }
        char *req = waiting->req;
        waiting->req = NULL;
        waiting->afd = own;
        waiting->a_new = opened;
        serve_request(f, waiting, req, waiting->req_len, now_seconds());
        free(req);
        return 1;
    }
    if (fd < 0 || L->pool_size <= 0 || L->pooled >= L->pool_size)
        return 0;
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (own < 0)
        return 0;
    pool_put(f, L, own, now_seconds());
    return 1;
}

scope_t *scope_of(front_t *f, uint64_t key) {
    for (int s = 0; s < MAX_LISTENERS; s++)
        if (f->scopes[s].refs > 0 && f->scopes[s].key == key)
            return &f->scopes[s];
    return NULL;
}

handoff_t *take_handoffs(front_t *f) {
    handoff_t *first = f->queue;
    f->queue = f->queue_tail = NULL;
    f->queued = 0;
    for (int i = 0; i < f->live_count; i++) {
        int l = f->live[i];
        listener_t *L = &f->listeners[l];
        if (L->queue_paused) {
            struct epoll_event ev = {0};
            ev.events = L->paused ? 0 : EPOLLIN;
            ev.data.u64 = tag(TAG_LISTENER, L->gen, l);
            epoll_ctl(f->epfd, EPOLL_CTL_MOD, L->fd, &ev);
            L->queue_paused = 0;
        }
    }
    return first;
}

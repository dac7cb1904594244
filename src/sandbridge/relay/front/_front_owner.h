/* The front door's owner check (relay/host/local_peer.py, in C): whose process holds the other
 * end of a loopback connection, asked of the kernel's sock_diag over netlink. */
#ifndef SANDBRIDGE_FRONT_OWNER_H
#define SANDBRIDGE_FRONT_OWNER_H

#include <netinet/in.h>
#include <stdint.h>

/* 1: owner's (or root's), 0: another user's, -1: unknown (the Python relay decides).
 * netlink: a NETLINK_SOCK_DIAG socket (-1: unknown); *sequence numbers the questions;
 * port: the listener's. */
int owner_check(int netlink, uint32_t *sequence, uint32_t owner,
                const struct sockaddr_in *peer, uint16_t port);

#endif

/* The front door's owner check: see _front_owner.h. */
#include "_front_owner.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <string.h>
#include <sys/socket.h>

int owner_check(int netlink, uint32_t *sequence, uint32_t owner,
                const struct sockaddr_in *peer, uint16_t port) {
    if (netlink < 0)
        return -1;
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 r;
    } req;
    memset(&req, 0, sizeof req);
    req.nlh.nlmsg_len = sizeof req;
    req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.nlh.nlmsg_flags = NLM_F_REQUEST;
    req.nlh.nlmsg_seq = ++*sequence;
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
    if (send(netlink, &req, sizeof req, MSG_DONTWAIT) != (ssize_t)sizeof req)
        return -1;
    for (;;) {
        char answer[512] __attribute__((aligned(8)));
        ssize_t n = recv(netlink, answer, sizeof answer, MSG_DONTWAIT);
        if (n < (ssize_t)sizeof(struct nlmsghdr))
            return -1; /* the kernel answers within send(): none is coming */
        struct nlmsghdr *h = (struct nlmsghdr *)answer;
        if (h->nlmsg_seq != *sequence)
            continue; /* an earlier, abandoned question's */
        if (h->nlmsg_type == NLMSG_ERROR ||
            (size_t)n < NLMSG_HDRLEN + sizeof(struct inet_diag_msg))
            return -1;
        struct inet_diag_msg *m = (struct inet_diag_msg *)NLMSG_DATA(h);
        if (m->idiag_inode == 0)
            return 0; /* closed by its process already (TIME_WAIT says uid 0): nobody's */
        return (m->idiag_uid == owner || m->idiag_uid == 0) ? 1 : 0;
    }
}

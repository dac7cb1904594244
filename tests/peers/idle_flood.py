"""Another local user's flood: hold COUNT idle connections to 127.0.0.1:PORT.

Usage: idle_flood.py PORT COUNT (run as another user, with the system python3).
Prints ``flooding <n> connected`` once every connection is made, then, once the host
has dealt with them, ``refused <n>`` (the connections the host closed), and holds
every connection until it is stopped.
"""

from __future__ import annotations

import resource
import select
import signal
import socket
import sys


def main() -> None:
    port, count = int(sys.argv[1]), int(sys.argv[2])
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    print(f"flooding {len(held)} connected", flush=True)
    refused = 0
    poller = select.poll()
    for sock in held:
        poller.register(sock, select.POLLIN)
    pending = {sock.fileno(): sock for sock in held}
    # A refused connection becomes readable (end of stream or reset); a counted one
    # stays silent. Wait until no more refusals arrive for a second.
    while pending:
        events = poller.poll(1000)
        if not events:
            break
        for fd, _ in events:
            sock = pending.pop(fd)
            poller.unregister(fd)
            try:
                gone = sock.recv(1) == b""
            except OSError:
                gone = True
            refused += gone
    print(f"refused {refused}", flush=True)
    signal.pause()


if __name__ == "__main__":
    main()

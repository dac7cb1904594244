"""The event loop's stall while the C front door takes a flood of new connections.

``python -m benchmarks.front_flood [SECONDS] [CLIENTS]``: a front door (relay/front/front.py)
serves one loopback listener in this process; a child process opens connections to it
from CLIENTS threads for SECONDS, each sending one request the front has not seen (so
every one is accepted, checked over netlink, read and handed to the event loop, as a
flood of new browser connections is). Meanwhile the event loop runs what the relay runs
for each handoff (take it, ask the front's counts, close it) and a probe that sleeps 1 ms
at a time: its lateness is the loop's stall, and the time of a call into the front after
each (the mutex that call takes is the thread's, held with the GIL). Prints the median,
99th percentile and maximum of both without and with the flood, and the connections handed over
(docs/benchmarks.md, "The front door under a connection flood").
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from typing import TYPE_CHECKING

from sandbridge.relay.front import front
from sandbridge.relay.host.settings import RelaySettings, SessionScope

if TYPE_CHECKING:
    from sandbridge.relay.front._front import Handoff

PROBE_SECONDS = 0.001
FLOOD = """
import socket, sys, threading, time
port, seconds, clients = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
end = time.monotonic() + seconds
request = b"GET /flood HTTP/1.1\\r\\nHost: flood\\r\\n\\r\\n"
def run():
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(request)
        except OSError:
            pass
threads = [threading.Thread(target=run) for _ in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
"""


class _Closer:
    """The relay's side of a handoff, reduced to what touches the front: it reads the
    front's counts, closes the connection and gives the count back."""

    def __init__(self, door: front.FrontDoor) -> None:
        self.door = door
        self.lid = -1
        self.handed = 0

    def want_upstream(self) -> None:
        """(none: the flood's connections send no request)"""

    def adopt(self, handoff: Handoff) -> None:
        self.handed += 1
        self.door.held(handoff.listener)
        front.close_handoff(handoff)
        self.door.adopted(handoff, kept=False)


async def _probe(
    seconds: float, door: front.FrontDoor, lid: int
) -> tuple[list[float], list[float]]:
    """The loop's lateness after each 1 ms sleep, and how long each call into the front
    (its mutex taken with the GIL held) took."""
    late: list[float] = []
    calls: list[float] = []
    end = time.monotonic() + seconds
    while (now := time.monotonic()) < end:
        await asyncio.sleep(PROBE_SECONDS)
        woke = time.monotonic()
        late.append(woke - now - PROBE_SECONDS)
        door.held(lid)
        calls.append(time.monotonic() - woke)
    return late, calls


def _summary(late: list[float]) -> str:
    ms = sorted(x * 1000 for x in late)
    p99 = ms[int(len(ms) * 0.99)]
    return f"median {statistics.median(ms):.2f} ms, p99 {p99:.2f} ms, max {ms[-1]:.2f} ms"


async def main(seconds: float, clients: int) -> None:
    """Measure and print (see the module's docstring)."""
    if front.missing() is not None:
        raise SystemExit(f"front_flood: the C front door is not built: {front.missing()}")
    door = front.front_door()
    closer = _Closer(door)
    sock = front.listening_socket(0)
    scope = SessionScope(RelaySettings(pool_size=0))
    closer.lid = door.add(sock, closer, "/", scope, scope.budget.open())
    port = sock.getsockname()[1]
    try:
        quiet, quiet_calls = await _probe(seconds, door, closer.lid)
        flood = await asyncio.create_subprocess_exec(
            sys.executable, "-c", FLOOD, str(port), str(seconds), str(clients)
        )
        try:
            loaded, loaded_calls = await _probe(seconds, door, closer.lid)
        finally:
            await flood.wait()
    finally:
        door.remove(closer.lid)
        sock.close()
    print(
        f"loop without a flood: {_summary(quiet)}; a call into the front: {_summary(quiet_calls)}"
    )
    print(
        f"loop during the flood ({clients} clients): {_summary(loaded)}; "
        f"a call into the front: {_summary(loaded_calls)}"
    )
    print(f"connections handed over: {closer.handed} in {seconds:.0f} s")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    given = sys.argv[1:]
    asyncio.run(main(float(given[0]) if given else 5.0, int(given[1]) if len(given) > 1 else 16))

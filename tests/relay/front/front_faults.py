"""The front door's failure paths, driven through its fault sites (``_front._fail_next``):
every path that takes a place in the connection limits gives it back when it fails.

The sites exist only in a build with ``-DSANDBRIDGE_FAULTS`` (``front_sanitizers.build``
makes one), so this module is not collected by the suite's own run (its name does not
start with ``test_``): ``tests/relay/front/test_front_sanitized.py`` runs it on the ASan and
UBSan build, and ``./dev.sh tsan`` on ThreadSanitizer's (``front_sanitizers.TESTS``).
Each test holds a connection in the front (counted: one place of the listener's and of
its session's), makes the next step fail, and finds both counts back at nothing.
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbridge.relay.front import _front
from sandbridge.relay.front._front import FRESH, Front
from tests.relay.host.test_budget import FAULT_STEPS, STEPS, run_steps

HOST = b"x.localhost:1"
BLOCK = b"Host: " + HOST + b"\r\n\r\n"
TRANSLATED = b"Host: " + HOST + b"\r\nX-Forwarded-Proto: http\r\n\r\n"
# A response the front relays whole (under its PEEK_MAX) that a browser reading nothing,
# with the smallest receive buffer, cannot take in one send.
BIG_BODY = b"x" * 60000
WAIT_SECONDS = 10.0


def fail_next(site: str) -> None:
    assert _front.FAULTS, "these tests need a build with -DSANDBRIDGE_FAULTS"
    _front._fail_next(site)


def wait_until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (the front's counts change on its own thread: no event says so)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@dataclass
class Served:
    door: Front
    lid: int
    port: int

    def counts(self) -> tuple[int, int]:
        """The listener's held connections, and its session's."""
        held = self.door.held(self.lid)
        return held.held, held.scope_held

    def browser(self, *, small: bool = False) -> socket.socket:
        """A connection to the listener, held (counted) by the front."""
        sock = socket.socket()
        if small:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        sock.settimeout(WAIT_SECONDS)
        sock.connect(("127.0.0.1", self.port))
        wait_until(lambda: self.counts() == (1, 1))
        return sock

    def park(self) -> socket.socket:
        """Remember the GET block and park an idle app connection; the app's end."""
        assert self.door.remember(
            self.lid, socket.inet_aton("127.0.0.1"), b"GET", BLOCK, TRANSLATED
        )
        app, parked = socket.socketpair()
        app.settimeout(WAIT_SECONDS)
        assert self.door.park(self.lid, parked.fileno())
        parked.close()
        return app


@pytest.fixture
def served() -> Iterator[Served]:
    door = Front(owner=os.getuid())
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    lid = door.add_listener(
        fd=listener.fileno(),
        port=listener.getsockname()[1],
        base_path=b"/",
        pool_size=4,
        pool_idle=60.0,
        keepalive=60.0,
        grace=60.0,
        room=8,
        scope=1,
        scope_room=8,
    )
    try:
        yield Served(door, lid, listener.getsockname()[1])
    finally:
        listener.close()
        door.close()


def closed_by_the_front(sock: socket.socket) -> bool:
    """Whether the front closed ``sock`` (what it sent before is read and dropped)."""
    while sock.recv(65536):
        pass
    return True


def test_a_handoff_the_queue_has_no_memory_for_gives_its_place_back(served: Served) -> None:
    with served.browser() as browser:
        fail_next("handoff")
        browser.sendall(b"GET /unknown HTTP/1.1\r\n" + BLOCK)  # not known: handed over
        assert closed_by_the_front(browser)
    wait_until(lambda: served.counts() == (0, 0))
    assert served.door.take() == []


def test_handoffs_take_cannot_deliver_are_closed_and_give_their_places_back(
    served: Served,
) -> None:
    with served.browser() as browser:
        browser.sendall(b"GET /unknown HTTP/1.1\r\n" + BLOCK)
        assert select.select([served.door.fileno()], [], [], WAIT_SECONDS)[0]
        assert served.counts() == (1, 1)  # handed over counted, not yet adopted
        fail_next("take")
        with pytest.raises(MemoryError):
            served.door.take()
        assert served.counts() == (0, 0)
        assert closed_by_the_front(browser)


def test_a_request_with_no_memory_to_keep_is_handed_over_unsent(served: Served) -> None:
    with served.park() as app, served.browser() as browser:
        request = b"GET /a HTTP/1.1\r\n" + BLOCK
        fail_next("request")
        browser.sendall(request)
        assert select.select([served.door.fileno()], [], [], WAIT_SECONDS)[0]
        [handoff] = served.door.take()
        # Nothing went to the app (its idle connection is closed unused): the request
        # goes as the browser sent it, not as one to send again (RETRY).
        assert (handoff.kind, handoff.data, handoff.counted) == (FRESH, request, True)
        assert handoff.app_fd == -1
        assert app.recv(1) == b""
        os.close(handoff.browser_fd)
        assert served.counts() == (1, 1)
        assert served.door.adopted(handoff.listener, handoff.generation, False)
        assert served.counts() == (0, 0)


def test_a_response_rest_with_no_memory_drops_both_and_gives_the_place_back(
    served: Served,
) -> None:
    response = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BIG_BODY) + BIG_BODY
    with served.park() as app, served.browser(small=True) as browser:
        fail_next("rest")
        # The browser reads nothing: responses relayed whole fill what the kernel holds
        # for it, until one goes out in part and the front must keep the rest.
        for relayed in range(1, 64):
            browser.sendall(b"GET /a HTTP/1.1\r\n" + BLOCK)
            assert app.recv(65536) == b"GET /a HTTP/1.1\r\n" + TRANSLATED
            app.sendall(response)
            wait_until(
                lambda: (
                    served.door.held(served.lid).relayed == relayed  # noqa: B023
                    or served.counts() == (0, 0)
                )
            )
            if served.counts() == (0, 0):
                break
        assert served.door.held(served.lid).relayed < relayed, "never sent in part"
        assert app.recv(1) == b""  # the app connection went with it
        assert closed_by_the_front(browser)
    assert served.door.take() == []


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(sorted({*STEPS, *FAULT_STEPS})), max_size=24))
def test_the_budget_is_whole_after_every_step_and_every_failure(names: list[str]) -> None:
    run_steps(names)

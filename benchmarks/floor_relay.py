"""A reference for ``benchmarks.first_byte``: the least a Python relay on uvloop does.

Not a relay to use: it shows where the interpreter's floor is for a new connection's
time to first byte, measured beside nginx and sandbridge in the same run.

- ``bytes``: the owner check at accept (sandbridge's own, :mod:`sandbridge.relay.host.local_peer`)
  and bytes copied both ways over parked app connections. No HTTP at all.
- ``http``: the same, plus what no HTTP relay can skip and sandbridge does on every
  request: llhttp reads the request head, it is checked and translated for the app
  (:class:`~sandbridge.protocol.http.forwarding.ConnectionHeads`), and the response head
  is read and translated for the browser
  (:func:`~sandbridge.protocol.http.exchange.decide_response`).

Only what the benchmark sends is served: bodiless requests, one at a time per connection.

    python -m benchmarks.floor_relay --listen PORT --app PORT [--http]
"""

from __future__ import annotations

import argparse
import asyncio

import uvloop

from sandbridge.protocol.http.exchange import ResponseDecision, decide_response
from sandbridge.protocol.http.forwarding import ConnectionHeads
from sandbridge.protocol.http.origin_policy import AppOrigin
from sandbridge.protocol.http.parser import (
    BodyChunk,
    RequestHead,
    RequestReader,
    ResponseHead,
    ResponseReader,
)
from sandbridge.relay.host import local_peer


class Floor:
    """One listener's settings and its parked app connections."""

    def __init__(self, listen: int, app: int, http: bool) -> None:
        self.listen, self.app, self.http = listen, app, http
        self.origin = AppOrigin(listen)
        self.heads = ConnectionHeads(
            base_path="/", origin=self.origin, client_host="127.0.0.1", sandbox_port=app
        )
        self.parked: list[AppSide] = []


class AppSide(asyncio.Protocol):
    """An app connection: copies the app's bytes (or translated response) to its browser."""

    def __init__(self, floor: Floor) -> None:
        self.floor = floor
        self.browser: BrowserSide | None = None
        self.transport: asyncio.Transport | None = None
        self.reader = ResponseReader(b"GET")
        self.decision: ResponseDecision | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        browser = self.browser
        if browser is None or browser.transport is None:
            return
        if not self.floor.http:
            browser.transport.write(data)
            return
        for event in self.reader.feed(data):
            if isinstance(event, ResponseHead) and event.status >= 200:
                assert browser.head is not None
                delimited = self.reader.close_delimited
                self.decision = decide_response(
                    event, browser.head, self.floor.heads, close_delimited=delimited
                )
                browser.transport.write(self.decision.head)
            elif isinstance(event, BodyChunk) and self.decision is not None:
                browser.transport.write(self.decision.body(event.data))


class BrowserSide(asyncio.Protocol):
    """A browser connection: the owner's only, relayed over a parked app connection."""

    def __init__(self, floor: Floor) -> None:
        self.floor = floor
        self.transport: asyncio.Transport | None = None
        self.app: AppSide | None = None
        self.reader = RequestReader()
        self.head: RequestHead | None = None
        self.opening: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        local = ("127.0.0.1", self.floor.listen)
        if local_peer.owners_peer(transport, self.floor.listen, local) is None:
            transport.close()
            return
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.floor.http:
            events = self.reader.feed(data)
            if not events or not isinstance(events[0], RequestHead):
                return
            self.head = events[0]
            data = self.floor.heads.request(self.head, self.floor.origin.origins).head
            if self.app is not None:
                self.app.reader.next_response(self.head.method)
        if self.app is None:
            if not self.floor.parked:
                self.opening = asyncio.ensure_future(self._open(data))
                return
            self.app = self.floor.parked.pop()
            self.app.reader.next_response(self.head.method if self.head else b"GET")
            self.app.browser = self
        assert self.app.transport is not None
        self.app.transport.write(data)

    async def _open(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        _, app = await loop.create_connection(
            lambda: AppSide(self.floor), "127.0.0.1", self.floor.app
        )
        app.browser, self.app = self, app
        if self.head is not None:
            app.reader.next_response(self.head.method)
        assert app.transport is not None
        app.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.app is not None:
            self.app.browser = None
            self.floor.parked.append(self.app)


async def serve(floor: Floor) -> None:
    loop = asyncio.get_running_loop()
    local_peer.shared_owners()
    await loop.create_server(lambda: BrowserSide(floor), "127.0.0.1", floor.listen, backlog=512)
    print("READY", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor_relay")
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--app", type=int, required=True)
    parser.add_argument("--http", action="store_true")
    args = parser.parse_args()
    uvloop.run(serve(Floor(args.listen, args.app, args.http)))


if __name__ == "__main__":
    main()

"""How a new browser connection reaches its task: :class:`Arrivals`.

An accepted connection (the owner's, within the connection limits) waits on a doorstep
(:mod:`.doorstep`) until its first bytes arrive. Then, when they are a whole bodiless
request that may take a parked app connection, it is sent from that very callback
(:func:`~sandbridge.relay.listener.lane.send_first`) and the connection waits on a second doorstep
until the lane has relayed the response; its task starts only then, so that nothing but
the request stands between the browser's bytes and the app, and nothing but the
response between the app's bytes and the browser (docs/architecture.md, "Why these
parts exist"). Any other connection's task starts with its first bytes. New connections
reuse the request readers that finished ones left between two requests.

Each connection is a :class:`~sandbridge.relay.listener.connection.Connection` from the moment it
counts, and every step here is one of its moves (``waiting``, ``in-flight``, its task).
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
from typing import TYPE_CHECKING

from sandbridge import log
from sandbridge.exceptions import HttpError, UpstreamError
from sandbridge.protocol.http.forwarding import ConnectionHeads
from sandbridge.protocol.http.parser import MESSAGE_END, RequestHead
from sandbridge.relay.host import local_peer
from sandbridge.relay.host.channel import READ_BYTES, Channel
from sandbridge.relay.host.owned_upstream import CHANNEL_BUFFER_BYTES
from sandbridge.relay.host.upstream import UpstreamConnection
from sandbridge.relay.listener.browser import BrowserConnection
from sandbridge.relay.listener.connection import Connection, Listener
from sandbridge.relay.listener.connection_stage import RETRY, SENT, Event, Stage
from sandbridge.relay.listener.doorstep import Doorstep, refuse
from sandbridge.relay.listener.lane import KeepAliveLane, send_first

if TYPE_CHECKING:
    from sandbridge.relay.front._front import Handoff

# Client addresses whose translation of heads is shared (all loopback: one, usually).
SHARED_HEADS = 16


async def _channels(
    socks: list[socket.socket], seed: bytes
) -> tuple[Channel, UpstreamConnection | None]:
    """The browser channel of a handoff's sockets (``seed`` as its first read) and its
    app connection, if any; each socket leaves ``socks`` as the event loop takes it."""
    loop = asyncio.get_running_loop()
    upstream: UpstreamConnection | None = None
    try:
        if len(socks) == 2:
            _, app = await loop.create_connection(
                lambda: Channel(CHANNEL_BUFFER_BYTES), sock=socks[1]
            )
            del socks[1]
            app.host_only = True
            upstream = UpstreamConnection(app)
        _, channel = await loop.connect_accepted_socket(
            lambda: Channel(READ_BYTES, on_made=lambda made: _seed(made, seed)), socks[0]
        )
        del socks[0]
    except BaseException:
        if upstream is not None:
            upstream.channel.abort()
        raise
    return channel, upstream


def _close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()
    socks.clear()


def _seed(channel: Channel, data: bytes) -> None:
    """What the front door read of a connection, as the channel's first read."""
    if data:
        channel.data_received(data)


class Arrivals:
    """The new connections of one app listener, until each has its task."""

    def __init__(self, listener: Listener) -> None:
        self._listener = listener  # its limits, pool, tasks and connection count
        settings = listener.settings
        self.doorstep: Doorstep[Connection] = Doorstep(
            settings.keepalive_timeout, self._start, self._silent
        )
        self.in_flight: Doorstep[Connection] = Doorstep(
            settings.response_timeout, self._early, self._late
        )
        # The translation of heads, with its memory of the last head each way, shared by
        # the connections from one client address: a new connection's first request and
        # response are usually the last one's again (ConnectionHeads is synchronous and
        # its results are never changed in place, so sharing it changes no result).
        self._heads: dict[str, ConnectionHeads] = {}
        self._closed = False

    def close(self) -> None:
        """Drop the connections that have no task (the listener closes), and any
        accepted connection the event loop delivers from now on."""
        self._closed = True
        for channel, connection in self.doorstep.close():
            connection.close()
            channel.abort()
        for channel, connection in self.in_flight.close():
            lane, sent = connection.lane, connection.sent
            assert lane is not None and sent is not None
            lane.start_task = None
            lane.drop(sent)
            connection.close()
            channel.abort()

    def accept(self, channel: Channel) -> None:
        """A new connection: the owner's, and within the limits, waits on the doorstep
        (counted from now on) until its first bytes start its task (:meth:`_start`)."""
        listener = self._listener
        assert channel.transport is not None
        # A browser that takes nothing of a response (or of a refusal) for the response
        # timeout is dropped, as an app that sends nothing for it is.
        channel.drain_timeout = listener.settings.response_timeout
        if self._closed:
            # Accepted just before the server closed, delivered just after: the app is
            # closed, and nothing would close this connection or its task any more.
            channel.transport.abort()
            return
        local = listener.address if listener.host_port else None  # (known once bound)
        peer = local_peer.owners_peer(channel.transport, listener.host_port, local)
        if peer is None:
            channel.transport.abort()  # another user's: dropped before it counts anywhere
            return
        connection = self._admit(channel, peer[0], Stage.WAITING)
        if connection is not None:
            self.doorstep.wait(channel, connection)

    def _admit(
        self, channel: Channel, client_host: str, stage: Stage, counted: Handoff | None = None
    ) -> Connection | None:
        """Count a connection of the owner's in the budget (its :class:`Connection`, in
        ``stage``), or refuse it (503) past the limits; ``counted``: the front door's
        handoff that counted it already."""
        listener = self._listener
        account = listener.account
        if not (account.admit() if counted is None else account.adopt(counted)):
            task = listener.tasks.spawn(refuse(channel, listener.host_port))
            # (counted nowhere: if close() cancels the task before it ran, this closes it)
            task.add_done_callback(lambda _: channel.abort())
            return None
        connection = listener.connections[channel] = Connection(
            listener, channel, client_host, stage
        )
        return connection

    # The front door's handoffs (relay/front/front.py) ----------------------------------------

    def adopt(self, handoff: Handoff) -> None:
        """A connection the front door hands over: its task takes it from here."""
        browser_fd, app_fd = handoff.browser_fd, handoff.app_fd
        # Objects at once: whatever happens to the task, they are closed (a task the
        # listener's close cancels before it runs closes them through its callback),
        # and the front's count of it is given back once.
        socks: list[socket.socket] = []
        front_count = [handoff] if handoff.counted else []

        def done(_: object = None) -> None:
            _close_all(socks)
            self._uncount(front_count)

        try:
            socks.append(socket.socket(fileno=browser_fd))
            browser_fd = -1
            if app_fd >= 0:
                socks.append(socket.socket(fileno=app_fd))
                app_fd = -1
            if self._closed:
                done()
                return
            task = self._listener.tasks.spawn(self._adopt(socks, handoff, front_count))
        except BaseException:
            for fd in (browser_fd, app_fd):
                if fd >= 0:
                    os.close(fd)
            done()
            raise
        task.add_done_callback(done)

    def want_upstream(self) -> None:
        """The front door holds a request it would relay and has no idle app connection
        for it (a ``WANT`` handoff): one is opened and given over (:meth:`_supply`)."""
        if not self._closed:
            self._listener.tasks.spawn(self._supply())

    async def _supply(self) -> None:
        """An app connection for the front's waiting request; none can be opened (the app
        is not listening, say): the request is the relay's at once, which answers as it
        answers any (a 502), not after the front's grace."""
        listener = self._listener
        front = listener.front
        if front is None:
            return
        # A new one, never one of the relay's pool: the front reads a request's
        # connection closed unanswered as the app's answer, which holds of a new one only.
        try:
            opened = await listener.connector.open(listener.port)
        except (UpstreamError, OSError) as exc:
            log.debug("front.supply_failed", port=listener.port, error=str(exc))
            opened = None
        upstream = None if opened is None else UpstreamConnection(*opened)
        if not front.supply(listener.front_id, upstream) and upstream is not None:
            listener.park(upstream)  # (the relay's pool, or closed)

    def _uncount(self, front_count: list[Handoff]) -> None:
        """A connection the front door handed over counted is closed uncounted: its
        place is the front's lease's again (once)."""
        while front_count:
            self._listener.account.drop(front_count.pop())

    async def _adopt(
        self, socks: list[socket.socket], handoff: Handoff, front_count: list[Handoff]
    ) -> None:
        """Go on as the relay would have had it read what the front read: a connection
        not yet sent on (``FRESH``: its unsent bytes, maybe an idle app connection and
        bytes still to write to the browser; ``RETRY``: the same, its request sent once
        already on an idle app connection the app closed), or one whose request went out
        (``SENT``: its response unread)."""
        listener = self._listener
        kind, host, data, pending = handoff.kind, handoff.host, handoff.data, handoff.pending
        channel, upstream = await _channels(socks, data if kind != SENT else b"")
        channel.drain_timeout = listener.settings.response_timeout
        assert channel.transport is not None
        if pending:
            channel.write(pending)
        if (
            not handoff.checked
            and local_peer.owners_peer(channel.transport, listener.host_port, listener.address)
            is None
        ):
            channel.abort()  # another user's: dropped before it counts anywhere
            if upstream is not None:
                listener.park(upstream)
            return
        connection = None
        if self._closed:
            self._uncount(front_count)
        else:  # (its place moves from the front's lease, or is the lease's again)
            counted = front_count.pop() if front_count else None
            connection = self._admit(channel, host, Stage.FRONT, counted)
        if connection is None:
            if upstream is not None:
                upstream.channel.abort()
            if self._closed:
                channel.abort()
            return
        if kind == SENT and upstream is not None:
            self._sent(connection, upstream, data)
            return
        if upstream is not None:
            # (the relay's own pool: the request in hand is likely to want it now)
            pool = listener.pool
            pool.park(upstream) if pool is not None else upstream.channel.abort()
        if pending or channel.has_data() or channel.at_end():
            # (with bytes of a response still to write, the task's close waits for them
            # at most the drain timeout; the doorstep's would wait for good)
            self._start(channel, connection, retry=kind == RETRY)
        else:
            connection.move(Event.ADOPT)
            self.doorstep.wait(channel, connection)

    def _sent(self, connection: Connection, upstream: UpstreamConnection, data: bytes) -> None:
        """A request the front sent on ``upstream``: the lane takes its response."""
        channel = connection.channel
        browser = self._browser(connection)
        try:
            events = browser.parser.feed(data)
            head = events[0] if len(events) == 2 and events[1] is MESSAGE_END else None
            if not isinstance(head, RequestHead):
                raise HttpError(400, "the front door sent a request it did not read whole")
            request = browser.heads.request(head, self._listener.scope.origins)
        except HttpError as exc:
            # Cannot be (the same bytes were translated the same way before); should it
            # happen, the app's answer is dropped with both connections.
            log.warning("front.sent_unreadable", reason=str(exc))
            upstream.channel.abort()
            connection.close()
            channel.abort()
            return
        lane = connection.lane = KeepAliveLane(browser, self._listener.scope, None)
        lane.sent(upstream, head, request)
        self._send_first(connection, upstream)
        app = upstream.channel
        if app.has_data():  # read before the lane existed
            lane.received(app, app.take())
        if app.at_end() and app.lane is lane:
            lane.interrupted(app)
        if lane.start_task is not None and (channel.has_data() or channel.at_end()):
            # the browser sent more, or ended, before the doorstep watched it
            self.in_flight.leave(channel)
            self._early(channel, connection)

    def _heads_for(self, client_host: str) -> ConnectionHeads:
        """The translation of heads shared by the connections from ``client_host``."""
        listener = self._listener
        assert listener.origin is not None
        heads = self._heads.get(client_host)
        if heads is None:
            heads = ConnectionHeads(
                base_path=listener.base_path,
                origin=listener.origin,
                client_host=client_host,
                sandbox_port=listener.port,
                private=listener.gate is not None,
            )
            front = listener.front
            if front is not None and listener.gate is None:
                heads.on_translated = functools.partial(
                    front.remember, listener.front_id, client_host
                )
            if len(self._heads) < SHARED_HEADS:
                self._heads[client_host] = heads
        return heads

    def _browser(self, connection: Connection) -> BrowserConnection:
        """``connection``'s browser side, its first bytes arrived: a request reader
        (a spare one if any) and the translation of heads for its client."""
        browser = connection.browser = BrowserConnection(
            connection.channel,
            self._heads_for(connection.client_host),
            self._listener.readers.take(),
        )
        return browser

    def _start(self, channel: Channel, connection: Connection, *, retry: bool = False) -> None:
        """A connection's first bytes (or its end) arrived: its task starts, and its
        first request, if it may go at once, goes to the app first (:func:`send_first`).
        ``retry``: that request went out once already, on an idle app connection the
        app closed: it goes on a new one."""
        listener = self._listener
        browser = self._browser(connection)
        browser.no_parked = retry
        pool = listener.pool
        first = None
        if not retry and listener.gate is None and pool is not None and channel.has_data():
            first = send_first(browser, pool, listener.scope.origins)
        lane = connection.lane = KeepAliveLane(browser, listener.scope, listener.gate)
        if first is None:
            connection.start_task()
            return
        lane.sent(*first)
        self._send_first(connection, first[0])

    def _send_first(self, connection: Connection, sent: UpstreamConnection) -> None:
        """Its first request went out on ``sent`` (from here, or from the front): its
        task starts once the lane has relayed the response, or given up on it; a task
        started early (the browser sent more) waits only what is left of the response
        timeout."""
        lane = connection.lane
        assert lane is not None
        connection.sent = sent
        connection.move(Event.SEND_FIRST)
        lane.response_due = self.in_flight.wait(connection.channel, connection)
        lane.start_task = functools.partial(self._relayed, connection)

    def _relayed(self, connection: Connection) -> None:
        """The lane is done with a first request sent before the task existed."""
        self.in_flight.leave(connection.channel)
        connection.start_task()

    def _early(self, channel: Channel, connection: Connection) -> None:
        """Bytes or an end from the browser while its first request is in flight."""
        assert connection.lane is not None
        connection.lane.start_task = None
        connection.start_task()

    def _late(self, channel: Channel, connection: Connection) -> None:
        """No response within the response timeout: the task answers 502."""
        lane = connection.lane
        assert lane is not None
        lane.start_task = None
        lane.time_out()
        connection.start_task()

    def _silent(self, channel: Channel, connection: Connection) -> None:
        """Nothing arrived within the keep-alive timeout: closed, as an idle connection."""
        connection.close()
        channel.close()

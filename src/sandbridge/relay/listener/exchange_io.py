"""The task's reads and writes of one exchange on the data path
(:class:`~sandbridge.relay.listener.app_listener.AppListener`): the next request head under the
keep-alive and header timeouts, a private app's token exchange, what an exchange ended
with, the request body passed on, the app's reads under the response timeout, a 502."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sandbridge.exceptions import HttpError, UpstreamError
from sandbridge.protocol.http.forwarding import (
    LAST_CHUNK,
    Framing,
    UpstreamRequest,
    encode_chunk,
    error_response,
)
from sandbridge.protocol.http.parser import MESSAGE_END, BodyChunk, Event, RequestHead
from sandbridge.protocol.http.private_access import AccessGate, redirect_response
from sandbridge.relay.host.settings import RelaySettings
from sandbridge.relay.host.upstream import UpstreamConnection
from sandbridge.relay.listener.browser import BrowserConnection


@dataclass
class Exchange:
    """What one request/response exchange ended with."""

    keep_browser: bool = False
    reuse_upstream: bool = False
    response_started: bool = False
    interim_sent: bool = False  # a 1xx went to the browser: the request is never repeated
    body_sent: int = 0
    tunnelled: bool = False  # after a 101: both sockets now belong to a Tunnel


def no_response(response_timeout: float) -> str:
    """Why an exchange failed whose app sent nothing within the response timeout."""
    return f"app sent no response within {response_timeout:g} s"


def silent_mid_response(response_timeout: float) -> str:
    """Why a response failed whose app sent nothing more within the response timeout
    (the task's read or the body lane's wait)."""
    return f"app sent nothing for {response_timeout:g} s mid-response"


async def next_head(browser: BrowserConnection, settings: RelaySettings) -> Event | None:
    """Wait for the next request: idle up to the keep-alive timeout, then the head
    must be complete within the header timeout (a 408 otherwise); a head begun
    already (read with the previous request, or by the lane) gets only the latter."""
    if browser.events:
        return browser.events.popleft()
    if browser.failed is not None:
        raise browser.failed
    if not browser.parser.in_head:
        if browser.channel.has_data():  # a new connection's first request: here already
            data = await browser.channel.read()
        else:
            try:
                with browser.watchdog.limit(settings.keepalive_timeout):
                    data = await browser.channel.read()
            except TimeoutError:
                return None
        if not data:
            return None
        browser.events.extend(browser.parser.feed(data))
        if browser.events:  # the usual case: the whole head came in one read
            return browser.events.popleft()
    try:
        with browser.watchdog.limit(settings.header_timeout):
            return await browser.next_event()
    except TimeoutError:
        raise HttpError(
            408, f"request head not complete within {settings.header_timeout:g} s"
        ) from None


async def read_awaiting_response(
    browser: BrowserConnection,
    upstream: UpstreamConnection,
    exchange: Exchange,
    response_timeout: float,
) -> bytes:
    """Read from the app before its final response head: an app that neither answers
    nor takes request body for the response timeout has stalled (502)."""
    while True:
        progress = exchange.body_sent
        try:
            with browser.watchdog.limit(response_timeout):
                # Cancelling Channel.read loses no data: it stays buffered.
                return await upstream.channel.read()
        except TimeoutError:
            if exchange.body_sent == progress:
                raise UpstreamError(no_response(response_timeout)) from None


async def read_response_body(
    browser: BrowserConnection, upstream: UpstreamConnection, response_timeout: float
) -> bytes:
    """Read more of a response; silence for the response timeout ends the stream."""
    try:
        with browser.watchdog.limit(response_timeout):
            return await upstream.channel.read()
    except TimeoutError:
        raise UpstreamError(silent_mid_response(response_timeout)) from None


async def finish_body(pump: asyncio.Future[None], exchange: Exchange, patience: float) -> None:
    """Wait for the request body to finish while it makes progress."""
    while not pump.done():
        progress = exchange.body_sent
        await asyncio.wait({pump}, timeout=patience)
        if exchange.body_sent == progress:
            return


async def pump_request_body(
    browser: BrowserConnection,
    upstream: UpstreamConnection,
    request: UpstreamRequest,
    exchange: Exchange,
) -> None:
    """Pass the request body on to the app, each write awaited (backpressure)."""
    chunked = request.framing is Framing.CHUNKED
    while True:
        event = await browser.next_event()
        if event is None:
            # The request can never be completed: drop the app's connection now, or
            # the app waits for the rest of the body (and the relay for its answer)
            # until the response timeout, holding both connections.
            upstream.channel.abort()
            raise OSError("browser closed the connection mid-request")
        if event is MESSAGE_END:
            if chunked:
                await upstream.channel.send(LAST_CHUNK)
            return
        if isinstance(event, BodyChunk):
            await upstream.channel.send(encode_chunk(event.data) if chunked else event.data)
            exchange.body_sent += len(event.data)
        else:
            raise HttpError(400, "unexpected event in request body")


async def admit(
    browser: BrowserConnection, gate: AccessGate, head: RequestHead, header_timeout: float
) -> bool:
    """Private apps: exchange the one-time token for the cookie, or refuse (403).
    ``False``: the token was exchanged (a 303), and the connection goes on only if the
    request keeps it (``head.keep_alive``)."""
    redirect = gate.check(head.target, head.headers)
    if redirect is None:
        return True
    try:
        with browser.watchdog.limit(header_timeout):
            event = await browser.next_event()
    except TimeoutError:
        raise HttpError(408, f"request not complete within {header_timeout:g} s") from None
    if event is not MESSAGE_END:
        raise HttpError(400, "the token exchange takes no request body")
    await browser.send(redirect_response(redirect, head.keep_alive))
    return False


async def bad_gateway(
    browser: BrowserConnection,
    head: RequestHead,
    request: UpstreamRequest,
    reason: str,
    force_close: bool = False,
) -> Exchange:
    """A 502 for an exchange the app failed; the browser connection stays open when
    nothing of the request is left unread and the browser keeps it (``force_close``
    not set)."""
    keep = (
        not force_close
        and request.framing is Framing.NONE
        and not request.upgrade
        and head.keep_alive
        and head.version == "1.1"
    )
    if keep:
        event = await browser.next_event()  # the MESSAGE_END of a bodiless request
        keep = event is MESSAGE_END
    await browser.send(error_response(502, reason, keep_alive=keep))
    return Exchange(keep_browser=keep)

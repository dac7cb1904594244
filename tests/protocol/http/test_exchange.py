"""The response decision of one exchange: what the browser gets and which side is kept.

One row per framing case. Each request and response is read by the real readers, so
``close_delimited`` and ``extra_data`` are what the relay would see; the browser's bytes
are the decision's head, each body piece as :meth:`ResponseDecision.body` writes it,
and :attr:`ResponseDecision.end`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sandbridge.protocol.http.exchange import ResponseDecision, decide_response
from sandbridge.protocol.http.forwarding import ConnectionHeads, Framing
from sandbridge.protocol.http.origin_policy import AppOrigin
from sandbridge.protocol.http.parser import (
    MESSAGE_END,
    BodyChunk,
    RequestHead,
    RequestReader,
    ResponseHead,
    ResponseReader,
)

HOST = b"Host: 127.0.0.1:5000\r\n"
GET = b"GET / HTTP/1.1\r\n" + HOST + b"\r\n"
POLICY = b"Referrer-Policy: same-origin\r\n"


@dataclass(frozen=True)
class Case:
    request: bytes
    response: bytes  # everything the app sends, up to its close if ``app_closes``
    browser_gets: bytes
    framing: Framing
    keep_browser: bool
    reuse_upstream: bool
    app_closes: bool = False


CASES = {
    "content-length body": Case(
        GET,
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Content-Length: 5\r\nConnection: keep-alive\r\n\r\n"
        b"hello",
        Framing.LENGTH,
        keep_browser=True,
        reuse_upstream=True,
    ),
    "chunked body is re-chunked": Case(
        GET,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Transfer-Encoding: chunked\r\n"
        b"Connection: keep-alive\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n",
        Framing.CHUNKED,
        keep_browser=True,
        reuse_upstream=True,
    ),
    "close-delimited body goes chunked to HTTP/1.1": Case(
        GET,
        b"HTTP/1.1 200 OK\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Transfer-Encoding: chunked\r\n"
        b"Connection: keep-alive\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        Framing.CHUNKED,
        keep_browser=True,
        reuse_upstream=False,
        app_closes=True,
    ),
    "close-delimited body to HTTP/1.0 ends with the close": Case(
        b"GET / HTTP/1.0\r\n" + HOST + b"\r\n",
        b"HTTP/1.1 200 OK\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Connection: close\r\n\r\nhello",
        Framing.CLOSE,
        keep_browser=False,
        reuse_upstream=False,
        app_closes=True,
    ),
    "204 has no body": Case(
        GET,
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\n" + POLICY + b"Connection: keep-alive\r\n\r\n",
        Framing.NONE,
        keep_browser=True,
        reuse_upstream=True,
    ),
    "304 keeps its Content-Length and has no body": Case(
        GET,
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\n" + POLICY + b"Content-Length: 10\r\n"
        b"Connection: keep-alive\r\n\r\n",
        Framing.NONE,
        keep_browser=True,
        reuse_upstream=True,
    ),
    "HEAD has no body and never reuses the app connection": Case(
        b"HEAD / HTTP/1.1\r\n" + HOST + b"\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Content-Length: 5\r\nConnection: keep-alive\r\n\r\n",
        Framing.NONE,
        keep_browser=True,
        reuse_upstream=False,  # what follows a HEAD response cannot be told apart
    ),
    "empty Content-Length": Case(
        GET,
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Content-Length: 0\r\nConnection: keep-alive\r\n\r\n",
        Framing.NONE,
        keep_browser=True,
        reuse_upstream=True,
    ),
    "browser sends Connection: close": Case(
        b"GET / HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Content-Length: 2\r\nConnection: close\r\n\r\nok",
        Framing.LENGTH,
        keep_browser=False,
        reuse_upstream=True,
    ),
    "app sends Connection: close": Case(
        GET,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Content-Length: 2\r\nConnection: keep-alive\r\n\r\nok",
        Framing.LENGTH,
        keep_browser=True,
        reuse_upstream=False,
    ),
    "app answers in HTTP/1.0": Case(
        GET,
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Content-Length: 2\r\nConnection: keep-alive\r\n\r\nok",
        Framing.LENGTH,
        keep_browser=True,
        reuse_upstream=False,
    ),
    "HTTP/1.0 request": Case(
        b"GET / HTTP/1.0\r\n" + HOST + b"Connection: keep-alive\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Content-Length: 2\r\nConnection: close\r\n\r\nok",
        Framing.LENGTH,
        keep_browser=False,
        reuse_upstream=True,
    ),
    "extra data after the response": Case(
        GET,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n",
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Content-Length: 2\r\nConnection: keep-alive\r\n\r\nok",
        Framing.LENGTH,
        keep_browser=True,
        reuse_upstream=False,
    ),
    "upgrade request answered without a 101": Case(
        b"GET / HTTP/1.1\r\n" + HOST + b"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        # The head is built as for any request; the relay closes both connections after.
        b"HTTP/1.1 200 OK\r\n" + POLICY + b"Content-Length: 2\r\nConnection: keep-alive\r\n\r\nok",
        Framing.LENGTH,
        keep_browser=False,
        reuse_upstream=False,
    ),
}


def _heads() -> ConnectionHeads:
    return ConnectionHeads(
        base_path="/", origin=AppOrigin(5000), client_host="127.0.0.1", sandbox_port=5000
    )


def _relay(case: Case, heads: ConnectionHeads) -> tuple[ResponseDecision, bytes, bool]:
    """Decide the case's response as the relay does; return the decision, what the
    browser receives and whether the app connection is reused."""
    request = RequestReader().feed(case.request)[0]
    assert isinstance(request, RequestHead)
    reader = ResponseReader(request.method)
    events = reader.feed(case.response)
    if case.app_closes:
        events += reader.feed_eof()
    final = events[0]
    assert isinstance(final, ResponseHead) and events[-1] is MESSAGE_END
    decision = decide_response(final, request, heads, close_delimited=reader.close_delimited)
    body = [decision.body(event.data) for event in events if isinstance(event, BodyChunk)]
    browser_gets = decision.head + b"".join(body) + decision.end
    return decision, browser_gets, decision.reuse_upstream(reader.extra_data)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_response_decision_frames_the_body_and_keeps_each_side_as_the_table_says(
    case: Case,
) -> None:
    decision, browser_gets, reuse_upstream = _relay(case, _heads())
    assert browser_gets == case.browser_gets
    assert decision.framing is case.framing
    assert (decision.keep_browser, reuse_upstream) == (case.keep_browser, case.reuse_upstream)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_response_decision_is_the_same_when_the_connection_remembers_the_heads(
    case: Case,
) -> None:
    heads = _heads()
    for other in CASES.values():  # every other case first, as on one kept connection
        _relay(other, heads)
    assert _relay(case, heads) == _relay(case, _heads())

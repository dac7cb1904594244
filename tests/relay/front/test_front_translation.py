"""The front door's response translation (``_front_translate.c``) against the Python relay's.

``translate_response`` relays a whole response from C only when the Python relay would
relay it the same way: llhttp (``ResponseReader``) reads exactly those bytes as one whole
response, ``build_browser_response`` and ``decide_response`` give the very same head, and
the browser connection is kept. The property test feeds both generated heads that mix
well-formed and hostile pieces; the table below pins the cases the front door exists for
and the ones it must leave to the Python relay.
"""

from __future__ import annotations

import collections
import os
import select
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.exchange import decide_response
from sandbridge.protocol.http.forwarding import ConnectionHeads, build_browser_response
from sandbridge.protocol.http.origin_policy import AppOrigin
from sandbridge.protocol.http.parser import (
    MESSAGE_END,
    BodyChunk,
    Event,
    RequestHead,
    ResponseHead,
    ResponseReader,
)
from sandbridge.protocol.relay_settings import MAX_POOL_SIZE
from sandbridge.relay.front._front import (
    FRESH,
    INCOMPLETE,
    LEFT,
    MAX_POOL,
    PEEK_MAX,
    RELAYED,
    RETRY,
    SENT,
    WANT,
    Front,
    Handoff,
    Held,
    Translation,
    translate_response,
)

SANDBOX_PORT = 5000
HOST = b"x.localhost:1"


def _request(head_request: bool) -> RequestHead:
    """The request the front door relays: bodiless, HTTP/1.1, keep-alive, no upgrade."""
    method = b"HEAD" if head_request else b"GET"
    return RequestHead(method, b"/", "1.1", [(b"Host", HOST)], keep_alive=True, upgrade=False)


@dataclass
class PythonRelay:
    """What the Python relay makes of a response read in one piece."""

    events: list[Event]
    refused: HttpError | None
    reader: ResponseReader


def python_relay(data: bytes, head_request: bool) -> PythonRelay:
    reader = ResponseReader(_request(head_request).method)
    try:
        return PythonRelay(reader.feed(data), None, reader)
    except HttpError as refused:
        return PythonRelay([], refused, reader)


def check_agreement(data: bytes, head_request: bool) -> int:
    """Assert that the C translation of ``data`` is one the Python relay agrees with;
    return C's verdict."""
    translation = translate_response(data, head_request)
    verdict, head, whole = translation.verdict, translation.head, translation.whole
    python = python_relay(data, head_request)
    if verdict == INCOMPLETE:
        assert head is None and whole == 0
        # Waiting for more is safe only while llhttp has not completed a message: the
        # Python relay gets the connection (with these bytes) if more never comes.
        assert MESSAGE_END not in python.events, (data, python.events)
        return verdict
    if verdict == LEFT:
        assert head is None and whole == 0
        return verdict
    assert verdict == RELAYED, verdict
    assert isinstance(head, bytes)
    assert python.refused is None, (data, python.refused)
    # One whole response, exactly all of data: head, body pieces, end.
    assert whole == len(data)
    final, *body, end = python.events
    assert isinstance(final, ResponseHead), python.events
    assert end is MESSAGE_END, python.events
    assert all(isinstance(piece, BodyChunk) for piece in body), python.events
    head_end = data.index(b"\r\n\r\n") + 4
    assert (
        b"".join(piece.data for piece in body if isinstance(piece, BodyChunk))
        == (data[head_end:whole])
    )
    assert not python.reader.close_delimited
    request = _request(head_request)
    browser = build_browser_response(
        final,
        request=request,
        close_delimited=False,
        keep_alive=True,
        sandbox_port=SANDBOX_PORT,
        private=False,
    )
    assert browser.head == head
    assert browser.keep_alive
    heads = ConnectionHeads(
        base_path="/",
        origin=AppOrigin(1, "x"),
        client_host="127.0.0.1",
        sandbox_port=SANDBOX_PORT,
    )
    decision = decide_response(final, request, heads, close_delimited=python.reader.close_delimited)
    assert decision.head == head
    assert decision.keep_browser
    # The app connection: kept after any response but a HEAD's, which the Python relay
    # never reuses (what follows a HEAD response's head may be a body the app sent all
    # the same); the front door relays no HEAD request for that reason
    # (test_head_request_is_left_to_the_python_relay).
    assert decision.reuse_upstream(python.reader.extra_data) is (not head_request)
    if not head_request:
        assert final.keep_alive
    # Every strict prefix of a relayed response waits for more: nothing is left to the
    # Python relay only because a read ended early (in a long body, every 997th).
    cuts = (
        range(len(data))
        if len(data) <= 4096
        else [*range(head_end), *range(head_end, len(data), 997), len(data) - 1]
    )
    for cut in cuts:
        assert translate_response(data[:cut], head_request).verdict == INCOMPLETE, cut
    return verdict


# ---- the grammar of generated responses ------------------------------------------------

SPECIAL_NAMES = [
    "content-length",
    "connection",
    "connection",
    "set-cookie",
    "set-cookie",
    "referrer-policy",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "set-cookie",
    "referrer-policy",
    "location",
    "content-location",
    "upgrade",
    "te",
    "trailer",
    "proxy-authenticate",
    "proxy-authorization",
    "clear-site-data",
]
TCHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~"
PLAIN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=;/,.\"'()"


def _case(name: str, how: int) -> str:
    return (name, name.upper(), name.title(), name.swapcase())[how]


@st.composite
def special_name(draw: st.DrawFn) -> bytes:
    return _case(draw(st.sampled_from(SPECIAL_NAMES)), draw(st.integers(0, 3))).encode()


token = st.text(alphabet=TCHARS, min_size=1, max_size=12).map(str.encode)
hostile_name = st.sampled_from(
    [b"", b"X Y", b"X\x80", b"X\x00", b" Lead", b"Trail ", b"X\tY", b"(x)", b"a:b", b"\x7f"]
)
obs_text = st.binary(min_size=1, max_size=3).map(lambda b: bytes(c | 0x80 for c in b))
plain_text = st.text(alphabet=PLAIN, min_size=1, max_size=12).map(str.encode)
controls = st.sampled_from([b"\x00", b"\x01", b"\x1f", b"\x7f", b"\r", b"\n", b"\x0b", b"\x0c"])
inner_space = st.sampled_from([b" ", b"\t", b"  ", b" \t"])


@st.composite
def text_value(draw: st.DrawFn, *, hostile: bool = True) -> bytes:
    """A field value or reason: visible text, inner spaces and tabs, obs-text, and
    (sometimes) controls."""
    pieces = [plain_text, plain_text, inner_space, obs_text]
    if hostile:
        pieces.append(controls)
    text = b"".join(draw(st.lists(st.one_of(*pieces), max_size=5)))
    # Whitespace around a value is no part of it (llhttp strips what leads; what trails
    # is the twist of its own below).
    return text if hostile else text.strip(b" \t")


@st.composite
def connection_value(draw: st.DrawFn) -> bytes:
    return draw(
        st.sampled_from(
            [
                b"keep-alive",
                b"Keep-Alive",
                b"KEEP-ALIVE",
                b"close",
                b"Close",
                b"upgrade",
                b"keep-alive, x-extra",
                b"x-extra",
                b"",
                b"keep-alive,",
                b"te",
            ]
        )
    )


@st.composite
def cookie_value(draw: st.DrawFn) -> bytes:
    prefix = draw(
        st.sampled_from(
            [
                b"",
                b"sandbridge_",
                b"Sandbridge_",
                b"SANDBRIDGE_",
                b"=sandbridge_",
                b"= sandbridge_",
                b" Sandbridge_",
                b"\tsandbridge_",
                b"sandbridge",
                b"x_sandbridge_",
            ]
        )
    )
    return prefix + draw(st.sampled_from([b"x=1", b"1234=abc; Path=/", b"id=7; HttpOnly"]))


@st.composite
def value_for(draw: st.DrawFn, name: bytes) -> bytes:
    """A value that suits the field's name mostly (a Connection's tokens, a cookie)."""
    lowered = name.lower()
    if lowered in (b"connection", b"proxy-connection"):
        return draw(connection_value())
    if lowered == b"set-cookie":
        return draw(cookie_value())
    if lowered == b"transfer-encoding":
        return draw(st.sampled_from([b"chunked", b"gzip", b"gzip, chunked", b"identity"]))
    if lowered == b"content-length":
        return draw(st.sampled_from([b"0", b"5", b"abc", b"-1", b"1 2", b"+3", b""]))
    if lowered in (b"location", b"content-location") and draw(st.booleans()):
        return b"http://127.0.0.1:%d/next" % SANDBOX_PORT
    return draw(text_value(hostile=False))


@st.composite
def field_line(draw: st.DrawFn, *, hostile: bool) -> bytes:
    """One header line with its line end: well-formed mostly, else (``hostile``) with
    one twist in its name, separator, value, surrounding whitespace or line end."""
    name = draw(token) if draw(st.integers(0, 2)) else draw(special_name())
    value = draw(value_for(name))
    separator = draw(st.sampled_from([b": ", b": ", b":", b":\t", b":  "]))
    trailing, end = b"", b"\r\n"
    twist = draw(st.integers(0, 39)) if hostile else -1
    if twist == 0:
        name = draw(hostile_name)
    elif twist == 1:
        separator = draw(st.sampled_from([b" :", b"\t:", b""]))
    elif twist == 2:
        value = draw(text_value(hostile=True)) + draw(controls)
    elif twist == 3:
        trailing = draw(st.sampled_from([b" ", b"\t", b" \t"]))
    elif twist == 4:
        end = draw(st.sampled_from([b"\n", b"\r\n \tfolded\r\n", b"\r\r\n", b"\r\n\t\r\n"]))
    return name + separator + value + trailing + end


COMMON_STATUS = st.sampled_from([200, 200, 201, 204, 204, 304, 304, 404, 500]).map(b"%d".__mod__)
ANY_STATUS = st.integers(100, 599).map(b"%d".__mod__)
ODD_STATUS = st.sampled_from([b"0", b"99", b"600", b"999", b"2000", b"20", b"2a0", b"+20", b" 200"])
VERSIONS = st.sampled_from(
    [b"HTTP/1.1"] * 40 + [b"HTTP/1.0", b"HTTP/2.0", b"http/1.1", b"HTTP/1.1 "]
)


@dataclass
class Response:
    data: bytes
    head_request: bool


@st.composite
def responses(draw: st.DrawFn) -> Response:
    """A response, read in one piece: in half of them the status line, the framing and
    the line syntax are sound (their fields still are any, the special ones too), in
    the others anything may be wrong."""
    hostile = draw(st.booleans())
    head_request = draw(st.integers(0, 3)) == 0
    version = draw(VERSIONS) if hostile else b"HTTP/1.1"
    statuses = (*[COMMON_STATUS] * 5, ANY_STATUS, ANY_STATUS, ODD_STATUS)
    status = draw(statuses[draw(st.integers(0, 7 if hostile else 4))])
    reason = b"".join(draw(st.lists(st.one_of(plain_text, inner_space, obs_text), max_size=4)))
    if hostile and draw(st.integers(0, 9)) == 0:
        reason += draw(controls) + draw(plain_text)
    if hostile and draw(st.integers(0, 31)) == 0:
        status_line = version + b" " + status + b"\r\n"  # no reason, no space
    else:
        status_line = version + b" " + status + b" " + reason + b"\r\n"
    lines = draw(st.lists(field_line(hostile=hostile), max_size=6))
    body = draw(st.binary(max_size=40))
    # The framing: a Content-Length that fits the body mostly, or one that does not.
    framing = draw(st.integers(0, 11)) if hostile else 0
    if framing < 8:
        lines.insert(draw(st.integers(0, len(lines))), b"Content-Length: %d\r\n" % len(body))
    elif framing == 8:  # the body is shorter than declared: more may come
        lines.append(b"Content-Length: %d\r\n" % (len(body) + draw(st.integers(1, 9))))
    elif framing == 9:  # bytes after the response
        extra = draw(st.integers(1, 9))
        lines.append(b"Content-Length: %d\r\n" % len(body))
        body += b"HTTP/1.1 200 OK\r\n"[:extra]
    elif framing == 10:  # the same length twice, or two lengths
        lines += [b"Content-Length: %d\r\n" % len(body)] * 2
        if draw(st.booleans()):
            lines[-1] = b"Content-Length: %d\r\n" % (len(body) + 1)
    # else: no Content-Length at all (or only a generated one)
    if (head_request or status in (b"204", b"304")) and draw(st.integers(0, 3)):
        body = b""  # a response without a body, as it should be, mostly
    data = status_line + b"".join(lines) + b"\r\n" + body
    if hostile and draw(st.integers(0, 2)) == 0:  # a read that ends anywhere
        data = data[: draw(st.integers(0, len(data) - 1))]
    return Response(data, head_request)


def test_generated_responses_relayed_from_c_are_relayed_alike_by_python() -> None:
    verdicts: collections.Counter[int] = collections.Counter()

    # 400 examples in every profile: the coverage check below (each verdict met often
    # enough) needs that many to hold; at 100 it misses about one run in seven.
    @settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
    @given(responses())
    def agree(response: Response) -> None:
        verdicts[check_agreement(response.data, response.head_request)] += 1

    agree()
    total = sum(verdicts.values())
    # Not vacuous: a good share is relayed from C (about two in five), and each other
    # verdict is reached often.
    assert verdicts[RELAYED] >= total // 5, verdicts
    assert verdicts[INCOMPLETE] >= total // 20, verdicts
    assert verdicts[LEFT] >= total // 5, verdicts


# ---- cases by hand ---------------------------------------------------------------------

ONE_KIB = b"x" * 1024
NGINX_1K = (
    b"HTTP/1.1 200 OK\r\n"
    b"Server: nginx/1.22.1\r\n"
    b"Date: Wed, 02 Dec 2026 01:00:00 GMT\r\n"
    b"Content-Type: application/octet-stream\r\n"
    b"Content-Length: 1024\r\n"
    b"Last-Modified: Tue, 01 Dec 2026 12:00:00 GMT\r\n"
    b"Connection: keep-alive\r\n"
    b'ETag: "692d8d40-400"\r\n'
    b"Accept-Ranges: bytes\r\n"
    b"\r\n"
)
NGINX_1K_BROWSER = (
    b"HTTP/1.1 200 OK\r\n"
    b"Server: nginx/1.22.1\r\n"
    b"Date: Wed, 02 Dec 2026 01:00:00 GMT\r\n"
    b"Content-Type: application/octet-stream\r\n"
    b"Last-Modified: Tue, 01 Dec 2026 12:00:00 GMT\r\n"
    b'ETag: "692d8d40-400"\r\n'
    b"Accept-Ranges: bytes\r\n"
    b"Referrer-Policy: same-origin\r\n"
    b"Content-Length: 1024\r\n"
    b"Connection: keep-alive\r\n"
    b"\r\n"
)
WERKZEUG_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Server: Werkzeug/3.1.3 Python/3.11.2\r\n"
    b"Date: Wed, 02 Dec 2026 01:00:00 GMT\r\n"
    b"Content-Type: text/html; charset=utf-8\r\n"
    b"Content-Length: 5\r\n"
)
TAIL = b"Referrer-Policy: same-origin\r\n"
KEEP = b"Connection: keep-alive\r\n\r\n"


def _sized(total: int) -> bytes:
    """A 200 response of ``total`` bytes in all, head (42 bytes) and body."""
    body = total - 42
    response = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % body + b"x" * body
    assert len(response) == total
    return response


@dataclass
class Case:
    data: bytes
    head_request: bool
    verdict: int
    head: bytes | None = None  # the browser's head, for RELAYED


CASES = {
    "benchmark_nginx_1k": Case(NGINX_1K + ONE_KIB, False, RELAYED, NGINX_1K_BROWSER),
    "werkzeug_keep_alive": Case(
        WERKZEUG_HEAD + b"\r\nhello",
        False,
        RELAYED,
        WERKZEUG_HEAD.replace(b"Content-Length: 5\r\n", b"")
        + TAIL
        + b"Content-Length: 5\r\n"
        + KEEP,
    ),
    "werkzeug_connection_close": Case(
        WERKZEUG_HEAD + b"Connection: close\r\n\r\nhello", False, LEFT
    ),
    "python_http_server_http_1_0": Case(
        b"HTTP/1.0 200 OK\r\nServer: SimpleHTTP/0.6 Python/3.11.2\r\nContent-Length: 2\r\n\r\nhi",
        False,
        LEFT,
    ),
    "no_fields_at_all_is_close_delimited": Case(b"HTTP/1.1 200 OK\r\n\r\n", False, LEFT),
    "no_fields_204": Case(
        b"HTTP/1.1 204 No Content\r\n\r\n",
        False,
        RELAYED,
        b"HTTP/1.1 204 No Content\r\n" + TAIL + KEEP,
    ),
    "relay_cookie_dropped": Case(
        b"HTTP/1.1 200 OK\r\nSet-Cookie: sandbridge_x=1\r\nSet-Cookie: app=1\r\n"
        b"Content-Length: 0\r\n\r\n",
        False,
        RELAYED,
        b"HTTP/1.1 200 OK\r\nSet-Cookie: app=1\r\n" + TAIL + b"Content-Length: 0\r\n" + KEEP,
    ),
    "nameless_relay_cookie_dropped": Case(
        b"HTTP/1.1 200 OK\r\nset-cookie:  =Sandbridge_x=1\r\nContent-Length: 0\r\n\r\n",
        False,
        RELAYED,
        b"HTTP/1.1 200 OK\r\n" + TAIL + b"Content-Length: 0\r\n" + KEEP,
    ),
    "app_referrer_policy_kept_without_default": Case(
        b"HTTP/1.1 200 OK\r\nreferrer-policy: no-referrer\r\nContent-Length: 0\r\n\r\n",
        False,
        RELAYED,
        b"HTTP/1.1 200 OK\r\nreferrer-policy: no-referrer\r\nContent-Length: 0\r\n" + KEEP,
    ),
    "204_content_length_dropped": Case(
        b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
        False,
        RELAYED,
        b"HTTP/1.1 204 No Content\r\n" + TAIL + KEEP,
    ),
    "304_content_length_kept": Case(
        b'HTTP/1.1 304 Not Modified\r\nETag: "a"\r\nContent-Length: 1024\r\n\r\n',
        False,
        RELAYED,
        b'HTTP/1.1 304 Not Modified\r\nETag: "a"\r\n' + TAIL + b"Content-Length: 1024\r\n" + KEEP,
    ),
    "head_content_length_kept_without_body": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n",
        True,
        RELAYED,
        b"HTTP/1.1 200 OK\r\n" + TAIL + b"Content-Length: 1024\r\n" + KEEP,
    ),
    "head_with_a_body_after_it": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", True, LEFT
    ),
    "connection_close": Case(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", False, LEFT
    ),
    "connection_keep_alive_any_case": Case(
        b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\nKeep-Alive: timeout=5\r\n"
        b"Content-Length: 2\r\n\r\nhi",
        False,
        RELAYED,
        b"HTTP/1.1 200 OK\r\n" + TAIL + b"Content-Length: 2\r\n" + KEEP,
    ),
    "connection_naming_a_field": Case(
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n",
        False,
        LEFT,
    ),
    "proxy_connection_close": Case(
        b"HTTP/1.1 200 OK\r\nProxy-Connection: close\r\nContent-Length: 0\r\n\r\n", False, LEFT
    ),
    "chunked": Case(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", False, LEFT
    ),
    "location": Case(
        b"HTTP/1.1 302 Found\r\nLocation: /next\r\nContent-Length: 0\r\n\r\n", False, LEFT
    ),
    "content_location": Case(
        b"HTTP/1.1 200 OK\r\nContent-Location: /a\r\nContent-Length: 0\r\n\r\n", False, LEFT
    ),
    "interim_100": Case(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", False, LEFT
    ),
    "switching_protocols": Case(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        False,
        LEFT,
    ),
    "duplicate_content_length": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi", False, LEFT
    ),
    "bytes_after_the_response": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1", False, LEFT
    ),
    "exactly_64_kib_in_all": Case(
        _sized(PEEK_MAX),
        False,
        RELAYED,
        b"HTTP/1.1 200 OK\r\n" + TAIL + b"Content-Length: %d\r\n" % (PEEK_MAX - 42) + KEEP,
    ),
    "one_byte_over_64_kib_in_all": Case(_sized(PEEK_MAX + 1), False, LEFT),
    # Under 64 KiB in all, but over the Python reader's header section limit as it counts
    # (name + value + 4 a field, one more than "A:v" takes): found by the C fuzz target.
    "fields_past_the_python_head_limit_in_a_shorter_head": Case(
        b"HTTP/1.1 200 OK\r\n"
        + b"".join(b"A:" + b"v" * 657 + b"\r\n" for _ in range(99))
        + b"Content-Length:0\r\n\r\n",
        False,
        LEFT,
    ),
    "64_kib_body": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 65536\r\n\r\n" + b"x" * 65536, False, LEFT
    ),
    "64_kib_body_left_at_once": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 65536\r\n\r\n", False, LEFT
    ),
    "exactly_100_fields": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
        + b"".join(b"X-%d: 1\r\n" % n for n in range(99))
        + b"\r\n",
        False,
        RELAYED,
        b"HTTP/1.1 200 OK\r\n"
        + b"".join(b"X-%d: 1\r\n" % n for n in range(99))
        + TAIL
        + b"Content-Length: 0\r\n"
        + KEEP,
    ),
    "more_than_100_fields_with_dropped_ones": Case(
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
        + b"".join(b"X-%d: 1\r\n" % n for n in range(100))
        + b"\r\n",
        False,
        LEFT,
    ),
    "more_than_100_dropped_fields": Case(
        b"HTTP/1.1 200 OK\r\n" + b"Keep-Alive: 1\r\n" * 101 + b"Content-Length: 0\r\n\r\n",
        False,
        LEFT,
    ),
    "obs_fold": Case(b"HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 0\r\n\r\n", False, LEFT),
    "bare_lf": Case(b"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", False, LEFT),
    "nul_in_value": Case(
        b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n", False, LEFT
    ),
    "obs_text_in_value_and_reason": Case(
        b"HTTP/1.1 200 \xc3\x9c\r\nX-A: \xe2\x82\xac\r\nContent-Length: 0\r\n\r\n",
        False,
        RELAYED,
        b"HTTP/1.1 200 \xc3\x9c\r\nX-A: \xe2\x82\xac\r\n" + TAIL + b"Content-Length: 0\r\n" + KEEP,
    ),
    "empty_value": Case(
        b"HTTP/1.1 200 OK\r\nX-A:\r\nContent-Length: 0\r\n\r\n",
        False,
        RELAYED,
        b"HTTP/1.1 200 OK\r\nX-A: \r\n" + TAIL + b"Content-Length: 0\r\n" + KEEP,
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_hand_picked_response(case: Case) -> None:
    translation = translate_response(case.data, case.head_request)
    verdict, head, whole = translation.verdict, translation.head, translation.whole
    assert verdict == case.verdict
    assert head == case.head
    assert whole == (len(case.data) if verdict == RELAYED else 0)
    assert check_agreement(case.data, case.head_request) == case.verdict


def test_a_translation_crosses_from_c_named() -> None:
    translation = translate_response(NGINX_1K + ONE_KIB, False)
    assert isinstance(translation, Translation)
    assert translation.verdict == RELAYED
    assert translation.head == NGINX_1K_BROWSER
    assert translation.whole == len(NGINX_1K + ONE_KIB)
    assert (RELAYED, INCOMPLETE, LEFT) == (0, 1, 2)  # (the C's TR_OK, TR_INCOMPLETE, TR_BAIL)


def test_response_split_anywhere_waits_until_whole() -> None:
    data = NGINX_1K + ONE_KIB
    for cut in range(len(data)):
        cut_short = translate_response(data[:cut], False)
        assert (cut_short.verdict, cut_short.head, cut_short.whole) == (INCOMPLETE, None, 0), cut
    whole = translate_response(data, False)
    assert (whole.verdict, whole.head, whole.whole) == (RELAYED, NGINX_1K_BROWSER, len(data))


# ---- what the front door does with the app connection after a response -------------------


@pytest.fixture
def front() -> Iterator[tuple[Front, int, socket.socket]]:
    """A front door serving one loopback listener (root base path): the front, the
    listener's id, and the browser's connection to it."""
    yield from _front(grace=60.0)


def _front(grace: float) -> Iterator[tuple[Front, int, socket.socket]]:
    door = Front(owner=os.getuid())
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    lid = door.add_listener(
        fd=listener.fileno(),
        port=port,
        base_path=b"/",
        pool_size=4,
        pool_idle=60.0,
        keepalive=60.0,
        grace=grace,
        room=8,
        scope=1,
        scope_room=8,
    )
    listener.close()  # the front keeps its own duplicate
    browser = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        yield door, lid, browser
    finally:
        browser.close()
        door.close()


BLOCK = b"Host: " + HOST + b"\r\n\r\n"
TRANSLATED = b"Host: " + HOST + b"\r\nX-Forwarded-Proto: http\r\n\r\n"


def _park(door: Front, lid: int, method: bytes) -> socket.socket:
    """Remember the request block for ``method`` and park an idle app connection;
    return the app's end of it."""
    assert door.remember(lid, socket.inet_aton("127.0.0.1"), method, BLOCK, TRANSLATED)
    app, parked = socket.socketpair()
    app.settimeout(10)
    assert door.park(lid, parked.fileno())
    parked.close()
    return app


def test_get_exchange_keeps_both_connections(front: tuple[Front, int, socket.socket]) -> None:
    door, lid, browser = front
    response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
    translation = translate_response(response, False)
    verdict, head = translation.verdict, translation.head
    assert verdict == RELAYED and head is not None
    with _park(door, lid, b"GET") as app:
        browser.sendall(b"GET /a HTTP/1.1\r\n" + BLOCK)
        assert app.recv(65536) == b"GET /a HTTP/1.1\r\n" + TRANSLATED
        app.sendall(response)
        received = b""
        while len(received) < len(head) + 2:
            piece = browser.recv(65536)
            assert piece, received
            received += piece
        assert received == head + b"hi"
        browser.sendall(b"GET /b HTTP/1.1\r\n" + BLOCK)  # on the same app connection
        assert app.recv(65536) == b"GET /b HTTP/1.1\r\n" + TRANSLATED
        # All from C so far: one exchange relayed, nothing handed to the Python relay
        # (closing the app's end now hands the second request over to be sent again).
        held = door.held(lid)
        assert (held.relayed, held.handed) == (1, 0)
        assert door.take() == []


def _handed(door: Front) -> Handoff:
    """The one handoff the front has for the relay, once it has one."""
    assert select.select([door.fileno()], [], [], 10)[0], "nothing handed over"
    [handoff] = door.take()
    return handoff


def _waiting(door: Front, lid: int, browser: socket.socket) -> bytes:
    """A request the front knows, sent with no idle app connection in its pool: it waits
    and asks the relay for one (a WANT handoff, which carries no connection); its bytes."""
    assert door.remember(lid, socket.inet_aton("127.0.0.1"), b"GET", BLOCK, TRANSLATED)
    request = b"GET /a HTTP/1.1\r\n" + BLOCK
    browser.sendall(request)
    want = _handed(door)
    assert (want.listener, want.kind, want.browser_fd, want.app_fd) == (lid, WANT, -1, -1)
    assert not want.counted and door.held(lid).held == 1  # the browser's: still the front's
    return request


def _given_back(door: Front, request: bytes) -> None:
    """The waiting request, the relay's now: as the browser sent it, unsent, no app
    connection with it, its connection counted by the front until the relay counts it."""
    handoff = _handed(door)
    os.close(handoff.browser_fd)
    assert (handoff.kind, handoff.data, handoff.app_fd) == (FRESH, request, -1)
    assert handoff.counted


def test_a_request_with_no_idle_app_connection_waits_for_the_one_the_relay_parks(
    front: tuple[Front, int, socket.socket],
) -> None:
    door, lid, browser = front
    request = _waiting(door, lid, browser)
    app, parked = socket.socketpair()
    app.settimeout(10)
    with app:
        assert door.park(lid, parked.fileno())  # to the waiting request, not the pool
        parked.close()
        assert app.recv(65536) == request.replace(BLOCK, TRANSLATED)
        response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
        app.sendall(response)
        head = translate_response(response, False).head
        assert head is not None
        received = b""
        while len(received) < len(head) + 2:
            piece = browser.recv(65536)
            assert piece, received
            received += piece
        assert received == head + b"hi"
        held = door.held(lid)
        assert (held.relayed, held.handed, held.pooled) == (1, 0, 0)
        assert door.take() == []


def test_a_waiting_request_is_the_relays_when_no_app_connection_comes(
    front: tuple[Front, int, socket.socket],
) -> None:
    door, lid, browser = front
    request = _waiting(door, lid, browser)
    assert not door.park(lid, -1)  # the relay could not open one (the app is down, say)
    _given_back(door, request)
    assert not door.park(lid, -1)  # none waits any more: nothing happens
    assert door.take() == []


def test_a_supplied_connection_the_app_wrote_to_already_gives_the_request_to_the_relay(
    front: tuple[Front, int, socket.socket],
) -> None:
    # (an app that writes a banner, or one at its limit that closes what it accepts: the
    # front asks no more, each ask would start the request's grace again)
    door, lid, browser = front
    request = _waiting(door, lid, browser)
    app, supplied = socket.socketpair()
    with app, supplied:
        app.sendall(b"220 hello\r\n")
        assert not door.park(lid, supplied.fileno())
        _given_back(door, request)
        assert door.take() == [] and door.held(lid).pooled == 0


def test_a_request_on_a_supplied_connection_the_app_closes_unanswered_is_not_sent_again(
    front: tuple[Front, int, socket.socket],
) -> None:
    # A new connection closed unanswered is the app's answer (the relay's 502), not a kept
    # one's keep-alive ending: handed over as sent (SENT), not to be sent once more (RETRY).
    door, lid, browser = front
    request = _waiting(door, lid, browser)
    app, supplied = socket.socketpair()
    with app:
        app.settimeout(10)
        assert door.park(lid, supplied.fileno(), True)  # opened for it
        supplied.close()
        assert app.recv(65536) == b"GET /a HTTP/1.1\r\n" + TRANSLATED
    handoff = _handed(door)
    os.close(handoff.browser_fd)
    os.close(handoff.app_fd)
    assert (handoff.kind, handoff.data) == (SENT, request)


def test_a_kept_connection_parked_for_a_waiting_request_and_closed_unanswered_sends_it_again(
    front: tuple[Front, int, socket.socket],
) -> None:
    # One a browser connection is done with (FrontDoor.park_upstream) may have met the
    # app's keep-alive timeout: its end is no answer, and the request goes once more.
    door, lid, browser = front
    request = _waiting(door, lid, browser)
    app, kept = socket.socketpair()
    with app:
        app.settimeout(10)
        assert door.park(lid, kept.fileno())
        kept.close()
        assert app.recv(65536) == b"GET /a HTTP/1.1\r\n" + TRANSLATED
    handoff = _handed(door)
    os.close(handoff.browser_fd)
    assert (handoff.kind, handoff.data, handoff.app_fd) == (RETRY, request, -1)


def test_a_waiting_request_is_the_relays_once_the_grace_is_over() -> None:
    for door, lid, browser in _front(grace=0.2):
        request = _waiting(door, lid, browser)
        _given_back(door, request)  # no app connection came within the grace
        app, parked = socket.socketpair()
        with app, parked:  # one that comes after: to the pool
            assert door.park(lid, parked.fileno())
            assert door.held(lid).pooled == 1


def test_head_request_is_left_to_the_python_relay(
    front: tuple[Front, int, socket.socket],
) -> None:
    door, lid, browser = front
    with pytest.raises(ValueError, match="GET or OPTIONS"):
        door.remember(lid, socket.inet_aton("127.0.0.1"), b"HEAD", BLOCK, TRANSLATED)
    with _park(door, lid, b"GET") as app:  # the same block, known for GET
        request = b"HEAD /a HTTP/1.1\r\n" + BLOCK
        browser.sendall(request)
        assert select.select([door.fileno()], [], [], 10)[0], "nothing handed over"
        [handoff] = door.take()
        os.close(handoff.browser_fd)
        # The request as the browser sent it, with the idle app connection for it (the
        # pool's rule lets a HEAD take one; the relay then never reuses it): untouched.
        assert (handoff.listener, handoff.kind) == (lid, FRESH)
        assert (handoff.data, handoff.pending, handoff.checked) == (request, b"", True)
        assert handoff.app_fd >= 0
        assert door.held(lid).pooled == 0
        os.close(handoff.app_fd)  # (the one end of it left): the app reads its end, and nothing
        assert app.recv(1) == b""


def test_handoffs_and_held_counts_cross_the_boundary_by_name() -> None:
    # (front.py and arrivals.py read them by these names: the stub declares no tuple)
    assert Handoff.__match_args__ == (
        "listener",
        "kind",
        "browser_fd",
        "app_fd",
        "host",
        "port",
        "data",
        "pending",
        "checked",
        "counted",
        "generation",
    )
    assert Held.__match_args__ == (
        "held",
        "pooled",
        "relayed",
        "handed",
        "scope_held",
        "room",
        "scope_room",
    )


def test_the_fronts_pool_limit_is_the_one_a_session_may_ask_for() -> None:
    assert MAX_POOL == MAX_POOL_SIZE


@pytest.mark.parametrize("pool_size", [-1, MAX_POOL + 1])
def test_a_pool_size_past_the_fronts_limit_is_refused_not_cut(pool_size: int) -> None:
    door = Front(owner=os.getuid())
    try:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            listener.setblocking(False)
            with pytest.raises(ValueError, match=f"pool_size must be 0 to 64, got {pool_size}"):
                door.add_listener(
                    fd=listener.fileno(),
                    port=listener.getsockname()[1],
                    base_path=b"/",
                    pool_size=pool_size,
                    pool_idle=1.0,
                    keepalive=1.0,
                    grace=1.0,
                    room=8,
                    scope=1,
                    scope_room=8,
                )
    finally:
        door.close()

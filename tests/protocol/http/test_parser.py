"""The llhttp-based readers: events, limits and strictness."""

from __future__ import annotations

import contextlib

import pytest

from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.parser import (
    MAX_HEADER_COUNT,
    MAX_PIPELINED,
    MESSAGE_END,
    BodyChunk,
    Event,
    RequestHead,
    RequestReader,
    ResponseHead,
    ResponseReader,
    Upgraded,
)


def test_request_head_and_end_are_events() -> None:
    events = RequestReader().feed(b"GET /a?b HTTP/1.1\r\nHost: x\r\n\r\n")
    assert isinstance(events[0], RequestHead)
    assert events[0].target == b"/a?b"
    assert events[1:] == [MESSAGE_END]


def test_head_split_byte_by_byte_gives_the_same_events() -> None:
    reader = RequestReader()
    data = b"POST /u HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
    events = [event for byte in data for event in reader.feed(bytes([byte]))]
    assert isinstance(events[0], RequestHead)
    assert b"".join(e.data for e in events if isinstance(e, BodyChunk)) == b"abc"
    assert events[-1] is MESSAGE_END


def test_chunked_body_is_decoded_and_trailers_dropped() -> None:
    events = RequestReader().feed(
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )
    head = events[0]
    assert isinstance(head, RequestHead)
    assert all(name != b"X-Trailer" for name, _ in head.headers)
    assert events[1:] == [BodyChunk(b"abc"), MESSAGE_END]


def test_pipelined_requests_are_read_in_order() -> None:
    events = RequestReader().feed(
        b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    targets = [e.target for e in events if isinstance(e, RequestHead)]
    assert targets == [b"/1", b"/2"]


def test_upgrade_hands_over_the_trailing_bytes() -> None:
    events = RequestReader().feed(
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nFRAME"
    )
    assert isinstance(events[0], RequestHead) and events[0].upgrade
    assert events[-1] == Upgraded(b"FRAME")


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET / HTTP/1.1\nHost: x\n\n", 400),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", 400),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414),
    ],
)
def test_malformed_requests_are_refused_with_status(data: bytes, status: int) -> None:
    with pytest.raises(HttpError) as refused:
        RequestReader().feed(data)
    assert refused.value.status == status


def test_too_many_headers_is_431() -> None:
    head = b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADER_COUNT + 1))
    with pytest.raises(HttpError) as refused:
        RequestReader().feed(head + b"\r\n")
    assert refused.value.status == 431


def test_unending_header_section_is_431() -> None:
    reader = RequestReader()
    reader.feed(b"GET / HTTP/1.1\r\nX: ")
    with pytest.raises(HttpError) as refused:
        for _ in range(100):
            reader.feed(b"a" * 4096)
    assert refused.value.status == 431


def test_interim_response_then_final_response() -> None:
    reader = ResponseReader(b"GET")
    events = reader.feed(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    )
    statuses = [e.status for e in events if isinstance(e, ResponseHead)]
    assert statuses == [100, 200]
    assert events[-2:] == [BodyChunk(b"ok"), MESSAGE_END]


def test_head_response_ends_after_its_head_despite_content_length() -> None:
    events = ResponseReader(b"HEAD").feed(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n")
    assert events[-1] is MESSAGE_END


def test_close_delimited_body_ends_at_eof() -> None:
    reader = ResponseReader(b"GET")
    reader.feed(b"HTTP/1.1 200 OK\r\n\r\nabc")
    assert reader.close_delimited
    assert reader.feed_eof() == [MESSAGE_END]


def test_truncated_response_is_502() -> None:
    reader = ResponseReader(b"GET")
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    with pytest.raises(HttpError) as failed:
        reader.feed_eof()
    assert failed.value.status == 502


def test_bytes_after_the_response_mark_the_connection_unusable() -> None:
    reader = ResponseReader(b"GET")
    events = reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naHTTP/1.1 200 OK\r\n\r\n")
    assert events[-1] is MESSAGE_END
    assert reader.extra_data


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Name: a\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"NOT HTTP\r\n\r\n",
    ],
)
def test_malformed_responses_are_502(data: bytes) -> None:
    with pytest.raises(HttpError) as failed:
        ResponseReader(b"GET").feed(data)
    assert failed.value.status == 502


@pytest.mark.parametrize("status", [b"000", b"099", b"600", b"999"])
def test_status_outside_100_to_599_is_502(status: bytes) -> None:
    with pytest.raises(HttpError) as failed:
        ResponseReader(b"GET").feed(b"HTTP/1.1 " + status + b" X\r\n\r\n")
    assert failed.value.status == 502


def test_a_length_body_read_after_its_head_is_passed_on_without_a_copy() -> None:
    reader = ResponseReader(b"GET")
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nab")
    piece = b"cdef"
    events = reader.feed(piece)
    assert len(events) == 1 and isinstance(events[0], BodyChunk)
    assert events[0].data is piece
    assert reader.feed(b"gh") == [BodyChunk(b"gh"), MESSAGE_END]
    assert not reader.extra_data


def test_bytes_after_a_length_framed_response_are_extra_data() -> None:
    reader = ResponseReader(b"GET")
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")
    assert reader.feed(b"abcdHTTP/1.1 200 OK\r\n") == [BodyChunk(b"abcd"), MESSAGE_END]
    assert reader.extra_data


def test_a_request_after_a_length_body_in_the_same_read_is_parsed() -> None:
    reader = RequestReader()
    reader.feed(b"POST /u HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n")
    events = reader.feed(b"abcGET /next HTTP/1.1\r\nHost: x\r\n\r\n")
    assert events[:2] == [BodyChunk(b"abc"), MESSAGE_END]
    assert isinstance(events[2], RequestHead) and events[2].target == b"/next"
    assert events[3:] == [MESSAGE_END]


def test_a_truncated_length_body_is_a_bad_gateway() -> None:
    reader = ResponseReader(b"GET")
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
    reader.feed(b"abc")
    with pytest.raises(HttpError) as failed:
        reader.feed_eof()
    assert failed.value.status == 502


@pytest.mark.parametrize("split_body", [False, True])
def test_a_reader_reads_the_next_response_on_the_same_connection(split_body: bool) -> None:
    reader = ResponseReader(b"GET")
    first = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"
    if split_body:  # the body bypasses llhttp, which then needs a fresh parser
        reader.feed(first)
        assert reader.feed(b"abc") == [BodyChunk(b"abc"), MESSAGE_END]
    else:
        assert reader.feed(first + b"abc")[1:] == [BodyChunk(b"abc"), MESSAGE_END]
    reader.next_response(b"GET")
    events = reader.feed(b"HTTP/1.1 404 Not Found\r\nContent-Length: 1\r\n\r\nx")
    assert isinstance(events[0], ResponseHead) and events[0].status == 404
    assert events[1:] == [BodyChunk(b"x"), MESSAGE_END]
    assert not reader.extra_data and not reader.close_delimited


def test_the_next_response_of_a_head_request_has_no_body() -> None:
    reader = ResponseReader(b"GET")
    reader.feed(b"HTTP/1.1 204 No Content\r\n\r\n")
    reader.next_response(b"HEAD")
    events = reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
    assert isinstance(events[0], ResponseHead) and events[1:] == [MESSAGE_END]


class _Forgetful(ResponseReader):
    """A reader that never recognises a head again: llhttp parses every response."""

    def _remember(self, data: bytes, events: list[Event]) -> None:
        return None


# Responses an app may send on one keep-alive connection, head and body together.
RESPONSES = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: a\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: b\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: a\r\n\r\nhelloEXTRA",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: a\r\n\r\nhel",
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\n\r\nuntil close",
    b"\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: a\r\n\r\n",
]


def _outcome(reader: ResponseReader, pieces: list[bytes]) -> object:
    """Everything the relay could learn from one response: events (body joined),
    framing facts, or the refusal."""
    seen: list[object] = []
    body = b""
    try:
        for piece in pieces:
            for event in reader.feed(piece):
                if isinstance(event, BodyChunk):
                    body += event.data
                elif isinstance(event, ResponseHead):
                    seen.append((event.status, event.reason, event.version, event.headers))
                    seen.append(event.keep_alive)
                else:
                    seen.append((body, event))
                    body = b""
        if not any(isinstance(item, tuple) and item[-1] is MESSAGE_END for item in seen):
            for event in reader.feed_eof():
                seen.append((body, event))
    except HttpError as refused:
        return ("refused", refused.status, str(refused))
    return (seen, body, reader.close_delimited, reader.extra_data)


def _read_in_turn(exchanges: list[tuple[bytes, bytes, int]]) -> None:
    """Read responses one after another as the relay does, with a reader that
    recognises heads and one that does not; every outcome must be the same."""
    readers: tuple[ResponseReader, ResponseReader] | None = None
    for raw, method, cut in exchanges:
        if readers is None:  # a new app connection
            readers = ResponseReader(method), _Forgetful(method)
        else:
            for reader in readers:
                reader.next_response(method)
        pieces = [piece for piece in (raw[:cut], raw[cut:]) if piece]
        outcome = _outcome(readers[0], pieces)
        assert outcome == _outcome(readers[1], pieces), (exchanges, outcome)
        # The relay reuses a connection only as protocol/http/exchange.py decides
        # (ResponseDecision.reuse_upstream, for a request without an upgrade).
        final = readers[1]._final_head
        if not (
            isinstance(outcome, tuple)
            and outcome[0] != "refused"
            and readers[1]._done
            and final is not None
            and final.keep_alive
            and not readers[1].close_delimited
            and not readers[1].extra_data
        ):
            readers = None


_EXCHANGES = [(raw, method) for raw in RESPONSES for method in (b"GET", b"HEAD")]


def test_a_head_recognised_again_reads_as_llhttp_reads_it() -> None:
    # every ordered pair, each read whole, cut inside its head, or cut inside its body
    for first, first_method in _EXCHANGES:
        for raw, method in _EXCHANGES:
            for cut in (len(raw), 20, len(raw) - 2):
                _read_in_turn([(first, first_method, len(first)), (raw, method, cut)])


def test_a_head_recognised_across_other_responses_reads_as_llhttp_reads_it() -> None:
    for first, first_method in _EXCHANGES:
        for middle, middle_method in _EXCHANGES:
            for raw, method in _EXCHANGES:
                _read_in_turn(
                    [
                        (first, first_method, len(first)),
                        (middle, middle_method, len(middle)),
                        (raw, method, len(raw)),
                    ]
                )


# What one connection's reader may have read when its connection ends (requests whole
# or cut anywhere, bodies, refusals, upgrades), whether it is left reusable, and what the
# next connection sends.
FIRST_CONNECTIONS = [
    (b"", True),
    (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", True),
    (b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n", True),
    (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n\r\n", True),
    (b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", True),
    (b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", True),
    (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", False),
    (b"GET / HTTP/1.0\r\nHost: a\r\n\r\n", False),
    (b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhel", False),
    (b"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", False),
    (b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nxx", False),
    (b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /half HTTP/1.1\r\nHo", False),
    (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", False),
    (b"BREW / HTCPCP/1.0\r\n\r\n", False),
]
NEXT_CONNECTIONS = [
    b"GET /n HTTP/1.1\r\nHost: b\r\nAccept: */*\r\n\r\n",
    b"POST /n HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /m HTTP/1.1\r\nHost: b\r\n\r\n",
    b"POST /n HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"GET /n HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
    b"GET /n HTTP/1.0\r\n\r\n",
    b"GET /n HTTP/1.1\r\nHost: b\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    b"\x00garbage\r\n\r\n",
]


def read_all(reader: RequestReader, data: bytes, cut: int) -> list[object]:
    """Events (or the refusal) of ``data`` fed in two pieces, cut at ``cut``."""
    events: list[object] = []
    try:
        for piece in (data[:cut], data[cut:]):
            if piece:
                events.extend(reader.feed(piece))
    except HttpError as exc:
        events.append(("refused", exc.status))
    return events


def used_reader(first: bytes) -> RequestReader:
    reader = RequestReader()
    with contextlib.suppress(HttpError):
        reader.feed(first)
    return reader


@pytest.mark.parametrize(("first", "reusable"), FIRST_CONNECTIONS)
def test_a_reader_left_reusable_reads_the_next_connection_as_a_new_one(
    first: bytes, reusable: bool
) -> None:
    """A finished connection's reader is reused for a new connection (the app
    listener's) only where it stands between two keep-alive requests; there it reads
    every next connection's bytes, whole and cut anywhere, as a new reader does."""
    assert used_reader(first).reusable() is reusable
    if not reusable:
        return
    for data in NEXT_CONNECTIONS:
        for cut in range(len(data) + 1):
            reused = used_reader(first)
            reused.forget()
            assert read_all(reused, data, cut) == read_all(RequestReader(), data, cut), (data, cut)


@pytest.mark.parametrize(
    "coding",
    [
        b"gzip",
        b"identity",
        b"chunked, gzip",
        b"gzip, chunked",
        b"chunked\r\nTransfer-Encoding: gzip",
    ],
)
def test_a_response_transfer_coding_other_than_chunked_is_502(coding: bytes) -> None:
    """llhttp reads a body whose last coding is not chunked to the connection's end, and
    de-chunks ``gzip, chunked`` leaving it gzipped; the relay sent either to the browser
    re-chunked without its coding (a close-delimited one cut short as incomplete)."""
    with pytest.raises(HttpError) as failed:
        ResponseReader(b"GET").feed(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + coding + b"\r\n\r\n"
        )
    assert failed.value.status == 502
    assert "Transfer-Encoding" in str(failed.value)


@pytest.mark.parametrize("coding", [b"chunked", b"Chunked", b" chunked "])
def test_a_chunked_response_is_read(coding: bytes) -> None:
    events = ResponseReader(b"GET").feed(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + coding + b"\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
    )
    assert [type(event).__name__ for event in events] == [
        "ResponseHead",
        "BodyChunk",
        "_MessageEnd",
    ]


def test_a_transfer_coding_on_a_response_without_a_body_is_not_looked_at() -> None:
    """(a 204, a 304 and a response to HEAD have no body, whatever their fields say)"""
    for status in (b"204", b"304"):
        events = ResponseReader(b"GET").feed(
            b"HTTP/1.1 " + status + b" X\r\nTransfer-Encoding: gzip\r\n\r\n"
        )
        assert events[-1] is MESSAGE_END
    events = ResponseReader(b"HEAD").feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n")
    assert events[-1] is MESSAGE_END


def test_more_requests_than_the_pipelining_limit_in_one_read_are_refused() -> None:
    """Every head read waits as Python objects until its turn (about 15 times its
    bytes): a 256 KiB read of minimal requests held 3.7 MiB."""
    request = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    assert len(RequestReader().feed(request * MAX_PIPELINED)) == 2 * MAX_PIPELINED
    with pytest.raises(HttpError) as refused:
        RequestReader().feed(request * (256 * 1024 // len(request)))
    assert refused.value.status == 400
    assert f"more than {MAX_PIPELINED} requests pipelined" in str(refused.value)


def test_the_pipelining_limit_counts_one_read() -> None:
    reader = RequestReader()
    request = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    for _ in range(4):
        assert len(reader.feed(request * MAX_PIPELINED)) == 2 * MAX_PIPELINED

"""The sandbox's requests read whole, one after another on a connection: bodies capped,
an upgrade's body read by its length and the rest kept for the stream, a client that
leaves noticed while an answer streams."""

from __future__ import annotations

import asyncio

import pytest

from sandbridge.containers.request_reader import MAX_AHEAD_BYTES, ClientRequest, RequestStream
from sandbridge.exceptions import ContainerRefused


def _stream(data: bytes, eof: bool = True, max_body: int = 1024) -> RequestStream:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return RequestStream(reader, 5.0, 5.0, max_body)


def _all(data: bytes, max_body: int = 1024) -> list[ClientRequest]:
    async def read() -> list[ClientRequest]:
        requests = _stream(data, max_body=max_body)
        found = []
        while (request := await requests.next()) is not None:
            found.append(request)
        return found

    return asyncio.run(read())


def test_requests_on_a_kept_alive_connection_are_read_one_after_another() -> None:
    found = _all(
        b"GET /_ping HTTP/1.1\r\nHost: d\r\n\r\n"
        b"POST /containers/create HTTP/1.1\r\nHost: d\r\nContent-Length: 2\r\n\r\n{}"
        b"POST /x HTTP/1.1\r\nHost: d\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"
    )
    assert [(r.method, r.target, r.body) for r in found] == [
        ("GET", "/_ping", b""),
        ("POST", "/containers/create", b"{}"),
        ("POST", "/x", b"ab"),
    ]


def test_a_body_over_the_cap_is_refused_with_413() -> None:
    chunked = b"Transfer-Encoding: chunked\r\n\r\n7d0\r\n" + b"a" * 2000 + b"\r\n0\r\n\r\n"
    for framing in (b"Content-Length: 2000\r\n\r\n" + b"a" * 2000, chunked):
        with pytest.raises(ContainerRefused) as refused:
            _all(b"POST /x HTTP/1.1\r\nHost: d\r\n" + framing)
        assert (refused.value.status, refused.value.rule) == (413, "body-size")


def test_an_upgrades_body_is_read_by_its_length_and_the_rest_kept_for_the_stream() -> None:
    [request] = _all(
        b"POST /exec/x/start HTTP/1.1\r\nHost: d\r\nContent-Length: 4\r\n"
        b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n{}{}stdin"
    )
    assert (request.upgrade, request.body, request.rest) == (True, b"{}{}", b"stdin")


def test_an_upgrade_whose_body_ends_early_is_refused() -> None:
    with pytest.raises(ContainerRefused) as refused:
        _all(
            b"POST /exec/x/start HTTP/1.1\r\nContent-Length: 40\r\n"
            b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n{}"
        )
    assert refused.value.status == 400


def test_a_head_that_never_ends_closes_the_connection_after_the_timeout() -> None:
    async def read() -> ClientRequest | None:
        reader = asyncio.StreamReader()
        reader.feed_data(b"GET /_ping HTTP/1.1\r\nHost: d\r\n")
        return await RequestStream(reader, 0.05, 5.0, 1024).next()

    assert asyncio.run(read()) is None


def test_a_client_that_closes_while_an_answer_streams_is_noticed_and_its_bytes_kept() -> None:
    async def watch() -> ClientRequest | None:
        requests = _stream(b"GET /_ping HTTP/1.1\r\nHost: d\r\n\r\n")
        await requests.closed()
        return await requests.next()

    request = asyncio.run(watch())
    assert request is not None and request.target == "/_ping"


def test_a_client_that_sends_too_much_while_an_answer_streams_is_let_go() -> None:
    async def watch() -> None:
        requests = _stream(b"GET /_ping HTTP/1.1\r\nHost: d\r\n\r\n" * 3000, eof=False)
        await asyncio.wait_for(requests.closed(), 5)

    assert len(b"GET /_ping HTTP/1.1\r\nHost: d\r\n\r\n" * 3000) > MAX_AHEAD_BYTES
    asyncio.run(watch())

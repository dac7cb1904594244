"""A bounded mutation fuzz run of the HTTP readers and the wire decoders.

Seeds are valid messages; each iteration mutates one (bit flips, inserted, deleted and
repeated bytes, splices of two seeds) and feeds it in random pieces. The invariant: the
code either accepts or refuses with its documented error (HttpError, WireError), never
anything else, and what it accepts is well-formed. The run is deterministic per seed
(``SANDBRIDGE_FUZZ_SEED``, default 1) and bounded (``SANDBRIDGE_FUZZ_ITERATIONS``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import Callable

import pytest
from hypothesis import settings

from sandbridge.exceptions import HttpError, WireError
from sandbridge.protocol import stream, v1
from sandbridge.protocol.auto_registration import parse_unregister_request
from sandbridge.protocol.http.forwarding import build_upstream_request
from sandbridge.protocol.http.origin_policy import AppOrigin
from sandbridge.protocol.http.parser import (
    MESSAGE_END,
    BodyChunk,
    RequestHead,
    RequestReader,
    ResponseHead,
    ResponseReader,
    Upgraded,
)
from sandbridge.protocol.jsonline import LineReader
from sandbridge.protocol.registration import parse_register_request

SEED = int(os.environ.get("SANDBRIDGE_FUZZ_SEED", "1"))
# 30,000 in the hypothesis profile "ci" (the suite's), in proportion in the others
# (tests/conftest.py): 7,500 in the fast tier's, 300,000 in "deep".
ITERATIONS = int(os.environ.get("SANDBRIDGE_FUZZ_ITERATIONS") or 300 * settings().max_examples)

REQUESTS = [
    b"GET /a?b=1 HTTP/1.1\r\nHost: 127.0.0.1:5000\r\nAccept: */*\r\n\r\n",
    b"POST /u HTTP/1.1\r\nHost: 127.0.0.1:5000\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /u HTTP/1.1\r\nHost: 127.0.0.1:5000\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: localhost:5000\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    b"Origin: http://127.0.0.1:5000\r\n\r\n\x81\x05hello",
    b"GET / HTTP/1.0\r\nHost: [::1]:5000\r\nConnection: keep-alive\r\n\r\n"
    b"GET /2 HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n",
]
RESPONSES = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nxx",
    b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close",
]
WIRE = [
    b'{"type":"register","port":4173,"base_path":"/app"}\n',
    b'{"type":"register","port":4173,"base_path":"/","process":"node","auto":true}\n',
    b'{"type":"unregister","host_port":43125}\n',
    b'{"type":"http_request","port":4173,"base_path":"/app","method":"GET","path":"/s?x=1",'
    b'"headers":[["accept","text/css"]],"body_base64":"aGk="}\n',
    b'{"ok":true,"status":200,"reason":"OK","headers":[["a","b"]],"body_base64":"aGk="}\n',
    b'{"ok":true,"stream":1}\n',
]


def mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    data = bytearray(rng.choice(seeds))
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(6)
        position = rng.randrange(len(data) + 1)
        if choice == 0 and data:
            index = rng.randrange(len(data))
            data[index] ^= 1 << rng.randrange(8)
        elif choice == 1:
            data[position:position] = bytes([rng.choice(b'\r\n :\x00\t\x7f\xff,;="/')])
        elif choice == 2 and data:
            del data[position : position + rng.randint(1, 8)]
        elif choice == 3 and data:
            start = rng.randrange(len(data))
            piece = data[start : start + rng.randint(1, 64)]
            data[position:position] = piece * rng.randint(1, 200)
        elif choice == 4:
            other = rng.choice(seeds)
            data = data[:position] + other[rng.randrange(len(other) + 1) :]
        else:
            data[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return bytes(data)


def pieces(rng: random.Random, data: bytes) -> list[bytes]:
    cuts = sorted(rng.sample(range(len(data) + 1), min(len(data), rng.randint(0, 6))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def run(target: Callable[[random.Random, bytes], None], seeds: list[bytes], salt: int) -> None:
    rng = random.Random(SEED * 1000 + salt)
    for iteration in range(ITERATIONS):
        data = mutate(rng, seeds)
        try:
            target(rng, data)
        except Exception as exc:  # the point of a fuzzer: report anything else
            pytest.fail(
                f"iteration {iteration} (seed {SEED}): {type(exc).__name__}: {exc}; input {data!r}"
            )


def test_request_reader_and_forwarding_policy() -> None:
    def target(rng: random.Random, data: bytes) -> None:
        reader = RequestReader()
        try:
            for piece in pieces(rng, data):
                for event in reader.feed(piece):
                    if isinstance(event, RequestHead):
                        try:
                            request = build_upstream_request(
                                event,
                                base_path="/app",
                                origin=AppOrigin(5000),
                                client_host="127.0.0.1",
                            )
                        except HttpError:
                            continue
                        assert isinstance(RequestReader().feed(request.head)[0], RequestHead)
                    else:
                        assert isinstance(event, BodyChunk | Upgraded) or event is MESSAGE_END
        except HttpError as refused:
            assert 400 <= refused.status <= 505

    run(target, REQUESTS, 1)


def test_response_reader() -> None:
    def target(rng: random.Random, data: bytes) -> None:
        reader = ResponseReader(rng.choice([b"GET", b"HEAD", b"POST"]))
        try:
            fed = 0
            body = 0
            for piece in pieces(rng, data):
                fed += len(piece)
                for event in reader.feed(piece):
                    if isinstance(event, ResponseHead):
                        assert 100 <= event.status <= 599
                    elif isinstance(event, BodyChunk):
                        body += len(event.data)
            reader.feed_eof()
            assert body <= fed
        except HttpError as refused:
            assert refused.status == 502

    run(target, RESPONSES, 2)


def test_wire_decoders() -> None:
    def target(rng: random.Random, data: bytes) -> None:
        lines = LineReader(4096)
        try:
            line = None
            for piece in pieces(rng, data):
                line = lines.feed(piece)
            line = line if line is not None else lines.feed_eof()
        except WireError:
            return
        for decode in (
            parse_register_request,
            parse_unregister_request,
            v1.decode_request,
            v1.decode_response,
            stream.decode_ack,
            lambda raw: stream.decode_open(json.loads(raw)) if raw.startswith(b"{") else None,
        ):
            with contextlib.suppress(WireError, ValueError):
                decode(line)

    run(target, WIRE, 3)

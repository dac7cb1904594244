"""Streaming responses, request bodies and response kinds through an app origin."""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import app_host, request
from tests.e2e.features import FeatureSession, feature_session


@pytest.fixture(scope="module", params=["/", "/app"])
def session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FeatureSession]:
    with feature_session(tmp_path_factory.mktemp("stream"), request.param) as running:
        yield running


def test_each_chunk_arrives_when_the_app_sends_it(session: FeatureSession) -> None:
    conn = http.client.HTTPConnection(app_host(session.port), session.port, timeout=10)
    conn.request("GET", "/chunks?n=4&pause_ms=300")
    response = conn.getresponse()
    assert response.getheader("Content-Type") == "text/plain"
    delays = []
    for _ in range(4):
        line = json.loads(response.readline())
        delays.append(time.time() * 1000 - line["sent"])
    assert max(delays) < 150, delays


def test_sse_events_stream_as_sent(session: FeatureSession) -> None:
    conn = http.client.HTTPConnection(app_host(session.port), session.port, timeout=10)
    conn.request("GET", "/sse?count=3&interval_ms=300", headers={"Accept": "text/event-stream"})
    response = conn.getresponse()
    delays: list[float] = []
    while len(delays) < 3:
        line = response.readline()
        if line.startswith(b"data: "):
            delays.append(time.time() * 1000 - json.loads(line[6:])["sent"])
    assert max(delays) < 150, delays


def test_last_event_id_reaches_the_app(session: FeatureSession) -> None:
    conn = http.client.HTTPConnection(app_host(session.port), session.port, timeout=10)
    conn.request("GET", "/sse?count=1&interval_ms=1", headers={"Last-Event-ID": "3"})
    body = conn.getresponse().read()
    assert b"id: 4\n" in body
    assert b'"resumed_from": "3"' in body


def test_streaming_response_outlives_the_idle_timeout(tmp_path: Path) -> None:
    with feature_session(tmp_path, "/", "--keepalive-timeout", "0.5") as running:
        conn = http.client.HTTPConnection(app_host(running.port), running.port, timeout=10)
        conn.request("GET", "/chunks?n=6&pause_ms=300")
        lines = conn.getresponse().read().splitlines()
        assert [json.loads(line)["i"] for line in lines] == list(range(6))


def test_idle_keep_alive_connection_is_closed_after_the_timeout(tmp_path: Path) -> None:
    with (
        feature_session(tmp_path, "/", "--keepalive-timeout", "0.5") as running,
        socket.create_connection(("127.0.0.1", running.port), timeout=10) as sock,
    ):
        started = time.monotonic()
        assert sock.recv(1) == b""
        assert 0.4 < time.monotonic() - started < 5


def test_content_length_upload(session: FeatureSession) -> None:
    body = bytes(range(256)) * 8192
    _, _, answer = request(session.port, "POST", "/sink", body=body)
    assert json.loads(answer) == {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def test_chunked_upload(session: FeatureSession) -> None:
    parts = [b"x" * 100_000, b"y", b"z" * 300_000]
    conn = http.client.HTTPConnection(app_host(session.port), session.port, timeout=10)
    conn.request("POST", "/sink", body=iter(parts), encode_chunked=True)
    answer = json.loads(conn.getresponse().read())
    assert answer["sha256"] == hashlib.sha256(b"".join(parts)).hexdigest()


def test_expect_100_continue(session: FeatureSession) -> None:
    body = b"after the interim response"
    with socket.create_connection(("127.0.0.1", session.port), timeout=10) as sock:
        sock.sendall(
            f"POST /sink HTTP/1.1\r\nHost: {app_host(session.port)}:{session.port}\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        interim = sock.recv(4096)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n")
        sock.sendall(body)
        final = b""
        while b"}" not in final:
            final += sock.recv(65536)
    assert final.startswith(b"HTTP/1.1 200 ")
    assert hashlib.sha256(body).hexdigest().encode() in final


def test_multipart_upload(session: FeatureSession) -> None:
    content = bytes(range(256)) * 4096
    boundary = "sandbridge-boundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f.bin"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    _, _, answer = request(
        session.port,
        "POST",
        "/upload",
        body=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert json.loads(answer) == {
        "name": "f.bin",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }


def test_range_request_gets_206(session: FeatureSession) -> None:
    status, headers, body = request(
        session.port, path="/media/tone.wav", headers={"Range": "bytes=1000-1999"}
    )
    assert status == 206
    assert headers["Content-Range"].startswith("bytes 1000-1999/")
    assert len(body) == 1000


def test_head_has_headers_and_no_body(session: FeatureSession) -> None:
    status, headers, body = request(session.port, "HEAD", "/media/tone.wav")
    assert status == 200 and body == b""
    assert int(headers["Content-Length"]) > 1_000_000


def test_absolute_redirect_to_the_sandbox_origin_lands_on_the_app_origin(
    session: FeatureSession,
) -> None:
    status, headers, _ = request(session.port, path="/redirect-absolute")
    assert status == 302
    assert headers["Location"] == f"{session.origin}{session.base}/api/hello?via=absolute"


def test_root_relative_redirect_keeps_working_under_the_base_path(session: FeatureSession) -> None:
    status, headers, _ = request(session.port, path="/redirect-root")
    assert (status, headers["Location"]) == (302, "/api/hello?via=root")
    status, _, body = request(session.port, path=headers["Location"])
    assert status == 200
    assert json.loads(body)["path"] == f"{session.base}/api/hello?via=root"

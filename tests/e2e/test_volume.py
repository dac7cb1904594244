"""Size and concurrency: 1 GiB each way, slow readers, 200 parallel connections.

Memory is measured, not assumed: the relay's two processes (the host and the shim in the
sandbox) must stay under 64 MiB peak RSS through all of it.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import json
import socket
from collections.abc import Iterator

import pytest

from tests.conftest import app_host
from tests.e2e.features import FeatureSession, feature_session, peak_rss_kib

GIB = 1 << 30
RSS_LIMIT_KIB = 64 * 1024
BLOCK = bytes(range(256)) * 1024  # the feature app's /bytes pattern


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FeatureSession]:
    with feature_session(tmp_path_factory.mktemp("volume")) as running:
        yield running


def expected_digest(size: int) -> str:
    digest = hashlib.sha256()
    full, rest = divmod(size, len(BLOCK))
    for _ in range(full):
        digest.update(BLOCK)
    digest.update(BLOCK[:rest])
    return digest.hexdigest()


def assert_relay_memory_bounded(session: FeatureSession) -> None:
    for pid in session.relay_pids():
        assert peak_rss_kib(pid) < RSS_LIMIT_KIB, f"process {pid} peaked at {peak_rss_kib(pid)} KiB"


def test_1_gib_download_is_intact(session: FeatureSession) -> None:
    conn = http.client.HTTPConnection(app_host(session.port), session.port, timeout=60)
    conn.request("GET", f"/bytes?n={GIB}")
    response = conn.getresponse()
    digest, total = hashlib.sha256(), 0
    while chunk := response.read(1 << 20):
        digest.update(chunk)
        total += len(chunk)
    assert total == GIB
    assert digest.hexdigest() == expected_digest(GIB)
    assert_relay_memory_bounded(session)


def test_1_gib_upload_is_intact(session: FeatureSession) -> None:
    def body() -> Iterator[bytes]:
        for _ in range(GIB // len(BLOCK)):
            yield BLOCK

    conn = http.client.HTTPConnection(app_host(session.port), session.port, timeout=60)
    conn.request("POST", "/sink", body=body(), headers={"Content-Length": str(GIB)})
    answer = json.loads(conn.getresponse().read())
    assert answer == {"size": GIB, "sha256": expected_digest(GIB)}
    assert_relay_memory_bounded(session)


def test_slow_reader_does_not_make_the_relay_buffer(session: FeatureSession) -> None:
    """A reader that stops reading: the app is held back, the relay's memory is not used."""
    size = 512 * 1024 * 1024
    with socket.create_connection(("127.0.0.1", session.port), timeout=30) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(
            f"GET /bytes?n={size} HTTP/1.1\r\n"
            f"Host: {app_host(session.port)}:{session.port}\r\n\r\n".encode()
        )
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        # This reader reads nothing more for now. The app reports when its writes stop
        # completing: a relay that buffered would have let it write all 512 MiB first.
        received = len(first) - first.index(b"\r\n\r\n") - 4
        probe = http.client.HTTPConnection(app_host(session.port), session.port, timeout=30)
        probe.request("GET", "/api/bytes-log")
        blocked_at = json.loads(probe.getresponse().read())["blocked_at"][0]
        assert blocked_at < 32 * 1024 * 1024, f"the app wrote {blocked_at} bytes before blocking"
        assert_relay_memory_bounded(session)
        while received < size:
            chunk = sock.recv(1 << 20)
            assert chunk, "stream ended early"
            received += len(chunk)
    assert received == size
    assert_relay_memory_bounded(session)


def test_200_concurrent_connections_get_complete_bodies(session: FeatureSession) -> None:
    def work(index: int) -> None:
        conn = http.client.HTTPConnection(app_host(session.port), session.port, timeout=60)
        try:
            kind = index % 4
            if kind == 0:
                size = 1 + index * 4099
                conn.request("GET", f"/bytes?n={size}")
                assert hashlib.sha256(conn.getresponse().read()).hexdigest() == expected_digest(
                    size
                )
            elif kind == 1:
                body = bytes([index % 256]) * (index * 1000 + 1)
                conn.request("POST", "/sink", body=body)
                answer = json.loads(conn.getresponse().read())
                assert answer["sha256"] == hashlib.sha256(body).hexdigest()
            elif kind == 2:
                for _ in range(5):
                    conn.request("GET", f"/api/hello?i={index}")
                    assert json.loads(conn.getresponse().read())["path"].endswith(f"?i={index}")
            else:
                conn.request("GET", "/chunks?n=3&pause_ms=20")
                assert len(conn.getresponse().read().splitlines()) == 3
        finally:
            conn.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=200) as pool:
        list(pool.map(work, range(200)))
    assert_relay_memory_bounded(session)

"""``sandbridge-open file:///...`` reads the file inside: real files, FIFOs, devices,
directories and links, each opened or refused naming what is wrong."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from sandbridge.exceptions import FileOpenRefused
from sandbridge.protocol.limits import MAX_HTML_SNAPSHOT_BYTES
from sandbridge.relay.inside.open_file import file_open

REDIRECT = b'<meta http-equiv="refresh" content="1;url=http://localhost:8888/lab?token=t1">'


def _url(path: Path) -> str:
    return path.as_uri()


def test_a_redirect_file_gives_the_app_url_it_names(tmp_path: Path) -> None:
    page = tmp_path / "jpserver-1-open.html"
    page.write_bytes(REDIRECT)
    assert file_open(_url(page)) == "http://localhost:8888/lab?token=t1"


def test_any_other_page_gives_its_bytes_for_a_snapshot(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    body = "<!doctype html><h1>r\u00e9sum\u00e9</h1>".encode()
    page.write_bytes(body)
    assert file_open(_url(page)) == body


def test_a_page_of_exactly_the_snapshot_limit_is_sent(tmp_path: Path) -> None:
    page = tmp_path / "big.html"
    page.write_bytes(b"x" * MAX_HTML_SNAPSHOT_BYTES)
    assert file_open(_url(page)) == b"x" * MAX_HTML_SNAPSHOT_BYTES


def test_a_link_is_followed_as_the_sandbox_would_follow_it(tmp_path: Path) -> None:
    # The helper reads with the sandbox's own rights: a link leads nowhere ``cat`` could not.
    (tmp_path / "real.html").write_bytes(REDIRECT)
    (tmp_path / "link.html").symlink_to(tmp_path / "real.html")
    assert file_open(_url(tmp_path / "link.html")) == "http://localhost:8888/lab?token=t1"


def test_a_fifo_is_refused_at_once_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "wait.html"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(FileOpenRefused, match=r"wait.html' is a FIFO, not a file: 'file://"):
        file_open(_url(fifo))
    # A blocking open would wait for a writer for good; refused in well under a second.
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda path: path.mkdir(), "a directory"),
        (lambda path: path.symlink_to("/dev/zero"), "a character device"),
        (lambda path: path.symlink_to("/dev/tty"), None),
    ],
)
def test_what_is_not_a_regular_file_is_refused_naming_it(
    tmp_path: Path, make: object, kind: str | None
) -> None:
    path = tmp_path / "thing.html"
    assert callable(make)
    make(path)
    with pytest.raises(FileOpenRefused) as caught:
        file_open(_url(path))
    message = str(caught.value)
    assert "thing.html" in message and "\n" not in message
    # /dev/tty may not be openable without a terminal: refused either way, by its name.
    assert kind is None or f"is {kind}, not a file" in message


def test_a_socket_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "s.html"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        # open(2) of a socket fails (ENXIO) before it could be looked at.
        with pytest.raises(FileOpenRefused, match=r"s\.html' \(No such device or address\)"):
            file_open(_url(path))


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FileOpenRefused) as caught:
        file_open(_url(tmp_path / "gone.html"))
    assert "gone.html' (No such file or directory)" in str(caught.value)


def test_a_page_past_the_snapshot_limit_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "huge.html"
    page.write_bytes(b"x" * (MAX_HTML_SNAPSHOT_BYTES + 1))
    with pytest.raises(FileOpenRefused, match=f"larger than {MAX_HTML_SNAPSHOT_BYTES} bytes"):
        file_open(_url(page))


def test_a_sparse_file_of_a_terabyte_is_refused_after_reading_past_the_limit_only(
    tmp_path: Path,
) -> None:
    page = tmp_path / "sparse.html"
    with page.open("wb") as file:
        file.truncate(1 << 40)
    with pytest.raises(FileOpenRefused, match="the snapshot limit"):
        file_open(_url(page))


def test_a_page_that_is_not_utf8_is_refused_with_the_byte_and_offset(tmp_path: Path) -> None:
    page = tmp_path / "latin1.html"
    page.write_bytes("<p>caf\u00e9</p>".encode("latin-1"))
    with pytest.raises(FileOpenRefused, match=r"is not UTF-8 \(byte 0xe9 at offset 6\)"):
        file_open(_url(page))


def test_a_page_redirecting_to_a_disguised_loopback_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "sneaky.html"
    page.write_bytes(b'<meta http-equiv="refresh" content="0;url=http://127.1:631/">')
    with pytest.raises(FileOpenRefused, match="redirects to a URL that is refused"):
        file_open(_url(page))

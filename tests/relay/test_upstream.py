"""The host never connects through an upstream.sock the sandbox has swapped."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from sandbridge.exceptions import UpstreamError
from sandbridge.relay.upstream import connect_unix_checked


def test_real_socket_is_connected(tmp_path: Path) -> None:
    path = tmp_path / "upstream.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        connect_unix_checked(path).close()


def test_symlink_to_a_host_socket_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "host-service.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(target))
        server.listen()
        link = tmp_path / "upstream.sock"
        link.symlink_to(target)
        with pytest.raises(UpstreamError, match="is a symlink"):
            connect_unix_checked(link)


def test_regular_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "upstream.sock"
    path.write_text("")
    with pytest.raises(UpstreamError, match="not a socket"):
        connect_unix_checked(path)


def test_fifo_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "upstream.sock"
    os.mkfifo(path)
    with pytest.raises(UpstreamError, match="not a socket"):
        connect_unix_checked(path)


def test_missing_socket_says_so(tmp_path: Path) -> None:
    with pytest.raises(UpstreamError, match="does not exist"):
        connect_unix_checked(tmp_path / "upstream.sock")

"""Telling a peer's half close from its close on a Unix stream socket (``hung_up``): the
broker's ``end=client`` against ``end=link`` for a client over the remote link."""

from __future__ import annotations

import socket

from sandbridge.terminals.fd_io import hung_up


def test_an_open_peer_has_not_hung_up() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        assert not hung_up(ours.fileno())


def test_a_half_close_is_not_a_hang_up() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        theirs.shutdown(socket.SHUT_WR)
        assert ours.recv(1) == b""  # the end of input, as the broker reads it
        assert not hung_up(ours.fileno())


def test_a_close_is_a_hang_up_even_after_a_half_close() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours:
        theirs.shutdown(socket.SHUT_WR)
        theirs.close()
        assert hung_up(ours.fileno())

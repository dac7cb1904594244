"""The one rule for where an app in the sandbox is reached (protocol/app_address.py)."""

from __future__ import annotations

import errno
import socket

import pytest

from sandbridge.protocol.app_address import (
    APP_ADDRESSES,
    IPV4_LOOPBACK,
    IPV6_LOOPBACK,
    AppAddress,
    AppAttempts,
    host_for,
    peers,
)


def test_the_contracts_address_comes_first_then_ipv6_loopback() -> None:
    assert APP_ADDRESSES == (IPV4_LOOPBACK, IPV6_LOOPBACK)
    assert IPV4_LOOPBACK == (socket.AF_INET, "127.0.0.1")
    assert IPV6_LOOPBACK == (socket.AF_INET6, "::1")


@pytest.mark.parametrize(
    ("address", "shown"),
    [(IPV4_LOOPBACK, "127.0.0.1:5173"), (IPV6_LOOPBACK, "[::1]:5173")],
)
def test_an_address_is_shown_as_a_url_writes_it(address: AppAddress, shown: str) -> None:
    assert address.shown(5173) == shown


def test_attempts_start_at_127_0_0_1() -> None:
    assert AppAttempts(5173).address == IPV4_LOOPBACK


def test_a_refusal_at_127_0_0_1_moves_on_to_ipv6_loopback() -> None:
    attempts = AppAttempts(5173)
    assert attempts.failed(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
    assert attempts.address == IPV6_LOOPBACK


def test_a_refusal_at_the_last_address_gives_up_naming_both() -> None:
    attempts = AppAttempts(5173)
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    assert attempts.failed(refused)
    assert not attempts.failed(refused)
    assert attempts.error == (
        "connect to 127.0.0.1:5173 failed: [Errno 111] Connection refused; "
        "connect to [::1]:5173 failed: [Errno 111] Connection refused"
    )


@pytest.mark.parametrize(
    "error",
    [
        TimeoutError(),  # the app is there, its accept queue full: that is its answer
        OSError(errno.EMFILE, "Too many open files"),
        OSError(errno.ENETUNREACH, "Network is unreachable"),
        OSError(errno.EACCES, "Permission denied"),
    ],
)
def test_any_failure_but_a_refusal_gives_up_at_once(error: OSError) -> None:
    attempts = AppAttempts(5173)
    assert not attempts.failed(error)
    assert attempts.address == IPV4_LOOPBACK
    assert attempts.error.startswith("connect to 127.0.0.1:5173 failed: ")


def test_a_timeout_is_said_as_timed_out() -> None:
    attempts = AppAttempts(80)
    attempts.failed(TimeoutError())
    assert attempts.error == "connect to 127.0.0.1:80 failed: timed out"


def test_an_address_that_cannot_be_tried_is_skipped_and_said() -> None:
    attempts = AppAttempts(5173)
    assert attempts.skip("no IPv6 socket")
    assert attempts.address == IPV6_LOOPBACK
    assert not attempts.skip("no IPv6 socket")
    assert attempts.error == (
        "127.0.0.1:5173 not tried: no IPv6 socket; [::1]:5173 not tried: no IPv6 socket"
    )


@pytest.mark.parametrize(
    ("family", "address", "host"),
    [
        (socket.AF_INET, IPV4_LOOPBACK, "127.0.0.1"),
        (socket.AF_INET, IPV6_LOOPBACK, None),  # an IPv4 socket cannot reach ::1
        (socket.AF_INET6, IPV4_LOOPBACK, "::ffff:127.0.0.1"),  # dual stack: mapped
        (socket.AF_INET6, IPV6_LOOPBACK, "::1"),
        (socket.AF_UNIX, IPV4_LOOPBACK, None),
    ],
)
def test_the_host_a_socket_of_each_family_connects_to(
    family: int, address: AppAddress, host: str | None
) -> None:
    assert host_for(family, address) == host


def test_the_peers_an_app_socket_may_have_by_family() -> None:
    assert peers(socket.AF_INET) == {"127.0.0.1"}
    assert peers(socket.AF_INET6) == {"::ffff:127.0.0.1", "::1"}
    assert peers(socket.AF_UNIX) == frozenset()

"""The attach client's pure parts; the client end to end is ``test_terminal_e2e.py``."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import sys
import termios
import threading
import time
import tty

import pytest

from sandbridge.terminals.attach import (
    END_ANSWER_WAIT,
    END_QUERY,
    Ending,
    describe,
    restore_terminal,
)


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        ("\x1b]52;c;ZWNobyBwd25lZA==\x07", "terminal ended: ?]52;c;ZWNobyBwd25lZA==?"),
        ("revoked\n\x1b[1Asandbridge: ok", "terminal ended: revoked??[1Asandbridge: ok"),
        ("expired\u202etxt.exe", "terminal ended: expired?txt.exe"),
        ("x" * 100, "terminal ended: " + "x" * 64),
    ],
)
def test_a_hostile_end_reason_is_shown_as_one_printable_line(reason: str, shown: str) -> None:
    # The worker (inside the sandbox) chooses an EXIT's reason, a far host a STOP's.
    assert describe(Ending(reason, 255)) == shown


def test_a_shells_exit_is_described_with_its_status() -> None:
    assert describe(Ending("exit", 3)) == "terminal ended: the shell exited with status 3"


def test_input_left_for_the_sandbox_never_reaches_the_host_shell() -> None:
    # Keys the owner typed for the sandbox (or a terminal's answer to a query the sandbox
    # printed last) still unread when the terminal ends: the host shell read them next.
    master, slave = pty.openpty()
    try:
        saved = termios.tcgetattr(slave)
        tty.setraw(slave)
        os.write(master, b"rm -rf ~/build\r")
        select.select([slave], [], [], 10)  # the line discipline has it
        assert _queued(slave) == len(b"rm -rf ~/build\r")
        restore_terminal(slave, saved)
        assert _queued(slave) == 0
        assert termios.tcgetattr(slave) == saved
    finally:
        os.close(master)
        os.close(slave)


def test_a_late_answer_to_the_sandboxs_query_never_reaches_the_host_shell() -> None:
    # A terminal across a slow hop answers the sandbox's last query (a cursor report)
    # after the terminal ended: the host shell read it. The client asks the terminal
    # for its answers' end (DA1) and drops its input until that answer.
    master, slave = pty.openpty()
    try:
        saved = termios.tcgetattr(slave)
        tty.setraw(slave)

        def slow_terminal() -> None:
            seen = b""
            while END_QUERY not in seen:  # the client's query reaches the terminal
                seen += os.read(master, 64)
            os.write(master, b"\x1b[12;40R")  # the late answer to the sandbox's query
            os.write(master, b"\x1b[?62;22c")  # then the answer to the client's

        terminal = threading.Thread(target=slow_terminal)
        terminal.start()
        restore_terminal(slave, saved, query_fd=slave)
        terminal.join(timeout=10)
        assert not terminal.is_alive()
        assert _queued(slave) == 0
        assert termios.tcgetattr(slave) == saved
    finally:
        os.close(master)
        os.close(slave)


def test_a_terminal_that_never_answers_costs_the_wait_once() -> None:
    master, slave = pty.openpty()
    try:
        saved = termios.tcgetattr(slave)
        tty.setraw(slave)
        started = time.monotonic()
        restore_terminal(slave, saved, query_fd=slave)
        assert END_ANSWER_WAIT <= time.monotonic() - started < END_ANSWER_WAIT + 5
        assert os.read(master, 64) == END_QUERY
        assert termios.tcgetattr(slave) == saved
    finally:
        os.close(master)
        os.close(slave)


def _queued(fd: int) -> int:
    raw = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    return int.from_bytes(raw, sys.byteorder)

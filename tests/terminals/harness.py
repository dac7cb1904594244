"""A real session with terminals: ``sandbridge run`` in a sandbox, CLI commands, and the
attach client on a real PTY (pexpect) wrapped in ``stty -g`` before and after."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pexpect

from sandbridge.terminals.attach import END_QUERY
from sandbridge.terminals.pty_worker import descendants
from tests.conftest import SANDBRIDGE, Process, processes_with, run_argv

SIZE = (33, 101)
PROMPT = "@sandbox:"
STTY_MARK = "STTY:"
WORKER_MARKER = "sandbridge.terminals.pty_worker"
# The attach client's terminal settings (stty -g) before it started, per pexpect child.
_STTY_BEFORE: dict[int, str] = {}


class TerminalSession:
    """One sandboxed session named ``web`` with private XDG dirs under ``tmp_path``."""

    def __init__(
        self,
        tmp_path: Path,
        backend: str = "bwrap",
        knobs: dict[str, str] | None = None,
        command: str = "exec sleep 600",
        options: tuple[str, ...] = (),
    ) -> None:
        self.tmp_path = tmp_path
        self.work = tmp_path / "work"
        self.work.mkdir(exist_ok=True)
        xdg = tmp_path / "xdg"
        xdg.mkdir(mode=0o700, exist_ok=True)
        self.env = {
            **os.environ,
            "XDG_RUNTIME_DIR": str(xdg),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "HOST_SECRET": "host-only-value",
            **(knobs or {}),
        }
        self.process = Process(
            run_argv(
                self.work,
                "sh",
                "-c",
                command,
                options=(
                    "--backend",
                    backend,
                    "--name",
                    "web",
                    "--env",
                    "SANDBOX_ONLY=1",
                    *options,
                ),
            ),
            env=self.env,
        )
        self.process.wait_line("sandbridge: session web", "stderr")

    def running(self, marker: str) -> list[int]:
        """This session's processes carrying ``marker`` (other test runs' are not counted)."""
        mine = set(descendants(self.process.popen.pid))
        return [pid for pid in processes_with(marker) if pid in mine]

    def wait_for(self, marker: str, timeout: float = 10.0) -> list[int]:
        """This session's processes carrying ``marker`` once one exists (polled)."""
        deadline = time.monotonic() + timeout
        while not (found := self.running(marker)):
            assert time.monotonic() < deadline, f"no process {marker!r} within {timeout}s"
            select.select([], [], [], 0.05)
        return found

    def wait_gone(self, marker: str, timeout: float) -> None:
        """Wait (polling up to ``timeout``) until none of this session's carries ``marker``."""
        deadline = time.monotonic() + timeout
        while self.running(marker):
            assert time.monotonic() < deadline, f"{marker!r} still running after {timeout}s"
            select.select([], [], [], 0.05)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*SANDBRIDGE, *args], env=self.env, capture_output=True, text=True, timeout=60
        )
        if check:
            assert result.returncode == 0, result.stderr
        return result

    def request(self, key: Path | None = None) -> str:
        extra = ("--key", str(key)) if key else ()
        return self.cli(
            "terminal", "request", "web", "--no-wait", "--reason", "t", *extra
        ).stdout.strip()

    def approved(self, ttl: str = "60", key: Path | None = None) -> str:
        request_id = self.request(key)
        self.cli("terminal", "approve", request_id, "--duration", ttl)
        return request_id

    def attach(self, request_id: str, key: Path | None = None) -> pexpect.spawn:
        return attach_child(self.env, request_id, key)

    def audit(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = json.loads(self.cli("terminal", "audit", "--json").stdout)
        return records

    def stop(self) -> None:
        self.process.stop()


def attach_child(env: dict[str, str], request_id: str, key: Path | None = None) -> pexpect.spawn:
    """The attach client on a fresh PTY, with ``stty -g`` printed before and after."""
    extra = f" --key {key}" if key else ""
    script = (
        f'echo "{STTY_MARK}$(stty -g)"; '
        f"{' '.join(SANDBRIDGE)} terminal attach {request_id}{extra}; "
        f'echo "EXIT:$?"; echo "{STTY_MARK}$(stty -g)"'
    )
    child = pexpect.spawn(
        "sh", ["-c", script], env=env, timeout=30, dimensions=SIZE, encoding="utf-8",
        codec_errors="replace",
    )  # fmt: skip
    child.expect(STTY_MARK + r"(\S+)")
    _STTY_BEFORE[id(child)] = child.match.group(1)
    return child


# What a terminal answers the client's query at the end (DA1: a VT220 with ANSI colour).
END_ANSWER = "\x1b[?62;22c"


def finish(child: pexpect.spawn) -> tuple[int, str]:
    """Wait for the attach client to end, answering its last query as a terminal does;
    check its termios (``stty -g``) is exactly what it was before; return its exit status
    and its last output."""
    output = ""
    if child.expect([re.escape(END_QUERY.decode()), r"EXIT:(\d+)"]) == 0:
        output = child.before
        child.send(END_ANSWER)
        child.expect(r"EXIT:(\d+)")
    status = int(child.match.group(1))
    output += child.before
    child.expect(STTY_MARK + r"(\S+)")
    assert child.match.group(1) == _STTY_BEFORE.pop(id(child)), "termios not restored"
    child.expect(pexpect.EOF)
    return status, output


Records = list[dict[str, Any]]


def audited(
    read: Callable[[], Records], done: Callable[[Records], bool], timeout: float = 10.0
) -> Records:
    """Audit records (``read``: a session's, or a request's), read again until ``done``
    holds of them or ``timeout`` passes: a client can learn a terminal's end from the
    worker (its EXIT, end to end) before the host has closed the worker and written the
    end record."""
    deadline = time.monotonic() + timeout
    while not done(records := read()) and time.monotonic() < deadline:
        select.select([], [], [], 0.05)
    return records


def with_end(read: Callable[[], Records], timeout: float = 10.0) -> Records:
    """``read``'s records once an end record is among them (or ``timeout`` passed)."""
    return audited(read, lambda records: any(r["event"] == "end" for r in records), timeout)


def ends(session: TerminalSession, request_id: str, timeout: float = 10.0) -> Records:
    """The audit's end records of ``request_id`` once there is one (or ``timeout`` passed)."""

    def mine() -> Records:
        return [r for r in session.audit() if r["request"] == request_id]

    return [r for r in with_end(mine, timeout) if r["event"] == "end"]

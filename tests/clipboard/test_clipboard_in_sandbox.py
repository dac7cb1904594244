"""The clipboard bridge end to end, with a real X clipboard (Xvfb of the test's own and
the owner's real ``xclip``): ``sandbridge run --clipboard ...`` (both backends) starts a
sandbox whose ``xclip``, ``xsel`` and ``wl-paste``/``wl-copy`` are sandbridge's stand-ins,
reading the owner's clipboard after the owner's yes (preapproved, or answered on a real
tty) and writing it in ``readwrite`` mode only; without the flag no stand-in exists;
``sandbridge host --clipboard`` serves the socket in a runtime dir another runtime mounts.

The Wayland half (wl-paste/wl-copy on the host) is not exercised: Debian has no headless
Wayland compositor in the test image; the sandbox side's wl-paste and wl-copy are, here
in front of the X clipboard."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

from sandbridge.clipboard.inside import Invocation, exchange
from sandbridge.protocol import clipboard as wire
from sandbridge.protocol.contract import CLIPBOARD_SOCKET
from tests.clipboard.x_display import PNG_1X1, XDisplay
from tests.conftest import SANDBRIDGE, Process, run_argv
from tests.support.command_in_process import sandbridge

READ_SCRIPT = """\
set -u
echo "TEXT $(xclip -selection clipboard -o)"
echo "XSEL $(xsel --clipboard --output)"
echo "TYPES $(wl-paste --list-types | tr '\\n' ' ')"
echo from-inside | xclip -selection clipboard -i 2>"$WORK/write.err"; echo "WRITE $?"
echo "WRITE_ERR $(cat "$WORK/write.err")"
xclip -selection primary -o 2>"$WORK/flag.err"; echo "FLAG $?"
echo "FLAG_ERR $(cat "$WORK/flag.err")"
echo "CHECKS DONE"
read -r _ < "$WORK/release"
"""


@pytest.fixture
def x(tmp_path: Path) -> Iterator[XDisplay]:
    display = XDisplay(tmp_path)
    yield display
    display.stop()


def prepare_workdir(tmp_path: Path, script: str) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "script.sh").write_text(script)
    (work / "image.png").write_bytes(PNG_1X1)
    os.mkfifo(work / "release")
    return work


def checks(process: Process) -> dict[str, str]:
    process.wait_line("CHECKS DONE", timeout=120)
    return {
        line.split(" ", 1)[0]: line.split(" ", 1)[1].strip() if " " in line else ""
        for line in process.lines["stdout"]
    }


def status(session: str) -> list[dict[str, Any]]:
    """The owner's ``sandbridge status --json`` in this process
    (tests/support/command_in_process.py)."""
    shown = sandbridge("status", "--json", session)
    assert shown.returncode == 0, shown.stderr
    report: list[dict[str, Any]] = json.loads(shown.stdout)
    return report


def test_the_sandbox_reads_text_and_png_and_cannot_write_in_read_mode(
    tmp_path: Path, x: XDisplay, backend: str
) -> None:
    x.set("owner's text ✓".encode())
    work = prepare_workdir(tmp_path, READ_SCRIPT)
    session = f"clip-{backend}"
    argv = run_argv(
        work, "sh", str(work / "script.sh"),
        options=(
            "--backend", backend, "--name", session, "--no-daemon", "--net", "none",
            "--clipboard", "read", "--clipboard-preapprove", "--env=WORK",
        ),
    )  # fmt: skip
    process = Process(argv, env={**os.environ, **x.env, "WORK": str(work)})
    try:
        found = checks(process)
        [report] = status(session)
        shown = sandbridge("status", session).stdout
        said = process.wait_line(
            "sandbridge: the sandbox read your clipboard: text/plain", stream="stderr", timeout=30
        )
    finally:
        (work / "release").write_text("go\n")
        process.popen.wait(timeout=60)
    assert found["TEXT"] == "owner's text ✓"
    assert found["XSEL"] == "owner's text ✓"
    assert found["TYPES"] == "text/plain"
    assert found["WRITE"] == "1"
    assert "writing the owner's clipboard is off (--clipboard read)" in found["WRITE_ERR"]
    assert found["FLAG"] == "2"
    assert found["FLAG_ERR"].startswith("xclip: selection 'primary' is not served")
    assert x.get() == "owner's text ✓".encode()
    clipboard = report["clipboard"]
    assert (clipboard["writes"], clipboard["writes_refused"]) == (0, 1)
    assert clipboard["reads"] >= 3
    assert said == "sandbridge: the sandbox read your clipboard: text/plain, 16 bytes"
    assert f"clipboard: {clipboard['reads']} read, 0 refused; 0 written, 1 refused" in shown


def test_the_sandbox_reads_a_png(tmp_path: Path, x: XDisplay) -> None:
    x.set(PNG_1X1, "image/png")
    work = prepare_workdir(tmp_path, "")
    argv = run_argv(
        work, "sh", "-c", "wl-paste --type image/png > out.png",
        options=("--no-daemon", "--net", "none", "--clipboard", "read", "--clipboard-preapprove"),
    )  # fmt: skip
    result = subprocess.run(argv, env={**os.environ, **x.env}, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (
        hashlib.sha256((work / "out.png").read_bytes()).digest() == hashlib.sha256(PNG_1X1).digest()
    )


def test_in_readwrite_mode_a_write_lands_on_the_owner_s_clipboard(
    tmp_path: Path, x: XDisplay
) -> None:
    work = prepare_workdir(tmp_path, "")
    argv = run_argv(
        work, "sh", "-c", "printf 'from the sandbox' | xclip -selection clipboard -i",
        options=("--no-daemon", "--net", "none", "--clipboard", "readwrite"),
    )  # fmt: skip
    result = subprocess.run(argv, env={**os.environ, **x.env}, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert x.holds(b"from the sandbox")
    argv = run_argv(
        work, "sh", "-c", "wl-copy --type image/png < image.png",
        options=("--no-daemon", "--net", "none", "--clipboard", "readwrite"),
    )  # fmt: skip
    result = subprocess.run(argv, env={**os.environ, **x.env}, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert x.holds(PNG_1X1, "image/png")


def test_without_the_flag_no_stand_in_exists_inside(tmp_path: Path, x: XDisplay) -> None:
    work = prepare_workdir(tmp_path, "")
    argv = run_argv(
        work, "sh", "-c",
        "for c in xclip xsel wl-paste wl-copy; do test -e /run/sandbridge/bin/$c && echo $c; "
        f"done; test -e /run/ags-webview-relay/{CLIPBOARD_SOCKET} && echo socket; true",
        options=("--no-daemon", "--net", "none"),
    )  # fmt: skip
    result = subprocess.run(
        argv, env={**os.environ, **x.env}, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


def test_a_read_asks_on_the_terminal_and_asks_again_once_the_window_passed(
    tmp_path: Path, x: XDisplay
) -> None:
    x.set(b"asked for")
    work = prepare_workdir(tmp_path, "")
    # The second read comes within the window; the third after it has passed (waiting
    # out the window is the behaviour under test).
    script = (
        'echo "ONE $(xclip -selection clipboard -o)"; '
        'echo "TWO $(xclip -selection clipboard -o)"; sleep 3; '
        'xclip -selection clipboard -o 2>&1; echo "THREE $?"'
    )
    argv = run_argv(
        work, "sh", "-c", script,
        options=("--no-daemon", "--net", "none", "--clipboard", "read", "--clipboard-window", "2"),
    )  # fmt: skip
    child = pexpect.spawn(
        argv[0], argv[1:], env={**os.environ, **x.env}, timeout=120, encoding="utf-8"
    )
    try:
        child.expect_exact("the sandbox asks to read your clipboard (text/plain)")
        child.expect_exact("allow clipboard reads for 2 s? [y/N] ")
        child.sendline("y")
        child.expect_exact("ONE asked for")
        index = child.expect_exact(["TWO asked for", "allow clipboard reads"])
        assert index == 0, "a read within the window asked again"
        child.expect_exact("allow clipboard reads for 2 s? [y/N] ")
        child.sendline("n")
        child.expect_exact("the owner did not allow reading the clipboard")
        child.expect_exact("THREE 1")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_host_serves_the_clipboard_socket_in_the_runtime_dir(tmp_path: Path, x: XDisplay) -> None:
    x.set(b"for the container")
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    host = Process(
        [*SANDBRIDGE, "host", "--runtime-dir", str(runtime), "--no-daemon",
         "--clipboard", "read", "--clipboard-preapprove"],
        env={**os.environ, **x.env},
    )  # fmt: skip
    try:
        host.wait_line("sandbridge: clipboard on", stream="stderr", timeout=60)
        socket_path = runtime / CLIPBOARD_SOCKET
        assert socket_path.stat().st_mode & 0o777 == 0o600
        # What a container's stand-in gets through the mounted runtime dir.
        answer, data = exchange(str(socket_path), Invocation(wire.READ, wire.TEXT))
    finally:
        host.stop()
    assert (answer.ok, data) == (True, b"for the container")


def test_with_the_daemon_running_the_run_serves_its_clipboard_itself(
    xdg: Path, daemon: Process, x: XDisplay, tmp_path: Path
) -> None:
    x.set(b"not through the daemon")
    work = prepare_workdir(tmp_path, "")
    argv = run_argv(
        work, "xclip", "-selection", "clipboard", "-o",
        options=("--net", "none", "--clipboard", "read", "--clipboard-preapprove"),
    )  # fmt: skip
    result = subprocess.run(
        argv, env={**os.environ, **x.env}, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "not through the daemon"
    assert "the daemon serves it" not in result.stderr

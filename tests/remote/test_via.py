"""The ``--via`` transport's own rules (remote/via.py): what the owner's terminal shows
of the far side's stderr, and what a command that cannot run says."""

from __future__ import annotations

import asyncio
import io
import sys

import pytest

from sandbridge.exceptions import RemoteLinkError
from sandbridge.remote.transport import LINK_PIPE_BYTES
from sandbridge.remote.via import (
    MAX_STDERR_LINE,
    STDERR_BURST_LINES,
    printable,
    via_transport,
)
from tests.conftest import processes_with


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (b"plain line\n", "plain line"),
        (b"\x1b]0;owned\x07title", "?]0;owned?title"),
        (b"\x1b[2J clear", "?[2J clear"),
        (b"bad \xff byte", "bad \ufffd byte"),
        (b"cr\r\n", "cr"),
        (b"x" * (MAX_STDERR_LINE + 10), "x" * MAX_STDERR_LINE + "..."),
    ],
)
def test_far_stderr_is_shown_as_one_safe_line(raw: bytes, shown: str) -> None:
    assert printable(raw) == shown


def test_empty_command_is_refused() -> None:
    with pytest.raises(RemoteLinkError, match="--via '  ': give a command"):
        via_transport("  ", "far")


def test_missing_command_is_named() -> None:
    async def check() -> None:
        await via_transport("/nonexistent/cmd arg", "far")()

    with pytest.raises(RemoteLinkError, match="--via '/nonexistent/cmd': No such file"):
        asyncio.run(check())


def test_close_ends_the_command_and_what_it_started() -> None:
    async def check() -> None:
        link = await via_transport("sh -c 'sleep 3171 & echo up; exec sleep 3172'", "far")()
        try:
            assert await link.reader.read(10) == b"up\n"
            # "up" comes before the shell becomes sleep 3172: wait until it has.
            async with asyncio.timeout(10):
                while not (processes_with("sleep 3171") and processes_with("sleep 3172")):
                    await asyncio.sleep(0.01)
        finally:
            await link.close()
        await link.close()  # twice is harmless

    asyncio.run(check())
    assert processes_with("sleep 3171") == processes_with("sleep 3172") == []


def test_a_far_stderr_flood_is_shown_within_a_budget_and_counted() -> None:
    """200,000 lines at once: a burst is shown, the rest said in one line, not printed
    one by one to the owner's terminal (each a blocking write on connect's loop)."""
    out = io.StringIO()

    async def check() -> None:
        command = "sh -c 'yes flood | head -n 200000 >&2; echo done'"
        link = await via_transport(command, "far", out)()
        assert await link.reader.read(10) == b"done\n"
        await link.close()

    asyncio.run(check())
    lines = out.getvalue().splitlines()
    shown = [line for line in lines if line == "far: flood"]
    assert STDERR_BURST_LINES <= len(shown) < STDERR_BURST_LINES + 100
    said = [line for line in lines if "stderr lines not shown" in line]
    assert said and len(said) + len(shown) == len(lines)
    counted = sum(int(line.removeprefix("far: (").split()[0]) for line in said)
    assert counted + len(shown) == 200000


def test_the_commands_pipes_are_widened_for_bulk_downloads() -> None:
    # The command says the sizes of the pipes it was given as its stdin and stdout.
    sizes = "import fcntl; print(*(fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) for fd in (0, 1)))"

    async def check() -> bytes:
        link = await via_transport(f"{sys.executable} -c '{sizes}'", "far")()
        said = b""
        try:
            while not said.endswith(b"\n"):
                data = await link.reader.read(100)
                assert data, f"the command ended after {said!r}"
                said += data
            return said
        finally:
            await link.close()

    assert asyncio.run(check()) == f"{LINK_PIPE_BYTES} {LINK_PIPE_BYTES}\n".encode()

"""One question to the owner on the controlling terminal, answered by one line.

The owner's terminal is where ``sandbridge run`` was started; the sandbox has no part of
it (its entry runs in a new session, without a controlling terminal). Used by the open
requests' ``--open ask`` (relay/host/host_opener.py) and the clipboard's read approval
(clipboard/server.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

# The answer to a question is a word; anything longer is not one.
MAX_ANSWER_BYTES = 64


def terminal_present() -> bool:
    """Whether this process's stdin is a terminal (there is someone to ask)."""
    return sys.stdin is not None and sys.stdin.isatty()


async def ask_terminal(question: str) -> str:
    """Write ``question`` to the controlling terminal and read one line from it."""
    fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    loop = asyncio.get_running_loop()
    try:
        os.write(fd, question.encode())
        readable = asyncio.Event()
        loop.add_reader(fd, readable.set)
        answer = b""
        try:
            while b"\n" not in answer and len(answer) < MAX_ANSWER_BYTES:
                await readable.wait()
                readable.clear()
                with contextlib.suppress(BlockingIOError):
                    data = os.read(fd, MAX_ANSWER_BYTES)
                    if not data:
                        break
                    answer += data
        finally:
            loop.remove_reader(fd)
        return answer.decode("utf-8", "replace")
    finally:
        os.close(fd)


def is_yes(answer: str) -> bool:
    """Whether the owner's line says yes (anything else is no)."""
    return answer.strip().lower() in ("y", "yes")

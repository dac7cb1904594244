"""The clipboard bridge on a real Unix socket, in front of a real X clipboard (Xvfb and
the owner's real ``xclip``), used by the stand-ins' own client and by hostile raw ones.

The bridge runs in a thread with its own event loop, as the session serves it. The
owner's answers come from a scripted asker (the terminal's is driven through a real tty
in test_clipboard_in_sandbox.py)."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbridge.aio.owner_questions import OwnerQuestions
from sandbridge.clipboard import server
from sandbridge.clipboard.inside import Invocation, exchange
from sandbridge.clipboard.mode import ClipboardMode, ClipboardSettings
from sandbridge.clipboard.owner_tools import find_owner_tools
from sandbridge.clipboard.read_log import LOG_NAME, TransferLog, read_counts
from sandbridge.clipboard.server import ClipboardBridge
from sandbridge.exceptions import PolicyError
from sandbridge.protocol import clipboard as wire
from tests.clipboard.x_display import PNG_1X1, XDisplay


class Bridge:
    """A bridge serving ``path`` from the X display ``x``, answering as ``answers`` say
    (None: no one to ask)."""

    def __init__(
        self,
        path: Path,
        x: XDisplay,
        settings: ClipboardSettings,
        answers: list[bool] | None,
        header_timeout: float = server.HEADER_TIMEOUT,
        max_transfers: int = server.MAX_TRANSFERS,
    ) -> None:
        self.path = path
        self.log_dir = path.parent
        self.questions: list[str] = []
        self.out = io.StringIO()
        self._answers = answers
        self.bridge = ClipboardBridge(
            path,
            settings,
            TransferLog(self.log_dir),
            OwnerQuestions(None if answers is None else self._ask, listed=False),
            self.out,
            find_owner_tools(x.env),
            header_timeout=header_timeout,
            max_transfers=max_transfers,
        )
        self.errors: list[dict[str, object]] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),))
        self._thread.start()
        assert self._ready.wait(10)

    async def _ask(self, question: str) -> bool:
        self.questions.append(question)
        assert self._answers is not None
        return self._answers.pop(0)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(lambda _, context: self.errors.append(context))
        self._stop = asyncio.Event()
        await self.bridge.start()
        self._ready.set()
        await self._stop.wait()
        await self.bridge.close()

    def call(
        self, op: str, kind: str = wire.TEXT, data: bytes = b""
    ) -> tuple[wire.ClipboardAnswer, bytes]:
        return exchange(str(self.path), Invocation(op, kind), data)

    def raw(self, request: bytes) -> wire.ClipboardAnswer:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(30)
            sock.connect(str(self.path))
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
            return wire.parse_answer(sock.makefile("rb").readline().rstrip(b"\n"))

    def log_lines(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in (self.log_dir / LOG_NAME).read_text().splitlines()]

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
        assert not self.errors


@pytest.fixture
def x(tmp_path: Path) -> Iterator[XDisplay]:
    display = XDisplay(tmp_path)
    yield display
    display.stop()


# Starts a bridge: mode, answers, preapproved, header_timeout (Bridge's).
Start = Callable[..., Bridge]


@pytest.fixture
def start(tmp_path: Path, x: XDisplay) -> Iterator[Start]:
    bridges: list[Bridge] = []

    def started(
        mode: ClipboardMode = ClipboardMode.READ,
        answers: list[bool] | None = None,
        preapproved: bool = False,
        **kwargs: Any,
    ) -> Bridge:
        bridge = Bridge(
            tmp_path / "clipboard.sock",
            x,
            ClipboardSettings(mode, 120, preapproved),
            answers,
            **kwargs,
        )
        bridges.append(bridge)
        return bridge

    yield started
    for bridge in bridges:
        bridge.stop()


def test_a_text_on_the_owner_s_clipboard_is_read_after_the_owner_s_yes(
    start: Start, x: XDisplay
) -> None:
    x.set("naïve ✓".encode())
    bridge = start(answers=[True])
    answer, data = bridge.call(wire.READ)
    assert answer == wire.ClipboardAnswer(True, wire.TEXT, len("naïve ✓".encode()))
    assert data == "naïve ✓".encode()
    assert "the sandbox asks to read your clipboard (text/plain)" in bridge.questions[0]
    assert "the sandbox read your clipboard: text/plain, 10 bytes" in bridge.out.getvalue()


def test_a_png_on_the_owner_s_clipboard_is_read(start: Start, x: XDisplay) -> None:
    x.set(PNG_1X1, "image/png")
    bridge = start(answers=[True])
    answer, data = bridge.call(wire.READ, wire.PNG)
    assert (answer.ok, data) == (True, PNG_1X1)


def test_one_yes_allows_the_reads_of_its_window_without_asking_again(
    start: Start, x: XDisplay
) -> None:
    x.set(b"one")
    bridge = start(answers=[True])
    assert bridge.call(wire.READ)[1] == b"one"
    assert bridge.call(wire.READ)[1] == b"one"
    assert len(bridge.questions) == 1


def test_a_read_the_owner_refuses_is_refused_and_logged_without_content(
    start: Start, x: XDisplay
) -> None:
    x.set(b"secret")
    bridge = start(answers=[False])
    answer, data = bridge.call(wire.READ)
    assert answer == wire.ClipboardAnswer(
        False, error="the owner did not allow reading the clipboard"
    )
    assert data == b""
    [line] = bridge.log_lines()
    assert (line["op"], line["decision"], line["type"]) == ("read", "refused", "text/plain")
    assert b"secret" not in (bridge.log_dir / LOG_NAME).read_bytes()


def test_without_anyone_to_ask_a_read_is_refused_naming_the_preapproval(
    start: Start, x: XDisplay
) -> None:
    x.set(b"secret")
    answer, _ = start(answers=None).call(wire.READ)
    assert not answer.ok
    assert "no one can be asked here (no terminal, no dashboard)" in answer.error
    assert "--clipboard-preapprove" in answer.error


def test_preapproved_reads_never_ask_and_are_counted(
    start: Start, x: XDisplay, tmp_path: Path
) -> None:
    x.set(b"copied")
    bridge = start(answers=None, preapproved=True)
    assert bridge.call(wire.READ)[1] == b"copied"
    counts = read_counts(tmp_path)
    assert counts is not None
    assert (counts.reads, counts.last_type, counts.last_size) == (1, "text/plain", 6)


def test_the_types_on_the_clipboard_are_listed(start: Start, x: XDisplay) -> None:
    x.set(PNG_1X1, "image/png")
    answer, _ = start(answers=[True]).call(wire.LIST_TYPES)
    assert answer == wire.ClipboardAnswer(True, types=("image/png",))


def test_a_write_in_read_mode_is_refused_and_the_clipboard_is_unchanged(
    start: Start, x: XDisplay
) -> None:
    x.set(b"the owner's")
    answer, _ = start().call(wire.WRITE, wire.TEXT, b"the sandbox's")
    assert not answer.ok
    assert "writing the owner's clipboard is off (--clipboard read)" in answer.error
    assert x.get() == b"the owner's"


def test_a_refused_write_s_answer_arrives_though_the_host_reads_none_of_its_bytes(
    start: Start, x: XDisplay
) -> None:
    # A full-size write outgrows the socket's buffers: the host answers and closes before the
    # sandbox has sent it all, and the sandbox still reads why (not a broken pipe).
    x.set(b"the owner's")
    answer, _ = start().call(wire.WRITE, wire.TEXT, b"x" * wire.MAX_BYTES[wire.TEXT])
    assert not answer.ok
    assert "writing the owner's clipboard is off (--clipboard read)" in answer.error
    assert x.get() == b"the owner's"


def test_a_write_in_readwrite_mode_lands_on_the_owner_s_clipboard(
    start: Start, x: XDisplay
) -> None:
    bridge = start(ClipboardMode.READWRITE)
    assert bridge.call(wire.WRITE, wire.TEXT, "from the sandbox ✓".encode())[0].ok
    assert x.holds("from the sandbox ✓".encode())
    assert bridge.call(wire.WRITE, wire.PNG, PNG_1X1)[0].ok
    assert x.holds(PNG_1X1, "image/png")


@pytest.mark.parametrize(
    ("request_bytes", "refusal"),
    [
        (
            b'{"op":"write","type":"image/png","size":5}\nGIF89',
            "do not start with the PNG signature",
        ),
        (b'{"op":"write","type":"text/plain","size":2}\n\xff\xfe', "the text is not UTF-8"),
        (
            b'{"op":"write","type":"text/plain","size":3}\nabcdef',
            "more bytes than the declared size of 3",
        ),
        (
            b'{"op":"write","type":"text/plain","size":9}\nabc',
            "3 bytes arrived of the declared size 9",
        ),
        (b'{"op":"write","type":"text/plain","size":99999999}\n', "is over the 1048576 bytes"),
        (b'{"op":"read","type":"text/html"}\n', "type 'text/html' is not served"),
        (b'{"op":"delete"}\n', "op 'delete' is not served"),
    ],
)
def test_a_hostile_write_is_refused_and_the_clipboard_is_unchanged(
    start: Start, x: XDisplay, request_bytes: bytes, refusal: str
) -> None:
    x.set(b"the owner's")
    answer = start(ClipboardMode.READWRITE).raw(request_bytes)
    assert not answer.ok
    assert refusal in answer.error
    assert x.get() == b"the owner's"


def test_a_clipboard_over_the_cap_is_refused_not_read(start: Start, x: XDisplay) -> None:
    x.set(b"x" * (wire.MAX_BYTES[wire.TEXT] + 1))
    answer, data = start(preapproved=True).call(wire.READ)
    assert not answer.ok
    assert "the clipboard holds more than 1048576 bytes" in answer.error
    assert data == b""


def test_a_slow_client_is_answered_with_a_refusal_after_the_header_timeout(start: Start) -> None:
    bridge = start(header_timeout=0.5)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(str(bridge.path))
        line = sock.makefile("rb").readline()
    assert wire.parse_answer(line.rstrip(b"\n")).error == "no request within 0.5 s"


def test_a_flood_of_held_connections_is_refused_past_the_limit(start: Start, x: XDisplay) -> None:
    x.set(b"text")
    bridge = start(preapproved=True)
    held = []
    try:
        for _ in range(server.MAX_CLIPBOARD_CONNECTIONS):
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(str(bridge.path))
            held.append(sock)
        answer = bridge.raw(b'{"op":"read","type":"text/plain"}\n')
        assert answer.error == "too many clipboard requests at once; try again"
    finally:
        for sock in held:
            sock.close()
    assert bridge.call(wire.READ)[1] == b"text"  # the slots came back


def test_transfers_past_the_rate_limit_are_refused_and_logged(start: Start, x: XDisplay) -> None:
    x.set(b"polled")
    bridge = start(preapproved=True, max_transfers=2)
    assert bridge.call(wire.READ)[1] == b"polled"
    assert bridge.call(wire.READ)[1] == b"polled"
    answer, data = bridge.call(wire.READ)
    assert (answer.ok, data) == (False, b"")
    assert answer.error == "over 2 clipboard transfers in 60 s; try again later"
    assert bridge.log_lines()[-1]["decision"] == "refused"


def test_a_host_without_a_display_is_refused_at_start() -> None:
    with pytest.raises(PolicyError, match="neither WAYLAND_DISPLAY nor DISPLAY is set here"):
        find_owner_tools({"PATH": "/usr/bin:/bin"})


def test_a_display_without_tools_on_path_is_refused_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PolicyError, match="no clipboard tool found on PATH"):
        find_owner_tools({"DISPLAY": ":99"})

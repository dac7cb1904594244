"""The sandbox's clipboard socket, ``clipboard.sock`` in the runtime dir, served here.

One request per connection (protocol/clipboard.py). A read (or a list of types) goes
ahead within a window the owner opened by answering yes (approval.py), on the terminal
that started the session or on the dashboard (aio/owner_questions.py); with no one to ask,
and not preapproved, it is refused with the flag that would allow it. A write goes ahead
in ``readwrite`` mode only. The owner's own tools do the reading and writing
(owner_tools.py). Every transfer is logged (type,
size, time, never the content: read_log.py) and each read is said on the owner's
terminal.

A hostile client costs little: a header is at most
:data:`~sandbridge.protocol.clipboard.MAX_HEADER_BYTES` and must arrive within
:data:`HEADER_TIMEOUT`, a body at most its type's cap within :data:`BODY_TIMEOUT`, at
most :data:`MAX_CLIPBOARD_CONNECTIONS` are open, connections are accepted at a paced
rate, and transfers are rate-limited per session.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TextIO

from sandbridge.aio.bridge_service import BridgeLimits, BridgeService
from sandbridge.aio.owner_questions import OwnerQuestions, Verdict
from sandbridge.clipboard import owner_tools
from sandbridge.clipboard.approval import ReadApproval, ReadDecision
from sandbridge.clipboard.mode import ClipboardSettings
from sandbridge.clipboard.owner_tools import OwnerTools
from sandbridge.clipboard.read_log import TransferLog
from sandbridge.exceptions import ClipboardRefused, WireError
from sandbridge.protocol import clipboard as wire
from sandbridge.protocol.jsonline import LineReader
from sandbridge.protocol.limits import WindowLimit

# A paste is one connection, a script's few pastes a few at once: 8 is plenty, and bounds
# what a flood holds open (each may hold a body up to its cap).
MAX_CLIPBOARD_CONNECTIONS = 8
# New connections accepted per second: a loop reconnecting at full speed is paced.
CLIPBOARD_CONNECTION_RATE = 20
# Transfers per TRANSFER_WINDOW seconds: pasting by hand is a few a minute; a sandbox
# polling the clipboard to catch what the owner copies is refused past it.
MAX_TRANSFERS = 60
TRANSFER_WINDOW = 60.0
# A client has this long to send its header, and a write's body: a slow client holds
# its slot no longer.
HEADER_TIMEOUT = 10.0
BODY_TIMEOUT = 30.0
READ_BYTES = 64 * 1024
# A clipboard's type list: a browser's copy offers a dozen types, an office suite's a
# few dozen; 16 KiB holds them all.
TYPES_BYTES = 16 * 1024


class ClipboardBridge:
    """Serves ``path`` for one session as ``settings`` say, with the owner's ``tools``."""

    def __init__(  # noqa: PLR0913  (one session's parts)
        self,
        path: Path,
        settings: ClipboardSettings,
        transfers: TransferLog,
        questions: OwnerQuestions,
        out: TextIO | None = None,
        tools: OwnerTools | None = None,
        header_timeout: float = HEADER_TIMEOUT,
        max_transfers: int = MAX_TRANSFERS,
    ) -> None:
        self.path = path
        self.settings = settings
        self.log = transfers
        self.tools = tools
        self.questions = questions
        self._header_timeout = header_timeout
        self._out = out
        self._approval = ReadApproval(settings.window, settings.preapproved)
        self._asking = asyncio.Lock()
        self._transfers = WindowLimit(max_transfers, TRANSFER_WINDOW)
        self._service = BridgeService(
            path,
            self._serve,
            BridgeLimits(CLIPBOARD_CONNECTION_RATE, MAX_CLIPBOARD_CONNECTIONS),
            lambda writer: writer.write(_refusal("too many clipboard requests at once; try again")),
            "clipboard",
        )

    def _say(self, text: str) -> None:
        print(f"sandbridge: {text}", file=self._out or sys.stderr, flush=True)

    async def start(self) -> None:
        """Find the owner's tools (refused, :class:`PolicyError`, without them), then
        listen on :attr:`path` (0600)."""
        if self.tools is None:
            self.tools = owner_tools.find_owner_tools()
        self._service.start()

    async def close(self) -> None:
        """Stop accepting and end every open connection."""
        await self._service.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await self._answer(reader))
        await writer.drain()

    async def _answer(self, reader: asyncio.StreamReader) -> bytes:
        """The whole answer (header and bytes) to the connection's one request."""
        read = await _read_request(reader, self._header_timeout)
        if isinstance(read, str):
            return _refusal(read)
        request, rest = read
        if not self._transfers.admit(asyncio.get_running_loop().time()):
            why = f"over {self._transfers.limit} clipboard transfers in {TRANSFER_WINDOW:g} s"
            self.log.record(op=request.op, allowed=False, kind=request.type, size=0, reason=why)
            return _refusal(f"{why}; try again later")
        if request.op == wire.WRITE:
            return await self._write(request, rest, reader)
        refusal = await self._approve(request)
        if refusal is not None:
            self.log.record(op=request.op, allowed=False, kind=request.type, size=0, reason=refusal)
            return _refusal(refusal)
        if request.op == wire.LIST_TYPES:
            return await self._list_types()
        return await self._read(request.type)

    async def _approve(self, request: wire.ClipboardRequest) -> str | None:
        """None when the read may go ahead, else why not (asks the owner if need be)."""
        loop = asyncio.get_running_loop()
        async with self._asking:  # one question at a time; those waiting share its yes
            if self._approval.decide(loop.time()) is ReadDecision.ALLOW:
                return None
            what = request.type or "its types"
            verdict = await self.questions.ask(
                "clipboard",
                f"the sandbox asks to read your clipboard ({what})",
                f"allow clipboard reads for {self.settings.window:g} s?",
            )
            if verdict is Verdict.NOBODY:
                return (
                    "reading the owner's clipboard needs the owner's yes and no one can be "
                    "asked here (no terminal, no dashboard); the owner may start the session "
                    "with --clipboard-preapprove"
                )
            if verdict is Verdict.NO:
                self._say("clipboard read refused")
                return "the owner did not allow reading the clipboard"
            if verdict is not Verdict.YES:
                self._say(f"clipboard read refused: {verdict.reason}")
                return f"the owner's yes to read the clipboard did not come: {verdict.reason}"
            self._approval.approve(loop.time())
            return None

    async def _read(self, kind: str) -> bytes:
        assert self.tools is not None
        why: str | None = None
        if kind not in self.tools.types():
            why = f"the owner's {self.tools.kind} carries text only, not {kind}"
            self.log.record(op=wire.READ, allowed=False, kind=kind, size=0, reason=why)
            return _refusal(why)
        data = b""
        try:
            data = await owner_tools.paste(
                self.tools.paste_argv(kind), wire.MAX_BYTES[kind], self.tools.env()
            )
            why = wire.content_refusal(kind, data)
        except (OSError, ClipboardRefused) as exc:
            why = str(exc)
        if why is not None:
            self.log.record(op=wire.READ, allowed=False, kind=kind, size=0, reason=why)
            return _refusal(why)
        self.log.record(op=wire.READ, allowed=True, kind=kind, size=len(data), reason="")
        self._say(f"the sandbox read your clipboard: {kind}, {len(data)} bytes")
        return wire.encode_answer(wire.ClipboardAnswer(True, kind, len(data))) + data

    async def _list_types(self) -> bytes:
        assert self.tools is not None
        argv = self.tools.types_argv()
        try:
            listed = await owner_tools.paste(argv, TYPES_BYTES, self.tools.env()) if argv else b""
        except (OSError, ClipboardRefused):
            listed = b""
        types = owner_tools.parse_types(listed, self.tools.types()) if argv else self.tools.types()
        self.log.record(op=wire.LIST_TYPES, allowed=True, kind="", size=len(types), reason="")
        if not types:
            return _refusal("the clipboard holds nothing the bridge carries")
        return wire.encode_answer(wire.ClipboardAnswer(True, types=types))

    async def _write(
        self, request: wire.ClipboardRequest, first: bytes, reader: asyncio.StreamReader
    ) -> bytes:
        assert self.tools is not None
        kind = request.type

        def refused(why: str) -> bytes:
            self.log.record(op=wire.WRITE, allowed=False, kind=kind, size=request.size, reason=why)
            return _refusal(why)

        if not self.settings.writes:
            return refused("writing the owner's clipboard is off (--clipboard read); "
                           "the owner may allow it with --clipboard readwrite")  # fmt: skip
        if kind not in self.tools.types():
            return refused(f"the owner's {self.tools.kind} carries text only, not {kind}")
        data = await _read_body(request.size, first, reader)
        if isinstance(data, str):
            return refused(data)
        why = wire.content_refusal(kind, data)
        if why is not None:
            return refused(why)
        try:
            await owner_tools.copy(self.tools.copy_argv(kind), data, self.tools.env())
        except (OSError, ClipboardRefused) as exc:
            return refused(str(exc))
        self.log.record(op=wire.WRITE, allowed=True, kind=kind, size=len(data), reason="")
        self._say(f"the sandbox wrote your clipboard: {kind}, {len(data)} bytes")
        return wire.encode_answer(wire.ClipboardAnswer(True))


async def _read_request(
    reader: asyncio.StreamReader, timeout: float
) -> tuple[wire.ClipboardRequest, bytes] | str:
    """The connection's request and the bytes read past it, or why it is refused."""
    lines = LineReader(wire.MAX_HEADER_BYTES)
    try:
        async with asyncio.timeout(timeout):
            line = None
            while line is None:
                data = await reader.read(READ_BYTES)
                line = lines.feed(data) if data else lines.feed_eof()
        return wire.parse_request(line), lines.rest
    except TimeoutError:
        return f"no request within {timeout:g} s"
    except WireError as exc:
        return str(exc)


async def _read_body(size: int, first: bytes, reader: asyncio.StreamReader) -> bytes | str:
    """A write's ``size`` bytes (``first`` came with the header), or why they are refused."""
    body = wire.BodyReader(size)
    try:
        body.feed(first)
        async with asyncio.timeout(BODY_TIMEOUT):
            while not body.complete and (data := await reader.read(READ_BYTES)):
                body.feed(data)
            if body.complete and await reader.read(1):
                body.feed(b"x")  # more than declared: refused by the reader
        return body.finish()
    except TimeoutError:
        return f"the {size} bytes did not arrive within {BODY_TIMEOUT:g} s"
    except WireError as exc:
        return str(exc)


def _refusal(error: str) -> bytes:
    return wire.encode_answer(wire.ClipboardAnswer(False, error=error))

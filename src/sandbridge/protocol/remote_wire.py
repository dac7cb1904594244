"""The link between ``sandbridge connect`` (the laptop) and ``serve-stdio`` (the far machine).

One byte stream (``remote/transport.py``: SSH, ``kubectl exec -i``, any command) carries
many app connections at once, so it is framed and multiplexed. Every frame is::

    length (u32, big-endian: bytes after the 9-byte header) | kind (u8) | stream (u32) | payload

Kinds, and who sends them:

========  =====  ======================================================================
kind      from   payload
========  =====  ======================================================================
HELLO     both   JSON ``{"version":2,"role":"far"|"laptop"}``; stream 0; first frame;
                 the laptop adds ``"private_apps":true`` (:data:`PRIVATE_APPS`)
APPS      far    JSON ``{"sessions":[{"id":..,"apps":[{"port":..,"base_path":..}]}]}``;
                 stream 0; at most :data:`MAX_APPS` apps; the whole list, again
                 after every change; a private app carries ``"private":true``, and is
                 listed only to a laptop that said :data:`PRIVATE_APPS`; a session
                 may carry ``"info"`` (``far_sessions.py``), with or without apps
OPEN      laptop JSON ``{"session":..,"port":..}``: open a byte stream to that app; or
                 ``{"session":..,"control":"terminal"}``: a byte stream to that
                 session's terminal control socket (:class:`OpenControl`)
OPENED    far    empty: the stream is open, data may flow both ways
REFUSED   far    UTF-8 reason: the stream was not opened (and is forgotten)
DATA      both   bytes of the stream, 1 to :data:`MAX_DATA_BYTES`, within credit
CREDIT    both   u32: the receiver consumed that many bytes; the sender may send more
EOF       both   empty: the sender sends no more data on this stream (a half close)
RESET     both   UTF-8 reason: the stream is over, both ways, at once
========  =====  ======================================================================

Flow control: each stream starts with :data:`STREAM_WINDOW` bytes of credit each way;
a side may have at most that many bytes sent and not yet credited back. The receiver
credits bytes back as its consumer (the browser, the app) takes them, so one stalled
consumer stops only its own stream, and memory per stream is bounded by the window
on both sides. Sending beyond the credit is a protocol violation.

Everything a peer sends is checked here: a frame over its size limit, an unknown kind,
a version other than :data:`VERSION`, a stream id not allowed for the kind, data
without credit or on a stream that is not open, JSON that does not parse or lacks a
field: each raises :class:`~sandbridge.exceptions.RemoteWireError` naming the value,
and the link is dropped (its framing can no longer be trusted). Frames for a stream
this side already ended are dropped quietly: they were in flight when it ended.

:class:`LinkState` is sans-I/O: :meth:`LinkState.receive` takes bytes and returns
events; the ``send_*`` methods return the bytes to write and keep the state both sides
agree on.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Any

from sandbridge.exceptions import RegistrationError, RemoteWireError
from sandbridge.protocol.contract import is_session_name
from sandbridge.protocol.far_sessions import MAX_FAR_SESSIONS, FarSession, parse
from sandbridge.protocol.jsonline import decode_object, encode_object
from sandbridge.protocol.port import validate_port
from sandbridge.protocol.registration import normalize_base_path

# 2: the 2 MiB window (a version-1 peer would refuse data beyond its 256 KiB).
VERSION = 2
HEADER = struct.Struct(">IBI")
_CREDIT = struct.Struct(">I")
# One DATA frame: large enough that a 100 MiB body is 1,600 frames, small enough that
# a frame of one stream delays another's by well under a millisecond on any link.
MAX_DATA_BYTES = 64 * 1024
# Bytes one side may have in flight per stream; at most this much waits per stream per
# side. OpenSSH's window for each forwarded connection (CHAN_TCP_WINDOW_DEFAULT), so a
# stream holds no more than the same connection through `ssh -L` would. A quarter of it
# (the earlier window) left a bulk stream waiting on credit most of the time across the
# extra hops (sshd, serve-stdio) and cost a CREDIT frame, so an SSH packet each way,
# every 128 KiB (docs/history/benchmark-rounds.md, "Remote link").
STREAM_WINDOW = 2 * 1024 * 1024
# The APPS list: 256 sessions of 64 apps, each a few dozen bytes, fit in well under this.
MAX_CONTROL_BYTES = 1024 * 1024
# A REFUSED or RESET reason is one line for the owner.
MAX_REASON_BYTES = 1024
# Open streams per link: every browser connection to a far app is one; the same bound
# as a local app's connections, so a hostile laptop cannot make the far side hold more.
MAX_STREAMS = 1024
MAX_STREAM_ID = 2**32 - 1
# Apps in one APPS list: each gets a loopback listener (a descriptor) on the laptop, so a
# hostile far side must not choose how many. Far more than a machine's sessions hold in
# practice (64 apps per session), and the same bound as the streams of one link.
MAX_APPS = 1024
# The one control an OPEN may ask for instead of an app port: a session's terminal
# control socket (list, request, approve, deny, revoke, attach), docs/remote.md.
CONTROL_TERMINAL = "terminal"
# The laptop's HELLO says it serves an app marked ``"private":true`` privately (its own
# one-time token and cookie). A laptop without it (an older sandbridge) would ignore the
# mark and serve the app openly, so the far side lists private apps only to a laptop that
# says it; an older far side ignores the key and lists no private app. Either way both
# ends of version 2 still talk, and a private app is never served openly.
PRIVATE_APPS = "private_apps"


class Kind(enum.IntEnum):
    HELLO = 0
    APPS = 1
    OPEN = 2
    OPENED = 3
    REFUSED = 4
    DATA = 5
    CREDIT = 6
    EOF = 7
    RESET = 8


class Role(enum.Enum):
    FAR = "far"  # serve-stdio: announces apps, answers OPEN
    LAPTOP = "laptop"  # connect: opens streams


# Largest payload per kind: a frame announcing more is refused before it is buffered.
_MAX_PAYLOAD = {
    Kind.HELLO: 256,
    Kind.APPS: MAX_CONTROL_BYTES,
    Kind.OPEN: 4096,
    Kind.OPENED: 0,
    Kind.REFUSED: MAX_REASON_BYTES,
    Kind.DATA: MAX_DATA_BYTES,
    Kind.CREDIT: _CREDIT.size,
    Kind.EOF: 0,
    Kind.RESET: MAX_REASON_BYTES,
}
# Who may send each kind (HELLO and the stream kinds: both).
_SENT_BY = {
    Kind.APPS: Role.FAR,
    Kind.OPEN: Role.LAPTOP,
    Kind.OPENED: Role.FAR,
    Kind.REFUSED: Role.FAR,
}


# --- events -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FarApp:
    """One app of a far session, as the laptop may ask for it."""

    session: str
    port: int
    base_path: str
    # Private on the far machine: the laptop serves it behind a token of its own.
    private: bool = False


Described = tuple[FarSession, ...]  # far sessions an APPS list describes


@dataclass(frozen=True, slots=True)
class Hello:
    role: Role
    # The laptop serves private apps privately (:data:`PRIVATE_APPS`).
    private_apps: bool = False


@dataclass(frozen=True, slots=True)
class Apps:
    apps: tuple[FarApp, ...]
    sessions: Described = ()  # the sessions the far side described


@dataclass(frozen=True, slots=True)
class AppsListed:
    """An APPS frame as it arrived (its size and stream checked), parsed only when the
    laptop applies it (:func:`parse_apps`): lists overtaken before then cost no parsing."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class OpenStream:
    stream: int
    session: str
    port: int


@dataclass(frozen=True, slots=True)
class OpenControl:
    """A stream to ``session``'s terminal control (one control conversation)."""

    stream: int
    session: str


@dataclass(frozen=True, slots=True)
class Opened:
    stream: int


@dataclass(frozen=True, slots=True)
class Refused:
    stream: int
    reason: str


@dataclass(frozen=True, slots=True)
class Data:
    stream: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Credited:
    """The peer credited bytes back: this side may send more on ``stream``."""

    stream: int


@dataclass(frozen=True, slots=True)
class EndOfStream:
    stream: int


@dataclass(frozen=True, slots=True)
class Reset:
    stream: int
    reason: str


Event = (
    Hello
    | AppsListed
    | OpenStream
    | OpenControl
    | Opened
    | Refused
    | Data
    | Credited
    | EndOfStream
    | Reset
)


# --- payloads -----------------------------------------------------------------------------


def _frame(kind: Kind, stream: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind, stream) + payload


def _json(kind: Kind, payload: bytes) -> dict[str, Any]:
    try:
        return decode_object(payload, max_bytes=_MAX_PAYLOAD[kind])
    except ValueError as exc:
        raise RemoteWireError(f"{kind.name} payload is not a JSON object: {exc}") from None


def _text(kind: Kind, payload: bytes) -> str:
    try:
        return payload.decode()
    except UnicodeDecodeError:
        raise RemoteWireError(f"{kind.name} reason is not UTF-8: {payload[:40]!r}") from None


def _session_name(value: object, where: str) -> str:
    if not isinstance(value, str) or not is_session_name(value):
        raise RemoteWireError(f"{where}: session must be a session name, got {value!r:.80}")
    return value


def _port(value: object, where: str) -> int:
    try:
        return validate_port(value)
    except RegistrationError as exc:
        raise RemoteWireError(f"{where}: {exc}") from None


def parse_apps(listed: AppsListed) -> Apps:
    """The list, or :class:`RemoteWireError` naming what is wrong (a protocol error)."""
    message = _json(Kind.APPS, listed.payload)
    sessions = message.get("sessions")
    if not isinstance(sessions, list):
        raise RemoteWireError(f"APPS: sessions must be a list, got {sessions!r:.80}")
    apps: list[FarApp] = []
    described: dict[str, FarSession] = {}
    for session in sessions:
        if not isinstance(session, dict) or not isinstance(session.get("apps"), list):
            raise RemoteWireError(
                f"APPS: a session must be an object with apps, got {session!r:.80}"
            )
        name = _session_name(session.get("id"), "APPS")
        if "info" in session:
            if name in described or len(described) >= MAX_FAR_SESSIONS:
                raise RemoteWireError(f"APPS describes {name!r} twice or over {MAX_FAR_SESSIONS}")
            described[name] = parse(name, session["info"])
        if len(apps) + len(session["apps"]) > MAX_APPS:
            raise RemoteWireError(f"APPS lists more than {MAX_APPS} apps")
        for app in session["apps"]:
            if not isinstance(app, dict):
                raise RemoteWireError(f"APPS: an app must be an object, got {app!r:.80}")
            try:
                # The rule a local registration's base path meets (the far side is as
                # hostile as a sandbox): the relay's base-path handling relies on it.
                base = normalize_base_path(app.get("base_path"))
            except RegistrationError as exc:
                raise RemoteWireError(f"APPS: {exc}") from None
            private = app.get("private", False)
            if type(private) is not bool:
                raise RemoteWireError(f"APPS: private must be true or false, got {private!r:.80}")
            apps.append(FarApp(name, _port(app.get("port"), "APPS"), base, private))
    return Apps(tuple(apps), tuple(described.values()))


def encode_apps(apps: tuple[FarApp, ...], described: Described = ()) -> dict[str, Any]:
    """The APPS message for ``apps`` (grouped by session in first-seen order) and the
    sessions ``described``."""
    sessions: dict[str, list[dict[str, Any]]] = {}
    for app in apps:
        listed: dict[str, Any] = {"port": app.port, "base_path": app.base_path}
        if app.private:  # only then: the list of an open app is the same as before
            listed["private"] = True
        sessions.setdefault(app.session, []).append(listed)
    infos = {session.id: {"info": session.to_json()} for session in described}
    names = dict.fromkeys([*sessions, *infos])
    return {"sessions": [{"id": n, "apps": sessions.get(n, []), **infos.get(n, {})} for n in names]}


# --- the state both sides keep ---------------------------------------------------------


class _Phase(enum.Enum):
    OPENING = "opening"  # OPEN sent or received, no answer yet
    OPEN = "open"


@dataclass(slots=True)
class _Stream:
    phase: _Phase
    send_credit: int = STREAM_WINDOW  # bytes this side may still send
    receive_room: int = STREAM_WINDOW  # bytes the peer may still send
    consumed: int = 0  # received and consumed, not yet credited back
    sending: bool = True  # this side has not sent EOF
    receiving: bool = True  # the peer has not sent EOF


@dataclass
class LinkState:
    """One side of a link: frames in, events out; sends checked against the same state."""

    role: Role
    _buffer: bytearray = field(default_factory=bytearray)
    _hello_seen: bool = False
    _streams: dict[int, _Stream] = field(default_factory=dict)
    _last_opened: int = 0  # streams are numbered upwards by the laptop
    # The laptop's HELLO said PRIVATE_APPS: the far side may list private apps to it.
    peer_serves_private: bool = False

    # sending ---------------------------------------------------------------------

    def send_hello(self) -> bytes:
        message: dict[str, Any] = {"version": VERSION, "role": self.role.value}
        if self.role is Role.LAPTOP:
            message[PRIVATE_APPS] = True
        return _frame(Kind.HELLO, 0, encode_object(message))

    def send_apps(self, apps: tuple[FarApp, ...], described: Described = ()) -> bytes:
        if not self.peer_serves_private and any(app.private for app in apps):
            raise RemoteWireError(
                "a private app may be listed only to a laptop that serves it privately"
            )
        payload = encode_object(encode_apps(apps, described))
        if len(payload) > MAX_CONTROL_BYTES or len(apps) > MAX_APPS:
            raise RemoteWireError(
                f"APPS of {len(apps)} apps is over {MAX_CONTROL_BYTES} bytes or {MAX_APPS} apps"
            )
        return _frame(Kind.APPS, 0, payload)

    def send_open(self, session: str, port: int) -> tuple[int, bytes]:
        """A new stream to ``session``'s app on ``port``: its id and the OPEN frame."""
        return self._send_open({"session": session, "port": port})

    def send_open_control(self, session: str) -> tuple[int, bytes]:
        """A new stream to ``session``'s terminal control: its id and the OPEN frame."""
        return self._send_open({"session": session, "control": CONTROL_TERMINAL})

    def _send_open(self, message: dict[str, Any]) -> tuple[int, bytes]:
        if len(self._streams) >= MAX_STREAMS:
            raise RemoteWireError(f"already {MAX_STREAMS} streams open on this link")
        if self._last_opened >= MAX_STREAM_ID:
            raise RemoteWireError("stream ids are used up on this link; reconnect")
        self._last_opened += 1
        stream = self._last_opened
        self._streams[stream] = _Stream(_Phase.OPENING)
        return stream, _frame(Kind.OPEN, stream, encode_object(message))

    def send_opened(self, stream: int) -> bytes:
        self._streams[stream].phase = _Phase.OPEN
        return _frame(Kind.OPENED, stream)

    def send_refused(self, stream: int, reason: str) -> bytes:
        self._streams.pop(stream, None)
        return _frame(Kind.REFUSED, stream, _reason(reason))

    def send_credit_for(self, stream: int) -> int:
        """Bytes of ``stream`` this side may send now (0: wait for CREDIT)."""
        state = self._streams.get(stream)
        return 0 if state is None or not state.sending else state.send_credit

    def send_data(self, stream: int, data: bytes) -> bytes:
        """DATA frames for ``data``; it must fit in :meth:`send_credit_for`."""
        state = self._streams[stream]
        if len(data) > state.send_credit or not state.sending:
            raise RemoteWireError(f"stream {stream}: {len(data)} bytes exceed its credit")
        state.send_credit -= len(data)
        if len(data) <= MAX_DATA_BYTES:  # the common case: one frame, one copy
            return HEADER.pack(len(data), Kind.DATA, stream) + data
        # One copy of every byte: each frame's header and a view of its payload, joined.
        view, step = memoryview(data), MAX_DATA_BYTES
        parts = [(HEADER.pack(len(view[i : i + step]), Kind.DATA, stream), view[i : i + step])
                 for i in range(0, len(data), step)]  # fmt: skip
        return b"".join(part for pair in parts for part in pair)

    def consumed(self, stream: int, count: int) -> bytes:
        """This side's consumer took ``count`` bytes of ``stream``: a CREDIT frame once
        half a window is owed (fewer, larger credits), else nothing yet."""
        state = self._streams.get(stream)
        if state is None or not state.receiving:
            return b""
        state.consumed += count
        if state.consumed < STREAM_WINDOW // 2:
            return b""
        credit, state.consumed = state.consumed, 0
        state.receive_room += credit
        return _frame(Kind.CREDIT, stream, _CREDIT.pack(credit))

    def send_eof(self, stream: int) -> bytes:
        state = self._streams.get(stream)
        if state is None or not state.sending:
            return b""
        state.sending = False
        self._forget_if_done(stream, state)
        return _frame(Kind.EOF, stream)

    def send_reset(self, stream: int, reason: str) -> bytes:
        if self._streams.pop(stream, None) is None:
            return b""
        return _frame(Kind.RESET, stream, _reason(reason))

    def is_open(self, stream: int) -> bool:
        return stream in self._streams

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    # receiving -------------------------------------------------------------------

    def receive(self, data: bytes) -> list[Event]:
        """Events for the complete frames in what has arrived so far."""
        # Frames are cut from ``data`` itself, each payload copied once; only a frame
        # split across reads waits in the buffer (no shifting of the buffer per frame).
        if self._buffer:
            self._buffer += data
            source: bytes | bytearray = self._buffer
        else:
            source = data
        events: list[Event] = []
        offset, size = 0, len(source)
        with memoryview(source) as view:
            while size - offset >= HEADER.size:
                length, kind_number, stream = HEADER.unpack_from(source, offset)
                try:
                    kind = Kind(kind_number)
                except ValueError:
                    raise RemoteWireError(f"unknown frame kind {kind_number}") from None
                if length > _MAX_PAYLOAD[kind]:
                    raise RemoteWireError(
                        f"{kind.name} frame of {length} bytes is over its limit of "
                        f"{_MAX_PAYLOAD[kind]}"
                    )
                start = offset + HEADER.size
                if size < start + length:
                    break
                offset = start + length
                event = self._event(kind, stream, bytes(view[start:offset]))
                if event is not None:
                    events.append(event)
        if source is self._buffer:
            del self._buffer[:offset]
        elif offset < size:
            self._buffer += data[offset:]
        return events

    def _event(self, kind: Kind, stream: int, payload: bytes) -> Event | None:  # noqa: PLR0911, PLR0912  (one branch per kind, as the table above)
        if not self._hello_seen:
            if kind is not Kind.HELLO:
                raise RemoteWireError(f"the first frame must be HELLO, not {kind.name}")
            return self._hello(stream, payload)
        sender = _SENT_BY.get(kind)
        if kind is Kind.HELLO or (sender is not None and sender is self.role):
            raise RemoteWireError(f"a {self._peer.value} side may not send {kind.name}")
        if kind is Kind.APPS:
            if stream != 0:
                raise RemoteWireError(f"APPS must be on stream 0, not {stream}")
            return AppsListed(payload)
        if stream == 0:
            raise RemoteWireError(f"{kind.name} must name a stream, not 0")
        if kind is Kind.OPEN:
            return self._open(stream, payload)
        state = self._streams.get(stream)
        if state is None:
            if stream > self._last_opened:
                raise RemoteWireError(f"{kind.name} for stream {stream}, which was never opened")
            return None  # in flight when this side ended the stream
        if kind is Kind.RESET:
            del self._streams[stream]
            return Reset(stream, _text(kind, payload))
        if state.phase is _Phase.OPENING:
            if kind is Kind.OPENED:
                state.phase = _Phase.OPEN
                return Opened(stream)
            if kind is Kind.REFUSED:
                del self._streams[stream]
                return Refused(stream, _text(kind, payload))
            raise RemoteWireError(f"{kind.name} for stream {stream} before it was opened")
        if kind in (Kind.OPENED, Kind.REFUSED):
            raise RemoteWireError(f"{kind.name} for stream {stream}, which is already open")
        if kind is Kind.CREDIT:
            (credit,) = _CREDIT.unpack(payload) if len(payload) == 4 else (-1,)
            if not 0 < credit <= STREAM_WINDOW - state.send_credit:
                raise RemoteWireError(
                    f"CREDIT of {credit} for stream {stream} is more than it has in flight"
                )
            state.send_credit += credit
            return Credited(stream)
        if not state.receiving:
            raise RemoteWireError(f"{kind.name} for stream {stream} after its EOF")
        if kind is Kind.EOF:
            state.receiving = False
            self._forget_if_done(stream, state)
            return EndOfStream(stream)
        if not payload:
            # Nothing to deliver, yet a slot in the receiver's queue each: a flood of
            # them is unbounded memory (and an empty read means "end" to a reader).
            raise RemoteWireError(f"DATA of 0 bytes for stream {stream}")
        if len(payload) > state.receive_room:
            raise RemoteWireError(
                f"DATA of {len(payload)} bytes for stream {stream} is beyond its credit "
                f"({state.receive_room} bytes left)"
            )
        state.receive_room -= len(payload)
        return Data(stream, payload)

    @property
    def _peer(self) -> Role:
        return Role.LAPTOP if self.role is Role.FAR else Role.FAR

    def _hello(self, stream: int, payload: bytes) -> Hello:
        message = _json(Kind.HELLO, payload)
        version = message.get("version")
        if version != VERSION or type(version) is not int:
            raise RemoteWireError(
                f"protocol version {version!r} is not {VERSION}: the two sandbridge "
                "versions differ; install the same one on both machines"
            )
        if stream != 0:
            raise RemoteWireError(f"HELLO must be on stream 0, not {stream}")
        if message.get("role") != self._peer.value:
            raise RemoteWireError(f"HELLO role {message.get('role')!r} is not {self._peer.value!r}")
        private_apps = self._peer is Role.LAPTOP and message.get(PRIVATE_APPS) is True
        self.peer_serves_private = private_apps
        self._hello_seen = True
        return Hello(self._peer, private_apps)

    def _open(self, stream: int, payload: bytes) -> OpenStream | OpenControl:
        if stream <= self._last_opened:
            raise RemoteWireError(
                f"OPEN for stream {stream}: ids must go up (the last was {self._last_opened})"
            )
        if len(self._streams) >= MAX_STREAMS:
            raise RemoteWireError(f"OPEN for stream {stream}: already {MAX_STREAMS} streams open")
        message = _json(Kind.OPEN, payload)
        session = _session_name(message.get("session"), f"OPEN {stream}")
        event: OpenStream | OpenControl
        if "control" in message:
            if message["control"] != CONTROL_TERMINAL or "port" in message:
                raise RemoteWireError(
                    f"OPEN {stream}: control must be {CONTROL_TERMINAL!r} and alone, "
                    f"got {message.get('control')!r:.80}"
                )
            event = OpenControl(stream, session)
        else:
            event = OpenStream(stream, session, _port(message.get("port"), f"OPEN {stream}"))
        self._last_opened = stream
        self._streams[stream] = _Stream(_Phase.OPENING)
        return event

    def _forget_if_done(self, stream: int, state: _Stream) -> None:
        if not state.sending and not state.receiving:
            del self._streams[stream]


def _reason(reason: str) -> bytes:
    return reason.encode()[:MAX_REASON_BYTES].decode(errors="ignore").encode()

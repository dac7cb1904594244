"""The far machine's side of terminals over the remote link (``serve-stdio``).

A laptop's ``OPEN {"session":..,"control":"terminal"}`` becomes one connection to that
far session's host-only control socket, exactly as a local ``sandbridge terminal``
command makes one: the session's broker answers it, so admission, the journal, leases
and the audit run here, on the far machine, unchanged. The stream carries the control
conversation's bytes both ways; for an attach, after the handshake, that is the
terminal's ciphertext (the client on the laptop and the worker in the sandbox hold the
keys; neither this process nor the laptop's ``connect`` does).

Hostile peer: only a running session of this user is reached, and the conversation's
first line must be one JSON object whose ``op`` is a terminal op of :data:`LINK_OPS`.
The owner's other ops on the same socket (``allow``, ``stop``, the egress answers,
``app_close``, ...) are refused ``not_over_the_link``: the link grants terminals under
an owner-signed approval, nothing else. A ``deny`` or ``revoke`` must carry the answer
signed by an owner key this machine trusts (``"signed"``, :func:`answer_refusal`): a
teammate's ``connect`` is an SSH login as this user too, and unsigned, it denied any
request and revoked any terminal, the owner's included; and each signed answer crosses
once (its nonce taken in the reservation journal, like an approval's). Everything after
that line is the broker's to check, as for any local client.
"""

from __future__ import annotations

import asyncio
import json
import time

from sandbridge import log
from sandbridge.exceptions import ApprovalRefused, JournalError, KeyFileError, SandbridgeError
from sandbridge.places.registry import list_sessions
from sandbridge.places.socket_path import short_path
from sandbridge.protocol.jsonline import decode_json
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.upstream import UNIX_BUFFER_BYTES
from sandbridge.remote.mux import Mux, MuxStream
from sandbridge.remote.splice import splice
from sandbridge.terminals import keys
from sandbridge.terminals.approval import ANSWER_KINDS, verify_answer
from sandbridge.terminals.control import control_socket
from sandbridge.terminals.control_line import MAX_CONTROL_LINE, refusal_line
from sandbridge.terminals.journal import ReservationJournal

# The control ops a laptop may send over the link: reading the requests, asking for a
# terminal (signed by the requester's key), answering one (an approval signed by an
# owner key this machine trusts; a deny or revoke), waiting for an answer, attaching.
LINK_OPS = frozenset(
    {"info", "list", "show", "request", "await", "approve", "deny", "revoke", "attach"}
)


async def first_line(stream: MuxStream) -> tuple[bytes, bytes] | None:
    """The conversation's first line (with its newline) and the bytes after it; None if
    the stream ends first. Raise ValueError past :data:`MAX_CONTROL_LINE`."""
    buffered = b""
    while b"\n" not in buffered:
        if len(buffered) > MAX_CONTROL_LINE:
            raise ValueError(f"a control line is limited to {MAX_CONTROL_LINE} bytes")
        data = await stream.read()
        if not data:
            return None
        buffered += data
    line, _, rest = buffered.partition(b"\n")
    if len(line) > MAX_CONTROL_LINE:
        raise ValueError(f"a control line is limited to {MAX_CONTROL_LINE} bytes")
    return line + b"\n", rest


# A command sends its control line at once: a stream that says nothing this long holds a
# connection to the session's broker for nothing, and is closed.
FIRST_LINE_SECONDS = 30.0


def check_first_line(line: bytes) -> str | None:
    """Why the laptop's first control line may not cross, or None if it may."""
    try:
        message = decode_json(line, max_bytes=MAX_CONTROL_LINE)
    except ValueError:
        return "a control line must be one JSON object"
    if not isinstance(message, dict):
        return "a control line must be one JSON object"
    op = message.get("op")
    if not isinstance(op, str) or op not in LINK_OPS:
        return (
            f"op {op!r:.40} is not served over the remote link (only "
            f"{', '.join(sorted(LINK_OPS))}); run it on the far machine"
        )
    return None


def answer_refusal(line: bytes, now: float) -> tuple[str, str] | None:
    """Why a first line that passed :func:`check_first_line` may still not cross, as
    (code, message): a ``deny`` or ``revoke`` not signed by this machine's owner key or
    one of its ``owners`` for the request it names, within the clock skew of ``now``, or
    a copy of one that crossed already (``used``: the reservation journal takes each
    signed answer's nonce once, as it takes each approval's, until it expires; a journal
    full of documents still valid refuses it, ``journal_full``). Blocking: the journal
    fsyncs."""
    message = decode_json(line, max_bytes=MAX_CONTROL_LINE)
    op = message.get("op")
    if op not in ANSWER_KINDS:
        return None
    request_id = str(message.get("id"))
    try:
        signers = {keys.public_hex(keys.owner_public_key()), *keys.trusted_owners()}
        answer = verify_answer(
            message.get("signed"), kind=op, request_id=request_id, signers=signers, now=now
        )
        ReservationJournal().take_answer(
            answer.nonce, answer.expires, {"kind": op, "request": request_id}, now
        )
    except (ApprovalRefused, JournalError) as exc:
        return exc.code, str(exc)
    except KeyFileError as exc:
        return "key_file", str(exc)
    return None


async def serve_terminal_control(mux: Mux, stream: MuxStream, session: str) -> None:
    """Connect ``stream`` to ``session``'s control socket, once its first line passes."""
    if session not in {record.id for record in list_sessions()}:
        mux.refuse(stream, f"no running session {session!r} of this user")
        return
    loop = asyncio.get_running_loop()
    try:
        with short_path(control_socket(session)) as path:
            _, channel = await loop.create_unix_connection(
                lambda: Channel(UNIX_BUFFER_BYTES), str(path)
            )
    except (OSError, SandbridgeError) as exc:
        mux.refuse(stream, f"session {session!r} does not serve terminals ({exc})")
        return
    mux.opened(stream)
    try:
        passed = await _gate(stream, session)
        if passed is None:
            channel.close()
            return
        await channel.send(passed)
    except (ConnectionError, OSError):
        channel.abort()
        stream.reset("the control connection failed")
        return
    await splice(channel, stream, gentle_reset=True)


async def _gate(stream: MuxStream, session: str) -> bytes | None:
    """The bytes to pass on (the first line and what followed it) if the first line is
    a terminal op; else None, the stream answered or ended."""
    try:
        async with asyncio.timeout(FIRST_LINE_SECONDS):
            first = await first_line(stream)
    except ValueError as exc:
        await _refuse(stream, "too_long", str(exc))
        return None
    except TimeoutError:
        stream.reset(f"no control line within {FIRST_LINE_SECONDS:g} s")
        return None
    if first is None:
        stream.write_eof()
        return None
    line, rest = first
    why = check_first_line(line)
    if why is not None:
        log.info("remote.control_refused", session=session, error=why)
        await _refuse(stream, "malformed" if "JSON" in why else "not_over_the_link", why)
        return None
    unsigned = await asyncio.to_thread(answer_refusal, line, time.time())
    if unsigned is not None:
        log.info("remote.control_refused", session=session, error=unsigned[1])
        await _refuse(stream, *unsigned)
        return None
    return mark_attach(line) + rest


def mark_attach(line: bytes) -> bytes:
    """A first line that passed :func:`check_first_line`, as it is passed on: an
    ``attach`` says ``"over_link": true`` (whatever the laptop put there), so that the
    broker audits this connection closing whole as ``end=link``: this process half-closes
    it when the laptop's client leaves, and it closes whole when the link or this
    process goes (``terminals/broker.py``)."""
    message = decode_json(line, max_bytes=MAX_CONTROL_LINE)
    if not isinstance(message, dict) or message.get("op") != "attach":
        return line
    return json.dumps({**message, "over_link": True}).encode() + b"\n"


async def _refuse(stream: MuxStream, code: str, error: str) -> None:
    await stream.write(refusal_line(code, error))
    stream.write_eof()

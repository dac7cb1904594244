"""The served side of the ssh-agent protocol, sans-I/O (draft-miller-ssh-agent).

The sandbox's ``SSH_AUTH_SOCK`` (docs/ssh-agent.md) answers two requests and refuses
everything else: :data:`ANSWERED` is the whole table. Listing identities and signing are
what ``ssh``, ``git commit -S`` and ``ssh-keygen -Y sign`` need; adding, removing,
locking and extensions (``session-bind@openssh.com`` among them) would let the sandbox
change or probe the owner's agent, so they get the protocol's ``FAILURE``, as an agent
that does not know them would answer.

A message is ``uint32 length`` then ``length`` bytes, the first its type. Every string
inside is ``uint32 length`` then its bytes; a length that runs past its message is
refused, never trusted. :func:`describe_signed_data` says what a signature is for, from
the data the client asks to sign: an SSH user authentication (RFC 4252 §7) or an SSHSIG
blob (OpenSSH's PROTOCOL.sshsig: ``git commit -S`` with ``gpg.format=ssh``).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass

from sandbridge.exceptions import AgentWireError

# OpenSSH's own agent refuses a message over 256 KiB (AGENT_MAX_LEN in authfd.h), so no
# real client sends a larger one; the buffer a connection holds is bounded by it.
MAX_MESSAGE_BYTES = 256 * 1024
# The framing's length prefix.
LENGTH_BYTES = 4


class MessageType(enum.IntEnum):
    """The message numbers this side reads or writes."""

    FAILURE = 5
    REQUEST_IDENTITIES = 11
    IDENTITIES_ANSWER = 12
    SIGN_REQUEST = 13
    SIGN_RESPONSE = 14


@dataclass(frozen=True, slots=True)
class IdentitiesRequest:
    """``SSH_AGENTC_REQUEST_IDENTITIES``: which keys does the agent offer?"""


@dataclass(frozen=True, slots=True)
class SignRequest:
    """``SSH_AGENTC_SIGN_REQUEST``: sign ``data`` with the key whose public blob is
    ``key_blob`` (``flags``: the RSA hash choice, passed through)."""

    key_blob: bytes
    data: bytes
    flags: int


@dataclass(frozen=True, slots=True)
class Unanswered:
    """Any other message, or one whose body is malformed: answered with ``FAILURE``.
    ``message_type`` is None for an empty message; ``reason`` is for the log."""

    message_type: int | None
    reason: str


AgentRequest = IdentitiesRequest | SignRequest | Unanswered


class _Malformed(Exception):
    """A length inside a message runs past its end (caught in this module)."""


class _Fields:
    """Reads a message body's fields in order, checking every length against what is left."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def byte(self) -> int:
        if self._at >= len(self._data):
            raise _Malformed("a byte past the end")
        self._at += 1
        return self._data[self._at - 1]

    def uint32(self) -> int:
        if self._at + 4 > len(self._data):
            raise _Malformed("a uint32 past the end")
        (value,) = struct.unpack_from(">I", self._data, self._at)
        self._at += 4
        return int(value)

    def string(self) -> bytes:
        size = self.uint32()
        if size > len(self._data) - self._at:
            raise _Malformed(f"a string of {size} bytes with {len(self._data) - self._at} left")
        self._at += size
        return self._data[self._at - size : self._at]

    def rest(self) -> int:
        return len(self._data) - self._at


def _parse_identities_request(body: _Fields) -> AgentRequest:
    if body.rest():
        return Unanswered(MessageType.REQUEST_IDENTITIES, "trailing bytes")
    return IdentitiesRequest()


def _parse_sign_request(body: _Fields) -> AgentRequest:
    key_blob = body.string()
    data = body.string()
    flags = body.uint32()
    if body.rest():
        return Unanswered(MessageType.SIGN_REQUEST, "trailing bytes")
    return SignRequest(key_blob, data, flags)


# The whole served table: a message type not in it is answered with FAILURE.
ANSWERED: dict[int, Callable[[_Fields], AgentRequest]] = {
    MessageType.REQUEST_IDENTITIES: _parse_identities_request,
    MessageType.SIGN_REQUEST: _parse_sign_request,
}


def parse_message(message: bytes) -> AgentRequest:
    """The request one message (without its length prefix) makes."""
    if not message:
        return Unanswered(None, "an empty message")
    parse = ANSWERED.get(message[0])
    if parse is None:
        return Unanswered(message[0], f"message type {message[0]} is not served")
    try:
        return parse(_Fields(message[1:]))
    except _Malformed as exc:
        return Unanswered(message[0], f"malformed: {exc}")


class FrameReader:
    """Splits the bytes of one connection into messages, at most
    :data:`MAX_MESSAGE_BYTES` each; buffers at most one message."""

    def __init__(self, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_message_bytes

    def feed(self, data: bytes) -> list[bytes]:
        """The whole messages ``data`` completes; raises :class:`AgentWireError` on a
        length over the limit (the connection is then closed: nothing after it can be
        framed)."""
        self._buffer += data
        messages = []
        while len(self._buffer) >= LENGTH_BYTES:
            (size,) = struct.unpack_from(">I", self._buffer)
            if size > self._max:
                raise AgentWireError(
                    f"ssh-agent message of {size} bytes: over the limit of {self._max}"
                )
            if len(self._buffer) < LENGTH_BYTES + size:
                break
            messages.append(bytes(self._buffer[LENGTH_BYTES : LENGTH_BYTES + size]))
            del self._buffer[: LENGTH_BYTES + size]
        return messages

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message held."""
        return len(self._buffer)


def _string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def _framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def failure() -> bytes:
    """``SSH_AGENT_FAILURE``, framed."""
    return _framed(bytes([MessageType.FAILURE]))


def identities_answer(identities: list[tuple[bytes, bytes]]) -> bytes:
    """``SSH_AGENT_IDENTITIES_ANSWER`` for ``(key blob, comment)`` pairs, framed."""
    body = bytes([MessageType.IDENTITIES_ANSWER]) + struct.pack(">I", len(identities))
    for blob, comment in identities:
        body += _string(blob) + _string(comment)
    return _framed(body)


def sign_response(signature: bytes) -> bytes:
    """``SSH_AGENT_SIGN_RESPONSE`` carrying ``signature`` (an SSH signature blob), framed."""
    return _framed(bytes([MessageType.SIGN_RESPONSE]) + _string(signature))


def fingerprint(key_blob: bytes) -> str:
    """The key's SHA256 fingerprint as ``ssh-add -l`` and ``ssh-keygen -l`` print it."""
    digest = base64.b64encode(hashlib.sha256(key_blob).digest()).rstrip(b"=")
    return "SHA256:" + digest.decode()


# --- what a signature is for ---------------------------------------------------------

SSHSIG_MAGIC = b"SSHSIG"
USERAUTH_REQUEST = 50  # SSH_MSG_USERAUTH_REQUEST (RFC 4252 §5)
# OpenSSH 8.9+ binds the signature to the server's host key with this method name
# (PROTOCOL, "publickey-hostbound"): only then is the host key in the signed data.
HOSTBOUND_METHOD = b"publickey-hostbound-v00@openssh.com"
# Names in the log are the sandbox's to choose: cut to this many characters.
MAX_SHOWN_CHARS = 120


@dataclass(frozen=True, slots=True)
class UserAuth:
    """An SSH user authentication: the user and service asked for, the SSH session's id
    (hex: the host has no name for it), the server's host key fingerprint when the
    client sends it (``publickey-hostbound``), else None: the server's name is never in
    the signed data."""

    user: str
    service: str
    session_id: str
    host_key: str | None


@dataclass(frozen=True, slots=True)
class SshSig:
    """An SSHSIG signature (``ssh-keygen -Y sign``; git's ``gpg.format=ssh``): the
    namespace the signer names (``git`` for commits and tags) and the hash."""

    namespace: str
    hash_algorithm: str


@dataclass(frozen=True, slots=True)
class UnknownData:
    """Data of no known shape (logged by its size alone)."""

    size: int


SignedFor = UserAuth | SshSig | UnknownData


def _shown(value: bytes) -> str:
    text = value.decode("utf-8", "replace")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text[:MAX_SHOWN_CHARS]


def _sshsig(data: bytes) -> SignedFor:
    fields = _Fields(data[len(SSHSIG_MAGIC) :])
    namespace = fields.string()
    fields.string()  # reserved
    hash_algorithm = fields.string()
    fields.string()  # the message's hash
    if fields.rest():
        return UnknownData(len(data))
    return SshSig(_shown(namespace), _shown(hash_algorithm))


def _userauth(data: bytes) -> SignedFor:
    fields = _Fields(data)
    session_id = fields.string()
    if fields.byte() != USERAUTH_REQUEST:
        return UnknownData(len(data))
    user = fields.string()
    service = fields.string()
    method = fields.string()
    if method not in (b"publickey", HOSTBOUND_METHOD) or fields.byte() != 1:
        return UnknownData(len(data))
    fields.string()  # the key's algorithm
    fields.string()  # the key, which the request names already
    host_key = fingerprint(fields.string()) if method == HOSTBOUND_METHOD else None
    if fields.rest():
        return UnknownData(len(data))
    return UserAuth(_shown(user), _shown(service), session_id.hex()[:64], host_key)


def describe_signed_data(data: bytes) -> SignedFor:
    """What ``data`` (a sign request's) is for, as far as the data itself says."""
    try:
        return _sshsig(data) if data.startswith(SSHSIG_MAGIC) else _userauth(data)
    except _Malformed:
        return UnknownData(len(data))


def describe(signed_for: SignedFor) -> str:
    """One line for the owner: what the signature was for."""
    if isinstance(signed_for, UserAuth):
        host = "host key not sent" if signed_for.host_key is None else signed_for.host_key
        return f"ssh login as {signed_for.user!r} ({host}; session {signed_for.session_id[:16]})"
    if isinstance(signed_for, SshSig):
        return f"signature in namespace {signed_for.namespace!r} ({signed_for.hash_algorithm})"
    return f"unrecognised data of {signed_for.size} bytes"

"""The end-to-end channel between the attach client and the in-sandbox worker (sans-I/O).

Each side makes an ephemeral X25519 key pair per terminal; ``crypto_kx`` turns the two
into one key per direction (forward secrecy: nothing long-lived can decrypt a recorded
terminal). Each direction is a libsodium ``secretstream`` (XChaCha20-Poly1305): messages
are authenticated and strictly ordered, so a replayed, reordered, dropped or altered
message fails to decrypt, and the last message carries the ``FINAL`` tag, so a truncated
stream is told apart from an ended one. The host relays the ciphertext and never holds a
key.

A plaintext message is ``type (1 byte) | payload``. Data payloads are at most 16 KiB.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import nacl.bindings as sodium
import nacl.exceptions

from sandbridge.exceptions import ChannelError

# The bound on decoded data frames: small enough to keep latency low and memory
# per terminal fixed, big enough that a screenful is one frame.
MAX_DATA = 16 * 1024
ABYTES = sodium.crypto_secretstream_xchacha20poly1305_ABYTES
HEADER_BYTES = sodium.crypto_secretstream_xchacha20poly1305_HEADERBYTES
PUBLIC_BYTES = sodium.crypto_kx_PUBLIC_KEY_BYTES
# The largest ciphertext a peer may send: one type byte, 16 KiB, the tag and MAC.
MAX_ENVELOPE = 1 + MAX_DATA + ABYTES
# Terminal sizes a real terminal can have; anything else is refused.
MAX_ROWS_COLS = 10000
# An exit reason is one short word from the worker (see docs/terminals.md).
MAX_REASON = 64
# Why a terminal ended, as the worker reports it (docs/terminals.md).
END_REASONS = frozenset(
    {
        "exit", "revoked", "expired", "lease", "idle", "client", "link", "protocol",
        "session_end", "not_allowed",
    }
)  # fmt: skip
TAG_FINAL = sodium.crypto_secretstream_xchacha20poly1305_TAG_FINAL
TAG_MESSAGE = sodium.crypto_secretstream_xchacha20poly1305_TAG_MESSAGE


class MessageType(enum.IntEnum):
    DATA = 1  # bytes for the PTY (client -> worker) or for the screen (worker -> client)
    RESIZE = 2  # client -> worker: rows, cols (2 x uint16)
    HEARTBEAT = 3  # either way, every 5 s: liveness only, never counts as activity
    EXIT = 4  # worker -> client, FINAL: status (int32) and reason
    CLOSE = 5  # client -> worker, FINAL: the user left


@dataclass(frozen=True, slots=True)
class Message:
    type: MessageType
    payload: bytes = b""
    final: bool = False

    @property
    def size(self) -> tuple[int, int]:
        rows, cols = struct.unpack("!HH", self.payload)
        return rows, cols

    @property
    def exit(self) -> tuple[int, str]:
        status = struct.unpack("!i", self.payload[:4])[0]
        return status, self.payload[4:].decode("ascii", "replace")


def resize_message(rows: int, cols: int) -> Message:
    check_size(rows, cols)
    return Message(MessageType.RESIZE, struct.pack("!HH", rows, cols))


def exit_message(status: int, reason: str) -> Message:
    return Message(
        MessageType.EXIT, struct.pack("!i", status) + reason.encode()[:MAX_REASON], final=True
    )


def check_size(rows: int, cols: int) -> None:
    if not (0 < rows <= MAX_ROWS_COLS and 0 < cols <= MAX_ROWS_COLS):
        raise ChannelError(f"terminal size {rows}x{cols} is out of range 1..{MAX_ROWS_COLS}")


def keypair() -> tuple[bytes, bytes]:
    """A fresh ephemeral (public, secret) X25519 pair for one terminal."""
    public, secret = sodium.crypto_kx_keypair()
    return public, secret


def client_keys(public: bytes, secret: bytes, worker_public: bytes) -> tuple[bytes, bytes]:
    """(receive, send) keys of the attach client."""
    _check_public(worker_public)
    try:
        rx, tx = sodium.crypto_kx_client_session_keys(public, secret, worker_public)
    except nacl.exceptions.CryptoError:
        raise ChannelError(_SMALL_ORDER) from None
    return rx, tx


def worker_keys(public: bytes, secret: bytes, client_public: bytes) -> tuple[bytes, bytes]:
    """(receive, send) keys of the worker."""
    _check_public(client_public)
    try:
        rx, tx = sodium.crypto_kx_server_session_keys(public, secret, client_public)
    except nacl.exceptions.CryptoError:
        raise ChannelError(_SMALL_ORDER) from None
    return rx, tx


# The peer's ephemeral key (the worker's is the sandbox's choice) may be a point of small
# order, whose shared secret is zero: libsodium refuses it; we say so as a channel error.
_SMALL_ORDER = "the peer's channel key is a point of small order (no shared secret)"


def _check_public(key: bytes) -> None:
    if len(key) != PUBLIC_BYTES:
        raise ChannelError(f"a channel public key is {PUBLIC_BYTES} bytes, got {len(key)}")


class Sender:
    """One direction's sending half; :attr:`header` goes to the peer first."""

    def __init__(self, key: bytes) -> None:
        self._state = sodium.crypto_secretstream_xchacha20poly1305_state()
        self.header: bytes = sodium.crypto_secretstream_xchacha20poly1305_init_push(
            self._state, key
        )
        self.finished = False

    def seal(self, message: Message) -> bytes:
        """Encrypt one message; after a final one, nothing more can be sent."""
        if self.finished:
            raise ChannelError("the channel was already ended")
        if message.type is MessageType.DATA and len(message.payload) > MAX_DATA:
            raise ChannelError(f"data frame of {len(message.payload)} bytes exceeds {MAX_DATA}")
        self.finished = message.final
        return sodium.crypto_secretstream_xchacha20poly1305_push(
            self._state,
            bytes([message.type]) + message.payload,
            tag=TAG_FINAL if message.final else TAG_MESSAGE,
        )


# What each message type's payload must look like (beyond DATA's 16 KiB bound).
_FIXED_LENGTH = {MessageType.RESIZE: 4, MessageType.HEARTBEAT: 0, MessageType.CLOSE: 0}


class Receiver:
    """One direction's receiving half; ``allowed`` names the types the peer may send."""

    def __init__(self, key: bytes, header: bytes, allowed: frozenset[MessageType]) -> None:
        if len(header) != HEADER_BYTES:
            raise ChannelError(f"a stream header is {HEADER_BYTES} bytes, got {len(header)}")
        self._state = sodium.crypto_secretstream_xchacha20poly1305_state()
        sodium.crypto_secretstream_xchacha20poly1305_init_pull(self._state, header, key)
        self._allowed = allowed
        self.finished = False

    def open(self, envelope: bytes) -> Message:
        """Decrypt and check one message; the size is checked before decrypting."""
        if self.finished:
            raise ChannelError("a message arrived after the end of the stream")
        if not ABYTES < len(envelope) <= MAX_ENVELOPE:
            raise ChannelError(
                f"envelope of {len(envelope)} bytes is outside {ABYTES + 1}..{MAX_ENVELOPE}"
            )
        try:
            plain, tag = sodium.crypto_secretstream_xchacha20poly1305_pull(self._state, envelope)
        except nacl.exceptions.RuntimeError:
            raise ChannelError(
                "a message failed authentication (altered, replayed or out of order)"
            ) from None
        raw_type = plain[0]
        try:
            kind = MessageType(raw_type)
        except ValueError:
            raise ChannelError(f"unknown message type {raw_type}") from None
        if kind not in self._allowed:
            raise ChannelError(f"a {kind.name} message is not allowed from this peer")
        payload = plain[1:]
        expected = _FIXED_LENGTH.get(kind)
        if expected is not None and len(payload) != expected:
            raise ChannelError(f"{kind.name} payload of {len(payload)} bytes, expected {expected}")
        final = tag == TAG_FINAL
        if final != (kind in (MessageType.EXIT, MessageType.CLOSE)):
            raise ChannelError(f"{kind.name} message with the wrong end-of-stream tag")
        if kind is MessageType.EXIT and not 4 <= len(payload) <= 4 + MAX_REASON:
            raise ChannelError(f"EXIT payload of {len(payload)} bytes")
        message = Message(kind, payload, final)
        if kind is MessageType.RESIZE:
            check_size(*message.size)
        self.finished = final
        return message

    def check_end(self) -> None:
        """At end of stream: refuse a stream that stopped before its final message."""
        if not self.finished:
            raise ChannelError("the stream was cut before its authenticated end")


TO_WORKER = frozenset(
    {MessageType.DATA, MessageType.RESIZE, MessageType.HEARTBEAT, MessageType.CLOSE}
)
TO_CLIENT = frozenset({MessageType.DATA, MessageType.HEARTBEAT, MessageType.EXIT})

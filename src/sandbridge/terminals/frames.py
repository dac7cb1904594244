"""The outer framing on every terminal link: ``kind (1 byte) | length (4 bytes) | body``.

Client <-> host carries only ``CIPHER`` frames after the JSON handshake (and the host's
``STOP`` notice); host <-> worker adds the host's ``START``, ``LEASE`` and ``STOP`` and the
worker's ``READY``, ``TAKEN`` and ``ENDED``. Each kind has its own maximum body length,
checked on the length field before the body is read or decrypted: a peer can never make
the reader buffer more than one maximal frame.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sandbridge.exceptions import FrameError

HEADER_BYTES = 5
# The largest CIPHER body: one type byte, the channel's 16 KiB of data and secretstream's
# 17 bytes of tag and MAC (libsodium's ABYTES): channel.py's MAX_ENVELOPE, written out so
# that framing needs no nacl (a session's start imports this module, its first attach
# the channel); tests/terminals/test_channel.py holds the two equal.
MAX_ENVELOPE = 1 + 16 * 1024 + 17
# Control frames carry small JSON objects (a lease, a reason, an exit status).
MAX_CONTROL_BODY = 4096
# Client input the host forwards to the worker before the worker says it took it (TAKEN):
# 64 maximal frames, 1 MiB. The worker always reads its link, so leases and STOPs are
# never stuck behind input a busy shell does not read; this window is what bounds the
# input the worker holds, and past it the host stops reading the client (backpressure).
INPUT_WINDOW = 64 * MAX_ENVELOPE


class Kind(enum.IntEnum):
    CIPHER = 1  # an encrypted channel message, relayed untouched
    LEASE = 2  # host -> worker: {"seconds": N}, authority is valid for N more seconds
    STOP = 3  # host -> worker or client: {"reason": "..."}, authority ended
    READY = 4  # worker -> host: {"public": hex, "header": hex}, the PTY is up
    ENDED = 5  # worker -> host: {"reason": ..., "status": N}, metadata only
    START = 6  # host -> worker: the client's public key, size, TERM and limits
    TAKEN = 7  # worker -> host: {"bytes": N}, N bytes of CIPHER input left its window


MAX_BODY = {
    Kind.CIPHER: MAX_ENVELOPE,
    Kind.LEASE: MAX_CONTROL_BODY,
    Kind.STOP: MAX_CONTROL_BODY,
    Kind.READY: MAX_CONTROL_BODY,
    Kind.ENDED: MAX_CONTROL_BODY,
    Kind.START: MAX_CONTROL_BODY,
    Kind.TAKEN: MAX_CONTROL_BODY,
}

FROM_HOST_TO_WORKER = frozenset({Kind.START, Kind.CIPHER, Kind.LEASE, Kind.STOP})
FROM_WORKER = frozenset({Kind.READY, Kind.CIPHER, Kind.ENDED, Kind.TAKEN})
FROM_CLIENT = frozenset({Kind.CIPHER})
FROM_HOST_TO_CLIENT = frozenset({Kind.CIPHER, Kind.STOP})


@dataclass(frozen=True, slots=True)
class Frame:
    kind: Kind
    body: bytes


def encode(kind: Kind, body: bytes) -> bytes:
    """One frame; refuses a body longer than its kind allows."""
    if len(body) > MAX_BODY[kind]:
        raise FrameError(f"{kind.name} frame of {len(body)} bytes exceeds {MAX_BODY[kind]}")
    return bytes([kind]) + len(body).to_bytes(4, "big") + body


class FrameDecoder:
    """Feed bytes, get whole frames; ``allowed`` names the kinds this peer may send."""

    def __init__(self, allowed: frozenset[Kind]) -> None:
        self._allowed = allowed
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= HEADER_BYTES:
            raw_kind = self._buffer[0]
            try:
                kind = Kind(raw_kind)
            except ValueError:
                raise FrameError(f"unknown frame kind {raw_kind}") from None
            if kind not in self._allowed:
                raise FrameError(f"a {kind.name} frame is not allowed from this peer")
            length = int.from_bytes(self._buffer[1:HEADER_BYTES], "big")
            if length > MAX_BODY[kind]:
                raise FrameError(
                    f"{kind.name} frame declares {length} bytes; the limit is {MAX_BODY[kind]}"
                )
            if len(self._buffer) < HEADER_BYTES + length:
                break
            body = bytes(self._buffer[HEADER_BYTES : HEADER_BYTES + length])
            del self._buffer[: HEADER_BYTES + length]
            frames.append(Frame(kind, body))
        return frames

    def feed_eof(self) -> None:
        """Refuse an end of stream in the middle of a frame."""
        if self._buffer:
            raise FrameError(f"stream ended inside a frame ({len(self._buffer)} bytes pending)")

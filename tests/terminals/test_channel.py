"""The encrypted channel: round trips, and every tampering refused."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import ChannelError
from sandbridge.terminals import channel, frames
from sandbridge.terminals.channel import Message, MessageType


def pair() -> tuple[channel.Sender, channel.Receiver]:
    client_public, client_secret = channel.keypair()
    worker_public, worker_secret = channel.keypair()
    _, client_tx = channel.client_keys(client_public, client_secret, worker_public)
    worker_rx, _ = channel.worker_keys(worker_public, worker_secret, client_public)
    sender = channel.Sender(client_tx)
    return sender, channel.Receiver(worker_rx, sender.header, channel.TO_WORKER)


def test_the_framings_bound_is_the_channels_largest_envelope() -> None:
    """frames.py writes the bound out so that it needs no nacl; it is libsodium's."""
    assert frames.MAX_ENVELOPE == channel.MAX_ENVELOPE
    assert frames.MAX_BODY[frames.Kind.CIPHER] == channel.MAX_ENVELOPE


def test_messages_round_trip_in_order_and_end_authenticated() -> None:
    sender, receiver = pair()
    data = Message(MessageType.DATA, b"x" * channel.MAX_DATA)
    assert receiver.open(sender.seal(data)) == data
    assert receiver.open(sender.seal(channel.resize_message(40, 120))).size == (40, 120)
    assert receiver.open(sender.seal(Message(MessageType.CLOSE, final=True))).final
    receiver.check_end()


def test_keys_agree_both_ways_and_differ_per_direction() -> None:
    cp, cs = channel.keypair()
    wp, ws = channel.keypair()
    c_rx, c_tx = channel.client_keys(cp, cs, wp)
    w_rx, w_tx = channel.worker_keys(wp, ws, cp)
    assert (c_rx, c_tx) == (w_tx, w_rx)
    assert c_rx != c_tx


def _flip(envelope: bytes) -> bytes:
    return envelope[:-1] + bytes([envelope[-1] ^ 1])


def test_tampered_replayed_reordered_and_oversized_envelopes_are_refused() -> None:
    cases = ["tampered", "replayed", "reordered", "oversized", "undersized"]
    for case in cases:
        sender, receiver = pair()
        first = sender.seal(Message(MessageType.DATA, b"one"))
        second = sender.seal(Message(MessageType.DATA, b"two"))
        if case == "tampered":
            bad = [_flip(first)]
        elif case == "replayed":
            receiver.open(first)
            bad = [first]
        elif case == "reordered":
            bad = [second]
        elif case == "oversized":
            bad = [b"\0" * (channel.MAX_ENVELOPE + 1)]
        else:
            bad = [b"\0" * channel.ABYTES]
        with pytest.raises(ChannelError):
            for envelope in bad:
                receiver.open(envelope)


def test_a_stream_cut_before_its_final_message_is_refused() -> None:
    sender, receiver = pair()
    receiver.open(sender.seal(Message(MessageType.DATA, b"x")))
    with pytest.raises(ChannelError, match="cut before"):
        receiver.check_end()


def test_nothing_is_accepted_after_the_final_message() -> None:
    sender, receiver = pair()
    receiver.open(sender.seal(Message(MessageType.CLOSE, final=True)))
    with pytest.raises(ChannelError):
        receiver.open(b"\0" * 40)
    with pytest.raises(ChannelError):
        sender.seal(Message(MessageType.DATA, b"x"))


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (Message(MessageType.EXIT, b"\0\0\0\0", final=True), "not allowed"),
        (Message(MessageType.RESIZE, b"\0\0\0\0"), "out of range"),
        (Message(MessageType.RESIZE, b"\0\1"), "expected 4"),
        (Message(MessageType.HEARTBEAT, b"x"), "expected 0"),
        (Message(MessageType.CLOSE), "end-of-stream tag"),
        (Message(MessageType.DATA, b"x", final=True), "end-of-stream tag"),
    ],
)
def test_invalid_messages_are_refused(message: Message, error: str) -> None:
    sender, receiver = pair()
    with pytest.raises(ChannelError, match=error):
        receiver.open(sender.seal(message))


def test_oversized_data_is_never_sealed() -> None:
    sender, _ = pair()
    with pytest.raises(ChannelError):
        sender.seal(Message(MessageType.DATA, b"x" * (channel.MAX_DATA + 1)))


# X25519 points of small order: the shared secret is all zeros, and libsodium refuses
# to derive keys from it (CryptoError, which nothing caught: a traceback in the client).
LOW_ORDER = [
    bytes(32),
    bytes([1]) + bytes(31),
    bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
]


@pytest.mark.parametrize("peer", LOW_ORDER, ids=lambda key: key.hex()[:8])
def test_a_peer_key_of_small_order_is_refused_as_a_channel_error(peer: bytes) -> None:
    public, secret = channel.keypair()
    with pytest.raises(ChannelError, match="small order"):
        channel.client_keys(public, secret, peer)
    with pytest.raises(ChannelError, match="small order"):
        channel.worker_keys(public, secret, peer)

"""The served side of the ssh-agent protocol: the message table, framing and what a
signature is for, on well-formed and hostile bytes."""

from __future__ import annotations

import base64
import struct
import subprocess
from pathlib import Path

import pytest

from sandbridge.exceptions import AgentWireError
from sandbridge.protocol import ssh_agent as wire


def _string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def _framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


SIGN = bytes([13]) + _string(b"blob") + _string(b"data") + struct.pack(">I", 2)

# (message body, the request it makes)
MESSAGES = [
    (bytes([11]), wire.IdentitiesRequest()),
    (SIGN, wire.SignRequest(b"blob", b"data", 2)),
    (b"", wire.Unanswered(None, "an empty message")),
    (bytes([11]) + b"x", wire.Unanswered(11, "trailing bytes")),
    (SIGN + b"x", wire.Unanswered(13, "trailing bytes")),
]
# Every other message type the protocol defines (and some it does not): FAILURE.
REFUSED_TYPES = {
    17: "add identity",
    18: "remove identity",
    19: "remove all identities",
    20: "add smartcard key",
    21: "remove smartcard key",
    22: "lock",
    23: "unlock",
    25: "add constrained identity",
    26: "add constrained smartcard key",
    27: "extension (session-bind@openssh.com among them)",
    1: "SSH1 request identities",
    0: "type zero",
    255: "type 255",
}
# Sign requests whose inner lengths lie.
LYING_SIGN_REQUESTS = [
    bytes([13]) + struct.pack(">I", 0xFFFFFFFF),
    bytes([13]) + struct.pack(">I", 5) + b"blob",
    bytes([13]) + _string(b"blob") + struct.pack(">I", 100) + b"data",
    bytes([13]) + _string(b"blob") + _string(b"data"),
    bytes([13]) + _string(b"blob") + _string(b"data") + b"\0\0",
    bytes([13]),
    bytes([13, 0, 0]),
]


@pytest.mark.parametrize(("body", "request_made"), MESSAGES)
def test_each_served_message_makes_its_request(
    body: bytes, request_made: wire.AgentRequest
) -> None:
    assert wire.parse_message(body) == request_made


@pytest.mark.parametrize("message_type", sorted(REFUSED_TYPES), ids=REFUSED_TYPES.get)
def test_every_unserved_message_type_is_unanswered(message_type: int) -> None:
    request = wire.parse_message(bytes([message_type]) + b"anything")
    assert request == wire.Unanswered(message_type, f"message type {message_type} is not served")


def test_the_served_table_holds_listing_and_signing_alone() -> None:
    assert set(wire.ANSWERED) == {11, 13}


@pytest.mark.parametrize("body", LYING_SIGN_REQUESTS)
def test_a_sign_request_whose_lengths_lie_is_unanswered(body: bytes) -> None:
    request = wire.parse_message(body)
    assert isinstance(request, wire.Unanswered)
    assert request.message_type == 13


def test_frames_split_at_every_byte_give_the_same_messages() -> None:
    stream = _framed(bytes([11])) + _framed(SIGN) + _framed(b"")
    for cut in range(len(stream) + 1):
        reader = wire.FrameReader()
        messages = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        assert messages == [bytes([11]), SIGN, b""]
        assert reader.pending == 0


def test_a_truncated_frame_waits_and_holds_only_its_bytes() -> None:
    reader = wire.FrameReader()
    assert reader.feed(struct.pack(">I", 10) + b"abc") == []
    assert reader.pending == 7


def test_a_length_over_the_limit_is_refused_before_its_bytes_arrive() -> None:
    reader = wire.FrameReader()
    with pytest.raises(AgentWireError, match=f"{wire.MAX_MESSAGE_BYTES + 1} bytes"):
        reader.feed(struct.pack(">I", wire.MAX_MESSAGE_BYTES + 1))


def test_a_message_at_the_limit_is_read() -> None:
    reader = wire.FrameReader()
    body = bytes([13]) + b"\0" * (wire.MAX_MESSAGE_BYTES - 1)
    assert reader.feed(_framed(body)) == [body]


def test_a_flood_of_messages_in_one_read_is_split_without_limit_on_their_number() -> None:
    reader = wire.FrameReader()
    assert reader.feed(_framed(bytes([22])) * 10_000) == [bytes([22])] * 10_000


ANSWERS = [
    (wire.failure(), b"\0\0\0\x01\x05"),
    (wire.identities_answer([]), b"\0\0\0\x05\x0c\0\0\0\0"),
    (
        wire.identities_answer([(b"k", b"c")]),
        _framed(b"\x0c" + struct.pack(">I", 1) + _string(b"k") + _string(b"c")),
    ),
    (wire.sign_response(b"sig"), _framed(b"\x0e" + _string(b"sig"))),
]


@pytest.mark.parametrize(("encoded", "expected"), ANSWERS)
def test_answers_are_framed_as_the_protocol_says(encoded: bytes, expected: bytes) -> None:
    assert encoded == expected


def test_fingerprint_is_the_one_ssh_keygen_prints(tmp_path: Path) -> None:
    key = tmp_path / "key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "c", "-f", str(key)], check=True
    )
    blob = base64.b64decode(key.with_suffix(".pub").read_text().split()[1])
    printed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(key)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[1]
    assert wire.fingerprint(blob) == printed


def _userauth(method: bytes, host_key: bytes | None = None, user: bytes = b"git") -> bytes:
    data = (
        _string(b"\x01" * 32)
        + bytes([50])
        + _string(user)
        + _string(b"ssh-connection")
        + _string(method)
        + b"\x01"
        + _string(b"ssh-ed25519")
        + _string(b"keyblob")
    )
    return data if host_key is None else data + _string(host_key)


def _sshsig(namespace: bytes, tail: bytes = b"") -> bytes:
    return (
        b"SSHSIG"
        + _string(namespace)
        + _string(b"")
        + _string(b"sha512")
        + _string(b"h" * 64)
        + tail
    )


SIGNED_DATA = [
    (
        _userauth(b"publickey"),
        wire.UserAuth("git", "ssh-connection", "01" * 32, None),
    ),
    (
        _userauth(wire.HOSTBOUND_METHOD, b"hostkey"),
        wire.UserAuth("git", "ssh-connection", "01" * 32, wire.fingerprint(b"hostkey")),
    ),
    (_sshsig(b"git"), wire.SshSig("git", "sha512")),
    (_sshsig(b"file"), wire.SshSig("file", "sha512")),
    (_userauth(b"password"), wire.UnknownData(len(_userauth(b"password")))),
    (_userauth(b"publickey") + b"x", wire.UnknownData(len(_userauth(b"publickey")) + 1)),
    (_userauth(b"publickey")[:-3], wire.UnknownData(len(_userauth(b"publickey")) - 3)),
    (_sshsig(b"git", b"x"), wire.UnknownData(len(_sshsig(b"git")) + 1)),
    (b"SSHSIG" + struct.pack(">I", 1 << 30), wire.UnknownData(10)),
    (b"", wire.UnknownData(0)),
    (b"\0\0\0\0\x33", wire.UnknownData(5)),
]


@pytest.mark.parametrize(("data", "signed_for"), SIGNED_DATA)
def test_what_a_signature_is_for_is_read_from_its_data(
    data: bytes, signed_for: wire.SignedFor
) -> None:
    assert wire.describe_signed_data(data) == signed_for


def test_names_in_signed_data_are_shown_printable_and_cut() -> None:
    shown = wire.describe_signed_data(_userauth(b"publickey", user=b"\x1b[31m" + b"u" * 500))
    assert isinstance(shown, wire.UserAuth)
    assert shown.user.startswith("?[31m")
    assert len(shown.user) == wire.MAX_SHOWN_CHARS


def test_the_description_says_when_the_host_key_was_not_sent() -> None:
    line = wire.describe(wire.UserAuth("git", "ssh-connection", "ab" * 32, None))
    assert line == "ssh login as 'git' (host key not sent; session abababababababab)"

"""The remote link's framing, multiplexing and flow control (protocol/remote_wire.py)."""

from __future__ import annotations

import json

import pytest

from sandbridge.exceptions import RemoteWireError
from sandbridge.protocol.remote_wire import (
    HEADER,
    MAX_APPS,
    MAX_DATA_BYTES,
    MAX_STREAMS,
    STREAM_WINDOW,
    VERSION,
    Apps,
    AppsListed,
    Credited,
    Data,
    EndOfStream,
    Event,
    FarApp,
    Hello,
    Kind,
    LinkState,
    OpenControl,
    Opened,
    OpenStream,
    Refused,
    Reset,
    Role,
    parse_apps,
)

APP = FarApp("web", 5173, "/")


def received(state: LinkState, data: bytes) -> list[Event | Apps]:
    """``state.receive(data)``, each APPS list parsed as the laptop parses the one it
    applies (``parse_apps``)."""
    return [parse_apps(e) if isinstance(e, AppsListed) else e for e in state.receive(data)]


def frame(kind: int, stream: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind, stream) + payload


def hello(role: str = "laptop", version: object = VERSION) -> bytes:
    return frame(Kind.HELLO, 0, json.dumps({"version": version, "role": role}).encode())


def pair() -> tuple[LinkState, LinkState]:
    """A laptop and a far side that have exchanged HELLO."""
    laptop, far = LinkState(Role.LAPTOP), LinkState(Role.FAR)
    assert far.receive(laptop.send_hello()) == [Hello(Role.LAPTOP, private_apps=True)]
    assert laptop.receive(far.send_hello()) == [Hello(Role.FAR)]
    return laptop, far


def opened_stream() -> tuple[LinkState, LinkState, int]:
    laptop, far = pair()
    stream, opening = laptop.send_open("web", 5173)
    assert far.receive(opening) == [OpenStream(stream, "web", 5173)]
    assert laptop.receive(far.send_opened(stream)) == [Opened(stream)]
    return laptop, far, stream


def test_hello_then_apps_reach_the_laptop() -> None:
    laptop, far = pair()
    assert received(laptop, far.send_apps((APP, FarApp("web", 8000, "/api")))) == [
        Apps((APP, FarApp("web", 8000, "/api")))
    ]


def test_frames_split_at_every_byte_still_decode() -> None:
    laptop, far = pair()
    data = far.send_apps((APP,))
    events = [event for byte in data for event in received(laptop, bytes([byte]))]
    assert events == [Apps((APP,))]


def test_frames_and_a_split_one_in_one_read_decode_as_the_rest_arrives() -> None:
    laptop, far, stream = opened_stream()
    data = far.send_data(stream, b"first") + far.send_data(stream, b"second")
    third = far.send_data(stream, b"third")
    assert laptop.receive(data + third[:4]) == [Data(stream, b"first"), Data(stream, b"second")]
    assert laptop.receive(third[4:12]) == []
    assert laptop.receive(third[12:]) == [Data(stream, b"third")]


def test_stream_carries_data_both_ways_and_ends_with_eof() -> None:
    laptop, far, stream = opened_stream()
    assert far.receive(laptop.send_data(stream, b"GET / HTTP/1.1\r\n\r\n")) == [
        Data(stream, b"GET / HTTP/1.1\r\n\r\n")
    ]
    assert laptop.receive(far.send_data(stream, b"HTTP/1.1 200 OK\r\n")) == [
        Data(stream, b"HTTP/1.1 200 OK\r\n")
    ]
    assert far.receive(laptop.send_eof(stream)) == [EndOfStream(stream)]
    assert laptop.receive(far.send_eof(stream)) == [EndOfStream(stream)]
    assert not laptop.is_open(stream) and not far.is_open(stream)


def test_refused_open_is_forgotten_on_both_sides() -> None:
    laptop, far = pair()
    stream, opening = laptop.send_open("web", 9)
    far.receive(opening)
    assert laptop.receive(far.send_refused(stream, "no app on port 9")) == [
        Refused(stream, "no app on port 9")
    ]
    assert laptop.open_streams == far.open_streams == 0


def test_reset_ends_the_stream_and_late_frames_are_dropped() -> None:
    laptop, far, stream = opened_stream()
    in_flight = far.send_data(stream, b"late")
    assert far.receive(laptop.send_reset(stream, "browser gone")) == [Reset(stream, "browser gone")]
    assert laptop.receive(in_flight) == []


def test_sender_stops_at_the_window_until_credit_comes_back() -> None:
    laptop, far, stream = opened_stream()
    wire = far.send_data(stream, b"x" * STREAM_WINDOW)
    assert far.send_credit_for(stream) == 0
    received = laptop.receive(wire)
    assert sum(len(e.data) for e in received if isinstance(e, Data)) == STREAM_WINDOW
    assert all(len(e.data) <= MAX_DATA_BYTES for e in received if isinstance(e, Data))
    assert laptop.consumed(stream, STREAM_WINDOW // 2 - 1) == b""  # not worth a frame yet
    credit = laptop.consumed(stream, 1)
    assert far.receive(credit) == [Credited(stream)]
    assert far.send_credit_for(stream) == STREAM_WINDOW // 2


def test_one_stalled_stream_leaves_another_its_full_window() -> None:
    laptop, far, first = opened_stream()
    second, opening = laptop.send_open("web", 5173)
    far.receive(opening)
    laptop.receive(far.send_opened(second))
    laptop.receive(far.send_data(first, b"x" * STREAM_WINDOW))
    assert far.send_credit_for(first) == 0
    assert far.send_credit_for(second) == STREAM_WINDOW


def test_sending_beyond_credit_is_refused_locally() -> None:
    _, far, stream = opened_stream()
    with pytest.raises(RemoteWireError, match="exceed its credit"):
        far.send_data(stream, b"x" * (STREAM_WINDOW + 1))


def test_a_private_app_reaches_a_laptop_that_serves_it_privately_marked_private() -> None:
    laptop, far = pair()
    private = FarApp("web", 8000, "/", private=True)
    assert received(laptop, far.send_apps((APP, private))) == [Apps((APP, private))]


def test_an_open_app_is_listed_as_version_2_always_listed_it() -> None:
    _laptop, far = pair()
    payload = far.send_apps((APP,))[HEADER.size :]
    assert json.loads(payload) == {
        "sessions": [{"id": "web", "apps": [{"port": 5173, "base_path": "/"}]}]
    }


def test_a_laptop_that_does_not_say_private_apps_is_never_listed_one() -> None:
    far = LinkState(Role.FAR)
    assert far.receive(hello()) == [Hello(Role.LAPTOP, private_apps=False)]
    with pytest.raises(RemoteWireError, match="only to a laptop that serves it privately"):
        far.send_apps((FarApp("web", 8000, "/", private=True),))


def test_a_far_side_saying_private_apps_in_its_hello_gains_nothing() -> None:
    laptop = LinkState(Role.LAPTOP)
    said = frame(
        Kind.HELLO,
        0,
        json.dumps({"version": VERSION, "role": "far", "private_apps": True}).encode(),
    )
    assert laptop.receive(said) == [Hello(Role.FAR, private_apps=False)]


# (who receives, frames before, the malformed frame, what the refusal names)
def test_a_control_stream_is_opened_by_session_and_carries_data() -> None:
    laptop, far = pair()
    stream, opening = laptop.send_open_control("web")
    assert far.receive(opening) == [OpenControl(stream, "web")]
    assert laptop.receive(far.send_opened(stream)) == [Opened(stream)]
    assert far.receive(laptop.send_data(stream, b'{"op":"list"}\n')) == [
        Data(stream, b'{"op":"list"}\n')
    ]


MALFORMED = [
    ("far", b"", frame(Kind.OPEN, 1, b"{}"), "first frame must be HELLO, not OPEN"),
    ("far", b"", frame(99, 0), "unknown frame kind 99"),
    ("far", b"", hello(version=1), "protocol version 1 is not 2"),
    ("far", b"", hello(version="2"), "protocol version '2' is not 2"),
    ("far", b"", hello(role="far"), "HELLO role 'far' is not 'laptop'"),
    ("far", b"", frame(Kind.HELLO, 0, b"not json"), "HELLO payload is not a JSON object"),
    ("far", b"", frame(Kind.HELLO, 0, b"[1]"), "HELLO payload is not a JSON object"),
    ("far", b"", HEADER.pack(1000, Kind.HELLO, 0), "HELLO frame of 1000 bytes is over its limit"),
    ("far", hello(), hello(), "a laptop side may not send HELLO"),
    ("far", hello(), frame(Kind.APPS, 0, b'{"sessions":[]}'), "laptop side may not send APPS"),
    ("laptop", hello("far"), frame(Kind.OPEN, 1, b"{}"), "far side may not send OPEN"),
    (
        "far",
        hello(),
        HEADER.pack(MAX_DATA_BYTES + 1, Kind.DATA, 1),
        f"DATA frame of {MAX_DATA_BYTES + 1} bytes is over its limit",
    ),
    ("far", hello(), frame(Kind.OPEN, 0, b"{}"), "OPEN must name a stream, not 0"),
    (
        "far",
        hello(),
        frame(Kind.OPEN, 1, b'{"session":"web","port":70000}'),
        "port must be an integer 1..65535, got 70000",
    ),
    (
        "far",
        hello(),
        frame(Kind.OPEN, 1, b'{"session":"web","port":true}'),
        "got True",
    ),
    (
        "far",
        hello(),
        frame(Kind.OPEN, 1, b'{"session":"../etc","port":80}'),
        "session must be a session name, got '../etc'",
    ),
    (
        "far",
        hello() + frame(Kind.OPEN, 5, b'{"session":"web","port":80}'),
        frame(Kind.OPEN, 5, b'{"session":"web","port":80}'),
        "OPEN for stream 5: ids must go up",
    ),
    ("far", hello(), frame(Kind.DATA, 7, b"x"), "DATA for stream 7, which was never opened"),
    (
        "far",
        hello(),
        frame(Kind.OPEN, 1, b'{"session":"web","control":"shell"}'),
        "OPEN 1: control must be 'terminal' and alone, got 'shell'",
    ),
    (
        "far",
        hello(),
        frame(Kind.OPEN, 1, b'{"session":"web","control":"terminal","port":80}'),
        "OPEN 1: control must be 'terminal' and alone, got 'terminal'",
    ),
    (
        "far",
        hello(),
        frame(Kind.OPEN, 1, b'{"session":"../x","control":"terminal"}'),
        "OPEN 1: session must be a session name, got '../x'",
    ),
    (
        "laptop",
        hello("far"),
        frame(Kind.OPEN, 1, b'{"session":"web","control":"terminal"}'),
        "far side may not send OPEN",
    ),
    (
        "far",
        hello() + frame(Kind.OPEN, 1, b'{"session":"web","port":80}'),
        frame(Kind.DATA, 1, b"x"),
        "DATA for stream 1 before it was opened",
    ),
    (
        "laptop",
        hello("far"),
        frame(Kind.APPS, 0, b'{"sessions":[{"id":"web","apps":[{"port":80,"base_path":"x"}]}]}'),
        "APPS: base_path must start with '/', got 'x'",
    ),
    ("laptop", hello("far"), frame(Kind.APPS, 0, b'{"sessions":{}}'), "sessions must be a list"),
    (
        "laptop",
        hello("far"),
        frame(
            Kind.APPS, 0, b'{"sessions":[{"id":"web","apps":[{"port":80,"base_path":"/a/../b"}]}]}'
        ),
        "APPS: base_path must not contain empty, '.' or '..' segments, got '/a/../b'",
    ),
    (
        "laptop",
        hello("far"),
        frame(Kind.APPS, 0, b'{"sessions":[{"id":"-x","apps":[]}]}'),
        "APPS: session must be a session name, got '-x'",
    ),
    (
        "laptop",
        hello("far"),
        frame(Kind.APPS, 0, b'{"sessions":[{"id":"Web","apps":[]}]}'),
        "APPS: session must be a session name, got 'Web'",
    ),
    ("laptop", hello("far"), frame(Kind.APPS, 3, b'{"sessions":[]}'), "APPS must be on stream 0"),
    (
        "laptop",
        hello("far"),
        frame(Kind.APPS, 0, b'{"sessions":[{"id":"web","apps":[7]}]}'),
        "an app must be an object, got 7",
    ),
    (
        "laptop",
        hello("far"),
        frame(
            Kind.APPS,
            0,
            json.dumps(
                {"sessions": [{"id": "web", "apps": [{"port": 80, "base_path": "/"}] * 1025}]}
            ).encode(),
        ),
        f"APPS lists more than {MAX_APPS} apps",
    ),
    (
        "far",
        hello() + frame(Kind.OPEN, 1, b'{"session":"web","port":80}'),
        frame(Kind.DATA, 1, b""),
        "before it was opened",
    ),
    (
        "laptop",
        hello("far"),
        frame(
            Kind.APPS,
            0,
            b'{"sessions":[{"id":"web","apps":[{"port":80,"base_path":"/","private":"yes"}]}]}',
        ),
        "APPS: private must be true or false, got 'yes'",
    ),
]


@pytest.mark.parametrize(("side", "before", "bad", "refusal"), MALFORMED)
def test_malformed_input_is_refused_naming_the_value(
    side: str, before: bytes, bad: bytes, refusal: str
) -> None:
    state = LinkState(Role.FAR if side == "far" else Role.LAPTOP)
    state.receive(before)
    with pytest.raises(RemoteWireError, match=refusal.replace("(", r"\(").replace(".", r"\.")):
        received(state, bad)


def test_data_beyond_the_window_is_refused() -> None:
    _laptop, far, stream = opened_stream()
    over = frame(Kind.DATA, stream, b"x" * MAX_DATA_BYTES) * (STREAM_WINDOW // MAX_DATA_BYTES)
    far.receive(over)
    with pytest.raises(RemoteWireError, match=f"DATA of 1 bytes for stream {stream} is beyond"):
        far.receive(frame(Kind.DATA, stream, b"x"))


def test_credit_for_more_than_in_flight_is_refused() -> None:
    _laptop, far, stream = opened_stream()
    with pytest.raises(RemoteWireError, match=f"CREDIT of 1 for stream {stream} is more"):
        far.receive(frame(Kind.CREDIT, stream, (1).to_bytes(4, "big")))


def test_data_after_eof_is_refused() -> None:
    laptop, far, stream = opened_stream()
    far.receive(laptop.send_eof(stream))
    with pytest.raises(RemoteWireError, match=f"DATA for stream {stream} after its EOF"):
        far.receive(frame(Kind.DATA, stream, b"x"))


def test_opened_twice_is_refused() -> None:
    laptop, _far, stream = opened_stream()
    with pytest.raises(RemoteWireError, match=f"OPENED for stream {stream}, which is already"):
        laptop.receive(frame(Kind.OPENED, stream))


def test_reason_not_utf8_is_refused() -> None:
    laptop, _far, stream = opened_stream()
    with pytest.raises(RemoteWireError, match="RESET reason is not UTF-8"):
        laptop.receive(frame(Kind.RESET, stream, b"\xff\xfe"))


def test_more_than_max_streams_is_refused() -> None:
    laptop, far = pair()
    for _ in range(MAX_STREAMS):
        far.receive(laptop.send_open("web", 80)[1])
    with pytest.raises(RemoteWireError, match=f"already {MAX_STREAMS} streams open"):
        far.receive(frame(Kind.OPEN, MAX_STREAMS + 1, b'{"session":"web","port":80}'))


def test_empty_data_frames_are_refused_not_queued() -> None:
    """Each empty DATA frame would be a queue slot on the receiver, at 9 bytes each on
    the wire: a flood of them is refused at the first."""
    laptop, _, stream = opened_stream()
    with pytest.raises(RemoteWireError, match=f"DATA of 0 bytes for stream {stream}"):
        laptop.receive(frame(Kind.DATA, stream) * 1000)


def test_the_far_side_cannot_send_more_than_max_apps() -> None:
    _, far = pair()
    apps = tuple(FarApp("web", port, "/") for port in range(1, MAX_APPS + 2))
    with pytest.raises(RemoteWireError, match=f"{MAX_APPS} apps"):
        far.send_apps(apps)
    assert far.send_apps(apps[:MAX_APPS])

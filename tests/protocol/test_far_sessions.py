"""What a far machine says of its sessions (protocol/far_sessions.py): its word is
bounded and checked, and an honest far side is cut to those bounds before it sends."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from sandbridge.exceptions import RemoteWireError
from sandbridge.protocol.far_sessions import (
    MAX_COMMAND_CHARS,
    MAX_FAR_REQUESTS,
    MAX_FAR_SESSIONS,
    MAX_WORKDIR_CHARS,
    FarRequest,
    FarSession,
    far_session,
    parse,
    parse_sessions,
)
from sandbridge.protocol.remote_wire import HEADER, Apps, FarApp, Kind, LinkState, Role
from tests.protocol.test_remote_wire import received

KEY = "ab" * 32
REQUEST = {
    "id": "web:0123abcd", "state": "pending", "requester": KEY, "reason": "look",
    "created": 1.7e9, "duration": 600, "expires": None,
}  # fmt: skip
INFO = {
    "workdir": "/home/a/p", "command": "bash", "started": 1.7e9, "network": "none",
    "requests": [REQUEST],
}  # fmt: skip


def test_a_described_session_is_read_with_its_requests() -> None:
    assert parse("web", INFO) == FarSession(
        "web", "/home/a/p", "bash", 1.7e9, "none",
        (FarRequest("web:0123abcd", "pending", KEY, "look", 1.7e9, 600.0, None),),
    )  # fmt: skip


def test_an_unknown_command_and_network_are_none() -> None:
    session = parse("web", {"workdir": "/w", "started": 1, "command": None, "network": None})
    assert (session.command, session.network, session.requests) == (None, None, ())


def _with(**changes: object) -> dict[str, Any]:
    return {**INFO, **changes}


def _request(**changes: object) -> dict[str, Any]:
    return _with(requests=[{**REQUEST, **changes}])


@pytest.mark.parametrize(
    ("info", "refusal"),
    [
        ([], "info must be an object"),
        (_with(workdir=None), "workdir must be text of at most 4096 characters"),
        (_with(workdir="w" * (MAX_WORKDIR_CHARS + 1)), "workdir must be text"),
        (_with(command="c" * (MAX_COMMAND_CHARS + 1)), "command must be text"),
        (_with(command=["bash"]), "command must be text"),
        (_with(started=float("nan")), "started must be a number from 0 to 1e+10, got nan"),
        (_with(started=float("inf")), "started must be a number"),
        (_with(started=1e300), "started must be a number"),
        (_with(started=-1), "started must be a number"),
        (_with(started=True), "started must be a number"),
        (_with(started="1"), "started must be a number"),
        (_with(network="host"), "network must be none, allow or full, got 'host'"),
        (_with(requests=[REQUEST] * (MAX_FAR_REQUESTS + 1)), "requests must be a list of at most"),
        (_with(requests={}), "requests must be a list"),
        (_with(requests=["x"]), "a request must be an object"),
        # A request listed under another session, or as another machine's, or as local.
        (_request(id="other:0123abcd"), "a request id must be web:XXXXXXXX, got 'other:0123abcd'"),
        (_request(id="box:web:0123abcd"), "a request id must be web:XXXXXXXX"),
        (_request(id="web:0123ABCD"), "a request id must be web:XXXXXXXX"),
        (_request(id="web:0123abcd0"), "a request id must be web:XXXXXXXX"),
        (_request(id=7), "a request id must be web:XXXXXXXX"),
        (_request(state="approved\x1b[2J"), "a request's state must be one of"),
        (_request(requester="owner"), "a requester must be a public key"),
        (_request(requester=KEY.upper()), "a requester must be a public key"),
        (_request(reason="r" * 201), "reason must be text of at most 200 characters"),
        (_request(reason="look\x1b[31m"), "a reason must be printable"),
        (_request(created=float("nan")), "created must be a number"),
        (_request(duration=1e12), "duration must be a number from 0 to 86400"),
        (_request(duration=float("-inf")), "duration must be a number"),
        (_request(expires=float("nan")), "expires must be a number"),
    ],
)
def test_a_far_description_out_of_bounds_is_refused_naming_the_value(
    info: object, refusal: str
) -> None:
    with pytest.raises(RemoteWireError, match=re.escape(f"session 'web': {refusal}")):
        parse("web", info)


def test_a_record_of_sessions_is_bounded_and_names_checked() -> None:
    with pytest.raises(RemoteWireError, match="at most 64"):
        parse_sessions([{"id": f"s{i}", **_with(requests=[])} for i in range(MAX_FAR_SESSIONS + 1)])
    with pytest.raises(RemoteWireError, match="a far session's id must be a session name"):
        parse_sessions([{"id": "box:web", **INFO}])
    session = parse("web", INFO)
    assert parse_sessions(json.loads(json.dumps([session.to_json()]))) == (session,)


def test_an_honest_far_side_cuts_what_it_says_to_the_bounds() -> None:
    many = [
        {**REQUEST, "id": f"web:{i:08x}", "state": "ended", "created": 1e9 + i} for i in range(40)
    ]
    pending = {**REQUEST, "id": "web:ffffffff", "created": 1.0}
    described = far_session(
        "web", "/" + "w" * 5000, 1.7e9,
        {"command": ["sh", "-c", "x" * 2000], "network": "allow"}, [*many, pending],
    )  # fmt: skip
    assert parse("web", json.loads(json.dumps(described.to_json()))) == described
    assert len(described.workdir) == MAX_WORKDIR_CHARS and described.workdir.endswith("…")
    assert described.command is not None and len(described.command) == MAX_COMMAND_CHARS
    assert len(described.requests) == MAX_FAR_REQUESTS
    # The one the owner can answer comes first, then the newest.
    assert [r.id for r in described.requests[:2]] == ["web:ffffffff", "web:00000027"]


def test_a_session_without_answers_is_described_by_its_registry_facts() -> None:
    described = far_session("web", "/w", 5.0, None, [])
    assert (described.command, described.network, described.requests) == (None, None, ())


def _linked() -> tuple[LinkState, LinkState]:
    laptop, far = LinkState(Role.LAPTOP), LinkState(Role.FAR)
    far.receive(laptop.send_hello())
    laptop.receive(far.send_hello())
    return laptop, far


def test_apps_carry_the_described_sessions_with_or_without_apps() -> None:
    laptop, far = _linked()
    app = FarApp("web", 5173, "/")
    web, idle = parse("web", INFO), parse("idle", _with(requests=[]))
    assert received(laptop, far.send_apps((app,), (web, idle))) == [Apps((app,), (web, idle))]


def test_an_older_laptop_reads_the_same_apps_from_a_describing_far_side() -> None:
    _laptop, far = _linked()
    payload = json.loads(far.send_apps((FarApp("web", 5173, "/"),), (parse("web", INFO),))[9:])
    [entry] = payload["sessions"]
    assert entry["apps"] == [{"port": 5173, "base_path": "/"}] and "info" in entry


def _apps_frame(sessions: list[dict[str, Any]]) -> bytes:
    payload = json.dumps({"sessions": sessions}).encode()
    return HEADER.pack(len(payload), Kind.APPS, 0) + payload


def test_a_far_side_describing_a_session_twice_or_too_many_breaks_the_link() -> None:
    laptop, _far = _linked()
    twice = [{"id": "web", "apps": [], "info": INFO}] * 2
    with pytest.raises(RemoteWireError, match="describes 'web' twice or over 64"):
        received(laptop, _apps_frame(twice))
    laptop, _far = _linked()
    idle = _with(requests=[])
    crowd = [{"id": f"s{i}", "apps": [], "info": idle} for i in range(MAX_FAR_SESSIONS + 1)]
    with pytest.raises(RemoteWireError, match="over 64"):
        received(laptop, _apps_frame(crowd))


def test_a_hostile_description_in_apps_breaks_the_link_naming_it() -> None:
    laptop, _far = _linked()
    bad = [{"id": "web", "apps": [], "info": _request(id="other:0123abcd")}]
    with pytest.raises(RemoteWireError, match="a request id must be web:XXXXXXXX"):
        received(laptop, _apps_frame(bad))

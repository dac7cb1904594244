"""The host half of egress requests on a real Unix socket: a real gate in a thread, the
sandbox's request lines from plain blocking sockets, the owner's ops called on the
gate's own loop (the control socket that carries them is proven end to end in
test_requests_in_sandbox.py)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbridge.egress.gate import Address, EgressGate
from sandbridge.egress.log import EgressLog
from sandbridge.egress.request_server import MAX_WAITING, append_line
from sandbridge.egress.requests import RequestTable
from sandbridge.exceptions import ControlRefusal
from sandbridge.project.policy import ALLOW_FILE, MAX_POLICY_FILE_BYTES, load_policy
from sandbridge.protocol.contract import PROXY_PORT
from sandbridge.protocol.egress_opening import encode_open, encode_request
from tests.conftest import PYTHON, REPO, swapping
from tests.support.loop_thread import LoopThread

ALLOW_TEXT = "# reviewed\npublic.test\nnarrow.test:443\nloop.test\n"


class TableResolver:
    """Answers the test's names, and keeps every name it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.loopback = {"app.test", "loop.test"}  # the names that resolve to 127.0.0.1
        self.held: dict[str, threading.Event] = {}

    async def resolve(self, name: str) -> list[Address]:
        self.asked.append(name)
        if name in self.held:  # answers once the test lets it
            await asyncio.to_thread(self.held[name].wait, 10)
        return [ipaddress.ip_address("127.0.0.1")] if name in self.loopback else []


class Host(LoopThread):
    """An egress gate with a project policy, served on its own loop in a thread."""

    def __init__(self, tmp_path: Path) -> None:
        self.project = tmp_path / "project"
        (self.project / ".sandbridge").mkdir(parents=True)
        (self.project / ALLOW_FILE).write_text(ALLOW_TEXT)
        self.path = tmp_path / "egress.sock"
        policy = load_policy(self.project)
        self.resolver = TableResolver()
        self.gate = EgressGate(
            self.path,
            policy,
            EgressLog(tmp_path / "egress.jsonl"),
            resolver=self.resolver,
            session="s-test",
        )
        super().__init__()

    async def start_servers(self) -> None:
        await self.gate.start()

    async def close_servers(self) -> None:
        await self.gate.close()

    def owner(self, op: str, **fields: object) -> dict[str, Any]:
        """Run one of the owner's control ops on the gate's loop."""
        handler = self.gate.requests.owner_ops()[op]

        async def call() -> dict[str, Any]:
            return await handler({"op": op, **fields})

        return self.on_loop(call())


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    running = Host(tmp_path)
    yield running
    running.stop()
    assert running.errors == []


class Asker:
    """The sandbox's side: one connection, the request line, answers read line by line."""

    def __init__(self, host: Host, line: bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(15)
        self.sock.connect(str(host.path))
        self.sock.sendall(line)
        self.file = self.sock.makefile("rb")

    def answer(self) -> dict[str, Any]:
        line = self.file.readline()
        assert line, "the host closed without an answer"
        value: dict[str, Any] = json.loads(line)
        return value

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def ask(host: Host, destination: object, reason: object = "why", wait: bool = False) -> Asker:
    line = json.dumps(
        {"type": "egress_request", "destination": destination, "reason": reason, "wait": wait}
    ).encode()
    return Asker(host, line + b"\n")


def ask_once(host: Host, destination: str, reason: str = "why") -> dict[str, Any]:
    asker = ask(host, destination, reason)
    try:
        return asker.answer()
    finally:
        asker.close()


def connect_through_proxy(host: Host, target: str) -> bytes:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(15)
        sock.connect(str(host.path))
        sock.sendall(encode_open(PROXY_PORT) + f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data.partition(b"\n")[2]:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.partition(b"\n")[2].split(b"\r\n")[0]


# --- the sandbox's side ------------------------------------------------------------------


def test_a_request_is_answered_with_its_id_and_listed_for_the_owner(
    host: Host, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = ask_once(host, "other.test:80", "read the docs")
    assert answer["ok"] is True and answer["state"] == "pending"
    assert answer["id"].startswith("s-test:")
    [row] = host.owner("egress_pending")["requests"]
    assert (row["id"], row["destination"], row["reason"]) == (
        answer["id"],
        "other.test:80",
        "read the docs",
    )
    printed = capsys.readouterr().err
    assert (
        f"sandbridge: the sandbox asks for other.test:80: egress request {answer['id']}, "
        f'reason: "read the docs"; approve: sandbridge egress approve {answer["id"]} '
        f"[--once|--session] [--save]; deny: sandbridge egress deny {answer['id']}"
    ) in printed


def test_a_waiting_asker_gets_the_owners_approval(host: Host) -> None:
    asker = ask(host, "other.test:80", wait=True)
    try:
        request_id = asker.answer()["id"]
        host.owner("egress_approve", id=request_id, scope="session")
        assert asker.answer() == {
            "ok": True,
            "id": request_id,
            "state": "approved",
            "destination": "other.test:80",
            "scope": "session",
        }
    finally:
        asker.close()


def test_a_waiting_asker_gets_the_owners_denial(host: Host) -> None:
    asker = ask(host, "other.test:80", wait=True)
    try:
        request_id = asker.answer()["id"]
        host.owner("egress_deny", id=request_id)
        outcome = asker.answer()
    finally:
        asker.close()
    assert outcome["ok"] is False and outcome["code"] == "denied"
    assert outcome["error"] == f"the owner denied egress request {request_id} (other.test:80)"


def test_an_asker_that_hangs_up_leaves_the_request_pending(host: Host) -> None:
    asker = ask(host, "other.test:80", wait=True)
    request_id = asker.answer()["id"]
    asker.close()
    assert [r["id"] for r in host.owner("egress_pending")["requests"]] == [request_id]
    assert host.owner("egress_approve", id=request_id, scope="once")["state"] == "approved"


def test_a_duplicate_folds_into_the_pending_request(host: Host) -> None:
    first = ask_once(host, "other.test:80")
    second = ask_once(host, "OTHER.test.:80", "again")
    assert first["id"] == second["id"]
    [row] = host.owner("egress_pending")["requests"]
    assert row["asked"] == 2 and row["reason"] == "why"


def test_an_allowed_destination_is_answered_without_a_request(host: Host) -> None:
    answer = ask_once(host, "public.test")
    assert answer == {
        "ok": True,
        "id": None,
        "state": "allowed",
        "detail": "already allowed by 'public.test' (.sandbridge/allow:2)",
    }
    assert host.owner("egress_pending")["requests"] == []


def test_a_destination_allowed_on_one_of_its_ports_only_is_asked_for(host: Host) -> None:
    # Without a port a request means 80, 443 and 8443; an entry for :443 alone allows
    # one of them, so "already allowed" (exit 0, the owner never asked) was untrue.
    assert ask_once(host, "narrow.test:443")["state"] == "allowed"
    answer = ask_once(host, "narrow.test")
    assert answer["state"] == "pending"
    [row] = host.owner("egress_pending")["requests"]
    assert row["destination"] == "narrow.test"


@pytest.mark.parametrize(
    ("line", "code", "error"),
    [
        (
            {"destination": 80, "reason": "x"},
            "bad_destination",
            "destination must be HOST[:PORT], got '80'",
        ),
        ({"destination": "a.test"}, "bad_reason", "reason must be a string, got NoneType"),
        (
            {"destination": "a.test", "reason": "x" * 501},
            "bad_reason",
            "reason is 501 characters; the limit is 500",
        ),
        (
            {"destination": "gate:5432", "reason": "x"},
            "host_service",
            "'gate:5432' is a host service",
        ),
        (
            {"destination": "a.test/x", "reason": "x"},
            "bad_destination",
            "'a.test/x' is not a domain name",
        ),
    ],
)
def test_a_bad_request_gets_a_json_refusal_naming_the_value(
    host: Host, line: dict[str, object], code: str, error: str
) -> None:
    asker = Asker(host, json.dumps({"type": "egress_request", **line}).encode() + b"\n")
    try:
        answer = asker.answer()
    finally:
        asker.close()
    assert answer["ok"] is False and answer["code"] == code
    assert error in answer["error"]


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b'{"type":"egress_request","destination":"a.test","wait":"yes"}\n', "wait must be"),
        (b'{"type":"egress_request","reason":' + b"[" * 100 + b"]" * 100 + b"}\n", "nested deeper"),
        (b'{"type":"egress_request","reason":"' + b"x" * 9000 + b'"}\n', "longer than 8192"),
    ],
)
def test_a_malformed_request_line_is_refused(host: Host, line: bytes, error: str) -> None:
    asker = Asker(host, line)
    try:
        answer = asker.answer()
    finally:
        asker.close()
    assert answer["ok"] is False and error in answer["error"]


def test_a_flood_hits_the_cap_and_the_proxy_keeps_working(
    host: Host, app_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    host.gate.requests.table = RequestTable(max_per_window=1000)
    answers = [ask_once(host, f"n{n}.test") for n in range(25)]
    printed = capsys.readouterr().err.splitlines()
    assert len([line for line in printed if "the sandbox asks for n" in line]) == 20
    assert [line for line in printed if "being refused" in line] == [
        "sandbridge: egress requests from the sandbox are being refused: 20 requests "
        "already wait for the owner; the limit is 20"
    ]
    assert [a["ok"] for a in answers] == [True] * 20 + [False] * 5
    assert answers[-1]["code"] == "too_many"
    assert "20 requests already wait for the owner" in answers[-1]["error"]
    host.owner("egress_approve", id=answers[0]["id"], scope="session")
    host.owner("egress_deny", id=answers[1]["id"])
    assert ask_once(host, "late.test")["ok"] is True
    grant = ask_once(host, f"127.0.0.1:{app_port}")
    host.owner("egress_approve", id=grant["id"], scope="session")
    assert connect_through_proxy(host, f"127.0.0.1:{app_port}").startswith(b"HTTP/1.1 200")


# --- the owner's answers -----------------------------------------------------------------


def test_a_once_grant_makes_exactly_one_connection(host: Host, app_port: int) -> None:
    target = f"127.0.0.1:{app_port}"
    assert connect_through_proxy(host, target).startswith(b"HTTP/1.1 403")
    host.owner("egress_approve", id=ask_once(host, target)["id"], scope="once")
    assert connect_through_proxy(host, target).startswith(b"HTTP/1.1 200")
    assert connect_through_proxy(host, target).startswith(b"HTTP/1.1 403")


def test_a_once_grant_that_connects_nowhere_is_kept(host: Host, app_port: int) -> None:
    """nowhere.test resolves to nothing: no connection is made, so the grant stays."""
    target = f"nowhere.test:{app_port}"
    host.owner("egress_approve", id=ask_once(host, target)["id"], scope="once")
    for _ in range(2):
        status = connect_through_proxy(host, target)
        assert status.startswith(b"HTTP/1.1 403") and b"does not resolve" in status
    assert ask_once(host, target)["state"] == "allowed"


def test_a_name_the_sandbox_makes_up_reaches_no_dns_before_the_owner_approves(
    host: Host,
) -> None:
    # Resolving it at the request would be a way out for data spelled into the name.
    answer = ask_once(host, "c2VjcmV0.exfil.test:443")
    assert answer["state"] == "pending"
    assert host.resolver.asked == []
    host.owner("egress_deny", id=answer["id"])
    assert host.resolver.asked == []


def test_a_name_of_non_global_addresses_only_is_granted_only_as_private(
    host: Host, app_port: int
) -> None:
    # app.test resolves to 127.0.0.1 only (as a company mirror's name resolves to its
    # private address): a grant without `private` would be refused at every connection,
    # so it is not reported as granted; with --private it is, and it takes effect.
    target = f"app.test:{app_port}"
    answer = ask_once(host, target)
    with pytest.raises(ControlRefusal) as refused:
        host.owner("egress_approve", id=answer["id"], scope="session")
    assert refused.value.code == "needs_private"
    assert str(refused.value) == (
        "app.test resolves to 127.0.0.1 (loopback) and no global address; a grant of "
        f"{target} would be refused at every connection: approve it as private "
        f"(sandbridge egress approve {answer['id']} --private, or the dashboard's \"as "
        'private" buttons), which lets the proxy connect '
        "the name to whatever address its DNS gives, this host's loopback included, or deny it"
    )
    assert [r["id"] for r in host.owner("egress_pending")["requests"]] == [answer["id"]]
    assert connect_through_proxy(host, target).startswith(b"HTTP/1.1 403")
    approved = host.owner(
        "egress_approve", id=answer["id"], scope="session", save=True, private=True
    )
    assert approved["destination"] == f"{target} private"
    assert connect_through_proxy(host, target).startswith(b"HTTP/1.1 200")
    saved = (host.project / ALLOW_FILE).read_text()[len(ALLOW_TEXT) :]
    assert saved.startswith(f"{target} private  # ")


def test_a_listed_name_on_another_port_is_asked_for_as_private_saying_why(
    host: Host, capsys: pytest.CaptureFixture[str]
) -> None:
    # loop.test is an entry (ports 80, 443, 8443): the proxy resolves it anyway, so the
    # request can be decided on its addresses, and it says private from the start.
    answer = ask_once(host, "loop.test:5000")
    [row] = host.owner("egress_pending")["requests"]
    assert row["destination"] == "loop.test:5000 private"
    assert row["caution"].startswith(
        "loop.test resolves to 127.0.0.1 (loopback) and no global address: approving grants "
        "it with 'private'"
    )
    assert "the sandbox asks for loop.test:5000 private (WARNING: loop.test resolves" in (
        capsys.readouterr().err
    )
    approved = host.owner("egress_approve", id=answer["id"], scope="once")
    assert approved["destination"] == "loop.test:5000 private"


@pytest.mark.parametrize("destination", ["loop.test:443", "loop.test"])
def test_a_name_its_entry_cannot_reach_is_refused_up_front_naming_the_line_to_edit(
    host: Host, destination: str
) -> None:
    # `loop.test` (line 4) decides first for it: a grant after it would never be reached,
    # so "already allowed" or an approval would both be untrue.
    answer = ask_once(host, destination)
    assert answer["ok"] is False and answer["code"] == "needs_private"
    assert "loop.test resolves to 127.0.0.1 (loopback)" in answer["error"]
    assert answer["error"].endswith(
        "no approval can change that while 'loop.test' (.sandbridge/allow:4) decides first: "
        "ask the owner to edit .sandbridge/allow:4 to read 'loop.test private' (the next "
        "session reads it)"
    )
    assert host.owner("egress_pending")["requests"] == []


@pytest.mark.parametrize(
    ("op", "fields", "code", "error"),
    [
        ("egress_approve", {"id": "s-test:00000000"}, "unknown_request", "no egress request"),
        ("egress_deny", {"id": None}, "unknown_request", "no egress request 'None'"),
        ("egress_approve", {"scope": "forever"}, "malformed", "scope must be once or session"),
    ],
)
def test_a_bad_answer_is_refused(
    host: Host, op: str, fields: dict[str, object], code: str, error: str
) -> None:
    if "scope" in fields:
        fields = {**fields, "id": ask_once(host, "other.test")["id"]}
    with pytest.raises(ControlRefusal) as caught:
        host.owner(op, **fields)
    assert caught.value.code == code and error in str(caught.value)


def test_a_request_is_answered_once(host: Host) -> None:
    request_id = ask_once(host, "other.test")["id"]
    host.owner("egress_deny", id=request_id)
    with pytest.raises(ControlRefusal, match="is denied"):
        host.owner("egress_approve", id=request_id, scope="once")


def test_save_appends_one_commented_line(host: Host) -> None:
    request_id = ask_once(host, "other.test:80", "docs\x1b[2J\nplease")["id"]
    answer = host.owner("egress_approve", id=request_id, scope="session", save=True)
    allow = host.project / ALLOW_FILE
    assert answer["saved"] == str(allow)
    text = allow.read_text()
    assert text.startswith(ALLOW_TEXT)
    [added] = text[len(ALLOW_TEXT) :].splitlines()
    assert added.startswith("other.test:80  # ")
    assert added.endswith(", asked from the sandbox: docs [2J please")


def test_without_save_no_file_changes(host: Host) -> None:
    request_id = ask_once(host, "other.test:80")["id"]
    host.owner("egress_approve", id=request_id, scope="session")
    assert (host.project / ALLOW_FILE).read_text() == ALLOW_TEXT


def test_a_failed_save_leaves_the_request_pending(host: Host) -> None:
    allow = host.project / ALLOW_FILE
    allow.unlink()
    os.symlink(host.project / "elsewhere", allow)
    request_id = ask_once(host, "other.test:80")["id"]
    with pytest.raises(ControlRefusal, match="cannot write") as caught:
        host.owner("egress_approve", id=request_id, scope="once", save=True)
    assert caught.value.code == "save_failed"
    assert not (host.project / "elsewhere").exists()
    assert [r["id"] for r in host.owner("egress_pending")["requests"]] == [request_id]


# --- appending to the allow file ---------------------------------------------------------


def test_a_line_goes_on_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / ".sandbridge" / "allow"
    path.parent.mkdir()
    path.write_text("public.test")
    append_line(path, "other.test:80  # why\n")
    assert path.read_text() == "public.test\nother.test:80  # why\n"


def test_a_missing_allow_file_is_created(tmp_path: Path) -> None:
    path = tmp_path / ".sandbridge" / "allow"
    append_line(path, "other.test:80  # why\n")
    assert path.read_text() == "other.test:80  # why\n"


def test_the_policy_file_limit_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "allow"
    path.write_text("#" * (MAX_POLICY_FILE_BYTES - 10) + "\n")
    with pytest.raises(OSError, match="would pass"):
        append_line(path, "other.test:80  # why\n")
    assert path.stat().st_size == MAX_POLICY_FILE_BYTES - 9


def test_a_folder_swapped_for_a_link_meanwhile_never_takes_the_line(tmp_path: Path) -> None:
    # The folder was checked for a link, then the file opened by its whole path: a
    # sandbox swapping `.sandbridge` for a link to another project's in a loop had the
    # owner's saved line appended there (here within a few hundred saves).
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / ".sandbridge").mkdir(parents=True)
    elsewhere.mkdir()
    (project / "link").symlink_to(elsewhere)
    with swapping(project / ".sandbridge", project / "link"):
        for _ in range(3000):
            with contextlib.suppress(OSError):  # ELOOP, ENOTDIR, ENOENT: refused, fine
                append_line(project / ".sandbridge" / "allow", "other.test:80  # why\n")
            assert not (elsewhere / "allow").exists(), "the line went through the link"


def test_an_encoded_request_reads_as_the_helper_sent_it() -> None:
    line = encode_request("other.test:80", "why \u202e", True)
    assert json.loads(line) == {
        "type": "egress_request",
        "destination": "other.test:80",
        "reason": "why \u202e",
        "wait": True,
    }
    assert line.endswith(b"\n") and line.isascii()


def test_waiting_askers_are_capped_and_the_rest_still_served(host: Host, app_port: int) -> None:
    askers = [ask(host, "other.test:80", wait=True) for _ in range(MAX_WAITING)]
    try:
        ids = {asker.answer()["id"] for asker in askers}
        assert len(ids) == 1  # folded into one request
        late = ask(host, "other.test:80", wait=True)
        assert late.answer()["state"] == "pending"
        refusal = late.answer()
        late.close()
        assert refusal["code"] == "too_many_waiting"
        assert f"{MAX_WAITING} askers already wait for the owner" in refusal["error"]
        # The gate's other connections are untouched by the waiting ones.
        assert connect_through_proxy(host, f"127.0.0.1:{app_port}").startswith(b"HTTP/1.1 403")
        host.owner("egress_approve", id=ids.pop(), scope="session")
        assert all(asker.answer()["state"] == "approved" for asker in askers)
    finally:
        for asker in askers:
            asker.close()
    again = ask(host, "another.test", wait=True)
    try:
        request_id = again.answer()["id"]
        host.owner("egress_deny", id=request_id)
        assert again.answer()["state"] == "denied"
    finally:
        again.close()


def test_the_owner_is_warned_of_an_address_of_this_host(
    host: Host, capsys: pytest.CaptureFixture[str]
) -> None:
    ask_once(host, "127.0.0.1:22", "ssh please")
    [row] = host.owner("egress_pending")["requests"]
    assert row["caution"] == (
        "127.0.0.1 is a loopback address: approving lets the proxy connect to it"
    )
    assert (
        "sandbridge: the sandbox asks for 127.0.0.1:22 (WARNING: 127.0.0.1 is a loopback "
        "address: approving lets the proxy connect to it): egress request "
    ) in capsys.readouterr().err


# Run in a network namespace of its own in which this host has a public address (as a
# server with a public IP does): the sandbox asks for it, the owner must be told.
PUBLIC_OF_THIS_HOST = "9.9.9.9"
IN_NAMESPACE = f"""
import json, pathlib, sys, tempfile
from tests.egress.test_request_server import Host, ask_once
with tempfile.TemporaryDirectory() as tmp:
    host = Host(pathlib.Path(tmp))
    try:
        ask_once(host, "{PUBLIC_OF_THIS_HOST}:6379", "a redis for the tests")
        ask_once(host, "[2002:909:909::1]:6379", "the same, through 6to4")
        print(json.dumps([r["caution"] for r in host.owner("egress_pending")["requests"]]))
    finally:
        host.stop()
"""


def test_the_owner_is_warned_of_a_public_address_of_this_host() -> None:
    # A public address of the host reaches what listens on all of its addresses (a
    # database on 0.0.0.0), past the host-service gate: it is no internet host.
    setup = f"ip link set lo up && ip addr add {PUBLIC_OF_THIS_HOST}/32 dev lo"
    result = subprocess.run(
        ["unshare", "-rn", "sh", "-c", f'{setup} && exec "$0" -c "$1"', PYTHON, IN_NAMESPACE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        f"{PUBLIC_OF_THIS_HOST} is an address of this host: approving lets the proxy connect to it",
        "2002:909:909::1 is an address of this host via 6to4: approving lets the proxy "
        "connect to it",
    ]
    assert (
        f"the sandbox asks for {PUBLIC_OF_THIS_HOST}:6379 (WARNING: {PUBLIC_OF_THIS_HOST} "
        "is an address of this host"
    ) in result.stderr


def test_the_session_ends_with_an_asker_still_waiting(host: Host) -> None:
    asker = ask(host, "other.test:80", wait=True)
    try:
        assert asker.answer()["state"] == "pending"
        host.stop()
        assert not host.running
        assert asker.file.read() == b""  # the end: no decision was made
    finally:
        asker.close()
    assert host.errors == []


def test_an_allow_path_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "allow"
    os.mkfifo(path)
    with pytest.raises(OSError, match="not a regular file"):
        append_line(path, "other.test:80  # why\n")


def test_the_dashboard_is_told_of_a_new_request_and_of_its_decision_not_of_a_duplicate(
    host: Host,
) -> None:
    told: list[str] = []
    host.gate.requests.on_change = lambda: told.append("change")
    request_id = ask_once(host, "other.test:80")["id"]
    assert told == ["change"]
    assert ask_once(host, "other.test:80")["id"] == request_id  # folded: nothing new
    assert told == ["change"]
    host.owner("egress_deny", id=request_id)
    assert told == ["change", "change"]


def test_a_grant_an_earlier_entry_would_decide_against_is_refused_naming_it(host: Host) -> None:
    # narrow.test:443 (line 3) is an entry; narrow.test resolved to nothing when the sandbox
    # asked for all its ports, so the request went pending for 80 and 8443. It now
    # resolves to loopback: a grant after line 3 would be reported as granted while the
    # proxy still refused port 443, so the approval is refused, naming the line.
    request_id = ask_once(host, "narrow.test")["id"]
    host.resolver.loopback.add("narrow.test")
    with pytest.raises(ControlRefusal) as refused:
        host.owner("egress_approve", id=request_id, scope="session")
    assert refused.value.code == "needs_private"  # approve it as private, it says
    with pytest.raises(ControlRefusal) as refused:
        host.owner("egress_approve", id=request_id, scope="session", private=True)
    assert refused.value.code == "shadowed"  # and that would not be reached either
    assert "'narrow.test:443' (.sandbridge/allow:3) decides first" in str(refused.value)
    # The refused "as private" left the request as it was asked: never private unasked.
    [row] = host.owner("egress_pending")["requests"]
    assert row["destination"] == "narrow.test"
    assert [r["id"] for r in host.owner("egress_pending")["requests"]] == [request_id]


def test_a_request_denied_while_its_approval_resolves_is_neither_granted_nor_saved(
    host: Host,
) -> None:
    request_id = ask_once(host, "slow.test:443")["id"]
    host.resolver.held["slow.test"] = threading.Event()
    handler = host.gate.requests.owner_ops()["egress_approve"]
    message = {"op": "egress_approve", "id": request_id, "scope": "session", "save": True}

    async def approve() -> dict[str, Any]:
        return await handler(message)

    approving = asyncio.run_coroutine_threadsafe(approve(), host.loop)
    deadline = time.monotonic() + 10
    while "slow.test" not in host.resolver.asked:  # the approval is resolving the name
        assert time.monotonic() < deadline
        time.sleep(0.01)
    host.owner("egress_deny", id=request_id)
    host.resolver.held["slow.test"].set()
    with pytest.raises(ControlRefusal) as refused:
        approving.result(10)
    assert refused.value.code == "not_pending"
    assert "slow.test" not in (host.project / ALLOW_FILE).read_text()

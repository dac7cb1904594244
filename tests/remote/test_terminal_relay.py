"""Owner-approved terminals over the remote link, end to end: a far session (``sandbridge
host`` and a ``shim --terminals`` "container") with its own XDG dirs, the laptop's
``sandbridge connect --via`` to its ``serve-stdio``, the laptop's own owner key, the real
CLI and a real PTY. Admission, the journal, leases and the audit run on the far side."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pexpect
import pytest

from sandbridge.exceptions import ControlError
from sandbridge.remote.terminal_relay import parse_first_line
from sandbridge.terminals import approval, control, keys
from sandbridge.terminals.control import Place
from sandbridge.terminals.keys import create_key, public_hex
from tests.conftest import PYTHON, REPO, SANDBRIDGE, processes_with
from tests.remote.test_connect import (
    Laptop,
    _fds,
    _listening_ports,
    _serve_stdio_pids,
    _wait_until,
)
from tests.support.command_in_process import sandbridge
from tests.terminals.harness import PROMPT, WORKER_MARKER, attach_child, finish, with_end
from tests.terminals.test_external_terminal_e2e import CONTAINER_HOSTNAME, ExternalSession


@pytest.mark.parametrize(
    ("line", "refusal"),
    [
        (b'{"session":"../x"}', "session '../x' is not a session name"),
        (b'{"session":"Web"}', "session 'Web' is not a session name"),
        (b'{"session":7}', "session 7 is not a session name"),
        (b'{"machine":"far"}', "session None is not a session name"),
        (b'"box"', "the first line must be"),
        (b"box", "the first line must be"),
    ],
)
def test_the_first_line_must_name_a_session(line: bytes, refusal: str) -> None:
    with pytest.raises(ValueError, match=re.escape(refusal)):
        parse_first_line(line)


def test_parse_first_line_names_the_session() -> None:
    assert parse_first_line(b'{"session":"s-1a2b3c"}') == "s-1a2b3c"


HOSTILE_FAR = REPO / "tests" / "apps" / "hostile_far.py"

# Typed in the far terminal and printed by it: must never cross the link in the clear.
SECRET = "PLAINTEXT-MARKER"


class FarMachine:
    """The far machine: its XDG dirs (this process's, as the tests' far user) and a
    terminal-serving session named ``box``."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dirs = {}
        for name in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
            path = tmp_path / f"far-{name.lower()}"
            path.mkdir(mode=0o700)
            monkeypatch.setenv(name, str(path))
            self.dirs[name] = str(path)
        self.session = ExternalSession(tmp_path)

    @property
    def serve_stdio(self) -> str:
        # The far user's dirs, not the laptop's it would inherit: serve-stdio reads the
        # far owner key and owners file to check a deny or revoke.
        return shlex.join(
            ["env", *(f"{name}={path}" for name, path in self.dirs.items()), PYTHON, "-m",
             "sandbridge.cli", "serve-stdio"]
        )  # fmt: skip

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The far user's command, in this process (tests/support/command_in_process.py)."""
        return sandbridge(*args)

    def audit(self, request: str) -> list[dict[str, object]]:
        records = json.loads(self.cli("terminal", "audit", "--json").stdout)
        return [r for r in records if r.get("request") == request]

    def audit_after_end(self, request: str) -> list[dict[str, object]]:
        """The request's records once its terminal's end is among them: the far side
        writes it once the terminal is over, when its client may have seen it end."""
        return with_end(lambda: self.audit(request))

    def stop(self) -> None:
        self.session.stop()


class LaptopUser:
    """The laptop's own XDG dirs (its owner key among them) and its ``connect``."""

    def __init__(self, tmp_path: Path, via: str, name: str = "laptop") -> None:
        self.env = dict(os.environ)
        for variable in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
            path = tmp_path / f"{name}-{variable.lower()}"
            path.mkdir(mode=0o700)
            self.env[variable] = str(path)
        self.connect = _connect(self.env, via)
        self.connect.process.wait_line("sandbridge: far: connected", "stderr")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The laptop user's command, in this process (tests/support/command_in_process.py)."""
        return sandbridge(*args, env=self.env)

    def owner_public_key(self) -> str:
        return self.cli("terminal", "key").stdout.strip()

    def stop(self) -> None:
        self.connect.stop()


def _connect(env: dict[str, str], via: str) -> Laptop:
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        laptop = Laptop(Path(env["XDG_RUNTIME_DIR"]), via)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return laptop


@pytest.fixture
def far(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FarMachine]:
    machine = FarMachine(tmp_path, monkeypatch)
    try:
        yield machine
    finally:
        machine.stop()


@pytest.fixture(scope="module")
def module_far(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FarMachine]:
    """One far machine for the module's tests that neither look for its terminal workers
    nor need it fresh: each uses a laptop key of its own, so its own requests, approvals
    and audit records (the owners and requesters files gain or get its keys)."""
    with pytest.MonkeyPatch.context() as patch:
        machine = FarMachine(tmp_path_factory.mktemp("far"), patch)
    try:
        yield machine
    finally:
        machine.stop()


@pytest.fixture
def shared_far(module_far: FarMachine, monkeypatch: pytest.MonkeyPatch) -> FarMachine:
    """That far machine, its XDG dirs this test's process's (the far user's commands)."""
    for name, path in module_far.dirs.items():
        monkeypatch.setenv(name, path)
    return module_far


@contextlib.contextmanager
def laptop_of(tmp_path: Path, via: str, name: str = "laptop") -> Iterator[LaptopUser]:
    user = LaptopUser(tmp_path, via, name)
    try:
        yield user
    finally:
        user.stop()


def _approved(laptop: LaptopUser) -> str:
    requested = laptop.cli("terminal", "request", "far:box", "--no-wait", "--reason", "remote")
    assert requested.returncode == 0, requested.stderr
    request_id = requested.stdout.strip()
    assert request_id.startswith("far:box:")
    approved = laptop.cli("terminal", "approve", request_id, "--duration", "60")
    assert approved.returncode == 0, approved.stderr
    return request_id


def test_an_approval_signed_on_the_laptop_opens_a_far_terminal_and_no_plaintext_crosses(
    shared_far: FarMachine, tmp_path: Path
) -> None:
    far = shared_far
    link_in, link_out = tmp_path / "link-in", tmp_path / "link-out"
    # The link's bytes both ways, as they cross: the --via command copies them aside.
    via = shlex.join(
        ["sh", "-c", f"tee {link_in} | {far.serve_stdio} | tee {link_out}"]
    )  # fmt: skip
    with laptop_of(tmp_path, via) as laptop:
        key = laptop.owner_public_key()
        trusted = far.cli("terminal", "trust-owner", key, "--name", "laptop")
        assert trusted.returncode == 0, trusted.stderr
        request_id = _approved(laptop)
        listing = laptop.cli("terminal", "list", "far:box").stdout
        assert f"{request_id}  approved" in listing
        child = attach_child(laptop.env, request_id)
        child.expect(PROMPT)
        child.sendline(f"echo {SECRET}-$((6*7))-$(hostname)")
        child.expect(f"{SECRET}-42-{CONTAINER_HOSTNAME}")
        child.sendline("exit 7")
        status, output = finish(child)
        assert status == 7, output
        crossed = link_in.read_bytes() + link_out.read_bytes()
        assert crossed, "the link carried the conversation"
        assert SECRET.encode() not in crossed
        far_id = request_id.removeprefix("far:")
        events = {r["event"]: r for r in far.audit_after_end(far_id)}
        assert events["approval"]["owner"] == key, "the far audit names the laptop's key"
        assert events["admission"]["request"] == far_id
        assert events["end"]["end"] == "exit"


def test_an_approval_by_a_key_the_far_machine_does_not_trust_opens_nothing(
    far: FarMachine, tmp_path: Path
) -> None:
    with laptop_of(tmp_path, far.serve_stdio) as laptop:
        # The far machine lists the laptop's key as a requester, not as an owner: it may
        # ask for a terminal, and its own approval of it counts for nothing.
        requesters = Path(far.dirs["XDG_CONFIG_HOME"]) / "sandbridge" / "requesters"
        requesters.parent.mkdir(mode=0o700, exist_ok=True)
        requesters.write_text(f"{laptop.owner_public_key()}  # laptop, not an owner\n")
        requested = laptop.cli("terminal", "request", "far:box", "--no-wait")
        assert requested.returncode == 0, requested.stderr
        request_id = requested.stdout.strip()
        approved = laptop.cli("terminal", "approve", request_id, "--duration", "60")
        assert approved.returncode == 2
        assert "the approval's signature does not verify" in approved.stderr
        attached = laptop.cli("terminal", "attach", request_id)
        assert attached.returncode == 2
        assert "the request is pending" in attached.stderr  # not_approved
        events = [r["event"] for r in far.audit(request_id.removeprefix("far:"))]
        assert "approval" not in events and "admission" not in events
        assert not far.session.in_container(WORKER_MARKER)


def test_ops_other_than_terminals_are_refused_over_the_link(
    shared_far: FarMachine, tmp_path: Path
) -> None:
    far = shared_far
    with laptop_of(tmp_path, far.serve_stdio) as laptop:
        allowed = laptop.cli("terminal", "allow", "far:box", "0" * 64)
        assert allowed.returncode != 0  # the CLI's allow is local only
        # A client that speaks to connect's socket itself gets no further.
        for op in ("stop", "allow", "egress_approve", "app_close"):
            with _as(laptop), pytest.raises(ControlError) as refused:
                control.call(Place("far", "box"), {"op": op, "key": "0" * 64})
            assert refused.value.code == "not_over_the_link", refused.value
            assert f"op {op!r} is not served over the remote link" in str(refused.value)
        assert far.session.host.popen.poll() is None, "the far session still runs"


def test_killing_the_link_mid_terminal_ends_it_and_the_far_audit_says_why(
    far: FarMachine, tmp_path: Path
) -> None:
    with laptop_of(tmp_path, far.serve_stdio) as laptop:
        far.cli("terminal", "trust-owner", laptop.owner_public_key())
        pid = laptop.connect.process.popen.pid
        fds_before = _fds(pid)
        listening_before = _listening_ports(pid)
        request_id = _approved(laptop)
        child = attach_child(laptop.env, request_id)
        child.expect(PROMPT)
        child.sendline("sleep 1003")
        child.expect("sleep 1003\r\n")
        far.session.wait_for("sleep 1003")
        [serve] = _serve_stdio_pids(laptop.connect)
        os.kill(serve, signal.SIGKILL)
        status, output = finish(child)
        assert "terminal ended: relay_lost" in output
        assert status == 3
        # Within one lease (10 s at most): the far shell and its worker are gone.
        far.session.wait_for("sleep 1003", present=False, timeout=10)
        far.session.wait_for(WORKER_MARKER, present=False, timeout=10)
        far_id = request_id.removeprefix("far:")
        events = [(r["event"], r.get("end")) for r in far.audit_after_end(far_id)]
        # The link went, not the client: serve-stdio's connection closed whole.
        assert ("end", "link") in events, events
        laptop.connect.wait_after("sandbridge: far: link lost", "sandbridge: far: connected")
        assert _listening_ports(pid) == listening_before
        _wait_until(lambda: _fds(pid) <= fds_before)
        runtime = Path(laptop.env["XDG_RUNTIME_DIR"])
        assert [path.name for path in runtime.rglob("control.sock")] == ["control.sock"]
    # connect's own control socket goes with it.
    assert list(runtime.rglob("control.sock")) == []


def test_a_client_that_vanishes_on_the_laptop_is_audited_as_the_client_not_the_link(
    shared_far: FarMachine, tmp_path: Path
) -> None:
    far = shared_far
    with laptop_of(tmp_path, far.serve_stdio) as laptop:
        far.cli("terminal", "trust-owner", laptop.owner_public_key())
        request_id = _approved(laptop)
        child = attach_child(laptop.env, request_id)
        child.expect(PROMPT)
        child.sendline("sleep 1004")
        child.expect("sleep 1004\r\n")
        far.session.wait_for("sleep 1004")
        # Killed: no CLOSE message reaches the worker, only its connection's end.
        [client] = [p for p in processes_with(f"terminal attach {request_id}") if p != child.pid]
        os.kill(client, signal.SIGKILL)
        far.session.wait_for("sleep 1004", present=False, timeout=10)
        far_id = request_id.removeprefix("far:")
        [end] = [r for r in far.audit_after_end(far_id) if r["event"] == "end"]
        assert end["end"] == "client", end
        # The link stayed up: nothing to reconnect.
        assert "link lost" not in laptop.connect.process.drain()
        child.close()


def test_the_owner_opens_a_far_shell_in_one_step(shared_far: FarMachine, tmp_path: Path) -> None:
    far = shared_far
    with laptop_of(tmp_path, far.serve_stdio) as laptop:
        far.cli("terminal", "trust-owner", laptop.owner_public_key())
        child = pexpect.spawn(
            SANDBRIDGE[0], [*SANDBRIDGE[1:], "shell", "far:box", "--reason", "look"],
            env=laptop.env, timeout=30, encoding="utf-8", codec_errors="replace",
        )  # fmt: skip
        child.expect(r"open a terminal into session 'far:box'\?")
        child.expect(r"request   far:box:[0-9a-f]{8}")
        child.expect(r"Approve\? \[y/N\] ")
        child.sendline("y")
        child.expect(PROMPT)
        child.sendline("echo ONE-$((40+2))")
        child.expect("ONE-42")
        child.sendline("exit")
        child.expect("terminal ended: the shell exited with status 0")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0


def test_a_teammate_requests_through_its_own_connection_and_the_owner_approves_from_theirs(
    shared_far: FarMachine, tmp_path: Path
) -> None:
    far = shared_far
    with (
        laptop_of(tmp_path, far.serve_stdio) as owner,
        laptop_of(tmp_path, far.serve_stdio, name="teammate") as teammate,
    ):
        far.cli("terminal", "trust-owner", owner.owner_public_key(), "--name", "owner")
        # The teammate's own key, on its own machine; the far machine lists it.
        key = Path(teammate.env["XDG_CONFIG_HOME"]) / "teammate.key"
        public = public_hex(create_key(key))
        assert teammate.cli("terminal", "key", "--key", str(key)).stdout.strip() == public
        requesters = Path(far.dirs["XDG_CONFIG_HOME"]) / "sandbridge" / "requesters"
        requesters.write_text(f"{public}  # teammate\n")
        requested = teammate.cli(
            "terminal", "request", "far:box", "--no-wait", "--key", str(key), "--reason", "pair"
        )
        assert requested.returncode == 0, requested.stderr
        request_id = requested.stdout.strip()
        listing = json.loads(owner.cli("terminal", "list", "far:box", "--json").stdout)
        [row] = [row for row in listing if row["id"] == request_id]
        assert row["requester"] == public and row["state"] == "pending"
        approved = owner.cli("terminal", "approve", request_id, "--duration", "60")
        assert approved.returncode == 0, approved.stderr
        # The owner's own key cannot use the teammate's approval: proof of possession.
        stolen = owner.cli("terminal", "attach", request_id)
        assert stolen.returncode == 2 and "not signed by the approved key" in stolen.stderr
        child = attach_child(teammate.env, request_id, key)
        child.expect(PROMPT)
        child.sendline("echo PAIR-$((6*7))")
        child.expect("PAIR-42")
        child.sendline("exit")
        status, _ = finish(child)
        assert status == 0
        events = {r["event"]: r for r in far.audit(request_id.removeprefix("far:"))}
        assert events["request"]["requester"] == public
        assert events["approval"]["owner"] == owner.owner_public_key()


def test_taking_the_laptop_key_off_the_owners_file_ends_its_far_terminal_within_a_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBRIDGE_TERMINAL_LEASE", "2")
    monkeypatch.setenv("SANDBRIDGE_TERMINAL_REFRESH", "0.5")
    far = FarMachine(tmp_path, monkeypatch)
    try:
        with laptop_of(tmp_path, far.serve_stdio) as laptop:
            far.cli("terminal", "trust-owner", laptop.owner_public_key())
            request_id = _approved(laptop)
            child = attach_child(laptop.env, request_id)
            child.expect(PROMPT)
            child.sendline("sleep 1004")
            child.expect("sleep 1004\r\n")
            far.session.wait_for("sleep 1004")
            owners = Path(far.dirs["XDG_CONFIG_HOME"]) / "sandbridge" / "owners"
            owners.write_text("# the laptop was lost\n")
            status, output = finish(child)
            assert status == 3
            assert "terminal ended:" in output
            far.session.wait_for("sleep 1004", present=False, timeout=10)
            far_id = request_id.removeprefix("far:")
            ended = [r for r in far.audit_after_end(far_id) if r["event"] == "end"]
            assert ended and ended[0]["end"] in ("lease", "revoked"), ended
    finally:
        far.stop()


def test_a_far_session_or_machine_that_is_not_there_is_refused_naming_it(
    shared_far: FarMachine, tmp_path: Path
) -> None:
    far = shared_far
    with laptop_of(tmp_path, far.serve_stdio) as laptop:
        missing = laptop.cli("terminal", "list", "far:nosuch")
        assert missing.returncode == 2
        assert "far refused: no running session 'nosuch' of this user" in missing.stderr
        unknown = laptop.cli("terminal", "request", "elsewhere:box", "--no-wait")
        assert unknown.returncode == 2
        assert "no sandbridge connect serves a machine named 'elsewhere'" in unknown.stderr


def test_a_command_while_the_link_is_down_is_refused_saying_so(
    shared_far: FarMachine, tmp_path: Path
) -> None:
    far = shared_far
    switch = tmp_path / "far-is-up"
    switch.touch()
    # The --via command reaches serve-stdio only while the switch file exists.
    via = shlex.join(["sh", "-c", f"test -e {switch} && exec {far.serve_stdio}"])
    with laptop_of(tmp_path, via) as laptop:
        switch.unlink()
        [serve] = _serve_stdio_pids(laptop.connect)
        os.kill(serve, signal.SIGKILL)
        laptop.connect.process.wait_line("sandbridge: far: link lost", "stderr")
        down = laptop.cli("terminal", "list", "far:box")
        assert down.returncode == 2
        assert "the link to far is down: reconnecting" in down.stderr


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], LaptopUser]]:
    """The laptop's connect to a hostile far side (tests/apps/hostile_far.py) in the mode
    asked, one per mode for the module: that far side gives every control line of a mode
    the same answer, whatever was asked before, and the tests here only ask."""
    home = tmp_path_factory.mktemp("hostile")
    started: dict[str, LaptopUser] = {}

    def of(mode: str) -> LaptopUser:
        if mode not in started:
            via = shlex.join([PYTHON, str(HOSTILE_FAR), mode])
            started[mode] = LaptopUser(home, via, name=mode)
        return started[mode]

    try:
        yield of
    finally:
        for user in started.values():
            user.stop()


def test_a_far_side_lying_about_requests_is_refused_in_one_line(
    hostile: Callable[[str], LaptopUser],
) -> None:
    laptop = hostile("lies")
    listed = laptop.cli("terminal", "list", "far:evil")
    assert listed.returncode == 2
    assert "far:evil listed a request of another session: 'other:0123abcd'" in listed.stderr
    requested = laptop.cli("terminal", "request", "far:evil", "--no-wait")
    assert requested.returncode == 2
    assert "the session sent a malformed answer (KeyError" in requested.stderr
    assert "Traceback" not in requested.stderr


def test_a_far_listing_cannot_drive_the_owners_terminal(
    hostile: Callable[[str], LaptopUser],
) -> None:
    laptop = hostile("escape")
    listed = laptop.cli("terminal", "list", "far:evil")
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    assert "far:evil:0123abcd  pending?[2J  ?]0;pwned?aaaaaa...  -  look?[31m here" in (
        listed.stdout
    )


FAR_COMMANDS = [
    ("terminal", "list", "far:evil"),
    ("terminal", "approve", "far:evil:0123abcd"),
    ("terminal", "deny", "far:evil:0123abcd"),
    ("terminal", "revoke", "far:evil:0123abcd"),
    ("terminal", "attach", "far:evil:0123abcd"),
    ("terminal", "request", "far:evil", "--no-wait"),
]


@pytest.mark.parametrize("command", FAR_COMMANDS, ids=lambda words: words[1])
def test_a_far_refusal_cannot_drive_the_owners_terminal(
    hostile: Callable[[str], LaptopUser], command: tuple[str, ...]
) -> None:
    laptop = hostile("refuse")
    refused = laptop.cli(*command)
    assert refused.returncode == 2, refused.stderr
    assert "\x1b" not in refused.stderr + refused.stdout, refused.stderr
    assert "\x07" not in refused.stderr + refused.stdout
    assert "sandbridge: ?]52;c;ZWNobyBwd25lZA==?approved?[1A" in refused.stderr


def test_a_far_answer_to_a_waiting_request_cannot_drive_the_owners_terminal(
    hostile: Callable[[str], LaptopUser],
) -> None:
    laptop = hostile("stateful")
    requested = laptop.cli("terminal", "request", "far:evil")
    assert requested.returncode == 1, requested.stderr
    assert "\x1b" not in requested.stderr and "\x07" not in requested.stderr
    assert "request far:evil:0123abcd was ?]52;c;ZWNobyBwd25lZA==?ok" in requested.stderr


def test_a_far_shell_signs_nothing_for_a_request_the_owners_key_did_not_make(
    hostile: Callable[[str], LaptopUser],
) -> None:
    # The far side answers `show` with another key's request (a teammate's on another
    # machine with the same session name, say): the question said "(your owner key)" and
    # a `y` signed an approval for that key.
    laptop = hostile("impostor")
    child = pexpect.spawn(
        SANDBRIDGE[0], [*SANDBRIDGE[1:], "shell", "far:evil"],
        env=laptop.env, timeout=30, encoding="utf-8", codec_errors="replace",
    )  # fmt: skip
    child.expect(r"names requester abababababababab…, not [0-9a-f]{16}… as shown")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2
    assert "Approve?" not in (child.before or "")


@pytest.mark.parametrize(
    "command",
    [("terminal", "list", "far:evil"), ("terminal", "approve", "far:evil:0123abcd")],
    ids=lambda words: words[1],
)
def test_a_far_number_no_float_holds_is_a_malformed_answer_not_a_traceback(
    hostile: Callable[[str], LaptopUser], command: tuple[str, ...]
) -> None:
    laptop = hostile("huge")
    answered = laptop.cli(*command)
    assert answered.returncode == 2, answered.stderr
    assert "Traceback" not in answered.stderr
    assert "malformed" in answered.stderr and "OverflowError" in answered.stderr


def test_over_the_link_only_an_owner_key_may_deny_or_revoke(
    shared_far: FarMachine, tmp_path: Path
) -> None:
    far = shared_far
    # A teammate's connect is an SSH login as the far user too: deny and revoke crossed
    # unsigned, so it could deny anyone's request and revoke the owner's terminal.
    with (
        laptop_of(tmp_path, far.serve_stdio) as owner,
        laptop_of(tmp_path, far.serve_stdio, name="teammate") as teammate,
    ):
        far.cli("terminal", "trust-owner", owner.owner_public_key(), "--name", "owner")
        approved = _approved(owner)
        pending = owner.cli("terminal", "request", "far:box", "--no-wait").stdout.strip()
        for op, request_id in (("revoke", approved), ("deny", pending)):
            refused = teammate.cli("terminal", op, request_id)
            assert refused.returncode == 2, refused.stderr
            assert f"the {op}'s signature does not verify" in refused.stderr
        states = {
            row["id"]: row["state"]
            for row in json.loads(owner.cli("terminal", "list", "far:box", "--json").stdout)
        }
        assert (states[approved], states[pending]) == ("approved", "pending")
        for op, request_id in (("revoke", approved), ("deny", pending)):
            answered = owner.cli("terminal", op, request_id)
            assert answered.returncode == 0, answered.stderr
        events = [r["event"] for r in far.audit(approved.removeprefix("far:"))]
        assert events[-1] == "revocation"


@contextlib.contextmanager
def _as(user: LaptopUser) -> Iterator[None]:
    """This process with ``user``'s XDG dirs (its owner key, its ``connect``)."""
    saved = dict(os.environ)
    os.environ.update(user.env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_a_copy_of_the_owners_signed_deny_or_revoke_crosses_no_more(
    shared_far: FarMachine, tmp_path: Path
) -> None:
    far = shared_far
    # The owner's signed answer is good for 5 minutes of the far clock; a copy of it sent
    # again (here by a teammate's own connect) is refused by its nonce, as a used approval
    # is, before it reaches the session.
    with (
        laptop_of(tmp_path, far.serve_stdio) as owner,
        laptop_of(tmp_path, far.serve_stdio, name="teammate") as teammate,
    ):
        far.cli("terminal", "trust-owner", owner.owner_public_key(), "--name", "owner")
        approved = _approved(owner)
        pending = owner.cli("terminal", "request", "far:box", "--no-wait").stdout.strip()
        box = Place("far", "box")
        for op, request_id, state in (("revoke", approved, "revoked"), ("deny", pending, "denied")):
            far_id = request_id.removeprefix("far:")
            with _as(owner):
                signed = approval.sign_answer(keys.owner_key(), op, far_id, time.time())
                message = {"op": op, "id": far_id, "signed": signed}
                assert control.call(box, message)["state"] == state
            for sender in (teammate, owner):
                with _as(sender), pytest.raises(ControlError) as refused:
                    control.call(box, message)
                assert refused.value.code == "used", refused.value
                assert f"this signed {op} was already taken" in str(refused.value)


def test_an_attach_proof_is_signed_only_for_the_session_asked(
    hostile: Callable[[str], LaptopUser],
) -> None:
    # The far side answers the attach with another session's challenge: the requester's
    # key signed a proof naming that session, usable there by whoever relays it.
    laptop = hostile("elsewhere")
    attached = laptop.cli("terminal", "attach", "far:evil:0123abcd")
    assert attached.returncode == 2, attached.stderr
    assert "answered the attach for session 'other', not 'evil'" in attached.stderr


def test_a_far_side_hanging_up_mid_attach_is_one_line_not_a_traceback(
    hostile: Callable[[str], LaptopUser],
) -> None:
    laptop = hostile("hangup")
    attached = laptop.cli("terminal", "attach", "far:evil:0123abcd")
    assert attached.returncode == 2, attached.stderr
    assert "Traceback" not in attached.stderr
    assert "closed the connection during the attach handshake" in attached.stderr

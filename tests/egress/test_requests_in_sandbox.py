"""Egress requests end to end: real sandboxes (both backends) in the test-made internet.

Inside, :mod:`tests.apps.egress_asker` runs ``sandbridge-allow`` and curl step by step;
outside, the test answers as the owner with ``sandbridge egress pending|approve|deny``,
each time once the session has printed the request's line (no polling on time). The
world (:mod:`tests.apps.net_world`) prints a ``HIT`` line for each request a server
received, so "refused again" is proven by a missing hit too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKENDS, PYTHON, REPO, Process, run_argv
from tests.egress.test_in_sandbox import in_world
from tests.support.command_in_process import sandbridge

ASKER = str(REPO / "tests" / "apps" / "egress_asker.py")
HOSTILE = '\x1b[2J\x1b]0;pwned\x07fake\nsandbridge: second line \u202eevil" --save'
ALLOW_TEXT = "# reviewed test policy\npublic.test\n"


@dataclass
class World:
    """One ``sandbridge run`` of the asker in the world, and the owner's commands."""

    process: Process
    env: dict[str, str]
    fifo: Path
    work: Path
    answers: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)

    def egress(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The owner's ``sandbridge egress ARGS``, in this process
        (tests/support/command_in_process.py)."""
        return sandbridge("egress", *args, env=self.env)

    def asked(self, destination: str) -> str:
        """The request id of the session's line for ``destination`` (waits for it)."""
        line = self.process.wait_line(
            f"sandbridge: the sandbox asks for {destination}: ", "stderr", timeout=60
        )
        match = re.search(r"egress request (\S+),", line)
        assert match, line
        request_id = match.group(1)
        assert f"approve: sandbridge egress approve {request_id} " in line
        assert f"deny: sandbridge egress deny {request_id}" in line
        return request_id

    def step(self, name: str) -> str:
        return self.process.wait_line(f"STEP {name} ", timeout=90).split(" ", 2)[2]

    def go(self) -> None:
        with self.fifo.open("w") as file:
            file.write("go\n")

    def finish(self) -> list[str]:
        """Wait for the asker's end and the session's; return the session's stderr lines."""
        self.process.wait_line("STEPS DONE", timeout=120)
        assert self.process.popen.wait(60) == 0
        rest = self.process.drain("stderr")
        return self.process.lines["stderr"] + rest.splitlines()


def start(
    backend: str,
    tmp_path: Path,
    steps: list[list[Any]],
    options: tuple[str, ...] = (),
    allow: str = ALLOW_TEXT,
) -> World:
    work = tmp_path / "work"
    work.mkdir()
    (work / ".sandbridge").mkdir()
    (work / ".sandbridge" / "allow").write_text(allow)
    (work / ".sandbridge" / "config").write_text("resolver = 127.0.0.1:5353\n")
    fifo = work / "go"
    os.mkfifo(fifo)
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg)}
    argv = run_argv(
        work, PYTHON, ASKER, str(fifo), json.dumps(steps), options=("--backend", backend, *options)
    )
    return World(in_world(argv, env), env, fifo, work)


@dataclass
class Outcome:
    steps: dict[str, str]
    stderr: list[str]
    answers: dict[str, subprocess.CompletedProcess[str]]
    pending_json: list[dict[str, Any]]
    pending_text: str

    def hits(self, server: str, path: str) -> int:
        return sum(1 for line in self.stderr if line.startswith(f"HIT {server} ") and path in line)

    def result(self, name: str) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.steps[name])
        return value


SCENARIO: list[list[Any]] = [
    ["fetch", "refused_before", "http://other.test/before"],
    ["ask", "ask_once", "other.test:80", "--reason", "read the docs"],
    ["fetch", "once", "http://other.test/once"],
    ["fetch", "once_again", "http://other.test/again"],
    ["ask", "ask_session", "public.test:8080", "--reason", "the API's dev port"],
    ["fetch", "session1", "http://public.test:8080/s1"],
    ["fetch", "session2", "http://public.test:8080/s2"],
    ["ask", "ask_denied", "other.test:8443", "--reason", "again please"],
    ["ask", "hostile", "other.test:443", "--reason", HOSTILE, "--no-wait"],
    ["ask", "ask_timeout", "other.test:9000", "--reason", "nobody answers", "--timeout", "1"],
    ["wait"],
    ["flood", "flood", 25],
    ["fetch", "after_flood", "http://public.test/after"],
    ["ask", "ask_host_service", "gate:5432", "--reason", "db"],
    ["ask", "ask_url", "http://evil.test/", "--reason", "x"],
    ["ask", "ask_allowed", "public.test", "--reason", "x"],
]


@pytest.fixture(scope="module", params=BACKENDS)
def scenario(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """One session per backend: refused, asked, approved once, used, refused again;
    approved for the session; denied; a hostile reason; a flood; bad destinations."""
    world = start(str(request.param), tmp_path_factory.mktemp("asks"), SCENARIO)
    answers: dict[str, subprocess.CompletedProcess[str]] = {}
    try:
        once_id = world.asked("other.test:80")
        answers["pending_once"] = world.egress("pending", "--json")
        answers["approve_once"] = world.egress("approve", once_id, "--once")
        answers["approve_twice"] = world.egress("approve", once_id)
        answers["approve_session"] = world.egress(
            "approve", world.asked("public.test:8080"), "--session"
        )
        answers["deny"] = world.egress("deny", world.asked("other.test:8443"))
        world.asked("other.test:443")
        pending = world.egress("pending", "--json")
        pending_text = world.egress("pending").stdout
        world.go()
        stderr = world.finish()
    finally:
        if world.process.popen.poll() is None:
            world.process.stop()
    steps = {
        line.split(" ", 2)[1]: line.split(" ", 2)[2]
        for line in world.process.lines["stdout"]
        if line.startswith("STEP ")
    }
    return Outcome(steps, stderr, answers, json.loads(pending.stdout), pending_text)


def test_a_refused_destination_says_how_to_ask(scenario: Outcome) -> None:
    result = scenario.steps["refused_before"]
    assert result.startswith("status=403")
    assert "or ask the owner from inside: sandbridge-allow other.test:80 --reason" in result
    assert scenario.hits("other80", "/before") == 0


def test_the_request_is_listed_for_the_owner(scenario: Outcome) -> None:
    [row] = json.loads(scenario.answers["pending_once"].stdout)
    assert row["destination"] == "other.test:80"
    assert row["reason"] == "read the docs"
    assert row["session"] and row["id"].startswith(row["session"] + ":")
    assert row["age"] >= 0


def test_approved_once_is_used_once_then_refused_again(scenario: Outcome) -> None:
    assert scenario.answers["approve_once"].returncode == 0
    assert "other.test:80, one connection" in scenario.answers["approve_once"].stdout
    asked = scenario.result("ask_once")
    assert asked["rc"] == 0, asked
    assert re.fullmatch(r"\S+:[0-9a-f]{8}", asked["out"])
    assert "approved: other.test:80, one connection" in asked["err"]
    assert scenario.steps["once"].startswith("status=200")
    assert "hello from other80" in scenario.steps["once"]
    assert scenario.steps["once_again"].startswith("status=403")
    assert scenario.hits("other80", "/once") == 1
    assert scenario.hits("other80", "/again") == 0


def test_a_decided_request_cannot_be_approved_again(scenario: Outcome) -> None:
    answer = scenario.answers["approve_twice"]
    assert answer.returncode != 0
    assert "is approved" in answer.stderr


def test_approved_for_the_session_allows_repeatedly(scenario: Outcome) -> None:
    assert scenario.answers["approve_session"].returncode == 0
    assert scenario.result("ask_session")["rc"] == 0
    for name in ("session1", "session2"):
        assert scenario.steps[name].startswith("status=200"), scenario.steps[name]
        assert "hello from public8080" in scenario.steps[name]


def test_a_denied_request_makes_the_waiting_helper_fail(scenario: Outcome) -> None:
    assert scenario.answers["deny"].returncode == 0
    asked = scenario.result("ask_denied")
    assert asked["rc"] == 1
    assert "the owner denied egress request" in asked["err"]
    assert "other.test:8443" in asked["err"]


def test_a_hostile_reason_reaches_the_owner_escaped(scenario: Outcome) -> None:
    [row] = [r for r in scenario.pending_json if r["destination"] == "other.test:443"]
    assert row["reason"] == HOSTILE  # JSON carries it exactly, escaped by JSON
    text = scenario.pending_text
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    [line] = [line for line in text.splitlines() if "other.test:443" in line]
    assert '\\x1b[2J\\x1b]0;pwned\\x07fake\\x0asandbridge: second line \\u202eevil\\" --save"' in (
        line
    )
    [logged] = [line for line in scenario.stderr if "asks for other.test:443" in line]
    assert "\x1b" not in logged and "\\x0asandbridge: second line" in logged
    assert not any(line.startswith("sandbridge: second line") for line in scenario.stderr)


def test_no_wait_prints_the_id_and_returns(scenario: Outcome) -> None:
    asked = scenario.result("hostile")
    assert asked["rc"] == 0
    assert re.fullmatch(r"\S+:[0-9a-f]{8}", asked["out"])


def test_a_flood_hits_the_rate_limit_and_the_session_keeps_working(scenario: Outcome) -> None:
    outcomes = json.loads(scenario.steps["flood"])
    accepted = [o for o in outcomes if o["rc"] == 0]
    refused = [o for o in outcomes if o["rc"] != 0]
    # Five requests came before the flood (within the minute, unless the machine is very
    # slow): ten may be taken in a minute, so at most ten of the flood, never all of it.
    assert 1 <= len(accepted) <= 10 and len(refused) >= 15
    assert refused and all("more than 10 requests in 60 s" in o["err"] for o in refused)
    assert scenario.steps["after_flood"].startswith("status=200")
    printed = [line for line in scenario.stderr if "the sandbox asks for flood" in line]
    assert len(printed) == len(accepted)
    [notice] = [line for line in scenario.stderr if "requests from the sandbox are being" in line]
    assert notice == (
        "sandbridge: egress requests from the sandbox are being refused: more than 10 "
        "requests in 60 s; this one was dropped: ask again later"
    )


def test_a_host_service_or_a_url_is_refused_naming_the_value(scenario: Outcome) -> None:
    service = scenario.result("ask_host_service")
    assert service["rc"] == 1 and "'gate:5432' is a host service" in service["err"]
    url = scenario.result("ask_url")
    assert url["rc"] == 1 and "http://evil.test/" in url["err"]


def test_an_allowed_destination_needs_no_request(scenario: Outcome) -> None:
    allowed = scenario.result("ask_allowed")
    assert allowed["rc"] == 0
    assert "already allowed by 'public.test'" in allowed["err"]


def test_no_answer_in_time_exits_3_and_leaves_the_request_pending(scenario: Outcome) -> None:
    timed_out = scenario.result("ask_timeout")
    assert timed_out["rc"] == 3
    assert "no answer within 1 s" in timed_out["err"] and "stays pending" in timed_out["err"]


def test_nothing_the_sandbox_sent_changed_a_file(scenario: Outcome) -> None:
    assert not any("saved to" in line for line in scenario.stderr)


# --- --save, the next session, and a name on a network that is not the internet --------
# (mirror.test: 192.0.2.3). Per backend, two sessions for the three tests below, which
# only read what they did: the first asks for a destination the owner approves with
# --save, then for the mirror name (granted only as private); the owner then adds a plain
# ``mirror.test`` line by hand, and the next session reads both lines.

MIRROR_REASON = "the company's package mirror"


@dataclass
class Saved:
    work: Path
    save_answer: subprocess.CompletedProcess[str]
    # The allow file after the first session (before the owner's own line).
    allow_text: str
    mirror_id: str
    plain: subprocess.CompletedProcess[str]
    private: subprocess.CompletedProcess[str]
    first_steps: dict[str, str]
    first_stderr: list[str]
    next_steps: dict[str, str]
    next_stderr: list[str]


def _steps(world: World) -> dict[str, str]:
    return {line.split(" ", 2)[1]: line for line in world.process.lines["stdout"]}


@pytest.fixture(scope="module", params=BACKENDS)
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Saved:
    backend = str(request.param)
    world = start(
        backend,
        tmp_path_factory.mktemp("save"),
        [
            ["ask", "ask", "other.test:80", "--reason", "docs\nfor the\x1b[31m build"],
            ["fetch", "after1", "http://other.test/saved1"],
            ["fetch", "after2", "http://other.test/saved2"],
            ["ask", "mirror_ask", "mirror.test:80", "--reason", MIRROR_REASON],
            ["fetch", "mirror1", "http://mirror.test/m1"],
            ["fetch", "mirror2", "http://mirror.test/m2"],
        ],
    )
    try:
        save_answer = world.egress("approve", world.asked("other.test:80"), "--save")
        mirror_id = world.asked("mirror.test:80")
        plain = world.egress("approve", mirror_id, "--session")
        private = world.egress("approve", mirror_id, "--session", "--private")
        first_stderr = world.finish()
    finally:
        if world.process.popen.poll() is None:
            world.process.stop()
    allow = world.work / ".sandbridge" / "allow"
    allow_text = allow.read_text()
    # The owner's own line, the allow file's fourth: a plain entry for the mirror name.
    allow.write_text(allow_text + "mirror.test\n")
    (world.work / "go").unlink()
    os.mkfifo(world.work / "go")
    steps = [
        ["fetch", "next", "http://other.test/next"],
        ["fetch", "refused", "http://mirror.test/r"],
        ["ask", "ask", "mirror.test:80", "--reason", MIRROR_REASON],
    ]
    again = World(
        in_world(
            run_argv(
                world.work,
                PYTHON,
                ASKER,
                str(world.work / "go"),
                json.dumps(steps),
                options=("--backend", backend),
            ),
            world.env,
        ),
        world.env,
        world.work / "go",
        world.work,
    )
    try:
        next_stderr = again.finish()
    finally:
        if again.process.popen.poll() is None:
            again.process.stop()
    return Saved(
        world.work,
        save_answer,
        allow_text,
        mirror_id,
        plain,
        private,
        _steps(world),
        first_stderr,
        _steps(again),
        next_stderr,
    )


def test_save_writes_one_commented_line_that_the_next_session_allows(saved: Saved) -> None:
    answer = saved.save_answer
    assert answer.returncode == 0, answer.stderr
    assert "until the session ends" in answer.stdout and "saved to " in answer.stdout
    text = saved.allow_text
    assert text.startswith(ALLOW_TEXT)
    added = text[len(ALLOW_TEXT) :]
    assert re.fullmatch(
        r"other\.test:80  # \d{4}-\d\d-\d\d, asked from the sandbox: docs for the \[31m build\n",
        added,
    ), added
    steps = saved.first_steps
    assert "status=200" in steps["after1"] and "status=200" in steps["after2"]
    # The next session reads the saved line: no request needed.
    assert saved.next_steps["next"].split(" ", 2)[2].startswith("status=200")


def test_a_mirror_name_is_granted_only_as_private_and_then_takes_effect(saved: Saved) -> None:
    plain, private, request_id = saved.plain, saved.private, saved.mirror_id
    # Not reported as granted: the proxy would refuse every connection without private.
    assert plain.returncode != 0 and "approved" not in plain.stdout
    assert "mirror.test resolves to 192.0.2.3 (private) and no global address" in plain.stderr
    assert f"approve it as private (sandbridge egress approve {request_id} --private," in (
        plain.stderr
    )
    assert private.returncode == 0, private.stderr
    assert private.stdout.startswith(f"approved {request_id}: mirror.test:80 private,")
    steps = saved.first_steps
    assert json.loads(steps["mirror_ask"].split(" ", 2)[2])["rc"] == 0
    assert "status=200" in steps["mirror1"] and "status=200" in steps["mirror2"]
    assert sum(line.startswith("HIT mirror80 ") for line in saved.first_stderr) == 2


def test_a_mirror_name_its_entry_cannot_reach_is_refused_up_front_naming_the_line(
    saved: Saved,
) -> None:
    steps, stderr = saved.next_steps, saved.next_stderr
    fix = "edit .sandbridge/allow:4 to read 'mirror.test private'"
    assert "status=403" in steps["refused"] and fix in steps["refused"]
    asked = json.loads(steps["ask"].split(" ", 2)[2])
    assert asked["rc"] == 1 and asked["out"] == ""
    assert asked["err"].startswith("sandbridge-allow: refused: mirror.test resolves to 192.0.2.3")
    assert f"ask the owner to {fix} (the next session reads it)" in asked["err"]
    assert not any("the sandbox asks for" in line for line in stderr)
    assert not any(line.startswith("HIT mirror80 ") for line in stderr)


def test_without_the_egress_proxy_both_sides_say_so(backend: str, tmp_path: Path) -> None:
    world = start(
        backend,
        tmp_path,
        [["ask", "ask", "other.test:80", "--reason", "docs"], ["wait"]],
        options=("--net", "none"),
    )
    try:
        session = world.process.wait_line("sandbridge: session ", "stderr").rsplit(" ", 1)[1]
        asked = json.loads(world.step("ask"))
        answer = world.egress("approve", f"{session}:00000000")
        pending = world.egress("pending", "--session", session)
        world.go()
        world.finish()
    finally:
        if world.process.popen.poll() is None:
            world.process.stop()
    assert asked["rc"] == 1
    assert "cannot reach the egress gate at /run/ags-webview-relay/egress.sock" in asked["err"]
    assert "egress requests need net = allow" in asked["err"]
    for result in (answer, pending):
        assert result.returncode == 2
        assert f"session {session} has no egress proxy (its net mode is not allow)" in (
            result.stderr
        )

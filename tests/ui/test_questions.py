"""The dashboard's "Questions waiting for you" against a real session: ``sandbridge run
--ssh-agent KEY:each`` without a terminal (its question goes to the dashboard alone), a
real ``ssh-keygen -Y sign`` inside waiting on it, ``sandbridge ui`` reached by a real HTTP
client with the page's cookie, origin and CSRF token; hostile answers refused by code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SANDBRIDGE, STARTS_A_SANDBOX, Process, run_argv
from tests.ssh_agent.owner_agent import OwnerAgent, start_owner_agent
from tests.ui.test_server import Dashboard, _csrf


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[OwnerAgent]:
    (tmp_path / "owner").mkdir()
    agent = start_owner_agent(tmp_path / "owner")
    yield agent
    agent.stop()


@STARTS_A_SANDBOX
def test_a_signature_waits_for_the_dashboard_s_yes_and_bad_answers_are_refused(
    tmp_path: Path, owner: OwnerAgent
) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env = {
        **owner.env(), "XDG_RUNTIME_DIR": str(xdg), "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }  # fmt: skip
    work = tmp_path / "work"
    work.mkdir()
    (work / "chosen.pub").write_text(owner.chosen.public + "\n")
    (work / "message").write_text("signed text\n")
    # The sandbox stays up after the signature (until run.stop()): the last answer below is
    # refused by the session, which must still be running to say already_answered.
    script = (
        f'cd {work} && ssh-keygen -Y sign -n git -f chosen.pub message; echo "SIGNED $?"; '
        "exec sleep 600"
    )
    run = Process(
        run_argv(
            work, "sh", "-c", script,
            options=("--no-daemon", "--net", "none", "--name", "asks",
                     "--ssh-agent", f"{owner.chosen.fingerprint}:each"),
        ),
        env=env,
    )  # fmt: skip
    ui = Process([*SANDBRIDGE, "ui", "--print-url", "--no-daemon"], env=env)
    try:
        said = run.wait_line("sandbridge: the sandbox asks to sign", "stderr", timeout=120)
        assert "answer it on the dashboard (sandbridge ui) within 60 s" in said
        dashboard = Dashboard(ui, ui.wait_line("http://"))
        cookie = dashboard.login()
        csrf = _csrf(dashboard.request("GET", "/", {"Cookie": cookie})[2])
        headers = {
            "Cookie": cookie, "Origin": f"http://{dashboard.host}", "X-Sandbridge-CSRF": csrf
        }  # fmt: skip

        def post(body: dict[str, Any], extra: dict[str, str] | None = None) -> tuple[int, Any]:
            status, _, answer = dashboard.request(
                "POST", "/api/action", {**headers, **(extra or {})}, json.dumps(body).encode()
            )
            return status, json.loads(answer) if answer.startswith(b"{") else answer

        status, _, state = dashboard.request("GET", "/api/state", {"Cookie": cookie})
        assert status == 200
        [question] = json.loads(state)["questions"]
        assert question["session"] == "asks" and question["kind"] == "ssh-agent"
        assert owner.chosen.fingerprint in question["text"]
        assert "signature in namespace 'git'" in question["text"]
        answer = {"action": "question_answer", "session": "asks", "id": question["id"]}
        # A cross-site page, or one without the token, answers nothing.
        status, _ = post({**answer, "yes": True}, {"Origin": "http://evil.example"})
        assert status == 403
        status, _ = post({**answer, "yes": True}, {"X-Sandbridge-CSRF": "forged"})
        assert status == 403
        # Hostile bodies, each refused naming what was wrong; the question still waits.
        status, refused = post({**answer, "yes": "yes"})
        assert (status, refused["error"]) == (400, "yes must be true or false, got 'yes'")
        status, refused = post({**answer, "id": "deadbeef", "yes": True})
        assert (status, refused["code"]) == (409, "unknown_question")
        status, refused = post({**answer, "session": "other", "yes": True})
        assert status == 400 and "no running session 'other'" in refused["error"]
        status, done = post({**answer, "yes": True})
        assert (status, done["answered"], done["yes"]) == (200, question["id"], True)
        assert run.wait_line("SIGNED ", timeout=60) == "SIGNED 0"
        status, refused = post({**answer, "yes": False})
        assert (status, refused["code"]) == (409, "already_answered")
    finally:
        ui.stop()
        run.stop()
    assert (work / "message.sig").exists()

"""The ssh-agent bridge's confirmation modes, in front of a real ``ssh-agent``, signed with
by the real ``ssh-keygen -Y sign``: ``each`` asks before every signature, ``session`` once
(a no refuses that signature only), ``always`` never; a refusal is the protocol's failure,
logged with its reason. The owner answers on a scripted terminal, or through the control
socket's ops as the dashboard does (the real terminal: tests/aio/test_owner_questions.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbridge.aio.owner_questions import OwnerQuestions
from sandbridge.exceptions import ControlRefusal
from sandbridge.ssh_agent.signature_log import read_counts, summarise
from tests.ssh_agent.owner_agent import OwnerAgent
from tests.ssh_agent.test_server import Bridge, owner, sign

__all__ = ["owner"]


class Owner:
    """The owner's scripted terminal: answers in order, and every question kept."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, line: str) -> bool:
        self.asked.append(line)
        return self.answers.pop(0)


@pytest.fixture
def start(tmp_path: Path, owner: OwnerAgent) -> Iterator[Any]:
    bridges: list[Bridge] = []

    def started(mode: str, questions: OwnerQuestions) -> Bridge:
        (tmp_path / "session").mkdir()
        bridge = Bridge(
            tmp_path / "session" / "agent.sock",
            owner,
            f"{owner.chosen.fingerprint}:{mode}",
            questions=questions,
        )
        bridges.append(bridge)
        return bridge

    yield started
    for bridge in bridges:
        bridge.stop()
        assert bridge.errors == []


def signs(bridge: Bridge, owner: OwnerAgent, tmp_path: Path, name: str) -> bool:
    message = tmp_path / name
    message.write_text(f"{name}\n")
    return sign(bridge, owner, message).returncode == 0


def test_each_asks_before_every_signature_and_a_no_is_failure_logged(
    start: Any, owner: OwnerAgent, tmp_path: Path
) -> None:
    terminal = Owner([True, False])
    bridge = start("each", OwnerQuestions(terminal, listed=False))
    assert signs(bridge, owner, tmp_path, "one")
    assert not signs(bridge, owner, tmp_path, "two")
    assert len(terminal.asked) == 2
    assert owner.chosen.fingerprint in terminal.asked[0]
    assert "signature in namespace 'git'" in terminal.asked[0]
    assert terminal.asked[0].endswith("allow this signature? [y/N] ")
    decisions = [(line["decision"], line["reason"]) for line in bridge.log_lines()]
    assert decisions == [("signed", ""), ("refused", "the owner said no")]
    [count] = read_counts(bridge.log_dir)
    assert (count.mode, count.signed, count.refused) == ("each", 1, 1)
    [line] = summarise([count])
    assert line.startswith(f"ssh-agent {owner.chosen.fingerprint} chosen (mode each): 1 signed")


def test_session_asks_once_and_its_yes_holds_for_the_session(
    start: Any, owner: OwnerAgent, tmp_path: Path
) -> None:
    terminal = Owner([True])
    bridge = start("session", OwnerQuestions(terminal, listed=False))
    assert all(signs(bridge, owner, tmp_path, name) for name in ("one", "two", "three"))
    assert len(terminal.asked) == 1
    assert "for the rest of the session" in terminal.asked[0]


def test_session_s_no_refuses_that_signature_only_and_the_next_asks_again(
    start: Any, owner: OwnerAgent, tmp_path: Path
) -> None:
    terminal = Owner([False, True])
    bridge = start("session", OwnerQuestions(terminal, listed=False))
    assert not signs(bridge, owner, tmp_path, "one")
    assert signs(bridge, owner, tmp_path, "two")
    assert signs(bridge, owner, tmp_path, "three")
    assert len(terminal.asked) == 2


def test_with_nobody_to_ask_an_asking_key_is_refused_at_once_with_the_reason(
    start: Any, owner: OwnerAgent, tmp_path: Path
) -> None:
    bridge = start("each", OwnerQuestions(None, listed=False))
    assert not signs(bridge, owner, tmp_path, "one")
    [line] = bridge.log_lines()
    assert line["decision"] == "refused"
    assert str(line["reason"]).startswith("nobody to ask")


def test_an_unanswered_question_is_refused_as_timed_out(
    start: Any, owner: OwnerAgent, tmp_path: Path
) -> None:
    bridge = start("each", OwnerQuestions(None, listed=True, timeout=0.3))
    assert not signs(bridge, owner, tmp_path, "one")
    [line] = bridge.log_lines()
    assert str(line["reason"]).startswith("no answer within")


def test_always_never_asks_and_status_shows_each_key_s_mode(
    start: Any, owner: OwnerAgent, tmp_path: Path
) -> None:
    terminal = Owner([])
    bridge = start("always", OwnerQuestions(terminal, listed=False))
    [before] = read_counts(bridge.log_dir)  # shown before any signature
    assert (before.key, before.mode, before.signed) == (owner.chosen.fingerprint, "always", 0)
    assert signs(bridge, owner, tmp_path, "one")
    assert terminal.asked == []


def test_the_dashboard_s_answer_through_the_control_ops_lets_the_signature_through(
    start: Any, owner: OwnerAgent, tmp_path: Path
) -> None:
    questions = OwnerQuestions(None, listed=True)
    listed = threading.Event()
    questions.on_change = lambda: listed.set() if questions.pending() else None
    bridge: Bridge = start("each", questions)
    ops = questions.owner_ops()

    def call(name: str, **message: Any) -> dict[str, Any]:
        async def asked() -> dict[str, Any]:
            return await ops[name](message)

        return bridge.on_loop(asked())

    signed: list[bool] = []
    signer = threading.Thread(target=lambda: signed.append(signs(bridge, owner, tmp_path, "m")))
    signer.start()
    assert listed.wait(30)
    [row] = call("questions")["questions"]
    assert row["kind"] == "ssh-agent"
    assert owner.chosen.fingerprint in row["text"]
    assert call("question_answer", id=row["id"], yes=True) == {"answered": row["id"], "yes": True}
    signer.join(30)
    assert signed == [True]
    with pytest.raises(ControlRefusal) as again:
        call("question_answer", id=row["id"], yes=False)
    assert again.value.code == "already_answered"


def test_a_flood_of_signatures_past_the_question_bound_is_refused_at_once(
    start: Any, owner: OwnerAgent, tmp_path: Path
) -> None:
    questions = OwnerQuestions(None, listed=True, max_waiting=8)
    eight_waiting, recorded = threading.Event(), threading.Event()
    questions.on_change = lambda: eight_waiting.set() if len(questions.pending()) == 8 else None
    bridge = start("each", questions)
    bridge.bridge.log.on_record = recorded.set
    for n in range(8):  # each its own dir: sign() writes the public key file beside
        (tmp_path / f"d{n}").mkdir()
    signers = [
        threading.Thread(target=signs, args=(bridge, owner, tmp_path / f"d{n}", "m"))
        for n in range(8)
    ]
    for signer in signers:
        signer.start()
    assert eight_waiting.wait(30)
    assert not signs(bridge, owner, tmp_path, "ninth")  # refused without waiting
    assert recorded.is_set()
    [flooded] = bridge.log_lines()
    assert flooded["reason"] == "8 questions are already waiting for the owner"

    async def refuse_all() -> None:
        for question in questions.pending():
            questions.answer(question.id, False)

    bridge.on_loop(refuse_all())
    for signer in signers:
        signer.join(30)
    reasons = sorted(str(line["reason"]) for line in bridge.log_lines())
    assert reasons == ["8 questions are already waiting for the owner"] + ["the owner said no"] * 8

"""A session's questions to the owner: asked on the terminal (a scripted one here, a real
PTY at the end) and listed for the dashboard, the first answer winning, bounded, and
refused at once when no one can answer."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import pexpect
import pytest

from sandbridge.aio.owner_questions import OwnerQuestions, Verdict
from sandbridge.exceptions import ControlRefusal


class Terminal:
    """A scripted owner's terminal: each question waits until the test answers it."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.answers: asyncio.Queue[bool] = asyncio.Queue()
        self.prompted = asyncio.Event()

    async def __call__(self, line: str) -> bool:
        self.asked.append(line)
        self.prompted.set()
        return await self.answers.get()


async def asked(questions: OwnerQuestions, count: int = 1) -> list[str]:
    """The ids of the questions waiting, once ``count`` wait (told by ``on_change``)."""
    changed = asyncio.Event()
    questions.on_change = changed.set
    while len(questions.pending()) < count:
        await changed.wait()
        changed.clear()
    return [q.id for q in questions.pending()]


async def op(questions: OwnerQuestions, name: str, **message: Any) -> dict[str, Any]:
    return await questions.owner_ops()[name](message)


def test_with_no_terminal_and_no_dashboard_a_question_is_refused_at_once() -> None:
    questions = OwnerQuestions(None, listed=False)
    verdict = asyncio.run(questions.ask("ssh-agent", "sign?", "allow?"))
    assert verdict is Verdict.NOBODY
    assert "nobody to ask" in verdict.reason


def test_a_question_is_listed_for_the_dashboard_and_its_yes_answers_it() -> None:
    async def scenario() -> tuple[Verdict, dict[str, Any], dict[str, Any]]:
        questions = OwnerQuestions(None, listed=True)
        ask = asyncio.create_task(questions.ask("clipboard", "read your clipboard?", "allow?"))
        [qid] = await asked(questions)
        listing = await op(questions, "questions")
        answered = await op(questions, "question_answer", id=qid, yes=True)
        return await ask, listing, answered

    verdict, listing, answered = asyncio.run(scenario())
    assert verdict is Verdict.YES
    [row] = listing["questions"]
    assert (row["kind"], row["text"]) == ("clipboard", "read your clipboard? allow?")
    assert row["expires"] > row["asked"]
    assert answered == {"answered": row["id"], "yes": True}


def test_the_dashboard_s_no_refuses() -> None:
    async def scenario() -> Verdict:
        questions = OwnerQuestions(None, listed=True)
        ask = asyncio.create_task(questions.ask("ssh-agent", "sign?", "allow?"))
        [qid] = await asked(questions)
        questions.answer(qid, False)
        return await ask

    assert asyncio.run(scenario()) is Verdict.NO


def test_a_question_nobody_answers_is_a_no_after_the_timeout() -> None:
    questions = OwnerQuestions(None, listed=True, timeout=0.2)
    assert asyncio.run(questions.ask("ssh-agent", "sign?", "allow?")) is Verdict.TIMED_OUT
    assert questions.pending() == []


def test_the_terminal_s_answer_wins_and_a_later_dashboard_answer_is_refused() -> None:
    async def scenario() -> tuple[Verdict, ControlRefusal]:
        terminal = Terminal()
        questions = OwnerQuestions(terminal, listed=True)
        ask = asyncio.create_task(questions.ask("ssh-agent", "sign with key K?", "allow?"))
        [qid] = await asked(questions)
        await terminal.prompted.wait()
        assert terminal.asked == ["sandbridge: sign with key K?\r\n  allow? [y/N] "]
        terminal.answers.put_nowait(True)
        verdict = await ask
        with pytest.raises(ControlRefusal) as refused:
            questions.answer(qid, False)
        return verdict, refused.value

    verdict, refusal = asyncio.run(scenario())
    assert verdict is Verdict.YES
    assert refusal.code == "already_answered"


def test_the_dashboard_s_answer_wins_and_withdraws_the_terminal_s_question() -> None:
    async def scenario() -> tuple[Verdict, Verdict, list[str]]:
        terminal = Terminal()
        questions = OwnerQuestions(terminal, listed=True)
        first = asyncio.create_task(questions.ask("ssh-agent", "one?", "allow?"))
        second = asyncio.create_task(questions.ask("ssh-agent", "two?", "allow?"))
        one, two = await asked(questions, 2)
        await terminal.prompted.wait()
        # One question at a time on the terminal: the second waits its turn.
        assert len(terminal.asked) == 1
        questions.answer(one, True)
        first_verdict = await first
        # The terminal's turn passes to the second question; the dashboard answers it too.
        questions.answer(two, False)
        return first_verdict, await second, terminal.asked

    first, second, lines = asyncio.run(scenario())
    assert (first, second) == (Verdict.YES, Verdict.NO)
    assert "one?" in lines[0]


def test_past_the_bound_a_question_is_refused_at_once_and_the_others_still_wait() -> None:
    async def scenario() -> tuple[Verdict, list[Verdict]]:
        questions = OwnerQuestions(None, listed=True, max_waiting=8)
        waiting = [
            asyncio.create_task(questions.ask("ssh-agent", f"sign {n}?", "allow?"))
            for n in range(8)
        ]
        ids = await asked(questions, 8)
        flooded = await questions.ask("ssh-agent", "one more?", "allow?")
        for qid in ids:
            questions.answer(qid, True)
        return flooded, list(await asyncio.gather(*waiting))

    flooded, answered = asyncio.run(scenario())
    assert flooded is Verdict.FULL
    assert answered == [Verdict.YES] * 8


BAD_ANSWERS = [
    ({"id": 7, "yes": True}, "malformed"),
    ({"id": "", "yes": True}, "malformed"),
    ({"yes": True}, "malformed"),
    ({"id": "QID", "yes": "yes"}, "malformed"),
    ({"id": "QID", "yes": 1}, "malformed"),
    ({"id": "QID"}, "malformed"),
    ({"id": "deadbeef", "yes": True}, "unknown_question"),
]


@pytest.mark.parametrize(("message", "code"), BAD_ANSWERS)
def test_a_bad_answer_is_refused_by_code_and_the_question_still_waits(
    message: dict[str, Any], code: str
) -> None:
    async def scenario() -> tuple[ControlRefusal, Verdict]:
        questions = OwnerQuestions(None, listed=True)
        ask = asyncio.create_task(questions.ask("ssh-agent", "sign?", "allow?"))
        [qid] = await asked(questions)
        body = {k: qid if v == "QID" else v for k, v in message.items()}
        with pytest.raises(ControlRefusal) as refused:
            await op(questions, "question_answer", **body)
        questions.answer(qid, True)
        return refused.value, await ask

    refusal, verdict = asyncio.run(scenario())
    assert refusal.code == code
    assert verdict is Verdict.YES


def test_a_huge_malformed_answer_is_refused_in_one_short_line() -> None:
    questions = OwnerQuestions(None, listed=True)
    for message in ({"id": ["x"] * 5000, "yes": True}, {"id": "x" * 5000, "yes": True},
                    {"id": "abc", "yes": "y" * 5000}):  # fmt: skip
        with pytest.raises(ControlRefusal) as refused:
            questions.answer(message["id"], message["yes"])
        assert len(str(refused.value)) < 120


def test_another_session_s_question_id_is_unknown_here() -> None:
    async def scenario() -> ControlRefusal:
        mine, theirs = OwnerQuestions(None, listed=True), OwnerQuestions(None, listed=True)
        ask = asyncio.create_task(theirs.ask("ssh-agent", "sign?", "allow?"))
        [qid] = await asked(theirs)
        with pytest.raises(ControlRefusal) as refused:
            mine.answer(qid, True)
        theirs.answer(qid, False)
        await ask
        return refused.value

    refusal = asyncio.run(scenario())
    assert refusal.code == "unknown_question"


def test_closing_withdraws_every_waiting_question_as_a_no_saying_so() -> None:
    async def scenario() -> Verdict:
        questions = OwnerQuestions(None, listed=True)
        ask = asyncio.create_task(questions.ask("clipboard", "read?", "allow?"))
        await asked(questions)
        await questions.close()
        return await ask

    assert asyncio.run(scenario()) is Verdict.WITHDRAWN


# Asks one question on the process's terminal (the session's), as a session does.
ON_A_TERMINAL = """\
import asyncio
from sandbridge.aio.owner_questions import OwnerQuestions, terminal_asker
asker = terminal_asker()
print("TERMINAL", asker is not None, flush=True)
verdict = asyncio.run(OwnerQuestions(asker, listed=False).ask("ssh-agent", "sign with K?", "ok?"))
print("VERDICT", verdict.name, flush=True)
"""


@pytest.mark.parametrize(("line", "verdict"), [("y", "YES"), ("no", "NO"), ("", "NO")])
def test_a_question_is_answered_on_a_real_terminal(line: str, verdict: str) -> None:
    child = pexpect.spawn(
        sys.executable, ["-c", ON_A_TERMINAL], env=dict(os.environ), timeout=30, encoding="utf-8"
    )
    try:
        child.expect_exact("TERMINAL True")
        child.expect_exact("sandbridge: sign with K?")
        child.expect_exact("  ok? [y/N] ")
        child.sendline(line)
        child.expect_exact(f"VERDICT {verdict}")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)

"""The questions a session's bridges ask the owner, answered on the terminal or the dashboard.

One :class:`OwnerQuestions` per session. A bridge that needs the owner's yes (the
ssh-agent before a signature of a key in ``session`` or ``each`` mode, the clipboard before
a read) calls :meth:`OwnerQuestions.ask`. The question is asked on the terminal that
started the session when there is one (one question at a time there, the others wait their
turn) and, at the same time, listed for the dashboard (the control socket's ``questions``
op; ``question_answer`` answers one by id). The first answer wins; the other place's
question is withdrawn. No answer within :data:`ANSWER_TIMEOUT` is a no.

A session that can ask no one (no terminal, and no control socket for a dashboard to
reach) refuses at once, with the reason logged: a question never waits on nobody. At most
:data:`MAX_WAITING` questions wait at once; past that, each new one is refused at once, so
a sandbox asking in a loop cannot bury the owner's terminal or the dashboard.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sandbridge import log
from sandbridge.aio.tasks import running
from sandbridge.aio.terminal_question import ask_terminal, is_yes, terminal_present
from sandbridge.exceptions import ControlRefusal

# An unanswered question is a no after this long: the owner has stepped away, and the
# sandbox's tool (ssh, git, a paste) is better told no than left hanging for good.
ANSWER_TIMEOUT = 60.0
# Questions waiting at once, per session: a person answers one or two; eight covers a
# rebase's signatures racing a paste, and bounds what a sandbox asking in a loop holds.
MAX_WAITING = 8
# Answered ids remembered, so that a second answer is told "already answered" rather than
# "unknown": more than a dashboard's tables show at once.
MAX_REMEMBERED = 64
# The owner's side of a question is a line of text; a sandbox's longer text is cut.
MAX_TEXT_CHARS = 400

# Asks on the owner's terminal with the prompt given; True for yes.
TerminalAsker = Callable[[str], Awaitable[bool]]
OwnerOp = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class Verdict(enum.Enum):
    """How a question ended: the owner's yes, or why it is a no."""

    YES = "yes"
    NO = "the owner said no"
    TIMED_OUT = f"no answer within {ANSWER_TIMEOUT:g} s"
    NOBODY = "nobody to ask (no terminal, and no dashboard can reach this session)"
    FULL = f"{MAX_WAITING} questions are already waiting for the owner"
    WITHDRAWN = "the session ended before the owner answered"

    @property
    def reason(self) -> str:
        """Why the question was a no ("" for a yes), for the bridge's log."""
        return "" if self is Verdict.YES else self.value


@dataclass(frozen=True, slots=True)
class Question:
    """One question as the dashboard lists it."""

    id: str
    kind: str
    text: str
    asked: float
    expires: float


async def ask_on_terminal(prompt: str) -> bool:
    """Ask on the controlling terminal (:func:`ask_terminal`); an unreadable one is no.
    A question withdrawn meanwhile (answered on the dashboard, or timed out) says so."""
    try:
        return is_yes(await ask_terminal(prompt))
    except OSError:
        return False
    except asyncio.CancelledError:
        _tell_terminal("\r\n  (withdrawn: answered on the dashboard, or timed out)\r\n")
        raise


def terminal_asker() -> TerminalAsker | None:
    """:func:`ask_on_terminal` when this process has a terminal, else None."""
    return ask_on_terminal if terminal_present() else None


class OwnerQuestions:
    """One session's questions to its owner.

    ``terminal``: how to ask on the owner's terminal (None: there is none); ``listed``:
    whether a dashboard can reach the session (it serves a control socket); ``announce``:
    where a question with no terminal to ask it on is said (the session's messages), so
    that the owner knows to look at the dashboard."""

    def __init__(
        self,
        terminal: TerminalAsker | None,
        listed: bool,
        timeout: float = ANSWER_TIMEOUT,
        max_waiting: int = MAX_WAITING,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        self._terminal = terminal
        self._announce = announce
        self.listed = listed
        self.timeout = timeout
        self.max_waiting = max_waiting
        # Each question's answer: True or False, the owner's; None, withdrawn (closing).
        self._waiting: dict[str, tuple[Question, asyncio.Future[bool | None]]] = {}
        self._answered: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._terminal_turn = asyncio.Lock()
        # Called when the questions waiting change (the registry's watchers, the dashboard).
        self.on_change: Callable[[], None] | None = None

    @property
    def can_ask(self) -> bool:
        """Whether anyone can answer (a terminal, or a dashboard through the control socket)."""
        return self._terminal is not None or self.listed

    def pending(self) -> list[Question]:
        """The questions waiting, oldest first."""
        return [question for question, _ in self._waiting.values()]

    async def ask(self, kind: str, text: str, prompt: str, timeout: float | None = None) -> Verdict:
        """Ask the owner ``text`` (what is asked: said on the terminal and listed) with
        ``prompt`` (the yes-or-no line after it); ``kind`` names the bridge asking;
        ``timeout``, this question's own (default: the session's)."""
        timeout = self.timeout if timeout is None else timeout
        if not self.can_ask:
            log.info("owner_question.refused", kind=kind, reason=Verdict.NOBODY.value)
            return Verdict.NOBODY
        if len(self._waiting) >= self.max_waiting:
            log.info("owner_question.refused", kind=kind, reason=Verdict.FULL.value)
            return Verdict.FULL
        question_id = secrets.token_hex(4)
        while question_id in self._waiting or question_id in self._answered:
            question_id = secrets.token_hex(4)
        now = time.time()
        shown = f"{text} {prompt}"[:MAX_TEXT_CHARS]
        question = Question(question_id, kind, shown, now, now + timeout)
        answer: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        self._waiting[question_id] = (question, answer)
        self._changed()
        log.info("owner_question.asked", id=question_id, kind=kind)
        if self._terminal is None and self._announce is not None:
            self._announce(
                f"{text}: answer it on the dashboard (sandbridge ui) within "
                f"{timeout:g} s, or it is a no"
            )
        try:
            async with asyncio.timeout(timeout):
                if self._terminal is None:
                    yes = await answer
                else:
                    terminal_line = f"sandbridge: {text}\r\n  {prompt} [y/N] "
                    async with running(self._on_terminal(terminal_line, answer)):
                        yes = await answer
        except TimeoutError:
            verdict = Verdict.TIMED_OUT
        else:
            verdict = Verdict.WITHDRAWN if yes is None else Verdict.YES if yes else Verdict.NO
        finally:
            del self._waiting[question_id]
            self._remember(question_id)
            self._changed()
        log.info("owner_question.answered", id=question_id, kind=kind, verdict=verdict.name)
        return verdict

    def answer(self, question_id: object, yes: object) -> Question:
        """The dashboard's answer to one question (:class:`ControlRefusal` names why it is
        refused: a malformed one, an id unknown to this session, one already answered)."""
        if not isinstance(question_id, str) or not question_id:
            raise ControlRefusal(
                "malformed", f"id must be a question's id, got {repr(question_id)[:60]}"
            )
        if type(yes) is not bool:
            raise ControlRefusal("malformed", f"yes must be true or false, got {repr(yes)[:60]}")
        if question_id in self._answered:
            raise ControlRefusal("already_answered", f"question {question_id} was answered already")
        waiting = self._waiting.get(question_id)
        if waiting is None:
            raise ControlRefusal(
                "unknown_question", f"no question {question_id[:40]!r} waits in this session"
            )
        question, future = waiting
        if future.done():  # answered on the terminal a moment ago
            raise ControlRefusal("already_answered", f"question {question_id} was answered already")
        future.set_result(yes)
        return question

    def owner_ops(self) -> dict[str, OwnerOp]:
        """The control socket's ops: ``questions`` lists those waiting, ``question_answer``
        (``{"id": ..., "yes": true|false}``) answers one."""

        async def listing(message: dict[str, Any]) -> dict[str, Any]:
            return {
                "questions": [
                    {"id": q.id, "kind": q.kind, "text": q.text, "asked": q.asked,
                     "expires": q.expires}
                    for q in self.pending()
                ]
            }  # fmt: skip

        async def answering(message: dict[str, Any]) -> dict[str, Any]:
            question = self.answer(message.get("id"), message.get("yes"))
            return {"answered": question.id, "yes": message["yes"]}

        return {"questions": listing, "question_answer": answering}

    async def close(self) -> None:
        """Withdraw every question still waiting (each is then a no for its bridge)."""
        for _, future in list(self._waiting.values()):
            if not future.done():
                future.set_result(None)

    async def _on_terminal(self, line: str, answer: asyncio.Future[bool | None]) -> None:
        """Ask on the terminal when its turn comes; a question answered meanwhile (on the
        dashboard) is never asked there, and one answered while asked is withdrawn."""
        assert self._terminal is not None
        async with self._terminal_turn:
            if answer.done():
                return
            yes = await self._terminal(line)
            if not answer.done():
                answer.set_result(yes)

    def _remember(self, question_id: str) -> None:
        self._answered[question_id] = None
        while len(self._answered) > MAX_REMEMBERED:
            self._answered.popitem(last=False)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


def _tell_terminal(text: str) -> None:
    """Say ``text`` on the controlling terminal, if this process has one."""
    with contextlib.suppress(OSError):
        fd = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

"""What the host does when the sandbox asks it to open a URL (docs/open.md).

The sandbox only asks; the owner decides how (:class:`OpenSettings`): run the owner's
browser command with the URL as its last argument (an argv, never a shell), print one
line the owner can click, or ask on the terminal. A URL that is not the sandbox's own is
printed with a warning unless the owner allowed external opens. A sandbox that floods
open requests gets refusals past :data:`MAX_OPENS_PER_WINDOW` a window, and the owner one
line saying so, not a desktop full of windows.

The browser command is the owner's program and outlives the session: it is started in a
session of its own and never killed; the opener only waits for its exit status (for a
while at teardown, then no longer).
"""

from __future__ import annotations

import asyncio
import enum
import sys
import time
from typing import TextIO

from sandbridge.aio.owner_questions import OwnerQuestions, Verdict, terminal_asker
from sandbridge.aio.tasks import TaskSet
from sandbridge.exceptions import RegistrationError
from sandbridge.places import host_commands
from sandbridge.protocol.limits import MAX_OPENS_PER_WINDOW, OPEN_WINDOW, WindowLimit
from sandbridge.protocol.oauth_redirect import LoopbackRedirect, host_allowed, host_of
from sandbridge.protocol.open_request import ExternalOpens, OpenAction, shown
from sandbridge.relay.host.login_callbacks import LoginCallbacks
from sandbridge.relay.host.open_settings import OpenSettings

# A launcher (xdg-open, a browser's remote call) hands the URL on and exits in a moment;
# a session ending right after the request waits this long for it, so the request is not
# lost to the teardown. A browser that keeps running is left running.
BROWSER_EXIT_GRACE = 5.0
# An unanswered question on the terminal is a "no" after this long.
ASK_TIMEOUT = 120.0


class Outcome(enum.Enum):
    """What the host did with one request; the answer's ``action`` field."""

    BROWSER = "browser"  # the browser command was started with the URL
    PRINT = "print"  # the URL was printed
    ASK = "ask"  # the owner is asked on the terminal


def decide(settings: OpenSettings, *, external: bool, browsable: bool, terminal: bool) -> Outcome:
    """What to do with one URL: external ones and those a browser cannot open (``ws``)
    are printed unless allowed; ``ask`` without a terminal prints."""
    if (external and settings.external is ExternalOpens.PRINT) or not browsable:
        return Outcome.PRINT
    if settings.action is OpenAction.ASK:
        return Outcome.ASK if terminal else Outcome.PRINT
    return Outcome.BROWSER if settings.action is OpenAction.BROWSER else Outcome.PRINT


class HostOpener:
    """Carries out the open requests of one session as its :class:`OpenSettings` say."""

    def __init__(
        self,
        settings: OpenSettings,
        out: TextIO | None = None,
        questions: OwnerQuestions | None = None,
    ) -> None:
        self.settings = settings
        self._out = sys.stderr if out is None else out
        # Messages that go elsewhere (to the daemon's client): the owner is not at this
        # process's terminal, so ``ask`` never asks on it (a foreground daemon has one).
        self._may_ask = out is None
        # The session's questions to its owner (aio/owner_questions.py), which the bridges
        # ask too: one reader of the terminal, so the owner's "y" answers the question on
        # the screen and no other (default: a queue of this opener's own).
        self._questions = (
            OwnerQuestions(terminal_asker() if self._may_ask else None, listed=False)
            if questions is None
            else questions
        )
        self._limit = WindowLimit(MAX_OPENS_PER_WINDOW, OPEN_WINDOW)
        self._dropping = False
        # A question is open on the terminal: one at a time, for the owner's answer
        # belongs to the URL on the screen (two questions both read the one terminal).
        self._asking = False
        self._tasks = TaskSet()
        self._callbacks = LoginCallbacks(
            settings.oauth_callbacks, settings.callback_deadline, self._say
        )

    @property
    def callbacks(self) -> LoginCallbacks:
        """The session's OAuth callbacks (awaited and ended): give it the way to the
        sandbox's ports (:attr:`LoginCallbacks.open_sandbox`) to carry any."""
        return self._callbacks

    def _say(self, text: str) -> None:
        print(f"sandbridge: {text}", file=self._out, flush=True)

    def admit(self) -> None:
        """Count one request; refuse it (and say so once per run of drops) past the limit."""
        if self._limit.admit(time.monotonic()):
            self._dropping = False
            return
        why = (
            f"more than {self._limit.limit} open requests in {self._limit.window:g} s; "
            "this one was dropped"
        )
        if not self._dropping:
            self._dropping = True
            self._say(f"the sandbox floods open requests: {why}, and so are the next ones")
        raise RegistrationError(f"too many open requests: {why}")

    def open(self, url: str, *, external: bool = False, browsable: bool = True) -> Outcome:
        """Carry out one admitted request for ``url`` (already resolved, or external)."""
        terminal = self._may_ask and sys.stdin is not None and sys.stdin.isatty()
        allowed_by = host_allowed(self.settings.allowed_hosts, host_of(url)) if external else None
        held_back = (
            external and self.settings.external is ExternalOpens.PRINT and allowed_by is None
        )
        outcome = decide(self.settings, external=held_back, browsable=browsable, terminal=terminal)
        if outcome is Outcome.ASK and allowed_by is not None:
            outcome = Outcome.BROWSER  # the owner allowed this authorize host: no question
        redirect = self._callbacks.redirect_of(url) if external and not held_back else None
        if outcome is Outcome.ASK and self._asking:
            raise RegistrationError(
                "the owner has not answered the question about an earlier open request "
                f"yet; ask again once it is answered (within {ASK_TIMEOUT:g} s): {shown(url)}"
            )
        if (
            redirect is not None
            and outcome is not Outcome.ASK  # (awaited once the owner says yes)
            and not self._callbacks.await_callback(redirect, url)
        ):
            return Outcome.PRINT  # the port is taken: said, and the URL printed
        why = "" if allowed_by is None else f" (open_external_allow = {allowed_by})"
        if outcome is Outcome.PRINT and held_back and browsable:
            self._say(
                "WARNING: the sandbox asks to open an external URL; not opened "
                f"(--open-external allow would): {url}"
            )
        elif outcome is Outcome.PRINT:
            self._say(f"the sandbox opens {url}{why}")
        elif outcome is Outcome.BROWSER:
            self._say(f"the sandbox opens {url} (with {self.settings.browser[0]}){why}")
            self._tasks.spawn(self._run_browser(url))
        else:
            self._asking = True
            self._tasks.spawn(self._ask(url, redirect))
        return outcome

    async def _run_browser(self, url: str) -> None:
        argv = [*self.settings.browser, url]
        # Found where the sandbox cannot write (a PATH entry in the workdir, say an
        # activated virtualenv's bin, would run the sandbox's xdg-open on the host).
        program = host_commands.which(argv[0])
        if program is None:
            self._say(
                f"cannot run the browser command {argv[0]!r}: not found on PATH outside the "
                f"places the sandbox can write; open {url}"
            )
            return
        argv[0] = program
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            self._say(f"cannot run the browser command {argv[0]!r}: {exc.strerror}; open {url}")
            return
        status = await process.wait()
        if status != 0:
            self._say(f"the browser command {argv[0]!r} failed (exit {status}); open {url}")

    async def _ask(self, url: str, redirect: LoopbackRedirect | None = None) -> None:
        try:
            verdict = await self._questions.ask(
                "open", f"the sandbox asks to open {url}", "open it in the browser?", ASK_TIMEOUT
            )
        finally:
            self._asking = False
        if verdict is Verdict.YES:
            self._say(f"the sandbox opens {url} (with {self.settings.browser[0]}: your yes)")
            if redirect is None or self._callbacks.await_callback(redirect, url):
                await self._run_browser(url)
        else:
            self._say(f"not opened: {url}")

    async def close(self) -> None:
        """Wait a little for browser commands still starting, then stop waiting (the
        browser keeps running); a question still open is withdrawn; a login's callback
        still awaited is not any more."""
        await self._tasks.close(grace=BROWSER_EXIT_GRACE)

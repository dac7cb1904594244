"""A session's OAuth callbacks: which external opens get one, how many at once, and what
the owner is told (docs/open.md, "Logins (OAuth callbacks)").

The open service (:mod:`.host_opener`) asks :meth:`LoginCallbacks.redirect_of` for an
approved external URL's loopback ``redirect_uri`` and, before the browser is sent to the
authorize page, :meth:`LoginCallbacks.await_callback` to take the port on the host. A port
taken on the host (by any program, or another user) is said, and the browser is *not*
sent: the provider would hand the code to whatever listens there.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbridge import log
from sandbridge.aio.tasks import TaskSet
from sandbridge.protocol.oauth_redirect import LoopbackRedirect, host_of, loopback_redirect

if TYPE_CHECKING:
    from sandbridge.relay.host.oauth_callback import CallbackStatus, OAuthCallback, OpenSandboxPort

# Callbacks awaited at once in one session: a login awaits one; a few logins in a row
# (an agent and its tools) a few. Past this an open is printed, not opened: each holds
# a host port for up to the deadline.
MAX_CALLBACKS = 4
# Ended callbacks that ``status`` and the dashboard still show.
KEPT_ENDED = 8


class LoginCallbacks:
    """The callbacks one session awaits, and the last few that ended."""

    def __init__(self, enabled: bool, deadline: float, say: Callable[[str], None]) -> None:
        self.enabled = enabled
        self.deadline = deadline
        self._say = say
        # The way to the sandbox's loopback ports (the session's upstream connector);
        # until it is given, no callback is carried.
        self.open_sandbox: OpenSandboxPort | None = None
        self._awaited: list[OAuthCallback] = []
        self._ended: collections.deque[CallbackStatus] = collections.deque(maxlen=KEPT_ENDED)
        self._tasks = TaskSet()
        # Told when a callback starts or ends (the dashboard's tables changed).
        self.on_change: Callable[[], None] | None = None

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def redirect_of(self, url: str) -> LoopbackRedirect | None:
        """The loopback callback an approved external ``url`` names, when the bridge is
        on; a loose ``redirect_uri`` raises the refusal the sandbox gets."""
        if not self.enabled or self.open_sandbox is None:
            return None
        return loopback_redirect(url)

    def await_callback(self, redirect: LoopbackRedirect, url: str) -> bool:
        """Take ``redirect``'s port on the host and await its one callback; ``False``
        (said to the owner, with ``url`` to open by hand) when that cannot be done."""
        assert self.open_sandbox is not None
        where = f"http://{redirect.host}:{redirect.port}{redirect.path}"
        if len(self._awaited) >= MAX_CALLBACKS:
            self._say(
                f"WARNING: {MAX_CALLBACKS} logins' callbacks are awaited already; the one "
                f"to {where} is not, and its login page is not opened: {url}"
            )
            return False
        # The callback's server (an HTTP exchange of its own) is imported with the first
        # login: a session that never carries one never loads it.
        from sandbridge.relay.host.oauth_callback import OAuthCallback

        callback = OAuthCallback(
            redirect, self.open_sandbox, host_of(url), self.deadline, on_end=self._on_end
        )
        try:
            callback.bind()
        except OSError as exc:
            log.warning("oauth_callback.port_taken", port=redirect.port, error=exc.strerror)
            self._say(
                f"WARNING: port {redirect.port} is taken on the host ({exc.strerror}), so the "
                f"login's callback to {where} cannot be carried, and the login page is not "
                f"opened (the code would go to whatever listens there); free the port, or "
                f"open it yourself: {url}"
            )
            return False
        self._awaited.append(callback)
        self._tasks.spawn(callback.run())
        self._say(
            f"the login's callback to {where} is awaited on the host, once, for {self.deadline:g} s"
        )
        self._changed()
        return True

    def _on_end(self, callback: OAuthCallback) -> None:
        if callback in self._awaited:
            self._awaited.remove(callback)
        self._ended.append(callback.status)
        self._say(f"the login's callback on port {callback.redirect.port}: {callback.status.state}")
        self._changed()

    def statuses(self) -> list[CallbackStatus]:
        """The awaited callbacks, then the last ended ones."""
        return [callback.status for callback in self._awaited] + list(self._ended)

    def listing(self) -> dict[str, Any]:
        """What ``session_info`` says of them (``status``, the dashboard): the bridge on
        or off, and each callback's address, authorize host and state (never a query)."""
        return {
            "oauth_callbacks": self.enabled,
            "callbacks": [dataclasses.asdict(status) for status in self.statuses()],
        }

    async def close(self) -> None:
        """End every awaited callback (the session ends)."""
        for callback in list(self._awaited):
            await callback.close()
        await self._tasks.close()

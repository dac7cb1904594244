"""The one exception hierarchy of sandbridge.

Every error a user or a peer can cause is a :class:`SandbridgeError` whose message
says what happened, with the offending value, in one line. All of them live here, so
that what can be caught, and what each means, is read in one place::

    SandbridgeError
    ├── WireError                 a message on a Unix socket broke the contract
    │   ├── JsonRefused           untrusted JSON refused (also a ValueError)
    │   ├── RegistrationError     a registration refused (the message goes back)
    │   ├── NotStreamCapable      the peer speaks v1 only
    │   ├── RemoteWireError       a message on a far machine's link broke the protocol
    │   └── AgentWireError        an ssh-agent message broke the agent protocol's framing
    ├── HttpError                 an HTTP message broke the rules (``status``)
    ├── AuthorityError            not ``host[:port]``
    ├── UpstreamError             the sandbox side of a request failed (a 502)
    │   ├── HandoffRefused        the shim handed over what the host refuses
    │   ├── AppUnreachable        no loopback address of the app's port answered
    │   └── StreamRefused         the shim could not open this stream
    ├── ContainerRefused          a container engine request the policy refuses (field, rule)
    ├── FileOpenRefused           a file:// URL sandbridge-open will not open (a ValueError)
    ├── RuntimeDirError           the runtime dir is unsafe or cannot be made
    ├── SessionError              a session name or the state dir is unusable
    ├── DaemonError               the daemon cannot start, or refused a session
    ├── SandboxError              the sandbox cannot be started as asked
    │   └── GitNotRun             the host's git would hang in a repository, or timed out
    ├── RemoteLinkError           the link to a far machine cannot be opened or broke
    │   └── RemoteLinkRefused     refused for a reason retrying will not change
    ├── PolicyError               a policy line or flag is malformed
    ├── AgentError                an agent profile is malformed, unknown or unusable
    ├── KeyFileError              a terminal key file is missing, malformed or unsafe
    ├── FrameError                a terminal frame broke the framing
    ├── ChannelError              a terminal channel message failed its checks
    ├── IllegalMove               a terminal request or a connection cannot make this move
    └── Refused                   refused with a documented reason ``code``
        ├── ApprovalRefused       an approval, request or proof
        ├── ControlRefusal        a control request (the broker's side)
        ├── ControlError          a control request (the client's side)
        ├── JournalError          a terminal reservation
        └── EgressRequestRefused  an egress request from the sandbox
"""

from __future__ import annotations

import enum


class SandbridgeError(Exception):
    """Base class of every error sandbridge raises on purpose."""


# --- the wire and HTTP ---------------------------------------------------------------


class WireError(SandbridgeError):
    """A message on one of the Unix sockets broke the wire contract."""


class JsonRefused(WireError, ValueError):
    """JSON from an untrusted side was refused before or while parsing it: too large, too
    deeply nested, not JSON. Also a ValueError, so that every caller that refuses
    malformed JSON refuses this too."""


class RegistrationError(WireError):
    """A registration request was refused; the message goes back to the sandbox."""


class NotStreamCapable(WireError):
    """The peer answered like a v1-only shim."""


class RemoteWireError(WireError):
    """A message on the link to a far machine broke the protocol (docs/remote.md): the
    whole link is dropped, since its framing can no longer be trusted."""


class AgentWireError(WireError):
    """A message on the sandbox's ssh-agent socket broke the framing (docs/ssh-agent.md):
    its length is over the limit, so the connection is closed rather than read on."""


class ClipboardRefused(SandbridgeError):
    """A clipboard transfer cannot go ahead (docs/clipboard.md): the owner's tool failed
    or gave more than the cap, or a stand-in was given a flag it does not serve."""


class HttpError(SandbridgeError):
    """An HTTP message broke the rules; ``status`` is the answer for the browser."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ContainerRefused(SandbridgeError):
    """A request on the sandbox's container engine socket is refused (docs/containers.md):
    ``field`` is the part of the request that was refused (``HostConfig.Privileged``, the
    path), ``rule`` the policy rule that refused it, ``status`` the HTTP answer (403 for
    the policy, 400 for a malformed request, 413 past a size, 429 past a rate)."""

    def __init__(self, field: str, rule: str, detail: str, status: int = 403) -> None:
        super().__init__(f"{detail} (field {field}, rule {rule})")
        self.field = field
        self.rule = rule
        self.detail = detail
        self.status = status


class AuthorityError(SandbridgeError):
    """An authority that is not ``host[:port]``; ``port_text`` is set when the port is
    what is wrong."""

    def __init__(self, message: str, port_text: str | None = None) -> None:
        super().__init__(message)
        self.port_text = port_text


# --- the relay's sandbox side --------------------------------------------------------


class UpstreamError(SandbridgeError):
    """The sandbox side of a request failed: the browser gets a 502 for that request only."""


class HandoffRefused(UpstreamError):
    """The shim's answer carried descriptors that the host does not accept."""


class AppUnreachable(UpstreamError):
    """No loopback address of the app's port took the connection (its message names
    each address tried: :class:`sandbridge.protocol.app_address.AppAttempts`)."""


class StreamRefused(UpstreamError):
    """The shim speaks stream mode but could not open this stream (app not listening)."""


class FileOpenRefused(SandbridgeError, ValueError):
    """``sandbridge-open file:///...`` inside the sandbox will not open this URL or the file
    it names (a host part, a ``..``, not a regular file, too large, not UTF-8 ...). Also a
    ValueError, as the helper's other refusals are."""


# --- sessions, sandboxes, policy -----------------------------------------------------


class RuntimeDirError(SandbridgeError):
    """The session's runtime directory could not be created, checked or removed safely."""


class SessionError(SandbridgeError):
    """A session name is invalid or taken, or the state directory is unsafe."""


class DaemonError(SandbridgeError):
    """The daemon cannot start (another one runs), or it refused or lost a session."""


class SandboxError(SandbridgeError):
    """The sandbox could not be started with the requested backend or options."""


class GitNotRun(SandboxError):
    """The host's git was not run in a repository the sandbox can write: a file it would
    open is not a file (a FIFO would block it in ``open()``), or it timed out there once
    already. A question it cannot answer is a refusal at a session's start and a warning
    that says "could not check" at its end, never "nothing found"."""


class RemoteLinkError(SandbridgeError):
    """The link to a far machine could not be opened (the transport's command failed) or
    broke; ``sandbridge connect`` reconnects after it."""


class RemoteLinkRefused(RemoteLinkError):
    """The far machine was reached and refused us for a reason that another try will not
    change: its host key is unknown or changed, no key was accepted, or ``sandbridge`` is
    not installed there. Reconnecting would only repeat it, so ``connect`` stops."""


class PolicyError(SandbridgeError):
    """A policy file line or a flag is malformed; the message names where and what."""


class AgentError(SandbridgeError):
    """An agent profile is malformed (the message names ``file:key`` and the value), no
    profile has the name asked for, or the agent's state cannot be set up."""


# --- terminals -----------------------------------------------------------------------


class KeyFileError(SandbridgeError):
    """A key file is missing, malformed or unsafe."""


class FrameError(SandbridgeError):
    """A frame broke the framing: unknown kind, oversized or truncated."""


class ChannelError(SandbridgeError):
    """A channel message failed authentication, order, size or type checks."""


class IllegalMove(SandbridgeError):
    """An event a state table (a terminal request's, a browser connection's) does not
    allow in the current state; nothing moved."""

    def __init__(self, state: enum.Enum, event: enum.Enum, what: str = "request") -> None:
        article = "an" if str(state.value)[:1] in "aeio" else "a"
        super().__init__(f"{article} {state.value} {what} cannot {event.value}")
        self.state = state
        self.event = event


class Refused(SandbridgeError):
    """Refused with ``code``, the documented reason the other side gets."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ApprovalRefused(Refused):
    """An approval, request or proof was refused."""


class ControlRefusal(Refused):
    """A control request refused by the session's broker."""


class ControlError(Refused):
    """The session refused a control request (as the owner's client reads it)."""


class ControlTimeout(SandbridgeError):
    """A session (or a far machine) took a control request and did not answer in time."""


class JournalError(Refused):
    """The journal refused a reservation or cannot be used safely."""


class EgressRequestRefused(Refused):
    """An egress request from the sandbox (``sandbridge-allow``) was refused."""

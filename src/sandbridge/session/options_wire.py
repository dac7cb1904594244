"""A session's options as the ``run`` client sends them to the daemon, and back.

Only data crosses: the relay limits (each under the wire key protocol/relay_settings.py
declares, checked against its bounds there), the forwarding mode, the policy lines the
host half needs (``egress.policy.served_lines``) and how open requests are carried out.
The daemon rebuilds each value with the same parsers the command line uses, so a
malformed field is refused with its name (:class:`DaemonError`) and never half-applied.
Callbacks and the terminal channel are the daemon's own (it sends events; the channel
comes as a descriptor); ``terminal_socket`` (another runtime's sandbox serves
``terminal.sock``) is a flag.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sandbridge.exceptions import DaemonError, PolicyError
from sandbridge.project.policy import Policy, from_lines, served_lines
from sandbridge.protocol.http.origin_policy import UrlForm
from sandbridge.protocol.open_request import ExternalOpens, OpenAction
from sandbridge.protocol.publish_rules import parse_rule
from sandbridge.protocol.relay_settings import LIMITS, Limit, checked
from sandbridge.relay.host.open_settings import CALLBACK_DEADLINE, OpenSettings
from sandbridge.relay.host.settings import ForwardingMode, RelaySettings
from sandbridge.session.options import SessionOptions

# A policy is a reviewed list of a few hundred lines at most; the message bounds it too.
MAX_POLICY_LINES = 1024
# The browser command is an argv of a few words.
MAX_BROWSER_ARGS = 64
# The command as the dashboard shows it (for display only: a long ``sh -c`` script must
# not make the request too large for the daemon): its first words, each cut short.
MAX_COMMAND_WORDS = 32
MAX_WORD_CHARS = 200
# The places the sandbox writes beside the workdir (its ``--bind`` sources): absolute
# paths, a few at most; the kernel's own bound on a path's length.
MAX_WRITABLE = 64
MAX_PATH_CHARS = 4096
# The owner's open_external_allow names: a handful; a DNS name's length at most.
MAX_ALLOWED_HOSTS = 256
MAX_NAME_CHARS = 255


def encode(options: SessionOptions) -> dict[str, Any]:
    """``options`` as JSON-ready data (everything but callbacks and the channel)."""
    if options.ssh_agent is not None:
        # The daemon never holds the owner's agent: dropping the bridge here would start
        # the sandbox without the agent the owner asked for (the CLI serves such a run
        # itself; this is the guard behind it).
        raise DaemonError("a session with --ssh-agent is served by its own process, not the daemon")
    if options.clipboard is not None:
        # The daemon has no terminal to ask before a read (cli/clipboard_options.py).
        raise DaemonError("a session with --clipboard is served by its own process, not the daemon")
    if options.containers is not None:
        # The daemon holds no engine socket of the owner's shell (cli/containers_options.py).
        raise DaemonError(
            "a session with --containers is served by its own process, not the daemon"
        )
    settings = RelaySettings() if options.settings is None else options.settings
    opens = options.open_settings
    return {
        "workdir": str(options.workdir),
        "writable": [str(path) for path in options.writable],
        "command": [word[:MAX_WORD_CHARS] for word in options.command[:MAX_COMMAND_WORDS]],
        "protocol": options.protocol.value,
        "terminal_socket": options.terminal_socket,
        "settings": {
            **{limit.wire: getattr(settings, limit.name) for limit in LIMITS},
            "front_door": settings.front_door,
            "private": settings.private,
            "url_form": settings.url_form.value,
            "publish": [[rule.text, rule.source] for rule in settings.publish_rules],
        },
        "policy": None
        if options.policy is None
        else [list(line) for line in served_lines(options.policy)],
        "open": None
        if opens is None
        else {
            "action": opens.action.value,
            "browser": list(opens.browser),
            "external": opens.external.value,
            "oauth_callbacks": opens.oauth_callbacks,
            "allowed_hosts": list(opens.allowed_hosts),
            "callback_deadline": opens.callback_deadline,
        },
    }


def decode(data: dict[str, Any]) -> SessionOptions:
    """The options ``data`` describes; :class:`DaemonError` names the first bad field."""
    try:
        return SessionOptions(
            workdir=Path(_typed(data, "workdir", str)),
            # Absent from an older client's request: that run had no binds to pass over.
            writable=_writable(data.get("writable", [])),
            command=_command(data.get("command")),
            protocol=ForwardingMode(_typed(data, "protocol", str)),
            # Absent from an older client's request: that session has no terminal.sock.
            terminal_socket="terminal_socket" in data and _typed(data, "terminal_socket", bool),
            settings=_settings(_typed(data, "settings", dict)),
            policy=_policy(data.get("policy")),
            open_settings=_open_settings(data.get("open")),
        )
    except PolicyError as exc:
        raise DaemonError(f"policy: {exc}") from None
    except ValueError as exc:
        raise DaemonError(f"session options: {exc}") from None


def _command(value: object) -> tuple[str, ...]:
    """The sandboxed command as the dashboard shows it: a bounded list of strings."""
    if (
        not isinstance(value, list)
        or len(value) > MAX_COMMAND_WORDS
        or not all(isinstance(word, str) and len(word) <= MAX_WORD_CHARS for word in value)
    ):
        raise DaemonError(
            f"session options: command must be at most {MAX_COMMAND_WORDS} strings "
            f"of at most {MAX_WORD_CHARS} characters"
        )
    return tuple(value)


def _writable(value: object) -> tuple[Path, ...]:
    """The places the sandbox writes beside the workdir: a bounded list of absolute
    paths."""
    if (
        not isinstance(value, list)
        or len(value) > MAX_WRITABLE
        or not all(
            isinstance(path, str) and 0 < len(path) <= MAX_PATH_CHARS and path.startswith("/")
            for path in value
        )
    ):
        raise DaemonError(
            f"session options: writable must be at most {MAX_WRITABLE} absolute paths "
            f"of at most {MAX_PATH_CHARS} characters, got {value!r:.80}"
        )
    return tuple(Path(path) for path in value)


def _typed(data: dict[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    # bool is an int to Python, never a limit here.
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise DaemonError(f"session options: {key} must be a {kind.__name__}, got {value!r:.80}")
    return value


def _settings(data: dict[str, Any]) -> RelaySettings:
    # Each limit checked against its declaration, refused naming its key and bounds.
    try:
        limits = checked(data, _wire_key)
    except ValueError as exc:
        raise DaemonError(f"session options: {exc}") from None
    publish = _typed(data, "publish", list)
    if len(publish) > MAX_POLICY_LINES or not all(
        isinstance(item, list) and len(item) == 2 and all(isinstance(v, str) for v in item)
        for item in publish
    ):
        raise DaemonError("session options: publish must be a list of [rule, source]")
    front_door = data.get("front_door", True)  # (a client from before the front door)
    if not isinstance(front_door, bool):
        raise DaemonError(
            f"session options: front_door must be true or false, got {front_door!r:.80}"
        )
    return RelaySettings(
        **limits,
        front_door=front_door,
        private=_typed(data, "private", bool),
        url_form=UrlForm(_typed(data, "url_form", str)),
        publish_rules=tuple(parse_rule(text, source) for text, source in publish),
    )


def _wire_key(limit: Limit[float] | Limit[int]) -> str:
    return limit.wire


def _policy(data: object) -> Policy | None:
    if data is None:
        return None
    if (
        not isinstance(data, list)
        or len(data) > MAX_POLICY_LINES
        or not all(
            isinstance(line, list) and len(line) == 3 and all(isinstance(v, str) for v in line)
            for line in data
        )
    ):
        raise DaemonError("session options: policy must be a list of [key, value, source]")
    return from_lines((key, value, where) for key, value, where in data)


def _open_settings(data: object) -> OpenSettings | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise DaemonError(f"session options: open must be an object, got {data!r:.80}")
    browser = _typed(data, "browser", list)
    if not 0 < len(browser) <= MAX_BROWSER_ARGS or not all(isinstance(a, str) for a in browser):
        raise DaemonError(f"session options: browser must be an argv, got {browser!r:.80}")
    # Absent from an older client's request: that session has no OAuth callbacks.
    hosts = data.get("allowed_hosts", [])
    if not isinstance(hosts, list) or len(hosts) > MAX_ALLOWED_HOSTS:
        raise DaemonError(f"session options: allowed_hosts must be a list, got {hosts!r:.80}")
    if not all(isinstance(h, str) and 0 < len(h) <= MAX_NAME_CHARS for h in hosts):
        raise DaemonError(f"session options: allowed_hosts must be names, got {hosts!r:.80}")
    deadline = data.get("callback_deadline", CALLBACK_DEADLINE)
    if isinstance(deadline, bool) or not isinstance(deadline, int | float) or not deadline > 0:
        raise DaemonError(f"session options: callback_deadline must be seconds, got {deadline!r}")
    return OpenSettings(
        OpenAction(_typed(data, "action", str)),
        tuple(browser),
        ExternalOpens(_typed(data, "external", str)),
        oauth_callbacks="oauth_callbacks" in data and _typed(data, "oauth_callbacks", bool),
        allowed_hosts=tuple(hosts),
        callback_deadline=float(deadline),
    )

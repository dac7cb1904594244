"""The daemon socket's messages (docs/daemon.md), sans-I/O.

The socket is ``SOCK_SEQPACKET``: one message is one JSON object, whole or not at all.
The client sends one request, with the session's descriptors attached (its runtime
dir, its session dir, the host's end of the terminal channel when it has one, and last,
with ``"namespace": true``, the sandbox's network namespace, which a ``run`` client
received from the sandbox entry before the command started: the daemon makes the
session's app connections from sockets of that namespace, relay/host/owned_upstream.py)::

    {"version": 1, "serve": {...options...}, "runtime_dir": PATH, "session_dir": PATH,
     "namespace": true}

and the daemon answers with events, one per message, until either side leaves:
``{"ready": SESSION_ID}`` once the session is served, ``{"app": {...}}`` for each
registration, ``{"gone": {...}}`` for an app that stopped listening, ``{"say": TEXT}``
for a line the owner should see, and ``{"error": TEXT}`` (then the daemon closes) for a
refusal. The client leaving ends the session.

``sandbridge ui`` sends ``{"version": 1, "dashboard": "url"}`` instead, with no
descriptor, and gets one ``{"dashboard": URL}`` (a new one-time login URL of the
dashboard the daemon serves) or ``{"error": TEXT}``, then the close.

``sandbridge run``'s thin client (``cli/thin_run.py``) first sends a run request, with
its standard input, output and error attached::

    {"version": 1, "run": {"argv": [...], "cwd": PATH, "cwd_id": [DEV, INO],
                           "env": {...}, "umask": N, "python": WHICH, "package": WHICH}}

(``cwd_id``: the working directory's device and inode; the builder runs in ``cwd`` only
if it is still that directory, else the client falls back)

and gets, from the daemon's run builder, ``{"fallback": WHY}`` (the client serves the
run the usual way), ``{"exit": STATUS}`` (the run ended there: an option error, a refusal,
already printed) or ``{"start": {"argv": [...], "fds": [...], "serve": REQUEST}}`` with
the descriptors attached: the serve request's three (sent on a second connection, as
above), then the sandbox's, whose numbers in ``argv`` the ``fds`` list names, then the
pipe end whose first byte lets the sandbox's command start (``--start-fd``: the client
starts the sandbox at once and writes it once the daemon serves the session), then the
host's end of the socket pair on which the sandbox entry sends its network namespace
(``--namespace-fd``): the client waits for it, and sends it with the serve request, every
time it sends that request (a restarted daemon gets it too). The client
answers ``{"done": STATUS}`` once the sandbox has ended (the builder checks what the
sandbox changed and prints what the run prints at its end while the daemon closes the
session), and shuts down its side once the daemon has closed the session; the builder
then removes the session's dirs, answers ``{"exit": STATUS}`` and closes.
"""

from __future__ import annotations

import enum
import json
import os

from sandbridge.exceptions import DaemonError, JsonRefused
from sandbridge.protocol.jsonline import decode_json

# typing costs a thin client (cli/thin_run.py) more than the rest of this module: the
# annotations need it only when checked.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

VERSION = 1
# A request carries the session's options (a policy of a few hundred lines at most); an
# event carries one app or one line of text. One message must fit the socket's send
# buffer (about 200 KiB by default) whole.
MAX_MESSAGE_BYTES = 64 * 1024
# Descriptors a request may carry: runtime dir, session dir, terminal channel, network
# namespace.
MAX_REQUEST_FDS = 4
# The request's key that says its last descriptor is the sandbox's network namespace.
NAMESPACE_KEY = "namespace"
# The client's side (session/served.py, and cli/thin_run.py, the thin ``run`` client).
# Connecting to a Unix socket is immediate unless its accept queue is full.
CONNECT_TIMEOUT = 2.0
# The daemon starts a session's listeners in well under this; past it, something is off.
READY_TIMEOUT = 15.0
# At the end, the daemon closes the session's listeners before it closes the connection.
CLOSE_TIMEOUT = 10.0
# While the daemon is away (restarting), how often to look whether it is back: a
# connect to a missing socket costs microseconds.
RECONNECT_INTERVAL = 0.2
# What a client says of its link (both clients say the same).
CLOSED = "the daemon closed the connection"
NOT_READY = (
    f"the daemon did not serve the session within {READY_TIMEOUT:g} s "
    "(--no-daemon serves it without the daemon)"
)
SERVES_AGAIN = "the daemon serves this session again"


def refused(why: object) -> str:
    return f"the daemon refused the session: {why} (--no-daemon serves it without the daemon)"


def stopped_serving(why: object) -> str:
    return (
        f"the daemon stopped serving this session ({why}); its apps, terminals and egress "
        "are back when a daemon runs again"
    )


def owner_stopped(session: str) -> str:
    """What the session's terminal says when the owner stopped it (``stop`` on its control
    socket: the dashboard's Stop): it ends as on SIGTERM, and the person at the terminal
    would otherwise see only the sandbox gone."""
    return (
        f"session {session} was stopped by its owner (Stop on the dashboard); the sandbox was ended"
    )


def cannot_serve_yet(why: object) -> str:
    return f"the daemon cannot serve this session yet: {why}"


# The key of a dashboard request (and of its answer).
DASHBOARD_KEY = "dashboard"
# The key of a run request; it carries the client's standard input, output and error.
RUN_KEY = "run"
RUN_REQUEST_FDS = 3
# A run's start carries the serve request's descriptors (all but the namespace, which
# the client adds), the sandbox's (the set-up's memfd, the terminal channel's
# sandbox end, the namespace channel's sandbox end, the start gate's read end), the
# start gate's write end and the namespace channel's host end.
MAX_START_FDS = (MAX_REQUEST_FDS - 1) + 4 + 2


class Event(enum.Enum):
    """What one message from the daemon says."""

    READY = "ready"
    APP = "app"
    GONE = "gone"
    SAY = "say"
    ERROR = "error"
    STOP = "stop"  # the owner asked the session to end (control socket's ``stop``)
    DASHBOARD = "dashboard"  # the answer to a dashboard request: a one-time login URL
    # The run builder's answers to a run request (and the client's last word to it).
    FALLBACK = "fallback"
    EXIT = "exit"
    START = "start"
    DONE = "done"


def encode(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise DaemonError(f"a daemon message of {len(data)} bytes is over {MAX_MESSAGE_BYTES}")
    return data


def event(kind: Event, value: object) -> bytes:
    return encode({kind.value: value})


def decode(data: bytes) -> dict[str, Any]:
    """One message as an object; :class:`DaemonError` says why not."""
    try:
        message = decode_json(data, max_bytes=MAX_MESSAGE_BYTES)
    except JsonRefused as exc:
        raise DaemonError(str(exc)) from None
    if not isinstance(message, dict):
        raise DaemonError("a daemon message must be a JSON object")
    return message


def decode_event(data: bytes) -> tuple[Event, object]:
    """The event of one message from the daemon."""
    message = decode(data)
    if len(message) != 1:
        raise DaemonError(f"a daemon event has one key, got {sorted(message)!r:.80}")
    ((key, value),) = message.items()
    try:
        return Event(key), value
    except ValueError:
        raise DaemonError(f"unknown daemon event {key!r:.40}") from None


def _versioned(data: bytes) -> dict[str, Any]:
    message = decode(data)
    if message.get("version") != VERSION:
        raise DaemonError(
            f"protocol version {message.get('version')!r:.20} is not {VERSION}: the daemon "
            "and this sandbridge differ; restart the daemon"
        )
    return message


def asks_for_dashboard(data: bytes) -> bool:
    """Whether a request asks for a dashboard URL (anything else is a session's request);
    a dashboard request holds nothing else."""
    message = _versioned(data)
    if DASHBOARD_KEY not in message:
        return False
    if message != dashboard_message():
        raise DaemonError(
            f"a dashboard request is {json.dumps(dashboard_message())} and nothing else"
        )
    return True


def dashboard_message() -> dict[str, Any]:
    return {"version": VERSION, DASHBOARD_KEY: "url"}


def decode_request(data: bytes) -> tuple[dict[str, Any], str, str]:
    """A request's options, runtime dir and session dir."""
    message = _versioned(data)
    options, runtime_dir, session_dir = (
        message.get(key) for key in ("serve", "runtime_dir", "session_dir")
    )
    if not isinstance(options, dict):
        raise DaemonError("a daemon request needs its session's options under 'serve'")
    if not isinstance(runtime_dir, str) or not isinstance(session_dir, str):
        raise DaemonError("a daemon request needs 'runtime_dir' and 'session_dir' paths")
    return options, runtime_dir, session_dir


def carries_namespace(data: bytes) -> bool:
    """Whether a request's last descriptor is the sandbox's network namespace."""
    value = _versioned(data).get(NAMESPACE_KEY, False)
    if not isinstance(value, bool):
        raise DaemonError(f"a daemon request's 'namespace' is true or absent, not {value!r:.40}")
    return value


def request(
    options: dict[str, Any], runtime_dir: str, session_dir: str, *, namespace: bool = False
) -> bytes:
    message = {
        "version": VERSION,
        "serve": options,
        "runtime_dir": runtime_dir,
        "session_dir": session_dir,
    }
    if namespace:
        message[NAMESPACE_KEY] = True
    return encode(message)


def python_identity(executable: str, prefix: str) -> str:
    """A run request's ``python``: the interpreter's real file and its environment's
    prefix (a venv's ``python`` and ``python3`` are one)."""
    return f"{os.path.realpath(executable)} in {prefix}"


def package_identity(package_file: str, version: str) -> str:
    """A run request's ``package``: the sandbridge package's directory and version."""
    return f"{os.path.dirname(os.path.abspath(package_file))} (sandbridge {version})"


def run_request(run: dict[str, Any]) -> bytes:
    """A thin client's request (see the module's docstring for ``run``'s fields)."""
    return encode({"version": VERSION, RUN_KEY: run})


def asks_to_run(data: bytes) -> bool:
    """Whether a request is a thin client's run request."""
    return RUN_KEY in _versioned(data)


def decode_run_request(data: bytes) -> dict[str, Any]:
    """A run request's fields, each of its type; :class:`DaemonError` names the first
    one that is not."""
    run = _versioned(data).get(RUN_KEY)
    if not isinstance(run, dict):
        raise DaemonError("a run request is an object under 'run'")
    argv, env = run.get("argv"), run.get("env")
    if not isinstance(argv, list) or not all(isinstance(word, str) for word in argv):
        raise DaemonError("a run request's 'argv' is a list of strings")
    if not isinstance(env, dict) or not all(isinstance(value, str) for value in env.values()):
        raise DaemonError("a run request's 'env' maps names to strings")
    for key in ("cwd", "python", "package"):
        if not isinstance(run.get(key), str):
            raise DaemonError(f"a run request's {key!r} is a string")
    _check_takeable(argv, env, run["cwd"])
    cwd_id = run.get("cwd_id")
    if not (
        isinstance(cwd_id, list)
        and len(cwd_id) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in cwd_id)
    ):
        raise DaemonError("a run request's 'cwd_id' is a device and an inode number")
    umask = run.get("umask")
    if not isinstance(umask, int) or isinstance(umask, bool) or not 0 <= umask <= 0o777:
        raise DaemonError("a run request's 'umask' is a number from 0 to 0o777")
    return run


def _check_takeable(argv: list[str], env: dict[str, str], cwd: str) -> None:
    """What the builder could not take (a real client's argv, environment and cwd cannot
    hold these): refused here, not a traceback on the client's terminal there."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name:
            raise DaemonError(
                f"a run request's 'env' name {_cut(name)} is empty or holds '=' or NUL"
            )
        _check_bytes(name, f"'env' name {_cut(name)}")
        if "\0" in value:
            raise DaemonError(f"a run request's 'env' value of {_cut(name)} holds NUL")
        _check_bytes(value, f"'env' value of {_cut(name)}")
    for word in argv:
        if "\0" in word:
            raise DaemonError(f"a run request's 'argv' word {_cut(word)} holds NUL")
        _check_bytes(word, f"'argv' word {_cut(word)}")
    if not cwd.startswith("/") or "\0" in cwd:
        raise DaemonError(f"a run request's 'cwd' {_cut(cwd)} is not an absolute path without NUL")
    _check_bytes(cwd, f"'cwd' {_cut(cwd)}")


def _check_bytes(text: str, what: str) -> None:
    """``text`` must be bytes the system takes: a real client's are (its undecodable bytes
    arrive as U+DC80 to U+DCFF, which encode back); JSON's other lone surrogates do not."""
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise DaemonError(f"a run request's {what} is no byte string (a lone surrogate)") from None


def _cut(text: str) -> str:
    """``text`` quoted with its escapes, cut to 80 characters."""
    quoted = repr(text)
    return quoted if len(quoted) <= 80 else f"{quoted[:77]}..."


# What the daemon hands its run builder for each thin client: this message (the client's
# pid and its checked request) and the client's connection, standard input, output
# and error.
BUILDER_FDS = 1 + RUN_REQUEST_FDS
MAX_BUILDER_MESSAGE_BYTES = 2 * MAX_MESSAGE_BYTES


def builder_message(pid: int, run: dict[str, Any]) -> bytes:
    return json.dumps({"pid": pid, "run": run}, separators=(",", ":")).encode()

"""A ``run`` whose sandbox a thin client starts (``cli/thin_run.py``, docs/daemon.md).

The daemon's run builder, in a process forked for one client, prepares the session as
``run_session`` does (runtime dir, terminal channel, set-up memfd, registry entry,
all in the client's name: its pid) and hands the client what it needs to carry on: the
backend's command line with the sandbox's descriptors, the end of the pipe that lets the
command start, the end of the socket pair on which the sandbox entry sends its network
namespace (the client sends it on to the daemon with the request), and the request (with
its descriptors) that has the daemon serve the host half. It then waits for the client's
``done``, sent as the sandbox ends: the run's end checks what the sandbox changed while
the daemon closes the session. Once the client has seen the daemon close it, it shuts
down its side of the connection, and the session's dirs are removed then, as
``served_session`` removes them at its end (``before_answer``: the builder's answer
waits for it).
"""

from __future__ import annotations

import array
import contextlib
import socket
import time
from collections.abc import Callable
from pathlib import Path

from sandbridge import log
from sandbridge.exceptions import DaemonError
from sandbridge.protocol import daemon_wire
from sandbridge.protocol.daemon_wire import Event
from sandbridge.sandbox.spec import SandboxSpec
from sandbridge.session.options import SessionOptions, create_entry
from sandbridge.session.run import prepared_sandbox
from sandbridge.session.served import serve_request

# The status the run has when its client left without saying one (it was killed).
CLIENT_GONE = 1
# How much longer than its own wait for the daemon the client may take to shut down.
SHUT_DOWN_MARGIN = 2.0


def hand_off(  # noqa: PLR0913  (the builder's two, then a session runner's three)
    client: socket.socket,
    pid: int,
    before_answer: contextlib.ExitStack,
    spec_factory: Callable[[Path], SandboxSpec],
    backend: str,
    options: SessionOptions,
) -> int:
    """Prepare the session of client process ``pid``, hand it over on ``client``, and
    return the status the client reports when the sandbox has ended. The session's dirs
    are removed here if the client left without one, else by ``before_answer`` once the
    client says the daemon has closed the session."""
    # The client starts the sandbox while the daemon serves the session, and lets its
    # command start once it is served (the sandbox's start and the serving overlap).
    with prepared_sandbox(
        spec_factory, backend, options, pid=pid, start_gate=True, own_upstream=True
    ) as prepared:
        entry = create_entry(prepared.runtime_dir, prepared.options, pid)
        removal = contextlib.ExitStack()
        removal.callback(prepared.runtime_dir.remove)
        removal.callback(entry.remove)
        try:
            request, serve_fds = serve_request(prepared.runtime_dir, entry, prepared.options)
            start = daemon_wire.event(
                Event.START,
                {
                    "argv": prepared.argv,
                    "fds": list(prepared.pass_fds),
                    "serve": daemon_wire.decode(request),
                    daemon_wire.NAMESPACE_KEY: True,
                },
            )
            namespace_channel = prepared.options.namespace_channel
            assert prepared.start_writer is not None and namespace_channel is not None
            fds = array.array(
                "i",
                [
                    *serve_fds,
                    *prepared.pass_fds,
                    prepared.start_writer,
                    namespace_channel.fileno(),
                ],
            )
            try:
                client.sendmsg([start], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            except OSError as exc:  # it left while the run was built (a Ctrl-C, a kill)
                log.debug("run.client_gone", session=entry.id, pid=pid, error=exc.strerror)
                return CLIENT_GONE
            prepared.release_sandbox_fds()
            namespace_channel.close()  # the client's now
            log.debug("run.handed_off", session=entry.id, pid=pid)
            status = _until_done(client)
            if status is None:
                return CLIENT_GONE
            before_answer.callback(removal.pop_all().close)
            before_answer.callback(_until_shut_down, client)  # first: last in
            return status
        finally:
            removal.close()


def _until_done(client: socket.socket) -> int | None:
    """The status in the client's ``done``; None if it left without one."""
    client.settimeout(None)
    try:
        data = client.recv(daemon_wire.MAX_MESSAGE_BYTES)
        kind, value = daemon_wire.decode_event(data) if data else (None, None)
    except (OSError, DaemonError):
        return None
    if kind is Event.DONE and isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _until_shut_down(client: socket.socket) -> None:
    """Until the client has shut down its side (it has seen the daemon close the session)
    or left; whatever else it sends is not read. The client waits for the daemon's close
    at most ``CLOSE_TIMEOUT``: a client that takes longer (stopped, say) is waited for no
    more, since the run holds the placeholders' lock meanwhile, and every other run's
    start and end on this machine waits for that lock. The bound is the whole wait's: a
    client that keeps sending does not extend it."""
    deadline = time.monotonic() + daemon_wire.CLOSE_TIMEOUT + SHUT_DOWN_MARGIN
    with contextlib.suppress(OSError):  # TimeoutError included
        while (left := deadline - time.monotonic()) > 0:
            client.settimeout(left)
            if not client.recv(daemon_wire.MAX_MESSAGE_BYTES):
                return

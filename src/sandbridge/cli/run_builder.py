"""The daemon's run builder (docs/daemon.md): ``python -m sandbridge.cli.run_builder FD``.

The daemon starts it once. It loads what builds a ``run`` (the command line's parser, the
policy, git's questions, the mounts) and waits on descriptor FD, a ``SOCK_SEQPACKET``
socket to the daemon, for the thin clients the daemon has checked (its user, its mount
namespace, its install: ``daemon/builder.py``). Each one is taken by a child it forked
ahead, which waits on that socket itself (so a client's build starts without a fork in
its way), and it forks the next child once one has taken its client. The child takes
the client's standard descriptors, working directory, environment and umask, parses the
arguments with the full command's parser and carries out the full command's ``run`` up to
the sandbox's start, which it hands to the client (``session/handed_off.py``). What it
prints goes to the client's own terminal, as the full command's would. A process of one
thread that has imported everything: a fork of it is cheap, and safe.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import traceback

from sandbridge.cli import bridge_options
from sandbridge.cli.parser import build_parser, run_parsed
from sandbridge.protocol import daemon_wire
from sandbridge.protocol.daemon_wire import Event
from sandbridge.sandbox.spec import entry_interpreter_options, installation
from sandbridge.session.handed_off import hand_off

# Imported ahead by the builder, for its children (serve).
WARM = ("sandbridge.agents.catalogue", "sandbridge.agents.hints", "sandbridge.agents.state")


def serve(channel: socket.socket) -> None:
    """A builder child for each client the daemon forwards, until the daemon leaves."""
    # Each child reaped as it ends (waited for, not ignored: its CPU time then counts in
    # this process's children's, where the daemon's owner can see it).
    signal.signal(signal.SIGCHLD, _reap)
    # Built once: what it holds depends on no client (parsing leaves it as it was).
    parser = build_parser("run")
    # Asked of the file system once, here, and not again by each child: where this
    # process's Python and sandbridge live, and so how the sandbox entry's Python starts.
    installation()
    entry_interpreter_options()
    # What a run imports where it is first used (docs/architecture.md, "What a command's
    # start imports"), loaded here once so that no child pays it: an agent's profiles,
    # state and hints (a run with a bridge is its own process's, never built here).
    for module in WARM:
        importlib.import_module(module)
    # What is loaded now is shared with every child until one writes to it; a collection
    # in a child would touch (and so copy) every object: none of these is ever collected.
    gc.freeze()
    # One child forked ahead of its client, waiting on the channel itself: a client's
    # build starts as the daemon forwards it, not after a fork of this process (and its
    # first writes to what the fork shares), and this process forks the next one then.
    taken, took = os.pipe2(os.O_CLOEXEC)
    while True:
        try:
            child = os.fork()
        except OSError:  # out of processes or memory: the next client, closed on, falls back
            if not _refuse_one(channel):
                return
            continue
        if child == 0:
            os.close(taken)
            os._exit(_take_one(parser, channel, took))
        if not _until_taken(child, taken, channel):
            return


def _take_one(parser: argparse.ArgumentParser, channel: socket.socket, took: int) -> int:
    """In a child forked ahead: the next client the daemon forwards, built here."""
    data, fds, _, _ = socket.recv_fds(
        channel, daemon_wire.MAX_BUILDER_MESSAGE_BYTES, daemon_wire.BUILDER_FDS
    )
    channel.close()
    if not data:
        return 0  # the daemon left: so does the builder (it sees this child end)
    os.write(took, b"t")  # the builder forks the next one now
    os.close(took)
    if len(fds) != daemon_wire.BUILDER_FDS:
        for fd in fds:  # the client, closed on, falls back
            os.close(fd)
        return 0
    return _child(parser, data, fds)


def _until_taken(child: int, taken: int, channel: socket.socket) -> bool:
    """Wait until ``child`` has taken a client (or ended, not having one: the daemon left,
    or something killed it); whether to fork the next one."""
    poller = select.poll()
    poller.register(taken, select.POLLIN)
    try:
        pidfd: int | None = os.pidfd_open(child)
    except ProcessLookupError:  # ended, and reaped, already: its byte says if it took one
        pidfd = None
    try:
        if pidfd is not None:
            poller.register(pidfd, select.POLLIN)
        ready = {fd for fd, _ in poller.poll(None if pidfd is not None else 0)}
    finally:
        if pidfd is not None:
            os.close(pidfd)
    if taken in ready:
        os.read(taken, 1)
        return True
    hung_up = select.poll()
    hung_up.register(channel, select.POLLIN)
    return not any(event & select.POLLHUP for _, event in hung_up.poll(0))


def _refuse_one(channel: socket.socket) -> bool:
    """The next client, closed on (it falls back to the full command); whether the daemon
    is still there."""
    data, fds, _, _ = socket.recv_fds(
        channel, daemon_wire.MAX_BUILDER_MESSAGE_BYTES, daemon_wire.BUILDER_FDS
    )
    for fd in fds:
        os.close(fd)
    return bool(data)


def _reap(_signum: int, _frame: object) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _child(parser: argparse.ArgumentParser, data: bytes, fds: list[int]) -> int:
    """One client's builder; its own exit status (the run's goes to the client)."""
    os.setsid()  # the daemon's terminal and its Ctrl-C are not the client's
    gc.disable()  # a short build: its few cycles go with the process
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    client = socket.socket(fileno=fds[0])
    client.setblocking(True)
    for target, fd in zip((0, 1, 2), fds[1:], strict=True):
        os.dup2(fd, target)
        os.close(fd)
    answer: bytes
    # What the run leaves until its client has exited (its placeholders' removal, under a
    # lock it holds from before the answer: cli/sessions.py), run once the client has it;
    # and what waits until the client has seen the daemon close the session (the
    # session's dirs: session/handed_off.py), run before the answer.
    with contextlib.ExitStack() as after_exit:
        try:
            message = json.loads(data)
            with contextlib.ExitStack() as before_answer:
                status = _build(
                    parser, client, message["pid"], message["run"], before_answer, after_exit
                )
            if status is None:
                answer = daemon_wire.event(Event.FALLBACK, "the full command runs it")
            else:
                answer = daemon_wire.event(Event.EXIT, status)
        except BaseException:  # a bug: reported where the full command would report it
            traceback.print_exc()
            answer = daemon_wire.event(Event.EXIT, 1)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:
            pass
        try:
            client.send(answer)
        except OSError:
            return 1
        finally:
            _leave_client(client)
    return 0


def _leave_client(client: socket.socket) -> None:
    """Let go of the client's connection and standard descriptors: whoever reads its
    output to the end (a pipe) sees the end when the client exits, not after this child's
    last work."""
    client.close()
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.close(null)


def _build(  # noqa: PLR0913  (the client's, then what runs before and after the answer)
    parser: argparse.ArgumentParser,
    client: socket.socket,
    pid: int,
    run: dict[str, object],
    before_answer: contextlib.ExitStack,
    after_exit: contextlib.ExitStack,
) -> int | None:
    """Carry out the client's ``run`` here up to the sandbox's start, and the rest once
    the client reports its end (but what goes to ``before_answer`` and ``after_exit``);
    its status, or None if the full command must run it."""
    argv = run["argv"]
    assert isinstance(argv, list) and isinstance(run["cwd"], str)
    assert isinstance(run["env"], dict) and isinstance(run["umask"], int)
    if argv[:1] != ["run"]:
        return None
    try:
        os.chdir(run["cwd"])
        here = os.stat(".")
    except OSError:
        return None  # the full command says what it says of a missing directory
    if [here.st_dev, here.st_ino] != run["cwd_id"]:
        # Not the client's directory any more (renamed, or a link put in its place since
        # the client named it): the full command runs it where the client is.
        return None
    os.environ.clear()
    os.environ.update(run["env"])
    os.umask(run["umask"])
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # an option error or --help, printed as the full command does
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    # A run with an agents' bridge is served by its own process: the daemon never holds
    # the owner's agent or engine socket, nor asks on a terminal before a clipboard read
    # (cli/bridge_options.py).
    served_here = args.no_daemon or args.dry_run or args.print_policy or args.verbose
    if served_here or bridge_options.is_on(args):
        return None

    def runner(*prepared: object) -> int:
        return hand_off(client, pid, before_answer, *prepared)  # type: ignore[arg-type]

    return run_parsed(args, session_runner=runner, after_exit=after_exit)


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))

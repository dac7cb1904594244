"""The ``sandbridge`` command run in the test's own process, for tests of what a command
does and prints (not of the command's process: its descriptors, signals, exit path).

A ``python -m sandbridge.cli`` child spends most of its CPU importing sandbridge (about
half a second of a core each); here the modules are imported once per worker. The call
gives the command what a fresh process would have: the environment and working directory
it is given (its time zone too), its own standard streams (text, with a ``buffer``
beneath, not a terminal), none of the process-wide state an earlier command left (the
directories whose commands are distrusted, the repositories where git hung); afterwards
the test's process gets back its own, the ``sandbridge`` logger (which the command points
at its stderr) and the resource limits included. The answer is a
:class:`subprocess.CompletedProcess`, as ``subprocess.run(..., capture_output=True,
text=True)`` gives.

A ``run`` starts no session here: one that reaches its session (neither refused nor
``--dry-run`` nor ``--print-policy``) fails the test, for a session's process is what its
tests are about (signals, children, the thin client), a real ``sandbridge run``. The thin
client is not asked first, as the command asks it: call this where no daemon serves.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from sandbridge.cli.parser import build_parser, run_parsed
from sandbridge.places import host_commands
from sandbridge.sandbox import host_git
from sandbridge.sandbox.spec import SandboxSpec
from sandbridge.session.options import SessionOptions

# The environment, working directory and standard streams are the process's: one command
# at a time (a test's server thread may call too).
_ONE_AT_A_TIME = threading.Lock()
# The limits a command sets for its own process (open files raised, core files off).
_LIMITS = (resource.RLIMIT_NOFILE, resource.RLIMIT_CORE)


def sandbridge(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    stdin: str = "",
) -> subprocess.CompletedProcess[str]:
    """``sandbridge ARGS`` with ``env`` (else this process's environment) in ``cwd``:
    its exit status and what it wrote."""
    with _ONE_AT_A_TIME, _environment(env), _directory(cwd), _process_kept():
        out, err = _stream(), _stream()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _stdin(stdin):
            status = _status(list(args))
        return subprocess.CompletedProcess(["sandbridge", *args], status, _text(out), _text(err))


def _no_session(
    _factory: Callable[[Path], SandboxSpec], _backend: str, options: SessionOptions
) -> int:
    raise AssertionError(
        f"the run in {options.workdir} was not refused: a session's test starts a real "
        "`sandbridge run`"
    )


def _status(args: list[str]) -> int:
    """What the command's process would exit with (argparse's and ``sys.exit``'s too)."""
    try:
        parsed = build_parser(args[0] if args else None).parse_args(args)
        return run_parsed(parsed, session_runner=_no_session)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)  # sys.exit("message"): printed, status 1
        return 1


def _stream() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8", errors="replace")


@contextlib.contextmanager
def _stdin(text: str) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8")
    try:
        yield
    finally:
        sys.stdin = saved


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    """``env`` for the call (the time zone read again from its ``TZ``, as a process
    starting would)."""
    saved = dict(os.environ)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
        time.tzset()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        time.tzset()


@contextlib.contextmanager
def _directory(cwd: Path | str | None) -> Iterator[None]:
    saved = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved)


@contextlib.contextmanager
def _process_kept() -> Iterator[None]:
    """A fresh process's state for the call; this process's own back after it."""
    logger = logging.getLogger("sandbridge")
    saved_logger = (logger.handlers[:], logger.level, logger.propagate)
    saved_limits = {limit: resource.getrlimit(limit) for limit in _LIMITS}
    distrusted, hanging = set(host_commands._distrusted), dict(host_git._hanging)
    host_commands._distrusted.clear()
    host_git._hanging.clear()
    try:
        yield
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved_logger
        for limit, values in saved_limits.items():
            resource.setrlimit(limit, values)
        host_commands._distrusted.clear()
        host_commands._distrusted.update(distrusted)
        host_git._hanging.clear()
        host_git._hanging.update(hanging)

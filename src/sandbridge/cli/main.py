"""The ``sandbridge`` command (the console script's :func:`entry_point`).

It looks at its arguments before it imports anything else: a ``run`` goes to the thin
client (``thin_run.py``: the standard library alone), which has the user's daemon build
the session and starts the sandbox itself; everything else, and a ``run`` the thin
client cannot carry out (no daemon, ``--no-daemon``, an older daemon: docs/daemon.md),
goes to the full command line (``parser.py``), exactly as without it.
"""

from __future__ import annotations

import contextlib
import os
import sys

TYPE_CHECKING = False  # typing costs the thin client more than this module's work
if TYPE_CHECKING:
    from typing import NoReturn


def main(argv: list[str] | None = None) -> int:
    """The full command line, in this process."""
    from sandbridge.cli.parser import main as full_main

    return full_main(argv)


def entry_point() -> NoReturn:
    """The ``sandbridge`` command: the thin ``run`` client if it can serve, else
    :func:`main`; then out with the status without the interpreter's teardown of every
    module it imported, which costs a ``run`` more than its own work after the sandbox
    ended (20 to 30 ms: docs/history/benchmark-rounds.md). What it printed is flushed
    first; an exception (argparse's exit among them) leaves the usual way, its output
    flushed here too.

    A reader that went away (``sandbridge ls --json | head -c1``) ends the command
    quietly with :data:`READER_GONE`, whichever command was writing, and never with a
    traceback."""
    _open_standard_fds()
    try:
        status = _status(sys.argv[1:])
    except BrokenPipeError:
        os._exit(_reader_gone())
    except SystemExit:
        _flush()
        raise
    if not _flush():
        sys.exit(status)  # a write that failed otherwise (a full disk): reported on the way
    os._exit(status)


# The status of a command whose reader closed its pipe: 128 + SIGPIPE, what a shell reports
# for a command SIGPIPE ended (`set -o pipefail` sees it as coreutils' `ls | head` would be).
READER_GONE = 141


def _status(words: list[str]) -> int:
    status = None
    if words[:1] == ["run"]:
        from sandbridge.cli import thin_run

        status = thin_run.run(words)
    if status is None:
        status = main()
        import logging

        logging.shutdown()
    return status


def _flush() -> bool:
    """Write out what is still buffered; a reader gone meanwhile ends the command as
    :func:`_reader_gone` says. False if another write failed (a full disk): the
    interpreter reports that on its way out, as it always did."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        os._exit(_reader_gone())
    except OSError:
        return False
    return True


def _reader_gone() -> int:
    """What is left to write goes where it still can (one of standard output and error may
    be a file or a terminal), never again to the closed pipe: the caller leaves with
    ``os._exit``, which flushes nothing. :data:`READER_GONE`."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):
            stream.flush()
    return READER_GONE


def _open_standard_fds() -> None:
    """``/dev/null`` on each of descriptors 0, 1 and 2 that whoever started the command
    left closed. Else the next descriptor opened takes its number and is passed on as
    standard input, output or error: a host directory of the session's (the sandbox's
    entry then refused to start, and it was the sandbox's to read), or the thin client's
    connection to the daemon (its builder then held both ends and never saw a killed
    client leave)."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            # The lowest free number: this one (the ones below it are open by now).
            os.set_inheritable(os.open(os.devnull, os.O_RDWR), True)
            if getattr(sys, name) is None:
                setattr(sys, name, open(fd, mode, closefd=False))  # noqa: SIM115


if __name__ == "__main__":
    entry_point()

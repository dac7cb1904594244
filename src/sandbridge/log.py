"""Structured logging: one event name plus fields, one line each, on stderr.

Never pass secrets, request bodies or terminal bytes as fields.

Who reads which: a command's standard error is the owner's terminal, where sandbridge
speaks in human lines (``sandbridge: sandbox port 5173 -> http://...``); the events that
say the same for a machine (``app.registered sandbox_port=5173 ...``) are printed there
only with ``-v``. A daemon's standard error is its log (the journal under systemd): its
events are always written. Warnings, something to act on, are printed everywhere.
"""

from __future__ import annotations

import logging
import sys

from sandbridge.event_line import event_line

_logger = logging.getLogger("sandbridge")


def setup(verbose: bool = False, is_log: bool = False) -> None:
    """Send sandbridge's events to stderr: warnings; info events too when ``is_log``
    (stderr is the process's log, not a person's terminal); everything, debug events
    included, with ``verbose``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("sandbridge: %(message)s"))
    _logger.handlers[:] = [handler]
    _logger.setLevel(logging.DEBUG if verbose else logging.INFO if is_log else logging.WARNING)
    _logger.propagate = False


def info(name: str, **fields: object) -> None:
    """Log an event of the session's life (an app registered, a terminal ended): in a
    log, or with ``-v``."""
    if _logger.isEnabledFor(logging.INFO):
        _logger.info(event_line(name, fields))


def debug(name: str, **fields: object) -> None:
    """Log a diagnostic event (a refused request, an upstream failure)."""
    if _logger.isEnabledFor(logging.DEBUG):
        _logger.debug(event_line(name, fields))


# Finer than debug: an event per step of each browser connection's life (the relay's
# connection.stage), too many for a log even at -v. Tests, or a program that embeds
# sandbridge, turn them on with the "sandbridge" logger's level.
TRACE = 5


def tracing() -> bool:
    """Whether trace events are written (ask first where their fields cost something)."""
    return _logger.isEnabledFor(TRACE)


def trace(name: str, **fields: object) -> None:
    """Log a trace event (a connection's move), written only at level :data:`TRACE`."""
    if _logger.isEnabledFor(TRACE):
        _logger.log(TRACE, event_line(name, fields))


def warning(name: str, **fields: object) -> None:
    """Log something the user should act on."""
    _logger.warning(event_line(name, fields))

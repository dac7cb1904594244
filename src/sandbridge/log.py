"""Structured logging: one event name plus fields, one line each, on stderr.

Never pass secrets, request bodies or terminal bytes as fields.
"""

from __future__ import annotations

import logging
import sys

from sandbridge.event_line import event_line

_logger = logging.getLogger("sandbridge")


def setup(verbose: bool = False) -> None:
    """Send sandbridge's events to stderr (info, or debug with ``verbose``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("sandbridge: %(message)s"))
    _logger.handlers[:] = [handler]
    _logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    _logger.propagate = False


def info(name: str, **fields: object) -> None:
    """Log an event the user wants to see (an app registered, a session ended)."""
    if _logger.isEnabledFor(logging.INFO):
        _logger.info(event_line(name, fields))


def debug(name: str, **fields: object) -> None:
    """Log a diagnostic event (a refused request, an upstream failure)."""
    if _logger.isEnabledFor(logging.DEBUG):
        _logger.debug(event_line(name, fields))


def warning(name: str, **fields: object) -> None:
    """Log something the user should act on."""
    _logger.warning(event_line(name, fields))

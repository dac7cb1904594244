"""Who sees which event (``log.py``): a person's terminal gets warnings, a log (a daemon's
stderr) the session's events too, and ``-v`` everything."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from sandbridge import log


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    logger = logging.getLogger("sandbridge")
    handlers, level, propagate = logger.handlers[:], logger.level, logger.propagate
    yield
    logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate


def _said(capsys: pytest.CaptureFixture[str]) -> list[str]:
    log.debug("relay.refused", port=1)
    log.info("app.registered", sandbox_port=5173)
    log.warning("front.unavailable", port=2)
    return capsys.readouterr().err.splitlines()


def test_a_terminal_gets_warnings_and_no_session_events(capsys: pytest.CaptureFixture[str]) -> None:
    log.setup()
    assert _said(capsys) == ["sandbridge: front.unavailable port=2"]


def test_a_log_gets_the_session_events_too(capsys: pytest.CaptureFixture[str]) -> None:
    log.setup(is_log=True)
    assert _said(capsys) == [
        "sandbridge: app.registered sandbox_port=5173",
        "sandbridge: front.unavailable port=2",
    ]


def test_verbose_prints_every_event(capsys: pytest.CaptureFixture[str]) -> None:
    for is_log in (False, True):
        log.setup(verbose=True, is_log=is_log)
        assert _said(capsys) == [
            "sandbridge: relay.refused port=1",
            "sandbridge: app.registered sandbox_port=5173",
            "sandbridge: front.unavailable port=2",
        ]

"""One event as a line (``event_line.py``): the form ``log`` logs and the sandbox
entry writes to stderr."""

from __future__ import annotations

import pytest

from sandbridge.event_line import event_line, warn


def test_an_event_is_its_name_then_each_field_as_its_repr() -> None:
    assert event_line("publish.failed", {"port": 5173, "reason": "timed out"}) == (
        "publish.failed port=5173 reason='timed out'"
    )


def test_a_warning_is_one_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    warn("auto_publish.refused", port=8000, process="node", reason="a\nb")
    assert (
        capsys.readouterr().err == "auto_publish.refused port=8000 process='node' reason='a\\nb'\n"
    )

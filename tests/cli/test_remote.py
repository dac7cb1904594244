"""``sandbridge connect``'s refusals, each naming the value (cli/remote.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import SANDBRIDGE


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (
            [],
            "sandbridge: give a destination ([USER@]HOST) or --via CMD: a command that reaches "
            "sandbridge serve-stdio",
        ),
        (["--via", "  "], "sandbridge: --via '  ': give a command that runs serve-stdio"),
        (["--via", "x", "--name", "a:b"], "sandbridge: --name 'a:b': use 1-40 characters"),
        (["--via", "x", "--gone-after", "0"], "sandbridge: --gone-after must be positive, got 0"),
        (
            ["--via", "x", "--ssh-agent", "SHA256:abc"],
            "sandbridge: --ssh-agent is not served over connect: your agent is on this machine",
        ),
        (
            ["box", "--clipboard", "read"],
            "sandbridge: --clipboard is not served over connect: the link carries neither the "
            "owner's question nor the clipboard's bytes",
        ),
        (
            ["--via", "x", "--containers"],
            "sandbridge: --containers is not served over connect: a far session's "
            "containers run on the far machine's engine",
        ),
    ],
)
def test_connect_refuses_a_bad_option_naming_it(options: list[str], says: str, xdg: Path) -> None:
    result = subprocess.run(
        [*SANDBRIDGE, "connect", *options],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ},
        timeout=30,
    )
    assert result.returncode != 0
    assert says in result.stderr

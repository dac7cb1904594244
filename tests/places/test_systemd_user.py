"""Whether a systemd user manager answers, asked of ``systemctl --user`` itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbridge.places.systemd_user import user_manager_missing


def test_without_systemctl_the_reason_is_no_systemd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = user_manager_missing(os.environ)
    assert missing == "systemctl is not installed (no systemd on this machine)"


def test_without_a_manager_the_reason_is_systemctls_own_line(tmp_path: Path) -> None:
    # An empty runtime dir and a bus path where nothing listens: no manager to reach,
    # here or on a desktop.
    environ = {
        **os.environ,
        "XDG_RUNTIME_DIR": str(tmp_path),
        "DBUS_SESSION_BUS_ADDRESS": f"unix:path={tmp_path / 'bus'}",
    }
    missing = user_manager_missing(environ)
    assert missing is not None
    assert missing.startswith("systemctl --user: ")
    assert "\n" not in missing

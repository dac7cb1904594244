"""The far machines ``sandbridge ls`` lists (places/remotes.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sandbridge.exceptions import SessionError
from sandbridge.places.remotes import RemoteAppRecord, RemoteEntry, list_remotes
from tests.conftest import PYTHON


def test_a_connected_machine_is_listed_with_its_apps(xdg: Path) -> None:
    entry = RemoteEntry.create("box", "ssh box sandbridge serve-stdio")
    try:
        app = RemoteAppRecord("web", 5173, "/", "http://a.localhost:4000/", 4000)
        entry.update(True, [app])
        [record] = list_remotes()
        assert (record.machine, record.connected, record.apps) == ("box", True, [app])
    finally:
        entry.remove()
    assert list_remotes() == []


def test_a_second_connect_to_the_same_name_is_refused(xdg: Path) -> None:
    entry = RemoteEntry.create("box", "cmd")
    try:
        with pytest.raises(SessionError, match="machine 'box' is already connected"):
            RemoteEntry.create("box", "cmd")
    finally:
        entry.remove()


def test_a_bad_machine_name_is_refused_naming_it(xdg: Path) -> None:
    with pytest.raises(SessionError, match="--name 'a:b'"):
        RemoteEntry.create("a:b", "cmd")


def test_a_killed_connects_machine_is_swept(xdg: Path) -> None:
    script = (
        "import os; from sandbridge.places.remotes import RemoteEntry; "
        "RemoteEntry.create('gone', 'cmd'); os._exit(0)"
    )
    subprocess.run([PYTHON, "-c", script], check=True)
    assert list_remotes() == []
    assert not any((xdg).rglob("gone"))


def test_a_record_written_before_private_far_apps_reads_as_open(xdg: Path) -> None:
    entry = RemoteEntry.create("box", "cmd")
    try:
        record = entry.record.to_json()
        record["connected"] = True
        record["apps"] = [
            {"session": "web", "port": 5173, "base_path": "/", "url": "u", "host_port": 4000}
        ]
        (entry.path / "machine.json").write_text(json.dumps(record))
        [listed] = list_remotes()
        assert [app.private for app in listed.apps] == [False]
    finally:
        entry.remove()

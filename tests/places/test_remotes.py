"""The far machines ``sandbridge ls`` lists (places/remotes.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sandbridge.exceptions import SessionError
from sandbridge.places.remotes import RemoteAppRecord, RemoteEntry, list_remotes
from sandbridge.protocol.far_sessions import FarSession
from sandbridge.protocol.remote_wire import (
    HEADER,
    MAX_APPS,
    MAX_CONTROL_BYTES,
    Apps,
    FarApp,
    Kind,
    LinkState,
    Role,
    encode_apps,
)
from tests.conftest import PYTHON
from tests.protocol.test_remote_wire import received


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


def test_the_largest_record_a_far_machine_can_cause_is_still_listed(xdg: Path) -> None:
    """1,024 far apps whose base paths fill one APPS frame (1 MiB): each app's record
    carries its base path twice (as itself and in its URL), so the record is over
    1 MiB; a record ls would not read made the machine vanish from ls and the
    dashboard while connect went on serving its apps."""
    far, laptop = LinkState(Role.FAR), LinkState(Role.LAPTOP)
    laptop.receive(far.send_hello())
    far.receive(laptop.send_hello())
    base = "/" + "a" * 990
    listed = tuple(FarApp(f"s-{i % 64}", 1 + i, base) for i in range(MAX_APPS))
    [apps] = received(laptop, far.send_apps(listed))
    assert isinstance(apps, Apps)
    label = "a" * 26
    records = [
        RemoteAppRecord(
            a.session, a.port, a.base_path, f"http://{label}.localhost:40000{a.base_path}", 40000
        )
        for a in apps.apps
    ]
    entry = RemoteEntry.create("box", "ssh box sandbridge serve-stdio")
    try:
        entry.update(True, records)
        assert (entry.path / "machine.json").stat().st_size > 1024 * 1024
        listed_now = list_remotes()
        assert [record.machine for record in listed_now] == ["box"]
        assert len(listed_now[0].apps) == MAX_APPS
    finally:
        entry.remove()


def test_a_record_of_far_sessions_written_in_escapes_is_still_listed(xdg: Path) -> None:
    """Far sessions described in one APPS frame with workdirs of 4-byte characters sent
    as raw UTF-8: the record writes each as a 12-byte JSON escape, three times the
    frame's bytes."""
    far, laptop = LinkState(Role.FAR), LinkState(Role.LAPTOP)
    laptop.receive(far.send_hello())
    far.receive(laptop.send_hello())
    described = tuple(
        FarSession(f"s-{i}", "/" + "\U0001f600" * 3999, None, 1.7e9, "none", ()) for i in range(60)
    )
    # Raw UTF-8, as a hostile far side may write it (ours escapes, as the record does).
    payload = json.dumps(encode_apps((), described), ensure_ascii=False).encode()
    assert len(payload) <= MAX_CONTROL_BYTES
    [apps] = received(laptop, HEADER.pack(len(payload), Kind.APPS, 0) + payload)
    assert isinstance(apps, Apps)
    entry = RemoteEntry.create("box", "ssh box sandbridge serve-stdio")
    try:
        entry.update(True, [], apps.sessions)
        assert (entry.path / "machine.json").stat().st_size > 2 * 1024 * 1024
        listed_now = list_remotes()
        assert [record.machine for record in listed_now] == ["box"]
        assert listed_now[0].sessions == described
    finally:
        entry.remove()

"""Publishing from the sandbox entry without the event loop (issue 15): a real session
with ``--publish auto`` and ``--publish PORT`` registers an app started late within
3 s and closes an auto-published one within 3 s after it exits, while the entry never
maps the event loop's libraries and stays under 16 MiB; after a switch to the event
loop (a v1 request) publishing goes on, by the same code. The hostile relay.sock cases
are in tests/relay/inside/test_relay_call.py, test_publish.py and test_auto_publish.py."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    _getaddrinfo,
    event_loop_libraries,
    host_port_of,
    is_sandbox_entry,
    memory_kib,
    port_is_open,
    processes_with,
    request,
)
from tests.egress.test_light_gate import ENTRY_RSS_LIMIT_KIB
from tests.sandbox.test_entry import _serve_one
from tests.session.test_auto_publish import WITHIN, Session, controlled

# --publish PORT's port: published by its own publisher, never by auto-publish.
FIXED_PORT = 8300


@dataclass
class World:
    """The session, its entry's pid and what each step saw."""

    session: Session
    entry: int
    upstream: Path
    seen: dict[str, Any] = field(default_factory=dict)

    def loaded(self) -> list[str]:
        return event_loop_libraries(self.entry)

    def memory_kib(self, field_name: str) -> int:
        return memory_kib(self.entry, field_name)

    def fixed_published(self) -> str:
        line = self.session.process.wait_line(
            f"sandbridge: sandbox port {FIXED_PORT} -> ", "stderr", WITHIN
        )
        return line.rsplit(" ", 1)[1]

    def closed_within_3_s(self, port: int, host_port: int) -> bool:
        """Whether the host port stopped accepting within 3 s of the app's exit (bounded
        polling of what a browser sees), and the host said so."""
        self.session.stop(port)
        deadline = time.monotonic() + WITHIN
        while port_is_open(host_port):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        self.session.process.wait_line(
            f"sandbridge: sandbox port {port} ", "stderr", timeout=WITHIN
        )
        return True


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    work = tmp_path_factory.mktemp("entry-publishing") / "work"
    work.mkdir()
    options = ("--publish", "auto", "--publish", str(FIXED_PORT), "--no-daemon")
    with controlled(work, "bwrap", options) as session:
        marker = str(work / "commands")
        (entry,) = [pid for pid in processes_with(marker) if is_sandbox_entry(pid)]
        xdg = Path(session.env["XDG_RUNTIME_DIR"])
        (upstream,) = xdg.glob("ags-webview-relay-*/upstream.sock")
        running = World(session, entry, upstream)
        with pytest.MonkeyPatch.context() as names:  # localhost_names_resolve, for the module
            names.setattr(socket, "getaddrinfo", _getaddrinfo)
            _run_steps(running)
        yield running


def _run_steps(world: World) -> None:
    seen, session = world.seen, world.session
    seen["loaded_at_start"] = world.loaded()
    session.listen(8101, "late-auto")
    auto_url = session.published(8101, "late-auto")
    seen["auto_answer"] = request(host_port_of(auto_url))[::2]
    session.listen(FIXED_PORT, "late-fixed")
    seen["fixed_answer"] = request(host_port_of(world.fixed_published()))[::2]
    seen["auto_closed"] = world.closed_within_3_s(8101, host_port_of(auto_url))
    seen["loaded_before_switch"] = world.loaded()
    seen["rss_before_switch"] = world.memory_kib("VmRSS")
    seen["peak_before_switch"] = world.memory_kib("VmHWM")
    seen["switch_answer"] = _serve_one(world.upstream)
    seen["loaded_after_switch"] = world.loaded()
    session.listen(8102, "after-switch")
    after_url = session.published(8102, "after-switch")
    seen["after_switch_answer"] = request(host_port_of(after_url))[::2]
    seen["after_switch_closed"] = world.closed_within_3_s(8102, host_port_of(after_url))


def test_an_app_started_late_is_auto_published_within_3_s(world: World) -> None:
    assert world.seen["auto_answer"] == (200, b"hello from late-auto")


def test_an_app_started_late_is_published_by_its_port_within_3_s(world: World) -> None:
    assert world.seen["fixed_answer"] == (200, b"hello from late-fixed")


def test_an_auto_published_app_that_exits_is_closed_within_3_s(world: World) -> None:
    assert world.seen["auto_closed"] is True


def test_the_entry_never_loads_the_event_loop_to_publish(world: World) -> None:
    assert world.seen["loaded_at_start"] == []
    assert world.seen["loaded_before_switch"] == []


def test_the_entry_stays_under_16_mib_while_publishing(world: World) -> None:
    assert world.seen["rss_before_switch"] < ENTRY_RSS_LIMIT_KIB
    assert world.seen["peak_before_switch"] < ENTRY_RSS_LIMIT_KIB


def test_publishing_goes_on_after_the_switch_to_the_event_loop(world: World) -> None:
    assert world.seen["switch_answer"].startswith(b'{"ok":false')
    assert "_asyncio" in world.seen["loaded_after_switch"]
    assert world.seen["after_switch_answer"] == (200, b"hello from after-switch")
    assert world.seen["after_switch_closed"] is True

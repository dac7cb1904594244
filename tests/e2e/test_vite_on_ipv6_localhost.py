"""An agent's ``npm run dev`` on a stock Debian ``/etc/hosts``, through the relay in
Chromium with hot reload.

Debian's and Ubuntu's default ``/etc/hosts`` lists ``localhost`` on ``::1`` too; Node
resolves ``localhost`` to ``::1`` first, so Vite, started the way an agent starts it
(``npm run dev``: no ``--host``, no config), listens on ``[::1]:5173`` only. Each test
binds that file over the sandbox's ``/etc/hosts`` (the test machines' own lists no
``::1 localhost``), checks where Vite really listens (so the test proves the relay reaches
``::1``), and loads the page the owner was given in Chromium: through ``--publish auto``
and ``sandbridge-open http://localhost:5173/``, or through Vite's own ``--open`` (which
calls the sandbox's ``$BROWSER``). A module edited inside updates the page in place over
Vite's hot-reload WebSocket.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from sandbridge.relay.inside.listening_ports import from_proc
from tests.conftest import REPO, Process, is_sandbox_entry, processes_with, run_argv
from tests.e2e.test_real_apps import edit_in_place

VITE_FIXTURE = REPO / "tests" / "apps" / "vite_app"
# Debian's /etc/hosts as the installer writes it (Ubuntu's lists the same localhost lines).
DEBIAN_HOSTS = """\
127.0.0.1\tlocalhost
127.0.1.1\tdebian.example\tdebian

# The following lines are desirable for IPv6 capable hosts
::1     localhost ip6-localhost ip6-loopback
ff02::1 ip6-allnodes
ff02::2 ip6-allrouters
"""
# What an agent's project has: a dev script that runs Vite with its defaults.
PACKAGE_JSON = {"name": "agent-app", "private": True, "type": "module", "scripts": {"dev": "vite"}}
VITE_PORT = 5173  # Vite's default
# Vite's start on a busy 2-core machine.
START_SECONDS = 120
pytestmark = pytest.mark.timeout(300)


def _project(work: Path) -> Path:
    """A Vite project as an agent has it: no config file; ``node_modules`` a directory of
    its own (Vite writes its cache there) whose packages are the fixture's."""
    assert (VITE_FIXTURE / "node_modules" / "vite").is_dir(), "./dev.sh setup installs Vite"
    project = work / "app"
    (project / "node_modules").mkdir(parents=True)
    for name in ("index.html", "main.js", "message.js"):
        shutil.copy(VITE_FIXTURE / name, project / name)
    (project / "package.json").write_text(json.dumps(PACKAGE_JSON))
    for package in (VITE_FIXTURE / "node_modules").iterdir():
        (project / "node_modules" / package.name).symlink_to(package)
    return project


@dataclass
class ViteSession:
    """A running ``sandbridge run`` of an npm command in the project, on a stock Debian
    ``/etc/hosts``; its script waits on ``go`` after starting the dev server."""

    process: Process
    go: Path
    project: Path
    marker: str

    def release(self) -> None:
        """Let the script take its next step (it reads ``go``; blocks until it does)."""
        self.go.write_text("go\n")

    def listening_on(self, port: int) -> list[str]:
        """The addresses ``port`` listens on, read in the sandbox's own network namespace."""
        (entry,) = [pid for pid in processes_with(self.marker) if is_sandbox_entry(pid)]
        return [x.address for x in from_proc(Path(f"/proc/{entry}")) if x.port == port]

    def end(self) -> None:
        """The script's last step: it exits, and the session with it, status 0."""
        self.release()
        assert self.process.popen.wait(60) == 0, self.process.drain("stderr")


@contextlib.contextmanager
def vite_session(tmp_path: Path, dev: str, *options: str, then: str = "") -> Iterator[ViteSession]:
    """``sandbridge run`` of ``dev`` (an npm command line) in the project, until
    :meth:`ViteSession.end`; with ``then``, the test releases the script once before that,
    and it runs ``then``. (One write per read of the pipe, each once the script reads:
    two writes in a row could land in one read.)"""
    work = tmp_path / "work"
    project = _project(work)
    hosts = tmp_path / "hosts"
    hosts.write_text(DEBIAN_HOSTS)
    go = work / "go"
    os.mkfifo(go)
    steps = [f"cd {project}", f"{dev} &", f"read x < {go}"]
    if then:
        steps += [then, f"read x < {go}"]
    marker = f"vite-ipv6-{os.getpid()}-{tmp_path.name}"
    argv = run_argv(
        work,
        "sh",
        "-c",
        "\n".join(steps),
        marker,
        options=("--ro-bind", f"{hosts}:/etc/hosts", *options),
    )
    session = ViteSession(Process(argv), go, project, marker)
    try:
        yield session
    finally:
        if session.process.popen.poll() is None:  # a failed test: end it here
            session.process.stop()


def _assert_vite_listens_on_ipv6_loopback_only(session: ViteSession) -> None:
    found = session.listening_on(VITE_PORT)
    assert found == ["::1"], f"Vite listens on {found}: the test would not prove the fix"


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


def _hot_reloads(page: Page, url: str, project: Path) -> None:
    """The page loads at ``url``, and an edit of a module updates it in place."""
    page.goto(url)
    expect(page.locator("#app")).to_have_text("vite says one", timeout=60_000)
    page.evaluate("window.sandbridgeMarker = 'same page'")
    edit_in_place(project / "message.js", 'export const message = "vite says two";\n')
    expect(page.locator("#app")).to_have_text("vite says two", timeout=30_000)
    # Hot reload, not a reload: the page's own state survived the change.
    assert page.evaluate("window.sandbridgeMarker") == "same page"


def test_npm_run_dev_on_ipv6_localhost_is_auto_published_and_opened(
    tmp_path: Path, xdg: Path, page: Page
) -> None:
    then = f"sandbridge-open http://localhost:{VITE_PORT}/"
    with vite_session(
        tmp_path, "npm run dev", "--publish", "auto", "--open", "print", then=then
    ) as session:
        line = session.process.wait_line(
            f"sandbridge: sandbox port {VITE_PORT} (", "stderr", START_SECONDS
        )
        published = re.fullmatch(rf"sandbridge: sandbox port {VITE_PORT} \(node\) -> (\S+)", line)
        assert published is not None, line
        _assert_vite_listens_on_ipv6_loopback_only(session)
        session.release()  # sandbridge-open http://localhost:5173/
        opened = session.process.wait_line("http://")
        assert opened == published[1]  # the app's one origin, whichever way it was reached
        session.process.wait_line(f"sandbridge: the sandbox opens {opened}", "stderr")
        _hot_reloads(page, opened, session.project)
        session.end()


def test_vites_own_open_on_ipv6_localhost_reaches_the_owner(
    tmp_path: Path, xdg: Path, page: Page
) -> None:
    with vite_session(tmp_path, "npm run dev -- --open", "--open", "print") as session:
        line = session.process.wait_line("sandbridge: the sandbox opens ", "stderr", START_SECONDS)
        url = line.removeprefix("sandbridge: the sandbox opens ")
        _assert_vite_listens_on_ipv6_loopback_only(session)
        _hot_reloads(page, url, session.project)
        session.end()

"""A sandbox session running the feature app (aiohttp: WebSocket, SSE, uploads, media)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import PYTHON, REPO, Process, app_host, host_port_of, run_argv, start_daemon

FEATURE_APP = str(REPO / "tests" / "apps" / "feature_app.py")


class FeatureSession:
    """``sandbridge run -- feature_app.py`` and the URL it registered."""

    def __init__(self, workdir: Path, base: str, options: tuple[str, ...] = ()) -> None:
        self.process = Process(
            run_argv(workdir, PYTHON, FEATURE_APP, "--base", base, options=options)
        )
        report = json.loads(self.process.wait_line("READY").removeprefix("READY "))
        self.url: str = report["url"]
        self.port = host_port_of(self.url)
        self.base = "" if base == "/" else base
        self.host = app_host(self.port)
        self.origin = f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/ws"

    def relay_pids(self) -> list[int]:
        """The host relay process and the in-sandbox shim (the sandbox entry)."""
        host = self.process.popen.pid
        pids = [host]
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            argv = cmdline.split(b"\0")
            is_entry = argv[1:4] == [b"-I", b"-S", b"-c"] and b"sandbridge.sandbox.entry" in argv[4]
            if is_entry and _descends_from(int(entry.name), host):
                pids.append(int(entry.name))
        assert len(pids) == 2, f"expected host and shim processes, found {pids}"
        return pids

    def stop(self) -> None:
        self.process.stop()


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def peak_rss_kib(pid: int) -> int:
    """VmHWM: the most resident memory the process ever had."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


@contextmanager
def feature_session(workdir: Path, base: str = "/", *options: str) -> Iterator[FeatureSession]:
    session = FeatureSession(workdir, base, options)
    try:
        yield session
    finally:
        session.stop()


@contextmanager
def served_by_a_daemon(tmp: Path) -> Iterator[Process]:
    """A daemon in a private XDG_RUNTIME_DIR under ``tmp``, which the block's sessions use
    (for module-scoped sessions, which cannot use the ``daemon`` fixture)."""
    xdg = tmp / "xdg"
    xdg.mkdir(mode=0o700)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_RUNTIME_DIR", str(xdg))
        daemon = start_daemon()
        try:
            yield daemon
        finally:
            daemon.stop()

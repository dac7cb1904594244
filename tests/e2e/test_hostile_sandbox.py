"""Sandbox-side threats: a hostile sandbox attacks the runtime dir and relay.sock."""

from __future__ import annotations

import json
import os
import select
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import PYTHON, REPO, Process, host_port_of, request, run_argv

SABOTEUR = str(REPO / "tests" / "apps" / "saboteur.py")
HOSTILE_SHIM = str(REPO / "tests" / "peers" / "hostile_shim.py")


@contextmanager
def saboteur(workdir: Path, xdg: Path, *args: str) -> Iterator[dict[str, object]]:
    os.mkfifo(workdir / "release")
    process = Process(
        run_argv(workdir, PYTHON, SABOTEUR, *args),
        env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)},
    )
    try:
        yield json.loads(process.wait_line("READY", timeout=60).removeprefix("READY "))
        (workdir / "release").write_text("go")
        assert process.popen.wait(30) == 0
    finally:
        process.stop()


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    work, xdg = tmp_path / "work", tmp_path / "xdg"
    work.mkdir()
    xdg.mkdir(mode=0o700)
    return work, xdg


# In a sandbox `run` starts, the host makes its app connections itself (relay/
# owned_upstream.py) and never opens upstream.sock for them: what the sandbox puts there
# changes nothing. For a sandbox another runtime starts, the host still connects to it,
# checked: tests/relay/host/test_upstream.py, tests/relay/host/test_hostile_shim.py.


def test_symlinked_upstream_socket_is_never_followed(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    host_service = tmp_path / "host-service.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(host_service))
    listener.listen()
    with saboteur(*dirs, "symlink", str(host_service)) as report:
        status, _, body = request(host_port_of(str(report["victim_url"])))
        assert (status, body) == (200, b"ok")  # the app, reached without upstream.sock
        assert select.select([listener], [], [], 0)[0] == [], "the host connected to the target"
    listener.close()


@pytest.mark.parametrize("action", ["file", "fifo"])
def test_non_socket_upstream_costs_the_apps_nothing(dirs: tuple[Path, Path], action: str) -> None:
    with saboteur(*dirs, action) as report:
        status, _, body = request(host_port_of(str(report["victim_url"])))
        assert (status, body) == (200, b"ok")


def test_cleanup_never_follows_links_out_of_the_runtime_dir(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("host data")
    work, xdg = dirs
    with saboteur(work, xdg, "link-out", str(precious)):
        pass
    assert (precious / "keep").read_text() == "host data"
    assert list(xdg.iterdir()) == []


def test_hostile_shim_in_the_sandbox_is_never_asked(dirs: tuple[Path, Path]) -> None:
    with saboteur(*dirs, "hostile-shim", HOSTILE_SHIM) as report:
        port = host_port_of(str(report["victim_url"]))
        for behaviour in ("garbage", "crlf-in-header", "bad-status", "unending-headers"):
            status, _, body = request(port, path=f"/hostile/{behaviour}")
            assert (status, body) == (200, b"ok")  # the app's answer: the shim is not asked
        assert request(port, path="/fine")[0] == 200


def test_registration_abuse_is_refused_and_apps_keep_working(dirs: tuple[Path, Path]) -> None:
    with saboteur(*dirs, "abuse") as report:
        assert report["silent_connections"] == 200
        # 32 wait at most; each later connection pushes the oldest silent one out.
        assert int(report["dropped"]) >= 200 - 32  # type: ignore[call-overload]
        assert report["dropped"] + report["timed_out"] == 200  # type: ignore[operator]
        assert report["huge"] == {"ok": False, "error": "message longer than 4096 bytes"}
        assert str(report["malformed"]["error"]).startswith("message is not valid JSON")  # type: ignore[index]
        assert report["accepted"] == 62  # 64 apps per session, two registered before
        assert report["refusal"] == "this session already has 64 apps; the limit is 64"
        assert request(host_port_of(str(report["good_url"])))[0] == 200

"""Set-up without an event loop: the exit status of a child as a shell gives it, and the
private listening Unix socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from sandbridge.aio.before_loop import MAX_SOCKET_PATH, listen_private, reap
from sandbridge.exceptions import RuntimeDirError


@pytest.mark.parametrize(
    ("script", "status"),
    [("exit 0", 0), ("exit 7", 7), ("kill -TERM $$", 128 + signal.SIGTERM)],
)
def test_reap_gives_the_status_as_a_shell_does(script: str, status: int) -> None:
    pid = os.posix_spawnp("sh", ["sh", "-c", script], os.environ)
    assert reap(pid) == status


def test_reap_of_a_child_that_ended_before_the_wait() -> None:
    child = subprocess.Popen(["true"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped
    assert reap(child.pid) == 0
    child.returncode = 0  # reaped here: Popen must not wait for it again


def test_a_socket_path_longer_than_107_bytes_is_refused_naming_it(tmp_path: Path) -> None:
    fits = tmp_path / ("a" * (107 - len(str(tmp_path)) - 1))
    assert len(str(fits)) == MAX_SOCKET_PATH == 107
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        listen_private(sock, fits, 1)
        assert os.stat(fits).st_mode & 0o777 == 0o600
    too_long = Path(str(fits) + "b")
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock,
        pytest.raises(RuntimeDirError) as caught,
    ):
        listen_private(sock, too_long, 1)
    assert str(caught.value) == (
        f"{too_long}: 108 bytes, longer than the 107 a Unix socket's path may have; "
        "set XDG_RUNTIME_DIR to a shorter directory"
    )
    assert not too_long.exists()


class _SwappedAfterBind(socket.socket):
    """A listening socket whose path the sandbox replaces the moment it is bound: a
    sandbox that loops ``rename(link, "relay.sock")`` in its runtime dir while a
    restarted daemon binds that socket anew (daemon/server.py) lands there now and
    then; here it lands every time."""

    def __init__(self, link_target: Path) -> None:
        super().__init__(socket.AF_UNIX, socket.SOCK_STREAM)
        self.link_target = link_target

    def bind(self, address: object) -> None:
        super().bind(address)  # type: ignore[arg-type]
        path = Path(str(address))
        planted = path.with_name("planted")
        planted.symlink_to(self.link_target)
        os.replace(planted, path)


def test_a_socket_swapped_for_a_link_as_it_is_bound_changes_no_mode_through_the_link(
    tmp_path: Path,
) -> None:
    owners_dir = tmp_path / "home"  # the owner's home, or ~/.ssh: 0600 locks them out
    owners_dir.mkdir(mode=0o755)
    runtime_dir = tmp_path / "runtime"
    runtime_dir.mkdir(mode=0o700)
    path = runtime_dir / "relay.sock"
    with _SwappedAfterBind(owners_dir) as sock, pytest.raises(RuntimeDirError) as caught:
        listen_private(sock, path, 1)
    assert os.stat(owners_dir).st_mode & 0o777 == 0o755
    assert str(caught.value) == (
        f"{path}: replaced by a symbolic link as it was bound (the sandbox can write "
        "its directory); not used"
    )


def test_a_socket_is_bound_0600_under_any_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            listen_private(sock, tmp_path / "s.sock", 1)
    finally:
        os.umask(old)
    assert os.lstat(tmp_path / "s.sock").st_mode & 0o777 == 0o600

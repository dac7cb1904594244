"""A folder the sandbox can change, held by its descriptor: real files, real links, a
real process swapping the folder for a link (renameat2) while the host works in it."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

import pytest

from sandbridge.project.held_folder import HeldFolder
from tests.conftest import PYTHON, Process, swapping


def test_a_link_or_a_file_in_the_folders_place_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError) as caught:
        HeldFolder.make(tmp_path / "link")
    assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR)
    with pytest.raises(OSError) as caught:
        HeldFolder.open(tmp_path / "file")
    assert caught.value.errno == errno.ENOTDIR
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_missing_folder_is_none_unless_made(tmp_path: Path) -> None:
    assert HeldFolder.open(tmp_path / "missing") is None
    assert HeldFolder.open(tmp_path / "no" / "parent") is None
    made = HeldFolder.make(tmp_path / "made", 0o750)
    assert made.path == tmp_path / "made"
    made.close()
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o750 & ~_umask()
    with pytest.raises(FileNotFoundError):
        HeldFolder.make(tmp_path / "no" / "parent")


REMOVER = """
import os, sys
print("removing", flush=True)
while True:
    try:
        os.rmdir(sys.argv[1])
    except OSError:
        pass
"""


def test_a_folder_removed_as_it_is_made_is_an_error_never_nothing(tmp_path: Path) -> None:
    # The sandbox removes `.sandbridge` between the host's mkdir and its open: the host
    # gets ENOENT to refuse with, never a folder of None (an uncaught crash before).
    folder = tmp_path / ".sandbridge"
    remover = Process([PYTHON, "-c", REMOVER, str(folder)])
    made = gone = 0
    try:
        remover.wait_line("removing")
        for _ in range(500):
            try:
                HeldFolder.make(folder).close()
                made += 1
            except FileNotFoundError:
                gone += 1
        assert remover.popen.poll() is None, "the remover stopped"
    finally:
        remover.stop()
    assert made + gone == 500


def test_only_a_regular_file_is_opened_never_through_a_link_nor_blocking(tmp_path: Path) -> None:
    (tmp_path / "f").mkdir()
    (tmp_path / "secret").write_text("the owner's")
    (tmp_path / "f" / "link").symlink_to(tmp_path / "secret")
    os.mkfifo(tmp_path / "f" / "fifo")  # nobody writes: a blocking open would hang
    (tmp_path / "f" / "dir").mkdir()
    (tmp_path / "f" / "plain").write_text("ok")
    with held(tmp_path / "f") as folder:
        with pytest.raises(OSError) as caught:
            folder.open_file("link", os.O_RDONLY)
        assert caught.value.errno == errno.ELOOP
        for name in ("fifo", "dir"):
            with pytest.raises(OSError) as caught:
                folder.open_file(name, os.O_RDONLY)
            assert caught.value.errno == errno.EINVAL, name
            assert caught.value.strerror == "not a regular file"
        fd = folder.open_file("plain", os.O_RDONLY)
        with os.fdopen(fd, "rb") as file:
            assert file.read() == b"ok"
        assert folder.lexists("link") and folder.lexists("fifo")
        assert not folder.lexists("nothing")
    assert folder.fd == -1  # closed at the block's end


def test_replace_writes_whole_with_its_mode_and_replaces_a_link_unfollowed(tmp_path: Path) -> None:
    (tmp_path / "f").mkdir()
    (tmp_path / "target").write_text("the owner's")
    (tmp_path / "f" / "allow").symlink_to(tmp_path / "target")
    old = os.umask(0o077)
    try:
        with held(tmp_path / "f") as folder:
            folder.replace("allow", b"x" * 300_000)
    finally:
        os.umask(old)
    written = tmp_path / "f" / "allow"
    assert not written.is_symlink() and written.read_bytes() == b"x" * 300_000
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    assert (tmp_path / "target").read_text() == "the owner's"
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["allow"]  # no leftover


def test_a_failed_replace_leaves_nothing_behind(tmp_path: Path) -> None:
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "allow").mkdir()  # a directory cannot be renamed over
    with held(tmp_path / "f") as folder, pytest.raises(OSError):
        folder.replace("allow", b"text")
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["allow"]


def test_a_folder_swapped_for_a_link_meanwhile_is_never_written_through(tmp_path: Path) -> None:
    # The sandbox swaps `.sandbridge` for a link to another directory in a loop: each
    # write lands in the real folder (whatever its name is at that moment) or is refused.
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / ".sandbridge").mkdir(parents=True)
    elsewhere.mkdir()
    (project / "link").symlink_to(elsewhere)
    landed = 0
    with swapping(project / ".sandbridge", project / "link"):
        for _ in range(2000):
            with contextlib.suppress(OSError), held(project / ".sandbridge") as folder:
                folder.replace("allow", b"the owner's line\n")  # (or ELOOP, ENOTDIR above)
                landed += 1
            assert list(elsewhere.iterdir()) == [], "a write went through the link"
    assert landed > 0


def held(path: Path) -> HeldFolder:
    folder = HeldFolder.open(path)
    assert folder is not None, path
    return folder


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

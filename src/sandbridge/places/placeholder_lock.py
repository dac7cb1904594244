"""The lock a session holds while it makes or removes its placeholders
(``sandbox/placeholder.py``), so that no session takes a placeholder another session's end
is about to remove.

A placeholder is a mount point of the sandbox that made it, and of any sandbox started
meanwhile in the same project, which takes an identical placeholder as it finds it. A
session's end removes its unchanged placeholders unless another live session's workdir
overlaps them (``Protection.shared_with``). A ``run`` served by the daemon ends for its
client as soon as the command's status is known: its builder takes this lock before it
answers the client and removes the placeholders after (an ``rmdir`` of a directory that
was a mount point waits for the kernel to drop that mount). So a run started once the
client has exited waits here until the removal is done, and then makes its own.

Where: ``.placeholders.lock`` in the state dir (``known_projects.state_dir()``, 0700),
beside the known-projects list's lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from sandbridge.exceptions import SandbridgeError
from sandbridge.places.known_projects import state_dir
from sandbridge.private_dir import make_private_dir

LOCK = ".placeholders.lock"


@contextlib.contextmanager
def held() -> Iterator[bool]:
    """This user's placeholders' lock, held for the block's length; whether it is (a
    state dir that cannot be made or opened gives no lock: the block runs without)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        directory = state_dir()
        directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(make_private_dir(directory, "state dir", SandbridgeError) / LOCK, flags, 0o600)
    except (OSError, SandbridgeError):
        yield False
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield True
    finally:
        os.close(fd)

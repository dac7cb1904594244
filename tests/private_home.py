"""The test suite's own home, and the check that it left the user's alone.

Threat: a test that runs sandbridge with the user's environment writes the user's state.
One run of the suite added 325 temporary paths to the real
``~/.local/state/sandbridge/projects`` (every later sandbox got one mount per path), and
the sessions of tests showed in the user's ``sandbridge ls`` and dashboard.

Defence: before anything imports sandbridge, the top ``conftest.py`` points ``HOME`` and
every ``XDG_*`` directory sandbridge (or a tool it runs) reads at a private tree made for
this process (:func:`make_private_environment`): each test, and every child it starts
with the inherited environment, works there. Tests that need their own directories still
make them (the ``xdg`` fixture, ``monkeypatch.setenv``). Under pytest-xdist each worker
is its own process and gets its own tree.

Proof: :class:`UserState` notes what the user's sandbridge directories hold (names,
types, sizes, modification times: metadata only, no file is opened) when the run starts,
and the run fails at its end if anything there changed (``conftest.py``,
``pytest_sessionfinish``). A session of the user's own that starts or ends while the
suite runs shows as a change too: the message names each path.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

# Every variable through which sandbridge, or a tool it starts (git, npm, pip, a
# browser), finds a directory of the user's.
PRIVATE_VARIABLES = (
    "HOME",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_RUNTIME_DIR",
)
# The names sandbridge gives its entries in a runtime base: the runtime dirs
# (places/runtime_dir.py), this user's state root and its fallbacks (places/registry.py).
RUNTIME_DIR_PREFIX = "ags-webview-relay-"
STATE_ROOT = f"sandbridge-{os.getuid()}"


def make_private_environment(environ: MutableMapping[str, str]) -> Path:
    """Make a private tree (0700, an unpredictable name of its own: one per process, so
    one per xdist worker) and point each of :data:`PRIVATE_VARIABLES` in ``environ`` at a
    directory in it; return the tree. The name is short: sockets live under
    ``XDG_RUNTIME_DIR``, and a socket's path has 107 bytes at most."""
    top = Path(tempfile.mkdtemp(prefix="sbtest-"))
    for name in PRIVATE_VARIABLES:
        path = top / name.removeprefix("XDG_").removesuffix("_HOME").removesuffix("_DIR").lower()
        path.mkdir(mode=0o700)
        environ[name] = str(path)
    return top


@dataclass(frozen=True)
class Entry:
    """What the check notes of one path: never its content."""

    kind: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class UserState:
    """The user's sandbridge directories at one moment, by path (metadata only)."""

    entries: dict[str, Entry]

    @classmethod
    def watched(cls, environ: dict[str, str]) -> list[Path]:
        """Where sandbridge keeps the user's state, config and data, as the user's own
        ``environ`` (the one the run started with) says."""
        home = Path(environ.get("HOME") or os.path.expanduser("~"))

        def base(name: str, default: str) -> Path:
            return Path(environ.get(name) or home / default)

        return [
            base("XDG_STATE_HOME", ".local/state") / "sandbridge",
            base("XDG_CONFIG_HOME", ".config") / "sandbridge",
            base("XDG_DATA_HOME", ".local/share") / "sandbridge",
            base("XDG_CONFIG_HOME", ".config") / "systemd" / "user" / "sandbridge.socket",
            base("XDG_CONFIG_HOME", ".config") / "systemd" / "user" / "sandbridge.service",
        ]

    @classmethod
    def runtime_base(cls, environ: dict[str, str]) -> Path:
        """The user's runtime base: ``$XDG_RUNTIME_DIR``, else ``/tmp``."""
        return Path(environ.get("XDG_RUNTIME_DIR") or "/tmp")

    @classmethod
    def take(cls, environ: dict[str, str]) -> UserState:
        """Note every path under the watched directories, and every sandbridge entry of
        the runtime base (not the base's own time: other programs use it)."""
        entries: dict[str, Entry] = {}
        for top in cls.watched(environ):
            _note(top, entries)
        base = cls.runtime_base(environ)
        try:
            names = sorted(os.listdir(base))
        except OSError:
            names = []
        for name in names:
            if name.startswith((RUNTIME_DIR_PREFIX, f"{STATE_ROOT}.")) or name == STATE_ROOT:
                _note(base / name, entries)
        return cls(entries)

    def changes(self, after: UserState) -> list[str]:
        """One line per path that appeared, went or changed between ``self`` and
        ``after``."""
        lines = []
        for path in sorted(self.entries.keys() | after.entries.keys()):
            before, now = self.entries.get(path), after.entries.get(path)
            if before is None:
                lines.append(f"created: {path}")
            elif now is None:
                lines.append(f"removed: {path}")
            elif before != now:
                lines.append(f"changed: {path} ({before} -> {now})")
        return lines


def _note(path: Path, entries: dict[str, Entry]) -> None:
    """``path`` and, for a directory, everything under it, by ``lstat``: no link is
    followed and no file opened."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    kind = stat.filemode(info.st_mode)[0]
    entries[str(path)] = Entry(kind, info.st_size, info.st_mtime_ns)
    if stat.S_ISDIR(info.st_mode):
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return  # unreadable: its own times still say whether it changed
        for name in names:
            _note(path / name, entries)

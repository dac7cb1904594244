"""An agent's own state for one session: where it lives on the host and how it is bound.

Three homes (docs/agents.md):

* ``kept`` (the default): a sandbridge-owned directory per agent and project,
  ``${XDG_STATE_HOME:-~/.local/state}/sandbridge/agents/<agent>/<project-id>/``, bound
  read-write as the sandbox's home in place of its private tmpfs: a login and history
  (``~/.claude``, ``~/.claude.json``) survive sessions, and the owner's real home is
  never seen. The whole home, not each state path on its own: a file bound on its own is
  a mount point, and the agents that save a file by writing a new one and renaming it
  over the old (bash's history, many a JSON config) get EBUSY from rename(2).
* ``lockdown``: a fresh directory, the same way, removed when the session ends.
* ``host``: the owner's real state paths, each bound at its place in the private home
  (the owner's explicit choice; a file among them is replaced in place only).

Threat: the sandbox writes the kept home, and the host writes the hints into it at the
next start: a link planted there (``.claude/CLAUDE.md -> ~/.bashrc``) would have the host
write the owner's file; and it binds sandbridge's own tooling under it (a Python under
``~``), where a link planted at ``.local`` would carry the bind elsewhere. Defence: every
path the host opens or binds there is walked from the home's descriptor with
``O_NOFOLLOW``, and a link is refused by name (:func:`clear_bind_paths`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sandbridge.agents.hints import with_hints
from sandbridge.agents.home import AgentHome
from sandbridge.agents.profile import AgentProfile
from sandbridge.exceptions import AgentError
from sandbridge.places.known_projects import state_dir
from sandbridge.sandbox.mounts import Mount

# The hints file is a page of text; one far larger is not the agent's instructions.
MAX_INSTRUCTIONS_BYTES = 1024 * 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# The agents' homes, under sandbridge's state dir.
AGENTS_DIR = "agents"
# Enough of the root's digest that two projects of the same name never share a state.
DIGEST_CHARS = 12


@dataclass(frozen=True, slots=True)
class AgentState:
    """One session's state: its home or its binds, and what to remove at its end."""

    # The owner's real state paths, bound at their places (``host`` only).
    mounts: tuple[Mount, ...]
    # The kept or lockdown home, bound as the sandbox's home (None with ``host``).
    directory: Path | None
    home: AgentHome

    def finish(self) -> None:
        """Remove a lockdown's state; kept and host state stay."""
        if self.home is AgentHome.LOCKDOWN and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


def agents_root() -> Path:
    """``${XDG_STATE_HOME:-~/.local/state}/sandbridge/agents``."""
    return state_dir() / AGENTS_DIR


def project_id(root: Path) -> str:
    """The project's directory name and a digest of its full path: readable, and
    distinct for two checkouts of the same name."""
    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:DIGEST_CHARS]
    name = _UNSAFE.sub("_", root.name).strip("._") or "root"
    return f"{name[:40]}-{digest}"


def kept_dir(profile: AgentProfile, root: Path) -> Path:
    """Where ``profile``'s state for the project at ``root`` is kept."""
    return agents_root() / profile.name / project_id(root)


def prepare(
    profile: AgentProfile,
    home: AgentHome,
    root: Path,
    inside_home: Path,
    owner_home: Path | None,
) -> AgentState:
    """The state of ``profile`` for a session of the project at ``root`` whose home inside
    is ``inside_home``: its state paths made if missing (0700 dirs, 0600 files), in the
    kept or lockdown home, or in the owner's real one and bound."""
    if home is AgentHome.HOST:
        if owner_home is None:
            raise AgentError("--agent-home host: HOME is not set to a directory; set it")
        base = owner_home
    elif home is AgentHome.LOCKDOWN:
        parent = _private(agents_root() / profile.name)
        base = Path(tempfile.mkdtemp(prefix=".lockdown-", dir=parent))
    else:
        base = _private(kept_dir(profile, root))
    if home is AgentHome.HOST:
        return AgentState(
            tuple(
                Mount(_ensure_owned(base, p, p in profile.state_files), inside_home / p, True)
                for p in profile.state_paths
            ),
            None,
            home,
        )
    try:
        for path in profile.state_paths:
            _ensure(base, path, path in profile.state_files)
    except BaseException:
        AgentState((), base, home).finish()
        raise
    return AgentState((), base, home)


def _private(path: Path) -> Path:
    """``path`` made if missing, and each directory from sandbridge's state dir down to it,
    0700 (the state dir's parents as ``mkdir -p`` makes them); each must be this user's."""
    top = state_dir()
    top.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for step in [top, *reversed(path.parents), path]:
        if not step.is_relative_to(top):
            continue
        with contextlib.suppress(FileExistsError):
            step.mkdir(mode=0o700)
        info = step.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise AgentError(f"{step}: not a directory of yours (a link?); remove it")
        if step == top and info.st_mode & 0o077:
            raise AgentError(f"{step}: mode {stat.S_IMODE(info.st_mode):o}; run chmod 700 on it")
    return path


def _ensure(base: Path, path: PurePosixPath, is_file: bool) -> Path:
    """``base/path`` made if missing (a file 0600 or a directory 0700), its parents
    0700, never through a link."""
    fd = _open_dir(base, path.parent, create=True)
    try:
        try:
            info = os.stat(path.name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            if is_file:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                os.close(os.open(path.name, flags, 0o600, dir_fd=fd))
            else:
                os.mkdir(path.name, 0o700, dir_fd=fd)
            info = os.stat(path.name, dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)
    wanted = stat.S_ISREG if is_file else stat.S_ISDIR
    if not wanted(info.st_mode):
        kind = "a regular file" if is_file else "a directory"
        raise AgentError(f"{base / path}: not {kind} (a link or another kind); remove it")
    return base / path


def _ensure_owned(base: Path, path: PurePosixPath, is_file: bool) -> Path:
    """The owner's real ``base/path`` (made as the agent would make it if missing); a
    link there is the owner's own (dotfiles) and followed."""
    target = base / path
    if not target.exists():
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if is_file:
            target.touch(mode=0o600)
        else:
            target.mkdir(mode=0o700)
    real = target.resolve()
    if real.is_dir() == is_file:
        kind = "a regular file" if is_file else "a directory"
        raise AgentError(f"--agent-home host: {target} is not {kind}; the profile says it is")
    return real


def _open_dir(base: Path, relative: PurePosixPath, *, create: bool) -> int:
    """A descriptor of ``base/relative``, walked one name at a time without following a
    link (made 0700 on the way with ``create``)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in relative.parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
            try:
                inner = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise AgentError(
                        f"{base / relative}: {part} is a link or not a directory; remove it"
                    ) from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def clear_bind_paths(directory: Path, inside_home: Path, binds: Iterable[Mount]) -> None:
    """Make each bind destination under the sandbox's home a path of real directories in
    the kept or lockdown home ``directory`` (0700 where missing), walked without following
    a link; a link or a file on the way is refused by name.

    The sandbox writes that home, and bwrap (and the unshare init's ``makedirs``) resolve
    a destination's links: a link it left at ``.local`` would make a later session's bind
    of sandbridge's own tooling (a pipx or pyenv Python under ``~``) land elsewhere, and
    the sandbox's first process be a file the sandbox chose, before any of its filters."""
    for bind in binds:
        if not bind.dest.is_relative_to(inside_home) or bind.dest == inside_home:
            continue
        relative = PurePosixPath(bind.dest.relative_to(inside_home))
        walked = relative if bind.source.is_dir() else relative.parent
        os.close(_open_dir(directory, walked, create=True))


def write_hints(directory: Path, instructions: PurePosixPath, block: str) -> Path:
    """Put ``block`` in the session's copy of the agent's instruction file, under
    ``directory`` (the kept or lockdown state, never the owner's real home): the block
    replaced, the rest of the file kept. The file's path."""
    fd = _open_dir(directory, instructions.parent, create=True)
    try:
        try:
            file_fd = os.open(
                instructions.name,
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                0o600,
                dir_fd=fd,
            )
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise AgentError(
                    f"{directory / instructions}: a link; remove it (the hints are never "
                    "written through one)"
                ) from None
            raise
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "r+b") as file:
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            raise AgentError(f"{directory / instructions}: not a regular file; remove it")
        current = file.read(MAX_INSTRUCTIONS_BYTES + 1)
        if len(current) > MAX_INSTRUCTIONS_BYTES:
            raise AgentError(
                f"{directory / instructions}: larger than {MAX_INSTRUCTIONS_BYTES} bytes; trim it"
            )
        text = with_hints(current.decode("utf-8", errors="replace"), block)
        file.seek(0)
        file.truncate()
        file.write(text.encode())
    return directory / instructions

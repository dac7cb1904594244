"""``sandbridge policy survey``: what a project declares about the network, without values.

The survey walks a project directory and hands each file it knows (manifests, lockfiles,
registry configuration, git config, compose, devcontainer, Procfile, ``.env``-style and
CI files) to a reader (:mod:`sandbridge.survey.packages`,
:mod:`sandbridge.survey.services`), which returns names: ecosystems, hosts, ports,
variables. It changes nothing and starts nothing.

The project is hostile input: the walk never follows a symbolic link (directories are
opened relative to their parent's descriptor with ``O_NOFOLLOW``, so a link swapped in
meanwhile is refused too), opens only regular files (a FIFO would block), and bounds the
depth, the entries looked at, the files read and the bytes of each. Whatever it skips
(too large, binary, not UTF-8, a link) becomes a note naming the file, never an error.
Every name, path and text a finding or note holds is one printable line (control and
line-separator characters escaped, :func:`~sandbridge.shown_text.shown`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sandbridge.exceptions import PolicyError
from sandbridge.shown_text import shown
from sandbridge.survey import packages as survey_packages
from sandbridge.survey import services as survey_services
from sandbridge.survey.findings import Finding, Kind, Reader, host_display

# A project tree deeper than this is generated (node_modules-like), not declared.
MAX_DEPTH = 12
# Directory entries looked at in all: enough for a large monorepo's own files.
MAX_ENTRIES = 100_000
# Files read in all: every known file of a large monorepo.
MAX_FILES = 2_000
# A manifest or configuration file people write; past this it is not one.
MAX_FILE_BYTES = 1024 * 1024
# Lockfiles are machine-written: a large project's package-lock.json is a few MiB.
MAX_LOCKFILE_BYTES = 16 * 1024 * 1024
# Findings kept in all: a lockfile of a million URL lines (16 MiB, 2,000 such files)
# would otherwise hold gigabytes of findings in memory; far past what a policy can list.
MAX_FINDINGS = 20_000
# How many notes are kept (the count of the rest is still given).
MAX_NOTES = 50
# Directories of installed or generated files: what they hold was not declared here.
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".sandbridge",
        "node_modules",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "target",
        ".gradle",
        ".next",
        ".cache",
        "site-packages",
    }
)
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_OPEN_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
KIND_ORDER = (Kind.ECOSYSTEM, Kind.HOST, Kind.SERVICE, Kind.PORT, Kind.VARIABLE, Kind.IMAGE)


@dataclass(frozen=True, slots=True)
class Note:
    """Something the survey did not read, and why (``where`` relative to the directory)."""

    where: str
    text: str

    def __post_init__(self) -> None:  # a path of the project: one printable line
        object.__setattr__(self, "where", shown(self.where))


@dataclass
class Survey:
    """What one directory declares: findings in the order found, and notes."""

    directory: Path
    findings: list[Finding] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    notes_dropped: int = 0
    entries_seen: int = 0
    files_read: int = 0

    def note(self, where: str, text: str) -> None:
        if len(self.notes) < MAX_NOTES:
            self.notes.append(Note(where, text))
        else:
            self.notes_dropped += 1

    def keep(self, where: str, found: list[Finding]) -> None:
        """Add a file's findings, up to :data:`MAX_FINDINGS` in all."""
        room = MAX_FINDINGS - len(self.findings)
        if len(found) > room:
            self.note(where, f"more than {MAX_FINDINGS} findings in all: the rest not kept")
        self.findings += found[: max(0, room)]

    def of(self, kind: Kind) -> list[Finding]:
        """Findings of ``kind``, each (name, where, what) once."""
        seen: set[tuple[str, str, str]] = set()
        result = []
        for finding in self.findings:
            key = (finding.name, finding.where, finding.what)
            if finding.kind is kind and key not in seen:
                seen.add(key)
                result.append(finding)
        return result

    def ecosystems(self) -> dict[str, list[str]]:
        """Each ecosystem found, with the files that showed it."""
        result: dict[str, list[str]] = {}
        for finding in self.of(Kind.ECOSYSTEM):
            where = result.setdefault(finding.name, [])
            if finding.where not in where:
                where.append(finding.where)
        return result

    def to_json(self) -> dict[str, object]:
        return {
            "directory": str(self.directory),
            "findings": [f.to_json() for kind in KIND_ORDER for f in self.of(kind)],
            "notes": [{"where": n.where, "note": n.text} for n in self.notes],
            "notes_dropped": self.notes_dropped,
            "entries_seen": self.entries_seen,
            "files_read": self.files_read,
        }


def survey(directory: Path) -> Survey:
    """Survey ``directory`` (read-only); refuse only a directory that cannot be opened."""
    try:
        fd = os.open(directory, _OPEN_DIR)
    except OSError as exc:
        raise PolicyError(f"{directory}: cannot survey it: {exc.strerror}") from None
    result = Survey(directory)
    try:
        _walk(result, fd, "", 0)
        _read_git_dir(result, fd)
    finally:
        os.close(fd)
    return result


def _reader(relative: str) -> Reader | None:
    return survey_packages.reader_for(relative) or survey_services.reader_for(relative)


def _walk(result: Survey, fd: int, prefix: str, depth: int) -> None:
    entries: list[os.DirEntry[str]] = []
    try:
        with os.scandir(fd) as listing:
            for entry in listing:  # never more than the budget in memory
                if result.entries_seen >= MAX_ENTRIES:
                    result.note(prefix or ".", f"stopped after {MAX_ENTRIES} entries")
                    break
                result.entries_seen += 1
                entries.append(entry)
    except OSError as exc:
        result.note(prefix or ".", f"cannot list: {exc.strerror}")
        return
    subdirs = []
    for entry in sorted(entries, key=lambda e: e.name):
        if _visit(result, fd, entry, prefix):
            subdirs.append(entry.name)
    for name in subdirs:
        if depth + 1 > MAX_DEPTH:
            result.note(f"{prefix}{name}", f"deeper than {MAX_DEPTH} directories: not surveyed")
            continue
        try:
            child = os.open(name, _OPEN_DIR, dir_fd=fd)
        except OSError as exc:
            result.note(f"{prefix}{name}", f"cannot open: {exc.strerror}")
            continue
        try:
            _walk(result, child, f"{prefix}{name}/", depth + 1)
        finally:
            os.close(child)


def _visit(result: Survey, fd: int, entry: os.DirEntry[str], prefix: str) -> bool:
    """Read ``entry`` if a reader knows it; True if it is a directory to walk into."""
    relative = f"{prefix}{entry.name}"
    try:
        is_link = entry.is_symlink()
        is_dir = not is_link and entry.is_dir(follow_symlinks=False)
    except OSError:
        return False
    reader = _reader(relative)
    if is_dir:
        return entry.name not in SKIPPED_DIRS
    if is_link and reader is not None:
        result.note(relative, "a symbolic link: not followed")
    elif reader is not None:
        _read(result, fd, entry.name, relative, reader)
    return False


def _read(result: Survey, dir_fd: int, name: str, relative: str, reader: Reader) -> None:
    if result.files_read >= MAX_FILES:
        result.note(relative, f"more than {MAX_FILES} files to read: not read")
        return
    if len(result.findings) >= MAX_FINDINGS:  # reading more would only cost time
        result.note(relative, f"more than {MAX_FINDINGS} findings in all: not read")
        return
    limit = MAX_LOCKFILE_BYTES if name in survey_packages.LOCKFILES else MAX_FILE_BYTES
    text = read_text(result, dir_fd, name, relative, limit)
    if text is None:
        return
    result.files_read += 1
    result.keep(relative, reader(relative, text))


def read_text(result: Survey, dir_fd: int, name: str, relative: str, limit: int) -> str | None:
    """A regular file's text (never through a link, never blocking), or a note and ``None``."""
    data, why = _load(dir_fd, name, limit)
    if data is not None and b"\0" in data:
        data, why = None, "binary (holds NUL bytes)"
    if data is not None:
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            why = f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    result.note(relative, f"{why}: not read")
    return None


def _load(dir_fd: int, name: str, limit: int) -> tuple[bytes | None, str]:
    """The bytes of a regular file of at most ``limit`` bytes, or ``None`` and why not."""
    try:
        fd = os.open(name, _OPEN_FILE, dir_fd=dir_fd)
    except OSError as exc:
        return None, f"cannot open ({exc.strerror})"
    with contextlib.closing(os.fdopen(fd, "rb")) as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "not a regular file"
        try:
            data = file.read(limit + 1)
        except OSError as exc:
            return None, f"cannot read ({exc.strerror})"
    if len(data) > limit:
        return None, f"larger than {limit} bytes"
    return data, ""


def _read_git_dir(result: Survey, fd: int) -> None:
    """``.git/config``'s remotes, read as a file; a ``.git`` file or link is not followed."""
    try:
        info = os.stat(".git", dir_fd=fd, follow_symlinks=False)
    except OSError:
        return
    if not stat.S_ISDIR(info.st_mode):
        result.note(".git", "not a directory (a worktree, submodule or link): not followed")
        return
    try:
        git_fd = os.open(".git", _OPEN_DIR, dir_fd=fd)
    except OSError as exc:
        result.note(".git", f"cannot open: {exc.strerror}")
        return
    try:
        text = read_text(result, git_fd, "config", ".git/config", MAX_FILE_BYTES)
    finally:
        os.close(git_fd)
    if text is not None:
        result.files_read += 1
        result.keep(".git/config", survey_services.read_git_config(".git/config", text))


# --- printing ----------------------------------------------------------------------------


def describe(result: Survey) -> Iterator[str]:
    """The survey as text: each name with where it was seen; never a value."""
    yield (
        f"survey of {shown(str(result.directory))} ({result.entries_seen} entries looked at, "
        f"{result.files_read} files read)"
    )
    ecosystems = result.ecosystems()
    yield "ecosystems:"
    for name, where in ecosystems.items():
        files = ", ".join(where[:4]) + (f" and {len(where) - 4} more" if len(where) > 4 else "")
        yield f"  {name:<10} {files}"
    if not ecosystems:
        yield "  (none)"
    sections = (
        (Kind.HOST, "hosts the project's tools reach:"),
        (Kind.SERVICE, "host services (ports of this host):"),
        (Kind.PORT, "ports the project serves:"),
        (Kind.VARIABLE, "environment variables (names only):"),
        (Kind.IMAGE, "container images:"),
    )
    for kind, title in sections:
        yield title
        found = result.of(kind)
        # One line a name: a lockfile names its file host once per package (hundreds of
        # lines of one host); the first place stands for the rest, which are counted.
        grouped: dict[str, list[Finding]] = {}
        for finding in found:
            name = host_display(finding.name, finding.port) if kind is Kind.HOST else finding.name
            grouped.setdefault(name, []).append(finding)
        for name, same in grouped.items():
            first = same[0]
            more = f" (and {len(same) - 1} more)" if len(same) > 1 else ""
            yield f"  {name:<28} {first.where:<36} {first.what}{more}"
        if not found:
            yield "  (none)"
    if result.notes:
        yield "notes:"
        for note in result.notes:
            yield f"  {note.where}: {note.text}"
        if result.notes_dropped:
            yield f"  ... and {result.notes_dropped} more"

"""The host's git, asked questions about a project without running anything of the project.

The project's own git configuration may have been written by an earlier sandbox: asking
git about it must not run its ``core.fsmonitor``, its hooks or a pager. Every call here
turns those off on the command line (which wins over every config file), drops the
caller's ``GIT_*`` variables (a ``GIT_DIR`` would point elsewhere) and takes no optional
locks, so it writes nothing into the repository either.

Nor may a file the sandbox planted hold it: before each call, the files git will open are
checked (``git_reads.py``: a FIFO, socket or device there is refused, naming it), and a
repository where git timed out anyway is not asked again in this process, so a session's
start or end waits the timeout at most once per repository. Both raise
:class:`GitNotRun`; a caller that cannot get an answer says so, never "nothing found".
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sandbridge.exceptions import GitNotRun
from sandbridge.places import host_commands
from sandbridge.sandbox import git_reads

# Command-line settings beat every config file: nothing configured in the project runs.
# safe.directory: these questions are safe in any repository, and the answer must not
# depend on who owns it (sandbridge run as root on a user's checkout protects the same).
HARDENING = (
    "--no-pager",
    "-c",
    "safe.directory=*",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.untrackedCache=false",
)
# Each question reads a few files; a git that takes longer than this is stuck (a FIFO as
# a config file, a hung network file system) and sandbridge refuses to guess.
GIT_TIMEOUT_SECONDS = 20.0
# git's own limit on nested includes (config.c, MAX_INCLUDE_DEPTH): deeper, git stops.
MAX_INCLUDE_DEPTH = 10


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One ``key=value`` of ``git config --list --show-origin``: where it was set, if a file."""

    origin: Path | None
    key: str
    value: str


def available() -> bool:
    return host_commands.which("git") is not None


# Repositories (git dir, else the directory asked) where git timed out, with that message:
# for the rest of this process (one ``sandbridge run``: its start and its end) git is not
# run there again, so a file nobody foresaw costs the timeout once, not once per question.
_hanging: dict[Path, str] = {}


def run_git(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the host's hardened git in ``cwd``; never raises for a git error.

    With ``--stdin``, ``stdin`` holds the paths asked, each ended by a NUL: their ignore
    files are checked as those of a path on the command line are.

    Raises :class:`GitNotRun` instead of running git when a file it would open is not a
    file (git would hang), and when git timed out in that repository, now or before."""
    asked = [] if stdin is None or "--stdin" not in args else stdin.split("\0")[:-1]
    repository = git_reads.check(cwd, args, asked)
    key = Path(os.path.abspath(cwd if repository is None else repository.git_dir))
    if key in _hanging:
        raise GitNotRun(_hanging[key])
    git = host_commands.which("git")  # never one the sandbox could have put on PATH
    if git is None:
        return subprocess.CompletedProcess(
            ["git", *args], 128, "", "git: not found on PATH outside the sandbox's places"
        )
    env = {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", PAGER="cat")
    try:
        result = subprocess.run(
            [git, *HARDENING, *args],
            cwd=cwd,
            env=env,
            input=None if stdin is None else os.fsencode(stdin),
            capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        where = key if repository is None or repository.top is None else repository.top
        _hanging[key] = (
            f"git timed out after {GIT_TIMEOUT_SECONDS:g} s in the repository {where} "
            f"(git {' '.join(args[:2])}): a file there blocks it (a FIFO?); not asked again "
            "in this run. Find it and remove it."
        )
        raise GitNotRun(_hanging[key]) from None
    except OSError as exc:
        return subprocess.CompletedProcess(["git", *args], 128, "", str(exc))
    # Decoded as file names are (os.fsdecode): the names git lists are the sandbox's to
    # choose, and one that is not UTF-8 (text=True raised UnicodeDecodeError, out of the
    # session's end before its other warnings were said) or holds a CR (text=True read it
    # as a LF) must come back as the name it is.
    return subprocess.CompletedProcess(
        result.args, result.returncode, os.fsdecode(result.stdout), os.fsdecode(result.stderr)
    )


def toplevel(directory: Path) -> Path | None:
    """The work tree top that contains ``directory``, as the owner's git finds it.

    Where git's discovery finds no repository (``git_reads.find``, from the directory's
    real path, which git starts from: no ``.git`` upwards, no bare repository), git is
    not run: it would say "not a git repository", and a run in a directory outside
    every repository waited for that answer (a git process) at each start."""
    if not available() or git_reads.find(Path(os.path.realpath(directory))) is None:
        return None
    result = run_git(directory, "rev-parse", "--show-toplevel")
    if result.returncode != 0 or not result.stdout.strip():
        return None
    return Path(result.stdout.strip()).resolve()


def config_entries(top: Path) -> list[ConfigEntry]:
    """Every setting the owner's git sees in ``top``, includes followed, with its file.

    The files an include names and the ``core.excludesFile`` a setting names are opened by
    git too; ``git_reads`` cannot know them, so they are checked here: the includes before
    git follows them, the excludes file before ``check-ignore`` is asked."""
    if not available():
        return []
    entries = _check_included_files(top)
    if entries is None:
        result = run_git(top, "config", "--list", "--show-origin", "--includes", "-z")
        if result.returncode != 0:
            return []
        entries = _entries(top, result.stdout)
    for entry in entries:
        if entry.key == "core.excludesfile" and entry.value:
            git_reads.ensure_file(top / os.path.expanduser(entry.value))
    return entries


def _check_included_files(top: Path) -> list[ConfigEntry] | None:
    """Check each file an ``include.path`` or ``includeIf.*.path`` names, whatever its
    condition, level by level (each level listed without following includes), as deep as
    git goes.

    Where the first level names no include, git would follow none: its listing is every
    setting, returned so that git is not asked again (``None``: ask with includes)."""
    level: list[tuple[str, ...]] = [()]
    seen: set[Path] = set()
    first: list[ConfigEntry] | None = None
    for depth in range(MAX_INCLUDE_DEPTH):
        following: list[tuple[str, ...]] = []
        for source in level:
            listed = run_git(
                top, "config", *source, "--list", "--show-origin", "--no-includes", "-z"
            )
            entries = _entries(top, listed.stdout) if listed.returncode == 0 else []
            if depth == 0 and listed.returncode == 0:
                first = entries
            for entry in entries:
                key = entry.key
                if not (key == "include.path" or key.startswith("includeif.")):
                    continue
                first = None  # git follows includes: ask it to
                if not (key.endswith(".path") and entry.value):
                    continue
                base = top if entry.origin is None else entry.origin.parent
                target = base / os.path.expanduser(entry.value)  # an absolute value wins
                git_reads.ensure_file(target)
                if target.is_file() and target not in seen:
                    seen.add(target)
                    following.append(("-f", str(target)))
        level = following
    return first


def _entries(top: Path, listed: str) -> list[ConfigEntry]:
    fields = listed.split("\0")
    entries = []
    for origin, item in zip(fields[0::2], fields[1::2], strict=False):
        key, _, value = item.partition("\n")
        path = None
        if origin.startswith("file:"):
            path = (top / origin.removeprefix("file:")).resolve()
        entries.append(ConfigEntry(path, key.lower(), value))
    return entries


def _ls_files(top: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``git ls-files ARGS`` on the index as it is: a sparse index (the sandbox's own
    config and index may make one) is not expanded, since expanding reads trees from the
    object store, where a FIFO would hold git (a directory out of the sparse cone is
    one skip-worktree entry, ``DIR/``). A git older than 2.35 has no ``--sparse``, and
    no sparse index to expand."""
    result = run_git(top, "ls-files", "--sparse", *args)
    if result.returncode != 0 and "unknown option `sparse'" in result.stderr:
        result = run_git(top, "ls-files", *args)
    return result


@dataclass(frozen=True, slots=True)
class IndexFacts:
    """What the index of one work tree says that the owner's review depends on."""

    # Submodule checkouts: gitlinks in the index and paths in ``.gitmodules``.
    submodules: list[Path]
    # Entries git status does not check (assume-unchanged or skip-worktree): a change to
    # such a file shows in neither ``git status`` nor ``git diff``.
    hidden: frozenset[str]


def index_facts(top: Path) -> IndexFacts:
    """``top``'s submodules and hidden entries, from one ``ls-files --stage -v``.

    Each record is ``TAG MODE OBJECT STAGE\tNAME``: a gitlink has mode 160000; the tag is
    ``S`` for skip-worktree and lower case for assume-unchanged."""
    if not available():
        return IndexFacts([], frozenset())
    paths: set[str] = set()
    hidden: set[str] = set()
    listed = _ls_files(top, "--stage", "-v", "-z")
    if listed.returncode == 0:
        for record in listed.stdout.split("\0"):
            meta, _, name = record.partition("\t")
            tag, _, entry = meta.partition(" ")
            if not name:
                continue
            if entry.startswith("160000 "):
                paths.add(name)
            if tag == "S" or (len(tag) == 1 and tag.islower()):
                hidden.add(name)
    if (top / ".gitmodules").is_file():
        listed = run_git(top, "config", "-f", ".gitmodules", "-z", "--get-regexp", r"\.path$")
        if listed.returncode == 0:
            for item in listed.stdout.split("\0"):
                _, _, value = item.partition("\n")
                if value:
                    paths.add(value)
    submodules = []
    for name in sorted(paths):
        # The names are the sandbox's to choose: a link to itself is no error here (as
        # Path.resolve's RuntimeError was), only a path that is not below ``top``.
        path = Path(os.path.realpath(top / name))
        if path.is_relative_to(top) and path != top:
            submodules.append(path)
    return IndexFacts(submodules, frozenset(hidden))


def ignoring_rule(top: Path, relative: str) -> str | None:
    """``source:line:pattern`` of the rule by which the owner's git ignores ``relative``."""
    return ignoring_rules(top, [relative]).get(relative)


def ignoring_rules(top: Path, relatives: list[str]) -> dict[str, str]:
    """Of ``relatives``, those the owner's git ignores, each with the rule
    (``source:line:pattern``) that ignores it: one ``check-ignore`` for all of them.

    The names go on git's standard input, NUL-terminated, and each gets a record back
    (``--non-matching``: empty fields for a name no pattern matches), in NUL-separated
    fields (``-z``): a name may hold any byte but NUL. A name a negation (``!pattern``)
    matched last is not ignored. A name git cannot answer (one beyond a symbolic link, or
    in a submodule) stops it after the records of the names before: that name counts as
    not ignored, and git is asked again for the names after it."""
    rules: dict[str, str] = {}
    left = list(relatives)
    while left and available():
        result = run_git(
            top,
            "check-ignore",
            "-v",
            "-n",
            "-z",
            "--no-index",
            "--stdin",
            stdin="".join(f"{relative}\0" for relative in left),
        )
        fields = result.stdout.split("\0")
        answered = 0
        for source, line, pattern, name in zip(
            fields[0::4], fields[1::4], fields[2::4], fields[3::4], strict=False
        ):
            if answered == len(left) or name != left[answered]:
                break  # not the answer to the next name asked: nothing after it is read
            answered += 1
            if source and line.isdigit() and not pattern.startswith("!"):
                rules[name] = f"{source}:{line}:{pattern}"
        if result.returncode in (0, 1) and answered == len(left):
            break
        left = left[answered + 1 :]  # past the name git stopped at: not taken as ignored
    return rules

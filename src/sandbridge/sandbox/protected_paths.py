"""What stays read-only inside the sandbox's writable mounts, because the owner's tools run it.

The workdir and every ``--bind`` are writable inside, and the owner's own tools later run
or obey some files there without showing them in a review: git's config, hooks and info
files (``core.fsmonitor`` runs on the next ``git status``), a ``.git`` file that points
git elsewhere, submodules' git dirs, editor task files, package-manager settings, direnv,
shell start-up files, sandbridge's own policy. :func:`decide` is the one place that says
which paths those are for one session; the backends only apply its list
(:attr:`SandboxSpec.read_only_paths`), after the workdir and the binds.

Two mount tricks carry the defence:

- a read-only bind of a path onto itself: writes fail with ``EROFS``, and the path cannot
  be renamed, removed or replaced, because a mount point cannot (``EBUSY``);
- a writable bind of a directory onto itself ("pin"): the directory stays writable but is
  a mount point, so ``mv .git .git-old; mkdir .git`` fails. Every directory between a
  writable mount and a protected path is pinned the same way.

A path that does not exist cannot be a mount point, so the sandbox could create it. For
directories (``.git/hooks``, ``.vscode``, ``.sandbridge``...) sandbridge creates an empty
placeholder on the host first (git shows no empty directory) and removes it at session end
if it is still empty. A missing file is created as an empty placeholder only where no
review would show it anyway (inside a git dir, in home, where the owner's git ignores the
path); elsewhere a new file shows in ``git status``, and sandbridge also names it at
session end (docs/security.md, "residual risks").

What no mount can stop is compared with the start and named at session end
(:meth:`Protection.finish`, with ``session_end.py``): a submodule the sandbox staged, a
new repository (bare ones too), index entries newly hidden from ``git status``
(assume-unchanged, skip-worktree).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sandbridge.exceptions import SandboxError
from sandbridge.path_within import is_within
from sandbridge.sandbox import host_git, session_end
from sandbridge.sandbox.deny_list import HOME_ENTRIES, PROJECT_ENTRIES, Entry
from sandbridge.sandbox.mounts import Mount
from sandbridge.sandbox.placeholder import Placeholder
from sandbridge.sandbox.project import POLICY_DIR
from sandbridge.sandbox.repositories import (
    first_line,
    git_dirs_below,
    gitdir_of,
    nested_repositories_and_policy_dirs,
    path_value,
)
from sandbridge.shown_text import shown

# What a git dir holds that the owner's git runs or obeys: its config (fsmonitor, hooks
# path, filters, aliases, includes), hooks, info/ (exclude hides files from review,
# attributes), commondir (moves the config elsewhere), gitdir (a worktree's way back).
GIT_DIR_FILES = ("config", "config.worktree", "commondir", "gitdir")
GIT_DIR_DIRS = ("hooks", "info")
# A missing commondir would redirect the owner's git; "." names the git dir itself.
COMMONDIR_PLACEHOLDER = b".\n"


OWN_INSTALLATION = "sandbridge's own installation, which the host runs"


@dataclass(frozen=True)
class GitFacts:
    """What :func:`decide` asks the owner's git (the hardened host git, or a test's stub)."""

    config_entries: Callable[[Path], list[host_git.ConfigEntry]] = host_git.config_entries
    index_facts: Callable[[Path], host_git.IndexFacts] = host_git.index_facts
    ignoring_rules: Callable[[Path, list[str]], dict[str, str]] = host_git.ignoring_rules
    toplevel: Callable[[Path], Path | None] = host_git.toplevel


@dataclass
class Protection:
    """One session's protected paths: mounts for the backends, and their placeholders."""

    # Applied in order after the workdir and the binds (SandboxSpec.read_only_paths): a
    # writable entry pins a directory as a mount point, a read-only one protects a path.
    mounts: list[Mount] = field(default_factory=list)
    placeholders: list[Placeholder] = field(default_factory=list)
    # Deny-listed files that do not exist and got no placeholder: named if they appear.
    watched: list[Path] = field(default_factory=list)
    reasons: dict[Path, str] = field(default_factory=dict)
    # What no mount can stop, compared at session end with the start and named (each is
    # something the owner's git would obey or hide, docs/security.md):
    # - registered submodules of each work tree in a writable mount: one staged by the
    #   sandbox (a gitlink to a repository it made) is entered by the owner's git status;
    submodules: dict[Path, frozenset[Path]] = field(default_factory=dict)
    # - index entries marked assume-unchanged or skip-worktree: their changes are hidden;
    hidden: dict[Path, frozenset[str]] = field(default_factory=dict)
    # - repositories (a .git) in the writable mounts: git run inside a new one obeys it.
    scan_roots: list[Path] = field(default_factory=list)
    repositories: frozenset[Path] = frozenset()
    # - policy directories (a .sandbridge) in the writable mounts: outside git, a
    #   sandbridge run in a new one's directory obeys it.
    policy_dirs: frozenset[Path] = frozenset()
    # The project root: every session of the project (a nested workdir too) has a view of
    # its .sandbridge, whose placeholder is a mount point in that session's sandbox.
    project_root: Path | None = None
    # The policy directory, held open (``O_PATH``) from when the placeholders exist to the
    # session's end, so that its inode number cannot be reused: the sandbox's mounts lie
    # on that directory, and the kernel drops them if the owner removes or renames it,
    # so a new one made there is seen, and writable, inside.
    policy_dir_fd: int | None = None
    git: GitFacts = field(default_factory=GitFacts)

    def create_placeholders(self) -> None:
        """Create every placeholder (outermost first); undo them all if one fails."""
        made: list[Placeholder] = []
        siblings = {placeholder.path: placeholder for placeholder in self.placeholders}
        try:
            for placeholder in self.placeholders:
                placeholder.create(siblings)
                made.append(placeholder)
        except OSError as exc:
            for placeholder in reversed(made):
                placeholder.remove_if_unchanged()
            raise SandboxError(
                f"cannot create the placeholder {exc.filename}: {exc.strerror}; "
                "it keeps the sandbox from creating that path"
            ) from None
        if self.project_root is not None:
            with contextlib.suppress(OSError):
                self.policy_dir_fd = os.open(
                    self.project_root / POLICY_DIR,
                    os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                )

    def shared_with(self, workdirs: Iterable[Path]) -> bool:
        """Whether another session's workdir overlaps this one's writable mounts: its
        sandbox may have these placeholders as mount points (removing one would take its
        protection away), so they stay."""
        roots = [*self.scan_roots, *([] if self.project_root is None else [self.project_root])]
        return any(
            is_within(other, root) or is_within(root, other) for other in workdirs for root in roots
        )

    def finish(self, keep_placeholders: bool = False) -> list[str]:
        """Remove unchanged placeholders (unless ``keep_placeholders``: then
        :meth:`remove_placeholders` may do it later); return a warning for each thing the
        sandbox left that the owner's tools would obey unseen (the same whether the
        placeholders are still there or not)."""
        replaced = session_end.policy_dir_replaced(self.project_root, self.policy_dir_fd)
        if self.policy_dir_fd is not None:  # checked before its own placeholder goes
            os.close(self.policy_dir_fd)
            self.policy_dir_fd = None
        if not keep_placeholders:
            self.remove_placeholders()
        repositories, policy_dirs = session_end.nested_now(self.scan_roots)
        ours = self._unchanged_placeholders()  # an empty .git of ours is no repository
        index = session_end.index_now([*self.submodules, *self.hidden], self.git.index_facts)
        made = {placeholder.path for placeholder in self.placeholders}
        # The sandbox names what these warnings name (a directory, a file, a submodule's
        # path, what git says): an ESC, CR or LF in a name would erase the warning on the
        # owner's terminal or write a line of its own, so every one is shown escaped.
        return [
            shown(warning)
            for warning in (
                *replaced,
                *session_end.new_files(self.watched, self.reasons),
                *session_end.new_submodules(self.submodules, index, ours),
                *session_end.new_hidden(self.hidden, index),
                *session_end.new_repositories(repositories, self.repositories, ours),
                *session_end.new_policy_dirs(policy_dirs, self.policy_dirs, made),
            )
        ]

    def remove_placeholders(self) -> None:
        """Remove the placeholders still as sandbridge made them (innermost first)."""
        for placeholder in reversed(self.placeholders):
            placeholder.remove_if_unchanged()

    def _unchanged_placeholders(self) -> set[Path]:
        """The placeholders still there as sandbridge made them (gone at the end, if not yet)."""
        siblings = {placeholder.path: placeholder for placeholder in self.placeholders}
        return {p.path for p in self.placeholders if p.is_unchanged(siblings)}


class _Decision:
    """Collects read-only paths, pins and placeholders for one set of writable mounts."""

    def __init__(self, mounts: list[Mount], git: GitFacts) -> None:
        self.mounts = mounts
        self.writable = [m for m in mounts if m.writable]
        self.git = git
        self.read_only: dict[Path, str] = {}
        self.pinned: set[Path] = set()
        self.placeholders: dict[Path, Placeholder] = {}
        self.watched: dict[Path, str] = {}
        self.git_dirs_seen: set[Path] = set()
        self.registered: dict[Path, frozenset[Path]] = {}
        self.hidden: dict[Path, frozenset[str]] = {}
        self.repositories: set[Path] = set()
        self.policy_dirs: set[Path] = set()

    # --- where a host path is writable inside --------------------------------------------

    def exposures(self, path: Path) -> list[tuple[Mount, Path]]:
        """(writable mount, inside path) for each place ``path`` is writable inside."""
        found = []
        for index, mount in enumerate(self.mounts):
            if not mount.writable or not is_within(path, mount.source):
                continue
            inside = mount.dest.joinpath(*path.parts[len(mount.source.parts) :])
            if any(is_within(inside, later.dest) for later in self.mounts[index + 1 :]):
                continue  # a later mount lies on top; it is handled as its own mount
            found.append((mount, inside))
        return found

    def is_writable(self, path: Path) -> bool:
        return bool(self.exposures(path))

    # --- the three ways of protecting ----------------------------------------------------

    def protect(self, path: Path, reason: str) -> None:
        """Read-only inside, if it exists and is writable there."""
        if path.is_symlink():
            # A link cannot be a mount point: protect what it names, which is what the
            # owner's tools read (the link itself stays replaceable: docs/security.md).
            path = path.resolve()
        if self.is_writable(path) and (path.exists() or path in self.placeholders):
            self.read_only.setdefault(path, reason)

    def pin(self, directory: Path) -> None:
        made = self.placeholders.get(directory)
        exists = directory.is_dir() and not directory.is_symlink()
        if self.is_writable(directory) and (exists or (made is not None and made.content is None)):
            self.pinned.add(directory)

    def placeholder(self, path: Path, content: bytes | None, reason: str) -> None:
        """Create ``path`` (and missing parents, as empty dirs) on the host, read-only inside."""
        if not self.is_writable(path) or path.exists() or path.is_symlink():
            return
        missing = []
        parent = path.parent
        while not parent.exists() and not parent.is_symlink() and self.is_writable(parent):
            missing.append(parent)
            parent = parent.parent
        if not parent.is_dir() or parent.is_symlink():
            return  # a parent that is a file or a link: nothing can be created there
        for directory in reversed(missing):
            self.placeholders.setdefault(directory, Placeholder(directory, None))
        self.placeholders.setdefault(path, Placeholder(path, content))
        self.read_only.setdefault(path, reason)

    def policy_dir(self, path: Path) -> None:
        """The project's ``.sandbridge`` exists for the whole session, also where no writable
        mount shows it (a workdir below the project root): each view of it inside is a
        tmpfs (SandboxSpec.policy_dir), which needs a directory to lie on, and a directory
        the owner creates later would otherwise show through the read-only root."""
        if os.path.lexists(path) or path in self.placeholders:
            return
        parent = path.parent
        if parent.is_dir() and not parent.is_symlink() and os.access(parent, os.W_OK):
            self.placeholders[path] = Placeholder(path, None)

    def entries(
        self, anchor: Path, entries: Iterable[Entry], top: Path | None, home: bool = False
    ) -> None:
        """The deny-listed ``entries`` below ``anchor`` (in work tree ``top``, if any).

        One that exists is read-only; a directory that does not gets a placeholder. A
        file that does not exist gets an empty placeholder where no review shows one: in
        home (start-up files nobody reviews) and where the owner's git ignores the path
        (asked once for all of them); elsewhere the file is watched: a new one shows in
        ``git status``, and sandbridge names it at session end.
        """
        missing: list[tuple[Path, str]] = []
        for entry in entries:
            path = anchor / entry.path
            if path.exists() or path.is_symlink():
                self.protect(path, entry.reason)
            elif entry.directory:
                self.placeholder(path, None, entry.reason)
            elif self.is_writable(path):
                missing.append((path, entry.reason))
        ignored: set[Path] = set()
        if not home and top is not None:
            asked = {
                str(path.relative_to(top)): path for path, _ in missing if is_within(path, top)
            }
            ignored = {asked[name] for name in self.git.ignoring_rules(top, list(asked))}
        for path, reason in missing:
            if home or path in ignored:
                self.placeholder(path, b"", reason)
            else:
                self.watched.setdefault(path, reason)

    # --- git -------------------------------------------------------------------------------

    def work_tree(self, top: Path) -> None:
        """``top``'s ``.git`` (a directory, or a file naming one) and everything it reaches."""
        dot_git = top / ".git"
        if dot_git.is_symlink():
            self.git_dir(dot_git.resolve())
        elif dot_git.is_file():
            self.protect(dot_git, "a .git file names the git dir the owner's git uses")
            target = gitdir_of(dot_git)
            if target is not None:
                self.git_dir(target)
        elif dot_git.is_dir():
            self.git_dir(dot_git)

    def git_dir(self, directory: Path) -> None:  # noqa: PLR0912  (each file git reads from a git dir, in git's order)
        directory = directory.resolve()
        if directory in self.git_dirs_seen or not directory.is_dir():
            return
        self.git_dirs_seen.add(directory)
        self.pin(directory)
        reason = "git runs or obeys it (config, hooks, excludes)"
        for name in GIT_DIR_FILES:
            path = directory / name
            if path.exists() or path.is_symlink():
                self.protect(path, reason)
            elif name == "commondir":
                self.placeholder(path, COMMONDIR_PLACEHOLDER, reason)
            elif name == "config.worktree":
                self.placeholder(path, b"", reason)
        for name in GIT_DIR_DIRS:
            path = directory / name
            if path.exists() or path.is_symlink():
                self.protect(path, reason)
            else:
                self.placeholder(path, None, reason)
        common = directory / "commondir"
        if common.is_file() and not common.is_symlink():
            target = path_value(first_line(common), directory)
            if target is not None and target != directory:
                self.git_dir(target)
        for sub in git_dirs_below(directory / "modules"):
            self.git_dir(sub)
        worktrees = directory / "worktrees"
        if worktrees.is_dir() and not worktrees.is_symlink():
            for sub in sorted(worktrees.iterdir()):
                self.git_dir(sub)

    def git_config(self, top: Path) -> None:
        """Files the owner's git config reads in ``top``, and files its values name."""
        for item in self.git.config_entries(top):
            if item.origin is not None:
                self.protect(item.origin, "a git config file the owner's git reads")
            key = item.key
            if key == "core.hookspath":
                target = path_value(item.value, top)
                if target is not None:
                    if target.exists() or target.is_symlink():
                        self.protect(target, "core.hooksPath: hooks the owner's git runs")
                    else:
                        self.placeholder(target, None, "core.hooksPath")
                continue
            if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
                base = item.origin.parent if item.origin is not None else top
                self.config_file(path_value(item.value, base), key)
                continue
            if key in ("core.excludesfile", "core.attributesfile"):
                self.config_file(path_value(item.value, top), key)
                continue
            # fsmonitor, sshCommand, gpg.program, filter and diff drivers, aliases: a
            # value naming a file of the project is a command the owner's git may run. A
            # bare word is looked up in PATH, not here: only values with a slash count.
            words = item.value.split()
            for candidate in {item.value, words[0] if words else ""}:
                if "/" not in candidate:
                    continue
                path = path_value(candidate, top)
                if path is not None and path.is_file():
                    self.protect(path, f"named by the owner's git config ({key})")

    def config_file(self, target: Path | None, key: str) -> None:
        if target is None:
            return
        if target.exists() or target.is_symlink():
            self.protect(target, f"{key}: read by the owner's git")
        else:
            self.placeholder(target, b"", f"{key}: read by the owner's git")

    def submodules(self, top: Path) -> list[Path]:
        """Checkouts of ``top``'s registered submodules (the owner's git status enters them)."""
        tops = []
        index = self.git.index_facts(top)
        registered = index.submodules
        if self.is_writable(top / ".git"):
            self.registered[top] = frozenset(registered)
            self.hidden[top] = index.hidden
        for path in registered:
            dot_git = path / ".git"
            if dot_git.exists() or dot_git.is_symlink():
                tops.append(path)
            else:
                # An empty .git dir is no git dir: the owner's git sees the submodule as
                # not checked out, and the sandbox cannot put a .git file there.
                self.placeholder(dot_git, None, "a submodule's .git: its git dir runs")
        return tops

    # --- the result ----------------------------------------------------------------------

    def result(self) -> Protection:
        for path in list(self.read_only) + list(self.pinned):
            for mount, _ in self.exposures(path):
                ancestor = path.parent
                while ancestor != mount.source and is_within(ancestor, mount.source):
                    self.pin(ancestor)
                    ancestor = ancestor.parent
        read_only = set(self.read_only)
        targets = [(path, False) for path in read_only] + [
            (path, True) for path in self.pinned - read_only
        ]
        mounts: list[Mount] = []
        # Outer paths first: a bind brings the host's path without the mounts made inside
        # it, so a pin must come before the read-only paths below it; nothing is mounted
        # inside a read-only path (it is read-only as a whole).
        for path, writable in sorted(targets, key=lambda t: (len(t[0].parts), str(t[0]))):
            if any(path != top and is_within(path, top) for top in read_only):
                continue
            for _, inside in self.exposures(path):
                mounts.append(Mount(path, inside, writable))
        placeholders = sorted(self.placeholders.values(), key=lambda p: len(p.path.parts))
        reasons = {**self.watched, **self.read_only}
        return Protection(
            mounts,
            placeholders,
            sorted(self.watched),
            reasons,
            submodules=self.registered,
            hidden=self.hidden,
            scan_roots=[mount.source for mount in self.writable],
            repositories=frozenset(self.repositories),
            policy_dirs=frozenset(self.policy_dirs),
            git=self.git,
        )


def decide(  # noqa: PLR0912, PLR0913  (the walk over mounts, repositories and entries; keyword-only inputs)
    mounts: list[Mount],
    project_root: Path,
    *,
    home: Path | None = None,
    protect: Iterable[tuple[Path, str]] = (),
    own: Iterable[Path] = (),
    git: GitFacts | None = None,
) -> Protection:
    """The protected paths for a sandbox whose mounts are ``mounts`` (the workdir first).

    ``project_root`` is where the policy lives; ``home`` the owner's real home (its start-up
    files matter when a writable mount is or holds it); ``protect`` the policy's extra
    paths with their source lines; ``own`` where the host's Python and sandbridge live.
    """
    decision = _Decision(mounts, git or GitFacts())
    tops: list[Path] = []
    seen: set[Path] = set()

    def add_top(top: Path) -> None:
        if top not in seen:
            seen.add(top)
            tops.append(top)

    if os.path.lexists(project_root / ".git"):
        add_top(project_root)
    for mount in decision.writable:
        repositories, policy_dirs = nested_repositories_and_policy_dirs(mount.source)
        decision.policy_dirs.update(policy_dirs)
        for top in repositories:
            decision.repositories.add(top)
            if os.path.lexists(top / ".git"):
                add_top(top)
            else:
                decision.git_dir(top)
    index = 0
    while index < len(tops):
        top = tops[index]
        index += 1
        decision.work_tree(top)
        decision.git_config(top)
        for sub in decision.submodules(top):
            add_top(sub)
    anchors: dict[Path, Path | None] = {
        project_root: project_root if project_root in seen else None
    }
    for mount in decision.writable:
        if mount.source not in anchors:  # the project root's is known: no git to ask
            anchors[mount.source] = decision.git.toplevel(mount.source)
    for top in tops:
        anchors.setdefault(top, top)
    for anchor, anchor_top in anchors.items():
        decision.entries(anchor, PROJECT_ENTRIES, anchor_top)
    if home is not None and decision.is_writable(home):
        decision.entries(home, HOME_ENTRIES, None, home=True)  # git is not asked there
    for path, source in protect:
        if path.exists() or path.is_symlink():
            decision.protect(path, f"protect = in {source}")
        else:
            decision.placeholder(path, None, f"protect = in {source}")
    for path in own:
        # The code the host runs (this and every later sandbridge command, its .pth
        # files, its interpreter): a sandbox that rewrote it would run on the host.
        decision.protect(path, OWN_INSTALLATION)
    decision.policy_dir(project_root / POLICY_DIR)
    protection = decision.result()
    protection.project_root = project_root
    return protection

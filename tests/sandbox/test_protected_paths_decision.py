"""The decision of what to protect (sandbox/protected_paths.py), without a sandbox.

The owner's git is a stub here (:class:`GitFacts`), so each rule is tested on its own; the
real git and real sandboxes are in ``test_protected_paths.py``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbridge.exceptions import PolicyError, SandboxError
from sandbridge.project.policy import PolicyBuilder
from sandbridge.sandbox.host_git import ConfigEntry, IndexFacts
from sandbridge.sandbox.mounts import Mount
from sandbridge.sandbox.placeholder import Placeholder
from sandbridge.sandbox.protected_paths import (
    COMMONDIR_PLACEHOLDER,
    GitFacts,
    Protection,
    decide,
)


def facts(
    config: list[ConfigEntry] | None = None,
    submodules: list[Path] | None = None,
    ignored: set[str] | None = None,
) -> GitFacts:
    return GitFacts(
        config_entries=lambda top: list(config or []),
        index_facts=lambda top: IndexFacts(list(submodules or []), frozenset()),
        ignoring_rules=lambda top, names: {n: "x:1:y" for n in names if n in (ignored or set())},
        toplevel=lambda path: None,
    )


def git_dir(top: Path) -> Path:
    directory = top / ".git"
    for name in ("hooks", "info", "objects", "refs"):
        (directory / name).mkdir(parents=True)
    (directory / "HEAD").write_text("ref: refs/heads/main\n")
    (directory / "config").write_text("[core]\n")
    return directory


def workdir(path: Path) -> list[Mount]:
    return [Mount(path, path, writable=True)]


def read_only(protection: Protection) -> set[Path]:
    return {m.dest for m in protection.mounts if not m.writable}


def pinned(protection: Protection) -> set[Path]:
    return {m.dest for m in protection.mounts if m.writable}


def placeholders(protection: Protection) -> dict[Path, bytes | None]:
    return {p.path: p.content for p in protection.placeholders}


def test_git_dir_config_hooks_info_are_read_only_and_the_git_dir_is_pinned(
    tmp_path: Path,
) -> None:
    dot_git = git_dir(tmp_path)
    protection = decide(workdir(tmp_path), tmp_path, git=facts())
    assert {dot_git / "config", dot_git / "hooks", dot_git / "info"} <= read_only(protection)
    assert dot_git in pinned(protection)
    assert dot_git / "objects" not in read_only(protection)


def test_missing_commondir_gets_a_placeholder_naming_the_git_dir_itself(tmp_path: Path) -> None:
    dot_git = git_dir(tmp_path)
    protection = decide(workdir(tmp_path), tmp_path, git=facts())
    assert placeholders(protection)[dot_git / "commondir"] == COMMONDIR_PLACEHOLDER
    assert placeholders(protection)[dot_git / "config.worktree"] == b""
    assert dot_git / "commondir" in read_only(protection)


def test_git_dir_outside_the_writable_mounts_is_left_to_the_read_only_host(
    tmp_path: Path,
) -> None:
    git_dir(tmp_path)
    (tmp_path / "src").mkdir()
    protection = decide(workdir(tmp_path / "src"), tmp_path, git=facts())
    assert not any(m.dest.is_relative_to(tmp_path / ".git") for m in protection.mounts)


def test_bind_with_another_destination_is_protected_where_it_is_seen(tmp_path: Path) -> None:
    project = tmp_path / "project"
    git_dir(project)
    (tmp_path / "work").mkdir()
    mounts = [*workdir(tmp_path / "work"), Mount(project, Path("/srv/p"), writable=True)]
    protection = decide(mounts, tmp_path / "work", git=facts())
    config = [m for m in protection.mounts if m.source == project / ".git" / "config"]
    assert [(m.dest, m.writable) for m in config] == [(Path("/srv/p/.git/config"), False)]


def test_read_only_bind_on_top_needs_no_protection(tmp_path: Path) -> None:
    git_dir(tmp_path)
    mounts = [*workdir(tmp_path), Mount(tmp_path / ".git", tmp_path / ".git", writable=False)]
    protection = decide(mounts, tmp_path, git=facts())
    assert not any(m.dest.is_relative_to(tmp_path / ".git") for m in protection.mounts)


def test_pins_come_before_the_read_only_paths_below_them(tmp_path: Path) -> None:
    top = tmp_path / "a" / "b"
    dot_git = git_dir(top)
    protection = decide(workdir(tmp_path), top, git=facts())
    order = [m.dest for m in protection.mounts]
    assert order.index(tmp_path / "a") < order.index(top) < order.index(dot_git)
    assert order.index(dot_git) < order.index(dot_git / "config")
    assert {tmp_path / "a", top, dot_git} <= pinned(protection)


def test_submodule_git_dirs_and_a_missing_checkout_git(tmp_path: Path) -> None:
    dot_git = git_dir(tmp_path)
    module = dot_git / "modules" / "libs" / "one"
    (module / "hooks").mkdir(parents=True)
    (module / "HEAD").write_text("x\n")
    (module / "config").write_text("[core]\n")
    (tmp_path / "libs" / "one").mkdir(parents=True)
    (tmp_path / "libs" / "one" / ".git").write_text(f"gitdir: {module}\n")
    (tmp_path / "two").mkdir()
    protection = decide(
        workdir(tmp_path),
        tmp_path,
        git=facts(submodules=[tmp_path / "libs" / "one", tmp_path / "two"]),
    )
    assert {module / "config", module / "hooks", tmp_path / "libs" / "one" / ".git"} <= (
        read_only(protection)
    )
    assert placeholders(protection)[tmp_path / "two" / ".git"] is None


def test_the_end_warns_alike_with_the_placeholders_still_there(tmp_path: Path) -> None:
    """A thin client's run removes them after its client exits (cli/sessions.py): what
    the end names is decided with them there, and a submodule's empty ``.git``
    placeholder is no repository the sandbox made, nor a submodule with a git dir."""

    def ended(root: Path, removed_in_finish: bool) -> list[str]:
        git_dir(root)
        (root / "two").mkdir()
        protection = decide(workdir(root), root, git=facts(submodules=[root / "two"]))
        protection.create_placeholders()
        assert (root / "two" / ".git").is_dir()
        (root / "made" / ".git").mkdir(parents=True)  # what the sandbox made
        if removed_in_finish:
            return [w.replace(str(root), "ROOT") for w in protection.finish()]
        warnings = protection.finish(keep_placeholders=True)
        protection.remove_placeholders()
        assert not (root / "two" / ".git").exists()
        return [w.replace(str(root), "ROOT") for w in warnings]

    assert ended(tmp_path / "a", removed_in_finish=True) == [
        "WARNING: the sandbox created a git repository at ROOT/made: git run there obeys "
        "its config; inspect ROOT/made/.git or remove it"
    ]
    assert ended(tmp_path / "b", removed_in_finish=False) == ended(tmp_path / "c", True)


def test_worktree_git_file_and_commondir_are_followed(tmp_path: Path) -> None:
    main = git_dir(tmp_path / "main")
    linked = main / "worktrees" / "wt"
    linked.mkdir(parents=True)
    (linked / "HEAD").write_text("x\n")
    (linked / "commondir").write_text("../..\n")
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text(f"gitdir: {linked}\n")
    protection = decide(workdir(tmp_path / "wt"), tmp_path / "wt", git=facts())
    assert tmp_path / "wt" / ".git" in read_only(protection)
    # The linked git dir lies outside the workdir: read-only as part of the host already.
    protection = decide(workdir(tmp_path), tmp_path / "wt", git=facts())
    assert {linked / "commondir", linked / "config.worktree", main / "config"} <= read_only(
        protection
    )


def test_config_files_and_path_values_are_protected(tmp_path: Path) -> None:
    dot_git = git_dir(tmp_path)
    (tmp_path / "hooks-here").mkdir()
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "monitor").write_text("")
    (tmp_path / "included").write_text("")
    (tmp_path / "main").write_text("")
    config = [
        ConfigEntry(dot_git / "config", "core.hookspath", "hooks-here"),
        ConfigEntry(dot_git / "config", "include.path", "../included"),
        ConfigEntry(dot_git / "config", "includeif.onbranch:x.path", "../missing.inc"),
        ConfigEntry(dot_git / "config", "core.fsmonitor", "tools/monitor --flag"),
        ConfigEntry(dot_git / "config", "init.defaultbranch", "main"),  # a bare word
        ConfigEntry(None, "core.hookspath", "/dev/null"),  # the command line's
    ]
    protection = decide(workdir(tmp_path), tmp_path, git=facts(config=config))
    assert {
        tmp_path / "hooks-here",
        tmp_path / "included",
        tmp_path / "tools" / "monitor",
    } <= read_only(protection)
    assert placeholders(protection)[tmp_path / "missing.inc"] == b""
    assert tmp_path / "main" not in read_only(protection)


def test_missing_hooks_path_directory_gets_a_placeholder(tmp_path: Path) -> None:
    dot_git = git_dir(tmp_path)
    config = [ConfigEntry(dot_git / "config", "core.hookspath", ".husky/_")]
    protection = decide(workdir(tmp_path), tmp_path, git=facts(config=config))
    assert placeholders(protection)[tmp_path / ".husky"] is None
    assert placeholders(protection)[tmp_path / ".husky" / "_"] is None
    # .husky itself is on the built-in list: read-only as a whole, nothing mounted below.
    assert tmp_path / ".husky" in read_only(protection)
    assert tmp_path / ".husky" / "_" not in {m.dest for m in protection.mounts}


def test_missing_file_gets_a_placeholder_only_where_git_ignores_it(tmp_path: Path) -> None:
    git_dir(tmp_path)
    protection = decide(workdir(tmp_path), tmp_path, git=facts(ignored={".envrc"}))
    assert placeholders(protection)[tmp_path / ".envrc"] == b""
    assert tmp_path / ".npmrc" not in placeholders(protection)
    assert tmp_path / ".npmrc" in protection.watched


def test_missing_deny_listed_directories_get_empty_placeholders(tmp_path: Path) -> None:
    protection = decide(workdir(tmp_path), tmp_path, git=facts())
    made = placeholders(protection)
    for name in (".sandbridge", ".vscode", ".idea", ".devcontainer", ".claude/commands"):
        assert made[tmp_path / name] is None
        assert tmp_path / name in read_only(protection)
    # .claude is made to hold its protected parts; it stays writable but cannot be renamed.
    assert tmp_path / ".claude" in pinned(protection)


def test_bare_repository_below_the_workdir_gets_the_git_dir_protection(tmp_path: Path) -> None:
    bare = tmp_path / "vendor" / "mirror.git"
    for name in ("objects", "refs", "hooks"):
        (bare / name).mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    (bare / "config").write_text("[core]\n\tbare = true\n")
    protection = decide(workdir(tmp_path), tmp_path, git=facts())
    assert {bare / "config", bare / "hooks"} <= read_only(protection)
    assert {tmp_path / "vendor", bare} <= pinned(protection)
    assert protection.repositories == frozenset({bare})


def test_build_tool_configs_that_run_code_are_listed(tmp_path: Path) -> None:
    (tmp_path / ".cargo").mkdir()
    (tmp_path / ".cargo" / "config.toml").write_text("")
    (tmp_path / "mise.toml").write_text("")
    protection = decide(workdir(tmp_path), tmp_path, git=facts())
    assert {tmp_path / ".cargo" / "config.toml", tmp_path / "mise.toml"} <= read_only(protection)
    assert placeholders(protection)[tmp_path / ".mvn"] is None


def test_home_start_up_files_only_when_home_is_writable(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("")
    protection = decide(workdir(tmp_path / "home"), home, home=home, git=facts())
    assert home / ".bashrc" in read_only(protection)
    assert placeholders(protection)[home / ".zshenv"] == b""
    (tmp_path / "work").mkdir()
    protection = decide(workdir(tmp_path / "work"), tmp_path / "work", home=home, git=facts())
    assert not any(m.dest.is_relative_to(home) for m in protection.mounts)


def test_symlinked_entry_protects_its_target(tmp_path: Path) -> None:
    (tmp_path / "real-vscode").mkdir()
    (tmp_path / ".vscode").symlink_to("real-vscode")
    protection = decide(workdir(tmp_path), tmp_path, git=facts())
    assert tmp_path / "real-vscode" in read_only(protection)
    assert tmp_path / ".vscode" not in {m.dest for m in protection.mounts}


def test_protect_lines_add_paths(tmp_path: Path) -> None:
    (tmp_path / "deploy.sh").write_text("")
    protection = decide(
        workdir(tmp_path),
        tmp_path,
        protect=[(tmp_path / "deploy.sh", "c:1"), (tmp_path / "out", "c:2")],
        git=facts(),
    )
    assert {tmp_path / "deploy.sh", tmp_path / "out"} <= read_only(protection)
    assert placeholders(protection)[tmp_path / "out"] is None


def test_placeholders_are_removed_only_while_unchanged(tmp_path: Path) -> None:
    empty_dir = Placeholder(tmp_path / "d", None)
    used_dir = Placeholder(tmp_path / "u", None)
    file = Placeholder(tmp_path / "commondir", COMMONDIR_PLACEHOLDER)
    changed = Placeholder(tmp_path / "changed", b"")
    protection = Protection(placeholders=[empty_dir, used_dir, file, changed])
    protection.create_placeholders()
    (tmp_path / "u" / "owner-file").write_text("mine")
    (tmp_path / "changed").write_text("the owner wrote here")
    assert protection.finish() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["changed", "u"]


def test_an_identical_placeholder_made_meanwhile_is_taken_anything_else_refused(
    tmp_path: Path,
) -> None:
    """Two sessions starting together in one project decide the same placeholders."""
    (tmp_path / "d").mkdir()
    (tmp_path / "commondir").write_bytes(COMMONDIR_PLACEHOLDER)
    (tmp_path / ".claude" / "agents").mkdir(parents=True)  # with its nested placeholder
    Protection(
        placeholders=[
            Placeholder(tmp_path / "d", None),
            Placeholder(tmp_path / "commondir", COMMONDIR_PLACEHOLDER),
            Placeholder(tmp_path / ".claude", None),
            Placeholder(tmp_path / ".claude" / "agents", None),
            Placeholder(tmp_path / ".claude" / "hooks", None),
        ]
    ).create_placeholders()
    assert (tmp_path / ".claude" / "hooks").is_dir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "config").write_text("[core]\n\tfsmonitor = evil\n")
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    for taken in (Placeholder(tmp_path / "full", None), Placeholder(tmp_path / "link", None)):
        with pytest.raises(SandboxError, match="File exists"):
            Protection(placeholders=[taken]).create_placeholders()


def test_a_watched_file_that_appears_is_named(tmp_path: Path) -> None:
    protection = Protection(watched=[tmp_path / ".npmrc"], reasons={tmp_path / ".npmrc": "npm"})
    assert protection.finish() == []
    (tmp_path / ".npmrc").write_text("x")
    assert protection.finish() == [
        f"WARNING: the sandbox created {tmp_path / '.npmrc'} (npm): review it before your "
        "tools use it"
    ]


def test_placeholders_stay_while_another_session_shares_the_workdir(tmp_path: Path) -> None:
    protection = Protection(
        placeholders=[Placeholder(tmp_path / "p", None)], scan_roots=[tmp_path / "work"]
    )
    protection.create_placeholders()
    assert protection.shared_with([tmp_path / "work" / "sub"])
    assert protection.shared_with([tmp_path])
    assert not protection.shared_with([tmp_path / "other"])
    assert protection.finish(keep_placeholders=True) == []
    assert (tmp_path / "p").is_dir()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("../x", "protect = ../x: outside the project root {root}"),
        ("/etc/passwd", "protect = /etc/passwd: give a path relative to {root}"),
        ("link/inner", "protect = link/inner: outside the project root {root}"),
        (".", "protect = .: the whole project cannot be read-only"),
    ],
)
def test_protect_line_outside_the_project_is_refused(
    tmp_path: Path, value: str, error: str
) -> None:
    root = tmp_path / "root"
    (root / ".sandbridge").mkdir(parents=True)
    (root / "link").symlink_to(tmp_path)
    (root / ".sandbridge" / "config").write_text(f"protect = {value}\n")
    with pytest.raises(PolicyError) as caught:
        PolicyBuilder().read_project(root)
    assert str(caught.value) == f".sandbridge/config:1: {error.format(root=root)}"


def test_protect_line_is_kept_with_its_source(tmp_path: Path) -> None:
    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "config").write_text("\nprotect = scripts/\n")
    policy = PolicyBuilder().read_project(tmp_path).build()
    assert [(s.value, s.source) for s in policy.protect] == [
        (tmp_path / "scripts", ".sandbridge/config:2")
    ]
    assert policy.files_read == (tmp_path / ".sandbridge" / "config",)


def test_a_missing_policy_directory_above_a_nested_workdir_gets_a_placeholder(
    tmp_path: Path,
) -> None:
    # No writable mount shows it, but the read-only root does: the view inside needs a
    # directory to lie on, or a .sandbridge the owner makes later would show through.
    (tmp_path / "sub").mkdir()
    protection = decide(workdir(tmp_path / "sub"), tmp_path, git=facts())
    assert placeholders(protection)[tmp_path / ".sandbridge"] is None
    assert tmp_path / ".sandbridge" not in read_only(protection)  # not writable anyway


def test_a_policy_directory_that_exists_or_is_a_file_gets_no_placeholder(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / ".sandbridge").write_text("not a directory\n")
    protection = decide(workdir(tmp_path / "sub"), tmp_path, git=facts())
    assert tmp_path / ".sandbridge" not in placeholders(protection)


def test_placeholders_stay_while_another_session_of_the_project_runs(tmp_path: Path) -> None:
    # A sibling workdir of the same project has a view of the root's .sandbridge.
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    protection = decide(workdir(tmp_path / "a"), tmp_path, git=facts())
    assert protection.shared_with([tmp_path / "b"])
    assert not protection.shared_with([tmp_path.parent / "elsewhere"])


def test_a_policy_directory_replaced_during_the_session_is_named_at_its_end(
    tmp_path: Path,
) -> None:
    # The kernel drops the sandbox's mounts on a directory the owner removes: a new
    # .sandbridge made there is seen, and writable, inside.
    policy_dir = tmp_path / ".sandbridge"
    warning = (
        f"WARNING: {policy_dir} was removed or renamed during the session: the sandbox's "
        "read-only view of it went with it, so the sandbox could read and write what was "
        f"put there since; review {policy_dir} before the next run"
    )

    def session(change: Callable[[], object]) -> list[str]:
        protection = decide(workdir(tmp_path), tmp_path, git=facts())
        protection.create_placeholders()
        change()
        return protection.finish()

    def remove_and_make_again() -> None:
        shutil.rmtree(policy_dir)
        policy_dir.mkdir()

    def rename_and_make_again() -> None:
        policy_dir.rename(tmp_path / "old")
        policy_dir.mkdir()

    assert session(lambda: (policy_dir / "env").write_text("A=1\n")) == []
    assert session(remove_and_make_again) == [warning]
    assert session(rename_and_make_again) == [warning]
    assert session(lambda: shutil.rmtree(policy_dir)) == [warning]
    # None at the start: sandbridge's own placeholder, removed at the end, is no warning.
    assert session(lambda: None) == []
    assert not policy_dir.exists()

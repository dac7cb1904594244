"""sandbridge's own questions to the host git (sandbox/host_git.py): never run project code."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sandbridge.exceptions import GitNotRun
from sandbridge.path_within import is_within
from sandbridge.sandbox import host_git
from sandbridge.sandbox.mounts import Mount
from sandbridge.sandbox.protected_paths import decide
from tests.sandbox.test_protected_paths import git, make_repo


def test_questions_never_run_the_projects_configured_commands(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    marker = tmp_path / "ran"
    script = tmp_path / "hook.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(script))
    git(repo, "config", "core.pager", str(script))
    git(repo, "config", "core.hooksPath", str(tmp_path))
    (tmp_path / "post-index-change").write_text(script.read_text())
    (tmp_path / "post-index-change").chmod(0o755)
    assert host_git.toplevel(repo / ".git" / "..") == repo
    assert any(e.key == "core.fsmonitor" for e in host_git.config_entries(repo))
    assert host_git.index_facts(repo).submodules == []
    assert host_git.ignoring_rule(repo, "README") is None
    assert host_git.index_facts(repo).hidden == frozenset()
    assert not marker.exists()
    git(repo, "status")  # the owner's git does run it: the test's set-up is live
    assert marker.exists()


def test_toplevel_outside_every_repository_answers_without_running_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``.git`` upwards and no bare repository: git's own discovery would find nothing,
    so no git process is started (a run's start waited for one); inside a repository, and
    through a link into one, git is asked and answers as before."""
    repo = make_repo(tmp_path / "proj")  # with the owner's git, before the one counted
    (repo / "sub").mkdir()
    runs = tmp_path / "git-runs"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    real_git = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True)
    wrapper.write_text(f'#!/bin/sh\necho "$PWD" >> {runs}\nexec {real_git.stdout.strip()} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    plain = tmp_path / "plain" / "deep"
    plain.mkdir(parents=True)
    assert host_git.toplevel(plain) is None
    assert not runs.exists()
    (tmp_path / "plain" / "link").symlink_to(repo / "sub")
    assert host_git.toplevel(tmp_path / "plain" / "link") == repo
    assert host_git.toplevel(repo / "sub") == repo
    assert runs.read_text().count("\n") == 2


def test_a_repository_of_another_user_is_read_all_the_same(tmp_path: Path) -> None:
    assert os.getuid() == 0, "this test hands the repository to another user: run as root"
    repo = make_repo(tmp_path / "proj")
    git(repo, "config", "core.hooksPath", ".husky/_")
    subprocess.run(["chown", "-R", "65534:65534", str(repo)], check=True)
    assert host_git.toplevel(repo) == repo
    entries = host_git.config_entries(repo)
    assert any(e.key == "core.hookspath" and e.value == ".husky/_" for e in entries)


def test_ignoring_rule_names_source_and_line_and_skips_negations(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    (repo / ".gitignore").write_text("*.log\n!keep.log\n")
    assert host_git.ignoring_rule(repo, "a.log") == ".gitignore:1:*.log"
    assert host_git.ignoring_rule(repo, "keep.log") is None


def spy_on_git(monkeypatch: pytest.MonkeyPatch, home: Path) -> list[tuple[str, ...]]:
    """Every git command sandbridge's questions run from now on (they still run), with
    ``home`` as the owner's home: no include of the machine's own ``~/.gitconfig`` adds
    a listing."""
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    ran: list[tuple[str, ...]] = []
    real = host_git.run_git

    def counted(
        cwd: Path, *args: str, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        ran.append(args)
        return real(cwd, *args, stdin=stdin)

    monkeypatch.setattr(host_git, "run_git", counted)
    return ran


def test_ignoring_rules_asks_git_once_for_every_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One ``check-ignore`` for all the names, each name as it is (a space, a LF, a CR, a
    byte that is not UTF-8, a leading dash), a negation not taken for a rule."""
    repo = make_repo(tmp_path / "proj")
    odd = ["a b.log", "line\nfeed.log", "cr\r.log", os.fsdecode(b"bad\xff.log"), "-x.log"]
    (repo / ".gitignore").write_text("*.log\n!keep.log\n/sub/deep/*.env\n")
    ran = spy_on_git(monkeypatch, tmp_path / "home")
    rules = host_git.ignoring_rules(repo, [*odd, "keep.log", "README", "sub/deep/x.env"])
    assert rules == {
        **{name: ".gitignore:1:*.log" for name in odd},
        "sub/deep/x.env": ".gitignore:3:/sub/deep/*.env",
    }
    assert [args[0] for args in ran] == ["check-ignore"]
    assert host_git.ignoring_rules(repo, []) == {}
    assert len(ran) == 1


def test_a_name_git_cannot_answer_loses_no_other_names_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git stops at a name beyond a symbolic link (``.claude`` a link, the owner's or one
    the sandbox left): that name is not ignored, and the names before and after it get
    their answers, as when each was asked alone."""
    repo = make_repo(tmp_path / "proj")
    (repo / "elsewhere").mkdir()
    (repo / ".claude").symlink_to("elsewhere")
    (repo / ".cargo").symlink_to("gone")  # dangling
    (repo / ".gitignore").write_text(".envrc\n.npmrc\n*.log\n")
    ran = spy_on_git(monkeypatch, tmp_path / "home")
    asked = ["a.log", ".claude/settings.json", ".envrc", ".cargo/config.toml", ".npmrc", "b"]
    assert host_git.ignoring_rules(repo, asked) == {
        "a.log": ".gitignore:3:*.log",
        ".envrc": ".gitignore:1:.envrc",
        ".npmrc": ".gitignore:2:.npmrc",
    }
    assert [args[0] for args in ran] == ["check-ignore"] * 3


def test_a_fifo_gitignore_on_the_way_to_any_name_asked_is_refused(tmp_path: Path) -> None:
    """The names go to git on its input: the ``.gitignore`` files on the way to each of
    them are checked, not only the last argument's."""
    repo = make_repo(tmp_path / "proj")
    (repo / "a" / "b").mkdir(parents=True)
    os.mkfifo(repo / "a" / ".gitignore")
    with pytest.raises(GitNotRun, match=r"a/\.gitignore is a FIFO, not a file"):
        host_git.ignoring_rules(repo, ["README", "a/b/.envrc", "c/.npmrc"])


def test_the_index_is_read_once_for_submodules_and_hidden_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "proj")
    sub = make_repo(tmp_path / "sub")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "lib")
    (repo / "skipped").write_text("x\n")
    git(repo, "add", "skipped")
    git(repo, "update-index", "--skip-worktree", "skipped")
    git(repo, "update-index", "--assume-unchanged", "README")
    ran = spy_on_git(monkeypatch, tmp_path / "home")
    facts = host_git.index_facts(repo)
    assert facts.submodules == [repo / "lib"]
    assert facts.hidden == frozenset({"README", "skipped"})
    assert [args[0] for args in ran] == ["ls-files", "config"]  # config: .gitmodules


def test_settings_without_includes_are_listed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no config file names an include, git follows none: the listing without
    includes is every setting, and git is not asked again with them."""
    repo = make_repo(tmp_path / "proj")
    git(repo, "config", "core.hooksPath", ".husky/_")
    ran = spy_on_git(monkeypatch, tmp_path / "home")
    entries = host_git.config_entries(repo)
    assert any(e.key == "core.hookspath" and e.value == ".husky/_" for e in entries)
    assert ran == [("config", "--list", "--show-origin", "--no-includes", "-z")]
    git(repo, "config", "includeIf.onbranch:nothing.path", "../absent")
    ran.clear()
    entries = host_git.config_entries(repo)
    assert ran[-1] == ("config", "--list", "--show-origin", "--includes", "-z")
    assert any(e.key == "includeif.onbranch:nothing.path" for e in entries)


def test_a_repository_where_git_timed_out_is_not_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file the checks do not foresee (a ref: none of sandbridge's questions opens one,
    but ``git show`` does) costs the timeout once; the next question fails at once."""
    monkeypatch.setattr(host_git, "GIT_TIMEOUT_SECONDS", 1.0)
    repo = make_repo(tmp_path / "proj")
    (repo / ".git" / "refs" / "heads" / "main").unlink()
    os.mkfifo(repo / ".git" / "refs" / "heads" / "main")
    started = time.monotonic()
    with pytest.raises(GitNotRun) as first:
        host_git.run_git(repo, "show", "main:README")
    assert 1.0 <= time.monotonic() - started < 10
    assert str(first.value) == (
        f"git timed out after 1 s in the repository {repo} (git show main:README): a file "
        "there blocks it (a FIFO?); not asked again in this run. Find it and remove it."
    )
    started = time.monotonic()
    for question in (host_git.toplevel, host_git.index_facts, host_git.config_entries):
        with pytest.raises(GitNotRun) as again:
            question(repo)
        assert str(again.value) == str(first.value)
    assert time.monotonic() - started < 0.5


def test_an_include_git_would_follow_into_a_fifo_is_refused_naming_it(tmp_path: Path) -> None:
    """Only ``config --includes`` opens included files: each is checked first, to any
    depth, whatever its condition."""
    repo = make_repo(tmp_path / "proj")
    (repo / "first").write_text("[include]\n\tpath = deeper/second\n")
    (repo / "deeper").mkdir()
    os.mkfifo(repo / "deeper" / "second")
    git(repo, "config", "includeIf.onbranch:nothing.path", "../first")
    started = time.monotonic()
    with pytest.raises(GitNotRun) as caught:
        host_git.config_entries(repo)
    assert str(caught.value) == (
        f"{repo / 'deeper' / 'second'} is a FIFO, not a file; git there would hang; not run. "
        "Remove it."
    )
    assert time.monotonic() - started < host_git.GIT_TIMEOUT_SECONDS / 4


def test_an_excludes_file_a_setting_names_is_checked(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    os.mkfifo(repo / "excludes")
    git(repo, "config", "core.excludesFile", "excludes")
    with pytest.raises(GitNotRun, match="excludes is a FIFO, not a file"):
        host_git.config_entries(repo)


def test_includes_are_still_listed_with_their_files(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    (repo / "extra").write_text("[alias]\n\tx = status\n")
    git(repo, "config", "include.path", "../extra")
    entries = host_git.config_entries(repo)
    assert host_git.ConfigEntry(repo / "extra", "alias.x", "status") in entries


def test_names_that_are_not_utf8_or_hold_a_cr_are_read_as_they_are(tmp_path: Path) -> None:
    """The index's names are the sandbox's to choose: one that is not UTF-8 made git's
    answer undecodable (a ``UnicodeDecodeError`` out of the session's end, before its
    other warnings were said), and a CR was read as a LF (the name shown was not the
    file's)."""
    repo = make_repo(tmp_path / "proj")
    names = [os.fsdecode(b"bad\xffname"), "cr\rname"]
    for name in names:
        (repo / name).write_text("x\n")
        git(repo, "add", "--", name)
        git(repo, "update-index", "--assume-unchanged", "--", name)
    assert host_git.index_facts(repo).hidden == frozenset(names)


def test_a_repositorys_protections_ask_git_three_times_and_its_end_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session in a plain repository runs git three times at its start (its settings,
    its index, every deny-listed file it ignores) and once at its end (its index): each
    git run is a process the start and the end wait for."""
    repo = make_repo(tmp_path / "proj")
    (repo / ".gitignore").write_text(".envrc\n")
    ran = spy_on_git(monkeypatch, tmp_path / "home")
    protection = decide([Mount(repo, repo, writable=True)], repo)
    assert sorted(args[0] for args in ran) == ["check-ignore", "config", "ls-files"]
    assert repo / ".envrc" in {p.path for p in protection.placeholders}  # ignored: empty file
    assert repo / ".npmrc" in protection.watched  # not ignored: named if it appears
    ran.clear()
    protection.create_placeholders()
    assert protection.finish() == []
    assert [args[0] for args in ran] == ["ls-files"]


def test_a_submodule_path_that_is_a_link_loop_is_read_without_an_error(tmp_path: Path) -> None:
    """A ``.gitmodules`` path the sandbox made a link to itself (``Path.resolve`` raised
    RuntimeError on it, out of the session's end): it is read as the path it names, and
    the protections are decided, nothing made below the link."""
    repo = make_repo(tmp_path / "proj")
    sub = make_repo(tmp_path / "sub")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "lib")
    (repo / ".gitmodules").write_text(
        '[submodule "loop"]\n\tpath = loop\n\turl = ./x\n' + (repo / ".gitmodules").read_text()
    )
    (repo / "loop").symlink_to("loop")
    assert host_git.index_facts(repo).submodules == [repo / "lib", repo / "loop"]
    protection = decide([Mount(repo, repo, writable=True)], repo)
    assert not any(is_within(p.path, repo / "loop") for p in protection.placeholders)

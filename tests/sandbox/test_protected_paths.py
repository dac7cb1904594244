"""The workdir is no way to run code on the host (issue 12): real sandboxes, real git.

Each test lets the sandbox try one way of planting something the owner's tools would run
or obey, asserts that the write fails inside, and then runs the owner's own ``git`` on the
host (not sandbridge's hardened one) to show that nothing planted runs: the planted
commands would touch a marker file outside the workdir.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, SANDBRIDGE, Nobody, run_argv
from tests.support.command_in_process import sandbridge

MARKER_SCRIPT = "#!/bin/sh\ntouch {marker}\n"


@pytest.fixture(autouse=True)
def _private_runtime_base(xdg: Path) -> Path:
    """Every session of these tests keeps its runtime dir in the test's own base."""
    return xdg


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The owner's git, as the owner would run it: config, hooks and fsmonitor apply."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="owner", GIT_AUTHOR_EMAIL="owner@example.invalid")
    env.update(GIT_COMMITTER_NAME="owner", GIT_COMMITTER_EMAIL="owner@example.invalid")
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=check, timeout=60
    )


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "agent")
    git(path, "config", "user.email", "agent@example.invalid")
    (path / "README").write_text("hello\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "first")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "proj")


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """A file only a planted command would create (outside the workdir)."""
    return tmp_path / "planted-command-ran"


def inside(
    backend: str, workdir: Path, script: str, *options: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        run_argv(
            workdir, "sh", "-c", script, options=("--backend", backend, "--net", "none", *options)
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def attempts(backend: str, workdir: Path, *writes: str) -> list[str]:
    """Run each shell write inside; return the outcome of each ('refused' or 'WRITTEN')."""
    script = "".join(f"({w}) 2>/dev/null && echo WRITTEN || echo refused\n" for w in writes)
    result = inside(backend, workdir, script)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def refused(count: int) -> list[str]:
    return ["refused"] * count


def owner_review_runs_nothing(repo: Path, marker: Path) -> None:
    """The owner's git status, diff and a commit: the planted command must not run."""
    git(repo, "status")
    git(repo, "diff")
    git(repo, "commit", "-q", "--allow-empty", "-m", "owner's commit")
    assert not marker.exists(), "a command the sandbox planted ran on the host"


def _evil(marker: Path) -> str:
    return f"printf '[core]\\n\\tfsmonitor = touch {marker}\\n'"


# Each: the shell writes of one test below, with the marker only its planted command would
# touch. They all go to a fresh repository, all refused and none changing what the others
# try: one sandbox per backend runs them all, in this order (a replaced .git last).
PLAIN_REPO_ATTEMPTS: dict[str, Callable[[Path, Path], tuple[str, ...]]] = {
    "fsmonitor": lambda repo, marker: (
        f"git config core.fsmonitor 'touch {marker}'",
        f"{_evil(marker)} >> .git/config",
        "mv .git/config .git/config.old",
        "rm -f .git/config",
        f"{_evil(marker)} > .git/config.worktree",
    ),
    "hooks": lambda repo, marker: (
        f"printf '{MARKER_SCRIPT.format(marker=marker)}' > .git/hooks/pre-commit"
        " && chmod +x .git/hooks/pre-commit",
        "mv .git/hooks .git/hooks.old",
    ),
    "info exclude": lambda repo, marker: (
        "echo hidden > hidden && echo hidden >> .git/info/exclude",
        "echo hidden > .git/info/sparse-checkout",
    ),
    "commondir": lambda repo, marker: (
        f"cp -r .git {repo / 'evil-common'} && {_evil(marker)} >> {repo / 'evil-common'}/config"
        f" && echo {repo / 'evil-common'} > .git/commondir",
    ),
    "git dir": lambda repo, marker: (
        f"mv .git .git-old && git init -q && {_evil(marker)} >> .git/config",
        f"mkdir /tmp/g && mv .git/config .git/hooks /tmp/g && {_evil(marker)} >> .git/config",
    ),
}


@dataclass
class PlainRepo:
    """The outcome of each test's writes in the shared sandbox, its marker, the repo."""

    repo: Path
    outcomes: dict[str, list[str]]
    markers: dict[str, Path]


@pytest.fixture(scope="module", params=BACKENDS)
def plain_repo(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> PlainRepo:
    top = tmp_path_factory.mktemp("plain")
    with pytest.MonkeyPatch.context() as patch:  # the session's runtime dir: its own base
        xdg = top / "xdg"
        xdg.mkdir(mode=0o700)
        patch.setenv("XDG_RUNTIME_DIR", str(xdg))
        repo = make_repo(top / "proj")
        markers = {name: top / f"{name.replace(' ', '-')}-ran" for name in PLAIN_REPO_ATTEMPTS}
        writes = {name: make(repo, markers[name]) for name, make in PLAIN_REPO_ATTEMPTS.items()}
        outcome = attempts(str(request.param), repo, *(w for each in writes.values() for w in each))
    outcomes: dict[str, list[str]] = {}
    for name, each in writes.items():
        outcomes[name], outcome = outcome[: len(each)], outcome[len(each) :]
    assert outcome == []
    return PlainRepo(repo, outcomes, markers)


def test_git_config_cannot_be_given_an_fsmonitor(plain_repo: PlainRepo) -> None:
    assert plain_repo.outcomes["fsmonitor"] == refused(5)
    owner_review_runs_nothing(plain_repo.repo, plain_repo.markers["fsmonitor"])


def test_hooks_cannot_be_planted(plain_repo: PlainRepo) -> None:
    assert plain_repo.outcomes["hooks"] == refused(2)
    owner_review_runs_nothing(plain_repo.repo, plain_repo.markers["hooks"])


def test_a_missing_hooks_or_info_directory_cannot_be_created(
    backend: str, repo: Path, marker: Path
) -> None:
    for name in ("hooks", "info"):
        subprocess.run(["rm", "-rf", str(repo / ".git" / name)], check=True)
    hook = MARKER_SCRIPT.format(marker=marker)
    assert attempts(
        backend,
        repo,
        f"mkdir -p .git/hooks && printf '{hook}' > .git/hooks/pre-commit",
        "mkdir -p .git/info && echo '*' > .git/info/exclude",
    ) == refused(2)
    owner_review_runs_nothing(repo, marker)
    # The placeholders are gone again: the owner's .git is as it was.
    assert not (repo / ".git" / "hooks").exists()
    assert not (repo / ".git" / "info").exists()


def test_info_exclude_cannot_hide_a_file_from_review(plain_repo: PlainRepo) -> None:
    assert plain_repo.outcomes["info exclude"] == refused(2)
    assert "hidden" in git(plain_repo.repo, "status", "--short").stdout


def test_commondir_cannot_redirect_the_owners_git(plain_repo: PlainRepo) -> None:
    assert plain_repo.outcomes["commondir"] == refused(1)
    owner_review_runs_nothing(plain_repo.repo, plain_repo.markers["commondir"])
    assert not (plain_repo.repo / ".git" / "commondir").exists(), "the placeholder stays behind"


def test_git_dir_cannot_be_replaced(plain_repo: PlainRepo) -> None:
    assert plain_repo.outcomes["git dir"] == refused(2)
    owner_review_runs_nothing(plain_repo.repo, plain_repo.markers["git dir"])


def test_project_dir_holding_the_repository_cannot_be_replaced(
    backend: str, tmp_path: Path, marker: Path
) -> None:
    """With the workdir above the repository, the directories down to .git are pinned."""
    work = tmp_path / "work"
    project = make_repo(work / "group" / "proj")
    evil = f"git init -q && printf '[core]\\n\\tfsmonitor = touch {marker}\\n' >> .git/config"
    assert attempts(
        backend,
        work,
        f"mv group/proj group/old && mkdir group/proj && cd group/proj && {evil}",
        f"mv group old && mkdir -p group/proj && cd group/proj && {evil}",
    ) == refused(2)
    owner_review_runs_nothing(project, marker)


def test_submodule_git_dirs_and_checkouts_are_protected(
    backend: str, tmp_path: Path, repo: Path, marker: Path
) -> None:
    library = make_repo(tmp_path / "library")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib2")
    git(repo, "commit", "-q", "-m", "submodules")
    # lib2 registered but not checked out: its .git must not be creatable either.
    git(repo, "submodule", "deinit", "-q", "lib2")
    fsmonitor = f"printf '[core]\\n\\tfsmonitor = touch {marker}\\n'"
    assert attempts(
        backend,
        repo,
        f"{fsmonitor} >> .git/modules/lib/config",
        f"{fsmonitor} > .git/modules/lib/hooks/pre-commit",
        f"cp -r .git/modules/lib /tmp/m && {fsmonitor} >> /tmp/m/config && "
        "cp -r /tmp/m crafted && echo 'gitdir: ../crafted' > lib/.git",
        f"cp -r .git/modules/lib crafted2 && {fsmonitor} >> crafted2/config && "
        "echo 'gitdir: ../crafted2' > lib2/.git",
        "echo '[submodule \"x\"]' >> .gitmodules",
    ) == refused(5)
    owner_review_runs_nothing(repo, marker)
    git(repo, "status", "--ignore-submodules=none")
    assert not marker.exists()
    assert not (repo / "lib2" / ".git").exists()


def test_worktree_git_file_and_its_git_dir_are_protected(
    backend: str, tmp_path: Path, marker: Path
) -> None:
    """The workdir holds a repository and a linked worktree of it (a .git file)."""
    work = tmp_path / "work"
    main = make_repo(work / "main")
    git(main, "worktree", "add", "-q", str(work / "wt"))
    fsmonitor = f"printf '[core]\\n\\tfsmonitor = touch {marker}\\n'"
    assert attempts(
        backend,
        work,
        "echo 'gitdir: /tmp/elsewhere' > wt/.git",
        "rm -f wt/.git",
        f"{fsmonitor} >> main/.git/worktrees/wt/config.worktree",
        "echo /tmp > main/.git/worktrees/wt/commondir",
        f"{fsmonitor} >> main/.git/config",
    ) == refused(5)
    owner_review_runs_nothing(work / "wt", marker)
    owner_review_runs_nothing(main, marker)


def test_husky_hooks_path_target_is_read_only(backend: str, repo: Path, marker: Path) -> None:
    hooks = repo / ".husky" / "_"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text('#!/bin/sh\n. "$(dirname "$0")/../pre-commit"\n')
    (hooks / "pre-commit").chmod(0o755)
    (repo / ".husky" / "pre-commit").write_text("true\n")
    git(repo, "add", ".husky")
    git(repo, "commit", "-q", "-m", "husky")
    git(repo, "config", "core.hooksPath", ".husky/_")
    assert attempts(
        backend,
        repo,
        f"echo 'touch {marker}' >> .husky/_/pre-commit",
        f"echo 'touch {marker}' >> .husky/pre-commit",
        f"printf '{MARKER_SCRIPT.format(marker=marker)}' > .husky/_/post-commit",
    ) == refused(3)
    owner_review_runs_nothing(repo, marker)


def test_a_missing_hooks_path_and_include_target_cannot_be_created(
    backend: str, repo: Path, marker: Path
) -> None:
    git(repo, "config", "core.hooksPath", ".githooks")
    git(repo, "config", "include.path", "../team.gitconfig")
    hook = MARKER_SCRIPT.format(marker=marker)
    assert attempts(
        backend,
        repo,
        f"mkdir -p .githooks && printf '{hook}' > .githooks/pre-commit",
        f"printf '[core]\\n\\tfsmonitor = touch {marker}\\n' > team.gitconfig",
    ) == refused(2)
    owner_review_runs_nothing(repo, marker)


def test_include_path_target_and_command_named_by_config_are_read_only(
    backend: str, repo: Path, marker: Path
) -> None:
    (repo / "team.gitconfig").write_text("[user]\n\tname = team\n")
    (repo / "tools").mkdir()
    (repo / "tools" / "diff.sh").write_text("#!/bin/sh\ntrue\n")
    (repo / "tools" / "diff.sh").chmod(0o755)
    git(repo, "config", "include.path", "../team.gitconfig")
    git(repo, "config", "diff.tool.command", "./tools/diff.sh --quiet")
    assert attempts(
        backend,
        repo,
        f"printf '[core]\\n\\tfsmonitor = touch {marker}\\n' >> team.gitconfig",
        f"echo 'touch {marker}' >> tools/diff.sh",
    ) == refused(2)
    owner_review_runs_nothing(repo, marker)


def test_editor_agent_and_package_manager_files_are_read_only(backend: str, repo: Path) -> None:
    (repo / ".vscode").mkdir()
    (repo / ".vscode" / "settings.json").write_text("{}\n")
    for name in (".npmrc", ".envrc", ".yarnrc.yml", ".mcp.json"):
        (repo / name).write_text("\n")
    assert attempts(
        backend,
        repo,
        "echo '{\"tasks\": []}' > .vscode/tasks.json",
        "echo 'script-shell=/tmp/x' >> .npmrc",
        "echo 'touch /tmp/x' >> .envrc",
        "echo 'yarnPath: x.js' >> .yarnrc.yml",
        "echo '{}' > .mcp.json",
        "mkdir -p .devcontainer && echo '{}' > .devcontainer/devcontainer.json",
        "mkdir -p .claude/commands && echo x > .claude/commands/x.md",
        "mkdir -p .idea && echo x > .idea/workspace.xml",
    ) == refused(8)
    for name in (".devcontainer", ".claude", ".idea", ".cursor", ".sandbridge", ".husky"):
        assert not (repo / name).exists(), f"placeholder {name} left behind"


def test_policy_directory_cannot_be_created(backend: str, repo: Path) -> None:
    assert attempts(
        backend,
        repo,
        "mkdir -p .sandbridge && echo 'net = full' > .sandbridge/config",
        "echo 'net = full' > .sandbridge/config",
        "mkdir -p src/.sandbridge",  # allowed: never obeyed, and refused on the next run
    ) == ["refused", "refused", "WRITTEN"]
    assert not (repo / ".sandbridge").exists()


def test_policy_protect_line_adds_a_read_only_path(backend: str, repo: Path) -> None:
    (repo / ".sandbridge").mkdir()
    (repo / ".sandbridge" / "config").write_text("protect = scripts/deploy.sh\nprotect = out/\n")
    (repo / "scripts").mkdir()
    (repo / "scripts" / "deploy.sh").write_text("echo deploy\n")
    assert attempts(
        backend,
        repo,
        "echo evil >> scripts/deploy.sh",
        "mkdir -p out/x",
        "echo ok > scripts/other",
    ) == ["refused", "refused", "WRITTEN"]
    assert not (repo / "out").exists()


def test_new_deny_listed_file_is_named_at_session_end(backend: str, repo: Path) -> None:
    result = inside(backend, repo, "echo 'script-shell=/tmp/x' > .npmrc")
    assert result.returncode == 0, result.stderr
    assert f"sandbridge: WARNING: the sandbox created {repo / '.npmrc'}" in result.stderr
    assert ".npmrc" in git(repo, "status", "--short").stdout


def test_submodule_staged_by_the_sandbox_is_named_at_session_end(backend: str, repo: Path) -> None:
    """The owner's git status enters a staged gitlink's repository and obeys its config:
    no mount can stop a new directory (docs/security.md, residual risks), so it is named."""
    script = (
        "mkdir evil && cd evil && git init -q && git -c user.name=a -c user.email=a@b "
        "commit -q --allow-empty -m e && "
        "cd .. && git add evil 2>/dev/null"
    )
    result = inside(backend, repo, script)
    assert result.returncode == 0, result.stderr
    assert (
        f"sandbridge: WARNING: the sandbox registered a submodule at {repo / 'evil'} with its "
        f"own git dir; git status runs its config: inspect {repo / 'evil' / '.git'}, or "
        "remove it with git rm --cached evil"
    ) in result.stderr


def test_repository_created_in_a_subdirectory_is_named_at_session_end(
    backend: str, repo: Path
) -> None:
    """git run in a directory with a new .git obeys that git dir, and the project's git
    status does not show a .git inside a tracked directory: it is named."""
    (repo / "src").mkdir()
    (repo / "src" / "main.c").write_text("")
    git(repo, "add", "src")
    git(repo, "commit", "-q", "-m", "src")
    result = inside(backend, repo, "cd src && git init -q")
    assert result.returncode == 0, result.stderr
    assert (
        f"sandbridge: WARNING: the sandbox created a git repository at {repo / 'src'}: git "
        f"run there obeys its config; inspect {repo / 'src' / '.git'} or remove it"
    ) in result.stderr


def test_bare_repository_in_the_workdir_is_protected_and_a_new_one_named(
    backend: str, repo: Path, marker: Path
) -> None:
    """git run inside a bare repository obeys its config (core.pager, aliases...)."""
    git(repo, "clone", "-q", "--bare", str(repo), str(repo / "mirror.git"))
    pager = f"printf '[core]\\n\\tpager = touch {marker}\\n'"
    result = inside(
        backend,
        repo,
        f"({pager} >> mirror.git/config) 2>/dev/null && echo WRITTEN || echo refused;"
        "git init -q --bare tools",
    )
    assert result.stdout.split() == ["refused"], result.stderr
    assert (
        f"sandbridge: WARNING: the sandbox created a git repository at {repo / 'tools'}: git "
        f"run there obeys its config; inspect {repo / 'tools'} or remove it"
    ) in result.stderr
    assert str(marker) not in (repo / "mirror.git" / "config").read_text()


def test_file_hidden_from_git_status_is_named_at_session_end(backend: str, repo: Path) -> None:
    (repo / "Makefile").write_text("all:\n\ttrue\n")
    git(repo, "add", "Makefile")
    git(repo, "commit", "-q", "-m", "make")
    script = (
        "git update-index --assume-unchanged Makefile && git update-index --skip-worktree "
        "README && echo 'all:; touch /tmp/x' > Makefile && echo changed >> README"
    )
    result = inside(backend, repo, script)
    assert result.returncode == 0, result.stderr
    assert git(repo, "status", "--porcelain").stdout == ""  # hidden indeed
    assert (
        f"sandbridge: WARNING: the sandbox hid 2 file(s) of {repo} from git status and git "
        "diff (assume-unchanged or skip-worktree): Makefile README; show them with git "
        "update-index --no-assume-unchanged --no-skip-worktree FILE"
    ) in result.stderr


def test_names_the_sandbox_chose_reach_the_owners_terminal_escaped(
    backend: str, repo: Path
) -> None:
    """The session-end warnings name directories and files the sandbox named: raw, an
    ESC, CR or LF in a name erased the warning on the owner's terminal (``\\r\\e[2K``)
    or wrote a line of its own; each is escaped, so the warning stays whole and
    readable."""
    (repo / "Makefile").write_text("all:\n\ttrue\n")
    git(repo, "add", "Makefile")
    git(repo, "commit", "-q", "-m", "make")
    evil = "a\x1b[2K\rb\nsandbridge: all clear"
    script = (
        f'd="$(printf \'{evil}\')"; mkdir "$d" && git init -q "$d" && '
        f'mkdir -p scratch && mkdir "scratch/$d" && mkdir "scratch/$d/.sandbridge" && '
        f'cp Makefile "$d.mk" && git add "$d.mk" && '
        f'git update-index --assume-unchanged "$d.mk"'
    )
    result = subprocess.run(
        run_argv(repo, "sh", "-c", script, options=("--backend", backend, "--net", "none")),
        capture_output=True,
        timeout=120,
        check=False,
    )
    stderr = result.stderr.decode()  # as written: no newline translation
    assert result.returncode == 0, stderr
    seen = "a\\x1b[2K\\x0db\\x0asandbridge: all clear"
    assert (
        f"sandbridge: WARNING: the sandbox created a git repository at {repo / seen}: git "
        f"run there obeys its config; inspect {repo / seen / '.git'} or remove it\n"
    ) in stderr
    assert (
        f"sandbridge: WARNING: the sandbox created a sandbridge policy directory at "
        f"{repo / 'scratch' / seen / '.sandbridge'}: a sandbridge run there obeys it"
    ) in stderr
    assert f"(assume-unchanged or skip-worktree): {seen}.mk; show them" in stderr
    assert "\x1b" not in stderr
    assert "\r" not in stderr
    assert "\nsandbridge: all clear" not in stderr


def test_a_name_that_is_not_utf8_silences_no_warning(backend: str, repo: Path) -> None:
    """A file the sandbox names with a byte that is not UTF-8, hidden from git status:
    the end's question to git failed to decode (a traceback), and the warnings after it,
    a repository the sandbox made among them, were never said."""
    script = (
        'f="$(printf \'bad\\377name\')"; echo x > "$f" && git add -- "$f" && '
        'git update-index --assume-unchanged -- "$f" && git init -q tools'
    )
    result = inside(backend, repo, script)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        f"sandbridge: WARNING: the sandbox hid 1 file(s) of {repo} from git status and git "
        "diff (assume-unchanged or skip-worktree): bad\\udcffname; show them"
    ) in result.stderr
    assert f"sandbridge: WARNING: the sandbox created a git repository at {repo / 'tools'}" in (
        result.stderr
    )


def test_a_git_the_sandbox_puts_on_the_owners_path_never_runs_on_the_host(
    backend: str, repo: Path, marker: Path
) -> None:
    """The owner runs ``sandbridge run`` with the project's virtualenv active: its bin,
    in the workdir, is first on PATH. The sandbox puts a ``git`` (and a ``bwrap``,
    ``unshare``, ``setpriv``) there; sandbridge's own git at the session's end ran it on
    the host, outside the sandbox (and the next start would have run the backend)."""
    venv_bin = repo / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    plant = "".join(
        f"printf '#!/bin/sh\\ntouch {marker}\\nexit 1\\n' > .venv/bin/{name} && "
        f"chmod +x .venv/bin/{name} && "
        for name in ("git", "bwrap", "unshare", "setpriv")
    )
    for script in (f"{plant}echo planted", "echo second"):
        result = subprocess.run(
            run_argv(repo, "sh", "-c", script, options=("--backend", backend, "--net", "none")),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
        assert result.returncode == 0, result.stderr
        assert not marker.exists(), "a command the sandbox planted ran on the host"
    assert result.stdout.split() == ["second"]


def test_sandbridges_own_installation_in_a_writable_mount_is_read_only(
    backend: str, repo: Path
) -> None:
    """sandbridge installed in the project's virtualenv, or a checkout of it bound
    writable: the sandbox rewrote the code the host runs (this session's end imports
    more of it, every later command all of it)."""
    import sandbridge

    package = Path(sandbridge.__file__).resolve().parent
    probe = package / "planted_by_the_sandbox.py"
    try:
        result = inside(
            backend,
            repo,
            f"(echo 'import os' > {probe}) 2>/dev/null && echo WRITTEN || echo refused",
            "--bind",
            str(package.parent),
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["refused"]
        assert not probe.exists()
        assert (
            f"sandbridge: WARNING: sandbridge runs from {package.parent}, which the sandbox "
            "could write: read-only inside"
        ) in result.stderr
    finally:
        probe.unlink(missing_ok=True)


def test_ignored_deny_listed_file_gets_a_placeholder(backend: str, repo: Path) -> None:
    """A file the owner's git ignores would not show in review: it cannot be created."""
    (repo / ".gitignore").write_text(".envrc\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    assert attempts(backend, repo, "echo 'touch /tmp/x' > .envrc") == refused(1)
    assert not (repo / ".envrc").exists()


def tree(top: Path) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, n), top)
        for d, dirs, files in os.walk(top)
        for n in dirs + files
    }


def test_session_leaves_the_project_as_it_found_it(
    backend: str, tmp_path: Path, repo: Path
) -> None:
    library = make_repo(tmp_path / "library")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
    git(repo, "commit", "-q", "-m", "submodule")
    subprocess.run(["rm", "-rf", str(repo / ".git" / "hooks")], check=True)
    before = tree(repo)
    result = inside(backend, repo, "ls -a .git .vscode .sandbridge .claude > /dev/null")
    assert result.returncode == 0, result.stderr
    assert tree(repo) == before
    assert "WARNING" not in result.stderr


def test_agent_can_add_commit_branch_and_stash(backend: str, repo: Path) -> None:
    script = (
        "set -e; echo work > file && git add file && git commit -q -m 'agent commit' && "
        "git branch x && git checkout -q -b y && echo more >> file && git stash -q && "
        "git stash list | grep -c stash"
    )
    result = inside(backend, repo, script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"
    assert "agent commit" in git(repo, "log", "--all", "--format=%s").stdout
    assert {"main", "x", "y"} <= set(
        git(repo, "branch", "--format=%(refname:short)").stdout.split()
    )
    assert "stash@{0}" in git(repo, "stash", "list").stdout
    assert git(repo, "status", "--porcelain").stdout == ""


def test_unprivileged_user_gets_the_same_protection(backend: str, nobody: Nobody) -> None:
    repo = nobody.work
    for args in (["init", "-q", "-b", "main"], ["config", "user.name", "a"]):
        subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "git", *args],
            cwd=repo,
            env=nobody.env,
            check=True,
        )
    script = (
        "(echo x >> .git/config) 2>/dev/null && echo WRITTEN || echo refused;"
        "(mv .git .g) 2>/dev/null && echo WRITTEN || echo refused;"
        "echo f > f && git add f && git -c user.email=a@b commit -q -m c && echo committed"
    )
    result = subprocess.run(
        [*nobody.run_argv(backend), "--net", "none", "--", "sh", "-c", script],
        env=nobody.env,
        cwd=str(repo),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.stdout.split() == ["refused", "refused", "committed"], result.stderr


# --- where the policy comes from ---------------------------------------------------------


def sandbridge_run(workdir: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        run_argv(workdir, "true", options=("--net", "none", *options)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def shown_or_refused(workdir: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """A run that shows its policy or is refused, in this process
    (tests/support/command_in_process.py)."""
    argv = run_argv(workdir, "true", options=("--net", "none", *options))
    return sandbridge(*argv[len(SANDBRIDGE) :])


def test_policy_below_the_project_root_is_refused(repo: Path) -> None:
    (repo / "src" / ".sandbridge").mkdir(parents=True)
    (repo / "src" / ".sandbridge" / "config").write_text("net = full\n")
    result = shown_or_refused(repo / "src", "--print-policy")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"sandbridge: {repo / 'src' / '.sandbridge'}: only the project root's policy is "
        f"read ({repo / '.sandbridge'}); move its settings there or remove it"
    )


def test_policy_is_read_at_the_project_root_from_a_subdirectory(repo: Path) -> None:
    (repo / ".sandbridge").mkdir()
    (repo / ".sandbridge" / "config").write_text("resolver = 192.0.2.53\n")
    (repo / "src").mkdir()
    result = shown_or_refused(repo / "src", "--print-policy")
    assert result.returncode == 0, result.stderr
    assert "resolver = 192.0.2.53:53" in result.stdout
    assert "(.sandbridge/config:1)" in result.stdout
    assert f"policy files read: {repo / '.sandbridge' / 'config'}" in result.stderr


def test_policy_file_that_git_ignores_is_refused(repo: Path) -> None:
    (repo / ".sandbridge").mkdir()
    (repo / ".sandbridge" / "config").write_text("net = none\n")
    (repo / ".git" / "info" / "exclude").write_text(".sandbridge/\n")
    result = shown_or_refused(repo, "--print-policy")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"sandbridge: {repo / '.sandbridge' / 'config'}: git ignores it "
        "(.git/info/exclude:1:.sandbridge/), so a change to it would not show in review; "
        "remove that rule"
    )


def test_run_names_the_policy_files_it_read(backend: str, repo: Path) -> None:
    (repo / ".sandbridge").mkdir()
    (repo / ".sandbridge" / "config").write_text("net = none\n")
    (repo / ".sandbridge" / "allow").write_text("example.com\n")
    result = sandbridge_run(repo, "--backend", backend)
    assert result.returncode == 0, result.stderr
    files = f"{repo / '.sandbridge' / 'config'}, {repo / '.sandbridge' / 'allow'}"
    assert f"sandbridge: policy files read: {files}\n" in result.stderr
    dry = shown_or_refused(repo, "--dry-run")
    assert f"sandbridge: policy files read: {files}\n" in dry.stderr


def test_protect_outside_the_project_is_refused_with_its_line(repo: Path) -> None:
    (repo / ".sandbridge").mkdir()
    (repo / ".sandbridge" / "config").write_text("# mine\nprotect = ../elsewhere\n")
    result = shown_or_refused(repo, "--print-policy")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"sandbridge: .sandbridge/config:2: protect = ../elsewhere: outside the project root {repo}"
    )


def test_a_policy_planted_in_a_subdirectory_is_named_at_session_end(
    backend: str, tmp_path: Path
) -> None:
    """A workdir that is no repository: its subdirectory ``scratch`` is a project root of
    its own for a later ``sandbridge run --workdir scratch``, which would obey a
    ``scratch/.sandbridge/config`` the sandbox wrote (``net = allow`` and its own
    destinations): it is named at session end."""
    workdir = tmp_path / "plain"
    (workdir / "scratch").mkdir(parents=True)
    (workdir / "kept" / ".sandbridge").mkdir(parents=True)  # there before: not named
    result = inside(
        backend,
        workdir,
        "mkdir scratch/.sandbridge && echo 'net = allow' > scratch/.sandbridge/config",
    )
    assert result.returncode == 0, result.stderr
    assert (
        f"sandbridge: WARNING: the sandbox created a sandbridge policy directory at "
        f"{workdir / 'scratch' / '.sandbridge'}: a sandbridge run there obeys it; inspect "
        "it or remove it"
    ) in result.stderr
    assert "kept" not in result.stderr

"""The secrets file in real sessions (both backends): the command sees its values in its
environment and cannot read the file; no output of the session holds a value; a file
others could read, or that git tracks, stops the run with the fix."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, SANDBRIDGE, Process, run_argv
from tests.support import command_in_process

SECRET = "planted-secret-session-3c9b17"


def make_project(root: Path, mode: int = 0o600) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".sandbridge").mkdir()
    (root / ".sandbridge" / "config").write_text("net = allow\n")
    secrets = root / ".sandbridge" / "env"
    secrets.write_text(f"# test secrets\nAPI_TOKEN={SECRET}\nOTHER='second {SECRET}'\n")
    secrets.chmod(mode)
    return root


def files_under(directory: Path) -> dict[Path, bytes]:
    found = {}
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            found[path] = path.read_bytes()
    return found


def every_command_line() -> str:
    """``/proc/*/cmdline`` of every process on the machine, as any local user sees them."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except (OSError, UnicodeDecodeError):
                continue
    return "\n".join(lines)


def sandbridge(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """A real ``sandbridge`` process (a session's run)."""
    return subprocess.run(
        [*SANDBRIDGE, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def in_process(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The owner's commands and the runs that stop before a session, in this process
    (tests/support/command_in_process.py)."""
    return command_in_process.sandbridge(*args, env=env)


def test_values_reach_the_command_and_no_output(backend: str, tmp_path: Path) -> None:
    work = make_project(tmp_path / "work")
    go = work / "go"
    os.mkfifo(go)
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg)}
    script = (
        'printf "%s" "$API_TOKEN" | sha256sum | cut -c1-64 | sed "s/^/HASH /"; '
        'echo "READ $(cat .sandbridge/env 2>/dev/null | wc -c)"; '
        'echo "WRITE $(echo x 2>/dev/null > .sandbridge/env && echo yes || echo no)"; '
        f"echo READY; read done < {go}"
    )
    argv = run_argv(work, "sh", "-c", script, options=("--backend", backend, "-v"))
    process = Process(argv, env=env)
    try:
        process.wait_line("READY", timeout=60)
        during = files_under(xdg)
        command_lines = every_command_line()
        status = in_process(env, "status", "--json")
        listing = in_process(env, "ls", "--json")
        go.write_text("done\n")
        assert process.popen.wait(30) == 0
    finally:
        if process.popen.poll() is None:
            process.stop()
    stdout = "\n".join(process.lines["stdout"])
    stderr = "\n".join(process.lines["stderr"]) + process.drain("stderr")
    expected = hashlib.sha256(SECRET.encode()).hexdigest()
    assert f"HASH {expected}" in stdout
    assert "READ 0" in stdout  # no such file inside
    assert "WRITE no" in stdout
    assert during, "the session's runtime and state dirs were looked at"
    assert json.loads(status.stdout)  # the session was listed
    for name, text in [
        ("stdout", stdout),
        ("stderr", stderr),
        ("status", status.stdout + status.stderr),
        ("ls", listing.stdout + listing.stderr),
        ("command lines (every local user reads them)", command_lines),
        *((str(path), data.decode("utf-8", "replace")) for path, data in during.items()),
    ]:
        assert SECRET not in text, name
    assert SECRET in (work / ".sandbridge" / "env").read_text()  # untouched on the host


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_print_policy_and_dry_run_name_the_variables_only(
    tmp_path: Path, backend_name: str
) -> None:
    work = make_project(tmp_path)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path / "xdg")}
    result = in_process(
        env,
        "run",
        "--workdir",
        str(work),
        "--backend",
        backend_name,
        "--print-policy",
        "--dry-run",
        "--",
        "true",
    )
    assert result.returncode == 0, result.stderr
    assert "env API_TOKEN = (value hidden)" in result.stdout
    assert "(.sandbridge/env:2)" in result.stdout
    assert f"{work / '.sandbridge' / 'env'}" in result.stderr  # named among the files read
    assert SECRET not in result.stdout + result.stderr


def test_a_file_others_can_read_stops_the_run(tmp_path: Path) -> None:
    work = make_project(tmp_path, mode=0o644)
    result = in_process(dict(os.environ), "run", "--workdir", str(work), "--", "true")
    assert result.returncode == 2
    assert f"fix it with: chmod 600 {work / '.sandbridge' / 'env'}" in result.stderr
    assert SECRET not in result.stdout + result.stderr


def test_a_file_git_tracks_stops_the_run(tmp_path: Path) -> None:
    work = make_project(tmp_path)
    subprocess.run(["git", "-C", str(work), "add", "-f", ".sandbridge/env"], check=True)
    result = in_process(dict(os.environ), "run", "--workdir", str(work), "--", "true")
    assert result.returncode == 2
    assert "git tracks it" in result.stderr
    assert "git rm --cached .sandbridge/env" in result.stderr
    assert SECRET not in result.stdout + result.stderr


def test_a_bad_line_stops_the_run_naming_its_number_only(tmp_path: Path) -> None:
    work = make_project(tmp_path)
    (work / ".sandbridge" / "env").write_text(f"OK=1\n{SECRET}\n")
    result = in_process(dict(os.environ), "run", "--workdir", str(work), "--", "true")
    assert result.returncode == 2
    assert result.stderr.startswith("sandbridge: .sandbridge/env:2: expected NAME=VALUE")
    assert SECRET not in result.stdout + result.stderr


def test_copies_editors_leave_beside_it_are_not_shown_either(backend: str, tmp_path: Path) -> None:
    # An old value in an editor's backup or swap file is as secret as the current one.
    work = make_project(tmp_path / "work")
    policy_dir = work / ".sandbridge"
    copies = ["env~", ".env.swp", ".env.un~", "#env#", "env.bak", "secrets.txt"]
    for name in copies:
        (policy_dir / name).write_text(f"API_TOKEN=old-{SECRET}\n")
    (policy_dir / "env.example").write_text("API_TOKEN=\n")
    (policy_dir / "allow").write_text("# reviewed\n")
    script = (
        "for f in .sandbridge/* .sandbridge/.[!.]*; do "
        'echo "$f $(cat "$f" 2>/dev/null | wc -c)"; done'
    )
    result = subprocess.run(
        run_argv(work, "sh", "-c", script, options=("--backend", backend)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    sizes = dict(line.rsplit(" ", 1) for line in result.stdout.splitlines())
    for name in [*copies, "env"]:
        assert f".sandbridge/{name}" not in sizes, name  # not there at all inside
    for name in ("config", "allow", "env.example"):
        assert sizes[f".sandbridge/{name}"] != "0", name  # the policy stays readable
    assert SECRET not in result.stdout + result.stderr


def test_a_gitignore_the_sandbox_changes_to_expose_the_file_is_named_at_the_end(
    tmp_path: Path,
) -> None:
    # A later "!" line takes the ignore back: the owner's next `git add -A` would commit it.
    work = make_project(tmp_path / "work")
    (work / ".gitignore").write_text("/.sandbridge/env\n")
    script = "echo '!/.sandbridge/env' >> .gitignore"
    result = subprocess.run(
        run_argv(work, "sh", "-c", script), capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    warning = f"WARNING: git does not ignore {work / '.sandbridge' / 'env'}"
    assert result.stderr.count(warning) == 1, result.stderr
    assert SECRET not in result.stdout + result.stderr


def test_a_secrets_file_git_does_not_ignore_is_warned_about_at_the_start(tmp_path: Path) -> None:
    work = make_project(tmp_path / "work")
    result = sandbridge(dict(os.environ), "run", "--workdir", str(work), "--", "true")
    assert result.returncode == 0, result.stderr
    assert "`git add -A` would commit its values; add the line /.sandbridge/env" in result.stderr
    (work / ".gitignore").write_text("/.sandbridge/env\n")
    result = sandbridge(dict(os.environ), "run", "--workdir", str(work), "--", "true")
    assert "WARNING" not in result.stderr, result.stderr


def test_the_host_process_holding_the_values_dumps_no_core(tmp_path: Path) -> None:
    # core_pattern "core" writes a crashed process's memory into its working directory,
    # here the project the sandbox reads: sandbridge run drops its own soft core limit.
    import resource

    work = make_project(tmp_path / "work")
    go = work / "go"
    os.mkfifo(go)

    def unlimited_cores() -> None:
        hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
        resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))

    process = Process(
        run_argv(work, "sh", "-c", f"echo READY; read done < {go}"),
        cwd=work,
        preexec_fn=unlimited_cores,
    )
    try:
        process.wait_line("READY", timeout=60)
        limits = Path(f"/proc/{process.popen.pid}/limits").read_text()
        go.write_text("done\n")
        assert process.popen.wait(30) == 0
    finally:
        if process.popen.poll() is None:
            process.stop()
    [line] = [line for line in limits.splitlines() if line.startswith("Max core file size")]
    assert line.split()[4] == "0", line

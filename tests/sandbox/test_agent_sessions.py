"""``sandbridge run --agent`` in real sessions (both backends; through the daemon too).

No agent's API is reachable from the test machines, so the agent here is a stand-in: a
small script that a user profile in the test's private XDG_CONFIG_HOME names as the
``shell`` agent's command (replacing the shipped one). It reports what it sees of its
state, its hints and its credential (a digest, never the value), then writes into its
state. Each test is a user of its own: HOME, XDG_CONFIG_HOME, XDG_STATE_HOME and
XDG_RUNTIME_DIR under the test's directory, never the user's.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, REPO, SANDBRIDGE, Process

SECRET = "stand-in-credential-0b7e55-never-shown"
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()[:16]

STAND_IN = r"""#!/bin/sh
state="$HOME/.stand-in"
echo "HOME $HOME"
echo "ARGS $*"
echo "SEEN $(cat "$state/history" 2>/dev/null | tr '\n' ' ')"
echo "OWNER $(cat "$state/owner" 2>/dev/null)"
echo "JSON $(cat "$HOME/.stand-in.json")"
echo "HINTS $(grep -c 'sandbridge-allow HOST' "$state/NOTES.md" 2>/dev/null)" \
  "$(grep -o 'gate address [0-9.]*' "$state/NOTES.md" 2>/dev/null)"
if [ -n "${STAND_IN_KEY+x}" ]; then
  echo "KEY $(printf %s "$STAND_IN_KEY" | sha256sum | cut -c1-16)"
else
  echo "KEY unset"
fi
echo "session-$1" >> "$state/history"
# As most tools save a file: a new one renamed over the old (rename(2) onto a file bound
# on its own is EBUSY).
echo '{"written": true}' > "$HOME/.stand-in.json.new"
mv "$HOME/.stand-in.json.new" "$HOME/.stand-in.json" || echo "RENAME failed"
echo READY
if [ -n "$2" ]; then read done < "$2"; fi
echo DONE
"""


@dataclass
class User:
    """A user of the test's own, with the stand-in agent as its ``shell`` profile."""

    top: Path
    env: dict[str, str]

    @property
    def work(self) -> Path:
        return self.top / "work"

    @property
    def home(self) -> Path:
        return self.top / "home"

    @property
    def agent_state(self) -> Path:
        return self.top / "state" / "sandbridge" / "agents" / "shell"

    def argv(self, backend: str, *options: str) -> list[str]:
        return [
            *SANDBRIDGE,
            "run",
            "--backend",
            backend,
            "--workdir",
            str(self.work),
            "--ro-bind",
            str(REPO),
            # The stand-in lies under /tmp, private inside.
            "--ro-bind",
            str(self.top / "bin"),
            "--agent",
            "shell",
            *options,
        ]

    def run(self, backend: str, *options: str, **env: str) -> tuple[dict[str, str], str]:
        """One session to its end: the stand-in's report (its first word as key), stderr."""
        result = subprocess.run(
            self.argv(backend, *options),
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        report = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
        return report, result.stdout + result.stderr


def make_user(tmp_path: Path, xdg: Path) -> User:
    """A user of its own under ``tmp_path``, its runtime dir ``xdg``."""
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "stand-in"
    script.write_text(STAND_IN)
    script.chmod(0o755)
    config = tmp_path / "config" / "sandbridge"
    (config / "agents").mkdir(parents=True)
    config.chmod(0o700)
    (config / "agents" / "shell.toml").write_text(
        f'command = ["{script}"]\n'
        'state_dirs = [".stand-in"]\n'
        'state_files = [".stand-in.json"]\n'
        'credentials = ["STAND_IN_KEY"]\n'
        'instructions = ".stand-in/NOTES.md"\n'
    )
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    subprocess.run(["git", "init", "-q", str(tmp_path / "work")], check=True)
    (tmp_path / "work" / "README").write_text("the project\n")
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "XDG_RUNTIME_DIR": str(xdg),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    env.pop("STAND_IN_KEY", None)
    return User(tmp_path, env)


@pytest.fixture
def user(tmp_path: Path, xdg: Path) -> User:
    return make_user(tmp_path, xdg)


@dataclass
class FirstSession:
    """A user's first session (``-- one``, no credential set) and what the tests that
    only read its outcome need: the stand-in's report, what was said, the project's files
    before it. The owner has a real ``~/.stand-in`` of their own."""

    backend: str
    user: User
    report: dict[str, str]
    said: str
    project_before: dict[str, bytes]


@pytest.fixture(scope="module", params=BACKENDS)
def first_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> FirstSession:
    """One per backend for the module: the tests below only read its outcome (a test
    that runs another session of the same user has a user of its own)."""
    top = tmp_path_factory.mktemp("agent")
    xdg = top / "xdg"
    xdg.mkdir(mode=0o700)
    user = make_user(top, xdg)
    (user.home / ".stand-in").mkdir()
    (user.home / ".stand-in" / "owner").write_text("owner's login")
    before = _files(user.work)
    report, said = user.run(str(request.param), "--", "one")
    return FirstSession(str(request.param), user, report, said, before)


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and ".git" not in path.parts
    }


@pytest.mark.usefixtures("served")
def test_the_agents_state_is_kept_for_the_next_session(backend: str, user: User) -> None:
    first, _ = user.run(backend, "--", "one")
    assert first["SEEN"].strip() == ""
    assert first["ARGS"] == "one"
    second, said = user.run(backend, "--", "two")
    assert second["SEEN"].strip() == "session-one"
    assert second["JSON"] == '{"written": true}'
    assert "RENAME" not in first and "RENAME" not in second
    assert "~/.stand-in, ~/.stand-in.json kept in " in said
    (kept,) = user.agent_state.iterdir()
    assert kept.name.startswith("work-")
    assert (kept / ".stand-in" / "history").read_text() == "session-one\nsession-two\n"
    assert (kept / ".stand-in.json").read_text() == '{"written": true}\n'


def test_the_owners_real_state_is_not_seen_by_default(first_session: FirstSession) -> None:
    user = first_session.user
    assert first_session.report["OWNER"].strip() == ""
    assert not (user.home / ".stand-in" / "history").exists()


def test_lockdown_sees_nothing_kept_and_leaves_nothing(first_session: FirstSession) -> None:
    # After the first session, which kept its state: a lockdown session of the same user
    # (it leaves nothing, so the other tests of that session read it as it was).
    user = first_session.user
    report, said = user.run(first_session.backend, "--lockdown", "--", "locked")
    assert report["SEEN"].strip() == ""
    assert report["JSON"] == ""
    assert "lockdown: a fresh ~/.stand-in, ~/.stand-in.json, removed at the end" in said
    (kept,) = user.agent_state.iterdir()  # no .lockdown-* left beside it
    assert (kept / ".stand-in" / "history").read_text() == "session-one\n"


def test_agent_home_host_uses_the_owners_real_state_with_a_warning(
    backend: str, user: User
) -> None:
    (user.home / ".stand-in").mkdir()
    (user.home / ".stand-in" / "owner").write_text("owner's login")
    report, said = user.run(backend, "--agent-home", "host", "--", "host")
    assert report["OWNER"] == "owner's login"
    assert (user.home / ".stand-in" / "history").read_text() == "session-host\n"
    assert "WARNING: --agent-home host: the sandbox reads and writes your real" in said
    assert "bridge hints not written (never into your real ~/.stand-in/NOTES.md)" in said
    assert not (user.home / ".stand-in" / "NOTES.md").exists()
    assert not user.agent_state.exists()


def test_the_instruction_file_inside_holds_the_hints_and_the_project_is_untouched(
    first_session: FirstSession,
) -> None:
    user = first_session.user
    assert first_session.report["HINTS"] == "1 gate address 100.64.0.1"
    assert _files(user.work) == first_session.project_before
    status = subprocess.run(
        ["git", "-C", str(user.work), "status", "--porcelain", "--ignored"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout == "?? README\n"


def test_a_credential_is_named_when_not_set(first_session: FirstSession) -> None:
    assert first_session.report["KEY"] == "unset"
    assert "not set here: STAND_IN_KEY" in first_session.said


def test_a_credential_passes_when_set_and_never_on_a_command_line(backend: str, user: User) -> None:
    go = user.top / "bin" / "go"
    os.mkfifo(go)
    process = Process(
        [*user.argv(backend), "--", "two", str(go)], env={**user.env, "STAND_IN_KEY": SECRET}
    )
    try:
        key = process.wait_line("KEY ", timeout=60)
        process.wait_line("READY", timeout=30)
        command_lines = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    command_lines.append((entry / "cmdline").read_bytes())
                except OSError:
                    continue
        go.write_text("done\n")
        assert process.popen.wait(30) == 0
    finally:
        if process.popen.poll() is None:
            process.stop()
    assert key == f"KEY {DIGEST}"
    assert not [line for line in command_lines if SECRET.encode() in line]
    output = "\n".join(process.lines["stdout"] + process.lines["stderr"]) + process.drain()
    assert SECRET not in output
    assert "credentials passed: STAND_IN_KEY" in output


def test_a_link_the_sandbox_left_in_its_kept_home_never_carries_a_bind_elsewhere(
    backend: str, user: User
) -> None:
    # The sandbox writes its kept home; a bind of the next session under the home (here a
    # --bind at ~/tools/shared; sandbridge's own Python when it lives under ~) would land
    # wherever a link it left at ~/tools leads (bwrap resolves a destination's links).
    user.run(backend, "--", "one")
    (kept,) = user.agent_state.iterdir()
    elsewhere = user.top / "elsewhere"
    elsewhere.mkdir()
    (kept / "tools").symlink_to(elsewhere)
    (user.top / "shared").mkdir()
    argv = user.argv(backend, "--bind", f"{user.top / 'shared'}:{user.home / 'tools' / 'shared'}")
    result = subprocess.run(
        [*argv, "--", "two"], env=user.env, capture_output=True, text=True, timeout=90, check=False
    )
    assert result.returncode != 0, result.stdout
    assert f"{kept / 'tools' / 'shared'}: tools is a link or not a directory; remove it" in (
        result.stderr
    )
    assert list(elsewhere.iterdir()) == []
    assert "READY" not in result.stdout

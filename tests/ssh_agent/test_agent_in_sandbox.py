"""The ssh-agent bridge end to end: a real ``ssh-agent`` of the test's own holds two
keys, ``sandbridge run --ssh-agent <chosen key>`` (both backends) starts a sandbox, and
inside it the real ``ssh-add``, ``ssh`` (to a real sshd on the host, reached as a gate
host service) and ``git commit -S`` use the agent; ``sandbridge host --ssh-agent`` serves
the same socket in a runtime dir another runtime mounts.

The sandbox's script prints one ``NAME value`` line per check, then waits on a FIFO so
that the test can read ``sandbridge status`` while the session lives."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

from sandbridge.protocol.contract import SSH_AGENT_SOCKET
from tests.conftest import SANDBRIDGE, Process, run_argv
from tests.remote.sshd import Sshd, sshd_in
from tests.ssh_agent.owner_agent import OwnerAgent, make_key, start_owner_agent

SCRIPT = """\
set -u
cd "$WORK"
echo "SOCK $SSH_AUTH_SOCK"
echo "LIST $(ssh-add -l | awk '{print $2}' | tr '\\n' ' ')"
ssh-add -D >/dev/null 2>&1; echo "REMOVE_ALL $?"
ssh-add fresh >/dev/null 2>&1; echo "ADD $?"
SSH_ASKPASS="$WORK/askpass" SSH_ASKPASS_REQUIRE=force ssh-add -x </dev/null >/dev/null 2>&1
echo "LOCK $?"
SSH="ssh -F /dev/null -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
 -o BatchMode=yes -p $PORT $USER_AT"
echo "LOGIN_CHOSEN $($SSH true 2>/dev/null)"
$SSH -o IdentitiesOnly=yes -o IdentityFile="$WORK/other.pub" true >/dev/null 2>&1
echo "LOGIN_OTHER $?"
git init -q repo && cd repo
git -c user.name=t -c user.email=t@example.invalid -c gpg.format=ssh \\
  -c user.signingkey="key::$(cat "$WORK/chosen.pub")" \\
  commit -q --allow-empty -S -m signed >/dev/null 2>&1
echo "COMMIT $?"
git -c gpg.ssh.allowedSignersFile="$WORK/allowed" verify-commit HEAD >/dev/null 2>&1
echo "VERIFY $?"
test -e "$OWNER_SOCK"; echo "OWNER_VISIBLE $?"
echo "CHECKS DONE"
read -r _ < "$WORK/release"
"""


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[OwnerAgent]:
    # Its socket lies outside the workdir: the sandbox must not see it.
    (tmp_path / "owner").mkdir()
    agent = start_owner_agent(tmp_path / "owner")
    yield agent
    agent.stop()


@pytest.fixture
def sshd(tmp_path: Path, owner: OwnerAgent) -> Iterator[Sshd]:
    for server in sshd_in(tmp_path / "sshd"):
        # Each key says which it was: the login prints it.
        (server.root / "authorized_keys").write_text(
            f'command="echo via-chosen" {owner.chosen.public}\n'
            f'command="echo via-other" {owner.other.public}\n'
        )
        yield server


def prepare_workdir(tmp_path: Path, owner: OwnerAgent) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    make_key(work, "fresh")  # a key the sandbox has and tries to add to the agent
    (work / "chosen.pub").write_text(owner.chosen.public + "\n")
    (work / "other.pub").write_text(owner.other.public + "\n")
    (work / "allowed").write_text(f"t@example.invalid {owner.chosen.public}\n")
    (work / "askpass").write_text("#!/bin/sh\necho a-passphrase\n")
    (work / "askpass").chmod(0o755)
    (work / "script.sh").write_text(SCRIPT)
    os.mkfifo(work / "release")
    return work


def checks(process: Process) -> dict[str, str]:
    process.wait_line("CHECKS DONE", timeout=120)
    return {
        line.split(" ", 1)[0]: line.split(" ", 1)[1].strip() if " " in line else ""
        for line in process.lines["stdout"]
    }


def status(session: str) -> list[dict[str, Any]]:
    shown = subprocess.run(
        [*SANDBRIDGE, "status", "--json", session],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report: list[dict[str, Any]] = json.loads(shown.stdout)
    return report


def test_the_sandbox_lists_logs_in_and_signs_commits_with_the_chosen_key_alone(
    tmp_path: Path, owner: OwnerAgent, sshd: Sshd, backend: str
) -> None:
    work = prepare_workdir(tmp_path, owner)
    session = f"ssha-{backend}"
    env = {
        **owner.env(),
        "WORK": str(work),
        "PORT": str(sshd.port),
        "USER_AT": f"{sshd.user}@100.64.0.1",
        "OWNER_SOCK": str(owner.socket),
    }
    argv = run_argv(
        work,
        "sh",
        str(work / "script.sh"),
        options=(
            "--backend", backend, "--name", session, "--no-daemon",
            "--ssh-agent", owner.chosen.fingerprint, "--allow", f"gate:{sshd.port}",
            *(f"--env={name}" for name in ("WORK", "PORT", "USER_AT", "OWNER_SOCK")),
        ),
    )  # fmt: skip
    process = Process(argv, env=env)
    try:
        found = checks(process)
        [report] = status(session)
    finally:
        (work / "release").write_text("go\n")
        process.popen.wait(timeout=60)
    assert found["SOCK"] == f"/run/ags-webview-relay/{SSH_AGENT_SOCKET}"
    assert found["LIST"] == owner.chosen.fingerprint
    assert (found["REMOVE_ALL"], found["ADD"], found["LOCK"]) == ("1", "1", "1")
    assert found["LOGIN_CHOSEN"] == "via-chosen"
    assert found["LOGIN_OTHER"] == "255"
    assert (found["COMMIT"], found["VERIFY"]) == ("0", "0")
    assert found["OWNER_VISIBLE"] == "1"
    [count] = report["ssh_agent"]
    assert count["key"] == owner.chosen.fingerprint
    assert count["signed"] == 2  # the login and the commit
    assert count["last_for"] == "signature in namespace 'git' (sha512)"
    owner_keys = subprocess.run(
        ["ssh-add", "-l"], env=owner.env(), capture_output=True, text=True, check=True
    ).stdout
    assert owner.other.fingerprint in owner_keys  # nothing removed, and not locked


def test_host_serves_the_agent_socket_in_the_runtime_dir(tmp_path: Path, owner: OwnerAgent) -> None:
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    host = Process(
        [*SANDBRIDGE, "host", "--runtime-dir", str(runtime), "--no-daemon",
         "--ssh-agent", "chosen"],
        env=owner.env(),
    )  # fmt: skip
    try:
        host.wait_line("sandbridge: ssh-agent on", stream="stderr", timeout=60)
        socket_path = runtime / SSH_AGENT_SOCKET
        assert socket_path.stat().st_mode & 0o777 == 0o600
        # What a container's ssh-add sees through the mounted runtime dir.
        listed = subprocess.run(
            ["ssh-add", "-L"],
            env={**os.environ, "SSH_AUTH_SOCK": str(socket_path)},
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        host.stop()
    assert listed.stdout.strip() == owner.chosen.public


def test_with_the_daemon_running_the_run_serves_its_agent_itself(
    xdg: Path, daemon: Process, owner: OwnerAgent, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    listed = subprocess.run(
        run_argv(work, "ssh-add", "-l", options=("--ssh-agent", "chosen", "--net", "none")),
        env=owner.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[1] == owner.chosen.fingerprint


def test_each_asks_on_the_session_s_terminal_before_each_git_signature(
    tmp_path: Path, owner: OwnerAgent
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "chosen.pub").write_text(owner.chosen.public + "\n")
    (work / "message").write_text("signed text\n")
    script = (
        'ssh-keygen -Y sign -n git -f chosen.pub message >/dev/null 2>&1; echo "ONE $?"; '
        "rm -f message.sig; "
        'ssh-keygen -Y sign -n git -f chosen.pub message >/dev/null 2>&1; echo "TWO $?"'
    )
    argv = run_argv(
        work, "sh", "-c", f"cd {work} && {script}",
        options=("--no-daemon", "--net", "none", "--ssh-agent", f"{owner.chosen.fingerprint}:each"),
    )  # fmt: skip
    child = pexpect.spawn(argv[0], argv[1:], env=owner.env(), timeout=120, encoding="utf-8")
    try:
        child.expect_exact(f"the sandbox asks to sign with your key {owner.chosen.fingerprint}")
        child.expect_exact("signature in namespace 'git'")
        child.expect_exact("allow this signature? [y/N] ")
        child.sendline("y")
        child.expect_exact("ONE 0")
        child.expect_exact("allow this signature? [y/N] ")
        child.sendline("n")
        child.expect_exact("TWO 255")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)

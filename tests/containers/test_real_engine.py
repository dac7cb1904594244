"""The container engine bridge in front of a real engine: rootless podman's Docker API
(the ``container_engine`` fixture, tests/support/container_engine.py), reached from inside
a real sandbox by a real HTTP client (curl over the Unix socket ``DOCKER_HOST`` names).

A listed image is created, started, waited for and its logs read; a privileged create is
refused naming its field and rule and the engine never holds such a container; the
session's container is gone from the engine when the session ends."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import Process, run_argv

SCRIPT = """\
set -u
S="${DOCKER_HOST#unix://}"
C="curl -s --unix-socket $S -H Content-Type:application/json"
ID=$($C -X POST -d "{\\"Image\\":\\"$IMAGE\\",\\"Cmd\\":[\\"echo\\",\\"hello from $IMAGE\\"]}" \\
  http://docker/v1.41/containers/create | sed 's/.*"Id": *"\\([0-9a-f]*\\)".*/\\1/')
echo "ID $ID"
echo "START $($C -o /dev/null -w '%{http_code}' -X POST http://docker/v1.41/containers/$ID/start)"
echo "WAIT $($C -X POST http://docker/v1.41/containers/$ID/wait)"
$C "http://docker/v1.41/containers/$ID/logs?stdout=1" | tr -c '[:print:]' ' ' | sed 's/^/LOGS /'
echo
echo "PRIVILEGED $($C -w ' %{http_code}' -X POST \\
  -d "{\\"Image\\":\\"$IMAGE\\",\\"HostConfig\\":{\\"Privileged\\":true}}" \\
  http://docker/v1.41/containers/create)"
echo "LIST $($C "http://docker/v1.41/containers/json?all=1" | grep -c "$ID")"
echo "CHECKS DONE"
"""


def _output(done: object) -> str:
    """What the fixture's ``run`` printed (a completed process, or its output)."""
    out = getattr(done, "stdout", done)
    return (out.decode() if isinstance(out, bytes) else str(out)).strip()


def _lines(process: Process) -> dict[str, str]:
    return {
        line.split(" ", 1)[0]: line.split(" ", 1)[1].strip() if " " in line else ""
        for line in process.lines["stdout"]
    }


def test_a_listed_image_runs_through_the_bridge_and_is_removed_at_the_end(
    tmp_path: Path, container_engine: Any
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "script.sh").write_text(SCRIPT)
    session = "ctr-real"
    argv = run_argv(
        work, "sh", str(work / "script.sh"),
        options=(
            "--name", session, "--no-daemon", "--net", "none", "--containers",
            "--containers-engine", f"unix://{container_engine.socket}",
            "--containers-image", container_engine.image, "--env=IMAGE",
        ),
    )  # fmt: skip
    process = Process(argv, env={**os.environ, "IMAGE": container_engine.image})
    process.wait_line("CHECKS DONE", timeout=180)
    assert process.popen.wait(timeout=120) == 0, process.lines["stderr"][-5:]
    found = _lines(process)
    cid = found["ID"]
    assert len(cid) == 64, found
    assert found["START"] == "204"
    assert '"StatusCode":0' in found["WAIT"].replace(" ", "")
    assert f"hello from {container_engine.image}" in found["LOGS"]
    assert found["LIST"] == "1"
    assert found["PRIVILEGED"].endswith(" 403")
    assert "(field HostConfig.Privileged, rule no-privileged)" in found["PRIVILEGED"]
    left = container_engine.run("ps", "-a", "--filter", f"label=sandbridge.session={session}",
                                "--format", "{{.ID}}")  # fmt: skip
    assert _output(left) == ""  # the refused one never made, the listed one removed


BIND_SCRIPT = """\
set -u
S="${DOCKER_HOST#unix://}"
C="curl -s --unix-socket $S -H Content-Type:application/json"
CMD='cat /src/file.txt; ls -A /src/.sandbridge | tr "\\\\n" " "; echo;
 echo x > /src/.git/hooks/pre-commit || echo HOOK_REFUSED; echo made > /src/made.txt'
BODY=$(printf '{"Image":"%s","Cmd":["sh","-c","%s"],"HostConfig":{"Binds":["%s:/src"]}}' \\
  "$IMAGE" "$(echo "$CMD" | tr '\\n' ' ' | sed 's/"/\\\\"/g')" "$PWD")
ID=$($C -X POST -d "$BODY" http://docker/v1.41/containers/create |
  sed 's/.*"Id": *"\\([0-9a-f]*\\)".*/\\1/')
echo "ID $ID"
$C -o /dev/null -X POST http://docker/v1.41/containers/$ID/start
$C -o /dev/null -X POST http://docker/v1.41/containers/$ID/wait
$C "http://docker/v1.41/containers/$ID/logs?stdout=1&stderr=1" | tr -c '[:print:]\\n' ' ' |
  sed 's/^ *//; s/^/OUT /'
echo "CHECKS DONE"
"""


def test_a_bind_of_the_workdir_keeps_what_the_sandbox_sees_read_only_or_hidden(
    tmp_path: Path, container_engine: Any
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "file.txt").write_text("in the workdir\n")
    (work / ".sandbridge").mkdir()
    (work / ".sandbridge" / "env").write_text("TOKEN=secret\n")
    (work / ".sandbridge" / "env").chmod(0o600)
    (work / ".gitignore").write_text(".sandbridge/env\n")
    (work / "script.sh").write_text(BIND_SCRIPT)
    argv = run_argv(
        work, "sh", str(work / "script.sh"),
        options=(
            "--no-daemon", "--net", "none", "--containers",
            "--containers-engine", f"unix://{container_engine.socket}",
            "--containers-image", container_engine.image, "--env=IMAGE",
        ),
    )  # fmt: skip
    process = Process(argv, env={**os.environ, "IMAGE": container_engine.image}, cwd=work)
    process.wait_line("CHECKS DONE", timeout=180)
    assert process.popen.wait(timeout=120) == 0, process.lines["stderr"][-5:]
    out = [line.removeprefix("OUT ") for line in process.lines["stdout"] if line.startswith("OUT")]
    assert "in the workdir" in out
    assert "HOOK_REFUSED" in " ".join(out)
    assert "env" not in " ".join(out)  # the secrets file is not in the container's view
    assert not (work / ".git" / "hooks" / "pre-commit").exists()
    assert (work / "made.txt").read_text() == "made\n"


HOSTILE_SCRIPT = r"""set -u
S="${DOCKER_HOST#unix://}"
C="curl -s --unix-socket $S -H Content-Type:application/json"
U=http://docker/v1.41/containers
mkdir d
echo "COMMA $($C -w ' %{http_code}' -X POST -d "{\"Image\":\"$IMAGE\",\"HostConfig\":{\"Mounts\":
 [{\"Type\":\"bind\",\"Source\":\"$PWD/d\",\"Target\":\"/x,source=/etc\"}]}}" $U/create)"
echo "CASE $($C -w ' %{http_code}' -X POST -d "{\"Image\":\"$IMAGE\",
 \"HostConfig\":{\"NetworkMode\":\"\",\"networkMode\":\"\"}}" $U/create)"
ID=$($C -X POST -d "{\"Image\":\"$IMAGE\",\"Cmd\":[\"ls\",\"/x\"],
 \"HostConfig\":{\"Binds\":[\"$PWD/d:/x\"]}}" $U/create | sed 's/.*"Id": *"\([0-9a-f]*\)".*/\1/')
echo "ID $ID"
mv d moved
ln -s /etc d
echo "START $($C -w ' %{http_code}' -X POST $U/$ID/start)"
echo "CHECKS DONE"
"""


def test_the_sandbox_is_refused_a_comma_in_a_path_a_case_variant_and_a_swapped_bind(
    tmp_path: Path, container_engine: Any
) -> None:
    # Each of these did what it says against this podman when sent straight to it: the
    # comma bound /etc, the case variant gave the container the engine's network, the
    # swap mounted the link's target.
    work = tmp_path / "work"
    work.mkdir()
    (work / "script.sh").write_text(HOSTILE_SCRIPT)
    session = "ctr-hostile"
    argv = run_argv(
        work, "sh", str(work / "script.sh"),
        options=(
            "--name", session, "--no-daemon", "--net", "none", "--containers",
            "--containers-engine", f"unix://{container_engine.socket}",
            "--containers-image", container_engine.image, "--env=IMAGE",
        ),
    )  # fmt: skip
    process = Process(argv, env={**os.environ, "IMAGE": container_engine.image}, cwd=work)
    process.wait_line("CHECKS DONE", timeout=180)
    assert process.popen.wait(timeout=120) == 0, process.lines["stderr"][-5:]
    found = _lines(process)
    assert found["COMMA"].endswith(" 403"), found
    assert "(field HostConfig.Mounts[0].Target, rule mount-paths)" in found["COMMA"]
    assert found["CASE"].endswith(" 403"), found
    assert "(field HostConfig.networkMode, rule field-case)" in found["CASE"]
    assert len(found["ID"]) == 64, found
    assert found["START"].endswith(" 403"), found
    assert "is now a link to /etc" in found["START"]
    assert "(field path.container, rule binds-inside-workdir)" in found["START"]

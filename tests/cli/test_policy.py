"""``sandbridge policy survey`` and ``policy init`` as commands: what they print (never a
value), what init refuses, and that init's policy lets the project's real install
command (pip, npm) work in a sandbox against the test-made internet."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import tarfile
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import dnslib
import dnslib.server

from tests.conftest import PYTHON, REPO, SANDBRIDGE, STARTS_A_SANDBOX, Process
from tests.egress.test_in_sandbox import NET_WORLD
from tests.support.command_in_process import sandbridge

SECRET = "planted-secret-cli-e4d2a6"
INDEX = "pkgs.test"  # the test-made internet's package host (tests/apps/net_world.py)


def hostile_project(root: Path) -> Path:
    """A project planting a secret everywhere the survey looks."""
    files = {
        "requirements.txt": f"-i https://u:{SECRET}@pkgs.corp.test/simple\nx\n",
        "package.json": "{}",
        ".npmrc": f"//npm.corp.test/:_authToken={SECRET}\nregistry=https://npm.corp.test/\n",
        ".env": f"API_KEY={SECRET}\n",
        "compose.yaml": (
            "services:\n  db:\n    ports:\n      - 5432:5432\n"
            f"    environment:\n      - DB_PASSWORD={SECRET}\n"
        ),
    }
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(root),
            "remote",
            "add",
            "origin",
            f"https://bob:{SECRET}@git.corp.test/x",
        ],
        check=True,
    )
    return root


def stock_env(home: Path, **extra: str) -> dict[str, str]:
    """A home of its own and empty pip and npm configurations (pip reads no file, npm's
    user and global files are empty): what a user with no configuration has, whatever
    this machine's own configuration says."""
    (home / ".npmrc-user").write_text("")
    (home / ".npmrc-global").write_text("")
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith(("PIP_", "NPM_", "UV_", "GO", "CARGO", "YARN_"))
    }
    env.pop("XDG_CONFIG_HOME", None)
    return env | {
        "HOME": str(home),
        "PIP_CONFIG_FILE": os.devnull,
        "NPM_CONFIG_USERCONFIG": str(home / ".npmrc-user"),
        "NPM_CONFIG_GLOBALCONFIG": str(home / ".npmrc-global"),
        **extra,
    }


def command(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """``sandbridge ARGS`` in :func:`stock_env` (``extra`` variables on top), in this
    process (tests/support/command_in_process.py)."""
    return sandbridge(*args, env=stock_env(home, **extra))


def git_only(tmp_path: Path) -> str:
    """A PATH with git alone: no npm, no python3 for ``policy init`` to ask (each asked is a
    process of about half a second of CPU). For the tests of what init does to the
    project's files, which no toolchain's answer changes; the tests of its allow list ask
    them."""
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    if not (tools / "git").exists():
        (tools / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    return str(tools)


def test_survey_prints_names_and_never_a_value(tmp_path: Path) -> None:
    project = hostile_project(tmp_path / "p")
    text = command(tmp_path, "policy", "survey", str(project))
    as_json = command(tmp_path, "policy", "survey", "--json", str(project))
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    assert "npm.corp.test" in text.stdout and "API_KEY" in text.stdout
    assert "git.corp.test" in text.stdout and ".git/config" in text.stdout
    found = json.loads(as_json.stdout)["findings"]
    assert {"kind": "service", "name": "5432", "where": "compose.yaml:4"}.items() <= next(
        f for f in found if f["kind"] == "service"
    ).items()
    for output in (text.stdout, text.stderr, as_json.stdout, as_json.stderr):
        assert SECRET not in output and "bob" not in output


def test_survey_changes_nothing(tmp_path: Path) -> None:
    project = hostile_project(tmp_path / "p")
    before = sorted(str(p) for p in project.rglob("*"))
    command(tmp_path, "policy", "survey", str(project))
    assert sorted(str(p) for p in project.rglob("*")) == before


def test_init_writes_the_files_and_prints_the_policy(tmp_path: Path) -> None:
    project = hostile_project(tmp_path / "p")
    result = command(tmp_path, "policy", "init", str(project))
    assert result.returncode == 0, result.stderr
    assert "100.64.0.1:5432 -> 127.0.0.1:5432" in result.stdout  # --print-policy's lines
    assert "npm.corp.test  ports 80,443,8443" in result.stdout
    assert f"sandbridge: wrote {project / '.sandbridge' / 'allow'}" in result.stderr
    assert "sandbridge: policy files read: " in result.stderr
    assert (project / ".gitignore").read_text() == "/.sandbridge/env\n"
    written = [p.read_text() for p in (project / ".sandbridge").iterdir()]
    for text in (result.stdout, result.stderr, *written):
        assert SECRET not in text


def git_ignores_the_secrets_file(project: Path) -> bool:
    result = subprocess.run(
        ["git", "-C", str(project), "check-ignore", "-q", "--no-index", ".sandbridge/env"],
        check=False,
    )
    return result.returncode == 0


def test_init_makes_git_ignore_the_secrets_file_despite_a_planted_negation(
    tmp_path: Path,
) -> None:
    # The line is there, and a later one takes it back: a line is no proof, git's answer is.
    project = hostile_project(tmp_path / "p")
    (project / ".gitignore").write_text("/.sandbridge/env\nbuild/\n!/.sandbridge/env\n")
    result = command(tmp_path, "policy", "init", str(project), PATH=git_only(tmp_path))
    assert result.returncode == 0, result.stderr
    assert git_ignores_the_secrets_file(project)
    assert f"sandbridge: wrote {project / '.gitignore'}" in result.stderr
    assert "warning" not in result.stderr
    # Already ignored (here by .git/info/exclude): .gitignore is left alone.
    other = hostile_project(tmp_path / "q")
    (other / ".git" / "info" / "exclude").write_text(".sandbridge/env\n")
    assert command(tmp_path, "policy", "init", str(other), PATH=git_only(tmp_path)).returncode == 0
    assert not (other / ".gitignore").exists()


def test_init_warns_when_a_deeper_rule_still_takes_the_ignore_back(tmp_path: Path) -> None:
    project = hostile_project(tmp_path / "p")
    (project / ".sandbridge").mkdir()
    (project / ".sandbridge" / ".gitignore").write_text("!env\n")
    result = command(tmp_path, "policy", "init", str(project), PATH=git_only(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "warning: git still does not ignore .sandbridge/env" in result.stderr


def test_init_never_writes_above_the_project_a_planted_repository_names(
    tmp_path: Path,
) -> None:
    # The sandbox ran `git init; git config core.worktree ..` in a workdir without git.
    above = tmp_path / "above"
    project = above / "p"
    project.mkdir(parents=True)
    (project / "requirements.txt").write_text("-i https://pkgs.corp.test/simple\n")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(["git", "-C", str(project), "config", "core.worktree", str(above)], check=True)
    for args in (("policy", "init", str(project)), ("run", "--workdir", str(project), "true")):
        result = command(tmp_path, *args)
        assert result.returncode == 2, result.stderr
        assert f"git puts its work tree at {above}, which has no .git" in result.stderr
    assert sorted(p.name for p in above.iterdir()) == ["p"]  # nothing written above


def test_init_refuses_to_replace_a_policy_without_force(tmp_path: Path) -> None:
    project = hostile_project(tmp_path / "p")
    (project / ".sandbridge").mkdir()
    (project / ".sandbridge" / "allow").write_text("reviewed.test\n")
    path = git_only(tmp_path)
    result = command(tmp_path, "policy", "init", str(project), PATH=path)
    assert result.returncode == 2
    assert "a policy exists; review it, or replace it with `sandbridge policy init --force`" in (
        result.stderr
    )
    assert (project / ".sandbridge" / "allow").read_text() == "reviewed.test\n"
    assert command(tmp_path, "policy", "init", "--force", str(project), PATH=path).returncode == 0


def test_init_without_a_toolchain_to_ask_writes_the_placeholder(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "package.json").write_text("{}")
    assert (
        command(tmp_path, "policy", "init", str(project), PATH=git_only(tmp_path)).returncode == 0
    )
    allow = (project / ".sandbridge" / "allow").read_text().splitlines()
    assert "# npm: add your registry host, e.g. from `npm config get registry`" in allow


def test_init_on_a_machine_without_configuration_writes_each_toolchains_default(
    tmp_path: Path,
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "package.json").write_text('{"dependencies": {"a": "1"}}')
    (project / "requirements.txt").write_text("requests\n")
    assert command(tmp_path, "policy", "init", str(project)).returncode == 0
    allow = (project / ".sandbridge" / "allow").read_text().splitlines()
    env = stock_env(tmp_path)
    npm_says = subprocess.run(
        ["npm", "config", "get", "registry"], env=env, cwd="/", capture_output=True, text=True
    ).stdout.strip()
    help_text = subprocess.run(
        ["python3", "-m", "pip", "install", "--help"], env=env, capture_output=True, text=True
    ).stdout
    pip_says = re.search(r"Package Index \(default\s+(\S+?)\)", help_text)
    assert pip_says, help_text
    for url, comment in (
        (npm_says, "# npm: npm registry, asked of npm (`npm config get registry`)"),
        (pip_says.group(1), "# pip: pip index-url, asked of pip (its built-in default)"),
    ):
        host = str(urlsplit(url).hostname)
        # This machine's DNS may give the name a non-global address: then it says private.
        [at] = [n for n, line in enumerate(allow) if line in (host, f"{host} private")]
        assert comment in allow[at - 2 : at], allow
    assert not any(line.startswith(("# npm: add", "# python: add")) for line in allow)


# --- the project's real install command, in a sandbox, with init's policy -------------------


def wheel(directory: Path) -> tuple[str, str]:
    """A minimal pure-Python wheel of ``sb-tiny`` 1.0; its file name and sha256."""
    name = "sb_tiny-1.0-py3-none-any.whl"
    files = {
        "sb_tiny/__init__.py": b"VALUE = 'installed from the test index'\n",
        "sb_tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sb-tiny\nVersion: 1.0\n",
        "sb_tiny-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append("sb_tiny-1.0.dist-info/RECORD,,")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr("sb_tiny-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    (directory / name).write_bytes(buffer.getvalue())
    return name, hashlib.sha256(buffer.getvalue()).hexdigest()


def package_index(served: Path) -> None:
    """``/simple/sb-tiny/`` (PEP 503) and the wheel under ``/files/``."""
    (served / "files").mkdir(parents=True)
    name, digest = wheel(served / "files")
    page = served / "simple" / "sb-tiny"
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        f'<html><body><a href="/files/{name}#sha256={digest}">{name}</a></body></html>\n'
    )


def npm_registry(served: Path) -> None:
    """``/npm/sb-tiny`` (a packument naming one version) and its tarball."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, data in {
            "package/package.json": b'{"name": "sb-tiny", "version": "1.0.0", "main": "i.js"}',
            "package/i.js": b"module.exports = 'installed from the test registry';\n",
        }.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    tarball = buffer.getvalue()
    (served / "tarballs").mkdir(parents=True)
    (served / "tarballs" / "sb-tiny-1.0.0.tgz").write_bytes(tarball)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    packument = {
        "name": "sb-tiny",
        "dist-tags": {"latest": "1.0.0"},
        "versions": {
            "1.0.0": {
                "name": "sb-tiny",
                "version": "1.0.0",
                "dist": {
                    "tarball": f"http://{INDEX}/tarballs/sb-tiny-1.0.0.tgz",
                    "shasum": hashlib.sha1(tarball).hexdigest(),  # npm still sends it
                    "integrity": integrity,
                },
            }
        },
    }
    (served / "npm").mkdir()
    (served / "npm" / "sb-tiny").write_text(json.dumps(packument))


def install_in_world(tmp_path: Path, project: Path, script: str) -> tuple[int, str, str]:
    """``policy init`` in ``project``, then ``script`` in a sandbox under that policy (and
    the world's resolver), with the test's files served as ``pkgs.test``."""
    init = command(tmp_path, "policy", "init", str(project))
    assert init.returncode == 0, init.stderr
    served = tmp_path / "served"
    served.mkdir()
    package_index(served)
    npm_registry(served)
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg), "NET_WORLD_FILES": str(served)}
    argv = [
        *SANDBRIDGE,
        "run",
        "--workdir",
        str(project),
        "--ro-bind",
        str(REPO),
        "--resolver",
        "127.0.0.1:5353",
        "--",
        "sh",
        "-c",
        script,
    ]
    assert os.getuid() == 0, "the test-made internet needs network namespaces: run as root"
    process = Process(["unshare", "--net", "--", PYTHON, NET_WORLD, "--", *argv], env=env)
    try:
        status = process.popen.wait(240)
    finally:
        if process.popen.poll() is None:
            process.stop()
    assert process.popen.stdout is not None and process.popen.stderr is not None
    return status, process.popen.stdout.read().decode(), process.popen.stderr.read().decode()


@STARTS_A_SANDBOX
def test_pip_installs_from_the_index_init_found(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "requirements.txt").write_text(
        f"--index-url http://{INDEX}/simple/\n--trusted-host {INDEX}\nsb-tiny==1.0\n"
    )
    status, stdout, stderr = install_in_world(
        tmp_path,
        project,
        f"{PYTHON} -m pip install --no-cache-dir --no-deps --target deps -r requirements.txt "
        "&& cat deps/sb_tiny/__init__.py",
    )
    allow = (project / ".sandbridge" / "allow").read_text().splitlines()
    assert allow[allow.index(INDEX) - 2] == "# requirements.txt:1: package index (--index-url)"
    assert status == 0, stderr
    assert "installed from the test index" in stdout
    assert f"HIT pkgs80 {INDEX} /simple/sb-tiny/" in stderr
    assert f"HIT pkgs80 {INDEX} /files/sb_tiny-1.0-py3-none-any.whl" in stderr


@STARTS_A_SANDBOX
def test_npm_installs_from_the_registry_init_found(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "package.json").write_text(
        '{"name": "app", "version": "1.0.0", "dependencies": {"sb-tiny": "1.0.0"}}'
    )
    (project / ".npmrc").write_text(f"registry=http://{INDEX}/npm/\n")
    status, stdout, stderr = install_in_world(
        tmp_path,
        project,
        "npm install --no-audit --no-fund --no-update-notifier "
        "&& node -e \"console.log(require('sb-tiny'))\"",
    )
    allow = (project / ".sandbridge" / "allow").read_text().splitlines()
    assert allow[allow.index(INDEX) - 1] == "# .npmrc:1: npm registry"
    assert status == 0, stderr
    assert "installed from the test registry" in stdout
    assert f"HIT pkgs80 {INDEX} /npm/sb-tiny" in stderr
    assert f"HIT pkgs80 {INDEX} /tarballs/sb-tiny-1.0.0.tgz" in stderr


@STARTS_A_SANDBOX
def test_pip_installs_from_a_mirror_on_a_non_global_address_with_inits_policy(
    tmp_path: Path,
) -> None:
    # The owner's pip names a company mirror, mirror.test, whose name resolves to
    # 192.0.2.3 (not a global address): init asks pip for it, resolves it with the
    # resolver it is given (and writes that into config), and writes `private`.
    project = tmp_path / "p"
    project.mkdir()
    (project / "requirements.txt").write_text("sb-tiny==1.0\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = http://mirror.test/simple/\ntrusted-host = mirror.test\n"
    )
    served = tmp_path / "served"
    served.mkdir()
    package_index(served)
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env = stock_env(tmp_path, PIP_CONFIG_FILE=str(conf), XDG_RUNTIME_DIR=str(xdg))
    env["NET_WORLD_FILES"] = str(served)
    script = (
        f"{PYTHON} -m pip install --no-cache-dir --no-deps --target deps "
        "--index-url http://mirror.test/simple/ --trusted-host mirror.test -r requirements.txt "
        "&& cat deps/sb_tiny/__init__.py"
    )
    init = [*SANDBRIDGE, "policy", "init", "--resolver", "127.0.0.1:5353", str(project)]
    run = [*SANDBRIDGE, "run", "--workdir", str(project), "--ro-bind", str(REPO), "--"]
    world = ["unshare", "--net", "--", PYTHON, NET_WORLD, "--", "sh", "-c"]
    both = f"{shlex.join(init)} && {shlex.join([*run, 'sh', '-c', script])}"
    assert os.getuid() == 0, "the test-made internet needs network namespaces: run as root"
    process = Process([*world, both], env=env)
    try:
        status = process.popen.wait(240)
    finally:
        if process.popen.poll() is None:
            process.stop()
    assert process.popen.stdout is not None and process.popen.stderr is not None
    stdout, stderr = process.popen.stdout.read().decode(), process.popen.stderr.read().decode()
    allow = (project / ".sandbridge" / "allow").read_text().splitlines()
    at = allow.index("mirror.test private")
    assert allow[at - 1] == (
        "# mirror.test resolves to 192.0.2.3 (private) and no global address (when init "
        "ran): 'private' lets the proxy connect to it"
    )
    assert "resolver = 127.0.0.1:5353" in (project / ".sandbridge" / "config").read_text()
    assert status == 0, stderr
    assert "installed from the test index" in stdout
    assert "HIT mirror80 mirror.test /simple/sb-tiny/" in stderr


class RecordingNames(dnslib.server.BaseResolver):  # type: ignore[misc]
    """Answers every name with 192.0.2.3 and keeps each name it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def resolve(self, request: dnslib.DNSRecord, handler: object) -> dnslib.DNSRecord:
        name = str(request.q.qname).lower()
        self.asked.append(name)
        reply = request.reply()
        if request.q.qtype == dnslib.QTYPE.A:
            reply.add_answer(dnslib.RR(name, dnslib.QTYPE.A, rdata=dnslib.A("192.0.2.3"), ttl=5))
        return reply


def test_init_resolves_the_owners_registries_never_a_name_the_project_chose(
    tmp_path: Path,
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    names = RecordingNames()
    quiet = dnslib.server.DNSLogger(log="-request,-reply,-truncated,-error", prefix=False)
    server = dnslib.server.DNSServer(names, port=port, address="127.0.0.1", logger=quiet)
    server.start_thread()
    try:
        project = tmp_path / "p"
        project.mkdir()
        (project / "requirements.txt").write_text(
            "--extra-index-url https://c2VjcmV0.chosen.test/simple/\nx\n"
        )
        conf = tmp_path / "pip.conf"
        conf.write_text("[global]\nindex-url = https://owner-mirror.test/simple/\n")
        result = command(
            tmp_path,
            "policy",
            "init",
            "--resolver",
            f"127.0.0.1:{port}",
            str(project),
            PIP_CONFIG_FILE=str(conf),
        )
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    assert "owner-mirror.test." in names.asked
    assert not any("chosen.test" in name for name in names.asked)
    allow = (project / ".sandbridge" / "allow").read_text().splitlines()
    assert "owner-mirror.test private" in allow and "c2vjcmv0.chosen.test" in allow

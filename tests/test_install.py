"""Installing sandbridge as a user does (README, "Install"): ``python -m build`` makes an
sdist and a wheel that install and run; a machine without a C compiler still installs it
and runs sessions on the Python relay, saying so once; ``./dev.sh install`` puts the three
commands on the user's PATH outside any project.

Each install goes into a virtualenv of the test's own. Without network, its dependencies
are the dev environment's, seen through a ``.pth`` line (a plain path: the dev
environment's editable sandbridge is not among them); the package is installed with
``--no-deps --no-index`` from the files built here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ECHO_APP, REPO, Process, echo, host_port_of

COMMANDS = ("sandbridge", "ags-webview-url", "sandbridge-open")
# Building compiles _front_*.c; installing copies a few hundred files.
BUILD_TIMEOUT = 300

# The suite's 120 s per test (pyproject.toml) is shorter than one build step may take
# here: a test whose build is slow on a loaded machine fails on its own step's bound, a
# step that hangs on pytest-timeout's a minute later.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(BUILD_TIMEOUT + 60)]


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
        **kwargs,  # type: ignore[call-overload]
    )
    assert result.returncode == 0, f"{argv[:4]}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
    return result  # type: ignore[no-any-return]


def _dev_site_packages() -> str:
    """The dev environment's site-packages (Debian's Python lists dist-packages beside it
    in ``site.getsitepackages()``: this is the one its packages are in)."""
    return sysconfig.get_paths()["purelib"]


def _user_env(home: Path) -> dict[str, str]:
    """A user of their own: home, runtime and state dirs made for the test."""
    (home / "run").mkdir(parents=True, mode=0o700)
    return {
        **os.environ,
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(home / "run"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
    }


def _copy_checkout(dest: Path) -> Path:
    """The checkout's sources at ``dest``, without what building or testing left in it
    (virtualenvs, built objects, metadata, the tools' caches): what a fresh clone has, and
    builds here write nothing into the checkout. The caches are written while this runs
    (mypy's, by the lint test on another worker): a file of theirs gone between the
    listing and the copy failed the copy."""
    shutil.copytree(
        REPO,
        dest,
        ignore=shutil.ignore_patterns(
            ".venv*",
            "node_modules",
            "build",
            "*.egg-info",
            "__pycache__",
            "*.so",
            ".git",
            ".mypy_cache",
            ".pytest_cache",
            ".ruff_cache",
            ".hypothesis",
        ),
    )
    return dest


def _venv_with(path: Path, wheel: Path) -> Path:
    """A virtualenv at ``path`` with ``wheel`` installed, its dependencies the dev
    environment's; its ``bin``."""
    venv.create(path, with_pip=False, symlinks=True)
    [packages] = list(path.glob("lib/python*/site-packages"))
    (packages / "dev-dependencies.pth").write_text(_dev_site_packages() + "\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(path / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ]
    )
    return path / "bin"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build``'s sdist and wheel (the wheel built from the sdist)."""
    out = tmp_path_factory.mktemp("dist")
    checkout = _copy_checkout(tmp_path_factory.mktemp("build") / "checkout")
    # --no-isolation: the build backend is requirements.lock's (no network here).
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(checkout)])
    return out


@pytest.fixture(scope="module")
def wheel_without_compiler(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from the sdist where no C compiler works (``CC=false``)."""
    out = tmp_path_factory.mktemp("no-cc")
    [sdist] = dist.glob("*.tar.gz")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(sdist),
        ],
        env={**os.environ, "CC": "false"},
    )
    [wheel] = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def pure_install(
    wheel_without_compiler: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A virtualenv with that wheel: sandbridge without its front door."""
    yield _venv_with(tmp_path_factory.mktemp("pure") / "venv", wheel_without_compiler)


def test_build_makes_an_sdist_and_a_wheel_with_the_front_door(dist: Path) -> None:
    names = sorted(path.name for path in dist.iterdir())
    assert len(names) == 2, names
    assert names[0].startswith("sandbridge-0.") and names[0].endswith("-linux_x86_64.whl")
    assert names[1].startswith("sandbridge-0.") and names[1].endswith(".tar.gz")
    listing = _run(["unzip", "-Z1", str(dist / names[0])]).stdout.split()
    assert any(
        name.startswith("sandbridge/relay/front/_front.") for name in listing if ".so" in name
    )
    assert "sandbridge/daemon/units/sandbridge.socket" in listing


def test_the_built_wheel_installs_its_three_commands_and_runs(dist: Path, tmp_path: Path) -> None:
    [wheel] = dist.glob("*.whl")
    bin_dir = _venv_with(tmp_path / "venv", wheel)
    env = _user_env(tmp_path / "home")
    version = _run([str(bin_dir / "sandbridge"), "--version"], env=env).stdout
    assert version.startswith("sandbridge 0.")
    report = json.loads(_run([str(bin_dir / "sandbridge"), "doctor", "--json"], env=env).stdout)
    front = next(check for check in report["checks"] if check["name"] == "front door")
    assert front["status"] == "ok"
    for name in COMMANDS:
        assert (bin_dir / name).is_file(), name
    # Outside a sandbox, the helper says it is meant for one (it runs: its module is there).
    helper = subprocess.run(
        [str(bin_dir / "ags-webview-url"), "5173"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert helper.returncode != 0 and "Traceback" not in helper.stderr, helper.stderr


def test_without_a_c_compiler_the_wheel_has_no_front_door(wheel_without_compiler: Path) -> None:
    listing = _run(["unzip", "-Z1", str(wheel_without_compiler)]).stdout.split()
    assert "sandbridge/relay/front/front.py" in listing
    assert not [name for name in listing if name.endswith(".so")]


def test_without_a_front_door_doctor_says_it_is_off_and_exits_0(
    pure_install: Path, tmp_path: Path
) -> None:
    env = _user_env(tmp_path / "home")
    result = _run([str(pure_install / "sandbridge"), "doctor", "--json"], env=env)
    report = json.loads(result.stdout)
    front = next(check for check in report["checks"] if check["name"] == "front door")
    assert front["status"] == "warn"
    assert front["found"].startswith("off (")
    assert "the Python relay serves every app" in front["found"]
    assert "python3-dev" in front["fix"]
    text = _run([str(pure_install / "sandbridge"), "doctor"], env=env).stdout
    assert "warn  front door: off (" in text


def _stderr(process: Process) -> list[str]:
    """Every line ``process`` (ended) wrote on stderr."""
    assert process.popen.stderr is not None
    data: bytes = process.popen.stderr.read()
    return data.decode("utf-8", "replace").splitlines()


def _session(bin_dir: Path, home: Path, *options: str) -> tuple[Process, list[str]]:
    """A ``sandbridge run -v`` of the echo app from ``bin_dir``'s install, registered
    twice (at ``/`` and ``/app``: two apps); their URLs."""
    work = home / "work"
    work.mkdir(parents=True)
    env = _user_env(home)
    process = Process(
        [
            str(bin_dir / "sandbridge"),
            "run",
            "-v",
            "--workdir",
            str(work),
            "--ro-bind",
            str(REPO),
            *options,
            "--",
            str(bin_dir / "python"),
            ECHO_APP,
            "--register",
            "4173",
            "--register",
            "4173:/app",
        ],
        env=env,
    )
    report = json.loads(process.wait_line("READY", timeout=60).removeprefix("READY "))
    return process, [str(url) for url in report["urls"]]


def test_without_a_front_door_a_session_serves_its_app_on_the_python_relay(
    pure_install: Path, tmp_path: Path
) -> None:
    process, urls = _session(pure_install, tmp_path / "home")
    try:
        assert echo(host_port_of(urls[0]), "/x")["server_port"] == 4173
        assert echo(host_port_of(urls[1]), "/y")["path"] == "/app/y"
    finally:
        process.stop()
    stderr = _stderr(process)
    off = [line for line in stderr if line.startswith("sandbridge: front.off ")]
    assert len(off) == 1, stderr  # said once, however many apps and requests
    assert "relay='python'" in off[0] and "python3-dev" in off[0]
    assert not [line for line in stderr if "Traceback" in line]


def test_no_front_door_never_tries_the_c(pure_install: Path, tmp_path: Path) -> None:
    process, urls = _session(pure_install, tmp_path / "home", "--no-front-door")
    try:
        assert echo(host_port_of(urls[0]), "/x")["server_port"] == 4173
    finally:
        process.stop()
    stderr = _stderr(process)
    assert [line for line in stderr if "sandbridge: session " in line], stderr  # (it logged)
    assert not [line for line in stderr if "front.off" in line]


def test_dev_sh_install_puts_the_commands_on_the_users_path(tmp_path: Path) -> None:
    # Without pipx (the test machines have none): a virtualenv in the user's data dir,
    # its commands linked into ~/.local/bin. Its dependencies come through pip's own
    # configuration, as on a user's machine.
    home = tmp_path / "home"
    env = _user_env(home)
    env["PATH"] = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if shutil.which("pipx", path=p) is None
    )
    env["PATH"] = f"{Path(sys.base_prefix) / 'bin'}{os.pathsep}{env['PATH']}"
    env["PIP_CACHE_DIR"] = str(tmp_path / "pip-cache")
    checkout = _copy_checkout(tmp_path / "checkout")
    result = _run([str(checkout / "dev.sh"), "install"], env=env)
    assert f"commands linked in {home}/.local/bin" in result.stdout
    assert f"{home}/.local/bin is not on PATH" in result.stdout
    for name in COMMANDS:
        link = home / ".local" / "bin" / name
        assert link.is_symlink(), name
        assert Path(os.readlink(link)).is_relative_to(home / ".local" / "share" / "sandbridge")
    version = _run([str(home / ".local" / "bin" / "sandbridge"), "--version"], env=env)
    assert version.stdout.startswith("sandbridge 0.")
    # python3's own pip filled the virtualenv where it has one (README, "Install"), which
    # then has no pip of its own.
    base_pip = subprocess.run(
        [str(Path(sys.base_prefix) / "bin" / "python3"), "-m", "pip", "--python", "x", "-h"],
        capture_output=True,
        check=False,
    )
    own_pip = home / ".local" / "share" / "sandbridge" / "venv" / "bin" / "pip"
    assert own_pip.exists() == (base_pip.returncode != 0), base_pip
    # The shells' completions, where each looks for a user's own; zsh's fpath line said.
    share = home / ".local" / "share"
    for script in (
        share / "bash-completion" / "completions" / "sandbridge",
        share / "zsh" / "site-functions" / "_sandbridge",
        home / ".config" / "fish" / "completions" / "sandbridge.fish",
    ):
        assert "agents" in script.read_text(), script
    assert f'fpath=("{share}/zsh/site-functions" $fpath)' in result.stdout
    # Outside the checkout: the install does not lean on it.
    shutil.rmtree(checkout)
    _run([str(home / ".local" / "bin" / "sandbridge"), "doctor"], env=env, cwd=home)

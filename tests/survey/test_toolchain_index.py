"""The index each toolchain uses, asked of the real pip and npm of this machine, each
given an empty configuration (what a user with none gets) or a test's own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from sandbridge.places import host_commands
from sandbridge.survey.packages import NPM, PYTHON
from sandbridge.survey.toolchain_index import npm_registry, pip_index, run_tool, toolchain_indexes


def stock_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment with no pip or npm configuration: a fresh HOME, pip told to read no
    file, npm's user and global files empty, and none of their variables."""
    home.mkdir(exist_ok=True)
    (home / "npmrc-user").write_text("")
    (home / "npmrc-global").write_text("")
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith(("PIP_", "NPM_CONFIG_", "XDG_CONFIG"))
    }
    env |= {
        "HOME": str(home),
        "PIP_CONFIG_FILE": os.devnull,
        "NPM_CONFIG_USERCONFIG": str(home / "npmrc-user"),
        "NPM_CONFIG_GLOBALCONFIG": str(home / "npmrc-global"),
        **extra,
    }
    return env


def pip_says(env: dict[str, str]) -> str:
    """The index ``pip install --help`` names as its default under ``env``."""
    text = subprocess.run(
        ["python3", "-m", "pip", "install", "--help"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(
        r"--index-url <url>\s+Base URL of the Python Package Index\s+\(default\s+(\S+?)\)", text
    )
    assert match, text
    return match.group(1)


def test_pip_without_configuration_gives_its_built_in_index_and_file_host(
    tmp_path: Path,
) -> None:
    env = stock_env(tmp_path / "home")
    file_host = subprocess.run(  # what pip itself names the file host of its index
        [
            "python3",
            "-c",
            "from pip._internal.models.index import PyPI as p; print(p.file_storage_domain)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    found = pip_index(env)
    index = urlsplit(pip_says(env)).hostname
    assert [(f.name, f.where, f.what, f.ecosystem) for f in found] == [
        (index, "pip", "pip index-url, asked of pip (its built-in default)", "python"),
        (
            file_host,
            "pip",
            "pip's file host for its built-in index, asked of pip",
            "python",
        ),
    ]


def test_pip_with_a_configured_index_gives_that_index_alone(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://u:planted@mirror.corp.test/simple\n"
        "extra-index-url = https://extra.corp.test/simple\n"
    )
    env = stock_env(tmp_path / "home", PIP_CONFIG_FILE=str(conf))
    found = pip_index(env)
    assert urlsplit(pip_says(env)).hostname == "mirror.corp.test"
    assert [(f.name, f.what) for f in found] == [
        ("mirror.corp.test", "pip index-url, asked of pip (its configuration)"),
        ("extra.corp.test", "pip extra-index-url, asked of pip (its configuration)"),
    ]
    assert "planted" not in repr(found)


def npm_says(env: dict[str, str]) -> str:
    return subprocess.run(
        ["npm", "config", "get", "registry"],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.mark.parametrize("configured", [None, "https://npm.mirror.test/"])
def test_npm_gives_what_npm_config_get_registry_prints(
    tmp_path: Path, configured: str | None
) -> None:
    assert shutil.which("npm"), "npm is needed (./dev.sh setup installs it)"
    env = stock_env(tmp_path / "home")
    if configured is not None:
        Path(env["NPM_CONFIG_USERCONFIG"]).write_text(f"registry={configured}\n")
    [found] = npm_registry(env)
    assert found.name == urlsplit(npm_says(env)).hostname
    assert (found.where, found.ecosystem) == ("npm", "npm")
    assert found.what == "npm registry, asked of npm (`npm config get registry`)"
    if configured is not None:
        assert found.name == "npm.mirror.test"


def test_the_projects_own_npmrc_plays_no_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "package.json").write_text("{}")
    (project / ".npmrc").write_text("registry=https://chosen-by-the-sandbox.test/\n")
    monkeypatch.chdir(project)
    [found] = npm_registry(stock_env(tmp_path / "home"))
    assert found.name != "chosen-by-the-sandbox.test"


def test_a_missing_toolchain_gives_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = stock_env(tmp_path / "home", PATH=str(empty))
    assert pip_index(env) == [] and npm_registry(env) == []


def test_a_tool_the_sandbox_wrote_on_an_activated_path_is_never_run(tmp_path: Path) -> None:
    # The owner's shell has the project's virtualenv and node_modules/.bin first on PATH;
    # the sandbox wrote a python3 and an npm there. init asks the host's own tools, and
    # runs nothing of the project's.
    project = tmp_path / "project"
    ran = tmp_path / "ran"
    for bin_dir, name in ((".venv/bin", "python3"), ("node_modules/.bin", "npm")):
        (project / bin_dir).mkdir(parents=True)
        tool = project / bin_dir / name
        tool.write_text(f"#!/bin/sh\necho {name} >> {ran}\necho '\"http://evil.test/\"'\n")
        tool.chmod(0o755)
    trusted = stock_env(tmp_path / "home")
    activated = dict(
        trusted,
        PATH=f"{project}/.venv/bin:{project}/node_modules/.bin:{trusted['PATH']}",
    )
    host_commands.distrust([project])
    assert pip_index(activated) == pip_index(trusted)
    assert npm_registry(activated) == npm_registry(trusted)
    assert not ran.exists(), ran.read_text()


@pytest.mark.parametrize(
    ("ecosystems", "asked"),
    [
        ((), []),
        ((PYTHON,), ["pip"]),
        ((NPM,), ["npm"]),
        ((PYTHON, NPM, "cargo"), ["pip", "npm"]),
    ],
    ids=["none", "python", "npm", "all"],
)
def test_only_the_projects_own_toolchains_are_asked(
    tmp_path: Path, ecosystems: tuple[str, ...], asked: list[str]
) -> None:
    """A project without Python has no pip section in its policy: pip is not run for it
    (about 0.8 s of CPU), nor npm for a project without npm."""
    ran: list[str] = []

    def run(argv: list[str], environ: Mapping[str, str]) -> str | None:
        ran.append("npm" if Path(argv[0]).name == "npm" else "pip")  # (pip: python3 -c)
        return run_tool(argv, environ)

    found = toolchain_indexes(stock_env(tmp_path / "home"), ecosystems, run)
    assert ran == asked
    assert {f.ecosystem for f in found} == set(ecosystems) & {PYTHON, NPM}

"""The registries this host's own toolchain configuration names, read as files only."""

from __future__ import annotations

from pathlib import Path

from sandbridge.survey.findings import Finding, Kind
from sandbridge.survey.presets import PRESETS, HostConfig, host_registries, replaces_default

SECRET = "planted-secret-host-41c2"


def config(tmp_path: Path, environ: dict[str, str] | None = None) -> HostConfig:
    home, etc = tmp_path / "home", tmp_path / "etc"
    home.mkdir(exist_ok=True)
    etc.mkdir(exist_ok=True)
    return HostConfig(home, etc, environ or {})


def test_nothing_configured_names_nothing(tmp_path: Path) -> None:
    assert host_registries(config(tmp_path)) == []


def test_pip_conf_npmrc_and_cargo_config_of_the_owner(tmp_path: Path) -> None:
    host = config(tmp_path)
    (host.home / ".config" / "pip").mkdir(parents=True)
    (host.home / ".config" / "pip" / "pip.conf").write_text(
        f"[global]\nindex-url = https://u:{SECRET}@mirror.corp.test/simple\n"
    )
    (host.home / ".npmrc").write_text(
        f"registry=https://npm.mirror.test/\n//npm.mirror.test/:_authToken={SECRET}\n"
    )
    (host.home / ".cargo").mkdir()
    (host.home / ".cargo" / "config.toml").write_text(
        '[source.corp]\nregistry = "sparse+https://crates.mirror.test/"\n'
    )
    found = {(f.ecosystem, f.name, f.where) for f in host_registries(host)}
    assert ("python", "mirror.corp.test", "~/.config/pip/pip.conf:2") in found
    assert ("npm", "npm.mirror.test", "~/.npmrc:1") in found
    assert ("cargo", "crates.mirror.test", "~/.cargo/config.toml:2") in found
    assert SECRET not in repr(host_registries(host))


def test_registry_variables_of_the_environment(tmp_path: Path) -> None:
    host = config(
        tmp_path,
        {
            "GOPROXY": "https://proxy.mirror.test,direct",
            "npm_config_registry": "https://npm.env.test/",
            "PIP_INDEX_URL": f"https://u:{SECRET}@pip.env.test/simple",
            "UNRELATED": "https://unrelated.test/",
        },
    )
    found = {(f.ecosystem, f.name, f.where) for f in host_registries(host)}
    assert found == {
        ("go", "proxy.mirror.test", "$GOPROXY"),
        ("npm", "npm.env.test", "$NPM_CONFIG_REGISTRY"),
        ("python", "pip.env.test", "$PIP_INDEX_URL"),
    }


def test_system_pip_conf_is_read_from_etc(tmp_path: Path) -> None:
    host = config(tmp_path)
    (host.etc / "pip.conf").write_text("[global]\nindex-url = https://etc.mirror.test/simple\n")
    [finding] = host_registries(host)
    assert finding.name == "etc.mirror.test"
    assert finding.where == f"{host.etc / 'pip.conf'}:2"


def test_a_scoped_npm_registry_does_not_replace_the_default() -> None:
    npm = PRESETS["npm"]
    scoped = Finding(Kind.HOST, "a.test", ".npmrc:1", "scoped registry @a", "npm")
    plain = Finding(Kind.HOST, "b.test", ".npmrc:2", "npm registry", "npm")
    assert not replaces_default(npm, [scoped])
    assert replaces_default(npm, [scoped, plain])


def test_a_fifo_or_directory_in_place_of_a_config_file_is_skipped(tmp_path: Path) -> None:
    import os

    host = config(tmp_path)
    os.mkfifo(host.home / ".npmrc")
    (host.etc / "pip.conf").mkdir()
    assert host_registries(host) == []  # returns at all: the FIFO was not read

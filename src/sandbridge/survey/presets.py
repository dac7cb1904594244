"""What each toolchain needs to reach, and where this host's own configuration names it.

``sandbridge policy init`` turns a survey into a policy. A project's files name the hosts
they chose (an ``--index-url``, a ``registry=``, a lockfile's URLs); a toolchain's
*default* registry is named nowhere in the project, and sandbridge does not write one
down either: pip's and npm's are asked of pip and npm themselves
(:mod:`sandbridge.survey.toolchain_index`: their configuration, else their built-in
default); the others come from this host's own configuration of the tool (the owner's
``pip.conf``, ``~/.npmrc``, ``~/.cargo/config.toml``, the go env file, ``~/.gemrc``,
``~/.m2/settings.xml`` and the tools' registry variables), read here as files. Where
nothing names a registry, the policy gets a comment saying which hosts the ecosystem
needs and how to find them, for the owner to fill in.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sandbridge.survey import packages as survey_packages
from sandbridge.survey import services as survey_services
from sandbridge.survey.findings import Finding, Kind, Reader

# The owner's configuration files are small; a larger one is not read.
MAX_CONFIG_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Preset:
    """One ecosystem: what it needs, how to find it, and which of its findings replace the
    toolchain's default registry (then no placeholder is needed)."""

    ecosystem: str
    needs: str  # what the toolchain reaches, in words
    placeholder: str  # the comment written when nothing names those hosts
    replaces_default: tuple[str, ...]  # ``Finding.what`` prefixes that name the registry


PRESETS: dict[str, Preset] = {
    preset.ecosystem: preset
    for preset in (
        Preset(
            survey_packages.PYTHON,
            "pip and uv download from a package index and the host its files are served from",
            "python: add the package index host and its file host, e.g. from "
            "`pip config list` or `pip download -v` (pip's default index names both)",
            (
                "package index",
                "pip index-url",
                "[tool.uv] index-url",
                "PIP_INDEX_URL",
                "UV_INDEX_URL",
                "UV_DEFAULT_INDEX",
            ),
        ),
        Preset(
            survey_packages.NPM,
            "npm, yarn and pnpm download from one registry (tarballs included)",
            "npm: add your registry host, e.g. from `npm config get registry`",
            ("npm registry", "yarn registry", "NPM_CONFIG_REGISTRY", "YARN_NPM_REGISTRY_SERVER"),
        ),
        Preset(
            survey_packages.CARGO,
            "cargo reads a crates index and downloads crates from a second host",
            "cargo: add the crates index host and the host crates are downloaded from "
            "(the index's config.json names it: `cargo fetch -v` shows both)",
            ("cargo registry config",),
        ),
        Preset(
            survey_packages.GO,
            "go fetches modules through a module proxy and checks them with a checksum database",
            "go: add the module proxy and checksum database hosts: `go env GOPROXY GOSUMDB`",
            ("GOPROXY",),
        ),
        Preset(
            survey_packages.RUBY,
            "bundler and gem download from a gem source",
            "ruby: add the gem source host: `gem sources` lists it",
            ("gem source", "Gemfile.lock remote"),
        ),
        Preset(
            survey_packages.MAVEN,
            "maven downloads from a repository (Maven Central or a mirror)",
            "maven: add the repository host: `mvn help:effective-settings` shows mirrors, "
            "Maven Central's host is in Maven's documentation",
            ("maven repository",),
        ),
        Preset(
            survey_packages.GRADLE,
            "gradle downloads the wrapper's distribution, plugins from the plugin portal "
            "and dependencies from the repositories the build names",
            "gradle: add the hosts of the repositories the build names "
            "(`gradle --info` prints each URL it downloads)",
            ("gradle repository",),
        ),
    )
}


@dataclass(frozen=True, slots=True)
class HostConfig:
    """Where this host's toolchains keep their configuration (tests give their own)."""

    home: Path
    etc: Path
    environ: Mapping[str, str]

    @classmethod
    def of_this_host(cls) -> HostConfig:
        return cls(Path.home(), Path("/etc"), dict(os.environ))

    def shown(self, path: Path) -> str:
        """``~/.npmrc`` for a file under home, the path otherwise."""
        if path.is_relative_to(self.home):
            return f"~/{path.relative_to(self.home)}"
        return str(path)


def _files(config: HostConfig) -> list[tuple[Path, Reader]]:
    home, etc, env = config.home, config.etc, config.environ
    cargo_home = Path(env.get("CARGO_HOME") or home / ".cargo")
    xdg = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    return [
        (etc / "pip.conf", survey_packages.read_pip_conf),
        (xdg / "pip" / "pip.conf", survey_packages.read_pip_conf),
        (home / ".pip" / "pip.conf", survey_packages.read_pip_conf),
        (xdg / "uv" / "uv.toml", survey_packages.read_uv_toml),
        (etc / "npmrc", survey_packages.read_npmrc),
        (home / ".npmrc", survey_packages.read_npmrc),
        (home / ".yarnrc.yml", survey_packages.read_yarnrc),
        (cargo_home / "config.toml", survey_packages.read_cargo_config),
        (cargo_home / "config", survey_packages.read_cargo_config),
        (xdg / "go" / "env", survey_services.read_env_file),
        (home / ".gemrc", _read_gemrc),
        (home / ".m2" / "settings.xml", survey_packages.read_pom),
    ]


def _read_gemrc(path: str, text: str) -> list[Finding]:
    return survey_packages.url_findings(path, text, "gem source", survey_packages.RUBY)


def _read(path: Path) -> str | None:
    """A small regular file's text (the owner's own configuration), or ``None``."""
    try:
        # Non-blocking, and a regular file only: a FIFO there must not hang init.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_CONFIG_BYTES:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def host_registries(config: HostConfig) -> list[Finding]:
    """Registry hosts this host's toolchain configuration names (files, then variables)."""
    found: list[Finding] = []
    for path, reader in _files(config):
        text = _read(path)
        if text is not None:
            found += [f for f in reader(config.shown(path), text) if f.kind is not Kind.ECOSYSTEM]
    names = sorted(survey_services.REGISTRY_VARIABLES)
    values = {name: config.environ.get(name, "") for name in names}
    values["NPM_CONFIG_REGISTRY"] = values["NPM_CONFIG_REGISTRY"] or config.environ.get(
        "npm_config_registry", ""
    )
    for name, value in values.items():
        if not value:
            continue
        for finding in survey_services.read_env_file("environment", f"{name}={value}"):
            if finding.kind is not Kind.VARIABLE:
                found.append(
                    Finding(
                        finding.kind,
                        finding.name,
                        f"${name}",
                        f"{name} in this host's environment",
                        finding.ecosystem,
                        finding.port,
                    )
                )
    return [f for f in found if f.kind in (Kind.HOST, Kind.SERVICE) and f.ecosystem]


def replaces_default(preset: Preset, findings: list[Finding]) -> bool:
    """Whether ``findings`` name the ecosystem's main registry (no placeholder needed)."""
    return any(
        f.ecosystem == preset.ecosystem and f.what.startswith(preset.replaces_default)
        for f in findings
    )

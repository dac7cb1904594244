"""Readers of package manifests, lockfiles and registry configuration (pure: text in,
findings out).

Each reader takes a file's path (relative, for ``file:line``) and its text and returns
:class:`~sandbridge.survey.findings.Finding` s: the ecosystem the file belongs to
and the hosts its tools reach (registries, their file hosts, git dependencies), never a
value. ``.npmrc`` lines that carry a token give their host and nothing else. Nothing is
executed: ``setup.py`` and ``build.gradle`` are read as text, and only lines that name a
repository count.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sandbridge.survey.comments import without_c_comments, without_xml_comments
from sandbridge.survey.findings import URL, Finding, Kind, Reader, host_finding, url_host

PYTHON, NPM, CARGO, GO, RUBY, MAVEN, GRADLE = (
    "python",
    "npm",
    "cargo",
    "go",
    "ruby",
    "maven",
    "gradle",
)

_PIP_OPTION = re.compile(
    r"^\s*(?P<option>-i|--index-url|--extra-index-url|-f|--find-links|--trusted-host)"
    r"(?:\s*=\s*|\s+)(?P<value>\S+)"
)
_PIP_OPTION_WHAT = {
    "-i": "package index (-i)",
    "--index-url": "package index (--index-url)",
    "--extra-index-url": "extra package index (--extra-index-url)",
    "-f": "find-links (-f)",
    "--find-links": "find-links (--find-links)",
    "--trusted-host": "trusted host (--trusted-host)",
}
_PIP_CONF_KEY = re.compile(r"^(?P<key>index-url|extra-index-url|find-links|trusted-host)\s*[=:]")
_NPMRC_REGISTRY = re.compile(r"^\s*(?P<scope>@[^:\s]+:)?registry\s*=\s*(?P<url>\S+)")
_NPMRC_AUTH = re.compile(r"^\s*//(?P<host>[^/:\s]+)(?::(?P<port>[0-9]+))?/")
_GRADLE_REPOS = {
    "mavenCentral()": (MAVEN, "mavenCentral()"),
    "google()": (GRADLE, "google()"),
    "gradlePluginPortal()": (GRADLE, "gradlePluginPortal()"),
    "jcenter()": (GRADLE, "jcenter()"),
}


# Where a comment begins: ``#`` at a line's start or after a space (pip's own rule, and
# TOML's, YAML's, Ruby's, a properties file's outside a value). Gradle's and XML's comments
# are taken out of the whole text first (:mod:`.survey_comments`): they span lines.
_HASH_COMMENT = re.compile(r"(?:^|\s)#")
_PROPERTIES_COMMENT = re.compile(r"^\s*[#!]|\s#")
# A Gemfile's source values: ``source "URL"`` and ``git "URL"`` (a line's first word), and a
# gem's ``git: "URL"``, ``source: "URL"``, ``:git => "URL"``, ``:source => "URL"``. No two
# quantifiers meet over the same characters (``\s*\(?\s*`` would: quadratic in a line of
# spaces).
_GEM_SOURCE = re.compile(
    r"""(?:^\s*(?:source|git)(?:\s*\(\s*|\s+)|\b(?:git|source)\s*:\s*|:(?:git|source)\s*=>\s*)"""
    r"""(?P<quote>["'])(?P<url>[^"'\s]+)(?P=quote)"""
)
# Keys whose values are sources a lockfile's tool fetches from (not its descriptions).
_LOCK_URL_KEYS = frozenset({"url", "registry"})
# Keys of Cargo.toml and .cargo/config.toml whose values are registries or git sources
# (not ``repository``, ``homepage`` or ``documentation``, which nothing fetches).
_CARGO_URL_KEYS = frozenset({"git", "index", "registry", "registry-index"})

# Characters one file's line lookups may search in all (Locator).
MAX_LOCATE_CHARS = 16 * 1024 * 1024


def numbered(text: str) -> Iterator[tuple[int, str]]:
    return enumerate(text.splitlines(), start=1)


def uncommented(line: str, comment: re.Pattern[str] | None = _HASH_COMMENT) -> str:
    """``line`` without its comment: a URL there is no source the tool reads."""
    found = None if comment is None else comment.search(line)
    return line if found is None else line[: found.start()]


class Locator:
    """Line numbers of values found in one file's text (TOML and JSON give no lines).

    Each lookup is a search in C, but a manifest may hold thousands of URLs, each looked
    up across a megabyte: past :data:`MAX_LOCATE_CHARS` characters searched, a value is
    named by its file alone (quadratic otherwise: minutes for one hostile file)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.budget = MAX_LOCATE_CHARS

    def line_of(self, needle: str, start: int = 0) -> int | None:
        """The line of the first ``needle`` at or after character ``start``."""
        if self.budget <= 0:
            return None
        index = self.text.find(needle, start)
        self.budget -= (len(self.text) if index < 0 else index + len(needle)) - start
        return None if index < 0 else self.text.count("\n", 0, index) + 1


def at(path: str, line: int | None) -> str:
    return path if line is None else f"{path}:{line}"


def ecosystem(path: str, name: str, what: str) -> Finding:
    return Finding(Kind.ECOSYSTEM, name, path, what, name)


def url_findings(  # noqa: PLR0913  (the file, what it names, and how its lines are read)
    path: str,
    text: str,
    what: str,
    name: str,
    keep: Callable[[str], bool] | None = None,
    comment: re.Pattern[str] | None = _HASH_COMMENT,
) -> list[Finding]:
    """A host finding for every URL on the lines ``keep`` accepts (every line by default),
    each line without its ``comment``."""
    found = []
    for number, raw in numbered(text):
        line = uncommented(raw, comment)
        if keep is None or keep(line):
            found += line_findings(line, f"{path}:{number}", what, name)
    return found


def keyed_values(data: Any, keys: frozenset[str]) -> list[str]:
    """Every string held under one of ``keys`` in parsed TOML or JSON, at any depth
    (walked without recursion: a hostile file may nest past the stack)."""
    found: list[str] = []
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key in keys:
                    found += _strings(item)
                stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
    found.reverse()  # popped last-first: give them back in the file's order, roughly
    return found


def keyed_url_findings(  # noqa: PLR0913  (the file, its parsed values, what they name)
    path: str, text: str, data: Any, keys: frozenset[str], what: str, name: str
) -> list[Finding]:
    """A host finding for every URL held under one of ``keys`` of the parsed ``data``."""
    found = []
    lines = Locator(text)
    for value in keyed_values(data, keys):
        if "://" in value:
            finding = host_finding(value, at(path, lines.line_of(value)), what, name)
            if finding is not None:
                found.append(finding)
    return found


def starting(*prefixes: str) -> Callable[[str], bool]:
    """Lines whose first word starts with one of ``prefixes``."""
    return lambda line: line.lstrip().startswith(prefixes)


def holding(*words: str) -> Callable[[str], bool]:
    """Lines that hold one of ``words``."""
    return lambda line: any(word in line for word in words)


def _url_property(line: str) -> bool:
    """``distributionUrl=...``, ``wrapperUrl=...`` of a wrapper's properties."""
    return line.strip().lower().split("=", 1)[0].endswith("url")


def line_findings(line: str, where: str, what: str, name: str) -> list[Finding]:
    """A host finding for every URL in one line."""
    found = []
    for url in _urls(line):
        finding = host_finding(url, where, what, name)
        if finding is not None:
            found.append(finding)
    return found


def _urls(line: str) -> list[str]:
    return [match.group(0) for match in URL.finditer(line)]


# --- python ---------------------------------------------------------------------------


def read_requirements(path: str, text: str) -> list[Finding]:
    found = [ecosystem(path, PYTHON, "requirements file")]
    for number, raw in numbered(text):
        where = f"{path}:{number}"
        line = uncommented(raw)
        option = _PIP_OPTION.match(line)
        if option is None:
            found += line_findings(line, where, "direct reference", PYTHON)
            continue
        value, name = option.group("value"), option.group("option")
        if name == "--trusted-host":
            parsed = url_host(f"http://{value}")
            if parsed is not None:
                found.append(Finding(Kind.HOST, parsed[0], where, _PIP_OPTION_WHAT[name], PYTHON))
            continue
        finding = host_finding(value, where, _PIP_OPTION_WHAT[name], PYTHON)
        if finding is not None:
            found.append(finding)
    return found


def read_pip_conf(path: str, text: str) -> list[Finding]:
    found = [ecosystem(path, PYTHON, "pip configuration")]
    key = ""
    for number, line in numbered(text):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        match = _PIP_CONF_KEY.match(stripped)
        if match is not None:
            key = match.group("key")
            values = stripped[match.end() :].split()
        elif line[:1].isspace() and key:
            values = stripped.split()  # a continuation line of a multi-valued key
        else:
            key = ""
            continue
        for value in values:
            url = f"http://{value}" if key == "trusted-host" else value
            finding = host_finding(url, f"{path}:{number}", f"pip {key}", PYTHON)
            if finding is not None:
                found.append(finding)
    return found


def _toml(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return {}


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def _table_urls(path: str, text: str, sources: Iterable[tuple[Any, str]]) -> list[Finding]:
    found = []
    lines = Locator(text)
    for value, what in sources:
        for url in _strings(value):
            finding = host_finding(url, at(path, lines.line_of(url)), what, PYTHON)
            if finding is not None:
                found.append(finding)
    return found


def _uv_sources(uv: dict[str, Any], prefix: str) -> list[tuple[Any, str]]:
    sources: list[tuple[Any, str]] = [
        (uv.get("index-url"), f"{prefix}index-url"),
        (uv.get("extra-index-url"), f"{prefix}extra-index-url"),
        (uv.get("find-links"), f"{prefix}find-links"),
    ]
    for index in uv.get("index", []) if isinstance(uv.get("index"), list) else []:
        if isinstance(index, dict):
            sources.append((index.get("url"), f"{prefix}index"))
    return sources


def read_pyproject(path: str, text: str) -> list[Finding]:
    data = _toml(text)
    found = [ecosystem(path, PYTHON, "pyproject.toml")]
    tool = data.get("tool", {}) if isinstance(data.get("tool"), dict) else {}
    sources: list[tuple[Any, str]] = []
    uv = tool.get("uv")
    if isinstance(uv, dict):
        sources += _uv_sources(uv, "[tool.uv] ")
    for name in ("poetry", "pdm"):
        section = tool.get(name)
        listed = section.get("source", []) if isinstance(section, dict) else []
        for source in listed if isinstance(listed, list) else []:
            if isinstance(source, dict):
                sources.append((source.get("url"), f"[tool.{name}] source"))
    project = data.get("project", {}) if isinstance(data.get("project"), dict) else {}
    for requirement in _strings(project.get("dependencies")):
        if " @ " in requirement:
            sources.append((requirement.split(" @ ", 1)[1].strip(), "direct reference"))
    return found + _table_urls(path, text, sources)


def read_uv_toml(path: str, text: str) -> list[Finding]:
    return [
        ecosystem(path, PYTHON, "uv.toml"),
        *_table_urls(path, text, _uv_sources(_toml(text), "")),
    ]


def read_pipfile(path: str, text: str) -> list[Finding]:
    keep = starting("url")
    return [
        ecosystem(path, PYTHON, "Pipfile"),
        *url_findings(path, text, "Pipfile source", PYTHON, keep),
    ]


def read_python_project(path: str, text: str) -> list[Finding]:
    return [ecosystem(path, PYTHON, path.rsplit("/", 1)[-1])]


# --- npm, yarn, pnpm --------------------------------------------------------------------


def read_package_json(path: str, text: str) -> list[Finding]:
    found = [ecosystem(path, NPM, "package.json")]
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: [[[[... nested past the stack
        return found
    if not isinstance(data, dict):
        return found
    lines = Locator(text)
    for field in ("dependencies", "devDependencies", "optionalDependencies", "peerDependencies"):
        deps = data.get(field)
        if not isinstance(deps, dict):
            continue
        for spec in deps.values():
            if isinstance(spec, str) and "://" in spec:
                finding = host_finding(spec, at(path, lines.line_of(spec)), f"{field} URL", NPM)
                if finding is not None:
                    found.append(finding)
    registry = data.get("publishConfig", {})
    if isinstance(registry, dict) and isinstance(registry.get("registry"), str):
        url = registry["registry"]
        finding = host_finding(url, at(path, lines.line_of(url)), "publishConfig registry", NPM)
        if finding is not None:
            found.append(finding)
    return found


def read_npm_lock(path: str, text: str) -> list[Finding]:
    name = path.rsplit("/", 1)[-1]
    keep = holding("resolved", "tarball")
    return [ecosystem(path, NPM, name), *url_findings(path, text, f"{name} resolved", NPM, keep)]


def read_npmrc(path: str, text: str) -> list[Finding]:
    """``registry=`` and ``@scope:registry=`` give their host; a ``//host/:_authToken=``
    line gives its host only (the token is never read past the host)."""
    found = [ecosystem(path, NPM, ".npmrc")]
    for number, line in numbered(text):
        where = f"{path}:{number}"
        registry = _NPMRC_REGISTRY.match(line)
        if registry is not None:
            scope = registry.group("scope")
            what = f"scoped registry {scope[:-1]}" if scope else "npm registry"
            finding = host_finding(registry.group("url"), where, what, NPM)
            if finding is not None:
                found.append(finding)
            continue
        auth = _NPMRC_AUTH.match(line)
        if auth is not None:
            port = auth.group("port")
            finding = host_finding(
                f"https://{auth.group('host')}{':' + port if port else ''}/",
                where,
                "registry credentials (host only)",
                NPM,
            )
            if finding is not None:
                found.append(finding)
    return found


def read_yarnrc(path: str, text: str) -> list[Finding]:
    keep = holding("registry", "Registry")
    return [
        ecosystem(path, NPM, path.rsplit("/", 1)[-1]),
        *url_findings(path, text, "yarn registry", NPM, keep),
    ]


# --- cargo, go, ruby, maven, gradle -----------------------------------------------------


def read_cargo_toml(path: str, text: str) -> list[Finding]:
    data = _toml(text)
    return [
        ecosystem(path, CARGO, "Cargo.toml"),
        *keyed_url_findings(path, text, data, _CARGO_URL_KEYS, "cargo dependency source", CARGO),
    ]


def read_cargo_lock(path: str, text: str) -> list[Finding]:
    keep = starting("source")
    return [
        ecosystem(path, CARGO, "Cargo.lock"),
        *url_findings(path, text, "Cargo.lock source", CARGO, keep),
    ]


def read_cargo_config(path: str, text: str) -> list[Finding]:
    data = _toml(text)
    return [
        ecosystem(path, CARGO, "cargo config"),
        *keyed_url_findings(path, text, data, _CARGO_URL_KEYS, "cargo registry config", CARGO),
    ]


def read_go(path: str, text: str) -> list[Finding]:
    return [ecosystem(path, GO, path.rsplit("/", 1)[-1])]


def read_gemfile(path: str, text: str) -> list[Finding]:
    """The URLs bundler fetches from: ``source "URL"``, a gem's ``git:``/``source:``
    value (``:git =>`` too), a ``git "URL" do`` block, and ``git_source`` templates; not
    any other URL on a line that merely holds "git" (a gem's name, another option)."""
    found = [ecosystem(path, RUBY, "Gemfile")]
    for number, raw in numbered(text):
        line = uncommented(raw)
        where = f"{path}:{number}"
        if line.lstrip().startswith("git_source"):
            found += line_findings(line, where, "gem source", RUBY)
            continue
        for match in _GEM_SOURCE.finditer(line):
            found += line_findings(match.group("url"), where, "gem source", RUBY)
    return found


def read_gemfile_lock(path: str, text: str) -> list[Finding]:
    keep = starting("remote:")
    return [
        ecosystem(path, RUBY, "Gemfile.lock"),
        *url_findings(path, text, "Gemfile.lock remote", RUBY, keep),
    ]


def read_python_lock(path: str, text: str) -> list[Finding]:
    """The ``url`` and ``registry`` values of a lockfile (TOML, or JSON for
    ``Pipfile.lock``): its sources, not its packages' descriptions."""
    name = path.rsplit("/", 1)[-1]
    data: Any
    if name.endswith(".lock") and name != "Pipfile.lock":
        data = _toml(text)
    else:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
    return [
        ecosystem(path, PYTHON, name),
        *keyed_url_findings(path, text, data, _LOCK_URL_KEYS, f"{name} source", PYTHON),
    ]


_POM_REPOSITORY_BLOCKS = ("repositories", "pluginRepositories", "distributionManagement", "mirrors")


def read_pom(path: str, text: str) -> list[Finding]:
    """URLs inside ``<repositories>``, ``<pluginRepositories>``, ``<mirrors>`` and
    ``<distributionManagement>`` (a project's homepage or SCM URL is no repository)."""
    found = [ecosystem(path, MAVEN, "pom.xml")]
    depth = 0
    for number, line in numbered(without_xml_comments(text)):
        for block in _POM_REPOSITORY_BLOCKS:
            depth += line.count(f"<{block}>") - line.count(f"</{block}>")
        if depth > 0 and "<url>" in line:
            found += line_findings(line, f"{path}:{number}", "maven repository", MAVEN)
    return found


def read_wrapper_properties(path: str, text: str) -> list[Finding]:
    """``distributionUrl=https\\://...`` of the Maven and Gradle wrappers."""
    name = GRADLE if "gradle" in path else MAVEN
    unescaped = text.replace("\\:", ":")
    keep = _url_property
    return [
        ecosystem(path, name, "wrapper"),
        *url_findings(path, unescaped, f"{name} wrapper download", name, keep, _PROPERTIES_COMMENT),
    ]


def read_gradle(path: str, text: str) -> list[Finding]:
    found = [ecosystem(path, GRADLE, path.rsplit("/", 1)[-1])]
    plugins = False
    for number, code in numbered(without_c_comments(text)):
        where = f"{path}:{number}"
        for call, (name, what) in _GRADLE_REPOS.items():
            if call in code:
                found.append(ecosystem(where, name, what))
        if re.match(r"^\s*plugins\s*\{", code) and not plugins:
            plugins = True
            found.append(ecosystem(where, GRADLE, "plugins { } block"))
        if "url" in code or "maven(" in code:
            found += line_findings(code, where, "gradle repository", GRADLE)
    return found


# --- which reader reads which file ------------------------------------------------------

# (glob on the file's name, or on its path relative to the surveyed directory, reader);
# the first match wins.
READERS: tuple[tuple[str, Reader], ...] = (
    ("requirements*.txt", read_requirements),
    ("requirements*.in", read_requirements),
    ("*requirements.txt", read_requirements),
    ("constraints*.txt", read_requirements),
    ("requirements/*.txt", read_requirements),
    ("requirements/*.in", read_requirements),
    ("pyproject.toml", read_pyproject),
    ("uv.toml", read_uv_toml),
    ("pip.conf", read_pip_conf),
    ("pip.ini", read_pip_conf),
    ("Pipfile", read_pipfile),
    ("Pipfile.lock", read_python_lock),
    ("poetry.lock", read_python_lock),
    ("uv.lock", read_python_lock),
    ("pdm.lock", read_python_lock),
    ("setup.py", read_python_project),
    ("setup.cfg", read_python_project),
    ("package.json", read_package_json),
    ("package-lock.json", read_npm_lock),
    ("npm-shrinkwrap.json", read_npm_lock),
    ("yarn.lock", read_npm_lock),
    ("pnpm-lock.yaml", read_npm_lock),
    (".npmrc", read_npmrc),
    (".yarnrc", read_yarnrc),
    (".yarnrc.yml", read_yarnrc),
    ("Cargo.toml", read_cargo_toml),
    ("Cargo.lock", read_cargo_lock),
    (".cargo/config.toml", read_cargo_config),
    (".cargo/config", read_cargo_config),
    ("go.mod", read_go),
    ("go.sum", read_go),
    ("go.work", read_go),
    ("Gemfile", read_gemfile),
    ("gems.rb", read_gemfile),
    ("Gemfile.lock", read_gemfile_lock),
    ("gems.locked", read_gemfile_lock),
    ("pom.xml", read_pom),
    ("maven-wrapper.properties", read_wrapper_properties),
    ("gradle-wrapper.properties", read_wrapper_properties),
    ("build.gradle", read_gradle),
    ("build.gradle.kts", read_gradle),
    ("settings.gradle", read_gradle),
    ("settings.gradle.kts", read_gradle),
)
# Lockfiles are machine-written and may be large; everything else is read by people.
LOCKFILES = frozenset(
    {
        "Pipfile.lock",
        "poetry.lock",
        "uv.lock",
        "pdm.lock",
        "package-lock.json",
        "npm-shrinkwrap.json",
        "yarn.lock",
        "pnpm-lock.yaml",
        "Cargo.lock",
        "go.sum",
        "Gemfile.lock",
        "gems.locked",
    }
)


def reader_for(relative: str) -> Reader | None:
    """The reader of the file at ``relative`` (a path relative to the surveyed dir)."""
    name = relative.rsplit("/", 1)[-1]
    for pattern, reader in READERS:
        target = relative if "/" in pattern else name
        if fnmatch.fnmatchcase(target, pattern) or (
            "/" in pattern and fnmatch.fnmatchcase(relative, f"*/{pattern}")
        ):
            return reader
    return None

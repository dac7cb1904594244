"""Readers of what a project runs and reaches besides packages (pure: text in, findings out).

Git remotes and submodules (``.git/config`` and ``.gitmodules`` read as text: git itself
is never run, so no hook or config of the project runs either), devcontainer and Procfile
ports, ``.env``-style files (names only; a registry variable such as ``GOPROXY`` gives its
hosts) and CI files (the hosts their URLs name). Compose files have a module of their own,
:mod:`sandbridge.survey.compose`.
"""

from __future__ import annotations

import fnmatch
import json
import re

from sandbridge.project.policy import ENV_NAME
from sandbridge.survey.compose import MAX_PORT, read_compose
from sandbridge.survey.findings import (
    Finding,
    Kind,
    Reader,
    host_finding,
    url_host,
    valid_host,
)
from sandbridge.survey.packages import (
    GO,
    NPM,
    PYTHON,
    Locator,
    at,
    line_findings,
    numbered,
)

_SECTION = re.compile(r'^\s*\[\s*(?P<kind>[A-Za-z]+)(?:\s+"(?P<name>[^"]*)")?\s*\]')
# No lazy value before trailing spaces (quadratic in a long run of spaces): strip instead.
_GIT_URL = re.compile(r"^\s*(?P<key>url|pushurl)\s*=(?P<value>.*)$", re.IGNORECASE)
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=")
_PROCFILE_PORT = re.compile(
    r"(?:--port|-p|--bind|-b|--listen|PORT=)[ =]?(?:[A-Za-z0-9_.\[\]:-]{0,64}:)?"
    r"(?P<port>[0-9]{2,5})\b"
)
# Variables whose values name registries: their hosts are evidence, the rest is not read.
REGISTRY_VARIABLES = {
    "GOPROXY": GO,
    "GOPRIVATE": GO,
    "GONOPROXY": GO,
    "GONOSUMDB": GO,
    "GOSUMDB": GO,
    "PIP_INDEX_URL": PYTHON,
    "PIP_EXTRA_INDEX_URL": PYTHON,
    "UV_INDEX_URL": PYTHON,
    "UV_EXTRA_INDEX_URL": PYTHON,
    "UV_DEFAULT_INDEX": PYTHON,
    "UV_INDEX": PYTHON,
    "NPM_CONFIG_REGISTRY": NPM,
    "YARN_NPM_REGISTRY_SERVER": NPM,
}
# ``NAME: value`` or ``- NAME=value`` in a CI file; ``\s*(?:-\s*)?`` and not ``\s*-?\s*``,
# which is quadratic in a line of spaces.
_CI_VARIABLE = re.compile(r"^\s*(?:-\s*)?(?P<name>[A-Z][A-Z0-9_]*)\s*[:=](?P<value>.*)$")


# --- git ---------------------------------------------------------------------------------


def read_git_config(path: str, text: str) -> list[Finding]:
    """``url``/``pushurl`` of each ``[remote "x"]`` and ``[submodule "x"]`` section."""
    found = []
    section = ""
    for number, line in numbered(text):
        header = _SECTION.match(line)
        if header is not None:
            kind = header.group("kind").lower()
            name = header.group("name")
            section = f"{kind} {name}" if kind in ("remote", "submodule") and name else ""
            continue
        match = _GIT_URL.match(line)
        if match is None or not section:
            continue
        value = match.group("value").strip().strip("\"'")
        if not value:
            continue
        what = f"git {section}" + (" (push)" if match.group("key").lower() == "pushurl" else "")
        if _is_ssh(value):
            what += " over ssh: git over ssh does not use the egress proxy"
        finding = host_finding(value, f"{path}:{number}", what)
        if finding is not None:
            found.append(finding)
    return found


def _is_ssh(url: str) -> bool:
    return url.startswith(("ssh://", "git+ssh://", "ssh+git://")) or (
        "://" not in url and url_host(url) is not None
    )


# --- devcontainer, Procfile ----------------------------------------------------------------


def _strip_jsonc(text: str) -> str:
    """JSON with comments and trailing commas (devcontainer.json) as JSON."""
    out = []
    index, length, in_string = 0, len(text), False
    while index < length:
        char = text[index]
        if in_string:
            out.append(char)
            if char == "\\" and index + 1 < length:
                out.append(text[index + 1])
                index += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif text.startswith("//", index):
            end = text.find("\n", index)
            index = length if end < 0 else end
            continue
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            index = length if end < 0 else end + 2
            continue
        else:
            out.append(char)
        index += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def _line_after(lines: Locator, key: str, value: str) -> int | None:
    """The first line holding ``value`` at or after the first one holding ``key``."""
    start = lines.text.find(key)
    if start < 0:
        return None
    return lines.line_of(value, start) or lines.line_of(key)


def read_devcontainer(path: str, text: str) -> list[Finding]:
    try:
        data = json.loads(_strip_jsonc(text))
    except (ValueError, RecursionError):
        return []
    if not isinstance(data, dict):
        return []
    found = []
    lines = Locator(text)
    for key in ("forwardPorts", "appPort"):
        values = data.get(key)
        for value in values if isinstance(values, list) else [values]:
            text_value = str(value) if isinstance(value, int | str) else ""
            port_text = text_value.rsplit(":", 1)[-1]
            if port_text.isdigit() and 0 < int(port_text) <= MAX_PORT:
                where = at(path, _line_after(lines, f'"{key}"', text_value))
                found.append(Finding(Kind.PORT, port_text, where, f"devcontainer {key}"))
    return found


def read_procfile(path: str, text: str) -> list[Finding]:
    found = []
    for number, line in numbered(text):
        process, colon, command = line.partition(":")
        if not colon or not ENV_NAME.fullmatch(process.strip().replace("-", "_")):
            continue
        for match in _PROCFILE_PORT.finditer(command):
            port = int(match.group("port"))
            if 0 < port <= MAX_PORT:
                found.append(
                    Finding(Kind.PORT, str(port), f"{path}:{number}", f"Procfile {process.strip()}")
                )
    return found


# --- .env files, CI ------------------------------------------------------------------------


def _registry_hosts(name: str, value: str, where: str) -> list[Finding]:
    eco = REGISTRY_VARIABLES[name]
    found = []
    for part in re.split(r"[,|\s]+", value.strip().strip("\"'")):
        if not part or part in ("direct", "off"):
            continue
        if "://" in part:
            finding = host_finding(part, where, f"{name} in an env file", eco)
        else:  # GOPRIVATE-style patterns: host[/path], *.suffix
            host = part.split("/", 1)[0]
            wildcard = host.startswith("*.")
            valid = valid_host(host[2:] if wildcard else host)
            finding = (
                None
                if valid is None or (wildcard and "." not in valid)
                else Finding(
                    Kind.HOST, f"*.{valid}" if wildcard else valid, where, f"{name} pattern", eco
                )
            )
        if finding is not None:
            found.append(finding)
    return found


def _open_quote(value: str) -> str:
    """The quote a value starts and does not close on its line (``KEY="-----BEGIN``: the
    value goes on over the next lines), else ``""``."""
    value = value.strip()
    if not value or value[0] not in "\"'`":
        return ""
    return "" if _closing(value[1:], value[0]) else value[0]


def _closing(text: str, quote: str) -> bool:
    """Whether ``text`` holds ``quote`` unescaped (a backslash escapes inside ``"``)."""
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote == '"':
            escaped = True
        elif char == quote:
            return True
    return False


def read_env_file(path: str, text: str) -> list[Finding]:
    """The variables' names; a value is read only for :data:`REGISTRY_VARIABLES`. The
    lines of a quoted value that spans several (a key's PEM lines) are part of the value:
    none is read as a name."""
    found = []
    quote = ""
    for number, line in numbered(text):
        if quote:
            quote = "" if _closing(line, quote) else quote
            continue
        match = _ENV_LINE.match(line)
        if match is None:
            continue
        quote = _open_quote(line[match.end() :])
        name = match.group("name")
        where = f"{path}:{number}"
        found.append(Finding(Kind.VARIABLE, name, where, "env file"))
        if name in REGISTRY_VARIABLES:
            found += _registry_hosts(name, line[match.end() :], where)
    return found


def read_ci(path: str, text: str) -> list[Finding]:
    found = []
    for number, line in numbered(text):
        found += line_findings(line, f"{path}:{number}", "named in CI", "")
        match = _CI_VARIABLE.match(line)
        if match and match.group("name") in REGISTRY_VARIABLES:
            found += _registry_hosts(match.group("name"), match.group("value"), f"{path}:{number}")
    return found


READERS: tuple[tuple[str, Reader], ...] = (
    (".gitmodules", read_git_config),
    ("compose.yaml", read_compose),
    ("compose.yml", read_compose),
    ("compose.*.yaml", read_compose),
    ("compose.*.yml", read_compose),
    ("docker-compose.yaml", read_compose),
    ("docker-compose.yml", read_compose),
    ("docker-compose.*.yaml", read_compose),
    ("docker-compose.*.yml", read_compose),
    (".devcontainer/devcontainer.json", read_devcontainer),
    (".devcontainer/*/devcontainer.json", read_devcontainer),
    (".devcontainer.json", read_devcontainer),
    ("Procfile", read_procfile),
    ("Procfile.*", read_procfile),
    (".env", read_env_file),
    (".env.*", read_env_file),
    ("*.env", read_env_file),
    (".envrc", read_env_file),
    (".flaskenv", read_env_file),
    (".github/workflows/*.yml", read_ci),
    (".github/workflows/*.yaml", read_ci),
    (".gitlab-ci.yml", read_ci),
    (".gitlab-ci.yaml", read_ci),
    (".circleci/config.yml", read_ci),
)


def reader_for(relative: str) -> Reader | None:
    """The reader of the file at ``relative`` (a path relative to the surveyed dir)."""
    name = relative.rsplit("/", 1)[-1]
    for pattern, reader in READERS:
        if "/" in pattern:
            if fnmatch.fnmatchcase(relative, pattern):
                return reader
        elif fnmatch.fnmatchcase(name, pattern):
            return reader
    return None

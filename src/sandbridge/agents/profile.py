"""An agent's profile: what ``sandbridge run --agent NAME`` needs to know of it.

A profile is data, one small TOML file per agent (``agents/profiles/NAME.toml`` ships
with sandbridge; the owner's ``${XDG_CONFIG_HOME:-~/.config}/sandbridge/agents/NAME.toml``
overrides or adds one, :mod:`sandbridge.agents.catalogue`). This module turns the parsed
TOML into an :class:`AgentProfile`, checking every field: a profile decides what the
sandbox may reach and which of the owner's variables it gets, so a malformed one is
refused with ``FILE:KEY`` and the offending value, never half-applied.

Keys (all but ``command`` optional)::

    description  = "Claude Code"                  one line for ``sandbridge agents``
    command      = ["claude"]                     what --agent runs without -- ARGS
    hosts        = ["api.anthropic.com"]          allow entries added for the session
    state_dirs   = [".claude"]                    directories under HOME it keeps
    state_files  = [".claude.json"]               single files under HOME it keeps
    credentials  = ["ANTHROPIC_API_KEY"]          variables passed when the owner has them
    instructions = ".claude/CLAUDE.md"            its user-level instruction file (in a
                                                  state dir): the bridge hints go there
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sandbridge.exceptions import AgentError, PolicyError
from sandbridge.project.policy import ENV_NAME, parse_entry

# A profile's name is its file's stem: a word a shell completes and a directory holds.
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
KEYS = frozenset(
    {"description", "command", "hosts", "state_dirs", "state_files", "credentials", "instructions"}
)
# A profile is written by hand: far fewer entries than these, each far shorter.
MAX_ITEMS = 64
MAX_TEXT_CHARS = 200
# Variables sandbridge itself sets inside (or that change how every program runs): a
# profile naming one would replace sandbridge's value with the owner's.
RESERVED_VARIABLES = frozenset(
    {
        "PATH", "HOME", "BROWSER", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH",
        "http_proxy", "https_proxy", "all_proxy", "no_proxy",
        "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
    }
)  # fmt: skip
RESERVED_PREFIXES = ("AGS_WEBVIEW_", "SANDBRIDGE_")


@dataclass(frozen=True, slots=True)
class AgentProfile:
    """One agent, as its profile file says, and the file it came from."""

    name: str
    source: Path
    command: tuple[str, ...]
    description: str = ""
    hosts: tuple[str, ...] = ()
    # Paths relative to the home inside, normalised (``.claude``, ``.config/opencode``).
    state_dirs: tuple[PurePosixPath, ...] = ()
    state_files: tuple[PurePosixPath, ...] = ()
    credentials: tuple[str, ...] = ()
    instructions: PurePosixPath | None = None

    @property
    def policy_source(self) -> str:
        """How ``--print-policy`` names this profile as the source of its hosts."""
        return f"agent profile {self.name} ({self.source})"

    @property
    def state_paths(self) -> tuple[PurePosixPath, ...]:
        """Every path it keeps, directories first."""
        return (*self.state_dirs, *self.state_files)


def parse_profile(name: str, source: Path, data: dict[str, Any]) -> AgentProfile:
    """The profile ``data`` (parsed TOML of ``source``) describes; :class:`AgentError`
    names ``source:key`` and the value of the first bad field."""
    if not NAME.fullmatch(name):
        raise AgentError(
            f"{source}: profile name {name!r} must be 1-32 of a-z, 0-9, '-' and '_', "
            "starting with a letter or digit; rename the file"
        )
    for key in data:
        if key not in KEYS:
            raise AgentError(
                f"{source}:{key}: unknown key (known: {', '.join(sorted(KEYS))}); remove it"
            )

    def where(key: str) -> str:
        return f"{source}:{key}"

    command = _strings(data, "command", where("command"))
    if not command or not command[0]:
        raise AgentError(f"{where('command')}: must name a program, got {data.get('command')!r}")
    description = data.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_TEXT_CHARS:
        raise AgentError(f"{where('description')}: must be one short line, got {description!r:.80}")
    _no_control(description, where("description"))
    dirs = tuple(_home_path(v, where("state_dirs")) for v in _strings(data, "state_dirs", ""))
    files = tuple(_home_path(v, where("state_files")) for v in _strings(data, "state_files", ""))
    _no_overlap((*dirs, *files), source)
    return AgentProfile(
        name=name,
        source=source,
        command=command,
        description=description,
        hosts=tuple(_host(v, where("hosts")) for v in _strings(data, "hosts", where("hosts"))),
        state_dirs=dirs,
        state_files=files,
        credentials=tuple(
            _variable(v, where("credentials"))
            for v in _strings(data, "credentials", where("credentials"))
        ),
        instructions=_instructions(data.get("instructions"), dirs, where("instructions")),
    )


def _strings(data: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    where = where or f"{key}"
    if (
        not isinstance(value, list)
        or len(value) > MAX_ITEMS
        or not all(isinstance(item, str) and len(item) <= MAX_TEXT_CHARS for item in value)
    ):
        raise AgentError(
            f"{where}: must be a list of at most {MAX_ITEMS} strings of at most "
            f"{MAX_TEXT_CHARS} characters, got {value!r:.80}"
        )
    for item in value:
        _no_control(item, where)
    return tuple(value)


def _no_control(text: str, where: str) -> None:
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in text):
        raise AgentError(f"{where}: control character in {text!r:.80}; remove it")


def _host(value: str, where: str) -> str:
    """An allow entry of a proxy destination (never a host service of the gate: a
    profile does not open host ports)."""
    try:
        entry = parse_entry(value, where)
    except PolicyError as exc:
        raise AgentError(str(exc)) from None
    if entry.host == "gate" or entry.private:
        raise AgentError(
            f"{where}: {value!r} is a host service or a private address; a profile names "
            "internet hosts only (host services belong in .sandbridge/allow)"
        )
    return value


def _home_path(value: str, where: str) -> PurePosixPath:
    """A path under the home inside: relative, normalised, no ``..``, not the home."""
    path = PurePosixPath(value)
    if (
        not value
        or path.is_absolute()
        or str(path) != value.rstrip("/")
        or any(part in (".", "..") for part in path.parts)
        or value in (".", "")
    ):
        raise AgentError(
            f"{where}: {value!r} must be a normalised path under the home, like .claude "
            "(no leading /, no . or .. parts)"
        )
    return path


def _no_overlap(paths: tuple[PurePosixPath, ...], source: Path) -> None:
    """No state path inside another: each is bound on its own."""
    for path in paths:
        for other in paths:
            if path != other and path.is_relative_to(other):
                raise AgentError(
                    f"{source}:state_dirs: {str(path)!r} lies inside {str(other)!r}; "
                    "keep the outer one only"
                )
    if len(set(paths)) != len(paths):
        raise AgentError(f"{source}:state_dirs: a path is named twice; name each once")


def _variable(value: str, where: str) -> str:
    if not ENV_NAME.fullmatch(value):
        raise AgentError(f"{where}: {value!r} is not a variable name")
    if value in RESERVED_VARIABLES or value.startswith(RESERVED_PREFIXES):
        raise AgentError(f"{where}: {value!r} is set by sandbridge itself; remove it")
    return value


def _instructions(
    value: object, dirs: tuple[PurePosixPath, ...], where: str
) -> PurePosixPath | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise AgentError(f"{where}: must be a path string, got {value!r:.80}")
    _no_control(value, where)
    path = _home_path(value, where)
    if not any(path != top and path.is_relative_to(top) for top in dirs):
        raise AgentError(
            f"{where}: {value!r} must lie inside one of state_dirs, where the session's "
            "copy is kept (never the owner's file, never the project)"
        )
    return path

"""The owner's own configuration: ``${XDG_CONFIG_HOME:-~/.config}/sandbridge/config``.

A project's ``.sandbridge/config`` travels with a repository that anyone may have
written; the bridges beyond the first three (OAuth callbacks, the ssh agent, the
clipboard, the container engine) widen what the sandbox reaches on the owner's machine, so they are
turned on by the owner only: by a flag, or by this file, which lives outside every
project. Same ``key = value`` lines as the project's config (``#`` comments, blank
lines), read strictly: an unknown key, a malformed value or a key given twice where it
takes one value is refused naming ``file:line``. Each value is a :class:`Setting` with
the line it came from, so ``--print-policy`` can say where it was set.

A key is one row of :data:`KEYS`: its parser and whether it repeats. A bridge adds its
row; :data:`OWNER_KEYS` is what a project's config is refused for naming.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sandbridge.exceptions import PolicyError
from sandbridge.project.setting import Setting

# A hand-written list of a few settings; a file far larger than this is not one.
MAX_OWNER_CONFIG_BYTES = 64 * 1024
LABEL = "~/.config/sandbridge/config"
# A DNS name's label (RFC 1035 letters, digits, hyphens; an underscore as real names have).
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
MAX_NAME_LENGTH = 253


def _host_name(text: str) -> str | None:
    """``text`` as a lower-case DNS name, or ``None``: an address (its last label a
    number) or anything else is not a host name."""
    name = text.lower().removesuffix(".")
    labels = name.split(".")
    if not name or len(name) > MAX_NAME_LENGTH or labels[-1].isdigit():
        return None
    return name if all(_LABEL.fullmatch(label) for label in labels) else None


def config_path(environ: Mapping[str, str]) -> Path:
    """``${XDG_CONFIG_HOME:-~/.config}/sandbridge/config``."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(os.path.expanduser(base)) / "sandbridge" / "config"


def _parse_switch(value: str, key: str, where: str) -> bool:
    if value not in ("on", "off"):
        raise PolicyError(f"{where}: {key} must be on or off, got {value!r}")
    return value == "on"


def _parse_hosts(value: str, key: str, where: str) -> tuple[str, ...]:
    """``HOST[, HOST...]``: exact names, or ``*.domain`` for its subdomains."""
    hosts = []
    for item in value.split(","):
        text = item.strip()
        wildcard = text.startswith("*.")
        name = _host_name(text[2:] if wildcard else text)
        if name is None:
            raise PolicyError(
                f"{where}: {key} takes host names (auth.example.com or *.example.com), got {text!r}"
            )
        if wildcard and "." not in name:
            raise PolicyError(f"{where}: {key} = {text} would allow a whole top-level domain")
        hosts.append(f"*.{name}" if wildcard else name)
    return tuple(hosts)


def _parse_text(value: str, key: str, where: str) -> tuple[str, ...]:
    """The value as written, for its bridge to read (``ssh_agent``: the keys, read by
    ``ssh_agent/choice.py``, the same parser as ``--ssh-agent``'s)."""
    if not value:
        raise PolicyError(f"{where}: {key} needs a value")
    return (value,)


def _parse_word(value: str, key: str, where: str) -> str:
    """One word as written, for its bridge to read (``clipboard``: ``clipboard/mode.py``,
    the same parser as ``--clipboard``'s)."""
    if not value or len(value.split()) != 1:
        raise PolicyError(f"{where}: {key} takes one word, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Key:
    """One key of the owner's config: how its value is read, and whether it repeats
    (its values then add up, in order)."""

    parse: Callable[[str, str, str], object]
    repeats: bool
    # What it is for, in the refusal a project's config gets for naming it.
    about: str


KEYS: dict[str, Key] = {
    "oauth_callbacks": Key(_parse_switch, False, "the OAuth callback bridge (docs/open.md)"),
    "open_external_allow": Key(
        _parse_hosts, True, "authorize hosts opened without a question (docs/open.md)"
    ),
    "ssh_agent": Key(_parse_text, True, "the ssh-agent bridge's keys (docs/ssh-agent.md)"),
    "clipboard": Key(_parse_word, False, "the clipboard bridge's mode (docs/clipboard.md)"),
    "containers": Key(_parse_switch, False, "the container engine bridge (docs/containers.md)"),
    "containers_image": Key(
        _parse_text, True, "an image the container engine bridge runs (docs/containers.md)"
    ),
    "containers_engine": Key(
        _parse_word, False, "the container engine bridge's engine (docs/containers.md)"
    ),
    "containers_network": Key(
        _parse_word, False, "the container engine bridge's network (docs/containers.md)"
    ),
}
OWNER_KEYS = frozenset(KEYS)


@dataclass(frozen=True, slots=True)
class OwnerConfig:
    """The owner's settings; absent keys are absent (the caller has the default)."""

    oauth_callbacks: Setting[bool] | None = None
    open_external_allow: tuple[Setting[str], ...] = ()
    # The ssh-agent bridge's key choices, each line's value as written (ssh_agent/choice.py).
    ssh_agent: tuple[Setting[str], ...] = ()
    # The clipboard bridge's mode as written (read or readwrite: clipboard/mode.py reads it).
    clipboard: Setting[str] | None = None
    # The container engine bridge: on or off, its images (each line's value as written,
    # containers/settings.py reads them), its engine and its network as written.
    containers: Setting[bool] | None = None
    containers_image: tuple[Setting[str], ...] = ()
    containers_engine: Setting[str] | None = None
    containers_network: Setting[str] | None = None
    path: Path | None = None  # the file, when one was read

    def allowed_hosts(self) -> tuple[str, ...]:
        """The ``open_external_allow`` names, in order."""
        return tuple(setting.value for setting in self.open_external_allow)


def parse_owner_config(text: str, label: str = LABEL) -> OwnerConfig:
    """The settings of the file's ``text``; a bad line raises :class:`PolicyError`
    naming ``label:line`` and the value."""
    single: dict[str, Setting[object]] = {}
    repeated: dict[str, list[Setting[str]]] = {key: [] for key, row in KEYS.items() if row.repeats}
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{label}:{number}"
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        key, equals, value = (part.strip() for part in content.partition("="))
        if not equals:
            raise PolicyError(f"{where}: expected 'key = value', got {content!r}")
        row = KEYS.get(key)
        if row is None:
            raise PolicyError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(KEYS))})")
        parsed = row.parse(value, key, where)
        if row.repeats:
            assert isinstance(parsed, tuple)
            repeated[key] += [Setting(str(item), where) for item in parsed]
        elif key in single:
            raise PolicyError(f"{where}: {key} is set again (first at {single[key].source})")
        else:
            single[key] = Setting(parsed, where)
    switch = single.get("oauth_callbacks")
    clipboard = single.get("clipboard")
    containers = single.get("containers")
    words = {
        key: None if (found := single.get(key)) is None else Setting(str(found.value), found.source)
        for key in ("containers_engine", "containers_network")
    }
    return OwnerConfig(
        clipboard=None if clipboard is None else Setting(str(clipboard.value), clipboard.source),
        containers=None
        if containers is None
        else Setting(bool(containers.value), containers.source),
        containers_image=tuple(repeated["containers_image"]),
        containers_engine=words["containers_engine"],
        containers_network=words["containers_network"],
        oauth_callbacks=None if switch is None else Setting(bool(switch.value), switch.source),
        open_external_allow=tuple(repeated["open_external_allow"]),
        ssh_agent=tuple(repeated["ssh_agent"]),
    )


def read_owner_config(environ: Mapping[str, str]) -> OwnerConfig:
    """The owner's config file, or an empty :class:`OwnerConfig` when there is none.
    It is the owner's own file: a link to it is followed (dotfile managers make them),
    but only a regular file is read (a FIFO would hold the start up), at most
    :data:`MAX_OWNER_CONFIG_BYTES`."""
    path = config_path(environ)
    label = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return OwnerConfig()
    except OSError as exc:
        raise PolicyError(f"{label}: cannot read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PolicyError(f"{label}: not a regular file; make it a plain file")
        raw = file.read(MAX_OWNER_CONFIG_BYTES + 1)
    if len(raw) > MAX_OWNER_CONFIG_BYTES:
        raise PolicyError(f"{label}: larger than {MAX_OWNER_CONFIG_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{label}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    config = parse_owner_config(text, label)
    return dataclasses.replace(config, path=path)


def refuse_in_project(key: str, where: str) -> None:
    """A project's config naming an owner's key: refused, saying where it belongs."""
    if key in OWNER_KEYS:
        raise PolicyError(
            f"{where}: {key} ({KEYS[key].about}) belongs in the owner's own config "
            f"({LABEL}), never a project's: a repository cannot turn it on"
        )

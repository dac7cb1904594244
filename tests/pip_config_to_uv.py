"""pip's configuration, translated for uv: ``./dev.sh`` installs the lock files with uv.

uv installs requirements.lock and requirements-apps.lock several times faster than pip, in
a fraction of its CPU (README, "Dependencies"), but it reads none of pip's configuration,
which is where a machine keeps its index mirror, its CA bundle or its proxy. This reads
pip's effective configuration (``pip config list``: its files' ``[global]`` and
``[install]`` sections and the ``PIP_*`` variables, the last winning, as pip ranks them) and
gives each setting to uv as its flag or its environment variable. A setting that changes
nothing installed (pip's own output, its version check) is left out; any other setting uv
has no equivalent for makes pip install that lock file instead: a machine's configuration
is never dropped silently.

Run by the virtualenv's own python (stdlib only: it runs before anything is installed), with
the uv command line as its arguments::

    .venv/bin/python tests/pip_config_to_uv.py .venv/bin/uv pip install -r requirements.lock

It prints the command to run, one word a line: ``env``, the variables, then the given
command with the translated flags after it. When a setting cannot be translated it prints
one line naming it and exits with status 3 (dev.sh then installs with pip).
"""

from __future__ import annotations

import ast
import math
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# The exit status that says "install with pip": a setting uv cannot take.
USE_PIP = 3

# pip's sections that apply to `pip install`, lowest rank first (pip reads its files'
# [global], then the command's own section, then the PIP_* variables, each over the last).
SECTIONS = ("global", "install", ":env:")

# Always: pip's rule for several indexes, the best version across all of them. uv's default
# takes the first index that has the package at all, which fails here as soon as a local
# index holds only older releases of a pinned package.
# Also: the system's certificate store, which pip (Debian's, and pip's own truststore) trusts
# and uv does not by default (a company's CA installed in the system only); and none of uv's
# own configuration files, so pip's configuration alone decides.
ALWAYS = ("--index-strategy", "unsafe-best-match", "--system-certs", "--no-config")

# pip's settings that are uv flags: one flag per value.
FLAGS = {
    "find-links": "--find-links",
    "constraint": "--constraints",
    "trusted-host": "--allow-insecure-host",
}
# Those of them pip takes several values of (its list options: a value of several words,
# split on whitespace, newlines included).
SEVERAL = frozenset({"extra-index-url", "find-links", "constraint", "trusted-host"})
# pip's index settings, as uv's environment variables (several values joined by spaces):
# an index URL may hold credentials, which a command line shows to every user (ps).
INDEXES = {"index-url": "UV_INDEX_URL", "extra-index-url": "UV_EXTRA_INDEX_URL"}
# pip's yes/no settings that are uv flags (given when the value says yes).
SWITCHES = {"no-index": "--no-index"}
# pip's settings that are uv environment variables (a proxy is pip's for both schemes).
VARIABLES = {
    "client-cert": ("SSL_CLIENT_CERT",),
    "proxy": ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"),
}
# pip's settings for the network's patience: whole seconds and counts for uv.
NUMBERS = {"timeout": "UV_HTTP_TIMEOUT", "retries": "UV_HTTP_RETRIES"}
# Other names pip reads for the same setting.
ALIASES = {"default-timeout": "timeout"}
# pip's settings that change nothing installed: its output, its checks, its cache, where its
# configuration came from.
IGNORED = frozenset(
    {
        "cache-dir",
        "config-file",
        "disable-pip-version-check",
        "log",
        "no-cache-dir",
        "no-color",
        "no-input",
        "no-python-version-warning",
        "no-warn-conflicts",
        "no-warn-script-location",
        "progress-bar",
        "quiet",
        "require-virtualenv",
        "root-user-action",
        "verbose",
    }
)
# pip's words for yes and no (its strtobool).
YES = frozenset({"y", "yes", "t", "true", "on", "1"})
NO = frozenset({"n", "no", "f", "false", "off", "0"})


class Untranslatable(Exception):
    """A setting of pip's that uv has no equivalent for; the message names it."""


@dataclass
class UvSettings:
    """uv's flags and environment variables for pip's configuration."""

    flags: list[str] = field(default_factory=lambda: list(ALWAYS))
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigLine:
    """One line of ``pip config list``: a section's setting and its value."""

    section: str
    name: str
    value: str


@dataclass(frozen=True)
class Setting:
    """One of pip's settings: its name, its value, and where it came from."""

    name: str
    value: str
    origin: str


def _normalize(name: str) -> str:
    """A setting's name as pip compares it (pip's configuration does the same)."""
    return name.lower().replace("_", "-").removeprefix("--")


def _origin(section: str, name: str) -> str:
    if section == ":env:":
        return "PIP_" + name.upper().replace("-", "_")
    return f"{name} in [{section}]"


def parse_config_list(text: str) -> list[ConfigLine]:
    """``pip config list``'s lines: ``section.name='value'`` (the value as Python's repr)."""
    found = []
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, quoted = line.partition("=")
        section, dot, name = key.partition(".")
        value = ast.literal_eval(quoted) if sep and dot else None
        if not isinstance(value, str):
            raise ValueError(f"not a line of pip config list: {line!r}")
        found.append(ConfigLine(section, name, value))
    return found


def effective(lines: Sequence[ConfigLine]) -> list[Setting]:
    """The settings `pip install` uses: each name's value from its highest section."""
    chosen: dict[str, Setting] = {}
    rank: dict[str, int] = {}
    for line in lines:
        if line.section not in SECTIONS:
            continue  # another command's section: `pip download`'s, `pip freeze`'s
        given = _normalize(line.name)
        name = ALIASES.get(given, given)
        if SECTIONS.index(line.section) >= rank.get(name, -1):
            rank[name] = SECTIONS.index(line.section)
            chosen[name] = Setting(name, line.value, _origin(line.section, given))
    return list(chosen.values())


def _shown(value: str) -> str:
    """``value`` for a message, the credentials of any URL in it masked (a CI log keeps it)."""
    return repr(re.sub(r"(\w+://)[^/@\s]*@", r"\1***@", value))


def _yes(setting: Setting) -> bool:
    word = setting.value.strip().lower()
    if word not in YES | NO:
        raise Untranslatable(f"{setting.origin} is neither yes nor no: {_shown(setting.value)}")
    return word in YES


def _number(setting: Setting) -> str:
    try:
        seconds = float(setting.value)
    except ValueError:
        raise Untranslatable(f"{setting.origin} is not a number: {_shown(setting.value)}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise Untranslatable(f"{setting.origin} is not a number: {_shown(setting.value)}")
    return str(math.ceil(seconds))


def translate(settings: Sequence[Setting]) -> UvSettings:
    """uv's flags and variables for pip's settings; Untranslatable names one uv cannot take."""
    uv = UvSettings()
    for setting in settings:
        name, value = setting.name, setting.value
        if name in IGNORED:
            continue
        values = [one for one in (value.split() if name in SEVERAL else [value.strip()]) if one]
        if name in FLAGS:
            for one in values:
                uv.flags += [FLAGS[name], one]
        elif name in INDEXES:
            if values:
                uv.env[INDEXES[name]] = " ".join(values)
        elif name in SWITCHES:
            if _yes(setting):
                uv.flags.append(SWITCHES[name])
        elif name == "cert":
            # pip's cert is a bundle file or, as requests takes it, a directory of them.
            variable = "SSL_CERT_DIR" if os.path.isdir(value) else "SSL_CERT_FILE"
            uv.env[variable] = value
        elif name in VARIABLES:
            for variable in VARIABLES[name]:
                uv.env[variable] = value
        elif name in NUMBERS:
            uv.env[NUMBERS[name]] = _number(setting)
        else:
            raise Untranslatable(
                f"uv has no equivalent of pip's setting {setting.origin} ({_shown(value)})"
            )
    return uv


def command(uv_command: Sequence[str], config_list: str) -> list[str]:
    """The command to run: ``env``, uv's variables, uv's command with the flags after it."""
    uv = translate(effective(parse_config_list(config_list)))
    words = ["env", *(f"{k}={v}" for k, v in uv.env.items()), *uv_command, *uv.flags]
    for word in words:
        if "\n" in word:
            raise Untranslatable(f"a value of several lines: {_shown(word)}")
    return words


def pip_config_list(python: str, env: Mapping[str, str] | None = None) -> str:
    """What ``pip config list`` says for ``python``'s pip (its files and PIP_* variables)."""
    done = subprocess.run(
        [python, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise Untranslatable(f"pip config list failed: {done.stderr.strip()}")
    return done.stdout


def main(argv: Sequence[str]) -> int:
    try:
        words = command(argv, pip_config_list(sys.executable))
    except Untranslatable as why:
        print(why)
        return USE_PIP
    except ValueError as why:  # a pip whose config list reads otherwise: pip installs
        print(f"pip config list said what this does not read: {why}")
        return USE_PIP
    print("\n".join(words))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

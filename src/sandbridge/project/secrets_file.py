"""``.sandbridge/env``: the project's secrets, set in the sandbox's environment.

``NAME=VALUE`` lines (``export NAME=VALUE`` too; one pair of matching quotes around the
value is removed, and a quote the line opens but does not close is refused: a value is
one line; blank lines and lines starting with ``#`` are skipped; a ``#`` inside a
value is part of it). Unlike ``env = NAME=VALUE`` in ``.sandbridge/config``, which is
committed and reviewed, this file holds values nobody should see: it is refused unless
only its owner can read it, and (checked by :mod:`sandbridge.sandbox.project`, which can
ask git) unless git does not track it. No message here ever holds a value: a malformed
line is named by its number only, since whatever it holds may be a secret.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sandbridge.exceptions import PolicyError
from sandbridge.project.files import read_project_file
from sandbridge.project.policy import ENV_NAME, SECRETS_FILE, EnvSetting

# A file of variables written by hand; a larger one is not that.
MAX_SECRETS_BYTES = 64 * 1024
# Variables one file may set: far more than a project needs, far fewer than would crowd
# the environment (the kernel bounds argv and environ together).
MAX_VARIABLES = 256
_QUOTES = ('"', "'")


def check_permissions(path: Path, info: os.stat_result) -> None:
    """Refuse a file others could read or write, or that is not a regular file."""
    if not stat.S_ISREG(info.st_mode):
        raise PolicyError(f"{path}: not a regular file; make it a plain file (chmod 600)")
    if info.st_mode & 0o077:
        raise PolicyError(
            f"{path}: readable or writable by group or others (mode "
            f"{stat.S_IMODE(info.st_mode):o}); fix it with: chmod 600 {path}"
        )


def read_secrets(project: Path) -> tuple[EnvSetting, ...]:
    """The variables of ``project/.sandbridge/env`` (none if it does not exist)."""
    path = project / SECRETS_FILE
    raw = read_project_file(
        path, str(path), MAX_SECRETS_BYTES, lambda _, info: check_permissions(path, info)
    )
    if raw is None:
        return ()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{path}: not UTF-8 text (at byte {exc.start})") from None
    return parse_secrets(text, str(SECRETS_FILE))


def parse_secrets(text: str, label: str) -> tuple[EnvSetting, ...]:
    """Parse the file's text; a refusal names ``label:line``, never what the line holds."""
    settings: dict[str, EnvSetting] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{label}:{number}"
        body = stripped.removeprefix("export ").lstrip()
        name, equals, value = body.partition("=")
        if not equals or not ENV_NAME.fullmatch(name.strip()):
            raise PolicyError(
                f"{where}: expected NAME=VALUE with a NAME of letters, digits and _ "
                "(the line is not shown: it may hold a secret)"
            )
        if "\0" in value:
            raise PolicyError(f"{where}: the value holds a NUL byte")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in _QUOTES:
            value = value[1:-1]
        elif value[:1] in _QUOTES:
            # KEY="-----BEGIN ... over several lines: the next lines would each be read
            # as a line of their own (a base64 line ending in == sets a variable).
            raise PolicyError(
                f"{where}: the value opens a quote ({value[0]}) that the line does not "
                "close; a value is one line (the line is not shown: it may hold a secret)"
            )
        settings[name.strip()] = EnvSetting(name.strip(), value, where)
        if len(settings) > MAX_VARIABLES:
            raise PolicyError(f"{where}: more than {MAX_VARIABLES} variables")
    return tuple(settings.values())

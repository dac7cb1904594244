"""sandbridge's own commands inside the sandbox, which the sandbox entry writes before
the user's command starts: ``ags-webview-url`` (also at ``~/.local/bin``, where the
contract puts it), ``sandbridge-open`` and the browser commands that lead to it, and
``sandbridge-allow``.

Each is a two-line shell script running one module with the sandbox's Python. This
module imports only the standard library, and of it neither pathlib nor re: the entry
runs it before the command starts.
"""

from __future__ import annotations

import os
import stat
import sys

# sandbridge's own commands inside (``ags-webview-url``, ``sandbridge-open`` and the
# browser shims that lead to it), in a directory that holds nothing else, on ``/run`` (a
# private tmpfs inside; the sandbox entry writes them). Only this directory goes before
# the owner's PATH: the bin directory of sandbridge's environment would put its
# ``python3`` and ``pip`` ahead of the project's own virtualenv.
COMMANDS_DIR = "/run/sandbridge/bin"
# What ``$BROWSER`` names inside: Python's webbrowser and most CLIs look here first.
OPEN_COMMAND = "sandbridge-open"
HELPER_NAME = "ags-webview-url"
URL_HELPER_MODULE = "sandbridge.relay.url_helper"
OPEN_HELPER_MODULE = "sandbridge.relay.open_helper"
ALLOW_COMMAND = "sandbridge-allow"
ALLOW_HELPER_MODULE = "sandbridge.egress.allow_helper"
# The commands through which tools open a browser on Debian and most distributions;
# each leads to sandbridge-open, as $BROWSER does.
BROWSER_SHIMS = ("xdg-open", "sensible-browser", "x-www-browser", "www-browser")
_EXECUTABLE = stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH


def _write_command(path: str, module: str) -> str:
    """A shell script running ``module`` with this Python (named explicitly, so that no
    ``python3`` on PATH is asked)."""
    with open(path, "w") as script:
        script.write(f'#!/bin/sh\nexec {_quoted(sys.executable)} -m {module} "$@"\n')
    os.chmod(path, _EXECUTABLE)
    return path


def _quoted(word: str) -> str:
    """``word`` as one shell word: single-quoted, each ``'`` closed, escaped and reopened
    (what ``shlex.quote`` does for any word, without importing re)."""
    return "'" + word.replace("'", "'\"'\"'") + "'"


def install_helper(home: str) -> str:
    """Write ``~/.local/bin/ags-webview-url`` (where the contract puts it)."""
    bin_dir = os.path.join(home, ".local", "bin")
    os.makedirs(bin_dir, exist_ok=True)
    return _write_command(os.path.join(bin_dir, HELPER_NAME), URL_HELPER_MODULE)


def install_commands(bin_dir: str = COMMANDS_DIR) -> list[str]:
    """Write sandbridge's own commands into ``bin_dir``, a directory holding nothing else
    (the only one sandbridge puts on the sandbox's PATH: sandbox/spec.py)."""
    os.makedirs(bin_dir, exist_ok=True)
    return [
        _write_command(os.path.join(bin_dir, HELPER_NAME), URL_HELPER_MODULE),
        *(
            _write_command(os.path.join(bin_dir, name), OPEN_HELPER_MODULE)
            for name in (OPEN_COMMAND, *BROWSER_SHIMS)
        ),
        _write_command(os.path.join(bin_dir, ALLOW_COMMAND), ALLOW_HELPER_MODULE),
    ]

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
URL_HELPER_MODULE = "sandbridge.relay.inside.url_helper"
OPEN_HELPER_MODULE = "sandbridge.relay.inside.open_helper"
ALLOW_COMMAND = "sandbridge-allow"
ALLOW_HELPER_MODULE = "sandbridge.egress.allow_helper"
# The clipboard stand-ins, written only when the session serves the clipboard bridge
# (its socket is in the runtime dir before the entry starts): without the owner's flag
# no wl-paste or xclip of sandbridge's exists inside.
CLIPBOARD_MODULE = "sandbridge.clipboard.inside"
CLIPBOARD_COMMANDS = ("wl-paste", "wl-copy", "xclip", "xsel")
# The commands through which tools open a browser on Debian and most distributions;
# each leads to sandbridge-open, as $BROWSER does.
BROWSER_SHIMS = ("xdg-open", "sensible-browser", "x-www-browser", "www-browser")
# Settings for apps that a sandbox commonly runs, on ``/run`` beside the commands, found
# through their own search paths (never written where the owner's settings live).
# JupyterLab and Notebook refuse a request whose Host is not ``localhost`` or a loopback
# address (their check against DNS rebinding), so the app origin's
# ``<label>.localhost:<port>`` got 403. Behind the relay that check is the relay's: it
# answers 421 to any other Host, and the app is reachable only through it (the sandbox's
# own network namespace), so Jupyter is told to leave it to the relay. ``run`` points
# ``JUPYTER_CONFIG_PATH`` here (after any the owner sets, so theirs wins) except with
# ``--net full``, where the app listens on the host's own loopback.
APP_SETTINGS_DIR = "/run/sandbridge/jupyter"
JUPYTER_SETTINGS_FILE = "jupyter_server_config.json"
JUPYTER_SETTINGS = '{"ServerApp": {"allow_remote_access": true}}\n'
JUPYTER_PATH_ENV = "JUPYTER_CONFIG_PATH"
_EXECUTABLE = stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH


def _write_command(path: str, module: str, first: str = "") -> str:
    """A shell script running ``module`` with this Python (named explicitly, so that no
    ``python3`` on PATH is asked), ``first`` before the arguments when given."""
    words = f"{module} {_quoted(first)}" if first else module
    with open(path, "w") as script:
        script.write(f'#!/bin/sh\nexec {_quoted(sys.executable)} -m {words} "$@"\n')
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


def install_clipboard_commands(bin_dir: str = COMMANDS_DIR) -> list[str]:
    """Write the clipboard stand-ins (:data:`CLIPBOARD_COMMANDS`) into ``bin_dir``."""
    os.makedirs(bin_dir, exist_ok=True)
    return [
        _write_command(os.path.join(bin_dir, name), CLIPBOARD_MODULE, name)
        for name in CLIPBOARD_COMMANDS
    ]


def install_app_settings(directory: str = APP_SETTINGS_DIR) -> str:
    """Write the apps' settings into ``directory`` (see :data:`APP_SETTINGS_DIR`)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, JUPYTER_SETTINGS_FILE)
    with open(path, "w") as settings:
        settings.write(JUPYTER_SETTINGS)
    return path


def jupyter_config_path(owners: str | None) -> str:
    """``JUPYTER_CONFIG_PATH`` inside: the owner's directories (``--env``) first, where
    Jupyter gives them precedence, then :data:`APP_SETTINGS_DIR`."""
    return f"{owners}{os.pathsep}{APP_SETTINGS_DIR}" if owners else APP_SETTINGS_DIR

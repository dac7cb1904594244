"""The package index each toolchain on this host uses, asked of the toolchain itself.

A project that names no index uses its toolchain's: what the owner configured (pip's
configuration files and ``PIP_*`` variables, npm's npmrc files and ``npm_config_*``
variables) or else the tool's built-in default. sandbridge writes no registry host down
(the repository holds none); ``policy init`` asks the tools, so that the policy it writes
works on a machine with no configuration as on a configured one:

- pip: its own option parser, as ``pip install`` builds its options (configuration
  files, environment, built-in default), and, for its built-in index, the host that
  index serves its files from (pip's ``PyPI`` names both);
- npm: ``npm config get registry`` (its built-in default when nothing sets it).

Each runs on this host, with the owner's environment, from ``/``: the project's own files
(its ``.npmrc``, which the survey reads as text) play no part. A tool that is missing,
fails or takes too long gives nothing, and the policy keeps its placeholder comment.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Collection, Mapping
from typing import Any

from sandbridge.places import host_commands
from sandbridge.survey.findings import Finding, host_finding
from sandbridge.survey.packages import NPM, PYTHON

# A tool that answers a configuration question in more than this is stuck, not slow.
ASK_TIMEOUT = 20.0
# The words an asked finding's ``what`` holds (init says where the entry came from).
ASKED = "asked of "
# What pip says about its index: the options ``pip install`` would run with.
_PIP_QUESTION = """
import json
from pip._internal.commands import create_command
from pip._internal.models.index import PyPI
options, _ = create_command("install").parse_args([])
print(json.dumps({
    "index": options.index_url,
    "extra": list(options.extra_index_urls),
    "default": PyPI.simple_url,
    "files": PyPI.file_storage_domain,
}))
"""

Run = Callable[[list[str], Mapping[str, str]], str | None]


def run_tool(argv: list[str], environ: Mapping[str, str]) -> str | None:
    """``argv``'s stdout, run from ``/`` with ``environ``; ``None`` if it failed.

    The tool is the host's own (:mod:`sandbridge.places.host_commands`): never one found in
    a place the sandbox writes (the project's ``.venv/bin`` or ``node_modules/.bin`` on an
    activated ``PATH``), and run with only the trusted part of ``PATH`` (``npm``'s
    ``#!/usr/bin/env node``). A virtualenv's ``python3`` is a link to an interpreter that
    would read the virtualenv's site-packages and ``pip.conf``, which the sandbox may
    have written: the interpreter it links to is run instead."""
    path = os.pathsep.join(host_commands.search_path(environ.get("PATH")))
    program = host_commands.which(argv[0], path)
    if program is None:
        return None
    try:
        done = subprocess.run(
            [os.path.realpath(program), *argv[1:]],
            cwd="/",
            env={**environ, "PATH": path},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=ASK_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def pip_index(environ: Mapping[str, str], run: Run = run_tool) -> list[Finding]:
    """pip's index (and its file host, for its built-in index) and extra indexes."""
    answer = run(["python3", "-c", _PIP_QUESTION], environ)
    try:
        said: Any = json.loads(answer or "")
        index, extra = str(said["index"]), [str(url) for url in said["extra"]]
        default, files = str(said["default"]), str(said["files"])
    except (ValueError, KeyError, TypeError):
        return []
    built_in = index.rstrip("/") == default.rstrip("/")
    origin = "its built-in default" if built_in else "its configuration"
    found = [host_finding(index, "pip", f"pip index-url, {ASKED}pip ({origin})", PYTHON)]
    if built_in and files:
        what = f"pip's file host for its built-in index, {ASKED}pip"
        found.append(host_finding(f"https://{files}/", "pip", what, PYTHON))
    for url in extra:
        what = f"pip extra-index-url, {ASKED}pip (its configuration)"
        found.append(host_finding(url, "pip", what, PYTHON))
    return [finding for finding in found if finding is not None]


def npm_registry(environ: Mapping[str, str], run: Run = run_tool) -> list[Finding]:
    """npm's registry, as ``npm config get registry`` prints it."""
    answer = (run(["npm", "config", "get", "registry"], environ) or "").strip()
    if not answer:
        return []
    what = f"npm registry, {ASKED}npm (`npm config get registry`)"
    finding = host_finding(answer, "npm", what, NPM)
    return [] if finding is None else [finding]


def toolchain_indexes(
    environ: Mapping[str, str], ecosystems: Collection[str], run: Run = run_tool
) -> list[Finding]:
    """The index hosts pip and npm on this host use, of the toolchains in ``ecosystems``
    (the project's: the policy has a section for those alone, so a tool the project does
    not use is not run)."""
    found = pip_index(environ, run) if PYTHON in ecosystems else []
    return found + (npm_registry(environ, run) if NPM in ecosystems else [])

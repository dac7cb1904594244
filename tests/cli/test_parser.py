"""The command line's parser (``cli/parser.py``), built for the command asked: the same
command line as the whole parser's, and a light command's process imports no session's
machinery (the event loop, the relay, the sandbox's agents)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path

import pytest

from sandbridge.cli.parser import COMMANDS, build_parser, command_word
from tests.conftest import SANDBRIDGE

# What a command that neither serves nor attaches to a session never needs.
SESSION_MACHINERY = (
    "asyncio",
    "uvloop",
    "sandbridge.aio.event_loop",
    "sandbridge.relay",
    "sandbridge.session",
    "sandbridge.agents",
    "sandbridge.cli.sessions",
)


def _shown(parser_for: str | None, words: list[str]) -> tuple[object, str, str]:
    """What parsing ``words`` prints and exits with, on the parser built for
    ``parser_for`` (None: the whole parser)."""
    out, err = io.StringIO(), io.StringIO()
    code: object = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            build_parser(parser_for).parse_args(words)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("words", [[], ["--help"], ["--version"], ["nope"], ["ls", "--nope"]])
def test_the_top_level_reads_as_the_whole_parsers(words: list[str]) -> None:
    assert _shown(command_word(words), words) == _shown(None, words)


@pytest.mark.parametrize("name", [command.name for command in COMMANDS])
def test_each_commands_help_and_usage_errors_are_the_whole_parsers(name: str) -> None:
    for words in ([name, "--help"], [name, "--no-such-flag"]):
        assert _shown(name, words) == _shown(None, words)


def test_the_command_is_the_first_word_that_is_no_option() -> None:
    assert command_word(["--", "ls", "--json"]) == "ls"
    assert command_word(["--help"]) == ""
    assert command_word([]) == ""


def _imported(words: list[str], home: Path) -> set[str]:
    """The modules ``sandbridge WORDS`` imports, in a process of its own
    (``-X importtime`` names each on standard error)."""
    runtime = home / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
    }
    python, *module = SANDBRIDGE
    result = subprocess.run(
        [python, "-X", "importtime", *module, *words],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return {
        line.rpartition("|")[2].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }


@pytest.mark.parametrize(
    "words",
    [
        ["ls"],
        ["status"],
        ["terminal", "key"],
        ["terminal", "list"],
        ["egress", "pending"],
        ["policy", "survey"],
        ["doctor", "--help"],
        ["--help"],
    ],
    ids=" ".join,
)
def test_a_light_command_imports_no_session_machinery(words: list[str], tmp_path: Path) -> None:
    imported = _imported(words, tmp_path)
    assert "sandbridge.cli.parser" in imported  # the names below are read from this list
    assert sorted(imported & set(SESSION_MACHINERY)) == []


# What a plain run's start never uses, each imported where it is first needed (docs/
# architecture.md, "What a command's start imports"): a terminal's admission and
# signatures (nacl), an app's listener, a login's callback, an agent's profiles and state,
# the ssh-agent, container and clipboard bridges, the egress gate of a net allow session.
UNUSED_BY_A_PLAIN_RUN = (
    "nacl",
    "tomllib",
    "sandbridge.terminals.attach_server",
    "sandbridge.terminals.admission",
    "sandbridge.terminals.active_terminal",
    "sandbridge.terminals.approval",
    "sandbridge.terminals.keys",
    "sandbridge.terminals.channel",
    "sandbridge.places.remotes",
    "sandbridge.relay.listener",
    "sandbridge.relay.host.oauth_callback",
    "sandbridge.agents.catalogue",
    "sandbridge.agents.profile",
    "sandbridge.agents.state",
    "sandbridge.ssh_agent",
    "sandbridge.containers",
    "sandbridge.clipboard.server",
    "sandbridge.egress.gate",
    "sandbridge.egress.log",
    "sandbridge.egress.requests",
    "sandbridge.egress.request_server",
)


def test_a_plain_runs_start_imports_only_what_it_uses(tmp_path: Path) -> None:
    """A whole ``run`` without a daemon (a session served in its own process, as every
    test's is): its session started, served and ended, and none of the above imported."""
    imported = _imported(["run", "--no-daemon", "--net", "none", "--", "true"], tmp_path)
    assert "sandbridge.session.lifecycle" in imported  # the session was served here
    assert "sandbridge.terminals.broker" in imported  # with its control socket
    assert sorted(imported & set(UNUSED_BY_A_PLAIN_RUN)) == []


def test_the_shims_start_imports_no_project_policy(tmp_path: Path) -> None:
    """The shim (inside another runtime's sandbox) names the egress proxy's port from the
    wire contract, never the policy's parser."""
    imported = _imported(["shim", "--help"], tmp_path)
    assert "sandbridge.aio.event_loop" in imported  # the shim's module was imported
    assert sorted(name for name in imported if name.startswith("sandbridge.project")) == []


def test_status_imports_no_far_machines_modules(tmp_path: Path) -> None:
    """A local session's control socket is named without the far machines' records."""
    imported = _imported(["status"], tmp_path)
    assert "sandbridge.places.registry" in imported  # status read the registry
    far = {"sandbridge.places.remotes", "sandbridge.protocol.far_sessions"}
    assert sorted(imported & far) == []


def test_the_daemon_imports_at_its_start_what_a_session_imports_at_first_use() -> None:
    """The daemon serves many sessions for long: what a plain run defers, a session's
    parts, it imports at its start (cli/daemon.py's SERVED_AHEAD), each a module that
    exists and one the plain run indeed leaves out."""
    import importlib

    from sandbridge.cli.daemon import SERVED_AHEAD

    for module in SERVED_AHEAD:
        assert module.startswith(UNUSED_BY_A_PLAIN_RUN) or module in UNUSED_BY_A_PLAIN_RUN
        importlib.import_module(module)
    session_parts = {"relay.listener", "oauth_callback", "attach_server", "approval", "gate"}
    assert all(any(part in module for module in SERVED_AHEAD) for part in session_parts)

"""The ``sandbridge`` command's entry point (``main.py``) as a real process: ``run``'s own
options against the project's ``.sandbridge/config`` (real sessions, the backend the
machine picks, the URL read from the sandbox's registration), its standard descriptors,
what reaches the owner's terminal, and a reader of its output that went away."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sandbridge.cli.main import READER_GONE
from tests.conftest import PYTHON, SANDBRIDGE, STARTS_A_SANDBOX, run_argv


def _registered_url(workdir: Path, config: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``ags-webview-url 4173`` inside a session of ``workdir`` whose config is ``config``."""
    (workdir / ".sandbridge").mkdir(exist_ok=True)
    (workdir / ".sandbridge" / "config").write_text(config)
    return subprocess.run(
        run_argv(workdir, "ags-webview-url", "4173", options=("--backend", "auto", *options)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@STARTS_A_SANDBOX
def test_url_form_ip_in_the_config_gives_the_contract_url_and_says_its_caveat_with_the_line(
    tmp_path: Path, xdg: Path
) -> None:
    result = _registered_url(tmp_path, "net = none\nurl_form = ip\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("http://127.0.0.1:") and result.stdout.endswith("/\n")
    assert (
        "sandbridge: warning: url_form = ip (.sandbridge/config:2): apps are served at "
        "http://127.0.0.1:<port>/, and cookies ignore ports"
    ) in result.stderr


@STARTS_A_SANDBOX
def test_the_url_form_flag_overrides_the_config(tmp_path: Path, xdg: Path) -> None:
    result = _registered_url(tmp_path, "net = none\nurl_form = ip\n", "--url-form", "name")
    assert result.returncode == 0, result.stderr
    assert ".localhost:" in result.stdout
    assert "warning" not in result.stderr and "cookies ignore ports" not in result.stderr


def test_a_bad_url_form_in_the_config_is_refused_naming_value_and_line(
    tmp_path: Path, xdg: Path
) -> None:
    result = _registered_url(tmp_path, "url_form = IP4\n")
    assert result.returncode == 2
    assert (
        "sandbridge: .sandbridge/config:1: url_form must be one of name, ip, got 'IP4'"
        in result.stderr
    )


def test_a_bind_inside_the_policy_directory_is_refused_naming_it(tmp_path: Path, xdg: Path) -> None:
    # Its view would be the live directory: the secrets file, and what the owner adds.
    (tmp_path / ".sandbridge" / "keys").mkdir(parents=True)
    for value in (".sandbridge/keys", ".sandbridge/keys:/srv/keys"):
        result = subprocess.run(
            run_argv(tmp_path, "true", options=("--ro-bind", str(tmp_path / value), "--dry-run")),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        assert (
            f"sandbridge: --ro-bind {tmp_path / '.sandbridge' / 'keys'}: inside the project's "
            "policy directory"
        ) in result.stderr


@STARTS_A_SANDBOX
def test_a_closed_standard_descriptor_is_dev_null_for_the_command(
    served: object, tmp_path: Path, xdg: Path
) -> None:
    # Left closed, its number went to the next descriptor opened: a host directory of
    # the session's reached the sandbox as its input or error (its entry refused to
    # start), or the thin client's connection to the daemon became the run's input.
    for closing, fd in (("<&-", 0), ("2>&-", 2)):
        result = subprocess.run(
            [
                "sh", "-c", f'exec "$@" {closing}', "sh",
                *run_argv(tmp_path, "readlink", f"/proc/self/fd/{fd}"),
            ],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert (result.returncode, result.stdout) == (0, "/dev/null\n"), result.stderr


def _own_places(tmp_path: Path) -> dict[str, str]:
    """An environment whose HOME and XDG dirs are the test's own."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    return {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }


def _into_a_closed_pipe(
    env: dict[str, str], *words: str, stream: str = "stdout"
) -> subprocess.CompletedProcess[str]:
    """``sandbridge WORDS`` with ``stream`` a pipe whose reader has already gone (as after
    ``| head -c1``); the other stream captured."""
    reader, writer = os.pipe()
    os.close(reader)
    out, err = (writer, subprocess.PIPE) if stream == "stdout" else (subprocess.PIPE, writer)
    try:
        return subprocess.run(
            [*SANDBRIDGE, *words],
            stdout=out,
            stderr=err,
            env=env,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(writer)


@pytest.mark.parametrize(
    "words",
    [("ls", "--json"), ("ls",), ("policy", "survey"), ("terminal", "audit")],
    ids=" ".join,
)
def test_a_reader_that_went_away_ends_the_command_quietly_with_141(
    tmp_path: Path, words: tuple[str, ...]
) -> None:
    env = _own_places(tmp_path)
    (tmp_path / "package.json").write_text('{"name": "x"}')
    # One audit record, for `terminal audit` to print it.
    record = (
        "from sandbridge.terminals.journal import AuditLog; AuditLog().record('end', session='web')"
    )
    subprocess.run([PYTHON, "-c", record], env=env, check=True, timeout=60)
    words = (*words, str(tmp_path)) if words[0] == "policy" else words
    result = _into_a_closed_pipe(env, *words)
    assert (result.returncode, result.stderr) == (READER_GONE, "")


def test_a_closed_standard_error_is_a_reader_gone_too(tmp_path: Path) -> None:
    # (`sandbridge ... 2>&1 | head -1`): the refusal is written to standard error
    missing = str(tmp_path / "missing")
    result = _into_a_closed_pipe(
        _own_places(tmp_path), "policy", "survey", missing, stream="stderr"
    )
    assert (result.returncode, result.stdout) == (READER_GONE, "")


@STARTS_A_SANDBOX
def test_the_terminal_gets_the_human_line_and_the_event_only_with_verbose(
    tmp_path: Path, xdg: Path
) -> None:
    for options, event in (((), False), (("-v",), True)):
        result = _registered_url(tmp_path, "net = none\n", *options)
        assert result.returncode == 0, result.stderr
        assert "sandbridge: sandbox port 4173 -> http://" in result.stderr
        assert ("sandbridge: app.registered sandbox_port=4173 " in result.stderr) is event

"""``sandbridge run``'s own options against the project's ``.sandbridge/config``: real
sessions (the backend the machine picks), the URL read from the sandbox's registration."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import run_argv


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

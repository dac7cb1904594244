"""``.sandbridge/env``: parsed line by line, refused with the line number and never a
value, refused when others could read it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbridge.exceptions import PolicyError
from sandbridge.project.policy import describe, load_policy
from sandbridge.project.secrets_file import MAX_VARIABLES, parse_secrets, read_secrets
from tests.conftest import swapping

SECRET = "planted-secret-env-9d1e"


def secrets_file(root: Path, text: str, mode: int = 0o600) -> Path:
    (root / ".sandbridge").mkdir(exist_ok=True)
    path = root / ".sandbridge" / "env"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_names_values_comments_quotes_and_export() -> None:
    settings = parse_secrets(
        f"# a comment\n\nA={SECRET}\nexport B = 'quoted # kept'\nC=\"x=y\"\nD=\n",
        ".sandbridge/env",
    )
    assert [(s.name, s.value, s.source) for s in settings] == [
        ("A", SECRET, ".sandbridge/env:3"),
        ("B", "quoted # kept", ".sandbridge/env:4"),
        ("C", "x=y", ".sandbridge/env:5"),
        ("D", "", ".sandbridge/env:6"),
    ]


@pytest.mark.parametrize(
    "line", [f"{SECRET}", f"1BAD={SECRET}", f"BAD-NAME={SECRET}", f"ghp_{SECRET} x=y"]
)
def test_a_bad_line_is_refused_by_number_without_its_content(line: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_secrets(f"OK=1\n{line}\n", ".sandbridge/env")
    message = str(refused.value)
    assert message.startswith(".sandbridge/env:2: expected NAME=VALUE")
    assert SECRET not in message


@pytest.mark.parametrize("quote", ['"', "'"])
def test_a_value_over_several_lines_is_refused_not_split(quote: str) -> None:
    # Its next lines must not be read as lines of their own: "ABCD==" would set ABCD.
    text = f"OK=1\nKEY={quote}-----BEGIN {SECRET}\nABCD==\n-----END{quote}\n"
    with pytest.raises(PolicyError) as refused:
        parse_secrets(text, ".sandbridge/env")
    message = str(refused.value)
    assert message.startswith(f".sandbridge/env:2: the value opens a quote ({quote})")
    assert SECRET not in message


def test_too_many_variables_are_refused() -> None:
    text = "".join(f"V{n}=x\n" for n in range(MAX_VARIABLES + 1))
    with pytest.raises(PolicyError, match=f"more than {MAX_VARIABLES} variables"):
        parse_secrets(text, "env")


def test_no_file_is_no_variables(tmp_path: Path) -> None:
    assert read_secrets(tmp_path) == ()


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o644])
def test_a_file_others_can_read_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    path = secrets_file(tmp_path, f"A={SECRET}\n", mode)
    with pytest.raises(PolicyError) as refused:
        read_secrets(tmp_path)
    assert f"fix it with: chmod 600 {path}" in str(refused.value)
    assert SECRET not in str(refused.value)


def test_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "real"
    target.write_text("A=1\n")
    target.chmod(0o600)
    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "env").symlink_to(target)
    with pytest.raises(PolicyError, match="a symbolic link"):
        read_secrets(tmp_path)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    (tmp_path / ".sandbridge").mkdir()
    os.mkfifo(tmp_path / ".sandbridge" / "env", 0o600)
    with pytest.raises(PolicyError, match="not a regular file"):
        read_secrets(tmp_path)


def test_the_policy_shows_names_and_lines_never_values(tmp_path: Path) -> None:
    secrets_file(tmp_path, f"API_TOKEN={SECRET}\n")
    (tmp_path / ".sandbridge" / "config").write_text("env = API_TOKEN=from-config\nenv = B=2\n")
    policy = load_policy(tmp_path, secrets=read_secrets(tmp_path))
    assert policy.sandbox_env()["API_TOKEN"] == SECRET  # the secrets file wins over config
    assert policy.sandbox_env()["B"] == "2"
    text = "\n".join(describe(policy))
    assert "env API_TOKEN = (value hidden)" in text and "(.sandbridge/env:1)" in text
    assert SECRET not in text
    assert tmp_path / ".sandbridge" / "env" in policy.files_read


def test_a_folder_swapped_for_another_projects_never_gives_its_secrets(tmp_path: Path) -> None:
    # Another project's `.sandbridge/env` holds the owner's secrets for that project's
    # destinations: a sandbox swapping this project's folder for a link to it in a loop
    # must never have them read for this session.
    own, other = tmp_path / "own", tmp_path / "other"
    for root, value in ((own, "mine"), (other, "theirs")):
        (root / ".sandbridge").mkdir(parents=True)
        (root / ".sandbridge" / "env").write_text(f"TOKEN={value}\n")
        (root / ".sandbridge" / "env").chmod(0o600)
    (own / "link").symlink_to(other / ".sandbridge")
    read = 0
    with swapping(own / ".sandbridge", own / "link"):
        for _ in range(1500):
            try:
                settings = read_secrets(own)
            except PolicyError as exc:
                assert "symbolic link or not a directory" in str(exc), exc
                continue
            assert [setting.value for setting in settings] == ["mine"]
            read += 1
    assert read > 0

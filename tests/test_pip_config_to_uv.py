"""pip's configuration reaches uv as its flags and variables, or makes pip install instead
(tests/pip_config_to_uv.py): table-driven on ``pip config list``'s lines, then on a real
``pip config list`` run with a private configuration file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import pip_config_to_uv as translation
from tests.conftest import REPO

ALWAYS = ["--index-strategy", "unsafe-best-match", "--system-certs", "--no-config"]
SCRIPT = REPO / "tests" / "pip_config_to_uv.py"
CA = "/srv/ca.pem"  # not a directory: a bundle file


def _uv(config_list: str) -> translation.UvSettings:
    return translation.translate(translation.effective(translation.parse_config_list(config_list)))


# (pip config list's lines, uv's flags after ALWAYS, uv's environment)
MAPPINGS = [
    pytest.param(
        "global.index-url='https://mirror.corp.test/simple'",
        [],
        {"UV_INDEX_URL": "https://mirror.corp.test/simple"},
        id="index-url",
    ),
    pytest.param(
        "global.extra-index-url='https://a.test/simple https://b.test/simple'",
        [],
        {"UV_EXTRA_INDEX_URL": "https://a.test/simple https://b.test/simple"},
        id="extra-index-url",
    ),
    pytest.param(
        "global.find-links='/opt/wheels'", ["--find-links", "/opt/wheels"], {}, id="find-links"
    ),
    pytest.param(
        "global.constraint='/etc/c.txt'", ["--constraints", "/etc/c.txt"], {}, id="constraint"
    ),
    pytest.param("global.no-index='true'", ["--no-index"], {}, id="no-index"),
    pytest.param("global.no-index='0'", [], {}, id="no-index-off"),
    pytest.param(
        "global.trusted-host='pkgs.corp.test:8443'",
        ["--allow-insecure-host", "pkgs.corp.test:8443"],
        {},
        id="trusted-host",
    ),
    pytest.param(f"global.cert='{CA}'", [], {"SSL_CERT_FILE": CA}, id="cert-file"),
    pytest.param(
        "global.cert='/etc/ssl/certs'", [], {"SSL_CERT_DIR": "/etc/ssl/certs"}, id="cert-dir"
    ),
    pytest.param(
        "global.client-cert='/srv/me.pem'", [], {"SSL_CLIENT_CERT": "/srv/me.pem"}, id="client-cert"
    ),
    pytest.param(
        "global.proxy='http://proxy.corp.test:3128'",
        [],
        {
            name: "http://proxy.corp.test:3128"
            for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
        },
        id="proxy",
    ),
    pytest.param("global.timeout='60'", [], {"UV_HTTP_TIMEOUT": "60"}, id="timeout"),
    pytest.param(":env:.default-timeout='7.5'", [], {"UV_HTTP_TIMEOUT": "8"}, id="default-timeout"),
    pytest.param("global.retries='2'", [], {"UV_HTTP_RETRIES": "2"}, id="retries"),
    pytest.param(
        "\n".join(
            f"global.{name}='1'"
            for name in (
                "disable-pip-version-check",
                "progress-bar",
                "quiet",
                "verbose",
                "root-user-action",
                "no-warn-script-location",
                "no-cache-dir",
                "no-color",
            )
        ),
        [],
        {},
        id="changes-nothing-installed",
    ),
    pytest.param(
        "freeze.all='true'\ndownload.use-feature='x'", [], {}, id="other-commands-sections"
    ),
    pytest.param("", [], {}, id="nothing"),
]


@pytest.mark.parametrize(("lines", "flags", "env"), MAPPINGS)
def test_each_setting_becomes_uvs_flag_or_variable(
    lines: str, flags: list[str], env: dict[str, str]
) -> None:
    uv = _uv(lines)
    assert uv.flags == ALWAYS + flags
    assert uv.env == env


@pytest.mark.parametrize(
    ("lines", "values"),
    [
        pytest.param("global.find-links='/a /b'", ["/a", "/b"], id="spaces"),
        pytest.param("global.find-links='\\n/a\\n  /b\\n'", ["/a", "/b"], id="lines"),
        pytest.param(":env:.find-links='/a\\t/b  /c'", ["/a", "/b", "/c"], id="tabs"),
    ],
)
def test_a_list_setting_gives_a_flag_per_value(lines: str, values: list[str]) -> None:
    expected = [word for value in values for word in ("--find-links", value)]
    assert _uv(lines).flags == ALWAYS + expected


def test_every_list_setting_splits() -> None:
    lines = "\n".join(
        f"global.{name}='x\\n y'" for name in ("extra-index-url", "constraint", "trusted-host")
    )
    uv = _uv(lines)
    assert uv.flags == [
        *ALWAYS,
        *["--constraints", "x", "--constraints", "y"],
        *["--allow-insecure-host", "x", "--allow-insecure-host", "y"],
    ]
    assert uv.env == {"UV_EXTRA_INDEX_URL": "x y"}


def test_a_single_setting_is_not_split() -> None:
    assert _uv(f"global.cert='{CA} b'").env == {"SSL_CERT_FILE": f"{CA} b"}


@pytest.mark.parametrize(
    ("lines", "wins"),
    [
        pytest.param("global.index-url='g'\ninstall.index-url='i'", "i", id="install-over-global"),
        pytest.param("install.index-url='i'\n:env:.index-url='e'", "e", id="env-over-install"),
        pytest.param(":env:.index-url='e'\nglobal.index-url='g'", "e", id="env-over-global"),
        pytest.param("global.INDEX_URL='g'\n:env:.index_url='e'", "e", id="names-normalized"),
    ],
)
def test_the_highest_section_wins_as_in_pip(lines: str, wins: str) -> None:
    assert _uv(lines).env == {"UV_INDEX_URL": wins}


def test_the_timeouts_two_names_are_one_setting() -> None:
    lines = ":env:.default-timeout='180'\nglobal.timeout='15'"
    assert _uv(lines).env == {"UV_HTTP_TIMEOUT": "180"}


@pytest.mark.parametrize(
    ("lines", "named"),
    [
        pytest.param("global.use-feature='truststore'", "use-feature in [global]", id="file"),
        pytest.param("install.pre='true'", "pre in [install]", id="install-section"),
        pytest.param(":env:.only-binary=':all:'", "PIP_ONLY_BINARY", id="variable"),
        pytest.param(":env:.keyring-provider='import'", "PIP_KEYRING_PROVIDER", id="keyring"),
        pytest.param("global.no-index='maybe'", "no-index in [global]", id="not-yes-or-no"),
        pytest.param("global.timeout='soon'", "timeout in [global]", id="not-a-number"),
        pytest.param(":env:.retries='-1'", "PIP_RETRIES", id="negative"),
    ],
)
def test_any_other_setting_makes_pip_install_naming_it(lines: str, named: str) -> None:
    with pytest.raises(translation.Untranslatable, match=named.replace("[", r"\[")):
        _uv(f"global.find-links='/opt/wheels'\n{lines}")


def test_the_command_is_env_the_variables_then_uv_with_its_flags() -> None:
    words = translation.command(
        ["uv", "pip", "install", "-r", "x.lock"], f"global.cert='{CA}'\nglobal.find-links='/w'"
    )
    assert words == [
        *["env", f"SSL_CERT_FILE={CA}", "uv", "pip", "install", "-r", "x.lock"],
        *[*ALWAYS, "--find-links", "/w"],
    ]


def test_a_value_of_several_lines_cannot_be_a_word_of_the_command() -> None:
    with pytest.raises(translation.Untranslatable, match="several lines"):
        translation.command(["uv"], "global.index-url='https://a.test/\\nsimple'")


def test_an_index_url_is_never_a_word_of_the_command_nor_its_credentials_of_a_message() -> None:
    """An index URL may hold a token: uv takes it from its environment, not its command
    line (which ps shows every user), and a refusal masks it."""
    secret = "https://me:t0ken@pkgs.corp.test/simple"
    words = translation.command(["uv"], f"global.index-url='{secret}'")
    assert words[:2] == ["env", f"UV_INDEX_URL={secret}"]
    assert secret not in words[2:]
    with pytest.raises(translation.Untranslatable) as refused:
        _uv(f"global.use-feature='{secret}'")
    assert "t0ken" not in str(refused.value)
    assert "https://***@pkgs.corp.test/simple" in str(refused.value)


def test_a_line_that_is_not_pip_config_lists_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a line"):
        translation.parse_config_list("global.index-url")


# A real pip, its configuration private: a file of the test's own (PIP_CONFIG_FILE, which
# also keeps pip from the user's files) and PIP_* variables of its own, none inherited. The
# machine's own files (/etc/pip.conf, which pip always reads) may add settings: the checks
# below are on the test's own.
PRIVATE_CONFIG = """\
[global]
index-url = https://mirror.corp.test/simple
extra-index-url =
    https://one.corp.test/simple
    https://two.corp.test/simple
cert = {cert}

[install]
trusted-host = one.corp.test two.corp.test

[freeze]
all = true
"""
OWN = {"index-url", "extra-index-url", "cert", "trusted-host", "find-links", "timeout"}


def _private_env(tmp_path: Path, **variables: str) -> dict[str, str]:
    config = tmp_path / "pip.conf"
    config.write_text(PRIVATE_CONFIG.format(cert=tmp_path / "ca.pem"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env |= {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    return env | {"PIP_CONFIG_FILE": str(config), **variables}


def test_a_real_pip_config_list_translates(tmp_path: Path) -> None:
    env = _private_env(tmp_path, PIP_FIND_LINKS="/w1 /w2", PIP_DEFAULT_TIMEOUT="30")
    items = translation.parse_config_list(translation.pip_config_list(sys.executable, env))
    own = [s for s in translation.effective(items) if s.name in OWN]
    uv = translation.translate(own)
    assert sorted(uv.flags) == sorted(
        [
            *ALWAYS,
            *["--allow-insecure-host", "one.corp.test", "--allow-insecure-host", "two.corp.test"],
            *["--find-links", "/w1", "--find-links", "/w2"],
        ]
    )
    # The private file's cert is over the machine's (if it has one).
    assert uv.env == {
        "SSL_CERT_FILE": str(tmp_path / "ca.pem"),
        "UV_HTTP_TIMEOUT": "30",
        "UV_INDEX_URL": "https://mirror.corp.test/simple",
        "UV_EXTRA_INDEX_URL": "https://one.corp.test/simple https://two.corp.test/simple",
    }


def _script(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "uv", "pip", "install", "-r", "x.lock"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_script_prints_the_command_from_a_real_pip(tmp_path: Path) -> None:
    done = _script(_private_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    words = done.stdout.splitlines()
    assert words[0] == "env"
    assert f"SSL_CERT_FILE={tmp_path / 'ca.pem'}" in words
    start = words.index("uv")
    assert words[start : start + 5 + len(ALWAYS)] == [
        "uv",
        "pip",
        "install",
        "-r",
        "x.lock",
        *ALWAYS,
    ]
    assert "UV_EXTRA_INDEX_URL=https://one.corp.test/simple https://two.corp.test/simple" in words


def test_the_script_names_the_setting_that_makes_pip_install(tmp_path: Path) -> None:
    done = _script(_private_env(tmp_path, PIP_USE_FEATURE="truststore"))
    assert done.returncode == translation.USE_PIP, done.stdout + done.stderr
    assert done.stdout == "uv has no equivalent of pip's setting PIP_USE_FEATURE ('truststore')\n"

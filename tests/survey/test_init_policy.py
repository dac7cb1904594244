"""``policy init``'s files: entries with their evidence, in the formats the policy reader
reads; placeholders where nothing names a registry; never a value; never over a policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbridge.exceptions import PolicyError
from sandbridge.project.policy import Policy, load_policy
from sandbridge.project.secrets_file import parse_secrets
from sandbridge.survey import init_policy
from sandbridge.survey.findings import Finding, Kind
from sandbridge.survey.init_policy import GITIGNORE_LINE, plan, write
from sandbridge.survey.walk import survey
from tests.conftest import swapping

SECRET = "planted-secret-init-5b8e"
DAY = "2026-12-01"


def project(root: Path) -> Path:
    files = {
        "requirements.txt": f"--index-url https://u:{SECRET}@pkgs.corp.test/simple/\nx==1\n",
        "package.json": '{"dependencies": {"a": "1"}}',
        ".npmrc": f"//npm.corp.test/:_authToken={SECRET}\n@acme:registry=https://npm.corp.test/\n",
        "compose.yaml": (
            "services:\n  db:\n    image: postgres\n    ports:\n      - 5432:5432\n"
            f"    environment:\n      POSTGRES_PASSWORD: {SECRET}\n      DSN: ${{DSN}}\n"
        ),
        ".env": f"API_KEY={SECRET}\n",
        ".git/config": f'[remote "origin"]\n\turl = https://bob:{SECRET}@git.corp.test/a.git\n',
        ".gitmodules": '[submodule "s"]\n\turl = https://sub.corp.test/s.git\n',
        ".github/workflows/ci.yml": "run: curl https://ci-only.corp.test/x\n",
        "Procfile": "web: serve --port 5000\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_entries_come_with_the_evidence_that_produced_them(tmp_path: Path) -> None:
    files = plan(survey(project(tmp_path)), [], DAY)
    allow = lines(files.allow)
    at = allow.index("pkgs.corp.test")
    assert allow[at - 1] == "# requirements.txt:1: package index (--index-url)"
    at = allow.index("gate:5432")
    assert allow[at - 1] == "# compose.yaml:5: compose service db publishes it (postgres)"
    assert "sub.corp.test" in allow  # submodules are fetched over HTTPS through the proxy
    # A remote is also a way out, and CI-only hosts are not needed: suggestions only.
    assert "# git.corp.test" in allow and "git.corp.test" not in allow
    assert "# ci-only.corp.test" in allow


def test_the_files_are_what_the_policy_reader_reads(tmp_path: Path) -> None:
    root = project(tmp_path)
    write(root, plan(survey(root), [], DAY), force=False)
    policy = load_policy(root)
    assert {rule.host for rule in policy.rules} == {
        "pkgs.corp.test",
        "npm.corp.test",
        "sub.corp.test",
    }
    assert [service.port for service in policy.host_services] == [5432]
    assert policy.rules[0].source.startswith(".sandbridge/allow:")


def test_an_ecosystem_without_a_named_registry_gets_a_placeholder(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text("{}")
    (tmp_path / "requirements.txt").write_text("requests\n")
    allow = plan(survey(tmp_path), [], DAY).allow
    assert "# npm: add your registry host, e.g. from `npm config get registry`" in lines(allow)
    assert any(
        line.startswith("# python: add the package index host and its file host")
        for line in lines(allow)
    )
    assert load_policy_text(tmp_path, allow).rules == ()


def load_policy_text(root: Path, allow: str) -> Policy:
    (root / ".sandbridge").mkdir(exist_ok=True)
    (root / ".sandbridge" / "allow").write_text(allow)
    return load_policy(root)


def test_a_scoped_registry_alone_still_needs_the_default(tmp_path: Path) -> None:
    allow = plan(survey(project(tmp_path)), [], DAY).allow
    assert "# npm: add your registry host, e.g. from `npm config get registry`" in lines(allow)
    assert "# python: add" not in allow  # --index-url replaces pip's default


def test_the_hosts_own_configuration_fills_the_default(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text("{}")
    mirror = Finding(Kind.HOST, "npm.mirror.test", "~/.npmrc:1", "npm registry", "npm")
    allow = lines(plan(survey(tmp_path), [mirror], DAY).allow)
    at = allow.index("npm.mirror.test")
    assert allow[at - 1] == "# ~/.npmrc:1: npm registry (this host's own configuration)"
    assert not any(line.startswith("# npm: add your registry") for line in allow)


def test_the_placeholder_comes_before_the_sections_entries_never_after(tmp_path: Path) -> None:
    # A scoped registry does not replace the default: the placeholder is still needed,
    # and read after the scoped entry it looked like a comment about the next section.
    (tmp_path / "package.json").write_text("{}")
    (tmp_path / ".npmrc").write_text("@acme:registry=https://npm.corp.test/\n")
    (tmp_path / "requirements.txt").write_text("requests\n")
    allow = lines(plan(survey(tmp_path), [], DAY).allow)
    start = allow.index("# npm (.npmrc, package.json)")
    placeholder = allow.index("# npm: add your registry host, e.g. from `npm config get registry`")
    assert start < placeholder < allow.index("npm.corp.test")
    assert allow[placeholder - 1].startswith("# npm, yarn and pnpm download from one registry")


@pytest.mark.parametrize(
    "fixture",
    [
        "tests/.env",
        "test/fixtures/app/.env",
        "spec/.env.test",
        "src/__tests__/.env",
        "pkg/testdata/.env",
        "e2e/fixtures/.env",
    ],
)
def test_a_variable_only_test_fixtures_name_is_left_out_of_env_example(
    tmp_path: Path, fixture: str
) -> None:
    (tmp_path / fixture).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / fixture).write_text("FIXTURE_ONLY=x\nSHARED=y\n")
    (tmp_path / ".env").write_text("SHARED=z\n")
    example = lines(plan(survey(tmp_path), [], DAY).env_example)
    assert "SHARED=" in example
    assert not any("FIXTURE_ONLY" in line for line in example)


@pytest.mark.parametrize(
    ("where", "fixture"),
    [
        ("tests/.env:1", True),
        ("conftest.py", True),
        ("app/db_test.env:3", True),
        ("web/app.spec.env:1", True),
        ("test_settings.env:1", True),
        ("__tests__/x/.env", True),
        (".env:1", False),
        ("contest/.env:1", False),
        ("latest/.env:2", False),
        ("src/testing.env:1", False),
    ],
)
def test_which_paths_are_test_fixtures(where: str, fixture: bool) -> None:
    assert init_policy.is_test_fixture(where) is fixture


def test_an_index_of_non_global_addresses_only_is_written_with_private_saying_why(
    tmp_path: Path,
) -> None:
    (tmp_path / "requirements.txt").write_text("requests\n")
    asked = Finding(
        Kind.HOST, "mirror.corp.test", "pip", "pip index-url, asked of pip (its configuration)",
        "python",
    )  # fmt: skip
    files = plan(
        survey(tmp_path),
        [asked],
        DAY,
        {
            "mirror.corp.test": (
                "mirror.corp.test resolves to 192.0.2.3 (private) and no global address"
            )
        },
        "10.0.0.53",
    )
    allow = lines(files.allow)
    at = allow.index("mirror.corp.test private")
    assert allow[at - 2 : at] == [
        "# pip: pip index-url, asked of pip (its configuration)",
        "# mirror.corp.test resolves to 192.0.2.3 (private) and no global address (when init "
        "ran): 'private' lets the proxy connect to it",
    ]
    assert "resolver = 10.0.0.53" in lines(files.config)
    policy = load_policy_text(tmp_path, files.allow)
    assert [(rule.host, rule.private) for rule in policy.rules] == [("mirror.corp.test", True)]


def test_served_ports_are_suggested_publish_rules(tmp_path: Path) -> None:
    config = lines(plan(survey(project(tmp_path)), [], DAY).config)
    assert "net = allow" in config
    assert "# publish = 5000" in config
    assert "# Procfile:1: Procfile web" in config


def test_env_example_lists_names_that_need_values_and_no_value(tmp_path: Path) -> None:
    example = plan(survey(project(tmp_path)), [], DAY).env_example
    assert "API_KEY=" in lines(example) and "DSN=" in lines(example)
    assert "POSTGRES_PASSWORD=" not in example  # the compose service sets it for itself
    assert [s.name for s in parse_secrets(example, "env.example")] == ["API_KEY", "DSN"]


def test_no_planted_value_reaches_any_file(tmp_path: Path) -> None:
    root = project(tmp_path)
    write(root, plan(survey(root), [], DAY), force=False)
    for path in (root / ".sandbridge").iterdir():
        assert SECRET not in path.read_text(), path
    assert "bob" not in (root / ".sandbridge" / "allow").read_text()


def test_an_existing_policy_is_kept_without_force(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / ".sandbridge").mkdir()
    (root / ".sandbridge" / "allow").write_text("reviewed.test\n")
    with pytest.raises(PolicyError, match="a policy exists; review it, or replace it with"):
        write(root, plan(survey(root), [], DAY), force=False)
    assert (root / ".sandbridge" / "allow").read_text() == "reviewed.test\n"
    write(root, plan(survey(root), [], DAY), force=True)
    assert "pkgs.corp.test" in (root / ".sandbridge" / "allow").read_text()


def test_gitignore_is_created_then_appended_once(tmp_path: Path) -> None:
    assert init_policy.ignore_secrets_file(tmp_path)
    assert (tmp_path / ".gitignore").read_text() == f"{GITIGNORE_LINE}\n"
    assert not init_policy.ignore_secrets_file(tmp_path)
    (tmp_path / ".gitignore").write_text("node_modules")  # no final newline
    assert init_policy.ignore_secrets_file(tmp_path)
    assert init_policy.ignore_secrets_file(tmp_path) is False
    assert (tmp_path / ".gitignore").read_text() == f"node_modules\n{GITIGNORE_LINE}\n"


def test_a_linked_gitignore_or_policy_dir_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "p"
    root.mkdir()
    (root / ".gitignore").symlink_to(elsewhere / "x")
    with pytest.raises(PolicyError, match=r"a symbolic link; add the line /\.sandbridge/env"):
        init_policy.ignore_secrets_file(root)
    (root / ".sandbridge").symlink_to(elsewhere)
    with pytest.raises(PolicyError, match="not a directory"):
        write(root, plan(survey(root), [], DAY), force=True)
    assert list(elsewhere.iterdir()) == []


def test_a_fifo_gitignore_is_refused_without_blocking(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / ".gitignore")
    with pytest.raises(PolicyError, match="not a regular file"):
        init_policy.ignore_secrets_file(tmp_path)


def test_a_planted_file_beside_the_policy_is_never_written_through(tmp_path: Path) -> None:
    import os

    (tmp_path / ".sandbridge").mkdir()
    elsewhere = tmp_path / "elsewhere"
    for name in (".allow.sandbridge-init", ".allow.tmp"):
        os.symlink(elsewhere, tmp_path / ".sandbridge" / name)
    os.mkfifo(tmp_path / ".sandbridge" / ".config.sandbridge-init")
    write(tmp_path, plan(survey(tmp_path), [], DAY), force=False)
    assert not elsewhere.exists()
    assert (tmp_path / ".sandbridge" / "allow").is_file()


def test_a_hostile_path_name_cannot_add_an_entry(tmp_path: Path) -> None:
    # Each character at which the policy reader breaks lines, in a directory's name that
    # becomes a comment's evidence: it must not make the rest of the name an entry.
    for n, brk in enumerate(["\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"]):
        directory = tmp_path / f"p{n}" / f"x{brk}evil.corp.test{brk}#"
        directory.mkdir(parents=True)
        (directory / "requirements.txt").write_text("-i https://pkgs.corp.test/simple\n")
        root = directory.parent
        write(root, plan(survey(root), [], DAY), force=False)
        assert {rule.host for rule in load_policy(root).rules} == {"pkgs.corp.test"}, repr(brk)


def test_a_policy_too_long_to_read_is_not_written(tmp_path: Path) -> None:
    # A lockfile naming thousands of hosts: init refuses before writing anything.
    lines = "".join(f"resolved https://h{n}.corp.test/x.tgz\n" for n in range(8000))
    (tmp_path / "yarn.lock").write_text(lines)
    with pytest.raises(PolicyError, match=r"allow: would be [0-9]+ bytes, more than the"):
        write(tmp_path, plan(survey(tmp_path), [], DAY), force=False)
    assert not (tmp_path / ".sandbridge").exists()


def test_an_internationalized_name_is_a_suggestion_that_says_what_it_shows(
    tmp_path: Path,
) -> None:
    # "pkgs.example" with a Ukrainian i (U+0456) in punycode: the project's files are the
    # sandbox's to have written, so such a name is the owner's choice, shown decoded.
    host = "xn--" + "pkg\u0456".encode("punycode").decode() + ".example"
    (tmp_path / "requirements.txt").write_text(f"--index-url https://{host}/simple\nrequests\n")
    write(tmp_path, plan(survey(tmp_path), [], DAY), force=False)
    assert host not in [rule.text for rule in load_policy(tmp_path).rules]
    allow = lines((tmp_path / ".sandbridge" / "allow").read_text())
    note = allow[allow.index(f"# {host}") - 1]
    assert note.startswith(f"# {host} is an internationalized name that a browser may show as ")
    assert "U+0456 CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I" in note
    assert note.endswith("uncomment it only if the sandbox must reach it")


def test_an_address_of_this_host_or_a_private_one_never_becomes_an_internet_entry(
    tmp_path: Path,
) -> None:
    # A project's index URLs naming the host's loopback in another spelling, the gate
    # (word or address: a host service inside), the cloud metadata service or a private
    # address: each was an active proxy entry under "python", and an address entry is
    # taken at its word (127.0.0.2:22 reached the host's sshd, 100.64.0.1:2375 a docker
    # API, 169.254.169.254 the instance's credentials).
    (tmp_path / "requirements.txt").write_text(
        "--index-url http://127.0.0.2:22/simple\n"
        "--extra-index-url http://[::ffff:127.0.0.1]:6379/simple\n"
        "--extra-index-url http://gate:2222/simple\n"
        "--extra-index-url http://100.64.0.1:2375/\n"
        "--extra-index-url http://169.254.169.254/latest\n"
        "--extra-index-url http://10.0.0.8:8080/\n"
        "--extra-index-url http://[fd00::8]:8080/\n"
        "requests\n"
    )
    (tmp_path / ".gitmodules").write_text('[submodule "s"]\n\turl = https://192.168.1.9/s.git\n')
    write(tmp_path, plan(survey(tmp_path), [], DAY), force=False)
    policy = load_policy(tmp_path)
    assert [rule.text for rule in policy.rules] == []
    # The host's own ports are host services (gate:PORT), their evidence saying so.
    assert sorted(service.port for service in policy.host_services) == [22, 2222, 2375, 6379]
    allow = lines((tmp_path / ".sandbridge" / "allow").read_text())
    assert allow[allow.index("gate:22") - 1] == (
        "# requirements.txt:1: package index (--index-url) on this host"
    )
    # Other addresses that are not public are suggestions that say why.
    for entry, address, kind in [
        ("169.254.169.254", "169.254.169.254", "link-local"),
        ("10.0.0.8:8080", "10.0.0.8", "private"),
        ("[fd00::8]:8080", "fd00::8", "private"),
        ("192.168.1.9", "192.168.1.9", "private"),
    ]:
        at = allow.index(f"# {entry}")
        assert allow[at - 1].startswith(f"# {address} is a {kind} address: ")


def test_a_wildcard_the_project_names_is_only_a_commented_entry(tmp_path: Path) -> None:
    # GOPRIVATE-style patterns in a project's .env were active entries: `*.github.io`
    # or `*.ngrok-free.app` lets the sandbox reach every name anyone can register there.
    (tmp_path / ".env").write_text(
        "GOPRIVATE=*.github.io,*.ngrok-free.app/x,git.corp.test\nGONOSUMDB=*.co.uk\n"
    )
    write(tmp_path, plan(survey(tmp_path), [], DAY), force=False)
    policy = load_policy(tmp_path)
    assert [rule.text for rule in policy.rules] == ["git.corp.test"]
    allow = lines((tmp_path / ".sandbridge" / "allow").read_text())
    for pattern in ("*.github.io", "*.ngrok-free.app", "*.co.uk"):
        at = allow.index(f"# {pattern}")
        assert allow[at - 1].startswith(f"# {pattern} is a wildcard: it allows every name ")


def test_the_word_gate_as_a_host_never_breaks_the_written_policy(tmp_path: Path) -> None:
    # `GOPRIVATE=gate` or `--trusted-host gate` gave the entry `gate`, which the policy
    # reader refuses (a host service needs a port): every later run stopped with exit 2.
    (tmp_path / ".env").write_text("GOPRIVATE=gate\n")
    (tmp_path / "requirements.txt").write_text("--trusted-host gate\nrequests\n")
    write(tmp_path, plan(survey(tmp_path), [], DAY), force=False)
    policy = load_policy(tmp_path)
    assert policy.rules == () and policy.host_services == ()
    allow = lines((tmp_path / ".sandbridge" / "allow").read_text())
    assert allow[allow.index("# gate") - 1].startswith("# gate names this host's services")


def test_a_url_with_port_0_names_no_entry(tmp_path: Path) -> None:
    # https://x.test:0/ gave the entry x.test:0, which the policy reader refuses (every
    # later run stopped); http://localhost:0/ gave gate:80, a port nothing named.
    (tmp_path / "requirements.txt").write_text(
        "--index-url https://x.test:0/simple\n--extra-index-url http://localhost:0/\nrequests\n"
    )
    write(tmp_path, plan(survey(tmp_path), [], DAY), force=False)
    policy = load_policy(tmp_path)
    assert policy.rules == () and policy.host_services == ()


def test_a_policy_folder_swapped_for_a_link_meanwhile_is_never_written_through(
    tmp_path: Path,
) -> None:
    # `policy init` checked `.sandbridge` for a link, then wrote its files by their whole
    # paths: a live sandbox swapping the folder for a link (to ~/.ssh, say) in a loop had
    # the owner's policy written there. Each write now lands in the real folder or is
    # refused with the folder's name.
    root, elsewhere = tmp_path / "p", tmp_path / "elsewhere"
    (root / ".sandbridge").mkdir(parents=True)
    elsewhere.mkdir()
    (root / "link").symlink_to(elsewhere)
    files = plan(survey(root), [], DAY)
    written = 0
    with swapping(root / ".sandbridge", root / "link"):
        for _ in range(400):
            try:
                write(root, files, force=True, ignored=True)
            except PolicyError as exc:
                assert "not a directory; remove it first" in str(exc), exc
                continue
            finally:
                assert list(elsewhere.iterdir()) == [], "a policy file went through the link"
            written += 1
    assert written > 0

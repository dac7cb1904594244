"""The survey: each ecosystem's fixture project gives the expected names; no value, no
credential ever reaches its text or JSON; a hostile tree gives notes, not a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbridge.survey.findings import Kind
from sandbridge.survey.walk import MAX_DEPTH, MAX_FILE_BYTES, Survey, describe, survey

SECRET = "planted-secret-7f3a9c"


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def names(result: Survey, kind: Kind) -> set[str]:
    return {f.name for f in result.of(kind)}


def where(result: Survey, kind: Kind, name: str) -> set[str]:
    return {f.where for f in result.of(kind) if f.name == name}


def outputs(result: Survey) -> str:
    return "\n".join(describe(result)) + json.dumps(result.to_json())


# --- one fixture project per ecosystem -------------------------------------------------


def test_python_requirements_name_the_index_and_direct_references(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "requirements.txt": (
                f"--index-url https://user:{SECRET}@pkgs.corp.test/simple/\n"
                "--extra-index-url https://extra.corp.test/simple\n"
                "--trusted-host pkgs.corp.test\n"
                "requests==2.31\n"
                "mylib @ https://files.corp.test/mylib-1.0.tar.gz\n"
            ),
            "requirements-dev.txt": "-i https://dev.corp.test/simple\n",
        },
    )
    result = survey(tmp_path)
    assert "python" in result.ecosystems()
    assert {"pkgs.corp.test", "extra.corp.test", "files.corp.test", "dev.corp.test"} <= names(
        result, Kind.HOST
    )
    assert where(result, Kind.HOST, "pkgs.corp.test") == {
        "requirements.txt:1",
        "requirements.txt:3",
    }
    assert SECRET not in outputs(result)


def test_pyproject_uv_and_poetry_indexes_and_pip_conf(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": (
                '[project]\nname = "x"\n'
                'dependencies = ["lib @ https://direct.corp.test/lib.whl"]\n'
                "[tool.uv]\n"
                f'index-url = "https://u:{SECRET}@uv.corp.test/simple"\n'
                '[[tool.uv.index]]\nurl = "https://uvindex.corp.test/simple"\n'
                '[[tool.poetry.source]]\nname = "corp"\nurl = "https://poetry.corp.test/simple"\n'
            ),
            "pip.conf": "[global]\nindex-url = https://conf.corp.test/simple\n"
            "extra-index-url =\n    https://more.corp.test/simple\n",
            "uv.lock": 'source = { registry = "https://lock.corp.test/simple" }\n',
        },
    )
    result = survey(tmp_path)
    hosts = names(result, Kind.HOST)
    assert {
        "uv.corp.test",
        "uvindex.corp.test",
        "poetry.corp.test",
        "direct.corp.test",
        "conf.corp.test",
        "more.corp.test",
        "lock.corp.test",
    } <= hosts
    assert where(result, Kind.HOST, "uv.corp.test") == {"pyproject.toml:5"}
    assert where(result, Kind.HOST, "more.corp.test") == {"pip.conf:4"}
    assert SECRET not in outputs(result)


def test_npm_registry_tokens_give_only_their_host(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "package.json": '{"dependencies": {"a": "1.0", "b": "https://tar.corp.test/b.tgz"}}',
            ".npmrc": (
                f"//npm.corp.test/:_authToken={SECRET}\n"
                "registry=https://npm.corp.test/\n"
                "@acme:registry=https://acme.corp.test/\n"
                f"//acme.corp.test:8443/:_password={SECRET}\n"
            ),
            "package-lock.json": '{\n  "resolved": "https://npm.corp.test/a/-/a-1.0.tgz"\n}\n',
            "yarn.lock": 'a@1:\n  resolved "https://yarn.corp.test/a/-/a-1.0.tgz#abc"\n',
            "pnpm-lock.yaml": "  resolution: {tarball: https://pnpm.corp.test/a.tgz}\n",
        },
    )
    result = survey(tmp_path)
    assert "npm" in result.ecosystems()
    hosts = names(result, Kind.HOST)
    assert {"npm.corp.test", "acme.corp.test", "tar.corp.test", "yarn.corp.test"} <= hosts
    assert "pnpm.corp.test" in hosts
    assert where(result, Kind.HOST, "npm.corp.test") == {
        ".npmrc:1",
        ".npmrc:2",
        "package-lock.json:2",
    }
    assert SECRET not in outputs(result)
    assert "_authToken" not in outputs(result)


def test_cargo_manifest_lock_and_config(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "Cargo.toml": '[dependencies]\nx = { git = "https://git.corp.test/x" }\n',
            "Cargo.lock": 'source = "sparse+https://index.corp.test/"\n',
            ".cargo/config.toml": '[registries.corp]\nindex = "https://cargo.corp.test/index"\n',
        },
    )
    result = survey(tmp_path)
    assert "cargo" in result.ecosystems()
    assert {"git.corp.test", "index.corp.test", "cargo.corp.test"} <= names(result, Kind.HOST)


def test_go_modules_and_goproxy_in_an_env_file(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "go.mod": "module corp.test/x\n",
            "go.sum": "",
            ".env": f"GOPROXY=https://u:{SECRET}@goproxy.corp.test,direct\n"
            "GOPRIVATE=*.private.test,git.corp.test/team\n",
        },
    )
    result = survey(tmp_path)
    assert "go" in result.ecosystems()
    assert {"goproxy.corp.test", "*.private.test", "git.corp.test"} <= names(result, Kind.HOST)
    assert SECRET not in outputs(result)


def test_bundler_gemfile_and_lock(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "Gemfile": 'source "https://gems.corp.test"\ngem "x", git: "https://git.corp.test/x"\n',
            "Gemfile.lock": "GEM\n  remote: https://gems.corp.test/\n",
        },
    )
    result = survey(tmp_path)
    assert "ruby" in result.ecosystems()
    assert where(result, Kind.HOST, "gems.corp.test") == {"Gemfile:1", "Gemfile.lock:2"}
    assert "git.corp.test" in names(result, Kind.HOST)


def test_maven_repositories_but_not_the_homepage(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pom.xml": (
                "<project>\n<url>https://homepage.corp.test</url>\n<repositories>\n"
                "<repository><url>https://maven.corp.test/repo</url></repository>\n"
                "</repositories>\n</project>\n"
            ),
            ".mvn/wrapper/maven-wrapper.properties": (
                "distributionUrl=https://dist.corp.test/maven.zip\n"
            ),
        },
    )
    result = survey(tmp_path)
    hosts = names(result, Kind.HOST)
    assert {"maven.corp.test", "dist.corp.test"} <= hosts
    assert "homepage.corp.test" not in hosts


def test_gradle_repositories_plugins_and_wrapper(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "settings.gradle.kts": "plugins {\n}\n",
            "build.gradle": (
                "repositories {\n  mavenCentral()\n"
                '  maven { url "https://gradle.corp.test/repo" }\n}\n'
            ),
            "gradle/wrapper/gradle-wrapper.properties": (
                "distributionUrl=https\\://wrapper.corp.test/gradle-8-bin.zip\n"
            ),
        },
    )
    result = survey(tmp_path)
    assert {"gradle", "maven"} <= set(result.ecosystems())
    assert {"gradle.corp.test", "wrapper.corp.test"} <= names(result, Kind.HOST)
    assert "build.gradle:2" in result.ecosystems()["maven"]


# --- what runs beside the packages -------------------------------------------------------


def test_git_remotes_and_submodules_without_credentials(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            ".git/config": (
                '[core]\n\tbare = false\n[remote "origin"]\n'
                f"\turl = https://bob:{SECRET}@git.corp.test/team/app.git\n"
                "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
            ),
            ".gitmodules": '[submodule "lib"]\n\tpath = lib\n\turl = git@ssh.corp.test:t/lib.git\n',
        },
    )
    result = survey(tmp_path)
    assert where(result, Kind.HOST, "git.corp.test") == {".git/config:4"}
    [ssh] = [f for f in result.of(Kind.HOST) if f.name == "ssh.corp.test"]
    assert "over ssh" in ssh.what
    text = outputs(result)
    assert SECRET not in text and "bob" not in text


def test_compose_services_ports_images_and_variable_names(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "compose.yaml": (
                "services:\n"
                "  db:\n"
                "    image: postgres:16\n"
                "    ports:\n"
                '      - "5432:5432"   # postgres\n'
                "    environment:\n"
                f"      POSTGRES_PASSWORD: {SECRET}\n"
                "  cache:\n"
                "    image: redis\n"
                "    ports:\n"
                "      - 127.0.0.1:6379:6379\n"
                "      - 9000\n"
                "      - target: 80\n"
                "        published: 8080\n"
                "    environment:\n"
                f"      - CACHE_KEY={SECRET}\n"
                "      - API_URL=${API_URL}\n"
            ),
        },
    )
    result = survey(tmp_path)
    assert names(result, Kind.SERVICE) == {"5432", "6379", "8080"}
    assert where(result, Kind.SERVICE, "5432") == {"compose.yaml:5"}
    assert {"POSTGRES_PASSWORD", "CACHE_KEY", "API_URL"} <= names(result, Kind.VARIABLE)
    assert names(result, Kind.IMAGE) == {"postgres:16", "redis"}
    assert SECRET not in outputs(result)


def test_compose_ports_in_flow_style_are_read_as_block_style_is(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "compose.yaml": (
                "services:\n"
                '  db: {image: "postgres:16", ports: ["5432:5432"]}\n'
                "  cache:\n"
                "    image: redis\n"
                '    ports: ["127.0.0.1:6379:6379", 9000, {target: 80, published: "8080"}]\n'
                f"    environment: ['API_URL=${{API_URL}}', 'CACHE_KEY={SECRET}']\n"
                "  web:\n"
                "    ports:\n"
                "      - 3000:3000\n"  # YAML 1.1 reads this unquoted as a number: its text counts
            ),
        },
    )
    result = survey(tmp_path)
    assert names(result, Kind.SERVICE) == {"5432", "6379", "8080", "3000"}
    assert where(result, Kind.SERVICE, "5432") == {"compose.yaml:2"}
    assert where(result, Kind.SERVICE, "6379") == {"compose.yaml:5"}
    assert {"API_URL", "CACHE_KEY"} <= names(result, Kind.VARIABLE)
    assert names(result, Kind.IMAGE) == {"postgres:16", "redis"}
    assert SECRET not in outputs(result)


def test_compose_aliases_repeated_without_end_cost_a_bounded_walk(tmp_path: Path) -> None:
    # A "billion laughs" file: each level names the one below nine times.
    levels = ['a0: &a0 ["1:1", "2:2", "3:3", "4:4", "5:5", "6:6", "7:7", "8:8", "9:9"]']
    for level in range(1, 9):
        below = ", ".join([f"*a{level - 1}"] * 9)
        levels.append(f"a{level}: &a{level} [{below}]")
    text = "x:\n" + "".join(f"  {line}\n" for line in levels)
    text += "services:\n" + "".join(f"  s{n}:\n    ports: *a8\n" for n in range(50))
    write(tmp_path, {"compose.yaml": text})
    result = survey(tmp_path)  # returns: the walk stops at its budget
    assert len(result.of(Kind.SERVICE)) <= 10_000


def test_a_compose_file_that_is_no_yaml_document_gives_no_finding(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "compose.yaml": "[" * 100_000,
            "docker-compose.yml": "services:\n  a: [\n",
            "compose.dev.yaml": "---\nservices: {}\n---\nservices: {}\n",
        },
    )
    assert survey(tmp_path).of(Kind.SERVICE) == []


def test_a_host_named_on_many_lines_is_printed_once_with_its_count(tmp_path: Path) -> None:
    lock = "".join(
        f'[[package]]\nname = "p{n}"\n[package.source]\n'
        f'url = "https://files.corp.test/p{n}.tar.gz"\n'
        for n in range(330)
    )
    write(tmp_path, {"poetry.lock": lock})
    lines = [line for line in describe(survey(tmp_path)) if "files.corp.test" in line]
    [line] = lines
    assert "poetry.lock:4" in line and line.endswith("(and 329 more)")


def test_devcontainer_and_procfile_ports(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            ".devcontainer/devcontainer.json": (
                '{\n  // comment\n  "forwardPorts": [3000, "db:5433"],\n'
                '  /* x */ "appPort": 8001,\n}\n'
            ),
            "Procfile": "web: gunicorn app:app --bind 0.0.0.0:5000\nworker: celery -A x\n",
        },
    )
    result = survey(tmp_path)
    assert names(result, Kind.PORT) == {"3000", "5433", "8001", "5000"}
    assert where(result, Kind.PORT, "5000") == {"Procfile:1"}
    assert where(result, Kind.PORT, "3000") == {".devcontainer/devcontainer.json:3"}


def test_env_files_give_names_only(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            ".env": f"DATABASE_URL=postgres://u:{SECRET}@db.corp.test/x\nexport API_KEY={SECRET}\n",
            ".env.local": f"LOCAL_TOKEN={SECRET}\n# COMMENTED=x\n",
        },
    )
    result = survey(tmp_path)
    assert names(result, Kind.VARIABLE) == {"DATABASE_URL", "API_KEY", "LOCAL_TOKEN"}
    assert "db.corp.test" not in names(result, Kind.HOST)  # a value, not a registry variable
    assert SECRET not in outputs(result)


# A secret value made only of letters, digits and _ reads like a variable's name.
NAME_LIKE_SECRET = "ghpPlanted7f3a9cSecretValue"


def test_lines_of_a_multi_line_env_value_are_not_names(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            ".env": (
                'KEY="-----BEGIN PRIVATE KEY-----\n'
                f"{NAME_LIKE_SECRET}\n"
                f"{NAME_LIKE_SECRET}2==\n"
                '-----END \\" PRIVATE KEY-----"\n'
                f"SINGLE='{NAME_LIKE_SECRET}3\n"
                f"{NAME_LIKE_SECRET}4=x'\n"
                'export AFTER="one line"\n'
                "QUOTED_HERE='x' # a ' in a comment\n"
                "LAST=1\n"
            ),
        },
    )
    result = survey(tmp_path)
    assert names(result, Kind.VARIABLE) == {"KEY", "SINGLE", "AFTER", "QUOTED_HERE", "LAST"}
    assert NAME_LIKE_SECRET not in outputs(result)


def test_lines_of_a_multi_line_compose_value_are_not_names(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "compose.yaml": (
                "services:\n"
                "  app:\n"
                "    environment:\n"
                "      API_TOKEN: >-\n"
                f"        {NAME_LIKE_SECRET}\n"
                "      OTHER:\n"
                f"        {NAME_LIKE_SECRET}2\n"
                "      CERT: |\n"
                f"        {NAME_LIKE_SECRET}3==\n"
                "      PLAIN: x\n"
                "  worker:\n"
                "    environment:\n"
                "      - LISTED=a\n"
                f"        {NAME_LIKE_SECRET}4\n"
                "      - SECOND\n"
            ),
        },
    )
    result = survey(tmp_path)
    assert names(result, Kind.VARIABLE) == {
        "API_TOKEN",
        "OTHER",
        "CERT",
        "PLAIN",
        "LISTED",
        "SECOND",
    }
    assert NAME_LIKE_SECRET not in outputs(result)


def test_credentials_that_cut_the_authority_short_give_no_host(tmp_path: Path) -> None:
    # A password holding "/" ends the authority inside the credentials: "user:38291"
    # would read as host and port, the port being the secret's first digits.
    write(
        tmp_path,
        {
            "requirements.txt": (
                "-f https://deploy:38291/x7Kq@files.corp.test/\n"
                "-i https://deploy:38291?x7Kq@query.corp.test/simple\n"
                "pkg @ https://u:x7Kq@[2001:db8::5]:8443/p.whl\n"
                "--extra-index-url http://localhost:4873/@scope/simple\n"
            ),
        },
    )
    result = survey(tmp_path)
    assert names(result, Kind.HOST) == {"2001:db8::5"}
    assert names(result, Kind.SERVICE) == {"4873"}
    text = outputs(result)
    assert "38291" not in text and "x7Kq" not in text and "deploy" not in text


def test_ci_files_name_hosts(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            ".github/workflows/ci.yml": (
                "jobs:\n  t:\n    steps:\n"
                f"      - run: curl https://ci:{SECRET}@upload.corp.test/x\n"
                "      - run: curl https://${{ secrets.HOST }}/y\n"
            ),
            ".gitlab-ci.yml": "variables:\n  PIP_INDEX_URL: https://gitlab.corp.test/simple\n",
        },
    )
    result = survey(tmp_path)
    assert where(result, Kind.HOST, "upload.corp.test") == {".github/workflows/ci.yml:4"}
    assert "gitlab.corp.test" in names(result, Kind.HOST)
    assert SECRET not in outputs(result)


def test_a_loopback_registry_is_a_host_service(tmp_path: Path) -> None:
    write(tmp_path, {".npmrc": "registry=http://localhost:4873/\n"})
    result = survey(tmp_path)
    assert names(result, Kind.SERVICE) == {"4873"}
    assert names(result, Kind.HOST) == set()


# --- a hostile project -------------------------------------------------------------------


def test_links_fifos_binary_junk_bad_encoding_and_huge_files_are_notes(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "requirements.txt").write_text("-i https://outside.corp.test/simple\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "requirements.txt").symlink_to(outside / "requirements.txt")
    (project / "linked").symlink_to(outside)
    (project / "loop").symlink_to(project)
    os.mkfifo(project / "package.json")
    (project / "Gemfile").write_bytes(b"source 'x'\0\xff\xfe")
    (project / "go.mod").write_bytes(b"module \xff\xfe\n")
    (project / "pom.xml").write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    result = survey(project)
    notes = {note.where: note.text for note in result.notes}
    assert notes["requirements.txt"] == "a symbolic link: not followed"
    assert notes["package.json"] == "not a regular file: not read"
    assert notes["Gemfile"] == "binary (holds NUL bytes): not read"
    assert notes["go.mod"].startswith("not UTF-8 text")
    assert notes["pom.xml"] == f"larger than {MAX_FILE_BYTES} bytes: not read"
    assert "outside.corp.test" not in names(result, Kind.HOST)
    assert "notes:" in "\n".join(describe(result))


# Characters that end a line for str.splitlines (and so for the policy reader), a
# terminal escape, a bidi override: none may reach an output or a file raw.
HOSTILE_CHARS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x1b\u202e"


def test_hostile_names_in_paths_and_files_are_one_printable_line(tmp_path: Path) -> None:
    weird = f"x{HOSTILE_CHARS}evil.corp.test"
    write(
        tmp_path,
        {
            f"{weird}/requirements.txt": "-i https://pkgs.corp.test/simple\n",
            f"{weird}/package.json": "[",
            "compose.yaml": (
                "services:\n"
                '  "\x1b]0;title\x07\u202eapp":\n'
                "    image: \x1b[2Jimg\n"
                "    ports:\n"
                "      - 8080:80\n"
            ),
            ".git/config": '[remote "\x1b]52;c;eA==\x07"]\n\turl = https://git.corp.test/a\n',
        },
    )
    os.mkfifo(tmp_path / weird / "requirements.in")
    result = survey(tmp_path)
    assert "pkgs.corp.test" in names(result, Kind.HOST)
    texts = [*describe(result), json.dumps(result.to_json())]
    texts += [f"{f.name} {f.where} {f.what}" for f in result.findings]
    texts += [f"{n.where} {n.text}" for n in result.notes]
    for text in texts:
        assert text.isprintable(), text
    assert r"x\x0a\x0d\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x1b\u202eevil" in "".join(texts)


def test_deeply_nested_json_and_toml_give_no_crash(tmp_path: Path) -> None:
    nested = "[" * 200_000
    write(
        tmp_path,
        {
            "package.json": nested,
            ".devcontainer/devcontainer.json": nested,
            "pyproject.toml": f"a = {nested}",
        },
    )
    result = survey(tmp_path)
    assert {"npm", "python"} <= set(result.ecosystems())
    assert names(result, Kind.PORT) == set()


def test_long_hostile_lines_are_read_in_linear_time(tmp_path: Path) -> None:
    # Each line defeats a pattern that backtracks (quadratic: about an hour for these
    # half-megabyte lines); the survey, in a process of its own, must end in seconds.
    half = 256 * 1024
    write(
        tmp_path,
        {
            "Procfile": "web: " + "-p" * half + "\n",
            ".gitlab-ci.yml": " " * 2 * half + "\n",
            "build.gradle": "url " + "a." * half + "\n",
            "requirements.txt": "a+" * half + "\n",
            ".gitmodules": '[submodule "s"]\nurl = a' + " " * 2 * half + "b\n",
            "Gemfile": "source" + " " * 2 * half + "x\n" + 'gem "x", git:' + " " * 2 * half + "\n",
        },
    )
    script = "import sys; from sandbridge.survey.walk import survey; survey(sys.argv[1])"
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], timeout=60, check=False)
    assert done.returncode == 0


def test_a_manifest_of_thousands_of_urls_is_read_in_linear_time(tmp_path: Path) -> None:
    # Each URL's line was looked up across the whole text: quadratic, minutes a file.
    deps = {f"p{n}": f"https://h{n}.c.test/x.tgz" for n in range(22_000)}
    (tmp_path / "package.json").write_text(json.dumps({"dependencies": deps}, indent=1))
    script = (
        "import sys; from sandbridge.survey.walk import survey; "
        "print(len(survey(sys.argv[1]).findings))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == 20_000


def test_a_huge_directory_is_cut_at_the_entry_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbridge.survey import walk as survey_module

    monkeypatch.setattr(survey_module, "MAX_ENTRIES", 50)
    for n in range(120):
        (tmp_path / f"f{n:03}").touch()
    result = survey(tmp_path)
    assert result.entries_seen == 50
    assert any(note.text == "stopped after 50 entries" for note in result.notes)


def test_findings_are_kept_up_to_their_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbridge.survey import walk as survey_module

    monkeypatch.setattr(survey_module, "MAX_FINDINGS", 100)
    lines = "".join(f"    resolved https://h{n}.corp.test/x.tgz\n" for n in range(150))
    write(tmp_path, {"a/package-lock.json": lines, "b/package-lock.json": lines})
    result = survey(tmp_path)
    assert len(result.findings) == 100
    notes = {note.where: note.text for note in result.notes}
    assert notes["a/package-lock.json"] == "more than 100 findings in all: the rest not kept"
    assert notes["b/package-lock.json"] == "more than 100 findings in all: not read"


def test_a_deep_tree_is_cut_at_the_depth_limit(tmp_path: Path) -> None:
    deep = tmp_path
    for level in range(MAX_DEPTH + 3):
        deep = deep / f"d{level}"
    deep.mkdir(parents=True)
    (deep / "requirements.txt").write_text("-i https://deep.corp.test/simple\n")
    result = survey(tmp_path)
    assert "deep.corp.test" not in names(result, Kind.HOST)
    assert any("deeper than" in note.text for note in result.notes)


def test_installed_packages_are_not_surveyed(tmp_path: Path) -> None:
    write(tmp_path, {"node_modules/x/package.json": '{"dependencies": {"a": "https://nm.test/a"}}'})
    assert survey(tmp_path).findings == []


def test_the_survey_changes_nothing(tmp_path: Path) -> None:
    write(tmp_path, {"requirements.txt": "x\n", ".env": "A=1\n"})
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.rglob("*")}
    survey(tmp_path)
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.rglob("*")}
    assert before == after


def test_a_directory_that_cannot_be_opened_is_refused(tmp_path: Path) -> None:
    from sandbridge.exceptions import PolicyError

    with pytest.raises(PolicyError, match="cannot survey it"):
        survey(tmp_path / "missing")


def test_comments_and_descriptions_name_no_host(tmp_path: Path) -> None:
    # A URL in a comment, or in a lockfile's package description or a manifest's
    # homepage, is no source the tools fetch from; each was an active entry of init's
    # policy ("requirements.txt:1: direct reference"), the sandbox's pick of a host.
    write(
        tmp_path,
        {
            "requirements.txt": "# https://req-comment.test/x\n"
            "requests  # mirror: https://req-inline.test/\n"
            "lib @ https://req-direct.test/lib.whl#sha256=ab\n",
            "Cargo.toml": '[package]\nname = "x"\nrepository = "https://github-repo.test/x"\n'
            '# registry = "https://cargo-comment.test/index"\n'
            '[dependencies]\nx = { git = "https://cargo-git.test/x" }\n',
            ".cargo/config.toml": '# [registries.x]\n# index = "https://config-comment.test/"\n'
            '[registries.corp]\nindex = "https://config-index.test/index"\n',
            "poetry.lock": '[[package]]\nname = "a"\n'
            'description = "Mirror at url = https://lock-description.test/ for all"\n'
            '# url = "https://lock-comment.test/"\n'
            '[package.source]\ntype = "legacy"\nurl = "https://lock-source.test/simple"\n',
            "Gemfile": '# source "https://gem-comment.test"\n'
            'gem "x", git: "https://gem-git.test/x"  # forked from https://gem-inline.test/\n'
            'gem "digital", doc: "https://gem-option-inline.test/"\n'
            'gem "y", :source => "https://gem-source-option.test"\n'
            'git "https://gem-git-block.test/r.git" do\nend\n',
            "gradle/wrapper/gradle-wrapper.properties": "#distributionUrl=https\\://wrap-comment"
            ".test/g.zip\ndistributionUrl=https\\://wrap.test/g.zip\n",
            "build.gradle": "// maven { url 'https://gradle-comment.test/m2' }\n"
            "repositories { maven { url 'https://gradle-repo.test/m2' } }\n"
            "/*\nrepositories { maven { url 'https://gradle-block-comment.test/m2' } }\n*/\n"
            'exclude "**/*.tmp"; repositories { maven { url "https://gradle-glob.test" } }\n',
            "settings.gradle.kts": '/* maven("https://kts-comment.test") */\n'
            'maven("https://kts-repo.test/m2")\n',
            ".yarnrc.yml": '# npmRegistryServer: "https://yarn-comment.test"\n'
            'npmRegistryServer: "https://yarn-registry.test"\n',
            "pom.xml": "<project><repositories>\n<!--\n<repository><url>https://pom-comment.test/"
            "</url></repository>\n-->\n<repository><url>https://pom-repo.test/m2</url>"
            "</repository>\n</repositories></project>\n",
        },
    )
    hosts = names(survey(tmp_path), Kind.HOST)
    assert {
        "req-direct.test",
        "cargo-git.test",
        "config-index.test",
        "lock-source.test",
        "gem-git.test",
        "gem-source-option.test",
        "gem-git-block.test",
        "wrap.test",
        "gradle-repo.test",
        "gradle-glob.test",
        "kts-repo.test",
        "yarn-registry.test",
        "pom-repo.test",
    } <= hosts
    assert not {host for host in hosts if "comment" in host or "inline" in host}
    assert "lock-description.test" not in hosts and "github-repo.test" not in hosts

"""Opening URLs from inside a real sandbox: ``sandbridge-open``, ``$BROWSER``, ``xdg-open``,
Python's webbrowser and Node's ``open`` package reach the host's browser command (the PATH
that leads there: tests/sandbox/test_sandbox_path.py)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import (
    BACKENDS,
    ECHO_APP,
    PYTHON,
    REPO,
    Process,
    echo,
    host_port_of,
    run_argv,
    start_daemon,
)

RECORDER = str(REPO / "tests" / "apps" / "record_browser.py")
# A Node package pinning ``open`` (its package-lock.json); ``./dev.sh setup`` runs ``npm ci``
# there.
NODE_OPEN = REPO / "tests" / "apps" / "node_open"
# How long the host's browser command may take to be run after the sandbox asked.
OPEN_WITHIN = 30.0


def _run(
    backend: str, workdir: Path, script: str, *options: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        run_argv(workdir, "sh", "-c", script, options=("--backend", backend, *options)),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env=env,
    )


def _with_app(port: int, commands: str) -> str:
    """``commands`` once the echo app listens on ``port`` inside (its READY line read);
    the app ends with the sandbox."""
    return (
        f"mkfifo /tmp/ready; {PYTHON} {ECHO_APP} --listen {port} > /tmp/ready & "
        f"read ready < /tmp/ready; {commands}"
    )


def test_webbrowser_xdg_open_and_browser_reach_the_host_browser_with_the_url_intact(
    backend: str, tmp_path: Path, xdg: Path
) -> None:
    out = tmp_path / "browser.jsonl"
    script = _with_app(
        4173,
        "python3 -m webbrowser -t 'http://localhost:4173/a/b?x=1#f' >/dev/null"
        " && xdg-open 'http://127.0.0.1:4173/c/d?y=2&z=%20#g' >/dev/null"
        " && \"$BROWSER\" 'http://[::1]:4173/e?w=3#h' >/dev/null"
        " && sensible-browser 'http://0.0.0.0:4173/' >/dev/null",
    )
    result = _run(
        backend,
        tmp_path,
        script,
        "--open",
        "browser",
        "--browser",
        f"{PYTHON} {RECORDER} {out}",
    )
    assert result.returncode == 0, result.stderr
    recorded = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recorded) == 4 and all(len(argv) == 1 for argv in recorded)
    # Each open starts its browser command and is answered: the commands run side by side
    # on the host, so they record in any order.
    urls = sorted(argv[0] for argv in recorded)
    [first] = [url for url in urls if url.endswith("/a/b?x=1#f")]
    origin = first.removesuffix("/a/b?x=1#f")
    assert origin.startswith("http://") and origin.endswith(".localhost:" + origin.split(":")[-1])
    assert urls == sorted(
        [origin + "/a/b?x=1#f", origin + "/c/d?y=2&z=%20#g", origin + "/e?w=3#h", origin + "/"]
    )
    # One registration, announced once, reused for every open.
    assert result.stderr.count("sandbridge: sandbox port 4173 -> ") == 1


def _node_with_open() -> str:
    """The ``node`` command, once it and the pinned ``open`` package are both there: a
    machine without them fails this test (``./dev.sh setup`` installs them), never skips it."""
    node = shutil.which("node")
    assert node is not None, "node is not on PATH: ./dev.sh setup installs nodejs and npm"
    package = NODE_OPEN / "node_modules" / "open" / "package.json"
    assert package.is_file(), f"{package} is missing: ./dev.sh setup runs npm ci in {NODE_OPEN}"
    assert json.loads(package.read_text())["version"].startswith("11."), package
    return node


def _recorded(out: Path, process: Process) -> list[list[str]]:
    """The browser command's recorded calls, once there is one (bounded polling of a file
    the host's browser command writes; the session failing ends the wait)."""
    deadline = time.monotonic() + OPEN_WITHIN
    while not (out.exists() and out.read_text().endswith("\n")):
        status = process.popen.poll()
        assert status is None, f"the session ended ({status}): {process.drain('stderr')}"
        assert time.monotonic() < deadline, f"no browser call in {OPEN_WITHIN} s"
        time.sleep(0.05)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_node_open_package_reaches_the_host_browser_with_the_url_intact(
    backend: str, tmp_path: Path, xdg: Path
) -> None:
    node = _node_with_open()
    # With an executable xdg-open of its own, ``open`` runs that script (detached), which
    # finds no desktop inside and runs $BROWSER: the path this test takes.
    assert os.access(NODE_OPEN / "node_modules" / "open" / "xdg-open", os.X_OK)
    out = tmp_path / "browser.jsonl"
    go = tmp_path / "go"
    os.mkfifo(go)
    # ``open`` resolves as soon as its launcher started: the sandbox stays until the host's
    # browser command has run, or the launcher would die with it.
    script = _with_app(
        4173,
        f"{node} {NODE_OPEN / 'open_url.mjs'} 'http://localhost:4173/n/o?p=1&q=%20#r' "
        f"&& read x < {go}",
    )
    process = Process(
        run_argv(
            tmp_path,
            "sh",
            "-c",
            script,
            options=(
                "--backend",
                backend,
                "--open",
                "browser",
                "--browser",
                f"{PYTHON} {RECORDER} {out}",
            ),
        )
    )
    try:
        recorded = _recorded(out, process)
    finally:
        if process.popen.poll() is None:
            go.write_text("done\n")
        status = process.popen.wait(60)
    assert status == 0, process.drain("stderr")
    assert len(recorded) == 1 and len(recorded[0]) == 1, recorded
    url = recorded[0][0]
    assert url.startswith("http://") and url.endswith("/n/o?p=1&q=%20#r"), url
    origin = url.removesuffix("/n/o?p=1&q=%20#r")
    assert origin.endswith(".localhost:" + origin.split(":")[-1]), url


def test_opened_url_serves_the_app_with_its_query(backend: str, tmp_path: Path, xdg: Path) -> None:
    go = tmp_path / "go"
    os.mkfifo(go)
    script = _with_app(4173, f"sandbridge-open 'http://localhost:4173/q/r?s=1#t'; read x < {go}")
    process = Process(
        run_argv(tmp_path, "sh", "-c", script, options=("--backend", backend, "--open", "print"))
    )
    try:
        url = process.wait_line("http://")
        process.wait_line(f"sandbridge: the sandbox opens {url}", "stderr")
        assert url.endswith("/q/r?s=1#t")
        report = echo(host_port_of(url), "/q/r?s=1")
        assert report["path"] == "/q/r?s=1"
        assert report["server_port"] == 4173
    finally:
        go.write_text("done\n")
        assert process.popen.wait(60) == 0


def test_nothing_listening_inside_is_a_clear_error(backend: str, tmp_path: Path, xdg: Path) -> None:
    result = _run(backend, tmp_path, "sandbridge-open http://localhost:4999/x", "--open", "print")
    assert result.returncode == 1
    assert (
        "sandbridge-open: nothing is listening on port 4999 inside the sandbox "
        "(connect to 127.0.0.1:4999 failed: [Errno 111] Connection refused; "
        "connect to [::1]:4999 failed: [Errno 111] Connection refused): "
        "start the app, then open http://localhost:4999/x"
    ) in result.stderr
    assert "sandbox port" not in result.stderr


@dataclass
class NoApp:
    """One session per backend, its browser command recorded, no app inside: an external
    URL asked, then an HTML page from stdin and a file past the snapshot limit. Each
    section of its output (``@NAME``) ends with the exit status of what it ran."""

    result: subprocess.CompletedProcess[str]
    sections: dict[str, list[str]]
    recorded: list[list[str]]
    big: Path


@pytest.fixture(scope="module", params=BACKENDS)
def no_app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> NoApp:
    top = tmp_path_factory.mktemp("no-app")
    xdg = top / "xdg"
    xdg.mkdir(mode=0o700)
    out = top / "browser.jsonl"
    big = top / "big.html"
    big.write_bytes(b"x" * (2 * 1024 * 1024 + 1))
    script = (
        "echo @external; xdg-open 'https://example.com/device?code=ABCD'; echo $?;"
        f"echo @html; echo '<p>hi</p>' | sandbridge-open --html -; sandbridge-open --html {big};"
        " echo $?"
    )
    result = _run(
        str(request.param),
        top,
        script,
        "--open",
        "browser",
        "--browser",
        f"{PYTHON} {RECORDER} {out}",
        env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)},
    )
    assert result.returncode == 0, result.stderr
    sections: dict[str, list[str]] = {}
    current = sections.setdefault("", [])
    for line in result.stdout.splitlines():
        if line in ("@external", "@html"):
            current = sections.setdefault(line[1:], [])
        else:
            current.append(line)
    assert not sections.pop(""), result.stdout
    recorded = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return NoApp(result, sections, recorded, big)


def test_external_url_from_inside_is_printed_for_the_owner_not_run(no_app: NoApp) -> None:
    assert no_app.sections["external"] == ["https://example.com/device?code=ABCD", "0"]
    assert (
        "sandbridge: WARNING: the sandbox asks to open an external URL; not opened "
        "(--open-external allow would): https://example.com/device?code=ABCD"
    ) in no_app.result.stderr
    # The browser command ran once in the session, for the page below: never for this.
    assert not [argv for argv in no_app.recorded if "example.com" in " ".join(argv)]


def test_html_from_stdin_is_opened_as_a_snapshot_and_a_large_file_is_refused(
    no_app: NoApp,
) -> None:
    url, status = no_app.sections["html"]
    assert status == "1"
    assert no_app.recorded == [[url]]
    assert (
        f"sandbridge-open: {no_app.big} is larger than 2097152 bytes, the snapshot limit: serve "
        "the page from an app instead and open its URL"
    ) in no_app.result.stderr


def test_a_file_url_inside_opens_the_app_its_redirect_names_or_a_snapshot_of_the_page(
    backend: str, tmp_path: Path, xdg: Path
) -> None:
    out = tmp_path / "browser.jsonl"
    # In the sandbox's own /tmp, which the host does not have: read inside or not at all.
    redirect = f"/tmp/jpserver-{os.getpid()}-open.html"
    report = f"/tmp/report-{os.getpid()}.html"
    refresh = '<meta http-equiv="refresh" content="1;url=http://localhost:4173/lab?token=t1">'
    script = _with_app(
        4173,
        f"printf %s {shlex.quote(refresh)} > {redirect}"
        f" && python3 -m webbrowser -t file://{redirect} >/dev/null"
        f" && echo '<p>report</p>' > {report} && xdg-open file://{report}",
    )
    result = _run(
        backend, tmp_path, script, "--open", "browser", "--browser", f"{PYTHON} {RECORDER} {out}"
    )
    assert result.returncode == 0, result.stderr
    assert not Path(redirect).exists() and not Path(report).exists()
    recorded = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recorded) == 2 and all(len(argv) == 1 for argv in recorded), recorded
    app_url, snapshot_url = recorded[0][0], recorded[1][0]
    assert app_url.endswith(f".localhost:{host_port_of(app_url)}/lab?token=t1"), app_url
    assert snapshot_url == result.stdout.strip()
    assert host_port_of(snapshot_url) != host_port_of(app_url)
    assert "sandbridge: sandbox port 4173 -> " in result.stderr


def test_open_setting_of_the_project_config_applies_and_the_flag_overrides_it(
    tmp_path: Path, xdg: Path
) -> None:
    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "config").write_text("net = none\nopen = browser\n")
    out = tmp_path / "browser.jsonl"
    browser = ("--browser", f"{PYTHON} {RECORDER} {out}")
    by_config = _run(
        "auto", tmp_path, _with_app(4173, "xdg-open http://localhost:4173/c"), *browser
    )
    assert by_config.returncode == 0, by_config.stderr
    by_flag = _run(
        "auto",
        tmp_path,
        _with_app(4173, "xdg-open http://localhost:4173/f"),
        *browser,
        "--open",
        "print",
    )
    assert by_flag.returncode == 0, by_flag.stderr
    recorded = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recorded) == 1 and recorded[0][0].endswith("/c")
    assert "sandbridge: the sandbox opens http://" in by_flag.stderr


def test_a_daemon_runs_no_browser_command_from_a_place_a_session_binds(
    tmp_path: Path, xdg: Path
) -> None:
    # The daemon passed over its sessions' workdirs on PATH but not their --bind sources:
    # a `the-browser` the sandbox put in a bound directory that is on the daemon's PATH
    # (an activated virtualenv's bin, say) ran on the host when the sandbox asked to open.
    tools, workdir, ran = tmp_path / "tools", tmp_path / "w", tmp_path / "ran"
    tools.mkdir()
    workdir.mkdir()
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    done = tools / "done"
    os.mkfifo(done)
    daemon = start_daemon(env=env)
    try:
        # The command waits until the host has said what it did with the open (the line
        # comes from the daemon, after the open's answer): a command that ended at once
        # could end the session before the line reached its terminal.
        script = (
            f"printf '#!/bin/sh\\ntouch {ran}\\n' > {tools}/the-browser && "
            f"chmod +x {tools}/the-browser && sandbridge-open https://example.test/x && "
            f"read go < {done}"
        )
        options = (
            "--backend", "bwrap", "--bind", str(tools), "--open", "browser",
            "--open-external", "allow", "--browser", "the-browser",
        )  # fmt: skip
        session = Process(run_argv(workdir, "sh", "-c", script, options=options), env=env)
        try:
            said = session.wait_line(
                "sandbridge: cannot run the browser command 'the-browser': not found on PATH "
                "outside the places the sandbox can write; open https://example.test/x",
                "stderr",
                timeout=60,
            )
            assert said
            done.write_text("go\n")
            assert session.popen.wait(60) == 0, session.drain()
        finally:
            session.stop()
        assert not ran.exists(), "the sandbox's browser command ran on the host"
    finally:
        daemon.stop()

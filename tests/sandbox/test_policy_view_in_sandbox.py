"""What a real sandbox (both backends) sees of the project's ``.sandbridge/``: at every
view (the workdir, a ``--ro-bind`` of a parent, the read-only host root) the policy files
that were regular files at the start, read-only, and nothing else: not the secrets file,
not a file or directory the owner creates there during the session (sandbox/spec.py,
``policy_dir``)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Process, run_argv, start_daemon

SECRET = "late-secret-7f31c2"
SHOWN_AT_START = "allow config env.example"


@pytest.fixture(autouse=True)
def _private_runtime_base(xdg: Path) -> Path:
    """Every session of these tests keeps its runtime dir in the test's own base."""
    return xdg


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A directory the read-only host root shows inside (``/tmp`` is private there)."""
    path = Path(tempfile.mkdtemp(prefix="sandbridge-test-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


def make_project(root: Path, policy: bool = True, git: bool = True) -> Path:
    root.mkdir(parents=True)
    if git:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("/.sandbridge/env\n")
    if policy:
        policy_dir = root / ".sandbridge"
        policy_dir.mkdir()
        (policy_dir / "config").write_text("# reviewed config\n")
        (policy_dir / "allow").write_text("# reviewed allow\n")
        (policy_dir / "env.example").write_text("API_TOKEN=\n")
        (policy_dir / "env").write_text("API_TOKEN=start-value\n")
        (policy_dir / "env").chmod(0o600)
    return root


def owner_writes_during_the_session(policy_dir: Path) -> None:
    """What the owner (``policy init``, an editor, by hand) may put there meanwhile."""
    policy_dir.mkdir(exist_ok=True)
    (policy_dir / "env").write_text(f"API_TOKEN={SECRET}\n")
    (policy_dir / "notes.txt").write_text(f"{SECRET}\n")
    (policy_dir / ".gitignore").write_text(f"# {SECRET}\n")  # a shown name, but new
    (policy_dir / "private").mkdir()
    (policy_dir / "private" / "key").write_text(f"{SECRET}\n")


def session_probing_after(
    backend: str, workdir: Path, go: Path, probe: str, *options: str
) -> Process:
    """Start a session whose command waits on the FIFO ``go`` and then runs ``probe``."""
    os.mkfifo(go)
    script = f"echo READY; read done < {go}; {probe} echo END"
    argv = run_argv(
        workdir, "sh", "-c", script, options=("--backend", backend, "--net", "none", *options)
    )
    process = Process(argv)
    try:
        process.wait_line("READY", timeout=60)
    except BaseException:
        process.stop()
        raise
    return process


def finish(process: Process, go: Path) -> list[str]:
    """Let the probe run; its output lines."""
    go.write_text("done\n")
    try:
        process.wait_line("END", timeout=60)
        assert process.popen.wait(60) == 0, process.drain("stderr")
    finally:
        if process.popen.poll() is None:
            process.stop()
    return process.lines["stdout"]


def listing(view: str) -> str:
    """Shell that prints ``LIST <view> <names...>`` and what reading each new file gives."""
    return (
        f'echo "LIST {view} $(ls -A {view} | tr "\\n" " ")"; '
        f"cat {view}/env {view}/notes.txt {view}/.gitignore {view}/private/key 2>/dev/null; "
        f'echo "CONFIG {view} $(cat {view}/config)"; '
    )


def test_files_the_owner_creates_during_the_session_are_seen_at_no_view(
    backend: str, tmp_path: Path
) -> None:
    outer = tmp_path / "outer"
    project = make_project(outer / "proj")
    views = [".sandbridge", "/tmp/view/proj/.sandbridge"]
    process = session_probing_after(
        backend,
        project,
        project / "go",
        "".join(listing(view) for view in views),
        "--ro-bind",
        f"{outer}:/tmp/view",
    )
    owner_writes_during_the_session(project / ".sandbridge")
    with (project / ".sandbridge" / "allow").open("a") as allow:
        allow.write("example.org  # egress approve --save\n")  # in place, as --save does
    lines = finish(process, project / "go")
    for view in views:
        assert f"LIST {view} {SHOWN_AT_START} " in lines, lines
        assert f"CONFIG {view} # reviewed config" in lines
    assert not [line for line in lines if SECRET in line or "start-value" in line]
    assert (project / ".sandbridge" / "private" / "key").read_text() == f"{SECRET}\n"


def test_a_policy_directory_the_owner_creates_above_a_nested_workdir_is_not_seen(
    backend: str, outside_tmp: Path
) -> None:
    # No .sandbridge at the start, and the workdir below the project root: the root's
    # .sandbridge shows through the read-only host root, not through a writable mount.
    project = make_project(outside_tmp / "proj", policy=False)
    (project / "sub").mkdir()
    view = str(project / ".sandbridge")
    process = session_probing_after(backend, project / "sub", project / "sub" / "go", listing(view))
    assert (project / ".sandbridge").is_dir()  # the placeholder the view lies on
    owner_writes_during_the_session(project / ".sandbridge")
    lines = finish(process, project / "sub" / "go")
    assert f"LIST {view} " in lines, lines  # empty
    assert not [line for line in lines if SECRET in line]
    assert (project / ".sandbridge" / "env").read_text() == f"API_TOKEN={SECRET}\n"


def test_the_sandbox_can_change_nothing_at_any_view(backend: str, tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    project = make_project(outer / "proj")
    writes = [
        "touch {v}/new",
        "mkdir {v}/dir",
        "echo 'net = full' > {v}/config",
        "echo evil.test >> {v}/allow",
        "rm -f {v}/config",
        "mv {v}/config {v}/config.old",
        "mv {v} {v}.old",
        "rmdir {v}",
        "umount {v}",
        "umount -l {v}",
        "mount -o remount,rw {v}",
    ]
    script = "".join(
        f"({write.format(v=view)}) 2>/dev/null && echo WRITTEN || echo refused\n"
        for view in (".sandbridge", "/tmp/view/proj/.sandbridge")
        for write in writes
    )
    result = subprocess.run(
        run_argv(
            project,
            "sh",
            "-c",
            script,
            options=("--backend", backend, "--net", "none", "--bind", f"{outer}:/tmp/view"),
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["refused"] * 2 * len(writes)
    assert sorted(os.listdir(project / ".sandbridge")) == ["allow", "config", "env", "env.example"]
    assert (project / ".sandbridge" / "config").read_text() == "# reviewed config\n"
    assert (project / ".sandbridge" / "allow").read_text() == "# reviewed allow\n"


def test_a_shown_file_that_is_a_link_or_a_fifo_at_the_start_is_not_followed(
    backend: str, tmp_path: Path
) -> None:
    # Not a git work tree: the host's git would block on the FIFO .gitignore when asked
    # whether it ignores the policy files, and be given up on only after its timeout.
    project = make_project(tmp_path / "proj", git=False)
    (tmp_path / "elsewhere").mkdir()
    elsewhere = tmp_path / "elsewhere" / "owners-file"
    elsewhere.write_text(f"{SECRET}\n")  # visible inside: a followed link would show it
    (project / ".sandbridge" / "env.example").unlink()
    (project / ".sandbridge" / "env.example").symlink_to(elsewhere)
    os.mkfifo(project / ".sandbridge" / ".gitignore")
    script = (
        'echo "LIST $(ls -A .sandbridge | tr "\\n" " ")"; '
        "cat .sandbridge/env.example 2>/dev/null; "
        "timeout 5 cat .sandbridge/.gitignore 2>/dev/null; echo END"
    )
    result = subprocess.run(
        run_argv(
            project,
            "sh",
            "-c",
            script,
            options=("--backend", backend, "--net", "none", "--ro-bind", str(elsewhere.parent)),
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "LIST allow config " in result.stdout.splitlines(), result.stdout
    assert SECRET not in result.stdout
    assert result.stdout.rstrip().endswith("END")


def test_a_policy_directory_the_owner_replaces_during_the_session_is_named_at_its_end(
    backend: str, tmp_path: Path
) -> None:
    # The kernel drops the view with the directory it lies on: what the owner makes there
    # afterwards is seen inside, which no mount can stop; the owner is told at the end.
    project = make_project(tmp_path / "proj")
    process = session_probing_after(
        backend, project, project / "go", "echo 'net = full' > .sandbridge/config;"
    )
    shutil.rmtree(project / ".sandbridge")
    (project / ".sandbridge").mkdir()
    finish(process, project / "go")
    stderr = "\n".join(process.lines["stderr"]) + process.drain("stderr")
    assert (
        f"sandbridge: WARNING: {project / '.sandbridge'} was removed or renamed during the "
        f"session: the sandbox's read-only view of it went with it"
    ) in stderr


def test_a_nested_projects_secrets_file_is_not_seen(backend: str, tmp_path: Path) -> None:
    """A workdir holding other projects (``~/code``): each one's ``.sandbridge/``, which
    the protected paths keep read-only, is an empty read-only view: its secrets file is
    that project's sandbox's alone."""
    workdir = tmp_path / "code"
    make_project(workdir / "other")
    result = subprocess.run(
        run_argv(
            workdir,
            "sh",
            "-c",
            "cat other/.sandbridge/env; echo; echo listing: $(ls -A other/.sandbridge); "
            "touch other/.sandbridge/x || echo WRITE no",
            options=("--backend", backend, "--net", "none", "--no-daemon"),
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "start-value" not in result.stdout
    assert "listing:\n" in result.stdout
    assert "WRITE no" in result.stdout
    assert (workdir / "other" / ".sandbridge" / "env").read_text() == "API_TOKEN=start-value\n"


def test_a_known_projects_secrets_file_is_not_seen_through_the_read_only_root(
    backend: str, outside_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project kept outside ``$HOME`` and ``/tmp`` (``/srv/b``) showed its secrets file
    to every other sandbox through the read-only host root. Once sandbridge has run it
    (places/known_projects.py), every sandbox sees an empty read-only view there."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    other = make_project(outside_tmp / "b")
    workdir = make_project(tmp_path / "a")
    probe = (
        f"cat {other}/.sandbridge/env; echo; echo listing: $(ls -A {other}/.sandbridge); "
        f"touch {other}/.sandbridge/x 2>/dev/null || echo WRITE no"
    )
    options = ("--backend", backend, "--net", "none", "--no-daemon")

    def probe_from_a() -> str:
        return subprocess.run(
            run_argv(workdir, "sh", "-c", probe, options=options),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout

    assert "start-value" in probe_from_a()  # not known yet: the residual risk, as documented
    subprocess.run(
        run_argv(other, "true", options=options), capture_output=True, timeout=60, check=True
    )
    seen = probe_from_a()
    assert "start-value" not in seen
    assert "listing:\n" in seen
    assert "WRITE no" in seen
    assert (other / ".sandbridge" / "env").read_text() == "API_TOKEN=start-value\n"
    # Its own project's policy files are still shown in b's own sandbox.
    own = subprocess.run(
        run_argv(other, "sh", "-c", "ls -A .sandbridge", options=options),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert own.split() == ["allow", "config", "env.example"]


def test_a_sandbox_cannot_move_a_known_project_out_from_under_its_view(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A known project inside the workdir (``~/code/deep/b``): its view is an empty
    read-only mount, but its parents are the sandbox's to rename. Moved, the project is
    no longer where the list says, and the next session showed its secrets file at the
    new place. Every directory between the workdir and a view is a mount point in the
    sandbox, which cannot be renamed (EBUSY)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    workdir = tmp_path / "code"
    other = make_project(workdir / "deep" / "b", git=False)
    options = ("--backend", backend, "--net", "none", "--no-daemon")
    subprocess.run(
        run_argv(other, "true", options=options), capture_output=True, timeout=60, check=True
    )
    moves = " ".join(
        f"mv {source} {source}-moved 2>/dev/null && echo MOVED {source};"
        for source in ("deep/b", "deep", "deep/b/.sandbridge")
    )
    first = subprocess.run(
        run_argv(workdir, "sh", "-c", f"{moves} echo DONE", options=options),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    places = " ".join(
        f"{parent}/.sandbridge/env" for parent in ("deep/b", "deep/b-moved", "deep-moved/b-moved")
    )
    second = subprocess.run(
        run_argv(workdir, "sh", "-c", f"cat {places} 2>/dev/null; echo END", options=options),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "END" in second.stdout
    assert "start-value" not in second.stdout
    assert "DONE" in first.stdout
    assert "MOVED" not in first.stdout
    assert (other / ".sandbridge" / "env").read_text() == "API_TOKEN=start-value\n"


def command_lines_of(top: int) -> dict[int, bytes]:
    """``/proc/PID/cmdline`` of ``top`` and of every process under it, by pid."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    session, grown = {top}, True
    while grown:
        found = {pid for pid, parent in parents.items() if parent in session} - session
        grown = bool(found)
        session |= found
    lines = {}
    for pid in session:
        try:
            lines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
    return lines


@pytest.mark.parametrize("served", ["standalone", "daemon"])
def test_the_remembered_projects_are_on_no_command_line_of_the_session(
    backend: str, served: str, outside_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every local user reads /proc/PID/cmdline. The list of the owner's projects (one
    view each, places/known_projects.py) reaches the backend on its set-up descriptor:
    no process of the session, the backend and the sandbox's first process included,
    names any of them."""
    from sandbridge.places import known_projects

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    projects = [make_project(outside_tmp / name, git=False) for name in ("b", "c", "d")]
    for root in projects:
        known_projects.remember(root)
    workdir = make_project(tmp_path / "a", git=False)
    go = workdir / "go"
    os.mkfifo(go)
    options = (
        "--backend",
        backend,
        "--net",
        "none",
        *(["--no-daemon"] if served == "standalone" else []),
    )
    daemon = start_daemon() if served == "daemon" else None
    process = Process(run_argv(workdir, "sh", "-c", "echo READY; read done < go", options=options))
    try:
        process.wait_line("READY", timeout=60)
        lines = command_lines_of(process.popen.pid)
        go.write_text("done\n")
        assert process.popen.wait(30) == 0
    finally:
        if process.popen.poll() is None:
            process.stop()
        if daemon is not None:
            daemon.stop()
    # The backend (bwrap's own first process, or the unshare init) and the entry were there.
    first = b"bwrap" if backend == "bwrap" else b"sandbridge.sandbox.unshare_init"
    assert any(first in line for line in lines.values()), lines
    assert any(b"sandbridge.sandbox.entry" in line for line in lines.values()), lines
    for pid, line in lines.items():
        for root in projects:
            assert os.fsencode(root) not in line, f"{root} on the command line of {pid}: {line!r}"


def started_with(
    backend: str, workdir: Path, command: str, remove: list[Path], when: str
) -> subprocess.CompletedProcess[str]:
    """A sandbox of ``workdir`` running ``command``, started as ``sandbridge run`` starts
    one (session/run.py), with the remembered projects ``remove`` removed ``when``:
    ``"before-setup"`` (after the list was read, before the backend's set-up is written)
    or ``"before-mount"`` (after it is written, before the backend mounts)."""
    from sandbridge.places import known_projects
    from sandbridge.sandbox.spec import SandboxSpec
    from sandbridge.session.options import SessionOptions
    from sandbridge.session.run import prepared_sandbox

    template = SandboxSpec(
        command=["sh", "-c", command],
        workdir=workdir,
        runtime_dir=Path("/nonexistent"),
        home=Path(os.environ["HOME"]),
        other_projects=tuple(known_projects.policy_dirs()),
    )

    def factory(runtime_dir: Path) -> SandboxSpec:
        if when == "before-setup":
            for path in remove:
                shutil.rmtree(path)
        return dataclasses.replace(template, runtime_dir=runtime_dir)

    with prepared_sandbox(factory, backend, SessionOptions(workdir)) as prepared:
        if when == "before-mount":
            for path in remove:
                shutil.rmtree(path)
        return subprocess.run(
            prepared.argv,
            pass_fds=prepared.pass_fds,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


def test_a_project_removed_after_the_list_was_read_is_skipped_and_the_session_starts(
    backend: str,
    outside_tmp: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A remembered project removed while another session starts (``rm -rf`` in a
    create/remove loop) failed that start with a mount error of the backend, 1 start in
    10. It is asked for again just before the backend's set-up is written, and one gone
    by then is left out, in one line; the others are still hidden."""
    from sandbridge.places import known_projects

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    kept, gone = (make_project(outside_tmp / name, git=False) for name in ("kept", "gone"))
    workdir = make_project(tmp_path / "code", git=False)
    nested = make_project(workdir / "deep" / "nested", git=False)
    for root in (kept, gone, nested):
        known_projects.remember(root)
    with caplog.at_level("INFO", logger="sandbridge"):
        result = started_with(
            backend,
            workdir,
            f"echo STARTED $(ls -A {kept}/.sandbridge | wc -l)",
            [gone, nested],
            "before-setup",
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["STARTED", "0"]
    skipped = [r.getMessage() for r in caplog.records if "known_projects.skipped" in r.getMessage()]
    assert sorted(skipped) == sorted(
        f"known_projects.skipped policy_dir={str(root / '.sandbridge')!r} "
        "why='gone since the list was read'"
        for root in (gone, nested)
    )


def test_the_unshare_init_skips_a_project_removed_before_its_mount(
    outside_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unshare backend's init makes the mounts itself: a remembered project gone
    after the set-up was written (through the read-only root, or inside the writable
    workdir, where its view's pins go too) is skipped by its mount, in one line."""
    from sandbridge.places import known_projects

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    kept, gone = (make_project(outside_tmp / name, git=False) for name in ("kept", "gone"))
    workdir = make_project(tmp_path / "code", git=False)
    nested = make_project(workdir / "deep" / "nested", git=False)
    for root in (kept, gone, nested):
        known_projects.remember(root)
    result = started_with(
        "unshare",
        workdir,
        f"echo STARTED $(ls -A {kept}/.sandbridge | wc -l)",
        [gone, workdir / "deep"],
        "before-mount",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["STARTED", "0"]
    lines = [line for line in result.stderr.splitlines() if "known_projects.skipped" in line]
    assert len(lines) == 2, result.stderr  # one per project: its view (its pins say nothing)
    assert not (workdir / "deep").exists()  # nothing was made again on the host

"""First process inside ``unshare``'s namespaces: build the sandbox's file system.

Runs as root of a fresh user namespace (no privilege on the host). The view it builds
matches the bwrap backend: the host read-only (recursively, with ``mount_setattr``),
private ``/tmp``, ``/run``, ``/dev`` and home, the working directory read-write, the
runtime dir at ``/run/ags-webview-relay``; then ``pivot_root`` into it, loopback up,
and the sandbox entry started as its child. This process stays the PID namespace's init,
as bwrap's does: it reaps every orphan (the entry reaps only its own children) and ends
with the entry's status, taking the namespace with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import signal
import stat
import sys
from pathlib import Path
from typing import Any

from sandbridge.event_line import event_line
from sandbridge.protocol.contract import MOUNT_POINT
from sandbridge.sandbox.net_init import loopback_up

_libc = ctypes.CDLL(None, use_errno=True)

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 0x2
PR_SET_DUMPABLE = 4
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
_SYSCALLS = {
    "x86_64": {"pivot_root": 155, "mount_setattr": 442},
    "aarch64": {"pivot_root": 41, "mount_setattr": 442},
}
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
PR_CAPBSET_DROP = 24


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def _syscall(name: str, *args: Any) -> int:
    number = _SYSCALLS.get(platform.machine(), _SYSCALLS["x86_64"])[name]
    return int(_libc.syscall(number, *args))


def make_readonly_recursive(path: str) -> None:
    """Make every mount under ``path`` read-only (kernel 5.12+ mount_setattr)."""

    class MountAttr(ctypes.Structure):
        _fields_ = [
            ("attr_set", ctypes.c_uint64),
            ("attr_clr", ctypes.c_uint64),
            ("propagation", ctypes.c_uint64),
            ("userns_fd", ctypes.c_uint64),
        ]

    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    result = _syscall(
        "mount_setattr",
        ctypes.c_int(AT_FDCWD),
        path.encode(),
        ctypes.c_uint(AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(result, f"mount_setattr {path}")


def bind(source: str, target: str, writable: bool = True) -> None:
    mount(source, target, None, MS_BIND | MS_REC)
    if not writable:
        make_readonly_recursive(target)


def _mkdirs(root: str, path: str) -> str:
    target = root + path
    os.makedirs(target, exist_ok=True)
    return target


def _mkfile(root: str, path: str) -> str:
    target = root + path
    os.makedirs(os.path.dirname(target), exist_ok=True)
    Path(target).touch()
    return target


def _bind_self(target: str, writable: bool) -> None:
    """Bind ``target`` onto itself (a mount point), read-only unless ``writable``.

    The decision protects no symlink (it protects the link's target instead); one found
    here now is refused rather than followed."""
    if os.path.islink(target):
        raise OSError(40, f"protected path became a symbolic link: {target}")
    bind(target, target, writable)


def _bind_file(source: str, target: str) -> None:
    Path(target).touch()
    mount(source, target, None, MS_BIND)


def _open_policy_files(directory: str | None, names: list[str]) -> dict[str, int]:
    """``O_PATH`` descriptors of the shown policy files that are regular files now, opened
    through no link (a link or a FIFO put there since the spec was made is left out)."""
    found: dict[str, int] = {}
    if directory is None:
        return found
    try:
        dir_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return found  # gone: the view stays empty
    try:
        for name in names:
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except OSError:
                continue
            if stat.S_ISREG(os.fstat(fd).st_mode):
                found[name] = fd
            else:
                os.close(fd)
    finally:
        os.close(dir_fd)
    return found


def _policy_view(target: str, shown: dict[str, int]) -> None:
    """An empty tmpfs over one view of ``.sandbridge``, the shown files bound in read-only,
    then the whole read-only: what the owner creates there later stays out of sight."""
    if os.path.islink(target):
        raise OSError(40, f"the policy directory became a symbolic link: {target}")
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for name, fd in shown.items():
        Path(target, name).touch(mode=0o644)
        bind(f"/proc/self/fd/{fd}", f"{target}/{name}", writable=False)
    make_readonly_recursive(target)


def _optional_pin(mount: dict[str, Any], fd: int | None, root: str) -> None:
    """A pin only another project's view needs: bound if its directory is still there,
    else skipped without a word (the project was removed while the session started, and
    its view's own line says so). Never made: a directory made here would be made in the
    host's writable bind."""
    target = root + mount["dest"]
    if fd is None or not os.path.isdir(target):
        return
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        bind(f"/proc/self/fd/{fd}", target, mount["writable"])


def _skipped(path: str) -> None:
    """One line for a place of a remembered project that is gone by its mount."""
    line = event_line("known_projects.skipped", {"path": path, "why": "gone before its mount"})
    print(f"sandbridge: {line}", file=sys.stderr, flush=True)


def _mount_home(target: str, kept: str | None) -> None:
    """The private home: an agent's kept home bound there (``kept``, its descriptor's
    path), else an empty tmpfs."""
    if kept is not None:
        bind(kept, target)
    else:
        mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")


def build_root(config: dict[str, Any]) -> str:
    """Assemble the sandbox's root under a private tmpfs; return its path."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    keep = _open_sources(config)

    def source(path: str) -> str:
        return f"/proc/self/fd/{keep[path]}"

    policy = config["policy"]
    shown = _open_policy_files(policy["dir"], policy["files"])

    scratch = "/tmp"
    mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    root = scratch + "/root"
    os.mkdir(root)
    bind("/", root)
    make_readonly_recursive(root)

    for path, mode in (("/tmp", "mode=1777"), ("/run", "mode=0755")):
        mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV, mode)
    _make_dev(root + "/dev")

    def cover(path: str) -> None:
        mount("tmpfs", _mkdirs(root, path), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")

    for path in config["private"]:
        cover(path)
    if config["private_home"]:
        home = config.get("home_source")
        _mount_home(_mkdirs(root, config["home"]), None if home is None else source(home))
    for path in config["tooling"]:
        bind(source(path), _mkdirs(root, path), writable=False)
    for extra in config["mounts"]:
        if extra.get("optional"):
            _optional_pin(extra, keep.get(extra["source"]), root)
            continue
        # A single file (an agent's ~/.claude.json) is bound onto a file made for it.
        made = _mkdirs if os.path.isdir(source(extra["source"])) else _mkfile
        bind(source(extra["source"]), made(root, extra["dest"]), writable=extra["writable"])
    for protected in config["read_only_paths"]:
        # Onto itself as the sandbox sees it now: no symlink is followed to the host.
        target = root + protected["dest"]
        _bind_self(target, writable=protected["writable"])
    for view in policy["other_views"]:  # another project's: nothing shown
        try:
            _policy_view(root + view, {})
        except (FileNotFoundError, NotADirectoryError):
            _skipped(view)  # removed while the session started: nothing left to hide
    for view in policy["views"]:
        _policy_view(root + view, shown)
    # Last, over every bind: sandbridge's own host paths that a bind brought into view.
    for path in config["masked"]:
        cover(path)
    bind(source(config["runtime_dir"]), _mkdirs(root, MOUNT_POINT))
    for fd in [*keep.values(), *shown.values()]:
        os.close(fd)
    return root


def _open_sources(config: dict[str, Any]) -> dict[str, int]:
    """``O_PATH`` descriptors of the host paths to bind, opened before anything is
    covered; an optional pin's that is gone is left out (:func:`_optional_pin`)."""
    keep = {
        path: os.open(path, os.O_PATH)
        for path in [config["runtime_dir"], *config["tooling"]]
        + [m["source"] for m in config["mounts"] if not m.get("optional")]
        + ([config["home_source"]] if config.get("home_source") else [])
    }
    for optional in (m["source"] for m in config["mounts"] if m.get("optional")):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            keep[optional] = os.open(optional, os.O_PATH)
    return keep


def _make_dev(dev: str) -> None:
    """A minimal ``/dev`` at ``dev``: the usual devices, a private ``pts`` and ``shm``."""
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755")
    for name in DEVICES:
        _bind_file(f"/dev/{name}", f"{dev}/{name}")
    os.mkdir(dev + "/pts")
    mount("devpts", dev + "/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666")
    os.symlink("pts/ptmx", dev + "/ptmx")
    os.mkdir(dev + "/shm")
    mount("tmpfs", dev + "/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{dev}/{name}")


def enter(root: str) -> None:
    """pivot_root into ``root``, detach the old root and mount this namespace's /proc."""
    os.chdir(root)
    _check(_syscall("pivot_root", b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount old root")
    os.chdir("/")
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def drop_capabilities() -> None:
    """Empty the bounding set, so the entry and the command (uid 0 here) exec with no
    capability, as bwrap runs them: nothing inside can undo a mount (the read-only
    ``.sandbridge``) or otherwise use the user namespace's root powers."""
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")


def read_config(argv: list[str]) -> dict[str, Any]:
    """The configuration: on the descriptor ``--fd N`` names (a memfd the host wrote,
    closed once read), or inline (``--dry-run`` shows it so)."""
    if argv[:1] != ["--fd"]:
        inline: dict[str, Any] = json.loads(argv[0])
        return inline
    fd = int(argv[1])
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    config: dict[str, Any] = json.loads(b"".join(chunks))
    return config


def main() -> None:
    config = read_config(sys.argv[1:])
    try:
        root = build_root(config)
        enter(root)
        if config.get("loopback", True):
            loopback_up()
        drop_capabilities()
    except OSError as exc:
        print(f"sandbridge: cannot build the sandbox (unshare backend): {exc}", file=sys.stderr)
        sys.exit(126)
    # SIGINT (the terminal's, to the whole process group) must not end this process, nor
    # be ignored by the entry: blocked until each has its own disposition.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    entry = os.fork()
    if entry == 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        if config["new_session"]:
            os.setsid()
        os.chdir(config["workdir"])
        os.execve(config["argv"][0], config["argv"], config["env"])
    stay_init(entry)


def stay_init(entry: int) -> None:
    """Be the PID namespace's init: reap every process that ends here, pass SIGTERM on
    to the entry, and exit with the entry's status once it ends.

    Orphans (a daemon's double fork, ``(cmd &)``) are this process's children: unreaped,
    each stayed a zombie until the session ended, counted against the owner's process
    limit. Non-dumpable, like the entry: the command cannot take anything from here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):  # ended; reaped just below
            os.kill(entry, signum)

    signal.signal(signal.SIGTERM, forward)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == entry:
            code = os.waitstatus_to_exitcode(status)
            sys.stdout.flush()
            os._exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()

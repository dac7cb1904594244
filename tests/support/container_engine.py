"""A real container engine for the tests: podman's Docker-compatible API on a Unix socket.

The fixture :func:`container_engine` starts ``podman system service`` with a store of its
own and yields a :class:`ContainerEngine`: the API socket, a small image already loaded
(:data:`IMAGE`, built offline from Debian's busybox-static: this machine pulls from no
registry) and :meth:`ContainerEngine.run` for the podman CLI on the same store.

Root podman, in namespaces of its own (``unshare``: mount, PID, network), rather than
rootless podman: no subordinate id ranges to set up, a start in about half a second, and
the isolation is proved by construction rather than by configuration alone. Inside its
mount namespace the machine's root file system is read-only, so a write that a default
path would send outside the engine's directory (the blob cache under
``/var/lib/containers``, ``/var/tmp``, the CNI state) fails loudly instead of touching the
machine; ``/run``, ``/var/lib`` and ``/dev/shm`` (libpod's lock segment) are private and
empty, the engine's directory is at :data:`INSIDE`, ``/etc/containers`` is the engine's
own configuration, and ``/sys/fs/cgroup`` is read-only (containers run with cgroups
disabled). Killing the namespace's first process ends every process of the engine,
containers included. Containers use podman's bridge network (CNI on Debian 12) inside
the engine's own network namespace: they reach each other and nothing outside, and a port
they publish is not reachable from the test.

A machine where the engine cannot start fails the tests that use it, with podman's own
words: never a skip.
"""

from __future__ import annotations

import os
import resource
import select
import shutil
import signal
import socket
import struct
import subprocess
import tarfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

# The image every engine holds, made from the machine's static busybox.
IMAGE = "localhost/sbtest/busybox:1"
# The Debian packages the engine needs (dev.sh's TEST_PACKAGES), named when one is missing.
PACKAGES = "podman crun catatonit busybox-static"
TOOLS = ("podman", "crun", "conmon", "catatonit", "setpriv", "unshare", "nsenter", "findmnt")
# A first start (the image imported, the service up) takes about half a second on an idle
# machine; a machine running the whole suite on both cores may take many times that.
START_TIMEOUT = 60.0
# One CLI call (create, start, rm of a busybox container) takes well under a second.
RUN_TIMEOUT = 60.0

# Where the engine's directory is seen in its mount namespace, and so the paths podman
# works with: a test's directory is long, and under it podman's own paths pass the 108
# bytes a socket's path may have (each attached ``podman run`` then waits 20 s for a
# conmon timeout). /run is the namespace's own, empty tmpfs.
INSIDE = "/run/engine"

# Run inside the engine's namespaces under catatonit, their first process, which reaps the
# conmon processes containers leave orphaned (podman's service reaps none).
# It makes the machine's state unreachable, imports the image, then becomes the API service
# on the socket the test process already listens on (systemd's socket activation: the
# socket accepts from the start, so the first request is the readiness check, no polling).
_NAMESPACE_SCRIPT = r"""
set -eu
work=$1 image=$2
shift 2
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir /run/engine
mount --bind "$work" /run/engine
mount --bind /run/engine/etc /etc/containers
mount -t tmpfs -o mode=0755 tmpfs /var/lib
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# A hybrid cgroup tree (v1 controllers beside a v2 one holding controllers) is refused by
# crun even with cgroups disabled: hide the v2 part, the engine uses neither.
if [ "$(stat -fc %T /sys/fs/cgroup)" = tmpfs ] && mountpoint -q /sys/fs/cgroup/unified; then
  mount -t tmpfs -o ro tmpfs /sys/fs/cgroup/unified
fi
for place in $(findmnt -rn -o TARGET -R /sys/fs/cgroup); do
  mount -o remount,bind,ro "$place"
done
# The directories the tests' containers may write to (binds of a test's own directory):
# each its own mount, so it stays writable when the root becomes read-only.
for place in "$@"; do
  mount --bind "$place" "$place"
done
mount -o remount,bind,ro /
podman import -q --change 'CMD ["sh"]' /run/engine/image.tar "$image" >/dev/null
# Socket activation's first descriptor is 3: the listener, given as standard input, moves.
exec 3<&0 0</dev/null
export LISTEN_PID=$$ LISTEN_FDS=1
exec podman system service --time=0
"""

_CONTAINERS_CONF = """\
[containers]
# No cgroup of the machine's is created or written (the tree is read-only in here).
cgroups = "disabled"
log_driver = "k8s-file"
# The engine runs without CAP_SYS_RESOURCE on some machines: podman's default limits
# (above the caller's hard limits) would fail every start, so the caller's are used.
default_ulimits = [{ulimits}]
# The CLI's containers have no network unless asked; the API's default to the bridge.
netns = "none"

[network]
network_config_dir = "/run/engine/networks"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "/run/engine/events.log"
image_copy_tmp_dir = "/run/engine/tmp"
runtime = "crun"
static_dir = "/run/engine/storage/libpod"
tmp_dir = "/run/libpod"
volume_path = "/run/engine/volumes"
"""

_STORAGE_CONF = """\
[storage]
driver = "vfs"
graphroot = "/run/engine/storage"
runroot = "/run/engine/run"
"""

# Nothing is pulled: an image that is not in the store is an error, not a download.
_REGISTRIES_CONF = "unqualified-search-registries = []\n"
# Only ``podman import`` reads it, for a local tarball.
_POLICY_JSON = '{"default": [{"type": "insecureAcceptAnything"}]}\n'


@dataclass(frozen=True)
class ContainerEngine:
    """One running engine: its API socket, its image and its CLI."""

    socket: Path
    image: str
    directory: Path
    init_pid: int
    environment: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``podman ARGS`` on this engine's store, in its namespaces (never checked:
        the caller asserts on the return code and the output)."""
        argv = ["nsenter", f"--target={self.init_pid}", "--mount", "--net", "--pid", "--"]
        return subprocess.run(
            [*argv, "podman", *args],
            env=self.environment,
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )


def _missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def _is_static_executable(path: Path) -> bool:
    """Whether the ELF file at ``path`` has no program interpreter (runs in an empty
    image): a dynamic busybox would fail in the container with a bare "not found"."""
    with path.open("rb") as elf:
        ident = elf.read(64)
        if ident[:4] != b"\x7fELF" or ident[4] != 2:  # 64-bit only, as Debian's amd64/arm64
            return False
        order = "<" if ident[5] == 1 else ">"
        (phoff,) = struct.unpack_from(order + "Q", ident, 32)
        phentsize, phnum = struct.unpack_from(order + "HH", ident, 54)
        elf.seek(phoff)
        table = elf.read(phentsize * phnum)
    pt_interp = 3
    return all(
        struct.unpack_from(order + "I", table, index * phentsize)[0] != pt_interp
        for index in range(phnum)
    )


def _write_image(busybox: Path, target: Path) -> None:
    """A root file system of busybox and a link per applet, as ``podman import`` takes it."""
    listed = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=True, timeout=RUN_TIMEOUT
    )
    with tarfile.open(target, "w") as tar:
        for name, mode in (("bin", 0o755), ("etc", 0o755), ("tmp", 0o1777)):
            entry = tarfile.TarInfo(name)
            entry.type, entry.mode = tarfile.DIRTYPE, mode
            tar.addfile(entry)
        tar.add(busybox, "bin/busybox")
        for applet in listed.stdout.split():
            if applet != "busybox":
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)


def _ulimits() -> str:
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)
    return ", ".join(
        f'"{name}={soft}:{hard}"'  # RLIM_INFINITY is -1, as podman writes "unlimited"
        for name, (soft, hard) in (("nofile", nofile), ("nproc", nproc))
    )


def _prepare(work: Path) -> dict[str, str]:
    """The engine's directory and configuration; the environment podman runs with (the
    caller's own, such as ``CONTAINER_HOST`` or ``DOCKER_HOST``, is not passed on)."""
    for name in ("etc", "tmp", "home", "networks", "volumes", "storage", "run"):
        (work / name).mkdir(mode=0o700)
    etc = work / "etc"
    (etc / "containers.conf").write_text(_CONTAINERS_CONF.format(ulimits=_ulimits()))
    (etc / "storage.conf").write_text(_STORAGE_CONF)
    (etc / "registries.conf").write_text(_REGISTRIES_CONF)
    (etc / "policy.json").write_text(_POLICY_JSON)
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "LANG": "C.UTF-8",
        "HOME": f"{INSIDE}/home",
        "XDG_CONFIG_HOME": f"{INSIDE}/home/.config",
        "XDG_DATA_HOME": f"{INSIDE}/home/.local/share",
        "XDG_RUNTIME_DIR": f"{INSIDE}/run",
        "TMPDIR": f"{INSIDE}/tmp",
        "CONTAINERS_CONF": f"{INSIDE}/etc/containers.conf",
        "CONTAINERS_STORAGE_CONF": f"{INSIDE}/etc/storage.conf",
        "CONTAINERS_REGISTRIES_CONF": f"{INSIDE}/etc/registries.conf",
    }


def _refusal(why: str, log: Path) -> str:
    said = log.read_text(errors="replace").strip() if log.exists() else ""
    return f"the test container engine did not start: {why}\npodman said:\n{said or '(nothing)'}"


def _await_ping(path: Path, engine: subprocess.Popen[bytes], log: Path) -> None:
    """Return once the engine answers ``GET /_ping`` with 200; fail with podman's output
    if it exits or takes longer than :data:`START_TIMEOUT`."""
    deadline = time.monotonic() + START_TIMEOUT
    exited = os.pidfd_open(engine.pid)
    answer = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))
            client.sendall(b"GET /_ping HTTP/1.1\r\nHost: engine\r\nConnection: close\r\n\r\n")
            while True:
                left = deadline - time.monotonic()
                ready, _, _ = select.select([client.fileno(), exited], [], [], max(left, 0))
                if not ready:
                    why = f"no answer in {START_TIMEOUT:.0f} s"
                    pytest.fail(_refusal(why, log), pytrace=False)
                if client.fileno() not in ready:
                    break
                try:
                    piece = client.recv(65536)
                except ConnectionResetError:  # the engine exited: its listener went with it
                    piece = b""
                if not piece:
                    break
                answer += piece
    finally:
        os.close(exited)
    if answer.startswith(b"HTTP/1.1 200"):
        return
    if not answer:
        status = engine.wait(timeout=START_TIMEOUT)
        pytest.fail(_refusal(f"exit status {status}", log), pytrace=False)
    pytest.fail(_refusal(f"/_ping answered {answer[:200]!r}", log), pytrace=False)


def _first_child(pid: int) -> int:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    if not children:
        raise AssertionError(f"unshare (pid {pid}) has no child once the engine answered")
    return int(children[0])


@contextmanager
def started_engine(work: Path, writable: Sequence[Path] = ()) -> Iterator[ContainerEngine]:
    """Start an engine whose every file lives under ``work`` (made if missing, else
    empty); stop it, every container with it, when the block ends. ``writable``
    directories of the machine stay writable to it (and so to a container binding them);
    everything else but ``work`` is read-only."""
    missing = _missing_tools()
    if missing:
        pytest.fail(
            f"the test container engine needs {', '.join(missing)}: "
            f"run ./dev.sh setup (Debian packages {PACKAGES})",
            pytrace=False,
        )
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    if not busybox.exists() or not _is_static_executable(busybox):
        pytest.fail(f"{busybox} is not a static busybox: install busybox-static", pytrace=False)
    work.mkdir(mode=0o700, exist_ok=True)
    environment = _prepare(work)
    _write_image(busybox, work / "image.tar")
    path = work / "engine.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(socket.SOMAXCONN)
    log = work / "engine.log"
    # setpriv ties unshare to this process, --kill-child the namespace to unshare: a test
    # run that is killed leaves no engine behind.
    argv = ["setpriv", "--pdeathsig", "KILL", "--", "unshare", "--mount", "--pid", "--net"]
    argv += ["--fork", "--kill-child", "--mount-proc"]
    with log.open("wb") as output:
        engine = subprocess.Popen(
            [*argv, "catatonit", "--", "sh", "-c", _NAMESPACE_SCRIPT, "sh", str(work), IMAGE]
            + [str(place) for place in writable],
            stdin=listener.fileno(),
            stdout=output,
            stderr=output,
            env=environment,
            cwd=work,
        )
    listener.close()
    init_pid = 0
    try:
        _await_ping(path, engine, log)
        init_pid = _first_child(engine.pid)
        yield ContainerEngine(path, IMAGE, work, init_pid, environment)
    finally:
        # The namespace's first process gone, the kernel kills every other one in it;
        # unshare reaps it after they are all gone.
        if engine.poll() is None:
            os.kill(init_pid or engine.pid, signal.SIGKILL)
            engine.wait(timeout=RUN_TIMEOUT)
        shutil.rmtree(work / "storage", ignore_errors=True)


@pytest.fixture(scope="session")
def container_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerEngine]:
    """One engine per test process (each pytest-xdist worker starts its own). The run's
    temporary root stays writable to it: a container may bind a test's ``tmp_path``.
    Containers a test makes stay until it removes them: filter by a label of its own."""
    writable = [tmp_path_factory.getbasetemp()]
    with started_engine(tmp_path_factory.mktemp("engine"), writable) as engine:
        yield engine

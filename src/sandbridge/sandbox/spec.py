"""What a sandbox looks like, independent of the backend that builds it."""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sandbridge.exceptions import SandboxError
from sandbridge.path_within import is_within
from sandbridge.protocol.contract import (
    DEFAULT_RELAY_SOCKET,
    DEFAULT_UPSTREAM_SOCKET,
    IN_SANDBOX_ENV,
    MOUNT_POINT,
    RELAY_SOCKET_ENV,
    UPSTREAM_SOCKET,
    UPSTREAM_SOCKET_ENV,
)
from sandbridge.sandbox import host_paths
from sandbridge.sandbox.commands import COMMANDS_DIR, OPEN_COMMAND
from sandbridge.sandbox.host_paths import Guard, Layer
from sandbridge.sandbox.mounts import Mount
from sandbridge.sandbox.network import SandboxNetwork
from sandbridge.sandbox.project import POLICY_DIR

# Host variables a command needs to behave normally; anything else (tokens, keys,
# the host's socket paths) stays outside unless named with --env.
PASSED_ENV = ("PATH", "TERM", "LANG", "LANGUAGE", "TZ", "COLORTERM", "NO_COLOR")
PASSED_ENV_PREFIXES = ("LC_",)


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a backend needs to start one sandbox."""

    command: list[str]
    workdir: Path
    runtime_dir: Path
    home: Path
    mounts: list[Mount] = field(default_factory=list)
    # The owner's real state paths of an agent (``--agent-home host``, agents/state.py),
    # bound writable after the mounts, each at its place in the home.
    agent_state: tuple[Mount, ...] = ()
    # An agent's kept or lockdown home (agents/state.py): bound read-write at ``home`` in
    # place of the private tmpfs, so that everything the agent keeps there (a file it
    # replaces by rename, ``~/.claude.json``, included: a file bound on its own is a mount
    # point, which rename(2) refuses with EBUSY) is there at its next session. ``None``:
    # the private, empty tmpfs.
    home_source: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    new_session: bool = False
    network: SandboxNetwork = field(default_factory=SandboxNetwork)
    # The inherited descriptor of the host's private terminal channel (docs/terminals.md).
    terminal_fd: int | None = None
    # An inherited pipe the entry reads one byte from before it starts the command: the
    # host starts the sandbox while its host half is still being served (a thin client's
    # run, docs/daemon.md) and lets the command start once it is. ``None``: at once.
    start_fd: int | None = None
    # An inherited socket on which the entry sends the host its network namespace before
    # the command starts: the host then makes app connections no sandbox process holds
    # (relay/host/owned_upstream.py). ``None``: the shim hands them over.
    namespace_fd: int | None = None
    # An inherited descriptor (a memfd, :func:`setup_file`) the backend reads the whole
    # set-up from, its mounts and the environment: every local user can read
    # /proc/PID/cmdline, of the backend and of the sandbox's first process, and neither the
    # environment's values nor the paths (the workdir, the binds, every other project the
    # owner runs) are theirs to read. ``None`` (``--dry-run``): all of it is inline.
    setup_fd: int | None = None
    # What keeps sandbridge's own host paths out of sight (sandbox/host_paths.py); computed
    # from the fields above when not given, refusing a layout no mask can make safe.
    guard: Guard = None  # type: ignore[assignment]
    # Paths inside the writable mounts that the owner's tools run or obey, mounted onto
    # themselves after the workdir, the binds and their pins: read-only, or (writable)
    # pinned as a mount point so they cannot be renamed away (sandbox/protected_paths.py).
    read_only_paths: list[Mount] = field(default_factory=list)
    # The project's policy directory (``<root>/.sandbridge``; ``None``: there is none to
    # show, not even an empty placeholder) and the policy files in it that the sandbox may
    # read, by name: those of :data:`~sandbridge.sandbox.project.SHOWN_POLICY_FILES` that
    # were regular files at the start. Every view of the directory inside is an empty
    # read-only tmpfs holding those files alone, each bound read-only
    # (:meth:`policy_views`): the secrets file, and any file or directory the owner
    # creates there during the session, stay out of sight.
    policy_dir: Path | None = None
    policy_files: tuple[str, ...] = ()
    # The policy directories of the other projects this user runs with sandbridge
    # (places/known_projects.py): an empty read-only view over each place inside that
    # shows one, so that no other project's secrets file is seen, through the read-only
    # root either.
    other_projects: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if self.guard is None:
            # Home is a private tmpfs, or the workdir itself (a layer): never seen
            # through the root.
            object.__setattr__(self, "guard", host_paths.plan(self.layers(), self.home))

    def layers(self) -> list[Layer]:
        """The host directories the sandbox sees over the read-only root, in bind order:
        its tooling, workdir and extra mounts."""
        return list(self._layers)

    @functools.cached_property
    def _layers(self) -> tuple[Layer, ...]:
        """:meth:`layers`, worked out once per spec: :meth:`views` asks for them once per
        remembered project (each time the tooling's paths were sorted out anew), so a
        run's start grew with the projects its owner ever ran."""
        return (
            *(
                Layer(Mount(path, path, writable=False), "the Python tooling")
                for path in self.tooling_paths()
            ),
            Layer(Mount(self.workdir, self.workdir, writable=True), "workdir"),
            *(Layer(mount, "--bind" if mount.writable else "--ro-bind") for mount in self.mounts),
            *(Layer(mount, "--agent-home host") for mount in self.agent_state),
        )

    def bind_sequence(self) -> list[Mount]:
        """The workdir and the extra mounts in bind order, each followed by its pins:
        those of sandbridge's own host paths (:class:`~sandbridge.sandbox.host_paths.Guard`)
        and those of the policy views (:meth:`view_pins`)."""
        binds = [Mount(self.workdir, self.workdir, writable=True), *self.mounts, *self.agent_state]
        pins = self.guard.pins[-len(binds) :] if self.guard.pins else [()] * len(binds)
        views = self.view_pins(binds)
        return [
            mount
            for index, (bind, after) in enumerate(zip(binds, pins, strict=True))
            for mount in (bind, *after, *(pin for pin in views[index] if pin not in after))
        ]

    def view_pins(self, binds: list[Mount], views: set[Path] | None = None) -> list[list[Mount]]:
        """For each of ``binds``, the directories inside it, between its top and a policy
        view (``views``, default: :meth:`policy_views` and :meth:`other_policy_views`)
        whose files it holds, bound onto themselves: shallowest first, each one a mount
        point.

        Threat: a view is a mount point the sandbox cannot rename, but in a writable
        bind its parents were the sandbox's to rename (``mv deep deep-moved``). Moved,
        a project is no longer where places/known_projects.py remembers it, and the
        next session showed its secrets file at the new place. Defence: a directory
        that is a mount point in the sandbox's mount namespace cannot be renamed
        (EBUSY), so every one between the bind's top and the view is made one."""
        pins: list[list[Mount]] = [[] for _ in binds]
        if views is None:
            views = {*self.policy_views(), *self.other_policy_views()}
        for view in views:
            # The bind that holds the view's files: the last (in bind order) that holds it.
            holding = [i for i, bind in enumerate(binds) if is_within(view, bind.dest)]
            if not holding or not binds[holding[-1]].writable:
                continue
            bind = binds[holding[-1]]
            for between in reversed(view.parents):
                if between != bind.dest and is_within(between, bind.dest):
                    pin = Mount(bind.source / between.relative_to(bind.dest), between, True)
                    if pin not in pins[holding[-1]]:
                        pins[holding[-1]].append(pin)
        for each in pins:
            each.sort(key=lambda mount: len(mount.dest.parts))
        return pins

    def optional_pins(self) -> set[Mount]:
        """The pins of :meth:`bind_sequence` that only the other projects' views need: a
        project removed by the time the unshare backend's init mounts takes them with
        it, and the init skips them then, as it skips the view (bwrap cannot: a bind
        whose source is gone would make its destination's directories again on the
        host, in the writable bind)."""
        binds = [Mount(self.workdir, self.workdir, writable=True), *self.mounts]
        needed = {pin for pins in self.guard.pins for pin in pins}
        needed |= {pin for pins in self.view_pins(binds, set(self.policy_views())) for pin in pins}
        other = self.view_pins(binds, set(self.other_policy_views()))
        return {pin for pins in other for pin in pins} - needed

    def views(self, path: Path) -> list[Path]:
        """Where the host's ``path`` is visible inside: at its own path through the
        read-only root (unless a private tmpfs covers it there), and under each layer
        (tooling, workdir, bind) that holds it."""
        covered = [Path("/tmp"), Path("/run"), *self.guard.private]
        if self.home != self.workdir:
            covered.append(self.home)
        targets: set[Path] = set()
        if not any(is_within(path, top) for top in covered):
            targets.add(path)
        for layer in self._layers:
            source = layer.mount.source
            if is_within(path, source):
                targets.add(layer.mount.dest.joinpath(*path.parts[len(source.parts) :]))
        return sorted(targets)

    def policy_views(self) -> list[Path]:
        """Every place inside that shows :attr:`policy_dir`; the backends mount the
        policy's own view at each, after the protected paths."""
        return [] if self.policy_dir is None else self.views(self.policy_dir)

    def other_policy_views(self) -> list[Path]:
        """Other projects' ``.sandbridge`` directories that the protected paths keep
        read-only (a workdir holding several projects), and wherever those of
        :attr:`other_projects` show inside: the backends lay an empty read-only view over
        each, like :meth:`policy_views` with no file shown, so that no project's secrets
        file is seen in another project's sandbox."""
        return list(self._other_policy_views)

    @functools.cached_property
    def _other_policy_views(self) -> tuple[Path, ...]:
        """:meth:`other_policy_views`, worked out once per spec: the pins and the backends
        ask for them several times while a run is built, and each time asked the file
        system and every layer for each remembered project. A spec changed
        (``dataclasses.replace``) is a new one."""
        own = set(self.policy_views())
        views = [
            mount.dest
            for mount in self.read_only_paths
            if mount.dest.name == POLICY_DIR.name
            and mount.dest not in own
            and mount.source.is_dir()
            and not mount.source.is_symlink()
        ]
        # Inside, each place lies on the workdir, a bind or the root: never over one of
        # them (a view must not hide the workdir or a bind that lies within it).
        places = [self.workdir, *(mount.dest for mount in self.mounts)]
        for directory in self.other_projects:
            if directory == self.policy_dir:
                continue
            for view in self.views(directory):
                if view not in own and not any(is_within(p, view) for p in places):
                    views.append(view)
        # One over another could not be made (the outer one hides where the inner lies):
        # the outermost alone, each found by its parents (linear in the views, where a
        # comparison of every pair grew with the square of the remembered projects).
        unique = set(views)
        return tuple(sorted(v for v in unique if unique.isdisjoint(v.parents)))

    @property
    def entry_argv(self) -> list[str]:
        """The sandbox's first process: shim plus the user's command."""
        terminal = [] if self.terminal_fd is None else ["--terminal-fd", str(self.terminal_fd)]
        start = [] if self.start_fd is None else ["--start-fd", str(self.start_fd)]
        if self.namespace_fd is not None:
            start += ["--namespace-fd", str(self.namespace_fd)]
        return [
            sys.executable,
            *entry_interpreter_options(),
            "--upstream-socket",
            f"{MOUNT_POINT}/{UPSTREAM_SOCKET}",
            *self.network.entry_options(),
            *terminal,
            *start,
            "--",
            *self.command,
        ]

    def tooling_paths(self) -> list[Path]:
        """Host paths the sandbox's Python needs that a private tmpfs would hide.

        The Python installation and the sandbridge package may live under home, ``/tmp``
        or ``/run`` (a virtualenv in a checkout there, pyenv under home): those are bound
        back read-only, after the tmpfs that covers them.
        """
        candidates = _installation()
        covered = [Path("/tmp"), Path("/run")]
        if self.home != self.workdir:
            covered.append(self.home)
        return sorted(
            path
            for path in candidates
            if any(is_within(path, top) and path != top for top in covered)
        )


def installation() -> frozenset[Path]:
    """Where this process's Python and sandbridge live: code the host runs."""
    return _installation()


@functools.cache
def _installation() -> frozenset[Path]:
    """Where this process's Python and sandbridge live (asked of the file system once:
    a spec's layers are asked for many times while a run is built)."""
    import sandbridge

    return frozenset(
        {
            Path(sys.prefix),
            Path(sys.base_prefix),
            Path(sys.executable).resolve().parent.parent,
            Path(sandbridge.__file__).resolve().parent.parent,
        }
    )


def entry_interpreter_options() -> list[str]:
    """How the sandbox entry's Python starts: isolated (``-I``: neither the working
    directory, which the sandbox writes, nor its ``PYTHON*`` variables decide what the
    entry imports) and without ``site`` (``-S``: the ``.pth`` files and the user's site
    cost the command's start more than the entry's own imports), its path given instead:
    this sandbridge's directory, then the host's site directories, where its
    dependencies are (after the standard library's, which no package shadows)."""
    return list(_entry_interpreter_options())


@functools.cache
def _entry_interpreter_options() -> tuple[str, ...]:
    """:func:`entry_interpreter_options`, asked of the file system once per process (the
    daemon's run builder asks before it forks: each child would ask again)."""
    import sandbridge

    package = str(Path(sandbridge.__file__).resolve().parent.parent)
    sites = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    paths = list(dict.fromkeys([package, *sites]))
    boot = f"import sys; sys.path += {paths!r}; from sandbridge.sandbox.entry import run; run()"
    return ("-I", "-S", "-c", boot)


def setup_file(payload: bytes) -> int:
    """A memfd holding ``payload``, read from its start, for :attr:`SandboxSpec.setup_fd`
    (close-on-exec here; ``pass_fds`` hands it to the backend alone)."""
    fd = os.memfd_create("sandbridge-setup", os.MFD_CLOEXEC)
    try:
        os.write(fd, payload)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def sandbox_env(
    spec_home: Path, extra: dict[str, str], host_env: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment inside: a short allowlist of host variables plus the contract's.

    ``PATH`` is the owner's, in its order, after :data:`COMMANDS_DIR` alone.
    """
    host_env = dict(os.environ) if host_env is None else host_env
    env = {
        name: value
        for name, value in host_env.items()
        if name in PASSED_ENV or name.startswith(PASSED_ENV_PREFIXES)
    }
    path = env.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PATH"] = f"{COMMANDS_DIR}:{path}"
    env["BROWSER"] = f"{COMMANDS_DIR}/{OPEN_COMMAND}"
    env["HOME"] = str(spec_home)
    env[RELAY_SOCKET_ENV] = DEFAULT_RELAY_SOCKET
    env[UPSTREAM_SOCKET_ENV] = DEFAULT_UPSTREAM_SOCKET
    env[IN_SANDBOX_ENV] = "1"
    env.update(extra)
    return env


def parse_env(values: list[str], host_env: dict[str, str] | None = None) -> dict[str, str]:
    """Parse ``--env NAME=VALUE`` / ``--env NAME`` (pass the host's value) flags."""
    host_env = dict(os.environ) if host_env is None else host_env
    result: dict[str, str] = {}
    for value in values:
        name, sep, setting = value.partition("=")
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise SandboxError(f"--env {value!r}: not a valid variable name")
        if sep:
            result[name] = setting
        elif name in host_env:
            result[name] = host_env[name]
        else:
            raise SandboxError(f"--env {name}: not set on the host; use --env {name}=VALUE")
    return result

"""The layout's rules (docs/architecture.md), checked on the source itself."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "sandbridge"

# Each package may import the packages on lower floors only (and itself).
FLOORS = {
    "cli": 9,
    # the daemon hosts the dashboard: it imports ui/, never the reverse
    "daemon": 8,
    # `sandbridge doctor`'s checks: they ask every part below; the daemon's unit check
    # asks places/ (systemd_user.py), as `daemon install` does
    "doctor": 8,
    # the dashboard: reads the sessions (their control sockets, or what its host gives it)
    "ui": 7,
    "session": 6,
    # agents run by name: their profiles, state binds and hints, above the sandbox whose
    # mounts they make and beside the session
    "agents": 6,
    "sandbox": 5,
    # sandboxes on other machines: above the relay whose listeners it reuses
    "remote": 5,
    # `policy survey` and `policy init`: a project's first policy, decided as the egress
    # gate will decide it (its resolver, its address kinds)
    "survey": 5,
    "relay": 4,
    "terminals": 4,
    "egress": 4,
    # the ssh-agent bridge: the sandbox's SSH_AUTH_SOCK, served from the owner's agent
    "ssh_agent": 4,
    # the clipboard bridge: the owner's clipboard, read after asking, written by mode
    "clipboard": 4,
    # the container engine bridge: the sandbox's DOCKER_HOST, policy-gated
    "containers": 4,
    "places": 3,
    # the project's reviewed configuration in `.sandbridge/`: what sandbox/, session/,
    # egress/ and cli/ read of a project, on the protocol's wire formats only
    "project": 3,
    "aio": 2,
    "protocol": 1,
    "demo": 1,
    # the ground floor: modules directly under sandbridge/
    "": 0,
}
MAX_MODULE_LINES = 600


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else ""  # sandbridge.<package>.<module>


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "sandbridge":
                found += [f"sandbridge.{alias.name}" for alias in node.names]
            elif node.module.startswith("sandbridge."):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("sandbridge.")]
    return found


def _modules() -> list[tuple[str, Path]]:
    result = []
    for path in sorted(SRC.rglob("*.py")):
        dotted = ".".join(("sandbridge", *path.relative_to(SRC).with_suffix("").parts))
        result.append((dotted, path))
    return result


def test_every_package_has_a_floor() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    assert packages <= set(FLOORS), f"packages without a floor: {packages - set(FLOORS)}"


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda v: str(v))
def test_imports_run_down_the_floors(module: str, path: Path) -> None:
    own = _package_of(module)
    for target in _imports(path):
        other = _package_of(target) if target.count(".") >= 2 else ""
        if target.count(".") == 1 and (SRC / target.split(".")[1]).is_dir():
            other = target.split(".")[1]  # `from sandbridge import relay`
        if other == own:
            continue
        assert FLOORS[other] < FLOORS[own], f"{module} imports {target}: up or sideways"


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda v: str(v))
def test_no_module_is_over_the_size_limit(module: str, path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module}: {lines} lines"


def _c_sources() -> list[Path]:
    return sorted([*SRC.rglob("*.c"), *SRC.rglob("*.h")])


def test_the_c_sources_are_found() -> None:
    """The size rule below runs on the front door's sources (an empty list passes)."""
    assert any(path.name.startswith("_front_") for path in _c_sources())


@pytest.mark.parametrize("path", _c_sources(), ids=lambda p: p.name)
def test_no_c_file_is_over_the_size_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(SRC)}: {lines} lines"


# The front door's C never runs a libc parser on wire bytes (they carry no NUL), and its
# thread closes a descriptor only through close_fd, which takes it out of epoll first; the
# front's own descriptors (the epoll set, its wake-ups, netlink) close at its stop, the
# epoll set first.
C_LIBC_PARSER = re.compile(r"\b(?:strto\w+|atoi|atol|atoll|sscanf)\s*\(")
C_CLOSE = re.compile(r"(?<![\w.>])close\(([^)]*)\)")
C_CLOSES_ALLOWED = {"*fd", "f->epfd", "f->wakefd", "f->notifyfd", "f->netlink"}


def test_no_libc_parser_reads_the_front_doors_bytes() -> None:
    found = [
        f"{path.name}: {line.strip()}"
        for path in _c_sources()
        for line in path.read_text().splitlines()
        if C_LIBC_PARSER.search(line)
    ]
    assert not found, found


def test_the_front_door_closes_descriptors_only_through_its_helper() -> None:
    found = [
        f"{path.name}: {line.strip()}"
        for path in _c_sources()
        for line in path.read_text().splitlines()
        for argument in C_CLOSE.findall(line)
        if argument not in C_CLOSES_ALLOWED
    ]
    assert not found, found


# The relay's folders, each on its own floor: the listeners (a browser connection's path)
# drive the front door, and both stand on host/ (reaching apps, settings, the budget).
RELAY_FLOORS = {"host": 0, "front": 1, "listener": 2}
# What the relay's sandbox half (relay/inside/) may take from its host half: the one rule
# of connecting to an app, which the host's own sockets follow too. Nothing else of the
# host's data path runs inside, and the host never runs a program of the sandbox's.
RELAY_HALVES_SHARE = frozenset({"sandbridge.relay.host.app_connector"})


def _relay_folder(module: str) -> str:
    return module.split(".")[2]  # sandbridge.relay.<folder>[.<module>]


def test_every_relay_module_is_in_a_folder() -> None:
    strays = [
        module
        for module, _ in _modules()
        if module.startswith("sandbridge.relay.")
        and module != "sandbridge.relay.__init__"
        and _relay_folder(module) not in {*RELAY_FLOORS, "inside"}
    ]
    assert not strays, f"relay modules outside host/, front/, listener/, inside/: {strays}"


@pytest.mark.parametrize(
    ("module", "path"),
    [(module, path) for module, path in _modules() if module.startswith("sandbridge.relay.")],
    ids=lambda v: str(v),
)
def test_the_relays_folders_import_down_and_its_two_halves_only_what_they_share(
    module: str, path: Path
) -> None:
    own = _relay_folder(module)
    for target in _imports(path):
        if not target.startswith("sandbridge.relay."):
            continue
        other = _relay_folder(target)
        if own == "inside":
            allowed = other == "inside" or target in RELAY_HALVES_SHARE
        elif other == "inside":
            allowed = False
        else:
            allowed = other == own or RELAY_FLOORS[other] < RELAY_FLOORS[own]
        assert allowed, f"{module} imports {target}: up, or across the host/sandbox line"


def test_no_import_circle_between_modules() -> None:
    graph = {module: set(_imports(path)) for module, path in _modules()}
    known = set(graph)
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node] & known:
            if state.get(nxt) == 1:
                raise AssertionError(" -> ".join([*trail, node, nxt]))
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [])


def test_every_exception_class_lives_in_the_one_hierarchy() -> None:
    """exceptions.py holds every exception sandbridge raises on purpose; a private class
    used only for control flow inside one module (``_Stop``) is the one exception."""
    strays = []
    for module, _ in _modules():
        if module == "sandbridge.exceptions" or module.endswith("__main__"):
            continue
        loaded = importlib.import_module(module)
        for name, value in vars(loaded).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == module
                and not name.startswith("_")
            ):
                strays.append(f"{module}.{name}")
    assert not strays, f"exception classes outside sandbridge.exceptions: {strays}"

"""The layout's rules (docs/architecture.md), checked on the source itself."""

from __future__ import annotations

import ast
import importlib
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
    "sandbox": 5,
    # sandboxes on other machines: above the relay whose listeners it reuses
    "remote": 5,
    "relay": 4,
    "terminals": 4,
    "egress": 4,
    # the ssh-agent bridge: the sandbox's SSH_AUTH_SOCK, served from the owner's agent
    "ssh_agent": 4,
    # the clipboard bridge: the owner's clipboard, read after asking, written by mode
    "clipboard": 4,
    "places": 3,
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

"""Every regular expression in sandbridge's own code means the same on every Python it runs
on (3.11 and newer).

Python before 3.11.5 (Debian 12 ships 3.11.2) matched possessive quantifiers (``*+``,
``++``, ``?+``, ``{m,n}+``) wrongly (CPython gh-106052; 3.11.5 rebuilt them on atomic
groups, ``(?>...)``, new in 3.11 too): the terminal's escape filter, written with them,
let an OSC 52 clipboard write through as text on that Python
(tests/terminals/test_escape_filter.py fails there on the code before). So neither may be
written in sandbridge: this test fails naming where and which. Two walks find them: the
patterns its modules hold once loaded (in their names, in containers and dataclass rows
under them: patterns built from pieces, as the escape filter's are), and every literal
pattern given to a ``re`` function anywhere in the source (patterns compiled in functions).
What the standard library compiles for itself (``fnmatch`` writes atomic groups on 3.11)
is not sandbridge's to choose.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from re import _constants, _parser  # type: ignore[attr-defined]

import pytest

import sandbridge

BROKEN_BEFORE_3_11_5 = {_constants.POSSESSIVE_REPEAT: "a possessive quantifier"}
BROKEN_BEFORE_3_11_5[_constants.ATOMIC_GROUP] = "an atomic group"
SOURCE = Path(sandbridge.__file__).parent
RE_FUNCTIONS = frozenset(
    {"compile", "match", "search", "fullmatch", "sub", "subn", "split", "findall", "finditer"}
)


def _modules() -> Iterator[str]:
    """Every module of sandbridge but the ``__main__`` ones (a command's start: importing
    one runs it); a module that does not import fails the test."""
    for info in pkgutil.walk_packages(sandbridge.__path__, "sandbridge."):
        if not info.name.endswith(".__main__"):
            yield info.name


def _patterns(
    value: object, name: str, module: str, depth: int = 0
) -> Iterator[tuple[str, re.Pattern[str] | re.Pattern[bytes]]]:
    """The patterns ``value`` is or holds: in dicts, sequences, sets, dataclass instances
    and the module's own classes, three levels down."""
    if isinstance(value, re.Pattern):
        yield name, value
        return
    if depth >= 3:
        return
    items: list[tuple[str, object]] = []
    if isinstance(value, dict):
        items = [(f"[{key!r}]", item) for key, item in value.items()]
    elif isinstance(value, tuple | list | frozenset | set):
        items = [(f"[{index}]", item) for index, item in enumerate(value)]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [
            (f".{field.name}", getattr(value, field.name)) for field in dataclasses.fields(value)
        ]
    elif isinstance(value, type) and value.__module__ == module:
        items = [(f".{key}", item) for key, item in vars(value).items()]
    for suffix, item in items:
        yield from _patterns(item, name + suffix, module, depth + 1)


def _constructs(value: object) -> Iterator[str]:
    """The constructs of :data:`BROKEN_BEFORE_3_11_5` anywhere in a parsed pattern: its
    operations' arguments hold subpatterns at any depth of tuples and lists."""
    if isinstance(value, _parser.SubPattern):
        for op, argument in value:
            if op in BROKEN_BEFORE_3_11_5:
                yield BROKEN_BEFORE_3_11_5[op]
            yield from _constructs(argument)
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _constructs(item)


def _literal_patterns() -> Iterator[tuple[str, str | bytes]]:
    """Each string or bytes literal given first to a ``re`` function in the source."""
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "re"
                and node.func.attr in RE_FUNCTIONS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str | bytes)
            ):
                where = f"{path.relative_to(SOURCE.parent)}:{node.lineno}"
                yield where, node.args[0].value


def test_no_pattern_a_module_holds_uses_what_python_before_3_11_5_matched_wrongly() -> None:
    found = []
    checked = 0
    for module_name in _modules():
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            for label, pattern in _patterns(value, f"{module_name}.{name}", module_name):
                checked += 1
                for construct in _constructs(_parser.parse(pattern.pattern, pattern.flags)):
                    found.append(f"{label}: {construct}")
    assert checked > 50, checked  # the walk saw the modules' patterns
    assert found == []


def test_no_literal_pattern_in_the_source_uses_what_python_before_3_11_5_matched_wrongly() -> None:
    found = []
    checked = 0
    for where, source in _literal_patterns():
        checked += 1
        for construct in _constructs(_parser.parse(source, 0)):
            found.append(f"{where}: {construct}")
    assert checked > 50, checked
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        rb"a*+",
        rb"(?>ab|a)c",
        rb"x{1,3}+",
        rb"(?:x|(?=b*+))",
        rb"(a)?(?(1)c++|d)",
        rb"(?<!x{1,2}+)y",
    ],
)
def test_the_check_finds_each_construct_wherever_it_is_nested(source: bytes) -> None:
    assert list(_constructs(_parser.parse(source, 0)))


@dataclasses.dataclass(frozen=True)
class _Row:
    path: re.Pattern[bytes]


class _Table:
    ROWS = (_Row(re.compile(rb"a*+")),)


def test_the_walk_finds_a_pattern_in_a_dataclass_row_and_a_class() -> None:
    module = __name__
    assert [name for name, _ in _patterns((_Row(re.compile(b"x")),), "rows", module)] == [
        "rows[0].path"
    ]
    assert [name for name, _ in _patterns(_Table, "_Table", module)] == ["_Table.ROWS[0].path"]

"""Every regular expression sandbridge compiles when its modules load means the same on
every Python it runs on (3.11 and newer).

Python before 3.11.5 (Debian 12 ships 3.11.2) matched possessive quantifiers (``*+``,
``++``, ``?+``, ``{m,n}+``) and atomic groups (``(?>...)``) wrongly: the terminal's escape
filter, written with them, let an OSC 52 clipboard write through as text on that Python
(tests/terminals/test_escape_filter.py fails there on the code before). So none may be
used, in any module: this test fails naming the module, the name and the construct.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from re import _constants, _parser  # type: ignore[attr-defined]

import pytest

import sandbridge

BROKEN_BEFORE_3_11_5 = {_constants.POSSESSIVE_REPEAT: "a possessive quantifier"}
BROKEN_BEFORE_3_11_5[_constants.ATOMIC_GROUP] = "an atomic group"


def _modules() -> Iterator[str]:
    """Every module of sandbridge but the ``__main__`` ones (a command's start: importing
    one runs it); a module that does not import fails the test."""
    for info in pkgutil.walk_packages(sandbridge.__path__, "sandbridge."):
        if not info.name.endswith(".__main__"):
            yield info.name


def _patterns(
    value: object, name: str, depth: int = 0
) -> Iterator[tuple[str, re.Pattern[str] | re.Pattern[bytes]]]:
    if isinstance(value, re.Pattern):
        yield name, value
    elif depth < 2 and isinstance(value, dict):
        for key, item in value.items():
            yield from _patterns(item, f"{name}[{key!r}]", depth + 1)
    elif depth < 2 and isinstance(value, tuple | list | frozenset | set):
        for index, item in enumerate(value):
            yield from _patterns(item, f"{name}[{index}]", depth + 1)


def _constructs(parsed: object) -> Iterator[str]:
    for op, argument in parsed:  # type: ignore[attr-defined]
        if op in BROKEN_BEFORE_3_11_5:
            yield BROKEN_BEFORE_3_11_5[op]
        for item in argument if isinstance(argument, tuple | list) else (argument,):
            if isinstance(item, _parser.SubPattern):
                yield from _constructs(item)
            elif isinstance(item, tuple | list):
                for inner in item:
                    if isinstance(inner, _parser.SubPattern):
                        yield from _constructs(inner)


def test_no_pattern_uses_what_python_before_3_11_5_matched_wrongly() -> None:
    found = []
    checked = 0
    for module_name in _modules():
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            for label, pattern in _patterns(value, f"{module_name}.{name}"):
                checked += 1
                for construct in _constructs(_parser.parse(pattern.pattern, pattern.flags)):
                    found.append(f"{label}: {construct}")
    assert checked > 50, checked  # the walk saw the modules' patterns
    assert found == []


@pytest.mark.parametrize("source", [rb"a*+", rb"(?>ab|a)c", rb"x{1,3}+"])
def test_the_check_finds_each_construct(source: bytes) -> None:
    assert list(_constructs(_parser.parse(source, 0)))

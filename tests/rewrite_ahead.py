"""pytest's rewritten test modules written once, before the workers start, on every core.

pytest rewrites each test module's and conftest's asserts when it first imports them and
keeps the result in ``__pycache__`` (``*.cpython-311-pytest-9.0.3.pyc``). Every
pytest-xdist worker collects every test file, and on a fresh clone the workers start
together, so each rewrote all of them: a collection took 20.4 CPU-s there against 6.2
with the rewritten modules kept (``--collect-only -p no:xdist``, a clean clone), four
times over. Written here first, in parallel, the workers all find them.

This uses pytest's own rewriting functions, which are not a public API: pytest is pinned
in requirements.lock, and a pytest whose functions changed fails the run's start loudly.
"""

from __future__ import annotations

import fnmatch
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

# The run's configuration, for the forked processes that rewrite (a Config does not pickle).
_CONFIG: list[pytest.Config] = []


def _cached_pyc(source: Path) -> Path:
    return rewrite.get_cache_dir(source) / (source.name[:-3] + rewrite.PYC_TAIL)


def _rewrite(name: str) -> None:
    """Rewrite one module and keep it, unless what is kept is current."""
    [config] = _CONFIG
    source = Path(name)
    pyc = _cached_pyc(source)
    if rewrite._read_pyc(source, pyc) is not None:
        return
    if rewrite.try_makedirs(pyc.parent):
        stat, code = rewrite._rewrite_test(source, config)
        rewrite._write_pyc(config.stash[rewrite.assertstate_key], code, stat, pyc)


def rewritten_modules(config: pytest.Config, tests: Path) -> list[Path]:
    """The modules under ``tests`` pytest rewrites: its test files (``python_files``) and
    conftests."""
    patterns = [*config.getini("python_files"), "conftest.py"]
    return sorted(
        path
        for path in tests.rglob("*.py")
        if "__pycache__" not in path.parts
        and any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns)
    )


def rewrite_ahead(config: pytest.Config, tests: Path) -> None:
    """Write what pytest would for every module it rewrites under ``tests``, one process a
    core (forked: the configuration goes along)."""
    if config.stash.get(rewrite.assertstate_key, None) is None:
        return  # --assert=plain: nothing is rewritten
    modules = [str(path) for path in rewritten_modules(config, tests)]
    _CONFIG[:] = [config]
    try:
        with ProcessPoolExecutor(
            max_workers=os.cpu_count() or 1, mp_context=multiprocessing.get_context("fork")
        ) as pool:
            list(pool.map(_rewrite, modules, chunksize=8))
    finally:
        _CONFIG.clear()

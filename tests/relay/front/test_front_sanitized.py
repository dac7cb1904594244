"""The front door's tests, run again on a build of its C under AddressSanitizer and
UndefinedBehaviorSanitizer (``tests/relay/front/front_sanitizers.py`` says how): any report of
either fails the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.relay.front import front_sanitizers

KINDS = "address,undefined"


@pytest.fixture(scope="module")
def sanitized(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build, kept in pytest's cache directory (git-ignored) for the next run while
    the C does not change; in a temporary one when the cache is off."""
    cache = getattr(request.config, "cache", None)
    where = cache.mkdir("front-sanitized") if cache is not None else tmp_path_factory.mktemp("c")
    return front_sanitizers.cached_build(where, KINDS)


# Two test files run whole in one test, on an instrumented build: minutes on a busy
# machine, past the suite's default of 120 s (pyproject.toml).
@pytest.mark.timeout(900)
def test_the_front_doors_tests_pass_on_an_asan_and_ubsan_build(
    sanitized: Path, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    env = front_sanitizers.environment(sanitized, KINDS, reports)
    assert front_sanitizers.loads_the_build(sanitized, env)
    run = front_sanitizers.run_tests(env, "-x")
    found = {path.name: path.read_text()[-3000:] for path in reports.iterdir()}
    assert not found, found
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def test_the_build_is_reused_while_the_c_is_unchanged(sanitized: Path) -> None:
    (extension,) = (sanitized / "sandbridge" / "relay" / "front").glob("_front*.so")
    before = extension.stat()
    assert front_sanitizers.cached_build(sanitized.parent, KINDS) == sanitized
    after = extension.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)

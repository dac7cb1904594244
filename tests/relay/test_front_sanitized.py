"""The front door's tests, run again on a build of its C under AddressSanitizer and
UndefinedBehaviorSanitizer (``tests/relay/front_sanitizers.py`` says how): any report of
either fails the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.relay import front_sanitizers

KINDS = "address,undefined"


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return front_sanitizers.build(tmp_path_factory.mktemp("sanitized"), KINDS)


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

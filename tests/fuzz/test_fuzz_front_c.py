"""The C front door's translation, fuzzed with libFuzzer for a bounded time, then the corpus
it grew compared with the Python relay.

``tests/fuzz/c/fuzz_translate.c`` links ``_front_translate.c`` alone (it has no I/O and no
``Python.h``) under AddressSanitizer and UndefinedBehaviorSanitizer, and checks properties
on every input (a relayed response is one a strict reader accepts within the Python
relay's limits, every prefix waits, the browser's head is in the relay's one form; a
relayed request has a line in the form the Python parser accepts, and the head the base-path
rule makes). Its seed corpus is
``tests/fuzz/c/corpus``; what the run adds is then put through the differential check of
``tests/relay/front/test_front_translation.py``, so a class the C properties do not name is
still found where the Python relay disagrees.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbridge.relay.front._front import PEEK_MAX
from tests.relay.front.test_front_translation import check_agreement

FUZZ_DIR = Path(__file__).resolve().parent / "c"
SRC = Path(__file__).resolve().parents[2] / "src" / "sandbridge" / "relay" / "front"
# A bounded run inside the suite's time budget; more seconds find more (run it by hand:
# the command is in the failure message).
FUZZ_SECONDS = 20
# Inputs as long as a whole response the front door may relay, and a little more.
MAX_LEN = PEEK_MAX + 64
RESPONSE, HEAD_RESPONSE, REQUEST = 0, 1, 2  # fuzz_translate.c's mode bits


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    clang = shutil.which("clang")
    assert clang is not None, "clang is missing: ./dev.sh setup installs it (Debian: clang)"
    binary = tmp_path_factory.mktemp("fuzz") / "fuzz_translate"
    subprocess.run(
        [
            clang,
            "-g",
            "-O1",
            "-fsanitize=fuzzer,address,undefined",
            "-fno-sanitize-recover=all",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{SRC}",
            str(FUZZ_DIR / "fuzz_translate.c"),
            str(SRC / "_front_translate.c"),
            "-o",
            str(binary),
        ],
        check=True,
    )
    return binary


@pytest.fixture(scope="module")
def grown_corpus(fuzzer: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = tmp_path_factory.mktemp("corpus")
    command = [
        str(fuzzer),
        f"-max_total_time={FUZZ_SECONDS}",
        f"-max_len={MAX_LEN}",
        "-timeout=10",
        "-rss_limit_mb=1024",
        f"-artifact_prefix={corpus.parent}/",
        str(corpus),
        str(FUZZ_DIR / "corpus"),
    ]
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    assert run.returncode == 0, f"{' '.join(command)}:\n{run.stderr[-4000:]}"
    return corpus


def test_the_seed_corpus_covers_responses_and_requests() -> None:
    modes = {path.read_bytes()[0] & REQUEST for path in (FUZZ_DIR / "corpus").iterdir()}
    assert modes == {RESPONSE, REQUEST}


def test_fuzzing_the_translation_finds_no_crash_and_no_broken_property(
    grown_corpus: Path,
) -> None:
    assert any(grown_corpus.iterdir())


def test_every_response_of_the_grown_corpus_is_translated_as_the_python_relay_does(
    grown_corpus: Path,
) -> None:
    for path in sorted(grown_corpus.iterdir()):
        data = path.read_bytes()
        if data and not data[0] & REQUEST:
            check_agreement(data[1:], bool(data[0] & HEAD_RESPONSE))


def test_a_run_without_an_artifact_prefix_saves_its_findings_in_a_private_temporary_directory(
    fuzzer: Path, tmp_path: Path
) -> None:
    """A run by hand from the checkout's root must not leave ``crash-<sha1>`` files there.
    An RSS limit below what the process already uses makes libFuzzer save the input it was
    running (``oom-<sha1>``) within a second: a finding it saves as it saves a crash."""
    work, temporary, corpus = tmp_path / "work", tmp_path / "tmp", tmp_path / "corpus"
    for directory in (work, temporary, corpus):
        directory.mkdir()
    run = subprocess.run(
        # libFuzzer adds what it finds to the first corpus: never the seeds
        [
            str(fuzzer),
            "-rss_limit_mb=1",
            "-max_total_time=60",
            str(corpus),
            str(FUZZ_DIR / "corpus"),
        ],
        cwd=work,
        env={**os.environ, "TMPDIR": str(temporary)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode != 0, run.stderr[-2000:]
    assert list(work.iterdir()) == []
    (directory,) = temporary.iterdir()
    assert f"fuzz_translate: artifacts go to {directory}/" in run.stderr
    assert directory.stat().st_mode & 0o777 == 0o700
    assert [path.name[:4] for path in directory.iterdir()] == ["oom-"]

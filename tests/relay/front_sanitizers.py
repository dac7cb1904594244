"""The front door built under a sanitizer, and its tests run on that build.

``build`` compiles the extension's C with ``-fsanitize=<kinds>`` into a directory that also
holds a ``sitecustomize`` putting it first on ``sandbridge.relay``'s path, in the tests'
process and in every ``sandbridge run`` they start; ``run_tests`` runs the front door's
tests there. Python itself is not built with a sanitizer, so the runtime is preloaded
(``LD_PRELOAD``), ASan's leak checks are off (the interpreter's own allocations would be
reported), and every report ends the process that made it and is written to a log file
in ``reports``.

``tests/relay/test_front_sanitized.py`` runs the ASan and UBSan build in the suite;
``./dev.sh tsan`` runs ThreadSanitizer's (``python -m tests.relay.front_sanitizers thread``),
too slow and too noisy about the uninstrumented interpreter for every run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "sandbridge" / "relay"
# The tests run on a sanitized build: the translation's table and generated heads, and the
# real sessions through the front (floods, timeouts, handoffs of every kind).
# test_budget.py's leases against the C; front_faults.py drives the failure paths through
# the fault sites that only this build has (-DSANDBRIDGE_FAULTS).
TESTS = [
    "tests/relay/test_front_translation.py",
    "tests/relay/test_front.py",
    "tests/relay/test_budget.py",
    "tests/relay/front_faults.py",
]
# The Python relay's own variants there are left out: they run no C.
WITHOUT_C = "not python and not without_the_front_door and not no_front_door_never"
SITECUSTOMIZE = """\
import sandbridge.relay

sandbridge.relay.__path__.insert(0, {directory!r})
"""
# What each sanitizer's runtime is called, and its options (reports to files in REPORTS).
RUNTIMES = {"address,undefined": "libasan.so", "thread": "libtsan.so"}


def build(root: Path, kinds: str) -> Path:
    """Compile the front door with ``-fsanitize=kinds`` under ``root``; ``root``."""
    relay = root / "sandbridge" / "relay"
    relay.mkdir(parents=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-g",
            "-O1",
            "-fno-omit-frame-pointer",
            f"-fsanitize={kinds}",
            "-DSANDBRIDGE_FAULTS",
            *(["-fno-sanitize-recover=undefined"] if "undefined" in kinds else []),
            "-Wall",
            "-Wextra",
            "-Wno-unused-parameter",
            "-Wno-missing-field-initializers",
            "-Werror",
            f"-I{sysconfig.get_paths()['include']}",
            *map(str, sorted(SRC.glob("_front_*.c"))),
            "-o",
            str(relay / f"_front{suffix}"),
        ],
        check=True,
    )
    (root / "sitecustomize.py").write_text(SITECUSTOMIZE.format(directory=str(relay)))
    return root


def environment(root: Path, kinds: str, reports: Path) -> dict[str, str]:
    """The environment that loads the build under ``root`` with its runtime."""
    runtime = subprocess.run(
        ["gcc", f"-print-file-name={RUNTIMES[kinds]}"], check=True, capture_output=True, text=True
    ).stdout.strip()
    if not Path(runtime).is_file():
        raise FileNotFoundError(f"no {RUNTIMES[kinds]} beside gcc: {runtime}")
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return {
        **os.environ,
        "PYTHONPATH": path,
        "LD_PRELOAD": runtime,
        "ASAN_OPTIONS": f"detect_leaks=0:abort_on_error=1:log_path={reports}/asan",
        "UBSAN_OPTIONS": f"halt_on_error=1:print_stacktrace=1:log_path={reports}/ubsan",
        "TSAN_OPTIONS": f"halt_on_error=1:log_path={reports}/tsan",
    }


def loads_the_build(root: Path, env: dict[str, str]) -> bool:
    """Whether a process with ``env`` imports the front door built under ``root``."""
    check = f"import sandbridge.relay._front as f; print(f.__file__.startswith({str(root)!r}))"
    said = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, check=True
    )
    return said.stdout.strip() == "True"


def run_tests(env: dict[str, str], *pytest_args: str) -> subprocess.CompletedProcess[str]:
    """The front door's tests (but the Python relay's variants) with ``env``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            WITHOUT_C,
            *pytest_args,
            *TESTS,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def main(kinds: str) -> int:
    """Build with ``kinds``, run the tests, print any report; the exit status."""
    with tempfile.TemporaryDirectory(prefix="sandbridge-sanitized-") as temporary:
        root = build(Path(temporary) / "build", kinds)
        reports = Path(temporary) / "reports"
        reports.mkdir()
        env = environment(root, kinds, reports)
        if not loads_the_build(root, env):
            print(f"front_sanitizers: the {kinds} build was not the one imported", file=sys.stderr)
            return 1
        run = run_tests(env)
        print(run.stdout[-4000:], run.stderr[-2000:], sep="\n")
        for report in sorted(reports.iterdir()):
            print(f"---- {report.name}\n{report.read_text()}", file=sys.stderr)
        return 1 if run.returncode or any(reports.iterdir()) else 0


if __name__ == "__main__":
    sys.exit(main({"thread": "thread", "address": "address,undefined"}[sys.argv[1]]))

"""The front door built under a sanitizer, and its tests run on that build.

``build`` compiles the extension's C with ``-fsanitize=<kinds>`` into a directory that also
holds a ``sitecustomize`` putting it first on ``sandbridge.relay.front``'s path, in the tests'
process and in every ``sandbridge run`` they start; ``run_tests`` runs the front door's
tests there. Python itself is not built with a sanitizer, so the runtime is preloaded
(``LD_PRELOAD``), ASan's leak checks are off (the interpreter's own allocations would be
reported), and every report ends the process that made it and is written to a log file
in ``reports``.

``tests/relay/front/test_front_sanitized.py`` runs the ASan and UBSan build in the suite;
``./dev.sh tsan`` runs ThreadSanitizer's (``python -m tests.relay.front.front_sanitizers thread``),
too slow and too noisy about the uninstrumented interpreter for every run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SRC = REPO / "src" / "sandbridge" / "relay" / "front"
TUNNEL = SRC / "_tunnel.c"
# The tests run on a sanitized build: the translation's table and generated heads, and the
# real sessions through the front (floods, timeouts, handoffs of every kind).
# test_budget.py's leases against the C; front_faults.py drives the failure paths through
# the fault sites that only this build has (-DSANDBRIDGE_FAULTS).
TESTS = [
    "tests/relay/front/test_front_translation.py",
    "tests/relay/front/test_front.py",
    "tests/relay/host/test_budget.py",
    "tests/relay/front/front_faults.py",
    # the C tunnel (relay/front/_tunnel.c) against the Python one, on real sockets
    "tests/relay/listener/test_tunnel_c.py",
]
# The Python relay's own variants there are left out: they run no C.
WITHOUT_C = "not python and not without_the_front_door and not no_front_door_never"
# Where the build is found from this file's own place: a cached build is moved into place
# after it is made (cached_build).
SITECUSTOMIZE = """\
import os

import sandbridge.relay.front

sandbridge.relay.front.__path__.insert(
    0, os.path.join(os.path.dirname(__file__), "sandbridge", "relay", "front")
)
"""
# What each sanitizer's runtime is called, and its options (reports to files in REPORTS).
RUNTIMES = {"address,undefined": "libasan.so", "thread": "libtsan.so"}


def _compiler_flags(kinds: str) -> list[str]:
    return [
        "-fPIC",
        "-g",
        "-O1",
        "-fno-omit-frame-pointer",
        f"-fsanitize={kinds}",
        # The fault sites (front_faults.py) exist in this build only.
        "-DSANDBRIDGE_FAULTS",
        *(["-fno-sanitize-recover=undefined"] if "undefined" in kinds else []),
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        "-Wno-missing-field-initializers",
        "-Werror",
        f"-I{sysconfig.get_paths()['include']}",
    ]


def build(root: Path, kinds: str) -> Path:
    """Compile the front door with ``-fsanitize=kinds`` under ``root``; ``root``.

    Each source is compiled by a compiler of its own, all at once, then linked: the
    build's wall time is its longest source's where cores are free."""
    relay = root / "sandbridge" / "relay" / "front"
    relay.mkdir(parents=True)
    flags = _compiler_flags(kinds)
    sources = sorted(SRC.glob("_front_*.c"))
    objects = [relay / f"{source.stem}.o" for source in sources]
    compilers = [
        subprocess.Popen(["gcc", *flags, "-c", str(source), "-o", str(obj)])
        for source, obj in zip(sources, objects, strict=True)
    ]
    failed = [c.args for c in compilers if c.wait() != 0]
    if failed:
        raise subprocess.CalledProcessError(1, failed[0])
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    subprocess.run(
        [
            "gcc",
            "-shared",
            f"-fsanitize={kinds}",
            *map(str, objects),
            "-o",
            str(relay / f"_front{suffix}"),
        ],
        check=True,
    )
    for obj in objects:
        obj.unlink()
    # The C tunnel, a module of its own (one source).
    subprocess.run(
        ["gcc", *flags, "-shared", str(TUNNEL), "-o", str(relay / f"_tunnel{suffix}")],
        check=True,
    )
    (root / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return root


def build_key(kinds: str) -> str:
    """What a build depends on: the front door's C sources and headers, the flags, the
    interpreter's headers and extension suffix, and the compiler."""
    digest = hashlib.sha256()
    for path in sorted([*SRC.glob("_front_*.c"), *SRC.glob("_front_*.h"), TUNNEL]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    compiler = subprocess.run(
        ["gcc", "--version"], check=True, capture_output=True, text=True
    ).stdout
    for part in (*_compiler_flags(kinds), sysconfig.get_config_var("EXT_SUFFIX"), compiler):
        digest.update(str(part).encode() + b"\0")
    return digest.hexdigest()[:16]


def cached_build(cache: Path, kinds: str) -> Path:
    """A build under ``cache`` for the sources as they are now, made if there is none:
    a second run of the suite reuses it. A build is made aside and moved into place
    whole, so a run beside this one never sees half of it; the builds of older sources
    are removed."""
    name = kinds.replace(",", "+")
    root = cache / f"{name}-{build_key(kinds)}"
    if (root / "sitecustomize.py").is_file():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=cache))
    try:
        build(staging / "build", kinds)
        with contextlib.suppress(OSError):  # another run put the same build in place first
            (staging / "build").rename(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for old in cache.glob(f"{name}-*"):
        if old != root:
            shutil.rmtree(old, ignore_errors=True)
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
    """Whether a process with ``env`` imports the front door (and the C tunnel) built
    under ``root``."""
    check = (
        "import sandbridge.relay.front._front as f, sandbridge.relay.front._tunnel as t; "
        f"print(all(m.__file__.startswith({str(root)!r}) for m in (f, t)))"
    )
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

"""The terminal journal's appends: CPU per audit record and per reservation on a full ring.

Every terminal request, approval, denial and end appends to the audit log, a ring of
256 slot files that every session of the user shares (terminals/journal.py). Two ring
objects (two sessions) take turns on one full ring, each append as the broker makes it;
the figure is the process's CPU per append (user + system, fsyncs included), and with
``--other SRC`` the same for another checkout's ``src``, side by side.

``python -m benchmarks.journal_append [--appends N] [--other SRC]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from benchmarks.paths import REPO

MEASURE = """
import sys, tempfile, time
from pathlib import Path
from sandbridge.terminals.journal import AuditLog, ReservationJournal
appends = int(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    logs = [AuditLog(Path(tmp)), AuditLog(Path(tmp))]
    journals = [ReservationJournal(Path(tmp)), ReservationJournal(Path(tmp))]
    for index in range(300):  # a full ring of each
        logs[0].record("request", session="s-123456", request=f"r{index}")
        journals[0].reserve(f"warm-{index}", 0.0, {}, time.time())
    started = time.process_time()
    for index in range(appends):
        logs[index % 2].record("request", session="s-123456", request=f"r{index}")
    audit = (time.process_time() - started) / appends
    started = time.process_time()
    for index in range(appends):
        journals[index % 2].reserve(f"n-{index}", 0.0, {}, time.time())
    reservation = (time.process_time() - started) / appends
print(f"{audit * 1000:.2f} {reservation * 1000:.2f}")
"""


def measure(src: str, appends: int) -> tuple[float, float]:
    """ms of CPU per audit record and per reservation, with ``src``'s sandbridge."""
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(appends)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.journal_append")
    parser.add_argument("--appends", type=int, default=100)
    parser.add_argument("--other", metavar="SRC", help="another checkout's src, beside this one")
    args = parser.parse_args()
    trees = {"this": str(REPO / "src")}
    if args.other:
        trees["other"] = args.other
    started = time.monotonic()
    print("| tree | audit record (ms CPU) | reservation (ms CPU) |")
    print("|---|---|---|")
    for label, src in trees.items():
        audit, reservation = measure(src, args.appends)
        print(f"| {label} | {audit:.2f} | {reservation:.2f} |")
    print(f"({args.appends} appends each on a full ring, {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()

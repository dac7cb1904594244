"""One sandbridge session of this checkout, measured alone.

Five 100 MiB POSTs and GETs, 30 new-connection TTFBs, and three c=64 keep-alive loads
with the relay's CPU per request. Run it from two checkouts in turn
(``python -m benchmarks.ab_sessions LABEL`` in each) to compare code session by
session, where ``relay_bench`` compares relays within one run (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks import paths, workloads
from benchmarks.relay_bench import make_files

LOADS = 3
LOAD_SECONDS = 4.0
BULK_RUNS = 5
MIB = 1 << 20


def main(label: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="sandbridge-ab-"))
    files = make_files(work, smoke=True)
    with files["100m"].open("wb") as out:  # the smoke files are small: 100 MiB here
        block = os.urandom(MIB)
        for _ in range(100):
            out.write(block)
    path = paths.sandbridge(work, (0, 0))
    try:
        post = [workloads.bulk_post(path.http + "/sink", files["100m"]) for _ in range(BULK_RUNS)]
        get = [workloads.bulk_get(path.http + "/100m") for _ in range(BULK_RUNS)]
        ttfb = workloads.ttfb(path.http + "/1k", 30)
        cpus, rps = [], []
        for _ in range(LOADS):
            before = workloads.cpu_seconds(path.relay_pids)
            load = workloads.wrk(path.http + "/1k", 64, LOAD_SECONDS)
            spent = workloads.cpu_seconds(path.relay_pids) - before
            cpus.append(round(spent / load["requests"] * 1e6, 1))
            rps.append(round(load["rps"]))
    finally:
        path.stop()
    print(f"{label} c64 rps {rps} cpu_us_per_req {cpus}")
    print(
        f"{label} post {round(statistics.median(post))} get {round(statistics.median(get))} "
        f"ttfb_ms {ttfb}"
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "this")

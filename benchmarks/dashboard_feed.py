"""How fast the dashboard shows a change, and what an open tab costs (issue 15).

Three idle sessions served by the daemon; one dashboard tab (its event stream, read
here) on the page the daemon serves (``daemon``) or on the page ``sandbridge ui
--no-daemon`` serves from its own process, polling each session's control socket
(``standalone``). Figures:

- ``change_ms``: from a terminal request entered on a session's control socket to the
  event that carries it (median and max of ``samples``);
- ``idle_cpu``: the CPU share of the daemon (and of the standalone ``ui`` process) over
  ``window`` seconds of the open tab with nothing happening.

Run: ``python -m benchmarks.dashboard_feed [daemon|standalone ...]`` (both, interleaved
twice, by default). It reuses the tests' process and event-stream helpers.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.proc import stat_fields

SESSIONS = 3
SAMPLES = 15
WINDOW = 10.0


def _ticks(pid: int) -> int:
    fields = stat_fields(pid)
    return int(fields[11]) + int(fields[12])


def measure(mode: str, top: Path) -> str:
    from sandbridge.terminals import approval, keys
    from sandbridge.terminals.control import call
    from tests.conftest import SANDBRIDGE, Process, run_argv, start_daemon
    from tests.daemon.test_dashboard import EventStream, log_in

    daemon = start_daemon()
    runs = []
    ui: Process | None = None
    try:
        for index in range(SESSIONS):
            work = Path(tempfile.mkdtemp(dir=top))
            run = Process(run_argv(work, "sleep", "600", options=("--name", f"s{index}")))
            run.wait_line(f"sandbridge: session s{index}", "stderr")
            runs.append(run)
        if mode == "daemon":
            argv = [*SANDBRIDGE, "ui", "--print-url"]
            url = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
        else:
            ui = Process([*SANDBRIDGE, "ui", "--print-url", "--no-daemon"])
            url = ui.wait_line("http://")
        stream = EventStream(url, log_in(url))
        stream.until(lambda t: len(t["sessions"]) == SESSIONS)
        key = keys.owner_key()
        delays = []
        for sample in range(SAMPLES):
            instance = call("s0", {"op": "info"})["instance"]
            document = approval.sign_request(key, "s0", instance, f"r{sample}", time.time())
            start = time.monotonic()
            request_id = call("s0", {"op": "request", "request": document})["id"]
            stream.until(lambda t, i=request_id: any(r["id"] == i for r in t["terminals"]))
            delays.append(time.monotonic() - start)
        pids = [daemon.popen.pid] + ([] if ui is None else [ui.popen.pid])
        before, start = sum(map(_ticks, pids)), time.monotonic()
        time.sleep(WINDOW)  # the measurement window itself
        used = (sum(map(_ticks, pids)) - before) / os.sysconf("SC_CLK_TCK")
        stream.close()
        return (
            f"{mode:10s} change_ms median {statistics.median(delays) * 1000:.0f} max "
            f"{max(delays) * 1000:.0f}; idle_cpu {used / (time.monotonic() - start):.1%}"
        )
    finally:
        if ui is not None:
            ui.stop()
        for run in runs:
            run.stop()
        daemon.stop()


def main() -> None:
    modes = sys.argv[1:] or ["daemon", "standalone", "daemon", "standalone"]
    top = Path(tempfile.mkdtemp(prefix="sandbridge-dashbench-", dir="/tmp"))
    (top / "xdg").mkdir(mode=0o700)
    os.environ |= {
        "XDG_RUNTIME_DIR": str(top / "xdg"),
        "XDG_CONFIG_HOME": str(top / "config"),
        "XDG_STATE_HOME": str(top / "state"),
    }
    for mode in modes:
        print(measure(mode, top), flush=True)


if __name__ == "__main__":
    main()

"""The sandbox's PID 1 (``unshare_init`` in the unshare backend, bwrap's own init in the
other): orphans of the command are reaped, as on any Linux system."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import PYTHON, Process, run_argv

# The command: a child whose own child (then an orphan, PID 1's) ends; once it has,
# wait up to 10 s for PID 1 to reap it, and say whether it did.
_ORPHAN = """
import os, time
r, w = os.pipe()
child = os.fork()
if child == 0:
    if os.fork() == 0:
        os._exit(0)  # ends holding w: EOF below says it has ended
    os._exit(0)
os.close(w)
os.waitpid(child, 0)
os.read(r, 1)
def state(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[:2]
    except FileNotFoundError:  # reaped meanwhile
        return None
orphans = lambda: [p for p in os.listdir("/proc") if p.isdigit() and state(p) == ["Z", "1"]]
deadline = time.monotonic() + 10
while orphans() and time.monotonic() < deadline:
    time.sleep(0.01)
print("zombies", orphans(), flush=True)
"""


def test_an_orphan_of_the_command_is_reaped(backend: str, tmp_path: Path, xdg: Path) -> None:
    process = Process(
        run_argv(
            tmp_path,
            PYTHON,
            "-c",
            _ORPHAN,
            options=("--backend", backend, "--net", "none", "--no-daemon"),
        )
    )
    try:
        assert process.wait_line("zombies") == "zombies []"
        assert process.popen.wait(30) == 0
    finally:
        process.stop()

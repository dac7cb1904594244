"""A real X clipboard for a test: its own ``Xvfb`` on a free display number (chosen by
Xvfb itself, ``-displayfd``), no TCP, no auth file of the owner's; set and read with the
real ``xclip``. Debian's xvfb and xclip packages (dev.sh installs them): a machine
without them fails the tests that need one, loudly."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

# Xvfb writes its display number once it accepts clients; a loaded machine may take a
# few seconds to get there.
START_TIMEOUT = 30.0


class XDisplay:
    """One Xvfb; :attr:`env` reaches it."""

    def __init__(self, directory: Path) -> None:
        for tool in ("Xvfb", "xclip"):
            if shutil.which(tool) is None:
                raise AssertionError(f"{tool} is not installed: run ./dev.sh setup (xvfb, xclip)")
        read_end, write_end = os.pipe()
        self.process = subprocess.Popen(
            ["Xvfb", "-displayfd", str(write_end), "-nolisten", "tcp", "-auth", os.devnull],
            pass_fds=(write_end,),
            stdout=subprocess.DEVNULL,
            stderr=(directory / "xvfb.log").open("wb"),
        )
        os.close(write_end)
        with os.fdopen(read_end, "rb") as numbers:
            number = numbers.readline().strip().decode()
        if not number:
            self.stop()
            raise AssertionError("Xvfb did not start: " + (directory / "xvfb.log").read_text())
        self.display = f":{number}"
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DISPLAY": self.display}

    def set(self, data: bytes, target: str = "UTF8_STRING") -> None:
        """Put ``data`` on the clipboard as ``target`` (xclip stays, serving it), and
        return once the clipboard offers it: xclip's parent exits before its child has
        taken the selection, so a read right after it may find the one before."""
        subprocess.run(
            ["xclip", "-selection", "clipboard", "-i", "-t", target],
            input=data,
            env=self.env,
            stdout=subprocess.DEVNULL,
            check=True,
            timeout=START_TIMEOUT,
        )
        # The bytes themselves, not the target alone: the clipboard offered the same target
        # before (the last test's xclip) until this one takes it.
        if not self.holds(data, target):
            raise AssertionError(f"xclip did not take the clipboard as {target}")

    def targets(self) -> list[bytes]:
        """The targets the clipboard offers now (none while nobody owns it)."""
        listed = subprocess.run(
            ["xclip", "-selection", "clipboard", "-o", "-t", "TARGETS"],
            env=self.env,
            capture_output=True,
            timeout=START_TIMEOUT,
        )
        return listed.stdout.split() if listed.returncode == 0 else []

    def holds(self, data: bytes, target: str = "UTF8_STRING") -> bool:
        """Whether the clipboard comes to offer ``data`` as ``target`` (a write's xclip
        takes the selection a moment after it took the bytes), within the deadline."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if target.encode() in self.targets() and self.get(target) == data:
                return True
        return False

    def get(self, target: str = "UTF8_STRING") -> bytes:
        """The clipboard's ``target``, as the owner's xclip reads it."""
        return subprocess.run(
            ["xclip", "-selection", "clipboard", "-o", "-t", target],
            env=self.env,
            capture_output=True,
            check=True,
            timeout=START_TIMEOUT,
        ).stdout

    def stop(self) -> None:
        """End the server (the xclip processes serving its clipboard end with it)."""
        self.process.terminate()
        self.process.wait(START_TIMEOUT)


# A 1x1 PNG, as a screenshot tool writes one.
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)

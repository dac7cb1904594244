"""The sandbox cannot type into the owner's terminal (TIOCSTI), on both backends."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
from pathlib import Path

import pytest

from sandbridge.sandbox.terminal_injection import (
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    filter_program,
)
from tests.conftest import PYTHON, run_argv

# Run inside, on the owner's terminal: type a command for the owner's shell to run
# once the sandbox has ended.
_TYPE_INTO_THE_TERMINAL = """
import errno, fcntl, termios
fcntl.ioctl(0, termios.TIOCGWINSZ, bytes(8))  # other terminal requests still work
try:
    for c in b"echo typed-by-the-sandbox\\n":
        fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))
    print("typed", flush=True)
except OSError as exc:
    print("refused", errno.errorcode[exc.errno], flush=True)
"""


def _on_a_terminal(argv: list[str]) -> tuple[bytes, bytes]:
    """Run ``argv`` with a new terminal as its controlling terminal, stdin and output:
    what it showed, and what waits as input on the terminal once it has ended."""
    master, slave = pty.openpty()
    try:
        popen = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        shown = b""
        while b"typed" not in shown and b"refused" not in shown:
            ready, _, _ = select.select([master], [], [], 60)
            assert ready, f"nothing more on the terminal; it shows {shown!r}"
            shown += os.read(master, 4096)
        assert popen.wait(60) == 0, shown
        os.set_blocking(slave, False)
        try:
            waiting = os.read(slave, 4096)
        except BlockingIOError:
            waiting = b""
        return shown, waiting
    finally:
        os.close(master)
        os.close(slave)


def test_the_command_cannot_type_into_the_owners_terminal(
    backend: str, tmp_path: Path, xdg: Path
) -> None:
    """With a terminal on stdin the sandbox shares the owner's terminal (an interactive
    agent needs it). Before, TIOCSTI typed into it: a command for the owner's shell after
    the session, or the ``y`` to its own ``--open ask`` question."""
    shown, waiting = _on_a_terminal(
        run_argv(
            tmp_path,
            PYTHON,
            "-c",
            _TYPE_INTO_THE_TERMINAL,
            options=("--backend", backend, "--net", "none", "--no-daemon"),
        )
    )
    assert b"refused EPERM" in shown
    assert waiting == b""


def _decide(program: bytes, arch: int, nr: int, request: int) -> int:
    """Run the classic BPF ``program`` on one system call, as the kernel would."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, 3, request, 0, 0, 0, 0)
    code = [struct.unpack_from("=HBBI", program, at) for at in range(0, len(program), 8)]
    pc, accumulator = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x20:  # ld [k]
            accumulator = struct.unpack_from("=I", data, k)[0]
        elif op == 0x15:  # jeq k
            pc += jt if accumulator == k else jf
        else:
            assert op == 0x06  # ret k
            return int(k)
        pc += 1


X86_64, I386, AARCH64, ARM = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028
DENY = SECCOMP_RET_ERRNO | 1


@pytest.mark.parametrize(
    ("machine", "arch", "nr", "ioctl_request", "decision"),
    [
        ("x86_64", X86_64, 16, termios.TIOCSTI, DENY),
        ("x86_64", X86_64, 16, termios.TIOCSTI | (1 << 32), DENY),  # the high word is not read
        ("x86_64", X86_64, 0x40000000 | 514, termios.TIOCSTI, DENY),  # x32
        ("x86_64", I386, 54, termios.TIOCSTI, DENY),  # int 0x80
        ("x86_64", X86_64, 16, termios.TIOCLINUX, DENY),  # a console's paste
        ("x86_64", I386, 54, termios.TIOCLINUX, DENY),
        ("x86_64", X86_64, 16, termios.TIOCGWINSZ, SECCOMP_RET_ALLOW),
        ("x86_64", X86_64, 16, termios.TCGETS, SECCOMP_RET_ALLOW),
        ("x86_64", X86_64, 0, termios.TIOCSTI, SECCOMP_RET_ALLOW),  # read(), not ioctl
        ("x86_64", I386, 16, termios.TIOCSTI, SECCOMP_RET_ALLOW),  # i386's 16 is lchown
        ("x86_64", AARCH64, 29, termios.TIOCSTI, SECCOMP_RET_ALLOW),  # not this machine's
        ("aarch64", AARCH64, 29, termios.TIOCSTI, DENY),
        ("aarch64", ARM, 54, termios.TIOCSTI, DENY),
        ("aarch64", AARCH64, 29, termios.TCGETS, SECCOMP_RET_ALLOW),
        ("riscv64", 0xC00000F3, 29, termios.TIOCSTI, DENY),
        ("riscv64", 0xC00000F3, 29, termios.TCGETS, SECCOMP_RET_ALLOW),
    ],
)
def test_the_filter_refuses_typing_requests_on_every_table_of_the_machine(
    machine: str, arch: int, nr: int, ioctl_request: int, decision: int
) -> None:
    assert _decide(filter_program(machine), arch, nr, ioctl_request) == decision


def test_a_machine_without_a_table_is_refused_not_left_open() -> None:
    with pytest.raises(ValueError, match=r"no TIOCSTI filter for this machine \(mips\)"):
        filter_program("mips")

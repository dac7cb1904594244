"""Keep the sandbox from typing into the owner's terminal: a seccomp filter against TIOCSTI
(and TIOCLINUX).

Threat: with a terminal on stdin the sandbox runs in the owner's terminal session (an
interactive agent needs the terminal, so it is not ``setsid``-ed away from it), and
``ioctl(fd, TIOCSTI, &c)`` pushes ``c`` into that terminal's input as if the owner had
typed it: a command line that the owner's shell runs once the session ends (an escape
from every namespace), or the ``y`` to the sandbox's own ``--open ask`` question.
Kernels before 6.2, and later ones with ``dev.tty.legacy_tiocsti = 1`` (many
distributions' default), allow it to any process whose controlling terminal it is.

Defence: the sandbox entry installs this filter on itself before it starts the command
(``PR_SET_NO_NEW_PRIVS``, then ``PR_SET_SECCOMP``); every process of the sandbox
inherits it and none can remove it. It answers ``ioctl(_, TIOCSTI, _)`` (and
``TIOCLINUX``: a Linux console's copy and paste types too) with ``EPERM``
on the machine's own system call table and its 32-bit one (``int 0x80`` on x86-64, x32
too), and lets everything else through. A machine it has no table for is refused at
start rather than left open.
"""

from __future__ import annotations

import errno
import struct
import termios

# linux/prctl.h, linux/seccomp.h, linux/filter.h, linux/audit.h
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_SET_MODE_FILTER = 1
# The filter guards the terminal, not speculation: without this flag, kernels that tie the
# speculative-store-bypass mitigation to seccomp (spec_store_bypass_disable=seccomp, their
# default before 5.16) would slow every process of the sandbox for it.
SECCOMP_FILTER_FLAG_SPEC_ALLOW = 4
# seccomp(2)'s number on each machine with a table below.
_SECCOMP_SYSCALL = {"x86_64": 317, "aarch64": 277, "riscv64": 277}
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
# TIOCSTI pushes a byte into the terminal's input; TIOCLINUX's paste does the same with
# a Linux console's selection (which its copy subcommand sets), on kernels before 6.7.
REFUSED_REQUESTS = (termios.TIOCSTI, termios.TIOCLINUX)
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
# ioctl's request is an unsigned int: the low word of args[1] (little-endian machines).
_NR, _ARCH, _ARG1_LOW = 0, 4, 24
# The audit arch of each system call table a process of this machine can use, and the
# numbers ioctl has there.
_TABLES: dict[str, tuple[tuple[int, tuple[int, ...]], ...]] = {
    "x86_64": (
        (0xC000003E, (16, 0x40000000 | 514)),  # x86-64 (and x32: ioctl is 514 there)
        (0x40000003, (54,)),  # i386, through int 0x80
    ),
    "aarch64": (
        (0xC00000B7, (29,)),  # aarch64
        (0x40000028, (54,)),  # arm (32-bit compat)
    ),
    "riscv64": ((0xC00000F3, (29,)),),  # the generic table; no 32-bit compat
}


def _instruction(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program(machine: str) -> bytes:
    """The classic BPF program (``struct sock_filter`` array) for ``machine``
    (``os.uname().machine``); a ValueError for a machine without a table here."""
    try:
        tables = _TABLES[machine]
    except KeyError:
        raise ValueError(
            f"no TIOCSTI filter for this machine ({machine}): the sandbox could type into "
            "the owner's terminal"
        ) from None
    deny = _instruction(_RET_K, SECCOMP_RET_ERRNO | EPERM)
    allow = _instruction(_RET_K, SECCOMP_RET_ALLOW)
    # The request check, shared by every table: [ld arg1; jeq each refused request ?
    # deny : next; the last one's "no" jumps over deny to allow].
    check = _instruction(_LD_W_ABS, _ARG1_LOW)
    for index, refused in enumerate(REFUSED_REQUESTS):
        last = index == len(REFUSED_REQUESTS) - 1
        check += _instruction(_JEQ_K, refused, len(REFUSED_REQUESTS) - 1 - index, int(last))
    tail = check + deny + allow
    # Built back to front, so each jump knows how far the shared tail lies.
    body = b""
    for arch, numbers in reversed(tables):
        block = b""
        # The next table's block starts right after this one: a foreign arch jumps there.
        for number in reversed(numbers):
            # jt: to the check, past the rest of this block, its "allow" return, every
            # later block and the foreign arch's "allow" return.
            ahead = (len(block) + len(body)) // 8 + 2
            block = _instruction(_JEQ_K, number, ahead, 0) + block
        block = _instruction(_LD_W_ABS, _NR) + block + allow
        # Load the arch, compare: on a match fall into the block, else skip it.
        skip = len(block) // 8
        block = _instruction(_LD_W_ABS, _ARCH) + _instruction(_JEQ_K, arch, 0, skip) + block
        body = block + body
    return body + allow + tail


def forbid_terminal_injection(machine: str) -> None:
    """Install the filter on this process (and so on everything it starts from now on)."""
    import ctypes  # only here: the command's start waits for none of its other users

    program = filter_program(machine)
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    fprog = SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    flags = SECCOMP_FILTER_FLAG_SPEC_ALLOW
    number = _SECCOMP_SYSCALL[machine]
    if libc.syscall(number, SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(fprog)) == 0:
        return
    if ctypes.get_errno() not in (errno.EINVAL, errno.ENOSYS):  # (kernels before 4.17)
        raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")

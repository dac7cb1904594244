"""Socket and descriptor set-up that needs no event loop, for a process to do before it
imports one.

The sandbox entry binds the shim's listener with these and starts the user's command
before it imports asyncio (sandbox/entry.py): a connection that arrives meanwhile waits
in the listener's queue. Everything here imports only the standard library's ``os``,
``stat`` and ``_socket`` at import: not the ``socket`` module, whose enums cost every
sandbox's start more than the entry's own work (the host's callers have it loaded
anyway), nor sandbridge's exceptions (``enum``), imported where one is raised.
"""

from __future__ import annotations

import _socket
import os
import stat

TYPE_CHECKING = False  # typing's, without importing typing for it
if TYPE_CHECKING:
    import socket
    from typing import TypeVar

    _Socket = TypeVar("_Socket", bound=_socket.socket)

# Connections waiting to be accepted on a host's Unix socket. The event loop listens
# again with its own default (100) unless told: every server passes this, so a sandbox
# that opens a burst of connections does not make the next ones fail with EAGAIN.
UNIX_BACKLOG = 512

# Linux's SO_PASSRIGHTS (include/uapi/asm-generic/socket.h); Python may not name it yet.
SO_PASSRIGHTS: int = getattr(_socket, "SO_PASSRIGHTS", 83)

# Set once the kernel said it cannot refuse descriptors: warn once, not per socket.
_refusal_unsupported: list[bool] = []


def refuse_descriptors(sock: _socket.socket) -> bool:
    """Have the kernel refuse descriptors sent to the Unix socket ``sock`` (inherited by
    the connections a listening socket accepts). False where the kernel cannot."""
    try:
        sock.setsockopt(_socket.SOL_SOCKET, SO_PASSRIGHTS, 0)
    except OSError as exc:
        if not _refusal_unsupported:
            from sandbridge import log  # only here: logging costs a cold start

            _refusal_unsupported.append(True)
            log.warning("descriptors.refusal_unsupported", error=exc.strerror or str(exc))
        return False
    return True


def bind_unix_socket(path: str | os.PathLike[str]) -> socket.socket:
    """Bind a listening Unix socket at ``path`` with mode 0600 (never wider, not even briefly).

    Its connections refuse descriptors (:func:`refuse_descriptors`): none of the host's
    listeners expects one, and one sent anyway could block whoever closes it."""
    import socket  # loaded already in every caller but the sandbox entry (below)

    return _bound(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC), path)


def bind_unix_listener(path: str | os.PathLike[str]) -> _socket.socket:
    """:func:`bind_unix_socket` as the ``socket`` module's C core's socket, for the
    sandbox entry before its command starts: ``socket.socket(fileno=sock.detach())``
    makes it a ``socket.socket`` once something needs one."""
    flags = _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC
    return _bound(_socket.socket(_socket.AF_UNIX, flags), path)


def _bound(sock: _Socket, path: str | os.PathLike[str]) -> _Socket:
    """``sock``, refusing descriptors, bound at ``path`` (0600), listening, non-blocking;
    closed if any of that fails."""
    try:
        refuse_descriptors(sock)
        listen_private(sock, path, UNIX_BACKLOG)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


# A Unix socket's address holds at most 107 bytes of path before its terminating NUL
# (``sun_path`` is 108 bytes: unix(7)). A longer path cannot be bound or reached, and the
# kernel's own message ("AF_UNIX path too long") names neither the path nor a way out.
MAX_SOCKET_PATH = 107


def check_socket_path(path: str | os.PathLike[str]) -> None:
    """Refuse a Unix socket path longer than :data:`MAX_SOCKET_PATH` bytes, naming it
    and what to do (its directory comes from ``XDG_RUNTIME_DIR`` or the state root)."""
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH:
        from sandbridge.exceptions import RuntimeDirError

        raise RuntimeDirError(
            f"{path}: {size} bytes, longer than the {MAX_SOCKET_PATH} a Unix socket's path "
            "may have; set XDG_RUNTIME_DIR to a shorter directory"
        )


def listen_private(sock: _socket.socket, path: str | os.PathLike[str], backlog: int) -> None:
    """Bind the Unix socket ``sock`` at ``path`` with mode 0600 (never wider, not even
    briefly) and listen; a path too long to bind is a :class:`RuntimeDirError`.

    The sandbox can write the directory of ``relay.sock`` and ``egress.sock`` (a daemon
    that restarts binds them anew under a live sandbox): a link it renames over the path
    right after the bind must not take the mode. A ``chmod`` by path followed it (the
    owner's home made 0600); the mode is set through a descriptor of the path itself,
    opened without following a link, and a path that is no longer a socket is refused."""
    check_socket_path(path)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    _make_private(path)
    sock.listen(backlog)


def _make_private(path: str | os.PathLike[str]) -> None:
    """Mode 0600 on the socket at ``path`` (the umask gave it, unless a default ACL of
    the directory said otherwise), never through a link."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        from sandbridge.exceptions import RuntimeDirError

        raise RuntimeDirError(f"{path}: gone as it was bound ({exc.strerror}); not used") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISSOCK(mode):
            what = "a symbolic link" if stat.S_ISLNK(mode) else "something that is not a socket"
            from sandbridge.exceptions import RuntimeDirError

            raise RuntimeDirError(
                f"{path}: replaced by {what} as it was bound (the sandbox can write its "
                "directory); not used"
            )
        # A socket (ours, or one the sandbox put there, which 0600 costs nothing): the
        # descriptor's own inode, never a link's target.
        os.chmod(f"/proc/self/fd/{fd}", 0o600)
    finally:
        os.close(fd)


def keep_inherited_descriptors() -> None:
    """Make every descriptor above 2 close-on-exec.

    uvloop's subprocesses do not close what they inherit (``close_fds`` is not honoured),
    and Python makes only its own descriptors close-on-exec: whatever whoever started
    this process left open (a file, a directory, a socket) reached its children, and
    through the sandbox backend the sandbox, where a descriptor is a capability no mount
    takes back (a directory's reaches every file under it). Children get 0-2 and their
    ``pass_fds`` only.
    """
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            # Not contextlib.suppress: the entry runs this before its command starts, and
            # contextlib's imports would cost that start.
            try:  # noqa: SIM105
                os.set_inheritable(fd, False)
            except OSError:  # the listing's own descriptor, gone
                pass


def reap(pid: int) -> int:
    """Wait for the child ``pid`` to end and return its exit status as a shell gives it
    (128 + N for a signal)."""
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code

"""systemd ``--user`` units for the daemon, and the socket systemd hands it.

``sandbridge daemon install`` writes the two units shipped with the package (a socket
unit, so that the first client starts the daemon, and the service) to the user's unit
directory, with the command that runs this very sandbridge. Under socket activation
systemd binds ``daemon.sock`` itself and starts the daemon with the listening socket as
descriptor 3, ``LISTEN_FDS=1`` and ``LISTEN_PID`` set to the daemon's pid (sd_listen_fds(3)).
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
from collections.abc import MutableMapping
from importlib import resources
from pathlib import Path

from sandbridge.exceptions import DaemonError

UNITS = ("sandbridge.socket", "sandbridge.service")
# sd_listen_fds(3): passed descriptors start at 3.
LISTEN_FDS_START = 3
COMMAND_PLACEHOLDER = "@SANDBRIDGE@"


def unit_dir(environ: MutableMapping[str, str] | None = None) -> Path:
    """``${XDG_CONFIG_HOME:-~/.config}/systemd/user``."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def unit_text(name: str) -> str:
    """The shipped unit ``name``, its command set to this interpreter's sandbridge."""
    text = resources.files("sandbridge.daemon").joinpath("units", name).read_text()
    # -P: systemd --user starts services in the home directory, which a sandbox whose
    # workdir it is can write; `python -m` would put it first on the module path.
    command = shlex.join([sys.executable, "-P", "-m", "sandbridge.cli"])
    return text.replace(COMMAND_PLACEHOLDER, command)


def install(directory: Path) -> list[Path]:
    """Write the units to ``directory`` (made if missing); return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in UNITS:
        path = directory / name
        temporary = path.with_name(f".{name}.tmp")
        temporary.write_text(unit_text(name))
        os.replace(temporary, path)
        written.append(path)
    return written


def inherited_socket(environ: MutableMapping[str, str] | None = None) -> socket.socket | None:
    """systemd's listening socket when it started this process for one, else None.

    The variables are removed afterwards so that no child takes them for its own."""
    environ = os.environ if environ is None else environ
    if environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    count = environ.get("LISTEN_FDS", "")
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        environ.pop(name, None)
    if count != "1":
        raise DaemonError(f"LISTEN_FDS={count!r}: the daemon takes exactly one socket")
    try:
        sock = socket.socket(fileno=LISTEN_FDS_START)
    except OSError as exc:
        raise DaemonError(f"descriptor {LISTEN_FDS_START} from systemd: {exc.strerror}") from None
    listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_SEQPACKET or not listening:
        sock.detach()
        raise DaemonError(
            "descriptor 3 from systemd is not a listening Unix SOCK_SEQPACKET socket; "
            "use the shipped sandbridge.socket (ListenSequentialPacket=)"
        )
    sock.set_inheritable(False)
    return sock

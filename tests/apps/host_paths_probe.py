"""Test app: from inside a sandbox, look for sandbridge's host paths and try to use them.

Usage: host_paths_probe.py FIFO
Prints ``PROBE-READY`` once running, then reads one JSON request from FIFO (the test
writes it once the sessions to look for exist, including ones started after this one):
``{"paths": [...], "roots": [...], "home": PATH or null}``. Prints ``PROBE <json>``:

* ``paths``: each path that exists inside (a directory only if it holds anything), and
  whether a Unix socket there accepted a connection;
* ``found``: under each of ``roots``, every socket and every name sandbridge uses
  (except this session's own ``/run/ags-webview-relay``);
* ``plant``: with ``home``, what happened to attempts to move the owner's key dir and its
  parents aside and make a key dir of the sandbox's own in its place.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import sys

# State roots are sandbridge-<uid>, or sandbridge-<uid>.<random> (mkdtemp): not a
# package's sandbridge-0.1.0.dist-info, which a checkout under /tmp brings into view.
NAMES = re.compile(
    r"ags-webview-relay-|\.ags-webview-relay-|sandbridge-[0-9]+(\.[A-Za-z0-9_]+)?$"
    r"|control\.sock$|owner\.key$|requesters$"
)
OWN = "/run/ags-webview-relay"


def look(path: str) -> str | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISDIR(info.st_mode):
        # A mask is an empty directory: only what is in it counts.
        entries = os.listdir(path)
        return f"holds {sorted(entries)}" if entries else None
    if not stat.S_ISSOCK(info.st_mode):
        return "visible"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(path)
        except OSError as exc:
            return f"socket ({exc.strerror})"
    return "connected"


def walk(root: str) -> list[str]:
    found = []
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(top, d) != OWN]
        for name in dirs + files:
            path = os.path.join(top, name)
            try:
                is_socket = stat.S_ISSOCK(os.lstat(path).st_mode)
            except OSError:
                continue
            if is_socket or NAMES.match(name):
                found.append(path)
    return found


def attempt(action: str, function: object, *args: str) -> str:
    try:
        function(*args)  # type: ignore[operator]
    except OSError as exc:
        return f"{action}: {exc.strerror}"
    return f"{action}: done"


def plant(home: str) -> list[str]:
    config, key_dir = f"{home}/.config", f"{home}/.config/sandbridge"
    state = f"{home}/.local"
    results = [
        attempt("rename key dir", os.rename, key_dir, f"{home}/.config/moved"),
        attempt("rename .config", os.rename, config, f"{home}/.config-moved"),
        attempt("rename .local", os.rename, state, f"{home}/.local-moved"),
    ]

    def write_key() -> None:
        os.makedirs(key_dir, exist_ok=True)
        with open(f"{key_dir}/owner.key", "w") as file:
            file.write("11" * 32 + "\n")

    results.append(attempt("plant key", write_key))
    return results


def main() -> None:
    print("PROBE-READY", flush=True)
    with open(sys.argv[1]) as fifo:
        request = json.loads(fifo.read())
    report = {
        "paths": {p: seen for p in request["paths"] if (seen := look(p)) is not None},
        "found": [path for root in request["roots"] for path in walk(root)],
        "plant": plant(request["home"]) if request["home"] else [],
    }
    print("PROBE " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

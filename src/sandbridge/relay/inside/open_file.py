"""``sandbridge-open file:///path/page.html`` inside the sandbox: what to ask the host for.

The file is read here, inside, by the helper, with the sandbox's own rights: the host
only ever gets what ``sandbridge-open URL`` or ``--html FILE`` would send, never a path
(a path names a file of the sandbox; on the host it would name one of the owner's). So a
symbolic link is followed as ``cat`` would follow it: it leads nowhere the sandbox could
not read itself. What is refused, naming the URL: a URL protocol/file_url.py refuses,
a file that is not a regular file (opened without blocking, so a FIFO or a device never
holds the helper up), one past the snapshot limit (read no further), one that is not
UTF-8 (the host serves a snapshot as UTF-8).

A page that only redirects to an app of the sandbox (``jupyter lab``'s
``jpserver-N-open.html``: :mod:`sandbridge.protocol.redirect_page`) gives that app's URL,
opened as ``sandbridge-open URL`` opens it; any other page is sent as ``--html`` sends it.
"""

from __future__ import annotations

import os
import stat

from sandbridge.exceptions import FileOpenRefused
from sandbridge.protocol.file_url import file_url_path
from sandbridge.protocol.limits import MAX_HTML_SNAPSHOT_BYTES
from sandbridge.protocol.open_request import shown
from sandbridge.protocol.redirect_page import redirect_target


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in a word."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((word for test, word in kinds if test(mode)), "not a regular file")


def read_page(path: str, url: str) -> bytes:
    """The bytes of the regular file at ``path`` (named by ``url``), at most the snapshot
    limit; anything else is a :class:`FileOpenRefused` naming the URL."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise FileOpenRefused(f"cannot open {shown(path)} ({exc.strerror}): {shown(url)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileOpenRefused(
                f"{shown(path)} is {_kind(mode)}, not a file: {shown(url)}; open an HTML file"
            )
        chunks: list[bytes] = []
        left = MAX_HTML_SNAPSHOT_BYTES + 1
        # Read one byte past the limit, no further: a file may be sparse, or grow meanwhile.
        while left > 0 and (chunk := os.read(fd, left)):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_HTML_SNAPSHOT_BYTES:
        raise FileOpenRefused(
            f"{shown(path)} is larger than {MAX_HTML_SNAPSHOT_BYTES} bytes, the snapshot limit: "
            "serve the page from an app instead and open its URL"
        )
    return data


def _text(page: bytes, path: str) -> str:
    try:
        return page.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileOpenRefused(
            f"{shown(path)} is not UTF-8 (byte 0x{page[exc.start]:02x} at offset {exc.start}); "
            "a page is shown as UTF-8: save it as UTF-8"
        ) from None


def file_open(url: str) -> str | bytes:
    """What ``sandbridge-open`` sends for the ``file:`` URL ``url``: the URL its page only
    redirects to (a ``str``: an app of the sandbox, or an external URL asked for as such),
    else the page's bytes for a snapshot."""
    path = file_url_path(url)
    page = read_page(path, url)
    target = redirect_target(_text(page, path))
    return page if target is None else target

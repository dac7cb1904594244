"""A ``file://`` URL given to ``sandbridge-open``: checked, and turned into the path it
names inside the sandbox (sans-I/O).

Tools open a local page through the browser with such a URL (``jupyter lab`` opens
``file:///.../jpserver-N-open.html``, a page that redirects to its token URL). The path is
the sandbox's: only ``sandbridge-open``, inside, reads the file (relay/inside/open_file.py);
the host never sees the path, let alone opens it on its own filesystem.
A browser would read a loose spelling its own way, so every one is refused here, naming
the URL: a host part (``file://server/x.html``), a query or fragment, a malformed or
slash-making percent-escape (``%2F``, ``%00``), a ``.`` or ``..`` segment (spelt plainly or
percent-encoded), an empty segment, a name that does not end in ``.html`` or ``.htm``
(a browser shows a ``.txt`` or ``.png`` as what it is; the host serves a page as HTML).
"""

from __future__ import annotations

from sandbridge.exceptions import FileOpenRefused
from sandbridge.protocol.limits import MAX_OPEN_URL_LENGTH
from sandbridge.protocol.open_request import shown

_SCHEME = "file://"
# What a browser shows as a page; a file named otherwise is not one to a browser either.
HTML_SUFFIXES = (".html", ".htm")
_HEX = "0123456789abcdefABCDEF"


def is_file_url(url: str) -> bool:
    """Whether ``url`` is a ``file:`` URL (any case of the scheme), to be checked by
    :func:`file_url_path`."""
    return url[:5].lower() == "file:"


def _percent_decoded(text: str, url: str) -> bytes:
    """``text`` with its ``%HH`` escapes decoded; a ``%`` not followed by two hex digits,
    or an escape that decodes to ``/`` or NUL, is refused."""
    out = bytearray()
    i = 0
    while i < len(text):
        char = text[i]
        if char != "%":
            out += char.encode("ascii")
            i += 1
            continue
        pair = text[i + 1 : i + 3]
        if len(pair) != 2 or any(c not in _HEX for c in pair):
            raise FileOpenRefused(f"file URL has a malformed percent-escape: {shown(url)}")
        byte = int(pair, 16)
        if byte in (0x00, 0x2F):
            raise FileOpenRefused(
                f"file URL has an escaped {'NUL' if byte == 0 else '/'} (%{pair}), which no "
                f"file name holds: {shown(url)}"
            )
        out.append(byte)
        i += 3
    return bytes(out)


def file_url_path(url: str) -> str:
    """The absolute path inside the sandbox that ``url`` (``file:///dir/page.html``) names,
    percent-escapes decoded; a :class:`FileOpenRefused` names the URL and what is wrong."""
    if len(url) > MAX_OPEN_URL_LENGTH:
        raise FileOpenRefused(f"url is {len(url)} characters; the limit is {MAX_OPEN_URL_LENGTH}")
    if not url or any(not 0x21 <= ord(ch) <= 0x7E for ch in url):
        raise FileOpenRefused(
            f"url must be printable ASCII without spaces (percent-encode the rest), "
            f"got {shown(url)}"
        )
    if url[: len(_SCHEME)].lower() != _SCHEME:
        raise FileOpenRefused(f"file URL must start with file:///, got {shown(url)}")
    after = url[len(_SCHEME) :]
    if not after.startswith("/"):
        host = after.split("/", 1)[0]
        raise FileOpenRefused(
            f"file URL names a host ({shown(host)}): only file:///PATH, a file of this "
            f"sandbox, is opened: {shown(url)}"
        )
    if "?" in after or "#" in after or "\\" in after:
        raise FileOpenRefused(
            f"file URL has a query, a fragment or a '\\'; a file has none: {shown(url)}"
        )
    try:
        path = _percent_decoded(after, url).decode("utf-8")
    except UnicodeDecodeError:
        raise FileOpenRefused(f"file URL is not UTF-8 once percent-decoded: {shown(url)}") from None
    segments = path.split("/")[1:]
    if any(segment in ("", ".", "..") for segment in segments):
        raise FileOpenRefused(
            f"file URL has an empty, '.' or '..' segment: name the file by its own path, "
            f"got {shown(url)}"
        )
    if not path.lower().endswith(HTML_SUFFIXES):
        raise FileOpenRefused(
            f"file URL does not name an HTML file (.html or .htm): {shown(url)}; "
            "sandbridge-open shows HTML pages only"
        )
    return path

"""The open request on ``relay.sock``: the sandbox asks the host to open a URL (sans-I/O).

Request: ``{"type":"open","url":"http://localhost:5173/a?x=1#f"}``, or
``{"type":"open","html_bytes":N}`` followed by N bytes of HTML. Answer:
``{"ok":true,"url":"http://<label>.localhost:43125/a?x=1#f","action":"browser"}`` or
``{"ok":false,"error":"..."}`` (docs/open.md, docs/contract.md).

A URL naming the sandbox's own loopback (:class:`LocalTarget`) is resolved to the app's
host origin with its path, query and fragment kept byte for byte; any other http(s) URL
(:class:`ExternalTarget`) is passed on as it is, never resolved. The URL ends up on the
owner's terminal and as an argument of the owner's browser command, so everything but
printable ASCII is refused: no escape sequence, no space, no newline gets through.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from typing import Any

from sandbridge.exceptions import RegistrationError
from sandbridge.protocol.jsonline import encode_object
from sandbridge.protocol.limits import MAX_HTML_SNAPSHOT_BYTES, MAX_OPEN_URL_LENGTH

# How much of an offending value a refusal quotes: enough to recognise it, never an echo
# of a whole hostile message.
MAX_SHOWN_VALUE = 120
_LOCAL_SCHEMES = {"http": "http", "ws": "ws"}
_TLS_SCHEMES = ("https", "wss")
# Names that mean "this machine": inside the sandbox, the sandbox's own loopback.
_LOOPBACK_NAMES = ("localhost",)


class OpenAction(enum.Enum):
    """What the host does with an open request (``--open``, ``open = ...``)."""

    BROWSER = "browser"  # run the owner's browser command with the URL
    PRINT = "print"  # print one line the owner can click
    ASK = "ask"  # ask on the terminal, else print


class ExternalOpens(enum.Enum):
    """What the host does with a URL that is not the sandbox's (``--open-external``)."""

    PRINT = "print"  # printed with a warning, never run (the default)
    ALLOW = "allow"  # carried out like a resolved URL


@dataclass(frozen=True, slots=True)
class LocalTarget:
    """A URL of the sandbox's own loopback: ``scheme`` (http or ws), the app's sandbox
    ``port``, and ``rest`` (path, query and fragment, exactly as sent; at least ``/``)."""

    scheme: str
    port: int
    rest: str

    @property
    def path(self) -> str:
        """The path alone, without query and fragment."""
        return self.rest.split("#", 1)[0].split("?", 1)[0]

    def on(self, origin: str, extra_query: str | None = None) -> str:
        """This URL on the app's host ``origin`` (``http://<name>:<port>``); with
        ``extra_query`` (``name=value``) added as the query's last parameter."""
        rest = self.rest
        if extra_query is not None:
            before, hash_, fragment = rest.partition("#")
            path, _, query = before.partition("?")
            query = f"{query}&{extra_query}" if query else extra_query
            rest = f"{path}?{query}{hash_}{fragment}"
        return self.scheme + origin.removeprefix("http") + rest


@dataclass(frozen=True, slots=True)
class ExternalTarget:
    """A URL that is not the sandbox's: opened only as the owner allows, never resolved."""

    url: str


@dataclass(frozen=True, slots=True)
class HtmlTarget:
    """Inline HTML (``sandbridge-open --html``): ``size`` bytes follow the request line,
    served as a snapshot on a dedicated origin."""

    size: int


OpenTarget = LocalTarget | ExternalTarget | HtmlTarget


def shown(value: object) -> str:
    """``repr(value)``, cut to :data:`MAX_SHOWN_VALUE` characters."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_VALUE else text[:MAX_SHOWN_VALUE] + "..."


def _ends_in_a_number(name: str) -> bool:
    """The URL Standard's test: a host whose last label is a number (``2130706433``,
    ``127.1``, ``0x7f.1``) is an IPv4 address to a browser, whatever its spelling."""
    last = name.rsplit(".", 1)[-1]
    if last.isascii() and last.isdigit():
        return True
    return last[:2] in ("0x", "0X") and all(c in "0123456789abcdefABCDEF" for c in last[2:])


def _is_loopback(host: str, url: str) -> bool:
    """Whether ``host`` is the sandbox's own loopback; refuses the spellings a browser
    would read as an address that this check cannot see (``127.1``, ``%6cocalhost``), so
    that nothing naming the owner's loopback is passed on as an external URL."""
    name = host.lower().removesuffix(".")
    if "%" in name:
        raise RegistrationError(f"url has a percent-encoded host: {shown(url)}")
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    bracketed = name.startswith("[") and name.endswith("]")
    if not bracketed and not _ends_in_a_number(name):
        return False
    try:
        address = ipaddress.ip_address(name[1:-1] if bracketed else name)
    except ValueError:
        raise RegistrationError(
            f"url has a host a browser reads as an IP address written another way: "
            f"{shown(url)}; write it as a.b.c.d or [v6]"
        ) from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def _split_authority(authority: str, url: str) -> tuple[str, str, str | None]:
    """``userinfo@host:port`` into its parts; the port as text, ``None`` when absent."""
    userinfo, at, hostport = authority.rpartition("@")
    if hostport.startswith("["):
        host, bracket, after = hostport.partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise RegistrationError(f"url has a malformed [IPv6] host: {shown(url)}")
        host, port = host + "]", after[1:] if after else None
    else:
        host, colon, port_text = hostport.partition(":")
        port = port_text if colon else None
    if not host:
        raise RegistrationError(f"url has no host: {shown(url)}")
    return (userinfo if at else ""), host, port


def classify_url(url: object) -> OpenTarget:
    """Validate an open request's ``url`` and tell a sandbox-local one from the rest."""
    if not isinstance(url, str):
        raise RegistrationError(f"url must be a string, got {shown(url)}")
    if len(url) > MAX_OPEN_URL_LENGTH:
        raise RegistrationError(f"url is {len(url)} characters; the limit is {MAX_OPEN_URL_LENGTH}")
    if not url or any(not 0x21 <= ord(ch) <= 0x7E for ch in url):
        raise RegistrationError(
            f"url must be printable ASCII without spaces (percent-encode the rest), "
            f"got {shown(url)}"
        )
    if "\\" in url:
        # Browsers read a backslash as "/": http://localhost\@example.com/ is localhost.
        raise RegistrationError(f"url must not contain '\\', got {shown(url)}")
    scheme, sep, after = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https", "ws", "wss"):
        raise RegistrationError(f"url must start with http://, https:// or ws://, got {shown(url)}")
    end = min((i for i in (after.find(c) for c in "/?#") if i >= 0), default=len(after))
    authority, rest = after[:end], after[end:]
    userinfo, host, port_text = _split_authority(authority, url)
    if not _is_loopback(host, url):
        if scheme not in ("http", "https"):
            raise RegistrationError(f"a browser cannot open {shown(url)}: not http or https")
        return ExternalTarget(url)
    if userinfo:
        raise RegistrationError(f"url must not carry a user name or password, got {shown(url)}")
    if scheme in _TLS_SCHEMES:
        raise RegistrationError(
            f"{shown(url)} is TLS to the sandbox's own loopback; the relay carries plain "
            "HTTP: serve the app over http:// and open that"
        )
    port = 80
    if port_text:
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5):
            raise RegistrationError(f"url has a port that is not 1..65535: {shown(url)}")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise RegistrationError(f"url has a port that is not 1..65535: {shown(url)}")
    return LocalTarget(_LOCAL_SCHEMES[scheme], port, rest if rest.startswith("/") else "/" + rest)


def parse_open_message(message: dict[str, Any]) -> OpenTarget:
    """The target of a decoded ``{"type":"open",...}`` message."""
    if "html_bytes" in message:
        if "url" in message:
            raise RegistrationError("send url or html_bytes, not both")
        size = message["html_bytes"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise RegistrationError(f"html_bytes must be a byte count, got {shown(size)}")
        if size > MAX_HTML_SNAPSHOT_BYTES:
            raise RegistrationError(
                f"the HTML is {size} bytes; the snapshot limit is {MAX_HTML_SNAPSHOT_BYTES}"
            )
        return HtmlTarget(size)
    if "url" not in message:
        raise RegistrationError("url is missing: send the URL to open")
    return classify_url(message["url"])


def encode_open_request(url: str) -> bytes:
    """The request line ``sandbridge-open`` sends."""
    return encode_object({"type": "open", "url": url})


def encode_open_html_request(html: bytes) -> bytes:
    """The request ``sandbridge-open --html`` sends: the line, then the page's bytes."""
    return encode_object({"type": "open", "html_bytes": len(html)}) + html


def encode_open_ok(url: str, action: str) -> bytes:
    """The success answer: the URL the host opens (or shows), and what it did with it."""
    return encode_object({"ok": True, "url": url, "action": action})

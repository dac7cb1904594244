"""What the relay changes in a message on its way through, as pure functions.

Requests: the target is checked (origin-form only) and gets the base-path rule; the
Host header must name this app's own origin; hop-by-hop headers and every header named
in ``Connection`` are dropped; inbound ``Forwarded``/``X-Forwarded-*`` are dropped and
the relay sets its own; the body framing is re-stated by the relay. Responses: hop-by-hop
headers dropped, a ``Set-Cookie`` of a relay cookie (``sandbridge_*``) dropped, a
``Referrer-Policy`` added if the app set none, framing re-stated for the browser's
connection.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.base_path import apply_base_path
from sandbridge.protocol.http.fields import field_values
from sandbridge.protocol.http.origin_policy import AppOrigin, check_host_values, check_origin_values
from sandbridge.protocol.http.parser import Headers, RequestHead, ResponseHead
from sandbridge.protocol.http.private_access import is_relay_set_cookie, strip_relay_cookies

# RFC 9110 section 7.6.1 plus the legacy proxy fields browsers and apps still send.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-authenticate",
        b"proxy-authorization",
    }
)
# Set by the relay only: a browser page must not be able to forge what the app sees.
FORWARDING_FIELDS = frozenset(
    {
        b"forwarded",
        b"x-forwarded-for",
        b"x-forwarded-host",
        b"x-forwarded-proto",
        b"x-forwarded-port",
        b"x-forwarded-prefix",
        b"x-forwarded-server",
        b"x-real-ip",
    }
)
FRAMING = frozenset({b"content-length", b"transfer-encoding"})
DEFAULT_REFERRER_POLICY = b"Referrer-Policy: same-origin"


class Framing(enum.Enum):
    """How a message body is delimited."""

    NONE = "none"
    LENGTH = "length"
    CHUNKED = "chunked"
    CLOSE = "close"


@dataclass(slots=True)
class UpstreamRequest:
    """A normalised request head for the app and how its body follows."""

    head: bytes
    method: bytes
    headers: Headers  # end-to-end headers as sent (Host first), without framing fields
    framing: Framing
    path: str
    upgrade: bool


@dataclass(slots=True)
class BrowserResponse:
    """A normalised response head for the browser and how its body follows."""

    head: bytes
    framing: Framing
    keep_alive: bool


def _connection_tokens(connection_values: list[bytes]) -> set[bytes]:
    tokens: set[bytes] = set()
    for value in connection_values:
        tokens.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return tokens


# The fields any rule below looks up, and those never forwarded as they came.
_LOOKED_UP = frozenset(
    {
        b"host",
        b"origin",
        b"connection",
        b"transfer-encoding",
        b"content-length",
        b"upgrade",
        b"location",
        b"content-location",
        b"cookie",
        b"set-cookie",
        b"referrer-policy",
        b"clear-site-data",
    }
)
_LOCATIONS = frozenset({b"location", b"content-location"})
_NOT_END_TO_END = HOP_BY_HOP | FRAMING
_NOT_FORWARDED = _NOT_END_TO_END | FORWARDING_FIELDS | {b"host"}


def _scan(
    headers: Headers, dropped: frozenset[bytes]
) -> tuple[dict[bytes, list[bytes]], list[tuple[bytes, bytes, bytes]]]:
    """One pass over a head's fields: the values of the looked-up fields by lower-case
    name, and the fields not in ``dropped`` as (lower-case name, name, value).

    Every rule used to scan the field list on its own (Host, Origin, framing,
    Connection, Upgrade, Cookie, Location: up to eight passes, each lower-casing every
    name again); a head passes through the relay twice per request, so one pass that
    collects what the rules need is a measurable part of the per-request CPU.
    """
    found: dict[bytes, list[bytes]] = {}
    kept: list[tuple[bytes, bytes, bytes]] = []
    for name, value in headers:
        lowered = name.lower()
        if lowered in _LOOKED_UP:
            found.setdefault(lowered, []).append(value)
        if lowered not in dropped:
            kept.append((lowered, name, value))
    return found, kept


def _end_to_end(
    found: dict[bytes, list[bytes]], kept: list[tuple[bytes, bytes, bytes]]
) -> list[tuple[bytes, bytes, bytes]]:
    """Drop the fields that ``Connection`` names from a scanned head."""
    connection = found.get(b"connection")
    if not connection:
        return kept
    if len(connection) == 1 and connection[0].strip().lower() == b"keep-alive":
        # The usual value (nginx sends it with every response) names only a field that
        # is hop-by-hop anyway: nothing more to drop, no token set to build.
        return kept
    named = _connection_tokens(connection)
    return [field for field in kept if field[0] not in named]


def end_to_end_fields(
    headers: Headers, also_dropped: frozenset[bytes] = frozenset()
) -> list[tuple[bytes, bytes]]:
    """The fields of a head that go on to the next hop: none that is hop-by-hop, named by
    its ``Connection`` field, or in ``also_dropped`` (lower-case names). Every hop that
    rewrites a head (the relay both ways, the shim's v1 exchange, the egress proxy)
    drops fields through this."""
    found, kept = _scan(headers, HOP_BY_HOP | also_dropped)
    return [(name, value) for _, name, value in _end_to_end(found, kept)]


def _framing_of(found: dict[bytes, list[bytes]]) -> Framing:
    encodings = found.get(b"transfer-encoding")
    if encodings:
        if len(encodings) != 1 or encodings[0].strip().lower() != b"chunked":
            raise HttpError(501, f"unsupported Transfer-Encoding {b', '.join(encodings)!r}")
        return Framing.CHUNKED
    lengths = found.get(b"content-length")
    if lengths and int(lengths[0]) > 0:
        return Framing.LENGTH
    return Framing.NONE


def request_framing(headers: Headers) -> Framing:
    """Body framing of a request whose head llhttp already accepted."""
    return _framing_of(_scan(headers, _NOT_FORWARDED)[0])


def build_upstream_request(
    head: RequestHead,
    *,
    base_path: str,
    origin: AppOrigin,
    client_host: str,
    session_origins: frozenset[bytes] | None = None,
) -> UpstreamRequest:
    """Validate a browser request head and build the head the app receives.

    ``session_origins`` are the origins allowed to send upgrades and unsafe methods
    (default: this app's own).
    """
    check_request_target(head)
    fields = request_fields(
        head,
        origin=origin,
        client_host=client_host,
        session_origins=origin.origins if session_origins is None else session_origins,
    )
    return fields.request(head, base_path)


def check_request_target(head: RequestHead) -> None:
    """Refuse what makes a request a proxy request: CONNECT, a target not in origin-form."""
    if head.method == b"CONNECT":
        raise HttpError(405, "CONNECT is refused: this is an app origin, not a proxy")
    if not head.target.startswith(b"/"):
        raise HttpError(
            400, f"request-target {head.target[:80]!r} must be origin-form: this is not a proxy"
        )


@dataclass(slots=True)
class RequestFields:
    """What a request head's fields become on their way to the app, whatever the target."""

    block: bytes  # the field lines for the app (Host first) and the empty line
    headers: Headers  # end-to-end headers as sent (Host first), without framing fields
    framing: Framing

    def request(self, head: RequestHead, base_path: str) -> UpstreamRequest:
        """The whole head for the app: the request line, then these fields."""
        try:
            target = head.target.decode("ascii")
        except UnicodeDecodeError:
            raise HttpError(400, "request-target must be ASCII") from None
        path = apply_base_path(target, base_path)
        return UpstreamRequest(
            head=head.method + b" " + path.encode("ascii") + b" HTTP/1.1\r\n" + self.block,
            method=head.method,
            headers=self.headers,
            framing=self.framing,
            path=path,
            upgrade=head.upgrade,
        )


def request_fields(
    head: RequestHead, *, origin: AppOrigin, client_host: str, session_origins: frozenset[bytes]
) -> RequestFields:
    """Check a request head's fields (Host, Origin, framing) and build the app's."""
    found, kept = _scan(head.headers, _NOT_FORWARDED)
    host = check_host_values(found.get(b"host", []), origin)
    check_origin_values(found.get(b"origin", []), head.method, head.upgrade, session_origins)
    framing = _framing_of(found)
    forwarded = [(name, value) for _, name, value in _end_to_end(found, kept)]
    if b"cookie" in found:
        forwarded = strip_relay_cookies(forwarded)
    headers: Headers = [
        (b"Host", host),
        *forwarded,
        (b"X-Forwarded-For", client_host.encode("ascii")),
        (b"X-Forwarded-Proto", b"http"),
        (b"X-Forwarded-Host", host),
    ]
    lines = [name + b": " + value for name, value in headers]
    if framing is Framing.CHUNKED:
        lines.append(b"Transfer-Encoding: chunked")
    elif framing is Framing.LENGTH:
        lines.append(b"Content-Length: " + found[b"content-length"][0])
    if head.upgrade:
        lines.append(b"Connection: Upgrade")
        lines.append(b"Upgrade: " + found[b"upgrade"][0])
    lines.append(b"\r\n")
    return RequestFields(b"\r\n".join(lines), headers, framing)


class ConnectionHeads:
    """The request and response heads of one browser connection, translated with a
    memory of the last translation each way.

    A browser repeats itself on a keep-alive connection: the same fields on request
    after request (only the target changes between two images or two API calls), and
    an app answers one resource with the same fields each time. Checking and rebuilding
    fields was about a quarter of the relay's CPU per small request. When a head's
    fields (and everything else the translation depends on) equal the last one's, one
    list comparison in C replaces the work, and the result is by construction the same
    as :func:`build_upstream_request` and :func:`build_browser_response` would return.
    A refused head is never remembered: it is refused again, the same way. What it
    returns is shared between the requests it is remembered for (the field list, the
    browser's response head): nothing downstream may change it in place.
    """

    __slots__ = (
        "_base_path",
        "_client_host",
        "_origin",
        "_request_fields",
        "_request_key",
        "_response",
        "_response_key",
        "_sandbox_port",
        "on_translated",
        "private",
    )

    def __init__(
        self,
        *,
        base_path: str,
        origin: AppOrigin,
        client_host: str,
        sandbox_port: int,
        private: bool = False,
    ) -> None:
        self._base_path = base_path
        self._origin = origin
        self.private = private  # the relay's cookie admits requests: the app may not clear it
        self._client_host = client_host
        self._sandbox_port = sandbox_port
        self._request_key: tuple[object, ...] | None = None
        self._request_fields: RequestFields | None = None
        self._response_key: tuple[object, ...] | None = None
        self._response: BrowserResponse | None = None
        # Told of each request head translated anew (the relay's front door keeps it).
        self.on_translated: Callable[[RequestHead, RequestFields], None] | None = None

    def request(self, head: RequestHead, session_origins: frozenset[bytes]) -> UpstreamRequest:
        """:func:`build_upstream_request` for this connection."""
        check_request_target(head)
        # The fields' translation depends on these alone: the fields, and for the
        # Origin rule the method, the upgrade and the session's origins (the same
        # set object while no app comes or goes: one identity test).
        key = (head.headers, head.method, head.upgrade, session_origins)
        fields = self._request_fields
        if fields is None or key != self._request_key:
            fields = request_fields(
                head,
                origin=self._origin,
                client_host=self._client_host,
                session_origins=session_origins,
            )
            self._request_key, self._request_fields = key, fields
            if self.on_translated is not None:
                self.on_translated(head, fields)
        return fields.request(head, self._base_path)

    def response(
        self, head: ResponseHead, request: RequestHead, *, close_delimited: bool
    ) -> BrowserResponse:
        """:func:`build_browser_response` of a final response for this connection."""
        key = (
            head.headers,
            head.status,
            head.reason,
            close_delimited,
            request.method,
            request.keep_alive,
            request.version,
        )
        response = self._response
        if response is not None and key == self._response_key:
            return response
        response = build_browser_response(
            head,
            request=request,
            close_delimited=close_delimited,
            keep_alive=True,
            sandbox_port=self._sandbox_port,
            private=self.private,
        )
        # A rewritten Location depends on the request's Host too: not remembered.
        rewrites = any(name.lower() in _LOCATIONS for name, _ in head.headers)
        self._response_key, self._response = (None, None) if rewrites else (key, response)
        return response


def rewrite_location(value: bytes, sandbox_port: int, public_origin: bytes) -> bytes:
    """Point a Location that names the app's sandbox-internal origin at its host origin.

    An app that builds absolute redirects from its own listen address
    (``http://127.0.0.1:5173/login``) would send the browser to a port that only exists
    inside the sandbox; the same path on the app's host origin is what it meant.
    """
    lowered = value.lower()
    for host in (b"127.0.0.1", b"localhost", b"[::1]", b"0.0.0.0"):
        origin = b"http://" + host + b":%d" % sandbox_port
        if lowered.startswith(origin) and lowered[len(origin) : len(origin) + 1] in (
            b"",
            b"/",
            b"?",
            b"#",
        ):
            return public_origin + value[len(origin) :]
    return value


def keep_relay_cookies(clear_site_data: bytes) -> bytes:
    """A ``Clear-Site-Data`` value without the types that clear cookies (``"cookies"``,
    ``"*"``): they would clear the relay's cookie of a private app with the app's own and
    lock the owner out. The app's other types (``"cache"``, ``"storage"``) are kept."""
    kept = [
        item.strip()
        for item in clear_site_data.split(b",")
        if item.strip().strip(b'"').strip().lower() not in (b"cookies", b"*")
    ]
    return b", ".join(item for item in kept if item)


def build_browser_response(  # noqa: PLR0912, PLR0913  (every response rule in one pass over the fields)
    head: ResponseHead,
    *,
    request: RequestHead,
    close_delimited: bool,
    keep_alive: bool,
    sandbox_port: int | None = None,
    private: bool = False,
) -> BrowserResponse:
    """Build the head the browser receives for an app's (final or interim) response.

    ``private``: the app's requests are admitted by the relay's cookie, which the app's
    ``Clear-Site-Data`` may not clear either (see :func:`keep_relay_cookies`)."""
    status = head.status
    found, kept = _scan(head.headers, _NOT_END_TO_END)
    fields = _end_to_end(found, kept)
    if b"set-cookie" in found:
        # The relay's own cookies are the relay's: an app (or anything answering for
        # it) must not set, overwrite or expire them.
        fields = [
            field
            for field in fields
            if field[0] != b"set-cookie" or not is_relay_set_cookie(field[2])
        ]
    if private and b"clear-site-data" in found:
        fields = [
            (lowered, name, keep_relay_cookies(value))
            if lowered == b"clear-site-data"
            else (lowered, name, value)
            for lowered, name, value in fields
        ]
        fields = [field for field in fields if field[0] != b"clear-site-data" or field[2]]
    if sandbox_port is not None and (b"location" in found or b"content-location" in found):
        public_origin = b"http://" + field_values(request.headers, b"host")[0]
        fields = [
            (lowered, name, rewrite_location(value, sandbox_port, public_origin))
            if lowered in (b"location", b"content-location")
            else (lowered, name, value)
            for lowered, name, value in fields
        ]
    lines = [b"HTTP/1.1 %d " % status + head.reason]
    lines += [name + b": " + value for _, name, value in fields]
    if status == 101:
        upgrade = found.get(b"upgrade")
        lines.append(b"Connection: Upgrade")
        if upgrade:
            lines.append(b"Upgrade: " + upgrade[0])
        return BrowserResponse(b"\r\n".join(lines) + b"\r\n\r\n", Framing.CLOSE, False)
    if status < 200:
        return BrowserResponse(b"\r\n".join(lines) + b"\r\n\r\n", Framing.NONE, True)

    if b"referrer-policy" not in found:
        # An app's host name is a secret kept from other local users (origin_policy):
        # browsers would name it in the Referer of every link and resource of another
        # origin (another 127.0.0.1 port among them). An app may choose otherwise.
        lines.append(DEFAULT_REFERRER_POLICY)
    keep = keep_alive and request.keep_alive and request.version == "1.1"
    lengths = found.get(b"content-length")
    no_body = request.method == b"HEAD" or status in (204, 304)
    if no_body:
        framing = Framing.NONE
        if lengths and status != 204:
            lines.append(b"Content-Length: " + lengths[0])
    elif found.get(b"transfer-encoding"):
        framing = Framing.CHUNKED
    elif lengths:
        framing = Framing.LENGTH
        lines.append(b"Content-Length: " + lengths[0])
    elif close_delimited and request.version == "1.1":
        framing = Framing.CHUNKED
    else:
        framing = Framing.CLOSE
        keep = False
    if framing is Framing.CHUNKED:
        lines.append(b"Transfer-Encoding: chunked")
    if framing is Framing.LENGTH and lengths is not None and lengths[0] == b"0":
        framing = Framing.NONE
    lines.append(b"Connection: keep-alive" if keep else b"Connection: close")
    return BrowserResponse(b"\r\n".join(lines) + b"\r\n\r\n", framing, keep)


def encode_chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"


def reason_phrase(status: int) -> bytes:
    """The standard reason phrase of ``status`` (the standard library's table)."""
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b"Unknown"


def error_response(status: int, message: str, *, keep_alive: bool = False) -> bytes:
    """A complete plain-text response the relay itself sends when it refuses a request."""
    body = f"sandbridge: {message}\n".encode("utf-8", "replace")
    head = [
        b"HTTP/1.1 %d " % status + reason_phrase(status),
        b"Content-Type: text/plain; charset=utf-8",
        b"Content-Length: %d" % len(body),
        b"Cache-Control: no-store",
        b"X-Content-Type-Options: nosniff",
        b"Connection: keep-alive" if keep_alive else b"Connection: close",
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body

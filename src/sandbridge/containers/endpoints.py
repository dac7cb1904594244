"""The engine API's endpoints the bridge serves: one table, method and path to rule.

Deny by default: a request whose method and path match no row of :data:`ENDPOINTS` is
refused (403) naming its path and the rule ``endpoint-not-allowed``; so is a query
parameter a row does not name. A path may carry the API's version first (``/v1.41/...``),
passed on as sent. A row says everything the bridge does with a request of its kind:
which of the session's own objects the path must name (``owned``), what body it takes
(``body``), and how its answer is carried back (``answer``). The server reads the row,
never the endpoint's name.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

from sandbridge.exceptions import ContainerRefused

# A target longer than this is no API call a client makes (image names are at most 255).
MAX_TARGET_CHARS = 2048
# Query parameters per request: the API's calls take at most a handful.
MAX_QUERY_PARAMETERS = 16
_VERSION = re.compile(r"/v[0-9]{1,2}\.[0-9]{1,3}(?=/)")
# A container's, exec's or network's id or name, or a volume's name, as a path segment.
_NAME = r"(?P<ref>[A-Za-z0-9][A-Za-z0-9_.-]{0,254})"
# An image reference in a path: slashes, a tag and a digest allowed.
_IMAGE = r"(?P<ref>[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,299})"


class Owned(enum.Enum):
    """Which of the session's own objects a path names."""

    CONTAINER = "container"
    EXEC = "exec"
    NETWORK = "network"
    VOLUME = "volume"
    # An image in the path: it must be one the owner listed.
    IMAGE = "image"


class Body(enum.Enum):
    """What a request's body may be."""

    NONE = "none"  # nothing (a body is refused)
    CREATE_CONTAINER = "create-container"  # checked field by field (create_policy.py)
    CREATE_EXEC = "create-exec"
    CREATE_NETWORK = "create-network"
    CREATE_VOLUME = "create-volume"
    START_EXEC = "start-exec"  # {"Detach": ..., "Tty": ...}


class Answer(enum.Enum):
    """How the engine's answer goes back."""

    STREAM = "stream"  # as it comes, chunk by chunk
    RECORD = "record"  # a created object's id, kept as the session's own (owned.py)
    FORGET = "forget"  # a removed object, no longer the session's
    INFO = "info"  # the engine's info, cut to the fields that say nothing of the host
    HIJACK = "hijack"  # an attach: after the head, bytes both ways


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One row: ``method`` and ``path`` (a regular expression) allowed, as ``rule``."""

    rule: str
    method: str
    # The path as written in the table, ``{name}`` or ``{image}`` where the object goes.
    template: str
    path: re.Pattern[str]
    query: frozenset[str] = frozenset()
    owned: Owned | None = None
    body: Body = Body.NONE
    answer: Answer = Answer.STREAM
    # The list is narrowed to the session's own objects (a label filter added).
    labelled_list: bool = False


def _row(rule: str, method: str, path: str, query: str = "", **kw: object) -> Endpoint:
    pattern = re.compile(path.replace("{name}", _NAME).replace("{image}", _IMAGE))
    return Endpoint(rule, method, path, pattern, frozenset(query.split()), **kw)  # type: ignore[arg-type]


_LIST = "all limit size filters before since"
_C, _X, _N, _V = Owned.CONTAINER, Owned.EXEC, Owned.NETWORK, Owned.VOLUME
ENDPOINTS: tuple[Endpoint, ...] = (
    _row("ping", "GET", "/_ping"),
    _row("ping", "HEAD", "/_ping"),
    _row("version", "GET", "/version"),
    _row("info", "GET", "/info", answer=Answer.INFO),
    _row("images-list", "GET", "/images/json", "all filters shared-size digests manifests"),
    _row("image-inspect", "GET", "/images/{image}/json", owned=Owned.IMAGE),
    _row("image-pull", "POST", "/images/create", "fromImage tag platform"),
    _row(
        "container-create",
        "POST",
        "/containers/create",
        "name platform",
        body=Body.CREATE_CONTAINER,
        answer=Answer.RECORD,
    ),
    _row("container-list", "GET", "/containers/json", _LIST, labelled_list=True),
    _row("container-inspect", "GET", "/containers/{name}/json", "size", owned=_C),
    _row("container-start", "POST", "/containers/{name}/start", "detachKeys", owned=_C),
    _row("container-wait", "POST", "/containers/{name}/wait", "condition", owned=_C),
    _row("container-stop", "POST", "/containers/{name}/stop", "t signal", owned=_C),
    _row("container-kill", "POST", "/containers/{name}/kill", "signal", owned=_C),
    _row("container-resize", "POST", "/containers/{name}/resize", "h w", owned=_C),
    _row("container-restart", "POST", "/containers/{name}/restart", "t signal", owned=_C),
    _row("container-top", "GET", "/containers/{name}/top", "ps_args", owned=_C),
    _row("container-stats", "GET", "/containers/{name}/stats", "stream one-shot", owned=_C),
    _row(
        "container-logs",
        "GET",
        "/containers/{name}/logs",
        "follow stdout stderr since until timestamps tail details",
        owned=_C,
    ),
    _row(
        "container-attach",
        "POST",
        "/containers/{name}/attach",
        "detachKeys logs stream stdin stdout stderr",
        owned=_C,
        answer=Answer.HIJACK,
    ),
    _row(
        "container-delete",
        "DELETE",
        "/containers/{name}",
        "v force",
        owned=_C,
        answer=Answer.FORGET,
    ),
    _row(
        "exec-create",
        "POST",
        "/containers/{name}/exec",
        owned=_C,
        body=Body.CREATE_EXEC,
        answer=Answer.RECORD,
    ),
    _row(
        "exec-start",
        "POST",
        "/exec/{name}/start",
        owned=_X,
        body=Body.START_EXEC,
        answer=Answer.HIJACK,
    ),
    _row("exec-resize", "POST", "/exec/{name}/resize", "h w", owned=_X),
    _row("exec-inspect", "GET", "/exec/{name}/json", owned=_X),
    _row(
        "network-create", "POST", "/networks/create", body=Body.CREATE_NETWORK, answer=Answer.RECORD
    ),
    _row("network-list", "GET", "/networks", "filters", labelled_list=True),
    _row("network-inspect", "GET", "/networks/{name}", "verbose scope", owned=_N),
    _row("network-delete", "DELETE", "/networks/{name}", owned=_N, answer=Answer.FORGET),
    _row("volume-create", "POST", "/volumes/create", body=Body.CREATE_VOLUME, answer=Answer.RECORD),
    _row("volume-list", "GET", "/volumes", "filters", labelled_list=True),
    _row("volume-inspect", "GET", "/volumes/{name}", owned=_V),
    _row("volume-delete", "DELETE", "/volumes/{name}", "force", owned=_V, answer=Answer.FORGET),
)


@dataclass(frozen=True, slots=True)
class Route:
    """A request matched to its row: the version prefix (``""`` without one), the object
    its path names (``""``: none), and its query as pairs, in order."""

    endpoint: Endpoint
    version: str
    ref: str
    query: tuple[tuple[str, str], ...]

    def target(self, ref: str | None = None, query: list[tuple[str, str]] | None = None) -> str:
        """The request-target toward the engine: the path with ``ref`` (the object's full
        id) in place of what the client named, and ``query`` (default: as sent)."""
        name = self.ref if ref is None else ref
        path = self.endpoint.template.replace("{name}", name).replace("{image}", name)
        pairs = list(self.query) if query is None else query
        return self.version + path + (f"?{urlencode(pairs)}" if pairs else "")


def route(method: str, target: str) -> Route:
    """The row ``method`` and ``target`` match; refused (:class:`ContainerRefused`)
    when none does, or when the query names a parameter the row does not."""
    if len(target) > MAX_TARGET_CHARS or not target.startswith("/"):
        raise ContainerRefused("path", "malformed-request", "not an API path", 400)
    path, _, query = target.partition("?")
    if "%" in path or "//" in path or "/." in path:
        raise ContainerRefused(
            "path", "endpoint-not-allowed", f"{method} {path[:200]} is not allowed"
        )
    version = ""
    if matched := _VERSION.match(path):
        version = matched.group(0)
        path = path[len(version) :]
    for endpoint in ENDPOINTS:
        if endpoint.method != method:
            continue
        found = endpoint.path.fullmatch(path)
        if found is None:
            continue
        pairs = _query(query, endpoint)
        ref = found.groupdict().get("ref") or ""
        return Route(endpoint, version, ref, pairs)
    raise ContainerRefused(
        "path",
        "endpoint-not-allowed",
        f"{method} {path[:200]} is not an endpoint the container bridge serves",
    )


def _query(query: str, endpoint: Endpoint) -> tuple[tuple[str, str], ...]:
    try:
        pairs = parse_qsl(
            query, keep_blank_values=True, strict_parsing=bool(query), errors="strict",
            max_num_fields=MAX_QUERY_PARAMETERS,
        )  # fmt: skip
    except (ValueError, UnicodeDecodeError):
        raise ContainerRefused("query", "malformed-request", "not a query string", 400) from None
    for name, _ in pairs:
        if name not in endpoint.query:
            raise ContainerRefused(
                f"query.{name[:100]}",
                "parameter-not-allowed",
                f"{endpoint.rule} does not take the parameter {name[:100]!r}",
            )
    return tuple(pairs)

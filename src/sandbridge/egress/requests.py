"""Egress requests from the sandbox (sans-I/O): what may be asked for, how a reason is
shown, the session's table of requests with its cap and rate limit, and the owner's grants.

Inside, ``sandbridge-allow HOST[:PORT] --reason "why"`` asks the owner for a destination.
Everything in such a request is hostile: the destination must be a proxy destination the
allow file could name (never a host service: the gate listener's ports are fixed when the
session starts), the reason is bounded and only ever shown escaped, and one session holds
at most :data:`MAX_PENDING` requests, taking at most :data:`MAX_PER_WINDOW` new ones per
:data:`RATE_WINDOW` seconds. A request for a destination already pending folds into it.

The owner's answer becomes a :class:`Grants` entry: a rule added to the session's policy
for one connection (``once``) or for the rest of the session (``session``), in memory
only. Writing ``.sandbridge/allow`` (``--save``) is the owner's command's to ask for;
:func:`saved_line` is the one line it writes.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import unicodedata
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from sandbridge.egress.decision import (
    address_kind,
    check_addresses,
    embedded_ipv4,
    match_destination,
)
from sandbridge.exceptions import EgressRequestRefused, PolicyError
from sandbridge.project.policy import (
    DEFAULT_PORTS,
    Policy,
    Rule,
    format_entry,
    parse_entry,
    parse_ip,
)
from sandbridge.shown_text import hidden, quoted, shown

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# A reason is a sentence or two for the owner, not a document.
MAX_REASON_CHARS = 500
# A destination is a DNS name (253 characters) or an address, a port and brackets.
MAX_DESTINATION_CHARS = 300
# Requests waiting for the owner per session: more than a person reads at once.
MAX_PENDING = 20
# New requests per window: an agent asks now and then; a loop is cut off.
MAX_PER_WINDOW = 10
RATE_WINDOW = 60.0
# A request nobody answered is dropped after an hour, so the cap frees itself.
REQUEST_TTL = 3600.0
# Decided requests remembered (so a second answer says what became of the first).
MAX_DECIDED = 64
# The reason as a comment in .sandbridge/allow: one readable line.
MAX_SAVED_REASON_CHARS = 200
# How many characters of a refused value a message quotes.
SHOWN_VALUE_CHARS = 120


class RequestState(enum.Enum):
    """What became of a request."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


class Scope(enum.Enum):
    """How long an approval lasts."""

    ONCE = "once"  # one connection (one CONNECT, or one proxied request's upstream)
    SESSION = "session"  # every connection until the session ends


def _quoted(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(shown(text[:SHOWN_VALUE_CHARS]))


@dataclass(frozen=True, slots=True)
class Destination:
    """A requested proxy destination, as an allow-file entry would name it."""

    host: str  # lower-case name, "*.suffix", or a compressed IP literal
    port: int | None  # None: the default ports (80, 443, 8443)
    # The name resolves to non-global addresses only (a company mirror, a split-DNS
    # name): a grant without ``private`` would be refused at every connection.
    private: bool = False

    @property
    def text(self) -> str:
        """The allow-file entry: ``other.test:80``, ``*.example.com``, ``[2001:db8::1]:443``,
        ``mirror.corp.test:443 private``."""
        return format_entry(self.host, self.port, self.private)

    def rule(self, source: str) -> Rule:
        return Rule(self.host, self.port, self.private, source)

    @property
    def caution(self) -> str | None:
        return self.caution_for(lambda _: False)

    def caution_for(self, is_local: Callable[[Address], bool]) -> str | None:
        """What the owner must know before approving: :meth:`_kind_caution`, and what an
        internationalized name looks like (:func:`idn_caution`)."""
        found = [self._kind_caution(is_local), idn_caution(self.host)]
        return "; ".join(text for text in found if text) or None

    def _kind_caution(self, is_local: Callable[[Address], bool]) -> str | None:
        """A wildcard, an IP literal that is not a public address (``127.0.0.1:22`` is the
        host's own SSH: an IP entry is taken at its word), or one of this host's own
        (``is_local``: a public address of the host reaches whatever listens on all its
        addresses, past the host-service gate)."""
        if self.host.startswith("*."):
            return (
                f"{self.host} is a wildcard: approving allows every name ending in "
                f"{self.host[1:]} (the allow file cannot tell a public suffix such as "
                ".co.uk or .github.io from a company's domain)"
            )
        ip = parse_ip(self.host)
        if ip is None:
            return None
        carried = embedded_ipv4(ip)
        local = [a for a in (ip, carried and carried[0]) if a and is_local(a)]
        kind = address_kind(ip, local)
        if kind is None:
            return None
        if kind.startswith("this host"):  # "this host", "this host via 6to4"
            where = kind.removeprefix("this host")
            return (
                f"{self.host} is an address of this host{where}: approving lets the proxy "
                "connect to it"
            )
        return f"{self.host} is a {kind} address: approving lets the proxy connect to it"


# Letters outside ASCII named one by one in an internationalized name's warning.
IDN_LETTERS_NAMED = 8


def idn_caution(host: str) -> str | None:
    """For a name with a punycode label (``xn--``): what a browser may show instead, and
    each letter outside ASCII by its Unicode name, since a look-alike letter of another
    script (``xn--pypal-4ve.com`` shows as "paypal.com" with a Cyrillic a, U+0430) can imitate a
    name the owner trusts. The decoded text is the sandbox's: it is shown escaped."""
    labels = host.removeprefix("*.").split(".")
    if not any(label.startswith("xn--") for label in labels):
        return None
    decoded = []
    for label in labels:
        text = label
        if label.startswith("xn--"):
            try:
                text = label[4:].encode("ascii").decode("punycode")
            except (UnicodeError, ValueError):
                text = ""
            if not text:
                return f"{host}: its label {label} is not valid punycode (no name shows as it)"
        decoded.append(text)
    name = ("*." if host.startswith("*.") else "") + ".".join(decoded)
    letters = sorted({char for char in name if ord(char) > 0x7F})
    named = ", ".join(
        f"{quoted(char)} U+{ord(char):04X} {unicodedata.name(char, 'without a name')}"
        for char in letters[:IDN_LETTERS_NAMED]
    )
    more = len(letters) - IDN_LETTERS_NAMED
    return (
        f"{host} is an internationalized name that a browser may show as {quoted(name)}; "
        f"its letters outside ASCII: {named}{f' and {more} more' if more > 0 else ''} "
        "(a letter of another script can look like a Latin one)"
    )


@dataclass(frozen=True, slots=True)
class Standing:
    """What the policy says of a requested destination, given the addresses its name
    resolves to now: allowed already, beyond any grant's reach, or to be asked for."""

    allowed: str | None = None  # the decision that allows it on every port it names
    blocked: str | None = None  # why a grant could not take effect, and what to edit
    # Only non-global addresses came back: the grant must say ``private`` to work.
    private: bool = False
    caution: str | None = None  # what the owner must know of those addresses


def standing(
    policy: Policy,
    destination: Destination,
    addresses: list[Address],
    local: Collection[Address] = (),
) -> Standing:
    """Decide a request as the proxy will decide its connections (the same
    :func:`match_destination` and :func:`check_addresses`), so that nothing is offered or
    reported as granted that the proxy would still refuse.

    A grant is a rule after the policy's own, and the first matching rule decides: when
    an existing entry matches but cannot reach the addresses (they are not global and it
    does not say ``private``), no grant would be reached, and the request is refused
    naming the entry to edit. A name that resolves to non-global addresses only is asked
    for with ``private``, said in the request."""
    if destination.host.startswith("*."):
        return Standing()  # a wildcard is never "already allowed"
    ports = sorted(DEFAULT_PORTS) if destination.port is None else [destination.port]
    is_name = parse_ip(destination.host) is None
    allowed = []
    for port in ports:
        decision = match_destination(policy, destination.host, port)
        if not decision.allowed:
            continue
        if is_name and addresses:
            _, final = check_addresses(decision, destination.host, port, addresses, local)
            if not final.allowed:
                rule = decision.rule
                assert rule is not None
                return Standing(
                    blocked=f"{final.reason}; no approval can change that while "
                    f"'{rule.text}' ({rule.source}) decides first: ask the owner to "
                    f"{final.fix()} (the next session reads it)"
                )
        allowed.append(decision)
    if len(allowed) == len(ports):
        return Standing(allowed=allowed[0].reason)
    seen = non_global_only(destination.host, addresses, local) if is_name else None
    if seen is None:
        return Standing()
    return Standing(
        private=True,
        caution=f"{seen}: approving grants it with 'private', so the proxy connects the "
        "name to whatever address its DNS gives, this host's loopback included",
    )


def non_global_only(
    host: str, addresses: list[Address], local: Collection[Address] = ()
) -> str | None:
    """``"NAME resolves to ADDRESS (KIND) and no global address"`` when ``addresses`` are
    all addresses a name reaches only with ``private``; ``None`` otherwise (none at all
    included: the name does not resolve now)."""
    kinds = [(address, address_kind(address, local)) for address in addresses]
    if not kinds or any(kind is None for _, kind in kinds):
        return None
    address, kind = kinds[0]
    return f"{host} resolves to {address} ({kind}) and no global address"


def parse_destination(value: object, gate: str) -> Destination:
    """The destination of a request: ``NAME[:PORT]``, ``*.NAME[:PORT]`` or ``IP[:PORT]``
    as ``.sandbridge/allow`` spells them; refuse anything else naming the value."""
    if not isinstance(value, str) or not value:
        raise EgressRequestRefused(
            "bad_destination", f"destination must be HOST[:PORT], got {_quoted(value)}"
        )
    if len(value) > MAX_DESTINATION_CHARS:
        raise EgressRequestRefused(
            "bad_destination",
            f"destination is {len(value)} characters; the limit is {MAX_DESTINATION_CHARS}",
        )
    if any(char.isspace() or hidden(char) for char in value):
        raise EgressRequestRefused(
            "bad_destination", f"destination must be one HOST[:PORT], got {_quoted(value)}"
        )
    try:
        entry = parse_entry(value, f"destination {_quoted(value)}")
    except PolicyError as exc:
        raise EgressRequestRefused("bad_destination", shown(str(exc))) from None
    ip = parse_ip(entry.host)
    if entry.host == "gate" or (ip is not None and str(ip) == gate):
        raise EgressRequestRefused(
            "host_service",
            f"{_quoted(value)} is a host service; a running session cannot gain one (the "
            "gate listener's ports are fixed at start): ask the owner to add "
            f"'gate:PORT' to .sandbridge/allow for the next session",
        )
    return Destination(entry.host, entry.port)


def check_reason(value: object) -> str:
    """The request's reason: a non-empty string of at most :data:`MAX_REASON_CHARS`."""
    if not isinstance(value, str):
        raise EgressRequestRefused(
            "bad_reason", f"reason must be a string, got {type(value).__name__}"
        )
    if not value.strip():
        raise EgressRequestRefused(
            "bad_reason", "reason is empty: say why the sandbox needs the destination"
        )
    if len(value) > MAX_REASON_CHARS:
        raise EgressRequestRefused(
            "bad_reason", f"reason is {len(value)} characters; the limit is {MAX_REASON_CHARS}"
        )
    return value


def comment_text(reason: str) -> str:
    """The reason as it may appear in a file: hidden characters dropped, whitespace runs
    made single spaces, cut to :data:`MAX_SAVED_REASON_CHARS`."""
    visible = "".join(" " if hidden(char) else char for char in reason)
    text = " ".join(visible.split())
    if len(text) > MAX_SAVED_REASON_CHARS:
        text = text[: MAX_SAVED_REASON_CHARS - 3] + "..."
    return text


def saved_line(destination: Destination, reason: str, date: str) -> str:
    """The one ``.sandbridge/allow`` line ``approve --save`` writes (with its newline)."""
    return f"{destination.text}  # {date}, asked from the sandbox: {comment_text(reason)}\n"


@dataclass
class EgressRequest:
    """One request and what became of it."""

    id: str
    destination: Destination
    reason: str
    created: float
    state: RequestState = RequestState.PENDING
    scope: Scope | None = None
    # How many times the sandbox asked for it while it was pending (folded duplicates).
    asked: int = 1
    # What the owner must know before approving it (Destination.caution_for), if anything.
    caution: str | None = None

    def summary(self, session: str, now: float) -> dict[str, Any]:
        """The JSON the owner's ``egress pending --json`` lists (the reason unescaped:
        JSON escapes it)."""
        return {
            "id": self.id,
            "session": session,
            "destination": self.destination.text,
            "reason": self.reason,
            "age": round(max(0.0, now - self.created), 1),
            "state": self.state.value,
            "scope": None if self.scope is None else self.scope.value,
            "asked": self.asked,
            "caution": self.caution,
        }


@dataclass
class RequestTable:
    """One session's requests: the pending ones (capped, rate-limited, folded) and the
    last :data:`MAX_DECIDED` decided ones."""

    max_pending: int = MAX_PENDING
    max_per_window: int = MAX_PER_WINDOW
    window: float = RATE_WINDOW
    ttl: float = REQUEST_TTL
    _requests: dict[str, EgressRequest] = field(default_factory=dict)
    _recent: list[float] = field(default_factory=list)

    def pending(self, now: float) -> list[EgressRequest]:
        self.expire(now)
        return [r for r in self._requests.values() if r.state is RequestState.PENDING]

    def get(self, request_id: str) -> EgressRequest | None:
        return self._requests.get(request_id)

    def submit(
        self,
        destination: Destination,
        reason: str,
        now: float,
        new_id: str,
        caution: str | None = None,
    ) -> tuple[EgressRequest, bool]:
        """Add a request (``True``), or fold it into the pending one for the same
        destination (``False``); refuse past the cap or the rate limit."""
        for request in self.pending(now):
            if request.destination == destination:
                request.asked += 1
                return request, False
        if len(self.pending(now)) >= self.max_pending:
            raise EgressRequestRefused(
                "too_many",
                f"{self.max_pending} requests already wait for the owner; the limit is "
                f"{self.max_pending}",
            )
        self._recent = [t for t in self._recent if now - t < self.window]
        if len(self._recent) >= self.max_per_window:
            raise EgressRequestRefused(
                "rate_limited",
                f"more than {self.max_per_window} requests in {self.window:g} s; this one "
                "was dropped: ask again later",
            )
        if new_id in self._requests:
            raise EgressRequestRefused("busy", f"request id {new_id} is taken: ask again")
        self._recent.append(now)
        request = EgressRequest(new_id, destination, reason, now, caution=caution)
        self._requests[new_id] = request
        return request, True

    def decide(
        self, request_id: str, state: RequestState, scope: Scope | None, now: float
    ) -> EgressRequest:
        """Approve (with a scope) or deny a pending request."""
        self.expire(now)
        request = self._requests.get(request_id)
        if request is None:
            raise EgressRequestRefused(
                "unknown_request", f"no egress request {_quoted(request_id)} in this session"
            )
        if request.state is not RequestState.PENDING:
            raise EgressRequestRefused(
                "not_pending", f"egress request {request_id} is {request.state.value}"
            )
        request.state = state
        request.scope = scope
        self._forget_decided()
        return request

    def expire(self, now: float) -> list[EgressRequest]:
        """Requests that waited past :attr:`ttl`, now ``expired``."""
        expired = [
            r
            for r in self._requests.values()
            if r.state is RequestState.PENDING and now - r.created >= self.ttl
        ]
        for request in expired:
            request.state = RequestState.EXPIRED
        if expired:
            self._forget_decided()
        return expired

    def _forget_decided(self) -> None:
        decided = [i for i, r in self._requests.items() if r.state is not RequestState.PENDING]
        for request_id in decided[: max(0, len(decided) - MAX_DECIDED)]:
            del self._requests[request_id]


class Grants:
    """The owner's approvals of this session, as rules after the policy's own.

    The gate decides with :meth:`policy` (the same decision as for any entry); a
    decision by a ``once`` rule takes the rule away at once (:meth:`spend`, before any
    await, so two connections cannot both use it) and gives it back if the connection
    then fails (:meth:`give_back`): exactly one connection is made with it.
    """

    def __init__(self) -> None:
        self._session: list[Rule] = []
        self._once: list[Rule] = []
        self._base: Policy | None = None
        self._effective: Policy | None = None

    def add(self, rule: Rule, scope: Scope) -> None:
        (self._once if scope is Scope.ONCE else self._session).append(rule)
        self._effective = None

    def policy(self, base: Policy) -> Policy:
        """``base`` with this session's grants appended to its rules."""
        if not self._session and not self._once:
            return base
        if self._effective is None or self._base is not base:
            rules = (*base.rules, *self._session, *self._once)
            self._base, self._effective = base, dataclasses.replace(base, rules=rules)
        return self._effective

    def spend(self, rule: Rule | None) -> Rule | None:
        """If ``rule`` is a ``once`` grant, take it away and return it."""
        if rule is None or rule not in self._once:
            return None
        self._once.remove(rule)
        self._effective = None
        return rule

    def give_back(self, rule: Rule | None) -> None:
        """A spent ``once`` grant whose connection failed is usable again."""
        if rule is not None:
            self.add(rule, Scope.ONCE)

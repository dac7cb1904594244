"""Who may read and drive the dashboard: the decision for one request (sans-I/O).

The dashboard listens on 127.0.0.1, where every local user and every page in the owner's
browser can reach it. The listener refuses other users' connections at accept
(``relay/host/local_peer.py``); this module refuses everything else:

* a Host that is not the dashboard's own ``<label>.localhost:PORT`` (DNS rebinding: a
  page of another site resolving its name to 127.0.0.1). The dashboard has a name of its
  own, 128 random bits as an app's (``protocol/http/origin_policy.py``), because cookies
  ignore ports: a cookie of ``127.0.0.1`` or ``localhost`` went to every listener on
  that name, among them one a ``--network full`` sandbox opens there (the owner's uid,
  so the dashboard's peer check lets it in) and lures the owner's browser to;
  ``<label>.localhost``'s cookie goes only where the label is known;
* a request without the session cookie. The cookie is set in exchange for a one-time
  token of a URL ``sandbridge ui`` opened (each call issues a new token, good once and
  for :data:`LOGIN_TOKEN_TTL` seconds), and is ``HttpOnly`` and ``SameSite=Strict``: no
  script reads it and no other site's request carries it;
* a state change that is not a ``POST`` from the dashboard's own origin (``Origin`` and,
  when the browser sends it, ``Sec-Fetch-Site: same-origin``) carrying the CSRF token the
  page received in its HTML (a header a cross-origin page cannot set without a preflight
  the dashboard never grants).

Every refusal is an HTTP status with a one-line reason.
"""

from __future__ import annotations

import hmac
import secrets
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from sandbridge.protocol.http.fields import field_values
from sandbridge.protocol.http.origin_policy import new_label
from sandbridge.protocol.http.parser import Headers

COOKIE_NAME = "sandbridge_ui"
CSRF_HEADER = b"x-sandbridge-csrf"
LOGIN_PARAMETER = "token"
# 32 random bytes: the token, the cookie and the CSRF token cannot be guessed.
SECRET_BYTES = 32
# A login URL is opened right after ``sandbridge ui`` made it (by the browser it starts,
# or by the owner from the printed line): two minutes is plenty, and a URL found later
# in a shell history or a screen share is worth nothing.
LOGIN_TOKEN_TTL = 120.0
# Unused tokens kept at once: a few ``sandbridge ui`` calls in a row; past it the oldest
# is dropped (its URL is refused, and a new call gives a new one).
MAX_LOGIN_TOKENS = 16


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answer ``status`` with ``reason``."""

    status: int
    reason: str


@dataclass(frozen=True, slots=True)
class Login:
    """The one-time token was right: set the cookie, redirect to ``location``."""

    location: str
    cookie: str


@dataclass(frozen=True, slots=True)
class Serve:
    """Serve ``path`` (a state change when ``method`` is POST)."""

    method: bytes
    path: str


Verdict = Refuse | Login | Serve


def _secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


@dataclass
class Access:
    """The dashboard's secrets and the checks that use them, for listener ``port``."""

    port: int
    # The dashboard's own host name is ``<label>.localhost`` (see the module docstring).
    label: str = field(default_factory=new_label)
    cookie: str = field(default_factory=_secret)
    csrf: str = field(default_factory=_secret)
    # When each unused login token stops being good (on ``clock``'s scale).
    login_tokens: dict[str, float] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic

    @property
    def host(self) -> str:
        """The dashboard's ``Host``: its own name and port (never 127.0.0.1: its cookie
        would go to every listener there)."""
        return f"{self.label}.localhost:{self.port}"

    @property
    def hosts(self) -> frozenset[bytes]:
        return frozenset({self.host.encode()})

    @property
    def origins(self) -> frozenset[bytes]:
        return frozenset(b"http://" + host for host in self.hosts)

    def login_url(self) -> str:
        """A new URL to open once, within :data:`LOGIN_TOKEN_TTL` seconds (it holds a
        fresh one-time token; earlier URLs stay good until used or expired)."""
        now = self.clock()
        self._forget_expired(now)
        while len(self.login_tokens) >= MAX_LOGIN_TOKENS:
            del self.login_tokens[next(iter(self.login_tokens))]  # the oldest
        token = _secret()
        self.login_tokens[token] = now + LOGIN_TOKEN_TTL
        return f"http://{self.host}/?{LOGIN_PARAMETER}={token}"

    def _forget_expired(self, now: float) -> None:
        for token, until in list(self.login_tokens.items()):
            if until <= now:
                del self.login_tokens[token]

    def cookie_header(self) -> str:
        return f"{COOKIE_NAME}={self.cookie}; Path=/; HttpOnly; SameSite=Strict"

    def decide(self, method: bytes, target: bytes, headers: Headers) -> Verdict:
        """What to do with one request head."""
        hosts = field_values(headers, b"host")
        if len(hosts) != 1 or hosts[0].lower() not in self.hosts:
            shown = b", ".join(hosts)[:100].decode("latin-1")
            # Not naming the right one: a rebinding page can read this answer.
            return Refuse(421, f"Host {shown!r} is not this dashboard's name")
        path, _, query = target.decode("latin-1").partition("?")
        if method not in (b"GET", b"POST"):
            return Refuse(405, f"method {method[:20].decode('latin-1')!r} is not served")
        if query and path == "/" and method == b"GET":
            return self._login(query)
        if not self._has_cookie(headers):
            return Refuse(401, "no dashboard cookie: open the URL `sandbridge ui` printed")
        if method == b"POST":
            why = self._cross_site(headers)
            if why is not None:
                return Refuse(403, why)
        return Serve(method, path)

    def _login(self, query: str) -> Verdict:
        given = urllib.parse.parse_qs(query).get(LOGIN_PARAMETER, [""])[0].encode()
        self._forget_expired(self.clock())
        # Compared with each in constant time: a wrong token says nothing of a right one.
        found = [t for t in self.login_tokens if hmac.compare_digest(given, t.encode())]
        if not found:
            return Refuse(
                403,
                "this dashboard link was already used, has expired or is wrong; run "
                "`sandbridge ui` again",
            )
        del self.login_tokens[found[0]]  # once
        return Login("/", self.cookie_header())

    def _has_cookie(self, headers: Headers) -> bool:
        for value in field_values(headers, b"cookie"):
            for pair in value.decode("latin-1").split(";"):
                name, _, given = pair.strip().partition("=")
                if name == COOKIE_NAME and hmac.compare_digest(
                    given.encode(), self.cookie.encode()
                ):
                    return True
        return False

    def _cross_site(self, headers: Headers) -> str | None:
        """Why a POST is not the dashboard page's own, or None if it is."""
        origins = field_values(headers, b"origin")
        if len(origins) != 1 or origins[0].lower() not in self.origins:
            shown = b", ".join(origins)[:100].decode("latin-1")
            return f"cross-site request refused: Origin {shown!r} is not this dashboard's"
        sites = field_values(headers, b"sec-fetch-site")
        if sites and sites != [b"same-origin"]:
            return f"cross-site request refused: Sec-Fetch-Site {sites[0][:40].decode('latin-1')!r}"
        tokens = field_values(headers, CSRF_HEADER)
        if len(tokens) != 1 or not hmac.compare_digest(tokens[0], self.csrf.encode()):
            return "missing or wrong CSRF token: reload the dashboard"
        return None

"""Whether a local HTML page only redirects to an app of the sandbox, and to which URL
(sans-I/O).

``jupyter lab`` (and Jupyter Notebook, and tools built on jupyter_server) opens its
browser through a small file instead of its token URL, so that the token stays out of
the process list::

    <meta http-equiv="refresh" content="1;url=http://localhost:8888/lab?token=..." />

Shown as a snapshot on the host, that page would send the owner's browser to the owner's
own ``localhost:8888``, not the sandbox's. So ``sandbridge-open`` asks the host to open
the page's target instead, resolved as ``sandbridge-open http://localhost:8888/...`` is,
when the page has exactly one ``<meta http-equiv="refresh">``, its content is strictly
``DELAY;url=URL`` (the HTML standard's form: digits, ``;`` or ``,``, an optional
``url=``, an optional quote around a URL without spaces) and the URL is an ``http://``
URL of the sandbox's own loopback (:func:`sandbridge.protocol.open_request.classify_url`
says :class:`LocalTarget`). Anything else (no refresh, two of them, a relative or external
target, a refresh to a ``ws://`` URL) is no redirect: the page is shown as it is. A
target that ``classify_url`` refuses is refused, naming it.

Nothing here is a defence: the sandbox can ask for any URL directly, and the host
checks each request the same way whatever led to it. The page is parsed inside the
sandbox, in the helper's process, at the sandbox's own cost.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from sandbridge.exceptions import FileOpenRefused, RegistrationError
from sandbridge.protocol.open_request import LocalTarget, classify_url

_SPACE = "[\t\n\f\r ]*"
# Targets judged as an open request's URL would be; others are not followed.
_WEB_SCHEMES = ("http", "https", "ws", "wss")
# The HTML standard's "shared declarative refresh steps", with what they tolerate (no
# delay, no separator, an unclosed quote, text after the quote) refused.
_REFRESH = re.compile(
    _SPACE
    + r"\d+[\d.]*"
    + _SPACE
    + "[;,]"
    + _SPACE
    + f"(?:[Uu][Rr][Ll]{_SPACE}={_SPACE})?"
    + r"(?P<quote>['\"]?)(?P<url>[^'\"\t\n\f\r ]+)(?P=quote)"
    + _SPACE
)


class _RefreshFinder(HTMLParser):
    """Collects the ``content`` of every ``<meta http-equiv="refresh">`` (``None`` for one
    without a single ``content``)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.contents: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "meta":
            return
        equiv = [value for name, value in attrs if name == "http-equiv"]
        if not any(value is not None and value.lower() == "refresh" for value in equiv):
            return
        contents = [value for name, value in attrs if name == "content"]
        # Two http-equiv or content attributes: which one a browser takes is not worth
        # guessing; the page is then no plain redirect.
        single = len(equiv) == 1 and len(contents) == 1
        self.contents.append(contents[0] if single else None)


def refresh_url(page: str) -> str | None:
    """The URL of the page's one ``<meta http-equiv="refresh" content="N;url=URL">``
    (character references decoded), or ``None``: no such tag, more than one, or a content
    not of that form."""
    finder = _RefreshFinder()
    finder.feed(page)
    finder.close()
    if len(finder.contents) != 1 or finder.contents[0] is None:
        return None
    match = _REFRESH.fullmatch(finder.contents[0])
    return match["url"] if match else None


def redirect_target(page: str) -> str | None:
    """The URL that ``page`` only redirects to, to be opened instead of showing the page,
    or ``None`` when the page is to be shown as it is.

    An ``http://`` URL of the sandbox's own loopback is opened as its app; an external
    ``http(s)://`` URL is asked for as any external URL is (printed for the owner by
    default, ``--open-external``), so a redirect page cannot carry the owner's browser
    elsewhere where a direct request would not. A target the host would refuse
    (``http://127.1:8888/``, which a browser reads as the owner's loopback) is refused."""
    url = refresh_url(page)
    # A relative, file: or javascript: target is the page's own business, shown with it.
    if url is None or url.partition("://")[0].lower() not in _WEB_SCHEMES:
        return None
    try:
        target = classify_url(url)
    except RegistrationError as exc:
        raise FileOpenRefused(f"the page redirects to a URL that is refused: {exc}") from None
    if isinstance(target, LocalTarget):
        return url if target.scheme == "http" else None
    return url if url.partition("://")[0].lower() in ("http", "https") else None

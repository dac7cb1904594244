"""What one exchange's final response becomes for the browser, and what both connections
do after it: one decision, whichever of the host's two paths relays the response.

The host relays a final response either from the keep-alive lane (the whole response
came in one read) or from the connection's task (any other response); both ask
:func:`decide_response`, so the browser gets the same bytes and the connections go on
the same way whichever path ran. Interim (``1xx``) and ``101`` responses are the task's
alone and are not decided here.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbridge.protocol.http.forwarding import (
    LAST_CHUNK,
    ConnectionHeads,
    Framing,
    encode_chunk,
)
from sandbridge.protocol.http.parser import RequestHead, ResponseHead


@dataclass(slots=True)
class ResponseDecision:
    """How a final response is written to the browser and whether each side is kept.

    Made once per response and only read after that (a plain slot class: a frozen
    dataclass sets each field through ``object.__setattr__``, twice the cost per object).
    """

    head: bytes  # the browser's response head, ending with the empty line
    framing: Framing  # how the body is delimited toward the browser
    keep_browser: bool  # the browser connection may carry a next request
    # The app connection may carry a next request if nothing follows this response on
    # it: the app keeps it alive and the body ends by its framing, not by a close.
    app_keeps_alive: bool

    def body(self, data: bytes) -> bytes:
        """A piece of the response body as the browser receives it."""
        return encode_chunk(data) if self.framing is Framing.CHUNKED else data

    @property
    def end(self) -> bytes:
        """What ends the body for the browser after its last piece (maybe nothing)."""
        return LAST_CHUNK if self.framing is Framing.CHUNKED else b""

    def reuse_upstream(self, extra_data: bool) -> bool:
        """Whether the app connection carries the next request once the response has
        ended; ``extra_data``: the app sent bytes after it, which answer nothing."""
        return self.app_keeps_alive and not extra_data


def decide_response(
    final: ResponseHead,
    request: RequestHead,
    heads: ConnectionHeads,
    *,
    close_delimited: bool,
) -> ResponseDecision:
    """Decide how the final response ``final`` to ``request`` reaches the browser.

    ``heads`` translates the head for this browser connection; ``close_delimited``: the
    app's body ends only when it closes. An upgrade request answered without a ``101``
    keeps neither connection: what the browser sends after an upgrade head is not read
    as HTTP (:class:`~sandbridge.protocol.http.parser.Upgraded`), so no request follows.
    """
    response = heads.response(final, request, close_delimited=close_delimited)
    upgrade = request.upgrade
    return ResponseDecision(
        response.head,
        response.framing,
        response.keep_alive and not upgrade,
        final.keep_alive and not close_delimited and not upgrade,
    )

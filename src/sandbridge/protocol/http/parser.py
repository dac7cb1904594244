"""Sans-I/O readers of HTTP/1.1 messages, built on llhttp (through ``httptools``).

llhttp is strict where it matters for a relay: it refuses bare LF, obs-fold,
Content-Length together with Transfer-Encoding, duplicate Content-Length and invalid
header characters. These readers add the limits (request-target, header count, head
bytes) and turn llhttp's callbacks into a list of events per :meth:`feed`:

* :class:`RequestHead` / :class:`ResponseHead` once a head is complete,
* :class:`BodyChunk` for each piece of body, already de-chunked,
* :data:`MESSAGE_END` when a message is complete,
* :class:`Upgraded` when the bytes that follow belong to another protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import httptools

from sandbridge.exceptions import HttpError

Headers = list[tuple[bytes, bytes]]

# Request-target limit: browsers send URLs up to ~2 MB in theory, but dev servers and
# nginx default to 8 KiB; a longer target is a 414, not a buffer.
MAX_TARGET_BYTES: Final = 8 * 1024
# Header lines per message: real browsers send ~20; 100 is nginx's order of magnitude.
MAX_HEADER_COUNT: Final = 100
# Bytes of one head (request line + headers): 64 KiB fits big cookies, refuses floods.
MAX_HEAD_BYTES: Final = 64 * 1024
# Requests in one read from a browser: browsers do not pipeline, and every head read is
# held as Python objects until its turn, about 15 times its bytes (a 256 KiB read of
# minimal pipelined requests held 3.7 MiB, for each of up to 1,024 connections).
MAX_PIPELINED: Final = 64


@dataclass(slots=True)
class RequestHead:
    """A complete request head as the browser sent it."""

    method: bytes
    target: bytes
    version: str
    headers: Headers
    keep_alive: bool
    upgrade: bool


@dataclass(slots=True)
class ResponseHead:
    """A complete response head as the app sent it."""

    status: int
    reason: bytes
    version: str
    headers: Headers
    keep_alive: bool


@dataclass(slots=True)
class BodyChunk:
    """A piece of message body."""

    data: bytes


class _MessageEnd:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MESSAGE_END"


MESSAGE_END: Final = _MessageEnd()


@dataclass(slots=True)
class Upgraded:
    """The head was an upgrade (or CONNECT); ``trailing`` are the bytes after it."""

    trailing: bytes


Event = RequestHead | ResponseHead | BodyChunk | _MessageEnd | Upgraded


class _Reader:
    """What request and response readers share: limits and the event list."""

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._headers: Headers = []
        self._head_size = 0
        self._in_head = False
        self._error: HttpError | None = None
        self._trailers = False
        self._finished = False
        # Body bytes still to come of a message framed by Content-Length, counted so
        # that later feeds can skip llhttp (see _length_body); None: not such a body.
        self._body_left: int | None = None
        self._declared_length: int | None = None  # that Content-Length, as declared
        self._codings: list[bytes] | None = None  # the Transfer-Encoding values, as sent

    # llhttp callbacks -------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._headers = []
        self._head_size = 0
        self._in_head = True
        self._trailers = False
        self._body_left = None
        self._declared_length = None

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._trailers:
            return  # trailers are dropped: nothing downstream relies on them
        headers = self._headers
        size = self._head_size + len(name) + len(value) + 4
        self._head_size = size
        if size > MAX_HEAD_BYTES or len(headers) >= MAX_HEADER_COUNT:  # one test per field
            if len(headers) >= MAX_HEADER_COUNT:
                self._fail(HttpError(431, f"more than {MAX_HEADER_COUNT} header fields"))
            self._fail(HttpError(431, f"header section larger than {MAX_HEAD_BYTES} bytes"))
        headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        if body:
            self._events.append(BodyChunk(body))
            if self._body_left is not None:
                self._body_left -= len(body)

    def on_message_complete(self) -> None:
        self._body_left = None
        self._events.append(MESSAGE_END)

    # shared machinery -------------------------------------------------------------

    def _count_length_body(self, headers: Headers) -> bool:
        """Note a body framed by exactly one Content-Length and nothing else; return
        whether the head has any framing field (Content-Length or Transfer-Encoding).

        One pass for both answers: a response's close-delimited test reuses it instead
        of building a set of every field name again (~1% of the host's CPU per request).
        """
        lengths: list[bytes] = []
        codings: list[bytes] | None = None  # the Transfer-Encoding values, if any
        for name, value in headers:
            lowered = name.lower()
            if lowered == b"content-length":
                lengths.append(value)
            elif lowered == b"transfer-encoding":
                codings = [value] if codings is None else [*codings, value]
        self._codings = codings
        if len(lengths) == 1 and codings is None:
            self._body_left = self._declared_length = int(lengths[0])
        return bool(lengths) or codings is not None

    def _length_body(self, data: bytes) -> tuple[list[Event], bytes] | None:
        """Body bytes of a Content-Length message, without llhttp.

        In such a body llhttp only counts bytes, and hands each piece over as a new
        ``bytes`` (a copy of up to a whole read): passing the very ``bytes`` that were
        read saves that copy on bulk uploads and downloads. Returns the events and what
        follows the message, or ``None`` when llhttp must see ``data``.
        """
        left = self._body_left
        if not left or self._in_head:
            return None
        if len(data) < left:
            self._body_left = left - len(data)
            return [BodyChunk(data)], b""
        self._body_left = None
        body = data if len(data) == left else data[:left]
        return [BodyChunk(body), MESSAGE_END], data[left:]

    def _fail(self, error: HttpError) -> None:
        self._error = error
        raise error

    def _feed(
        self, parser: httptools.HttpRequestParser | httptools.HttpResponseParser, data: bytes
    ) -> list[Event]:
        if self._error is not None:
            raise self._error
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._finished = True
            offset = upgrade.args[0]
            self._events.append(Upgraded(data[offset:]))
        except httptools.HttpParserCallbackError:
            if self._error is not None:
                raise self._error from None
            raise
        except httptools.HttpParserError as exc:
            if self._error is not None:
                raise self._error from None
            self._error = HttpError(400, f"malformed HTTP message: {exc}")
            raise self._error from None
        if self._in_head:
            self._head_size += len(data)
            if self._head_size > MAX_HEAD_BYTES + MAX_TARGET_BYTES:
                self._fail(HttpError(431, f"header section larger than {MAX_HEAD_BYTES} bytes"))
        events, self._events = self._events, []
        return events


class RequestReader(_Reader):
    """Reads requests from a browser connection, one after another (keep-alive)."""

    def __init__(self) -> None:
        super().__init__()
        self._parser = httptools.HttpRequestParser(self)
        self._target = bytearray()
        self._in_message = False  # a request begun and not complete (head or body)
        self._takes_more = True  # llhttp reads a next request: none yet, or a keep-alive one
        self._heads_read = 0  # request heads in the current feed

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._target = bytearray()
        self._in_message = True

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_message = False

    def on_url(self, url: bytes) -> None:
        self._target += url
        if len(self._target) > MAX_TARGET_BYTES:
            self._fail(HttpError(414, f"request-target longer than {MAX_TARGET_BYTES} bytes"))

    def on_headers_complete(self) -> None:
        parser = self._parser
        version = parser.get_http_version()
        if version not in ("1.0", "1.1"):
            self._fail(HttpError(505, f"HTTP version {version!r} is not supported"))
        self._in_head = False
        self._trailers = True  # header callbacks after this point are trailers
        self._heads_read += 1
        if self._heads_read > MAX_PIPELINED:
            self._fail(HttpError(400, f"more than {MAX_PIPELINED} requests pipelined in one read"))
        keep_alive, upgrade = parser.should_keep_alive(), parser.should_upgrade()
        self._takes_more = keep_alive and not upgrade
        if keep_alive and not upgrade:
            # (after a last request llhttp refuses more bytes: it must see them)
            self._count_length_body(self._headers)
        self._events.append(
            RequestHead(
                method=parser.get_method(),
                target=bytes(self._target),
                version=version,
                headers=self._headers,
                keep_alive=keep_alive,
                upgrade=upgrade,
            )
        )

    @property
    def in_head(self) -> bool:
        """Whether a request head has begun and is not complete yet."""
        return self._in_head

    def reusable(self) -> bool:
        """Whether this reader may read another connection's requests as a new one
        would: it stands between two requests of a keep-alive connection (nothing of
        a next one read, no refusal, no upgrade), where llhttp is ready for the next
        message as it is. Reusing it saves a reader and its llhttp parser per new
        connection, and their reference cycle (see :meth:`ResponseReader.next_response`)."""
        return (
            not self._in_message
            and self._takes_more
            and self._error is None
            and not self._finished
            and not self._events
        )

    def forget(self) -> None:
        """Drop what the last request left (its head's fields), before a reuse."""
        self._headers = []
        self._target = bytearray()

    def feed(self, data: bytes) -> list[Event]:
        """Feed bytes from the browser; return the events they complete."""
        if self._finished:
            raise HttpError(400, "bytes after an upgrade reached the HTTP reader")
        self._heads_read = 0
        if self._error is None and (bypass := self._length_body(data)) is not None:
            events, rest = bypass
            if events[-1] is MESSAGE_END:
                # llhttp did not see the end of this body: the next request starts
                # on a fresh parser.
                self._in_message = False
                self._parser = httptools.HttpRequestParser(self)
                if rest:
                    events.extend(self._feed(self._parser, rest))
            return events
        return self._feed(self._parser, data)


class ResponseReader(_Reader):
    """Reads the response (with any 1xx interim responses) to one request."""

    def __init__(self, request_method: bytes) -> None:
        super().__init__()
        self._parser = httptools.HttpResponseParser(self)
        self._in_sync = True  # False once a body bypassed llhttp (_length_body)
        # The last plain final head read, byte for byte, to recognise it (see feed).
        self._known_head = b""
        self._known: ResponseHead | None = None
        self._known_length = 0
        self._start(request_method)

    def _start(self, request_method: bytes) -> None:
        self._head_request = request_method == b"HEAD"
        self._reason = b""
        self._final_head: ResponseHead | None = None
        self._done = False
        self._close_delimited: bool | None = None
        self.extra_data = False
        self._fresh = True  # nothing of this response read yet

    def next_response(self, request_method: bytes) -> None:
        """Read the response to the next request on the same keep-alive connection.

        A reader per response made a reference cycle per request (the llhttp parser
        holds the reader's callbacks, the reader holds the parser): 13 objects for
        the garbage collector per request and a collection every ~60 requests, about
        an eighth of the host's CPU per small request. After a complete response with
        nothing behind it, llhttp is ready for the next message as it is.
        """
        if not (self._done and not self.extra_data and self._in_sync and self._error is None):
            self._parser = httptools.HttpResponseParser(self)
            self._in_sync = True
        _Reader.__init__(self)
        self._start(request_method)

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_message_begin(self) -> None:
        if self._done:
            # The app sent more after its response: stop here; the caller sees
            # ``extra_data`` and does not reuse this connection.
            self.extra_data = True
            raise _Stop
        super().on_message_begin()
        self._reason = b""

    def on_headers_complete(self) -> None:
        parser = self._parser
        version = parser.get_http_version()
        if version not in ("1.0", "1.1"):
            self._fail(HttpError(502, f"app answered with HTTP version {version!r}"))
        self._in_head = False
        self._trailers = True  # header callbacks after this point are trailers
        status = parser.get_status_code()
        if not 100 <= status <= 599:
            self._fail(HttpError(502, f"app answered with invalid status code {status}"))
        head = ResponseHead(
            status=status,
            reason=self._reason,
            version=version,
            headers=self._headers,
            keep_alive=parser.should_keep_alive(),
        )
        self._events.append(head)
        if head.status >= 200:
            self._final_head = head
            if not self._head_request and status not in (204, 304):
                self._close_delimited = not self._count_length_body(self._headers)
                if self._codings is not None:
                    self._only_chunked(self._codings)
            if self._head_request:
                # llhttp cannot be told that a HEAD response has no body; the message
                # ends here and whatever follows is not part of this exchange.
                self._done = True
                self._events.append(MESSAGE_END)
                self.extra_data = True  # unknown: a HEAD exchange never reuses the connection
                raise _Stop

    def _only_chunked(self, codings: list[bytes]) -> None:
        """Refuse a body in any transfer coding but ``chunked`` alone: llhttp reads one
        whose last coding is not chunked to the connection's end, and de-chunks
        ``gzip, chunked`` into gzip; the browser's framing is the relay's own, so the
        coding would be lost on the way (requests: 501, in forwarding)."""
        if len(codings) != 1 or codings[0].strip().lower() != b"chunked":
            shown = b", ".join(codings)[:100].decode("latin-1")
            self._fail(
                HttpError(
                    502, f"app answered with Transfer-Encoding {shown!r}: only chunked is relayed"
                )
            )

    def on_message_complete(self) -> None:
        if self._final_head is None:
            return  # an interim 1xx response: the exchange goes on
        self._done = True
        super().on_message_complete()

    @property
    def close_delimited(self) -> bool:
        """True if the final response's body ends only when the app closes."""
        head = self._final_head
        if head is None or self._head_request or head.status in (204, 304):
            return False
        if self._close_delimited is None:  # asked for twice per response: look once
            names = {name.lower() for name, _ in head.headers}
            self._close_delimited = (
                b"content-length" not in names and b"transfer-encoding" not in names
            )
        return self._close_delimited

    def feed(self, data: bytes) -> list[Event]:
        """Feed bytes from the app; return the events they complete."""
        if self._done:
            self.extra_data = self.extra_data or bool(data)
            return []
        fresh, self._fresh = self._fresh, False
        if (
            fresh
            and self._known is not None
            and not self._head_request
            and data.startswith(self._known_head)
        ):
            return self._known_again(data)
        if self._error is None and (bypass := self._length_body(data)) is not None:
            self._in_sync = False
            events, rest = bypass
            if events[-1] is MESSAGE_END:
                self._done = True
                self.extra_data = bool(rest)
            return events
        try:
            events = self._feed(self._parser, data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _Stop):
                events, self._events = self._events, []
                return events
            raise HttpError(502, f"malformed response from app: {exc}") from None
        except HttpError as exc:
            # Whatever the app did wrong (a head too large, bad bytes), the browser's
            # answer is the same: the gateway failed.
            exc.status = 502
            raise
        if fresh and not self._head_request:
            self._remember(data, events)
        return events

    # An app answers one resource with the same head, byte for byte, again and again
    # (nginx changes only its Date, once a second). llhttp calls back into Python for
    # the status and for every field of a head, a large part of the host's CPU per small
    # request (docs/history/benchmark-rounds.md, fifth round). A read that starts with
    # the very bytes of the last plain head (a final status, one Content-Length,
    # keep-alive, llhttp accepted it in the same state: at the start of a message) gives
    # the same events without llhttp, and its Content-Length body is counted as
    # _length_body does.
    # llhttp is not fed any of such a response, so it stays at the start of a message.

    def _remember(self, data: bytes, events: list[Event]) -> None:
        head = events[0] if events else None
        if (
            head is None
            or head is not self._final_head
            or self._declared_length is None
            or not self._final_head.keep_alive
            or not data.startswith(b"HTTP/")  # the head is all of data up to its end
        ):
            return
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            self._known_head = data[: end + 4]
            self._known = self._final_head
            self._known_length = self._declared_length

    def _known_again(self, data: bytes) -> list[Event]:
        head = self._known
        assert head is not None
        self._final_head = head
        self._close_delimited = False
        body = data[len(self._known_head) :]
        events: list[Event] = [head]
        if not self._known_length:
            events.append(MESSAGE_END)
            self._done = True
            self.extra_data = bool(body)
            return events
        self._body_left = self._known_length  # counted as any Content-Length body
        if body:
            bypass = self._length_body(body)
            assert bypass is not None
            more, rest = bypass
            events += more
            if more[-1] is MESSAGE_END:
                self._done = True
                self.extra_data = bool(rest)
        return events

    def feed_eof(self) -> list[Event]:
        """The app closed: end a close-delimited body, or fail a truncated response."""
        if self._done:
            return []
        if self._final_head is not None and self.close_delimited:
            self._done = True
            self._in_sync = False  # llhttp still reads a body: a next response needs a new one
            return [MESSAGE_END]
        raise HttpError(502, "app closed the connection before its response was complete")


class _Stop(Exception):
    """Raised inside an llhttp callback to stop parsing at the end of this exchange."""

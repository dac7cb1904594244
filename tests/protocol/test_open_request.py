"""The open request's URL rules (sans-I/O): what is the sandbox's, what is refused."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import RegistrationError
from sandbridge.protocol.limits import MAX_OPEN_URL_LENGTH
from sandbridge.protocol.open_request import (
    MAX_SHOWN_VALUE,
    ExternalTarget,
    LocalTarget,
    classify_url,
)
from sandbridge.protocol.registration import RegisterRequest, parse_request


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://localhost:5173/a/b?x=1#f", LocalTarget("http", 5173, "/a/b?x=1#f")),
        ("http://127.0.0.1:3000", LocalTarget("http", 3000, "/")),
        ("http://0.0.0.0:8000?q=1", LocalTarget("http", 8000, "/?q=1")),
        ("http://[::1]:4173/#frag", LocalTarget("http", 4173, "/#frag")),
        ("ws://localhost:9000/socket?t=1", LocalTarget("ws", 9000, "/socket?t=1")),
        ("HTTP://LOCALHOST:80/X%2Fy", LocalTarget("http", 80, "/X%2Fy")),
        ("http://localhost/", LocalTarget("http", 80, "/")),
        ("http://localhost.:81/", LocalTarget("http", 81, "/")),
        ("http://app.localhost:5000/p", LocalTarget("http", 5000, "/p")),
        ("http://127.0.0.2:5000/", LocalTarget("http", 5000, "/")),
        ("http://[::]:5000/", LocalTarget("http", 5000, "/")),
        ("http://[::ffff:127.0.0.1]:5000/", LocalTarget("http", 5000, "/")),
        ("http://10.0.0.7:8080/", ExternalTarget("http://10.0.0.7:8080/")),
        ("http://1password.com/", ExternalTarget("http://1password.com/")),
        ("https://example.com/login?x=1#y", ExternalTarget("https://example.com/login?x=1#y")),
        ("http://example.com", ExternalTarget("http://example.com")),
        ("https://user@github.com/", ExternalTarget("https://user@github.com/")),
    ],
)
def test_url_is_classified_with_path_query_and_fragment_kept(url: str, expected: object) -> None:
    assert classify_url(url) == expected


@pytest.mark.parametrize(
    ("url", "error"),
    [
        (5, "url must be a string, got 5"),
        (None, "url must be a string, got None"),
        ("", "printable ASCII"),
        ("http://localhost:80/a b", "printable ASCII"),
        ("http://localhost:80/\x1b[31m", "printable ASCII"),
        ("http://localhost:80/\n", "printable ASCII"),
        ("http://localhost:80/\u00e9", "printable ASCII"),
        ("javascript:alert(1)", "must start with http://"),
        ("file:///etc/passwd", "must start with http://"),
        ("localhost:5173", "must start with http://"),
        ("--remote-debugging-port=9222", "must start with http://"),
        ("https://localhost:8443/", "TLS to the sandbox's own loopback"),
        ("wss://127.0.0.1:8443/", "TLS to the sandbox's own loopback"),
        ("http://localhost:0/", "not 1..65535"),
        ("http://localhost:65536/", "not 1..65535"),
        ("http://localhost:x/", "not 1..65535"),
        ("http://user:pw@localhost:80/", "user name or password"),
        ("http:///path", "url has no host"),
        ("http://[::1/", "malformed [IPv6]"),
        ("ws://example.com/", "a browser cannot open"),
        # Spellings a browser reads as the owner's 127.0.0.1: never passed on as external.
        ("http://2130706433:631/", "an IP address written another way"),
        ("http://127.1:631/", "an IP address written another way"),
        ("http://0x7f.0.0.1/", "an IP address written another way"),
        ("http://0x7f000001/", "an IP address written another way"),
        ("http://example.0x10/", "an IP address written another way"),
        ("http://%6cocalhost:631/", "percent-encoded host"),
        ("http://localhost\\@example.com/", "must not contain '\\'"),
    ],
)
def test_bad_url_is_refused_naming_it(url: object, error: str) -> None:
    with pytest.raises(RegistrationError) as caught:
        classify_url(url)
    assert error in str(caught.value)


def test_overlong_url_is_refused_with_the_limit() -> None:
    url = "http://localhost:80/" + "a" * MAX_OPEN_URL_LENGTH
    with pytest.raises(RegistrationError) as caught:
        classify_url(url)
    assert str(caught.value) == (
        f"url is {len(url)} characters; the limit is {MAX_OPEN_URL_LENGTH}"
    )


def test_refusal_quotes_a_long_value_cut_short() -> None:
    with pytest.raises(RegistrationError) as caught:
        classify_url("ftp://" + "x" * 3000)
    assert len(str(caught.value)) < MAX_SHOWN_VALUE + 100


@pytest.mark.parametrize(
    ("target", "extra", "expected"),
    [
        (LocalTarget("http", 5173, "/a/b?x=1#f"), None, "http://k.localhost:4300/a/b?x=1#f"),
        (LocalTarget("ws", 9000, "/s"), None, "ws://k.localhost:4300/s"),
        (LocalTarget("http", 1, "/a?x=1#f"), "t=2", "http://k.localhost:4300/a?x=1&t=2#f"),
        (LocalTarget("http", 1, "/a#f?no"), "t=2", "http://k.localhost:4300/a?t=2#f?no"),
        (LocalTarget("http", 1, "/"), "t=2", "http://k.localhost:4300/?t=2"),
    ],
)
def test_local_url_moves_to_the_host_origin(
    target: LocalTarget, extra: str | None, expected: str
) -> None:
    assert target.on("http://k.localhost:4300", extra) == expected


def test_register_and_open_share_the_socket_and_other_types_are_refused() -> None:
    assert parse_request(b'{"type":"register","port":80}') == RegisterRequest(80, "/")
    assert parse_request(b'{"type":"open","url":"http://localhost:80/"}') == LocalTarget(
        "http", 80, "/"
    )
    with pytest.raises(
        RegistrationError, match="type must be 'register', 'open' or 'unregister', got 'x'"
    ):
        parse_request(b'{"type":"x"}')
    with pytest.raises(RegistrationError, match="url is missing"):
        parse_request(b'{"type":"open"}')

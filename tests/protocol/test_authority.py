"""``host[:port]``: the one parser behind CONNECT targets, Host headers and policy entries."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import AuthorityError
from sandbridge.protocol.authority import split_host_port


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("example.com", ("example.com", None)),
        ("example.com:443", ("example.com", 443)),
        ("10.0.0.1:65535", ("10.0.0.1", 65535)),
        ("[::1]", ("[::1]", None)),
        ("[2001:db8::1]:8443", ("[2001:db8::1]", 8443)),
    ],
)
def test_an_authority_splits_into_host_and_port(
    text: str, expected: tuple[str, int | None]
) -> None:
    assert split_host_port(text) == expected


@pytest.mark.parametrize(
    ("text", "why", "port_text"),
    [
        ("example.com:0", "port must be 1..65535, got '0'", "0"),
        ("example.com:65536", "got '65536'", "65536"),
        ("example.com:http", "got 'http'", "http"),
        ("example.com:", "got ''", ""),
        ("example.com:\u00b2", "got '\u00b2'", "\u00b2"),
        ("example.com:" + "9" * 5000, "got '99999999", "9" * 5000),
        ("::1", "write an IPv6 address in brackets", None),
        ("[::1", "unclosed '['", None),
        ("[::1]443", "expected ':PORT' after ']'", None),
    ],
)
def test_a_malformed_authority_is_refused_saying_what_is_wrong(
    text: str, why: str, port_text: str | None
) -> None:
    with pytest.raises(AuthorityError) as refused:
        split_host_port(text)
    assert why in str(refused.value)
    assert refused.value.port_text == port_text

"""The loopback redirect_uri of an authorize URL: found strictly, or refused naming it."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import RegistrationError
from sandbridge.protocol.oauth_redirect import (
    LoopbackRedirect,
    host_allowed,
    host_of,
    loopback_redirect,
)

AUTH = "https://auth.example.com/authorize?client_id=x&response_type=code"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            f"{AUTH}&redirect_uri=http%3A%2F%2F127.0.0.1%3A38119%2Fcallback&state=s",
            LoopbackRedirect("127.0.0.1", 38119, "/callback"),
        ),
        (
            f"{AUTH}&redirect_uri=http://localhost:8085/",
            LoopbackRedirect("localhost", 8085, "/"),
        ),
        (
            f"{AUTH}&redirect_uri=http%3A%2F%2F%5B%3A%3A1%5D%3A4000%2Fcb%3Fx%3D1",
            LoopbackRedirect("[::1]", 4000, "/cb"),
        ),
        # no path at all is the root, as a browser requests it
        (f"{AUTH}&redirect_uri=http://127.0.0.1:4000", LoopbackRedirect("127.0.0.1", 4000, "/")),
        (
            f"{AUTH}&redirect_uri=http://localhost:65535/x",
            LoopbackRedirect("localhost", 65535, "/x"),
        ),
        (f"{AUTH}&redirect_uri=http://localhost:1024/x", LoopbackRedirect("localhost", 1024, "/x")),
    ],
)
def test_a_loopback_redirect_uri_is_found_with_host_port_and_path(
    url: str, expected: LoopbackRedirect
) -> None:
    assert loopback_redirect(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        AUTH,  # no redirect_uri
        "https://github.com/login/device",
        f"{AUTH}&redirect_uri=https%3A%2F%2Fapp.example.com%2Fcb",  # a web redirect
        f"{AUTH}&redirect_uri=urn:ietf:wg:oauth:2.0:oob",  # out of band
        # inside another parameter, the redirect is that parameter's value, not ours
        f"{AUTH}&state=redirect_uri%3Dhttp%3A%2F%2F127.0.0.1%3A4000%2F",
        # in the fragment: never sent to the server
        f"{AUTH}#redirect_uri=http://127.0.0.1:4000/",
        # encoded twice: the server decodes it once, to no URL
        f"{AUTH}&redirect_uri=http%253A%252F%252F127.0.0.1%253A4000%252F",
    ],
)
def test_a_url_without_a_loopback_redirect_has_none(url: str) -> None:
    assert loopback_redirect(url) is None


@pytest.mark.parametrize(
    ("url", "named"),
    [
        (
            f"{AUTH}&redirect_uri=http://127.0.0.1:4000/a&redirect_uri=http://127.0.0.1:5000/b",
            "2 times",
        ),
        # the parameter's name percent-encoded is the same parameter to the server
        (
            f"{AUTH}&redirect_uri=http://127.0.0.1:4000/a&redirect%5Furi=http://127.0.0.1:5000/",
            "2 times",
        ),
        (f"{AUTH}&redirect_uri=https://127.0.0.1:4000/", "'https://127.0.0.1:4000/'"),
        (f"{AUTH}&redirect_uri=http://user@127.0.0.1:4000/", "user name"),
        (f"{AUTH}&redirect_uri=http://evil.example@localhost:4000/", "user name"),
        (f"{AUTH}&redirect_uri=http%3A%2F%2F127.0.0.1%3A4000%2Fcb%23frag", "fragment"),
        (f"{AUTH}&redirect_uri=http://127.0.0.1:0/", "1024..65535"),
        (f"{AUTH}&redirect_uri=http://127.0.0.1:65536/", "1024..65535"),
        (f"{AUTH}&redirect_uri=http://127.0.0.1:631/", "1024..65535"),
        (f"{AUTH}&redirect_uri=http://127.0.0.1:000004000/", "needs a port"),
        (f"{AUTH}&redirect_uri=http://127.0.0.1/", "needs a port"),
        (f"{AUTH}&redirect_uri=http://localhost/", "needs a port"),
        (f"{AUTH}&redirect_uri=http://[::1]/", "needs a port"),
        (f"{AUTH}&redirect_uri=http://127.0.0.2:4000/", "host must be"),
        (f"{AUTH}&redirect_uri=http://127.1:4000/", "host must be"),
        (f"{AUTH}&redirect_uri=http://[::ffff:127.0.0.1]:4000/", "host must be"),
        (f"{AUTH}&redirect_uri=http://[0:0:0:0:0:0:0:1]:4000/", "host must be"),
        (f"{AUTH}&redirect_uri=http://LOCALHOST:4000/", "host must be"),
        (f"{AUTH}&redirect_uri=http://a.localhost:4000/", "host must be"),
        (f"{AUTH}&redirect_uri=http://%256cocalhost:4000/", "host must be"),
        (f"{AUTH}&redirect_uri=http://localhost:4000%5C@evil.example/", "without '\\'"),
        (f"{AUTH}&redirect_uri=http://localhost:4000/%0D%0AX:%20y", "printable ASCII"),
    ],
)
def test_a_loose_loopback_redirect_is_refused_naming_it(url: str, named: str) -> None:
    with pytest.raises(RegistrationError, match="redirect_uri") as refused:
        loopback_redirect(url)
    assert named in str(refused.value)


def test_the_host_of_an_authorize_url_leaves_out_user_and_port() -> None:
    assert host_of("https://u:p@Auth.Example.com.:8443/x?y#z") == "auth.example.com"
    assert host_of("https://[2001:db8::1]:443/") == "[2001:db8::1]"


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("auth.example.com", "auth.example.com"),
        ("login.corp.example", "*.corp.example"),
        ("corp.example", None),  # *.domain is its subdomains, not the domain
        ("evilcorp.example", None),
        ("auth.example.com.evil.example", None),
    ],
)
def test_an_allowed_authorize_host_is_matched_exactly_or_as_a_subdomain(
    host: str, expected: str | None
) -> None:
    assert host_allowed(("auth.example.com", "*.corp.example"), host) == expected

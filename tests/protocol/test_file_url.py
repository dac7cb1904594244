"""``file://`` URLs given to ``sandbridge-open`` (sans-I/O): the path each names inside the
sandbox, and every loose spelling refused naming the URL."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import FileOpenRefused
from sandbridge.protocol.file_url import file_url_path, is_file_url
from sandbridge.protocol.limits import MAX_OPEN_URL_LENGTH


@pytest.mark.parametrize(
    ("url", "path"),
    [
        (
            "file:///root/.local/share/jupyter/runtime/jpserver-7-open.html",
            "/root/.local/share/jupyter/runtime/jpserver-7-open.html",
        ),
        ("FILE:///tmp/Page.HTM", "/tmp/Page.HTM"),
        ("file:///tmp/a%20b/c%2B.html", "/tmp/a b/c+.html"),
        ("file:///tmp/%C3%A9t%C3%A9.html", "/tmp/\u00e9t\u00e9.html"),
        ("file:///tmp/..a/b..c.html", "/tmp/..a/b..c.html"),
        ("file:///p.html", "/p.html"),
    ],
)
def test_a_file_url_names_its_decoded_path_inside(url: str, path: str) -> None:
    assert is_file_url(url)
    assert file_url_path(url) == path


@pytest.mark.parametrize(
    "url",
    ["http://localhost:8888/", "https://example.com/file:///x.html", "/tmp/x.html", "fil:x"],
)
def test_other_urls_are_not_file_urls(url: str) -> None:
    assert not is_file_url(url)


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("file://localhost/tmp/x.html", "names a host ('localhost')"),
        ("file://server/share/x.html", "names a host ('server')"),
        ("file://127.0.0.1/x.html", "names a host ('127.0.0.1')"),
        ("file:/tmp/x.html", "must start with file:///"),
        ("file:tmp/x.html", "must start with file:///"),
        ("file:///tmp/x.html?token=1", "a query, a fragment"),
        ("file:///tmp/x.html#top", "a query, a fragment"),
        ("file:///tmp\\x.html", "a query, a fragment or a '\\'"),
        ("file:///tmp/../etc/x.html", "'..' segment"),
        ("file:///tmp/%2e%2e/etc/x.html", "'..' segment"),
        ("file:///tmp/%2E./x.html", "'..' segment"),
        ("file:///tmp/./x.html", "'.' or '..' segment"),
        ("file:////etc/x.html", "empty, '.' or '..' segment"),
        ("file:///tmp//x.html", "empty, '.' or '..' segment"),
        ("file:///tmp/a%2Fb.html", "escaped / (%2F)"),
        ("file:///tmp/a%2fb.html", "escaped / (%2f)"),
        ("file:///tmp/a%00.html", "escaped NUL (%00)"),
        ("file:///tmp/a%zz.html", "malformed percent-escape"),
        ("file:///tmp/a%4.html", "malformed percent-escape"),
        ("file:///tmp/a.html%", "malformed percent-escape"),
        ("file:///tmp/%ff.html", "not UTF-8 once percent-decoded"),
        ("file:///tmp/x.html/", "empty, '.' or '..' segment"),
        ("file:///etc/passwd", "does not name an HTML file"),
        ("file:///proc/self/environ", "does not name an HTML file"),
        ("file:///tmp/x.html.txt", "does not name an HTML file"),
        ("file:///tmp/x.xhtml%00", "escaped NUL"),
        ("file:///tmp/a b.html", "printable ASCII"),
        ("file:///tmp/\u00e9.html", "printable ASCII"),
        ("file:///tmp/\x1b[31m.html", "printable ASCII"),
        ("file:///" + "a" * MAX_OPEN_URL_LENGTH + ".html", f"the limit is {MAX_OPEN_URL_LENGTH}"),
    ],
)
def test_a_loose_or_hostile_file_url_is_refused_naming_it(url: str, error: str) -> None:
    with pytest.raises(FileOpenRefused) as caught:
        file_url_path(url)
    message = str(caught.value)
    assert error in message
    assert "\n" not in message
    if len(url) < 100 and url.isascii() and url.isprintable():
        assert repr(url) in message


def test_a_refusal_is_also_a_value_error() -> None:
    # The helper refuses every ValueError in one line, as it does the others.
    with pytest.raises(ValueError, match="names a host"):
        file_url_path("file://evil/x.html")

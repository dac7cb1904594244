"""Which local pages only redirect to an app of the sandbox (sans-I/O): Jupyter's redirect
file is followed, every other page is shown as it is."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import FileOpenRefused
from sandbridge.protocol.redirect_page import redirect_target, refresh_url

TOKEN_URL = "http://localhost:8888/lab?token=3b60218"
# jupyter_server 2's browser-open.html, as ``jupyter lab`` writes it (seen with the
# JupyterLab of .venv-apps): the e2e test opens the real one.
JUPYTER_PAGE = f"""<!DOCTYPE html>
<html lang="en">
<head>
    <meta charset="UTF-8">
    <meta http-equiv="refresh" content="1;url={TOKEN_URL}" />
    <title>Opening Jupyter Application</title>
</head>
<body>
<p>
    This page should redirect you to a Jupyter application. If it doesn't,
    <a href="{TOKEN_URL}">click here to go to Jupyter</a>.
</p>
</body>
</html>"""


def _meta(content: str) -> str:
    return f'<html><head><meta http-equiv="refresh" content="{content}"></head></html>'


def test_jupyters_redirect_file_gives_its_token_url() -> None:
    assert redirect_target(JUPYTER_PAGE) == TOKEN_URL


@pytest.mark.parametrize(
    ("page", "url"),
    [
        (_meta("0;url=http://127.0.0.1:4173/a?x=1&amp;y=2#f"), "http://127.0.0.1:4173/a?x=1&y=2#f"),
        (_meta("1; URL='http://[::1]:8888/lab'"), "http://[::1]:8888/lab"),
        (_meta(" 2 , url = &quot;http://0.0.0.0:8888/&quot; "), "http://0.0.0.0:8888/"),
        (_meta("1.5;http://app.localhost:5000/p"), "http://app.localhost:5000/p"),
        (
            "<META HTTP-EQUIV=Refresh CONTENT='1;url=http://localhost:9/'><p>x</p>",
            "http://localhost:9/",
        ),
        (
            "<!-- <meta http-equiv=refresh content='0;url=http://localhost:1/'> -->"
            + _meta("0;url=http://localhost:2/"),
            "http://localhost:2/",
        ),
        (
            "<script>document.write('<meta http-equiv=refresh content=\"0;url=http://localhost:1/\">')"
            "</script>" + _meta("0;url=http://localhost:2/"),
            "http://localhost:2/",
        ),
    ],
)
def test_one_strict_refresh_to_the_sandboxs_loopback_is_followed(page: str, url: str) -> None:
    assert redirect_target(page) == url


@pytest.mark.parametrize(
    "page",
    [
        "<!doctype html><p>a report</p>",
        '<a href="http://localhost:8888/lab">Jupyter</a>',
        "<script>location.href = 'http://localhost:8888/lab'</script>",
        _meta("1;url=/lab?token=x"),
        _meta("1;url=jpserver.html"),
        _meta("5"),
        _meta("url=http://localhost:8888/"),
        _meta(";url=http://localhost:8888/"),
        _meta("1 url=http://localhost:8888/"),
        _meta("1;url='http://localhost:8888/"),
        _meta("1;url='http://localhost:8888/' trailing"),
        _meta("1;url=http://localhost:8888/ x"),
        _meta("1;url="),
        _meta("1;url=ws://localhost:8888/socket"),
        _meta("1;url=file:///tmp/other.html"),
        _meta("1;url=javascript:alert(1)"),
        _meta("1;url=http://localhost:8888/") + _meta("1;url=http://localhost:8888/"),
        _meta("1;url=http://localhost:1/") + _meta("1;url=http://localhost:2/"),
        '<meta http-equiv="refresh" content="1;url=http://localhost:1/" '
        'content="1;url=http://localhost:2/">',
        '<meta http-equiv="refresh" http-equiv="x" content="1;url=http://localhost:1/">',
        '<meta http-equiv="refresh">',
        '<meta name="refresh" content="1;url=http://localhost:1/">',
        '<meta http-equiv=" refresh" content="1;url=http://localhost:1/">',
    ],
)
def test_any_other_page_is_no_redirect_and_is_shown_as_it_is(page: str) -> None:
    assert redirect_target(page) is None


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("http://127.1:8888/", "an IP address written another way"),
        ("http://%6cocalhost:8888/", "percent-encoded host"),
        ("http://localhost:99999/", "not 1..65535"),
        ("https://localhost:8888/", "TLS to the sandbox's own loopback"),
    ],
)
def test_a_refresh_to_a_refused_url_is_refused_naming_it(target: str, error: str) -> None:
    with pytest.raises(FileOpenRefused) as caught:
        redirect_target(_meta(f"0;url={target}"))
    assert str(caught.value).startswith("the page redirects to a URL that is refused: ")
    assert error in str(caught.value) and repr(target) in str(caught.value)


def test_a_refresh_url_is_read_before_it_is_judged() -> None:
    assert refresh_url(_meta("0;url=https://example.com/")) == "https://example.com/"
    assert refresh_url("<p>no refresh</p>") is None


@pytest.mark.parametrize("url", ["https://example.com/login", "http://10.0.0.7:8888/"])
def test_a_redirect_to_an_external_url_is_asked_for_as_that_url(url: str) -> None:
    # Opened as an external request (printed for the owner by default), never shown as a
    # snapshot whose own refresh would take the owner's tab there unasked.
    assert redirect_target(_meta(f"1;url={url}")) == url

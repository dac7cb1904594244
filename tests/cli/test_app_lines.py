"""What ``run`` prints of an app, from the daemon's event fields (both clients print it)."""

from __future__ import annotations

from sandbridge.cli import app_lines
from sandbridge.protocol.publish_rules import PublishAction

APP = {
    "port": 4173,
    "base_path": "/",
    "host_port": 43125,
    "url": "http://127.0.0.1:43125/",
    "host_name": "127.0.0.1",
    "process": None,
    "action": None,
}


def test_an_app_on_127_0_0_1_is_one_line() -> None:
    assert app_lines.registered(APP) == ["sandbridge: sandbox port 4173 -> http://127.0.0.1:43125/"]


def test_an_app_of_its_own_host_name_says_how_other_clients_reach_it() -> None:
    app = {**APP, "host_name": "abc.localhost", "url": "http://abc.localhost:43125/"}
    assert app_lines.registered(app) == [
        "sandbridge: browsers and curl open the URL below as is; other clients connect to "
        "127.0.0.1:43125 and send Host: abc.localhost:43125",
        "sandbridge: sandbox port 4173 -> http://abc.localhost:43125/",
    ]


def test_an_auto_published_app_names_its_process() -> None:
    app = {**APP, "process": "node", "action": "notify"}
    assert app_lines.registered(app) == [
        "sandbridge: sandbox port 4173 (node) -> http://127.0.0.1:43125/"
    ]
    assert app_lines.gone(app) == [
        "sandbridge: sandbox port 4173 (node) stopped listening; host port 43125 closed"
    ]


def test_a_silent_app_prints_nothing() -> None:
    app = {**APP, "process": "node", "action": app_lines.SILENT}
    assert app_lines.registered(app) == app_lines.gone(app) == []


def test_silent_is_the_publish_actions_value() -> None:
    assert PublishAction.SILENT.value == app_lines.SILENT

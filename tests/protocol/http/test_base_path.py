"""The contract's base-path rule, case by case."""

from __future__ import annotations

import pytest

from sandbridge.protocol.http.base_path import apply_base_path


@pytest.mark.parametrize(
    ("target", "base", "expected"),
    [
        ("/styles.css", "/", "/styles.css"),
        ("/", "/", "/"),
        ("/app/x?y=1", "/", "/app/x?y=1"),
        ("/styles.css", "/app", "/app/styles.css"),
        ("/styles.css?theme=dark", "/app", "/app/styles.css?theme=dark"),
        ("/", "/app", "/app/"),
        ("/app", "/app", "/app"),
        ("/app/", "/app", "/app/"),
        ("/app?x=1", "/app", "/app?x=1"),
        ("/app/deep/page", "/app", "/app/deep/page"),
        ("/apple", "/app", "/app/apple"),
        ("/media?path=a&session=b", "/app", "/app/media?path=a&session=b"),
        ("/a/b", "/a/b", "/a/b"),
        ("/a", "/a/b", "/a/b/a"),
    ],
)
def test_base_path_rule(target: str, base: str, expected: str) -> None:
    assert apply_base_path(target, base) == expected


def test_root_absolute_asset_is_prefixed_with_base_path() -> None:
    assert apply_base_path("/script.js", "/app") == "/app/script.js"


@pytest.mark.parametrize("target", ["/x", "/app", "/app/y", "/app?z", "/"])
def test_rule_is_idempotent(target: str) -> None:
    once = apply_base_path(target, "/app")
    assert apply_base_path(once, "/app") == once

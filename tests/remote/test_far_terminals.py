"""The far side's check of a terminal control stream's first line (remote/far_terminals.py)."""

from __future__ import annotations

import json

import pytest

from sandbridge.remote.far_terminals import LINK_OPS, check_first_line, mark_attach


@pytest.mark.parametrize("op", sorted(LINK_OPS))
def test_the_terminal_ops_cross(op: str) -> None:
    assert check_first_line(f'{{"op":"{op}","id":"web:0123abcd"}}\n'.encode()) is None


@pytest.mark.parametrize(
    ("line", "refusal"),
    [
        (b'{"op":"allow","key":"00"}\n', "op 'allow' is not served over the remote link"),
        (b'{"op":"stop"}\n', "op 'stop' is not served over the remote link"),
        (b'{"op":"egress_approve","id":"x"}\n', "op 'egress_approve' is not served"),
        (b'{"op":"app_close","port":80}\n', "op 'app_close' is not served"),
        (b'{"op":"session_info"}\n', "op 'session_info' is not served"),
        (b'{"op":["list"]}\n', "op ['list'] is not served"),
        (b'{"id":"x"}\n', "op None is not served"),
        (b'["op","list"]\n', "one JSON object"),
        (b"not json\n", "one JSON object"),
        (b"[" * 100 + b"]" * 100 + b"\n", "one JSON object"),
    ],
)
def test_anything_else_is_refused_naming_it(line: bytes, refusal: str) -> None:
    why = check_first_line(line)
    assert why is not None and refusal in why


@pytest.mark.parametrize(
    "line",
    [
        b'{"op":"attach","id":"web:0123abcd"}\n',
        b'{"op":"attach","id":"web:0123abcd","over_link":false}\n',
    ],
)
def test_an_attach_is_marked_over_the_link_whatever_the_laptop_said(line: bytes) -> None:
    assert json.loads(mark_attach(line)) == {
        "op": "attach", "id": "web:0123abcd", "over_link": True,
    }  # fmt: skip


def test_other_ops_pass_unchanged() -> None:
    line = b'{"op":"list","over_link":true}\n'
    assert mark_attach(line) == line

"""The bridge hints block: what it tells the agent, and that it replaces its own block
only, keeping the rest of the agent's instruction file."""

from __future__ import annotations

from sandbridge.agents.hints import BEGIN, END, hints, with_hints


def test_the_hints_name_the_helpers_the_gate_and_the_host_services() -> None:
    text = hints("100.64.0.9", (5432, 6379))
    assert "ags-webview-url PORT" in text
    assert "sandbridge-open URL" in text
    assert "100.64.0.9:5432, 100.64.0.9:6379" in text
    assert 'sandbridge-allow HOST --reason "why"' in text


def test_without_a_gate_the_hints_say_there_is_no_proxy() -> None:
    text = hints(None, ())
    assert "no egress proxy" in text
    assert "sandbridge-allow" not in text


def test_the_block_is_added_after_the_owners_text() -> None:
    block = hints("100.64.0.1", ())
    assert with_hints("# mine\nbe terse", block) == f"# mine\nbe terse\n\n{block}"
    assert with_hints("", block) == block


def test_a_second_session_replaces_the_block_and_keeps_the_rest() -> None:
    first = with_hints("# mine\n", hints("100.64.0.1", ()))
    edited = first + "# added by the agent\n"
    second = with_hints(edited, hints("100.64.0.2", (5432,)))
    assert second.count(BEGIN) == 1
    assert second.count(END) == 1
    assert "100.64.0.2:5432" in second
    assert "100.64.0.1" not in second
    assert second.startswith("# mine\n")
    assert second.endswith("# added by the agent\n")

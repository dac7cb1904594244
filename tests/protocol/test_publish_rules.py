"""Auto-publish's rules: what each ``publish = ...`` value means, and which rule decides."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import PolicyError
from sandbridge.protocol.publish_rules import (
    PublishAction,
    PublishRule,
    decide,
    is_rule_value,
    parse_rule,
    parse_rule_option,
    refusal,
)

NOTIFY, OPEN, SILENT, IGNORE = (
    PublishAction.NOTIFY,
    PublishAction.OPEN,
    PublishAction.SILENT,
    PublishAction.IGNORE,
)


def rules(*values: str) -> list[PublishRule]:
    return [parse_rule(value, f"config:{n}") for n, value in enumerate(values, start=1)]


@pytest.mark.parametrize(
    ("value", "low", "high", "action"),
    [
        ("auto", 1, 65535, NOTIFY),
        ("3000-9999", 3000, 9999, NOTIFY),
        ("5173", 5173, 5173, NOTIFY),
        ("5173 open", 5173, 5173, OPEN),
        ("8000-8100 silent", 8000, 8100, SILENT),
        ("auto ignore", 1, 65535, IGNORE),
        ("1-65535", 1, 65535, NOTIFY),
        ("  5432   ignore ", 5432, 5432, IGNORE),
    ],
)
def test_rule_values(value: str, low: int, high: int, action: PublishAction) -> None:
    assert parse_rule(value, "here") == PublishRule(low, high, action, "here")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("", "expected 'publish = auto|PORT|LOW-HIGH"),
        ("3000 open now", "expected 'publish = auto|PORT|LOW-HIGH"),
        ("0", "publish = 0: give auto, a port 1..65535"),
        ("65536", "publish = 65536: give auto"),
        ("9999-3000", "publish = 9999-3000: give auto, a port 1..65535 or a range LOW-HIGH"),
        ("3000-", "publish = 3000-: give auto"),
        ("-3000", "publish = -3000: give auto"),
        ("3000-4000-5000", "publish = 3000-4000-5000: give auto"),
        ("000003000", "publish = 000003000: give auto"),
        ("٣٠٠٠", "give auto"),  # Arabic-Indic digits are not a port
        ("AUTO", "publish = AUTO: give auto"),
        ("5173 browser", "the action must be one of notify, open, silent, ignore, got 'browser'"),
    ],
)
def test_bad_rule_values_name_where_and_the_value(value: str, fragment: str) -> None:
    with pytest.raises(PolicyError, match=fragment) as caught:
        parse_rule(value, ".sandbridge/config:7")
    assert str(caught.value).startswith(".sandbridge/config:7: ")


@pytest.mark.parametrize(
    ("configured", "port", "action"),
    [
        ((), 3000, None),
        (("3000-9999",), 2999, None),
        (("3000-9999",), 3000, NOTIFY),
        (("3000-9999",), 9999, NOTIFY),
        (("3000-9999",), 10000, None),
        (("auto", "5432 ignore"), 5432, IGNORE),
        (("auto", "5432 ignore"), 5433, NOTIFY),
        # the narrowest rule decides, wherever it stands
        (("5173 open", "auto"), 5173, OPEN),
        (("5000-5999 silent", "auto", "5100-5199 ignore"), 5150, IGNORE),
        (("5000-5999 silent", "auto", "5100-5199 ignore"), 5250, SILENT),
        # of two rules as narrow, the later one (a flag after the file)
        (("3000-9999 silent", "3000-9999 open"), 4000, OPEN),
        (("auto", "auto ignore"), 80, IGNORE),
    ],
)
def test_decide_table(configured: tuple[str, ...], port: int, action: PublishAction | None) -> None:
    assert decide(rules(*configured), port) is action


def test_refusal_without_rules_says_the_session_does_not_auto_publish() -> None:
    assert refusal([], 3000) == (
        "port 3000: this session does not auto-publish (no publish = auto or range); "
        'register without "auto"'
    )


def test_refusal_out_of_range_names_the_ranges() -> None:
    why = refusal(rules("3000-3999", "8000", "3500 ignore"), 22)
    assert why == "port 22 is outside this session's auto-publish ports (3000-3999, 8000)"


def test_refusal_names_a_bounded_number_of_ranges() -> None:
    many = rules(*(str(port) for port in range(100, 110)))
    why = refusal(many, 22)
    assert why is not None
    assert why.endswith("(100, 101, 102, 103, and 6 more)")


def test_refusal_of_an_ignored_port() -> None:
    assert refusal(rules("auto", "5432 ignore"), 5432) == (
        "port 5432 is ignored by this session's auto-publish rules"
    )


def test_a_published_port_is_not_refused() -> None:
    assert refusal(rules("auto", "5432 ignore"), 5433) is None


@pytest.mark.parametrize(
    ("value", "is_rule"),
    [
        ("auto", True),
        ("3000-9999", True),
        ("3000-", True),  # a range, refused by parse_rule with its own message
        ("8000", False),
        ("8000:/app", False),
        ("8000:/a-b", False),  # a dash in the base path is no range
    ],
)
def test_publish_flag_values_are_rules_or_one_port(value: str, is_rule: bool) -> None:
    assert is_rule_value(value) is is_rule


@pytest.mark.parametrize("value", ["auto", "5173", "3000-9999 silent", "5432 ignore", "1-2 open"])
def test_entry_option_round_trips(value: str) -> None:
    rule = parse_rule(value, "x")
    again = parse_rule_option(rule.option())
    assert (again.low, again.high, again.action) == (rule.low, rule.high, rule.action)


@pytest.mark.parametrize(
    ("value", "text"),
    [("auto", "auto notify"), ("5173 open", "5173 open"), ("3000-3999", "3000-3999 notify")],
)
def test_rule_text_is_a_config_value(value: str, text: str) -> None:
    assert parse_rule(value, "x").text == text

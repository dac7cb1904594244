"""``--ssh-agent``'s value: the keys named, and every malformed name refused by name."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import PolicyError
from sandbridge.protocol.ssh_agent import fingerprint
from sandbridge.ssh_agent.choice import Confirm, KeyChoice, parse_choice

FPR = fingerprint(b"chosen")


def test_fingerprints_and_comments_are_both_names() -> None:
    choice = parse_choice([f"{FPR}, work laptop", "deploy"])
    assert choice == KeyChoice(frozenset({FPR}), frozenset({"work laptop", "deploy"}))


def test_a_key_is_offered_by_its_fingerprint_or_its_comment() -> None:
    choice = parse_choice([f"{FPR},deploy"])
    assert choice.offers(b"chosen", b"anything")
    assert choice.offers(b"other", b"deploy")
    assert not choice.offers(b"other", b"deploy2")


def test_selectors_no_key_answers_to_are_named() -> None:
    choice = parse_choice([f"{FPR},deploy,gone"])
    assert choice.unmatched([(b"chosen", b"x"), (b"k", b"deploy")]) == ["gone"]


def test_always_is_the_mode_a_key_may_name() -> None:
    assert parse_choice([f"{FPR}:always,deploy:always"]) == parse_choice([f"{FPR},deploy"])


def test_each_key_carries_its_confirmation_mode_always_by_default() -> None:
    choice = parse_choice([f"{FPR}:each,deploy:session,plain"])
    assert choice == parse_choice([f"{FPR},deploy,plain"])
    assert choice.mode_of(b"chosen", b"x") is Confirm.EACH
    assert choice.mode_of(b"other", b"deploy") is Confirm.SESSION
    assert choice.mode_of(b"third", b"plain") is Confirm.ALWAYS
    assert choice.shown() == [f"{FPR} (each)", "deploy (session)", "plain (always)"]


def test_a_key_named_twice_gets_the_mode_that_asks_more() -> None:
    choice = parse_choice([f"{FPR}:session,deploy:each", f"{FPR}:always"])
    assert choice.mode_of(b"chosen", b"x") is Confirm.SESSION
    assert choice.mode_of(b"chosen", b"deploy") is Confirm.EACH


def test_a_colon_word_that_is_no_mode_stays_part_of_the_comment() -> None:
    choice = parse_choice(["work:laptop"])
    assert choice.comments == frozenset({"work:laptop"})


REFUSED = [
    ("SHA256:short:each", "not a SHA256 fingerprint"),
    ("all", "every key is never offered"),
    ("ALL", "every key is never offered"),
    ("*", "every key is never offered"),
    ("a,,b", "an empty key name"),
    ("", "an empty key name"),
    ("SHA256:short", "not a SHA256 fingerprint"),
    ("MD5:aa:bb", "only SHA256 fingerprints"),
    ("bell\a", "not a key name"),
    ("x" * 201, "not a key name"),
]


@pytest.mark.parametrize(("value", "why"), REFUSED)
def test_a_malformed_choice_is_refused_naming_it(value: str, why: str) -> None:
    with pytest.raises(PolicyError, match=why) as refused:
        parse_choice([value], source="ssh_agent =")
    assert str(refused.value).startswith("ssh_agent =")


def test_no_value_at_all_is_refused() -> None:
    with pytest.raises(PolicyError, match="no key named"):
        parse_choice([])

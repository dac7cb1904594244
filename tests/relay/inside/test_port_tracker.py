"""Auto-publish's tracker: which ports each scan offers, withdraws and forgets (no I/O)."""

from __future__ import annotations

from sandbridge.protocol.publish_rules import PublishRule, parse_rule
from sandbridge.relay.inside.auto_publish import (
    GONE_AFTER_SCANS,
    OWNER_LOOKUPS,
    PortState,
    PortTracker,
)


def tracker(*values: str, exclude: tuple[int, ...] = ()) -> PortTracker:
    rules: list[PublishRule] = [parse_rule(value, "x") for value in values]
    return PortTracker(rules, exclude)


def test_a_new_port_in_range_is_offered_once() -> None:
    ports = tracker("3000-3999")
    assert ports.scan({3000}).new == [3000]
    ports.published(3000, 43125)
    assert ports.scan({3000}).new == []


def test_ports_out_of_range_ignored_or_excluded_are_never_offered() -> None:
    ports = tracker("3000-3999", "3500 ignore", exclude=(3600,))
    assert ports.scan({22, 2999, 3500, 3600, 4000, 3001}).new == [3001]


def test_without_rules_nothing_is_offered() -> None:
    assert tracker().scan({80, 3000, 65535}).new == []


def test_a_published_port_is_withdrawn_after_missing_scans_in_a_row() -> None:
    ports = tracker("auto")
    ports.scan({5173})
    ports.published(5173, 43125)
    for _ in range(GONE_AFTER_SCANS - 1):
        assert ports.scan(set()).gone == []
    assert ports.scan(set()).gone == [(5173, 43125)]
    assert ports.state(5173) is None


def test_a_port_back_within_the_grace_keeps_its_registration() -> None:
    ports = tracker("auto")
    ports.scan({5173})
    ports.published(5173, 43125)
    for _ in range(GONE_AFTER_SCANS - 1):
        ports.scan(set())
    changes = ports.scan({5173})
    assert (changes.new, changes.gone) == ([], [])
    for _ in range(GONE_AFTER_SCANS - 1):
        assert ports.scan(set()).gone == []  # the count started again


def test_a_refused_port_is_not_offered_again_until_it_goes_and_comes_back() -> None:
    ports = tracker("auto")
    ports.scan({8080})
    ports.refused(8080)
    assert ports.scan({8080}).new == []
    assert ports.scan(set()).gone == []  # nothing to withdraw: it was never published
    assert ports.scan({8080}).new == [8080]


def test_a_full_session_holds_new_ports_until_an_app_goes() -> None:
    ports = tracker("auto")
    ports.scan({3000, 3001})
    ports.published(3000, 43000)
    ports.session_full(3001)
    assert ports.full
    assert ports.scan({3000, 3001, 3002}).new == []  # no attempt while full
    assert ports.state(3002) is PortState.WAITING
    for _ in range(GONE_AFTER_SCANS - 1):
        assert ports.scan({3001, 3002}).gone == []
    assert ports.scan({3001, 3002}).gone == [(3000, 43000)]
    ports.withdrawn()
    assert not ports.full
    assert ports.scan({3001, 3002}).new == [3001, 3002]


def test_a_waiting_port_that_goes_is_forgotten() -> None:
    ports = tracker("auto")
    ports.scan({3000})
    ports.session_full(3000)
    ports.scan(set())
    assert ports.state(3000) is None


def test_a_port_the_host_defers_is_offered_again_by_the_next_scan_with_the_rest() -> None:
    ports = tracker("auto")
    assert ports.scan({3000, 3001, 3002}).new == [3000, 3001, 3002]
    ports.published(3000, 43125)
    ports.deferred(3001)  # the host's rate of new apps
    assert ports.throttled  # the publisher offers no more of this scan: 3002 waits too
    ports.deferred(3002)
    assert ports.state(3001) is None and ports.state(3002) is None
    next_scan = ports.scan({3000, 3001, 3002})
    assert next_scan.new == [3001, 3002]
    assert not ports.throttled


def test_a_port_whose_owner_is_not_found_is_offered_again_a_bounded_number_of_times() -> None:
    ports = tracker("auto")
    assert ports.scan({5173}).new == [5173]
    for _ in range(OWNER_LOOKUPS):
        assert ports.look_again(5173)
        assert ports.state(5173) is PortState.LOOKING
        assert ports.scan({5173}).new == [5173]
    assert not ports.look_again(5173)  # the lookups are spent: offered now, as unknown
    assert ports.state(5173) is PortState.REGISTERING


def test_a_port_looked_for_that_stops_listening_is_forgotten() -> None:
    ports = tracker("auto")
    ports.scan({5173})
    assert ports.look_again(5173)
    assert ports.scan(set()).new == []
    assert ports.state(5173) is None
    assert ports.scan({5173}).new == [5173]
    assert ports.look_again(5173)  # a new listener: its lookups start again

"""Which sandbox ports auto-publish registers, and what the host does with each (pure).

``publish = auto`` or ``publish = 3000-9999`` (a line of ``.sandbridge/config``, or
``--publish auto``/``--publish 3000-9999``) turns auto-publish on: the sandbox's entry
watches its own listening TCP sockets (``relay/inside/auto_publish.py``) and registers each new
one that a rule covers. Like VS Code's ``portsAttributes``, a rule may name an action:

=========  ===============================================================
``notify``  register; the host prints the URL (the default)
``open``    register; the host opens the URL (for now: prints that it would)
``silent``  register; the host prints nothing (``sandbridge ls`` shows it)
``ignore``  never register
=========  ===============================================================

The narrowest rule that covers a port decides (``publish = 5432 ignore`` inside
``publish = auto``); of two rules as narrow, the later one (flags come after the file).
A port that no rule covers is never registered: without a rule, auto-publish does
nothing, and the relay never becomes a wildcard port bridge. Both sides decide with
:func:`decide`: the entry so that it registers only what the rules cover, the host so
that a registration marked ``auto`` is refused unless the owner's rules cover it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import NamedTuple

from sandbridge.exceptions import PolicyError

AUTO = "auto"
MIN_PORT = 1
MAX_PORT = 65535
# A port number has at most five digits; anything longer is refused before int().
_MAX_DIGITS = 5
# A refusal names this many of the session's rules: enough to see the mistake, and the
# answer stays far below the registration answer a helper reads (4 KiB).
_SHOWN_RULES = 4
SYNTAX = "publish = auto|PORT|LOW-HIGH [notify|open|silent|ignore]"


class PublishAction(enum.Enum):
    """What the host does with an auto-published port."""

    NOTIFY = "notify"
    OPEN = "open"
    SILENT = "silent"
    IGNORE = "ignore"


class PublishRule(NamedTuple):
    """Ports ``low``..``high`` (inclusive) get ``action``; ``source`` is the line that said
    so. A NamedTuple: the sandbox entry parses rules and never imports ``dataclasses``."""

    low: int
    high: int
    action: PublishAction
    source: str

    def covers(self, port: int) -> bool:
        return self.low <= port <= self.high

    @property
    def ports(self) -> str:
        """The ports as the config writes them: ``auto``, ``5173`` or ``3000-9999``."""
        if (self.low, self.high) == (MIN_PORT, MAX_PORT):
            return AUTO
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"

    @property
    def text(self) -> str:
        """The rule as a ``publish = ...`` value."""
        return f"{self.ports} {self.action.value}"

    def option(self) -> str:
        """The rule as the sandbox entry's ``--publish-rule`` value: ``LOW-HIGH:ACTION``."""
        return f"{self.low}-{self.high}:{self.action.value}"


def is_rule_value(value: str) -> bool:
    """True if a ``--publish`` value asks for auto-publish (``auto`` or a range) rather
    than one port (``PORT[:/base]``, registered once it listens: ``relay/inside/publish.py``)."""
    return value == AUTO or "-" in value.partition(":")[0]


def _port(text: str) -> int | None:
    if not (0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit()):
        return None
    number = int(text)
    return number if MIN_PORT <= number <= MAX_PORT else None


def _parse_ports(text: str, where: str) -> tuple[int, int]:
    if text == AUTO:
        return MIN_PORT, MAX_PORT
    low_text, dash, high_text = text.partition("-")
    low = _port(low_text)
    high = _port(high_text) if dash else low
    if low is None or high is None or low > high:
        raise PolicyError(
            f"{where}: publish = {text}: give auto, a port 1..65535 or a range LOW-HIGH "
            "with LOW <= HIGH"
        )
    return low, high


def parse_rule(text: str, where: str) -> PublishRule:
    """Parse a ``publish = ...`` value (``auto``, ``PORT`` or ``LOW-HIGH``, then an
    optional action); raise :class:`PolicyError` naming ``where`` and the value."""
    words = text.split()
    if not 1 <= len(words) <= 2:
        raise PolicyError(f"{where}: expected '{SYNTAX}', got {text!r}")
    low, high = _parse_ports(words[0], where)
    action = PublishAction.NOTIFY
    if len(words) == 2:
        try:
            action = PublishAction(words[1])
        except ValueError:
            choices = ", ".join(a.value for a in PublishAction)
            raise PolicyError(
                f"{where}: publish = {text}: the action must be one of {choices}, got {words[1]!r}"
            ) from None
    return PublishRule(low, high, action, where)


def parse_rule_option(value: str) -> PublishRule:
    """Parse :meth:`PublishRule.option`'s form (the entry's ``--publish-rule``)."""
    ports, colon, action = value.partition(":")
    return parse_rule(f"{ports} {action}" if colon else ports, "--publish-rule")


def publishes_any(rules: Sequence[PublishRule]) -> bool:
    """True if auto-publish has anything to watch: a rule that does not ignore."""
    return any(rule.action is not PublishAction.IGNORE for rule in rules)


def decide(rules: Sequence[PublishRule], port: int) -> PublishAction | None:
    """The action for ``port``: the narrowest covering rule's, the later of equals;
    ``None`` if no rule covers it (the port is never registered)."""
    best: PublishRule | None = None
    for rule in rules:
        if rule.covers(port) and (best is None or rule.high - rule.low <= best.high - best.low):
            best = rule
    return None if best is None else best.action


def refusal(rules: Sequence[PublishRule], port: int) -> str | None:
    """Why the host refuses an ``auto`` registration of ``port``, or ``None`` if the
    owner's rules publish it."""
    if not rules:
        return (
            f"port {port}: this session does not auto-publish (no publish = auto or "
            'range); register without "auto"'
        )
    action = decide(rules, port)
    if action is None:
        shown = [rule.ports for rule in rules if rule.action is not PublishAction.IGNORE]
        more = f", and {len(shown) - _SHOWN_RULES} more" if len(shown) > _SHOWN_RULES else ""
        ranges = ", ".join(shown[:_SHOWN_RULES]) or "none"
        return f"port {port} is outside this session's auto-publish ports ({ranges}{more})"
    if action is PublishAction.IGNORE:
        return f"port {port} is ignored by this session's auto-publish rules"
    return None

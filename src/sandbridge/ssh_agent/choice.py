"""Which of the owner's agent keys a session offers (``--ssh-agent``), as a pure parse.

The value is a comma-separated list of keys, each named by its SHA256 fingerprint as
``ssh-add -l`` prints it (``SHA256:...``) or by its comment (the text after it). The flag
may be given more than once; the owner's config key ``ssh_agent = ...`` takes the same
value (:func:`parse_choice` is the one parser of both). There is no ``all``: a key the
owner added to the agent for something else is never offered by default.

A key may carry its confirmation mode: ``KEY:always`` (the default: every signature is
made without asking, and logged), ``KEY:session`` (the owner is asked before the key's
first signature; a yes holds for the rest of the session, a no refuses that signature and
the next one asks again) or ``KEY:each`` (asked before every signature). A key named twice
(by fingerprint and by comment) with two modes gets the one that asks more.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from sandbridge.exceptions import PolicyError
from sandbridge.protocol.ssh_agent import fingerprint

# A SHA256 fingerprint: 43 characters of unpadded base64 (ssh-keygen's form).
_FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")
# The words that would look like "every key" and are refused as such.
_EVERY_KEY = frozenset({"all", "*", "any"})
# A comment longer than this is not one a person typed to choose a key.
MAX_SELECTOR_CHARS = 200


class Confirm(enum.Enum):
    """When the owner is asked before a key signs, least asking first."""

    ALWAYS = "always"
    SESSION = "session"
    EACH = "each"

    def stricter(self, other: Confirm) -> Confirm:
        """The one of the two that asks more."""
        order = list(Confirm)
        return max(self, other, key=order.index)


@dataclass(frozen=True, slots=True)
class KeyChoice:
    """The owner's chosen keys: by fingerprint and by comment (either matches), each
    selector with its confirmation mode (absent: :attr:`Confirm.ALWAYS`)."""

    fingerprints: frozenset[str]
    comments: frozenset[str]
    modes: dict[str, Confirm] = field(default_factory=dict, compare=False, hash=False)

    def mode_of(self, key_blob: bytes, comment: bytes) -> Confirm:
        """The mode of a key this choice offers: the stricter of its selectors' modes."""
        mode = Confirm.ALWAYS
        for selector in (fingerprint(key_blob), comment.decode("utf-8", "replace")):
            if selector in self.fingerprints or selector in self.comments:
                mode = mode.stricter(self.modes.get(selector, Confirm.ALWAYS))
        return mode

    def offers(self, key_blob: bytes, comment: bytes) -> bool:
        """Whether the key with this public blob and comment is one the owner chose."""
        return (
            fingerprint(key_blob) in self.fingerprints
            or comment.decode("utf-8", "replace") in self.comments
        )

    def selectors(self) -> list[str]:
        """Every selector, fingerprints first, each once."""
        return sorted(self.fingerprints) + sorted(self.comments)

    def shown(self) -> list[str]:
        """Every selector with its mode, as ``--print-policy`` says them."""
        return [f"{s} ({self.modes.get(s, Confirm.ALWAYS).value})" for s in self.selectors()]

    def ambiguous(self, keys: Iterable[tuple[bytes, bytes]]) -> dict[str, list[str]]:
        """The chosen comments that more than one of ``keys`` carries, each with the
        fingerprints that carry it: ``ssh-keygen`` gives every key made on a machine the
        same ``user@host`` comment, so such a comment does not say which key."""
        carried: dict[str, list[str]] = {}
        for blob, comment in keys:
            text = comment.decode("utf-8", "replace")
            if text in self.comments:
                carried.setdefault(text, []).append(fingerprint(blob))
        return {text: sorted(fps) for text, fps in carried.items() if len(fps) > 1}

    def unmatched(self, keys: Iterable[tuple[bytes, bytes]]) -> list[str]:
        """The selectors no ``(blob, comment)`` of ``keys`` answers to."""
        keys = list(keys)
        found = {fingerprint(blob) for blob, _ in keys}
        comments = {comment.decode("utf-8", "replace") for _, comment in keys}
        return [s for s in sorted(self.fingerprints) if s not in found] + [
            s for s in sorted(self.comments) if s not in comments
        ]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """What a session's ssh-agent bridge serves: the chosen keys, from the owner's agent
    at ``owner_agent`` (the host's ``SSH_AUTH_SOCK``)."""

    choice: KeyChoice
    owner_agent: str


def parse_choice(values: Iterable[str], source: str = "--ssh-agent") -> KeyChoice:
    """The keys ``values`` name (each a comma-separated list); ``source`` names where
    they came from in a refusal (the flag, or the config file's line)."""
    fingerprints: set[str] = set()
    comments: set[str] = set()
    modes: dict[str, Confirm] = {}
    for value in values:
        for raw in value.split(","):
            selector = raw.strip()
            if not selector:
                raise PolicyError(
                    f"{source} {value!r}: an empty key name; name each key by its "
                    "SHA256 fingerprint or comment as ssh-add -l prints them"
                )
            if selector.lower() in _EVERY_KEY:
                raise PolicyError(
                    f"{source} {selector!r}: every key is never offered; name the keys "
                    "by SHA256 fingerprint or comment (ssh-add -l lists them)"
                )
            if len(selector) > MAX_SELECTOR_CHARS or not selector.isprintable():
                raise PolicyError(
                    f"{source} {selector[:MAX_SELECTOR_CHARS]!r}: not a key name; name "
                    "each key by its SHA256 fingerprint or comment as ssh-add -l prints them"
                )
            mode = Confirm.ALWAYS
            name, _, word = selector.rpartition(":")
            if name and word in {m.value for m in Confirm}:
                selector, mode = name, Confirm(word)
            modes[selector] = modes.get(selector, Confirm.ALWAYS).stricter(mode)
            if selector.startswith("SHA256:"):
                if not _FINGERPRINT.fullmatch(selector):
                    raise PolicyError(
                        f"{source} {selector!r}: not a SHA256 fingerprint (43 base64 "
                        "characters after SHA256:); copy it from ssh-add -l"
                    )
                fingerprints.add(selector)
            elif selector.upper().startswith(("MD5:", "SHA1:")):
                raise PolicyError(
                    f"{source} {selector!r}: only SHA256 fingerprints are read; "
                    "ssh-add -l -E sha256 prints them"
                )
            else:
                comments.add(selector)
    if not fingerprints and not comments:
        raise PolicyError(f"{source}: no key named; name the keys to offer (ssh-add -l)")
    return KeyChoice(frozenset(fingerprints), frozenset(comments), modes)

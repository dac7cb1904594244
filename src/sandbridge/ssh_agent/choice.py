"""Which of the owner's agent keys a session offers (``--ssh-agent``), as a pure parse.

The value is a comma-separated list of keys, each named by its SHA256 fingerprint as
``ssh-add -l`` prints it (``SHA256:...``) or by its comment (the text after it). The flag
may be given more than once; the owner's config key ``ssh_agent = ...`` takes the same
value (:func:`parse_choice` is the one parser of both). There is no ``all``: a key the
owner added to the agent for something else is never offered by default.

A key may carry its confirmation mode, ``KEY:always`` (the one served now: every
signature is made without asking, and logged). ``KEY:session`` and ``KEY:each`` (ask
the owner once per session, or before each signature) are refused by name until the
owner's question machinery asks about signatures (docs/ssh-agent.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from sandbridge.exceptions import PolicyError
from sandbridge.protocol.ssh_agent import fingerprint

# A SHA256 fingerprint: 43 characters of unpadded base64 (ssh-keygen's form).
_FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")
# The words that would look like "every key" and are refused as such.
_EVERY_KEY = frozenset({"all", "*", "any"})
# The confirmation modes a key may name, and the ones not served yet.
ALWAYS = "always"
NOT_SERVED_MODES = frozenset({"session", "each"})
# A comment longer than this is not one a person typed to choose a key.
MAX_SELECTOR_CHARS = 200


@dataclass(frozen=True, slots=True)
class KeyChoice:
    """The owner's chosen keys: by fingerprint and by comment (either matches)."""

    fingerprints: frozenset[str]
    comments: frozenset[str]

    def offers(self, key_blob: bytes, comment: bytes) -> bool:
        """Whether the key with this public blob and comment is one the owner chose."""
        return (
            fingerprint(key_blob) in self.fingerprints
            or comment.decode("utf-8", "replace") in self.comments
        )

    def selectors(self) -> list[str]:
        """Every selector, fingerprints first, each once (for ``--print-policy``)."""
        return sorted(self.fingerprints) + sorted(self.comments)

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
            name, _, mode = selector.rpartition(":")
            if mode in NOT_SERVED_MODES and name:
                raise PolicyError(
                    f"{source} {selector!r}: asking before signatures ({mode}) is not "
                    f"served yet; every chosen key signs without asking and each signature "
                    f"is logged: name the key alone, or as {name}:{ALWAYS}"
                )
            if mode == ALWAYS and name:
                selector = name
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
    return KeyChoice(frozenset(fingerprints), frozenset(comments))

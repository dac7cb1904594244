"""Comments taken out of a manifest's text before the survey reads URLs in it: a URL in a
comment is no source any tool fetches from.

Each function blanks what it takes out but keeps every line break, so a finding's line
number is still the file's, and each is linear in the text's length (a hostile file may be
megabytes of unclosed comment openers): it moves forward with ``str.find`` and a compiled
search, never back.
"""

from __future__ import annotations

import re

# Where something starts that may hide a comment opener or be one: a string literal of
# Groovy or Kotlin (triple quotes first), or a slash.
_C_LIKE_START = re.compile(r"\"\"\"|'''|[\"'/]")
# A one-quote string literal up to its closing quote or its line's end (escapes skipped).
_ONE_QUOTE_STRING = {
    quote: re.compile(f"{quote}(?:[^{quote}\\\\\\n]|\\\\.)*{quote}?") for quote in "\"'"
}


def _blank(text: str, start: int, end: int) -> str:
    return "\n" * text.count("\n", start, end)


def without_xml_comments(text: str) -> str:
    """``text`` with each ``<!-- ... -->`` blanked; an unclosed one runs to the end."""
    parts = []
    done = 0
    while (start := text.find("<!--", done)) >= 0:
        end = text.find("-->", start + 4)
        end = len(text) if end < 0 else end + 3
        parts += [text[done:start], _blank(text, start, end)]
        done = end
    parts.append(text[done:])
    return "".join(parts)


def _string_end(text: str, start: int, quote: str) -> int:
    """Where the string literal opened by ``quote`` at ``start`` ends (just after it).
    A one-quote string ends at its line's end if it is not closed there, as the Groovy
    and Kotlin lexers stop it; a triple-quoted one may span lines."""
    if len(quote) == 3:
        end = text.find(quote, start + 3)
        return len(text) if end < 0 else end + 3
    found = _ONE_QUOTE_STRING[quote].match(text, start)
    assert found is not None  # (the opening quote alone matches)
    return found.end()


def without_c_comments(text: str) -> str:
    """``text`` (a Gradle build script, Groovy or Kotlin) with each ``/* ... */`` and
    ``// ...`` blanked; an unclosed ``/*`` runs to the end. Openers inside string literals
    are no comments: ``exclude "**/*.tmp"`` and ``url "https://..."`` stay as they are."""
    parts = []
    done = at = 0
    while (found := _C_LIKE_START.search(text, at)) is not None:
        start = found.start()
        opener = found.group(0)
        if opener != "/":
            at = _string_end(text, start, opener)
            continue
        following = text[start + 1 : start + 2]
        if following == "*":
            end = text.find("*/", start + 2)
            end = len(text) if end < 0 else end + 2
        elif following == "/":
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
        else:
            at = start + 1
            continue
        parts += [text[done:start], _blank(text, start, end)]
        done = at = end
    parts.append(text[done:])
    return "".join(parts)

"""What an agent is told about the bridges, and where in its instruction file it goes.

The hints are one block of the agent's user-level instruction file (``~/.claude/CLAUDE.md``
and the like, in the agent's own state: never the project's, never the owner's real one),
between two marker lines. Each session replaces the block (the gate address or the host
services may have changed) and leaves whatever else the file holds as it was. Pure text
in, text out: the file's I/O is :mod:`sandbridge.agents.state`'s.
"""

from __future__ import annotations

BEGIN = "<!-- sandbridge: begin (rewritten at each session start) -->"
END = "<!-- sandbridge: end -->"


def hints(gate: str | None, services: tuple[int, ...]) -> str:
    """The block for a session whose gate is ``gate`` (None: no egress gate, in network
    mode none or full) serving host ``services`` (ports)."""
    lines = [
        BEGIN,
        "## Working in a sandbridge sandbox",
        "",
        "You run inside a sandbox. Its bridges to the owner's machine are narrow:",
        "",
        "- A web app you serve: run `ags-webview-url PORT [BASE_PATH]` and give the owner "
        "the URL it prints (not a localhost URL: the owner's browser is outside).",
        "- To open a URL in the owner's browser: `sandbridge-open URL`.",
    ]
    if gate is None:
        lines.append("- There is no egress proxy in this session's network mode.")
    else:
        shown = ", ".join(f"{gate}:{port}" for port in services) or "none in this session"
        lines += [
            f"- Host services (databases and the like) are at the gate address {gate}: {shown}.",
            "- The internet is reached through the proxy the environment names "
            "(`http_proxy`), for the hosts the owner allowed only. If a host you need is "
            'refused, ask for it: `sandbridge-allow HOST --reason "why"` (the owner decides; '
            "do not try to get around the refusal).",
        ]
    lines += [END, ""]
    return "\n".join(lines)


def with_hints(current: str, block: str) -> str:
    """``current`` (the file's text) with its hints block replaced by ``block``, or
    ``block`` added at its end; the rest of the text is kept as it was."""
    start = current.find(BEGIN)
    end = current.find(END, start + 1) if start >= 0 else -1
    if start >= 0 and end >= 0:
        after = current[end + len(END) :].removeprefix("\n")
        return current[:start] + block + after
    if current and not current.endswith("\n"):
        current += "\n"
    return current + ("\n" if current else "") + block

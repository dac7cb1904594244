"""The owner's own clipboard tools on the host, run by absolute path per request.

On Wayland (``WAYLAND_DISPLAY`` set) ``wl-paste``/``wl-copy``; on X (``DISPLAY`` set)
``xclip``, else ``xsel`` (text only). Each is found where no sandbox can write
(places/host_commands.py), so a ``wl-paste`` the sandbox planted in the workdir is never
run on the host. A paste is read up to its type's cap and no further: a larger one is
refused and the tool killed. A copy's tool is left running in its own session: X and
Wayland keep a clipboard by a process that serves it (xclip and wl-copy fork one), and
it belongs to the owner's desktop, not to the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from sandbridge.exceptions import ClipboardRefused, PolicyError
from sandbridge.places import host_commands
from sandbridge.protocol.clipboard import PNG, TEXT, TYPES

# How long the owner's tool may take: a clipboard owner that does not answer (a hung
# app) must not hold the request forever.
TOOL_TIMEOUT = 10.0
# Bytes read from a tool at a time.
READ_BYTES = 64 * 1024

# What the tools need of the environment they were found in to reach the display.
DISPLAY_VARIABLES = ("WAYLAND_DISPLAY", "DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR")

WAYLAND = "wayland"
XCLIP = "xclip"
XSEL = "xsel"


@dataclass(frozen=True, slots=True)
class OwnerTools:
    """The owner's clipboard tools: ``kind`` and their absolute paths (``paste`` and
    ``copy`` are one program for xclip and xsel), and the display's variables."""

    kind: str
    paste: str
    copy: str
    display: tuple[tuple[str, str], ...] = ()

    def env(self) -> dict[str, str]:
        """The environment the tools run in: this process's, with the display's."""
        return {**os.environ, **dict(self.display)}

    def types(self) -> tuple[str, ...]:
        """The types these tools carry."""
        return (TEXT,) if self.kind == XSEL else TYPES

    def paste_argv(self, kind: str) -> list[str]:
        """The argv that prints the clipboard's ``kind``."""
        if self.kind == WAYLAND:
            return [self.paste, "--no-newline", "--type", kind]
        if self.kind == XCLIP:
            return [self.paste, "-selection", "clipboard", "-o", "-t", _x_target(kind)]
        return [self.paste, "--clipboard", "--output"]

    def types_argv(self) -> list[str]:
        """The argv that lists the clipboard's types (one a line)."""
        if self.kind == WAYLAND:
            return [self.paste, "--list-types"]
        if self.kind == XCLIP:
            return [self.paste, "-selection", "clipboard", "-o", "-t", "TARGETS"]
        return []

    def copy_argv(self, kind: str) -> list[str]:
        """The argv that puts its stdin on the clipboard as ``kind``."""
        if self.kind == WAYLAND:
            return [self.copy, "--type", kind]
        if self.kind == XCLIP:
            return [self.copy, "-selection", "clipboard", "-i", "-t", _x_target(kind)]
        return [self.copy, "--clipboard", "--input"]


def _x_target(kind: str) -> str:
    # X names text UTF8_STRING; applications ask for it before text/plain.
    return "UTF8_STRING" if kind == TEXT else kind


def find_owner_tools(environ: Mapping[str, str] | None = None) -> OwnerTools:
    """The owner's clipboard tools for the display in ``environ`` (default: this
    process's); refuses (:class:`PolicyError`) a host without a display or tools."""
    environ = os.environ if environ is None else environ
    display = tuple((name, environ[name]) for name in DISPLAY_VARIABLES if environ.get(name))
    if environ.get("WAYLAND_DISPLAY"):
        paste, copy = host_commands.which("wl-paste"), host_commands.which("wl-copy")
        if paste and copy:
            return OwnerTools(WAYLAND, paste, copy, display)
    if environ.get("DISPLAY"):
        for name in (XCLIP, XSEL):
            found = host_commands.which(name)
            if found:
                return OwnerTools(name, found, found, display)
    if not environ.get("WAYLAND_DISPLAY") and not environ.get("DISPLAY"):
        raise PolicyError(
            "--clipboard: neither WAYLAND_DISPLAY nor DISPLAY is set here; run from "
            "your desktop session's terminal, or drop --clipboard"
        )
    raise PolicyError(
        "--clipboard: no clipboard tool found on PATH (wl-paste and wl-copy on Wayland, "
        "xclip or xsel on X); install wl-clipboard or xclip"
    )


async def paste(argv: list[str], cap: int, env: dict[str, str]) -> bytes:
    """What the owner's tool ``argv`` prints, at most ``cap`` bytes (refused past it)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    data = bytearray()
    try:
        async with asyncio.timeout(TOOL_TIMEOUT):
            while chunk := await process.stdout.read(READ_BYTES):
                data += chunk
                if len(data) > cap:
                    raise ClipboardRefused(f"the clipboard holds more than {cap} bytes")
            status = await process.wait()
    except TimeoutError:
        raise ClipboardRefused(
            f"{os.path.basename(argv[0])} did not answer in {TOOL_TIMEOUT:g} s"
        ) from None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    if status != 0:
        # xclip and wl-paste fail when the clipboard is empty or lacks the type.
        raise ClipboardRefused("the clipboard holds nothing of this type")
    return bytes(data)


async def copy(argv: list[str], data: bytes, env: dict[str, str]) -> None:
    """Give ``data`` to the owner's tool ``argv`` on its stdin; refuse its failure."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(TOOL_TIMEOUT):
            await process.communicate(data)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise ClipboardRefused(
            f"{os.path.basename(argv[0])} did not take the data in time"
        ) from None
    if process.returncode != 0:
        raise ClipboardRefused(f"{os.path.basename(argv[0])} failed (exit {process.returncode})")


def parse_types(output: bytes, offered: tuple[str, ...]) -> tuple[str, ...]:
    """The served types among a tool's type list ``output`` (X's targets included)."""
    names = {line.strip() for line in output.decode("utf-8", "replace").splitlines()}
    text_names = {TEXT, "UTF8_STRING", "STRING", "TEXT", "text/plain;charset=utf-8"}
    found = []
    if names & text_names and TEXT in offered:
        found.append(TEXT)
    if PNG in names and PNG in offered:
        found.append(PNG)
    return tuple(found)

"""Where agent profiles are found: those shipped with sandbridge, then the owner's.

The shipped profiles are data files beside this module (``profiles/NAME.toml``). The
owner's, in ``${XDG_CONFIG_HOME:-~/.config}/sandbridge/agents/NAME.toml``, add agents or
replace a shipped one of the same name whole (a profile is small: a merge of two would
be harder to review than a copy). Never the project's ``.sandbridge/``: a profile decides
which of the owner's variables and hosts the sandbox gets, which is the owner's call.
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

from sandbridge.agents.profile import AgentProfile, parse_profile
from sandbridge.exceptions import AgentError
from sandbridge.terminals.config_dir import config_dir

SHIPPED_DIR = Path(__file__).resolve().parent / "profiles"
SUFFIX = ".toml"
# A profile is a dozen lines; one far larger was not written by hand.
MAX_PROFILE_BYTES = 64 * 1024


def user_dir() -> Path:
    """``${XDG_CONFIG_HOME:-~/.config}/sandbridge/agents``: the owner's profiles."""
    return config_dir() / "agents"


def load_file(path: Path) -> AgentProfile:
    """The profile in ``path`` (its name is the file's stem)."""
    raw = _read(path)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise AgentError(f"{path}: not UTF-8 text (at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise AgentError(f"{path}: not TOML: {exc}") from None
    return parse_profile(path.name.removesuffix(SUFFIX), path, data)


def _read(path: Path) -> bytes:
    """The file's bytes, at most :data:`MAX_PROFILE_BYTES`. The owner's config dir is
    out of every sandbox's sight (sandbox/host_paths.py), so a link there is the owner's
    own (a dotfiles checkout) and followed; a FIFO or a device is not read."""
    try:
        # Non-blocking: the open of a FIFO returns at once, and is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise AgentError(f"{path}: not a regular file; make it a plain file")
            raw = file.read(MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise AgentError(f"{path}: cannot read: {exc.strerror}") from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise AgentError(f"{path}: larger than {MAX_PROFILE_BYTES} bytes; a profile is a few lines")
    return raw


def _files(directory: Path) -> dict[str, Path]:
    if not directory.is_dir():
        return {}
    return {
        path.name.removesuffix(SUFFIX): path
        for path in sorted(directory.iterdir())
        if path.name.endswith(SUFFIX) and not path.name.startswith(".")
    }


def profile_files() -> dict[str, Path]:
    """Every profile's file by name, the owner's replacing a shipped one."""
    return {**_files(SHIPPED_DIR), **_files(user_dir())}


def load_all() -> dict[str, AgentProfile]:
    """Every profile, checked (the first malformed one is refused)."""
    return {name: load_file(path) for name, path in sorted(profile_files().items())}


def find(name: str) -> AgentProfile:
    """The profile called ``name``; an unknown name is refused with the known ones."""
    files = profile_files()
    if name not in files:
        raise AgentError(
            f"--agent {name!r}: no such profile (known: {', '.join(sorted(files))}); add "
            f"{user_dir() / (name + SUFFIX)} to define it"
        )
    return load_file(files[name])

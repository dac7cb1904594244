"""A real ``ssh-agent`` of the test's own (its socket in the test's directory) holding
two ed25519 keys: ``chosen`` and ``other``, each with its file, public line and
fingerprint."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Key:
    path: Path
    public: str
    fingerprint: str


@dataclass
class OwnerAgent:
    socket: Path
    chosen: Key
    other: Key
    process: subprocess.Popen[bytes]

    def env(self) -> dict[str, str]:
        return {**os.environ, "SSH_AUTH_SOCK": str(self.socket)}

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def make_key(directory: Path, name: str) -> Key:
    path = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True
    )
    printed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[1]
    return Key(path, path.with_suffix(".pub").read_text().strip(), printed)


def start_owner_agent(directory: Path) -> OwnerAgent:
    """Start the agent (``-D``: in the foreground, ours to kill) and add both keys."""
    socket = directory / "owner.sock"
    process = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(socket)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    # Its first line ("SSH_AUTH_SOCK=...; export ...") is written once it listens.
    assert process.stdout.readline().startswith(b"SSH_AUTH_SOCK=")
    agent = OwnerAgent(socket, make_key(directory, "chosen"), make_key(directory, "other"), process)
    for key in (agent.chosen, agent.other):
        subprocess.run(["ssh-add", "-q", str(key.path)], env=agent.env(), check=True)
    return agent

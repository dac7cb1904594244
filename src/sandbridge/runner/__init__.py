"""Sandbox backends: build the command that starts a sandbox from a :class:`SandboxSpec`."""

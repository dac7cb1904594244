"""The user's daemon: the host half of every session of one user (docs/daemon.md)."""

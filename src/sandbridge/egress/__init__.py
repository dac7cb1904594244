"""Allowlisted egress: the decision on the project's policy, the host's gate and log, the listener
inside."""

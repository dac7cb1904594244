"""Allowlisted egress: the policy and its decision, the host's gate and log, the listener inside."""

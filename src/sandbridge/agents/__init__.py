"""Coding agents run by name (``sandbridge run --agent NAME``): their profiles, their own
state kept per agent and project (or thrown away), and the bridge hints they are given
(docs/agents.md)."""

"""A project's first policy from evidence: the survey of its files, and ``policy init``."""

"""Owner-approved terminals: keys, signed approvals, the single-use journal, the audit
log, the encrypted channel and the attach client. See ``docs/terminals.md``."""

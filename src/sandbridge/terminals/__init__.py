"""Owner-approved terminals: approvals, journal, broker, encrypted channel, PTY worker, client."""

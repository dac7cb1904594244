"""Where sessions live on the host: runtime dirs (the contract's mount) and the
registry of running sessions."""

"""App origins' sandbox half: what runs inside (the shim, the helpers, publishing)."""

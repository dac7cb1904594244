"""App origins: the host's listeners and data path, and the shim and helpers in the sandbox."""

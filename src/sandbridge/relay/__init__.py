"""App origins: the host's listeners and data path here, the shim and helpers in ``inside/``."""

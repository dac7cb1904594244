"""One session's lifecycle: runtime dir, registry of running sessions, ``sandbridge run``."""

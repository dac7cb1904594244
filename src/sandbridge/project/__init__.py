"""The project's reviewed configuration in ``.sandbridge/``: its files, read safely."""

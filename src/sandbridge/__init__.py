"""sandbridge: narrow, audited bridges across a Linux sandbox boundary."""

__version__ = "0.1.0"

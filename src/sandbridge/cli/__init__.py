"""The ``sandbridge`` command, one module per command group."""

"""``python -m sandbridge.cli``: the ``sandbridge`` command."""

from sandbridge.cli.main import entry_point

entry_point()

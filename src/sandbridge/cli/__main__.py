"""``python -m sandbridge.cli``: the ``sandbridge`` command."""

import sys

from sandbridge.cli.main import main

sys.exit(main())

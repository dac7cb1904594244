"""A browser command for tests: appends its arguments (after the first, the file it
writes to) as one JSON line to that file, then exits 0."""

from __future__ import annotations

import json
import sys

with open(sys.argv[1], "a", encoding="utf-8") as out:
    out.write(json.dumps(sys.argv[2:]) + "\n")

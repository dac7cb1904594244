"""Lets pytest keep what it rewrites, loaded before every other plugin (pyproject.toml's
``addopts``: ``-p tests.write_bytecode``).

pytest rewrites the asserts of the test modules, the conftests and every module of an
installed plugin's distribution (all of hypothesis, anyio, platformdirs, xdist), and keeps
the result in ``__pycache__`` only where bytecode may be written. With
``PYTHONDONTWRITEBYTECODE`` set, as on some machines and images, each worker (which
collects every test file) rewrote and compiled them all again: the test modules were 9 of
a worker's 14 CPU seconds of collection, the plugins' 123 modules 2.3 of the 10 left.
Only this process writes: the variable stays in the environment its children get.
"""

import sys

sys.dont_write_bytecode = False

"""The event loop sandbridge's processes run on.

uvloop (libuv) runs the relay's many small reads, writes and timers at a fraction of
the stdlib loop's cost per call; the profile of the host at 64 concurrent keep-alive
clients showed most of its time in the stdlib loop's transport and timer code.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh uvloop event loop."""
    return uvloop.run(main)

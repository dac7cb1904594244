# The C front door's interface (src/sandbridge/relay/front/_front_*.c); read by mypy.
from typing import final

FRESH: int
SENT: int
RETRY: int
WANT: int
READ_MAX: int
PEEK_MAX: int
MAX_POOL: int
FREE: int
FIRST: int
AWAIT: int
IDLE: int
WAIT: int
RELAYED: int
INCOMPLETE: int
LEFT: int
# 1 in a build with -DSANDBRIDGE_FAULTS (tests/relay/front/front_sanitizers.py), which alone has
# _fail_next(site, count): the next `count` asks of a fault site ("handoff", "take",
# "request", "rest") fail, as an allocation that found no memory.
FAULTS: int

def _fail_next(site: str, count: int = 1, /) -> None: ...

@final
class Handoff:
    """A connection the front door hands to the Python relay (a structseq)."""

    __match_args__ = (
        "listener",
        "kind",
        "browser_fd",
        "app_fd",
        "host",
        "port",
        "data",
        "pending",
        "checked",
        "counted",
        "generation",
    )

    listener: int
    kind: int
    browser_fd: int
    app_fd: int
    host: str
    port: int
    data: bytes
    pending: bytes
    checked: bool
    counted: bool
    generation: int

@final
class Held:
    """What the front door holds of a listener (a structseq)."""

    __match_args__ = (
        "held",
        "pooled",
        "relayed",
        "handed",
        "scope_held",
        "room",
        "scope_room",
    )

    held: int
    pooled: int
    relayed: int
    handed: int
    scope_held: int
    room: int
    scope_room: int

@final
class Translation:
    """What translate_response makes of an app's response (a structseq)."""

    __match_args__ = ("verdict", "head", "whole")

    verdict: int
    head: bytes | None
    whole: int

def translate_response(data: bytes, head_request: bool, /) -> Translation: ...

class Front:
    def __init__(self, owner: int) -> None: ...
    def fileno(self) -> int: ...
    def add_listener(
        self,
        fd: int,
        port: int,
        base_path: bytes,
        pool_size: int,
        pool_idle: float,
        keepalive: float,
        grace: float,
        room: int,
        scope: int,
        scope_room: int,
    ) -> int: ...
    def remove_listener(self, lid: int, /) -> None: ...
    def lease(self, key: int, lid: int, room: int, scope_room: int, /) -> None: ...
    def give_back(self, key: int, lid: int, /) -> bool: ...
    def held(self, lid: int, /) -> Held: ...
    def remember(
        self, lid: int, ip: bytes, method: bytes, block: bytes, translated: bytes, /
    ) -> bool: ...
    def park(self, lid: int, fd: int, opened: bool = False, /) -> bool: ...
    def take(self) -> list[Handoff]: ...
    def adopted(self, lid: int, generation: int, kept: bool, /) -> bool: ...
    def close(self) -> None: ...

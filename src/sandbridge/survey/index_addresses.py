"""Which index names resolve to non-global addresses only, asked as the proxy asks.

On a company network a registry's name can resolve to a private address (a mirror, a
split-DNS resolver). The proxy connects a name to such an address only when its entry says
``private`` (:func:`sandbridge.egress.decision.check_addresses`), so ``policy init``
resolves each index name it writes with the resolver the session will use, and writes
those that reach no global address with ``private``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from sandbridge.aio.tasks import running
from sandbridge.egress.gate import Address, Resolver, is_local_address
from sandbridge.egress.requests import non_global_only

# Names resolved at most: a policy's indexes and registries, not a lockfile's every host.
MAX_NAMES = 32
# All names together: init waits no longer than this for DNS.
RESOLVE_BUDGET = 10.0


async def non_global_names(names: Iterable[str], resolver: Resolver) -> dict[str, str]:
    """Each of ``names`` that resolves, and only to non-global addresses (this host's
    own included, as the proxy judges them), with what it resolves to:
    ``{"mirror.corp.test": "mirror.corp.test resolves to 10.0.0.8 (private) and no
    global address"}``. Names that do not resolve in time are left out."""
    chosen = list(dict.fromkeys(names))[:MAX_NAMES]

    async def resolve(name: str) -> list[Address]:
        try:
            return await resolver.resolve(name)
        except OSError:
            return []

    async with running(*(resolve(name) for name in chosen)) as tasks:
        if tasks:
            await asyncio.wait(tasks, timeout=RESOLVE_BUDGET)
        done = {task for task in tasks if task.done() and not task.cancelled()}
    found: dict[str, str] = {}
    for name, task in zip(chosen, tasks, strict=True):
        if task not in done or task.exception() is not None:
            continue
        addresses = task.result()
        local = [address for address in addresses if is_local_address(address)]
        seen = non_global_only(name, addresses, local)
        if seen is not None:
            found[name] = seen
    return found

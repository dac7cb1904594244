"""Small asyncio building blocks: the event loop, socket helpers, watchdogs, connection sets."""

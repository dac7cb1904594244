"""The benchmark's WebSocket echo and SSE app (aiohttp), the same behind every path.

``/ws`` echoes every message; ``/sse?interval_ms=N`` sends an event carrying its send
time every N ms. Prints ``READY`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from aiohttp import WSMsgType, web


async def websocket(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=0, compress=False)
    await ws.prepare(request)
    async for message in ws:
        if message.type == WSMsgType.TEXT:
            await ws.send_str(message.data)
        elif message.type == WSMsgType.BINARY:
            await ws.send_bytes(message.data)
    return ws


async def sse(request: web.Request) -> web.StreamResponse:
    interval = float(request.query.get("interval_ms", "20")) / 1000
    count = int(request.query.get("count", "100"))
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for index in range(count):
        await response.write(f"id: {index}\ndata: {time.time()!r}\n\n".encode())
        await asyncio.sleep(interval)  # the app's pacing of its events
    return response


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_get("/ws", websocket)
    app.router.add_get("/sse", sse)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port, backlog=4096).start()
    print("READY", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())

"""Test app with what real dev servers do: ES modules, WebSocket, SSE, uploads, media.

Runs inside the sandbox (aiohttp). ``--base /app`` serves everything below ``/app``;
the pages still use root-absolute URLs, which the relay's base-path rule maps.
Prints ``READY <json>`` once registered.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from aiohttp import WSMsgType, web

STATIC = Path(__file__).with_name("feature_static")
BLOCK = bytes(range(256)) * 1024  # 256 KiB of a known pattern
# A write that waits this long is held back by the reader, not by scheduling noise.
BLOCKED_SECONDS = 0.5


def now_ms() -> float:
    return time.time() * 1000


class FeatureApp:
    def __init__(self, base: str, media: Path, port: int) -> None:
        self.base = "" if base == "/" else base.rstrip("/")
        self.media = media
        self.port = port
        self.media_statuses: list[int] = []
        self.sse_connections: list[dict[str, str | None]] = []
        self.ws_log: list[dict[str, object]] = []
        self.ws_logged = asyncio.Condition()
        self.blocked_at: list[int] = []
        self.blocked = asyncio.Condition()

    def routes(self) -> web.Application:
        app = web.Application(client_max_size=2**40)
        app.on_response_prepare.append(self.record_media_status)
        b = self.base
        app.router.add_get(b + "/", self.index)
        if b:
            app.router.add_get(b, self.index)
        app.router.add_get(b + "/static/{name}", self.static)
        app.router.add_post(b + "/form", self.form)
        app.router.add_get(b + "/api/hello", self.hello)
        app.router.add_get(b + "/api/media-log", self.media_log)
        app.router.add_get(b + "/api/sse-log", self.sse_log)
        app.router.add_get(b + "/api/ws-log", self.ws_log_view)
        app.router.add_get(b + "/api/bytes-log", self.bytes_log)
        app.router.add_get(b + "/ws", self.websocket)
        app.router.add_get(b + "/sse", self.sse)
        app.router.add_get(b + "/media/tone.wav", self.tone)
        app.router.add_post(b + "/upload", self.upload)
        app.router.add_post(b + "/sink", self.sink)
        app.router.add_get(b + "/bytes", self.bytes)
        app.router.add_get(b + "/chunks", self.chunks)
        app.router.add_get(b + "/redirect-absolute", self.redirect_absolute)
        app.router.add_get(b + "/redirect-root", self.redirect_root)
        return app

    async def index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html")

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        path = STATIC / name
        if "/" in name or not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path)

    async def form(self, request: web.Request) -> web.Response:
        data = await request.post()
        message = str(data.get("message", ""))
        body = (
            '<!doctype html><link rel="stylesheet" href="/static/style.css">'
            f'<p id="form-result">{message.replace("<", "&lt;")}</p>'
        )
        return web.Response(text=body, content_type="text/html")

    async def hello(self, request: web.Request) -> web.Response:
        return web.json_response({"hello": "from the sandbox", "path": request.path_qs})

    async def media_log(self, request: web.Request) -> web.Response:
        return web.json_response(self.media_statuses)

    async def ws_log_view(self, request: web.Request) -> web.Response:
        """The WebSocket sessions that ended; ``?wait=TAG`` waits for that one to end."""
        tag = request.query.get("wait")
        if tag is not None:
            async with self.ws_logged:
                await self.ws_logged.wait_for(lambda: any(e["tag"] == tag for e in self.ws_log))
        return web.json_response(self.ws_log)

    async def sse_log(self, request: web.Request) -> web.Response:
        return web.json_response(self.sse_connections)

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=("chat.v2", "chat.v1"), max_msg_size=0, heartbeat=None)
        await ws.prepare(request)
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                if message.data == "abort":
                    assert request.transport is not None
                    request.transport.abort()
                    break
                if message.data.startswith("close:"):
                    _, code, reason = message.data.split(":", 2)
                    await ws.close(code=int(code), message=reason.encode())
                    break
                await ws.send_str(message.data)
            elif message.type == WSMsgType.BINARY:
                await ws.send_bytes(message.data)
        self.ws_log.append(
            {
                "tag": request.query.get("tag"),
                "close_code": ws.close_code,
                "protocol": ws.ws_protocol,
            }
        )
        async with self.ws_logged:
            self.ws_logged.notify_all()
        return ws

    async def sse(self, request: web.Request) -> web.StreamResponse:
        last = request.headers.get("Last-Event-ID")
        self.sse_connections.append({"last_event_id": last})
        count = int(request.query.get("count", "3"))
        interval = float(request.query.get("interval_ms", "300")) / 1000
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        start = int(last) + 1 if last and last.isdigit() else 1
        await response.write(b"retry: 200\n\n")
        for event_id in range(start, start + count):
            data = json.dumps({"id": event_id, "sent": now_ms(), "resumed_from": last})
            await response.write(f"id: {event_id}\ndata: {data}\n\n".encode())
            await asyncio.sleep(interval)  # the app's own pacing, not test synchronisation
        if request.query.get("hold"):
            await asyncio.Event().wait()
        return response

    async def tone(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(self.media)

    async def record_media_status(self, request: web.Request, response: web.StreamResponse) -> None:
        if request.path.endswith("/media/tone.wav"):
            self.media_statuses.append(response.status)

    async def upload(self, request: web.Request) -> web.Response:
        reader = await request.multipart()
        result = {}
        async for part in reader:
            if part.filename:  # type: ignore[union-attr]
                digest, size = hashlib.sha256(), 0
                while chunk := await part.read_chunk(1 << 20):  # type: ignore[union-attr]
                    digest.update(chunk)
                    size += len(chunk)
                result = {"name": part.filename, "size": size, "sha256": digest.hexdigest()}  # type: ignore[union-attr]
        return web.json_response(result)

    async def sink(self, request: web.Request) -> web.Response:
        digest, size = hashlib.sha256(), 0
        async for chunk in request.content.iter_chunked(1 << 20):
            digest.update(chunk)
            size += len(chunk)
        return web.json_response({"size": size, "sha256": digest.hexdigest()})

    async def bytes(self, request: web.Request) -> web.StreamResponse:
        size = int(request.query["n"])
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = size
        await response.prepare(request)
        sent, reported = 0, False
        while sent < size:
            block = BLOCK[: min(len(BLOCK), size - sent)]
            write = asyncio.ensure_future(response.write(block))
            done, _ = await asyncio.wait({write}, timeout=None if reported else BLOCKED_SECONDS)
            if not done:
                # The reader's backpressure reached the app: say how far it got.
                reported = True
                self.blocked_at.append(sent)
                async with self.blocked:
                    self.blocked.notify_all()
            await write
            sent += len(block)
        return response

    async def bytes_log(self, request: web.Request) -> web.Response:
        """Where /bytes writers were held back; waits for the first such report."""
        async with self.blocked:
            await self.blocked.wait_for(lambda: bool(self.blocked_at))
        return web.json_response({"blocked_at": self.blocked_at})

    async def chunks(self, request: web.Request) -> web.StreamResponse:
        """Chunks of plain text, with the app's own pauses between them."""
        count = int(request.query.get("n", "3"))
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for index in range(count):
            await response.write(json.dumps({"i": index, "sent": now_ms()}).encode() + b"\n")
            await asyncio.sleep(float(request.query.get("pause_ms", "200")) / 1000)
        return response

    async def redirect_absolute(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://127.0.0.1:{self.port}{self.base}/api/hello?via=absolute")

    async def redirect_root(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/api/hello?via=root")


def write_tone(path: Path, seconds: int = 30) -> None:
    """A WAV file Chromium can play and seek in (a quiet square wave)."""
    import wave

    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(22050)
        period = b"\x00\x08" * 25 + b"\x00\xf8" * 25
        out.writeframes(period * (22050 * seconds // 50))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=4173)
    parser.add_argument("--base", default="/")
    args = parser.parse_args()
    media = Path("/tmp/tone.wav")
    write_tone(media)
    feature = FeatureApp(args.base, media, args.port)
    runner = web.AppRunner(feature.routes(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port).start()
    result = subprocess.run(
        ["ags-webview-url", str(args.port), args.base], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        sys.exit(f"registration failed: {result.stderr}")
    print("READY " + json.dumps({"url": result.stdout.strip()}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())

"""A small app that uses what a relay usually breaks: root-absolute assets, a form
POST to ``/submit`` and a fetch of ``/media?path=...&session=...``.

It listens on a sandbox port, registers itself with ``ags-webview-url`` and prints the
host URL. Under a base path it serves the same pages below that path.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import shutil
import subprocess
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources

STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/styles.css": ("styles.css", "text/css; charset=utf-8"),
    "/script.js": ("script.js", "text/javascript; charset=utf-8"),
}
# A form post is a few fields; the demo refuses anything bigger.
MAX_FORM_BYTES = 64 * 1024


def _static(name: str) -> bytes:
    return resources.files("sandbridge.demo").joinpath("static", name).read_bytes()


class DemoHandler(BaseHTTPRequestHandler):
    server_version = "sandbridge-demo"
    base_path = "/"

    def _route(self) -> tuple[str, str]:
        parsed = urllib.parse.urlsplit(self.path)
        path = parsed.path
        if self.base_path != "/" and (
            path == self.base_path or path.startswith(self.base_path + "/")
        ):
            path = path[len(self.base_path) :] or "/"
        return path, parsed.query

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        path, query = self._route()
        if path in STATIC:
            name, content_type = STATIC[path]
            self._send(200, _static(name), content_type)
        elif path == "/media":
            params = urllib.parse.parse_qs(query)
            body = json.dumps(
                {
                    "path": params.get("path", [""])[0],
                    "session": params.get("session", [""])[0],
                    "served_from": "inside the sandbox",
                }
            ).encode()
            self._send(200, body, "application/json")
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    do_HEAD = do_GET

    def do_POST(self) -> None:
        path, _ = self._route()
        length = int(self.headers.get("Content-Length") or 0)
        if path != "/submit" or length > MAX_FORM_BYTES:
            self._send(404 if path != "/submit" else 413, b"refused\n", "text/plain")
            return
        fields = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
        message = html.escape(fields.get("message", [""])[0])
        body = (
            '<!doctype html><link rel="stylesheet" href="/styles.css">'
            f'<h1>Received</h1><p id="received">{message}</p><a href="/">back</a>'
        ).encode()
        self._send(200, body, "text/html; charset=utf-8")

    def log_message(self, format: str, *args: object) -> None:
        return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandbridge-demo-app")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--base-path", default="/")
    args = parser.parse_args(argv)
    DemoHandler.base_path = args.base_path.rstrip("/") or "/"
    server = ThreadingHTTPServer(("127.0.0.1", args.port), DemoHandler)
    helper = shutil.which("ags-webview-url") or "ags-webview-url"
    result = subprocess.run(
        [helper, str(args.port), args.base_path], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        print(result.stderr.strip(), file=sys.stderr)
        return 1
    print(f"demo app: sandbox 127.0.0.1:{args.port} is {result.stdout.strip()}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A v1-only shim written from the contract text alone, standing in for other relays.

It knows one message: ``http_request`` in, one JSON answer out, per connection.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socketserver
import sys


def apply_base(path: str, base: str) -> str:
    if base == "/" or path == base or path.startswith((base + "/", base + "?")):
        return path
    return base + path


class Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        message = json.loads(self.rfile.readline())
        if message.get("type") != "http_request":
            answer = {"ok": False, "error": f"unsupported type {message.get('type')}"}
        else:
            conn = http.client.HTTPConnection("127.0.0.1", message["port"], timeout=30)
            body = base64.b64decode(message["body_base64"]) if message["body_base64"] else None
            conn.putrequest(
                message["method"],
                apply_base(message["path"], message["base_path"]),
                skip_host=True,
                skip_accept_encoding=True,
            )
            for name, value in message["headers"]:
                conn.putheader(name, value)
            conn.endheaders(body)
            response = conn.getresponse()
            data = response.read()
            answer = {
                "ok": True,
                "status": response.status,
                "reason": response.reason,
                "headers": [
                    [k, v]
                    for k, v in response.getheaders()
                    if k.lower() not in ("transfer-encoding", "connection")
                ],
                "body_base64": base64.b64encode(data).decode() if data else None,
            }
        self.wfile.write(json.dumps(answer).encode() + b"\n")


def main() -> None:
    path = sys.argv[1]
    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    os.chmod(path, 0o600)
    print("v1 shim listening", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

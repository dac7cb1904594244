"""A login as CLIs run it (gh, gcloud, an MCP server): listen on a loopback port, open the
authorize URL whose redirect_uri names that port (through $BROWSER, which is
sandbridge-open inside), await one callback, check its state, print the code.

Usage: oauth_login.py PORT AUTHORIZE_URL
"""

from __future__ import annotations

import http.server
import secrets
import sys
import urllib.parse
import webbrowser

port, authorize = int(sys.argv[1]), sys.argv[2]
state = secrets.token_hex(8)
redirect_uri = f"http://127.0.0.1:{port}/callback"
codes: list[str] = []


class Callback(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parts.query)
        good = parts.path == "/callback" and query.get("state") == [state] and "code" in query
        if good:
            codes.append(query["code"][0])
        body = b"<title>logged in</title>Logged in. You may close this window." if good else b"no"
        self.send_response(200 if good else 400)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass  # (its access line would print the code: the test looks for it in stderr)


server = http.server.HTTPServer(("127.0.0.1", port), Callback)
query = urllib.parse.urlencode(
    {"client_id": "cli", "response_type": "code", "redirect_uri": redirect_uri, "state": state}
)
print(f"listening on {port}", flush=True)
if not webbrowser.open(f"{authorize}?{query}"):
    sys.exit("the browser could not be opened")
while not codes:
    server.handle_request()
print(f"code={codes[0]}", flush=True)

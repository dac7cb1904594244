"""Test app: inside a sandbox, start and stop listening servers when the test says so.

Usage: port_controller.py FIFO
Prints ``READY``, then reads one command per line from FIFO (a named pipe in the
workdir, which the test writes):

  listen PORT NAME   start a server process named NAME (its /proc comm) on
                     127.0.0.1:PORT; prints ``LISTEN PORT ok`` once it listens, or
                     ``LISTEN PORT failed: ...``
  listen6 PORT NAME  the same on ::1 only
  stop PORT          end that server; prints ``STOPPED PORT`` once it has exited
  send TAG TEXT      send TEXT as one line to the relay socket; prints
                     ``ANSWER TAG <answer>``

Child mode: ``port_controller.py --serve PORT NAME [--v6]`` answers every GET with
``hello from NAME``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def serve(port: int, name: str, v6: bool) -> None:
    Path("/proc/self/comm").write_text(name)
    body = f"hello from {name}".encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if v6 else socket.AF_INET

    try:
        server = Server(("::1" if v6 else "127.0.0.1", port), Handler)
    except OSError as exc:
        print(f"failed: {exc}", flush=True)
        return
    print("ok", flush=True)
    server.serve_forever()


def ask(text: str) -> str:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(15)
        sock.connect(os.environ["AGS_WEBVIEW_RELAY_SOCKET"])
        sock.sendall(text.encode() + b"\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer.decode().strip()


def control(fifo: str) -> None:
    servers: dict[int, subprocess.Popen[str]] = {}
    print("READY", flush=True)
    with open(fifo) as commands:
        for line in commands:
            word, _, rest = line.strip().partition(" ")
            if word in ("listen", "listen6"):
                port_text, name = rest.split()
                argv = [sys.executable, __file__, "--serve", port_text, name]
                child = subprocess.Popen(
                    [*argv, *(["--v6"] if word == "listen6" else [])],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert child.stdout is not None
                outcome = child.stdout.readline().strip()
                servers[int(port_text)] = child
                print(f"LISTEN {port_text} {outcome}", flush=True)
            elif word == "stop":
                child = servers.pop(int(rest))
                child.terminate()
                child.wait()
                print(f"STOPPED {rest}", flush=True)
            elif word == "send":
                tag, _, text = rest.partition(" ")
                print(f"ANSWER {tag} {ask(text)}", flush=True)


def main() -> None:
    if sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), sys.argv[3], "--v6" in sys.argv)
    else:
        control(sys.argv[1])


if __name__ == "__main__":
    main()

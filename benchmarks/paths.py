"""The relay paths under test, each started and stopped the same way.

Every path serves two apps: nginx (static files, a POST sink) for HTTP workloads and
``stream_app`` (aiohttp) for WebSocket and SSE. ``http`` and ``stream`` are the base
URLs the client uses for each.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from benchmarks.proc import children
from sandbridge.protocol.limits import MAX_V1_BODY_BYTES

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SANDBRIDGE = [PYTHON, "-m", "sandbridge.cli"]
STREAM_APP = [PYTHON, str(REPO / "benchmarks" / "stream_app.py")]
SANDBOX_HTTP_PORT = 4173
SANDBOX_STREAM_PORT = 4174
# The relays' own buffers, as the issue fixes them for nginx and socat.
RELAY_BUFFER = 256 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# Between two asks of a path that is not serving yet: a curl asked back to back while
# jupyter server starts (seconds) was hundreds of processes, a core's worth of the start.
POLL_SECONDS = 0.05


def address_of(url: str) -> tuple[str, int, list[str]]:
    """Where a client connects for ``url``, and the wrk options that keep its Host.

    sandbridge's app URLs name ``<label>.localhost``: browsers and curl resolve it to
    loopback themselves; wrk and Python clients (glibc here) do not, so they connect to
    127.0.0.1 and send the URL's host as ``Host``.
    """
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None, url
    if parts.hostname.endswith(".localhost"):
        return "127.0.0.1", parts.port, ["-H", f"Host: {parts.netloc}"]
    return parts.hostname, parts.port, []


def wait_until_serving(url: str, timeout: float = 30.0) -> None:
    """Wait until ``url`` answers 2xx/4xx (the app behind the path is up): a GET on a new
    connection each time, from this process (a curl each time was a process for each ask,
    some fifty in a smoke run)."""
    address, port, _ = address_of(url)
    parts = urllib.parse.urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        conn = http.client.HTTPConnection(address, port, timeout=left)
        try:
            conn.request("GET", target, headers={"Host": parts.netloc})
            if conn.getresponse().status // 100 in (2, 4):
                return
        except (OSError, http.client.HTTPException):
            pass  # not listening yet, or the relay's app not yet
        finally:
            conn.close()
        time.sleep(POLL_SECONDS)
    raise RuntimeError(f"{url} is not serving after {timeout}s")


def nginx_temp_paths(tmp: Path | str) -> str:
    """nginx's scratch directories, somewhere writable (the host's /var/lib may not be)."""
    return " ".join(
        f"{kind}_temp_path {tmp}/{kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )


def nginx_app_conf(work: Path, port: int, sandboxed: bool) -> Path:
    """nginx as the fast static app: sendfile, keep-alive, a /sink that reads and drops POSTs."""
    tmp = "/tmp/nginx-app" if sandboxed else str(work / "nginx-app-tmp")
    conf = work / f"nginx-app-{'sandbox' if sandboxed else 'host'}.conf"
    conf.write_text(
        f"""
worker_processes 1;
{"user root root;" if sandboxed else ""}
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  {nginx_temp_paths(tmp)}
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    root {work}/www;
    # The sink reads the whole body before it answers: proxy_request_buffering (on by
    # default) takes all of it into memory (a 100 MiB body fits the 128 MiB buffer, so no
    # temp file on a disk makes one path slower than another), then a bodiless request
    # to /empty gives the 204. With a bare "return 204" the app answers at once and a
    # relay may stop carrying the body: nginx two-hop then measured how fast it
    # discards an upload, not how fast it carries one.
    location = /sink {{
      client_max_body_size 0;
      client_body_buffer_size 128m;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_pass http://127.0.0.1:{port}/empty;
    }}
    location = /empty {{ return 204; }}
  }}
}}
"""
    )
    return conf


@dataclass
class RelayPath:
    """A running path: where to send requests, and which processes are the relay."""

    name: str
    http: str
    stream: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    relay_pids: list[int] = field(default_factory=list)
    supports_websocket: bool = True
    # socat forks a relay process per connection; those count as the relay too.
    forks: bool = False
    # Largest body the path carries (v1 holds whole bodies and caps them); None: any.
    max_body: int | None = None

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)


class Stoppable(Protocol):
    def stop(self) -> None: ...


Started = TypeVar("Started", bound=Stoppable)


def start_at_once(starts: dict[str, Callable[[], Started]]) -> dict[str, Started]:
    """Run every start at once (a path's start mostly waits: jupyter server takes seconds,
    an SSH login its round trips), and return what each started, in ``starts``' order. If
    one fails, every other that started is stopped and its error raised."""
    with concurrent.futures.ThreadPoolExecutor(len(starts)) as pool:
        starting = {name: pool.submit(start) for name, start in starts.items()}
    started = {name: f.result() for name, f in starting.items() if f.exception() is None}
    for future in starting.values():
        if (failure := future.exception()) is not None:
            for path in started.values():
                path.stop()
            raise failure
    return started


def _spawn(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        argv, start_new_session=True, stdin=subprocess.DEVNULL, **kwargs
    )


def read_line(
    process: subprocess.Popen[bytes], prefix: bytes, stream: str = "stdout", contains: bool = False
) -> bytes:
    """The first output line starting with (or containing) ``prefix``; the rest of the
    output is then drained in the background so the process never blocks on a full pipe."""
    pipe = process.stdout if stream == "stdout" else process.stderr
    assert pipe is not None
    while line := pipe.readline():
        if (prefix in line) if contains else line.startswith(prefix):
            return line
    raise RuntimeError(f"{process.args!r} ended before printing {prefix!r}")


def drain(process: subprocess.Popen[bytes]) -> None:
    """Read a process's pipes to the end in the background."""
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            threading.Thread(target=lambda p=pipe: p.read(), daemon=True).start()


@contextlib.contextmanager
def host_apps(work: Path) -> Iterator[tuple[int, int]]:
    """nginx and the stream app on host loopback ports, for every path but sandbridge's."""
    http_port, stream_port = free_port(), free_port()
    (work / "nginx-app-tmp").mkdir(exist_ok=True)
    nginx = _spawn(["nginx", "-c", str(nginx_app_conf(work, http_port, sandboxed=False))])
    stream = _spawn([*STREAM_APP, "--port", str(stream_port)], stdout=subprocess.PIPE)
    try:
        read_line(stream, b"READY")
        drain(stream)
        wait_until_serving(f"http://127.0.0.1:{http_port}/1k")
        yield http_port, stream_port
    finally:
        RelayPath("apps", "", "", [nginx, stream]).stop()


def direct(work: Path, ports: tuple[int, int]) -> RelayPath:
    return RelayPath("direct", f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}")


def _descendants(pid: int) -> list[int]:
    result = []
    for child in children(pid):
        result.append(child)
        result.extend(_descendants(child))
    return result


def _is_shim(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # a short-lived descendant (the URL helper) already exited
        return False
    # python -I -S -c "...from sandbridge.sandbox.entry import run..." (and, for a checkout
    # from before that, python -m sandbridge.sandbox.entry)
    started = argv[1:4] == [b"-I", b"-S", b"-c"] and b"sandbridge.sandbox.entry" in argv[4]
    return started or b"sandbridge.sandbox.entry" in argv[2:3]


def _is_minter(pid: int) -> bool:
    try:
        return b"sandbridge.relay.host.socket_minter" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def minters_of(pid: int) -> list[int]:
    """The socket minters among process ``pid``'s descendants (a daemon's: one a session)."""
    return [child for child in _descendants(pid) if _is_minter(child)]


def sandbridge(
    work: Path, ports: tuple[int, int], extra: tuple[str, ...] = (), other_src: str | None = None
) -> RelayPath:
    """The real thing: host listener -> Unix socket -> shim in a bwrap sandbox -> app.
    ``extra``: more options of ``sandbridge run``; ``other_src``: another checkout's
    ``src``, whose ``sandbridge`` the session runs (``PYTHONPATH``), named ``other``."""
    conf = nginx_app_conf(work, SANDBOX_HTTP_PORT, sandboxed=True)
    script = (
        f"mkdir -p /tmp/nginx-app && nginx -c {conf} & "
        f"{' '.join(STREAM_APP)} --port {SANDBOX_STREAM_PORT} > /dev/null & "
        f"ags-webview-url {SANDBOX_HTTP_PORT} && ags-webview-url {SANDBOX_STREAM_PORT} && wait"
    )
    process = _spawn(
        [
            *SANDBRIDGE,
            "run",
            "--workdir",
            str(work),
            "--ro-bind",
            str(REPO),
            "--max-apps",
            "300",
            "--max-connections-per-app",
            "2500",
            *extra,
            "--",
            "sh",
            "-c",
            script,
        ],
        stdout=subprocess.PIPE,
        **({} if other_src is None else {"env": {**os.environ, "PYTHONPATH": other_src}}),
    )
    http = read_line(process, b"http://").decode().strip().rstrip("/")
    stream = read_line(process, b"http://").decode().strip().rstrip("/")
    drain(process)
    wait_until_serving(http + "/1k")
    # The shim, and the socket minter the first connection started: the relay's CPU too.
    shim = [pid for pid in _descendants(process.pid) if _is_shim(pid) or _is_minter(pid)]
    name = "sandbridge" if other_src is None else "other"
    return RelayPath(name, http, stream, [process], [process.pid, *shim])


def sandbridge_v1(work: Path, ports: tuple[int, int]) -> RelayPath:
    """sandbridge's host and shim speaking the accepted design's buffered v1 JSON."""
    runtime = work / "v1-runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    host = _spawn(
        [*SANDBRIDGE, "host", "--runtime-dir", str(runtime), "--protocol", "v1"],
        stderr=subprocess.PIPE,
    )
    read_line(host, b"serving registrations", "stderr", contains=True)
    drain(host)
    shim = _spawn(
        [*SANDBRIDGE, "shim", "--socket", str(runtime / "upstream.sock")], stderr=subprocess.PIPE
    )
    read_line(shim, b"shim listening", "stderr", contains=True)
    drain(shim)
    env = {**os.environ, "AGS_WEBVIEW_RELAY_SOCKET": str(runtime / "relay.sock")}
    urls = [
        subprocess.run(
            [PYTHON, "-m", "sandbridge.relay.inside.url_helper", str(port)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .rstrip("/")
        for port in ports
    ]
    wait_until_serving(urls[0] + "/1k")
    return RelayPath(
        "sandbridge-v1",
        urls[0],
        urls[1],
        [shim, host],
        [host.pid, shim.pid],
        supports_websocket=False,
        max_body=MAX_V1_BODY_BYTES,
    )


def python_floor(work: Path, ports: tuple[int, int], http: bool = False) -> RelayPath:
    """The reference floor (``benchmarks.floor_relay``): a minimal Python relay, for the
    first-byte benchmark only (HTTP requests without bodies)."""
    listen = free_port()
    mode = ["--http"] if http else []
    argv = [PYTHON, "-m", "benchmarks.floor_relay", "--listen", str(listen), "--app", str(ports[0])]
    process = _spawn(
        [*argv, *mode],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    read_line(process, b"READY")
    drain(process)
    name = "py-floor+http" if http else "py-floor"
    return RelayPath(name, f"http://127.0.0.1:{listen}", "", [process], [process.pid], False)


def nginx_two_hop(work: Path, ports: tuple[int, int]) -> RelayPath:
    """nginx as the same two hops (TCP -> Unix socket -> TCP), unbuffered, keep-alive."""
    tmp = work / "nginx-relay-tmp"
    tmp.mkdir(exist_ok=True)
    front = [free_port(), free_port()]
    common = f"""
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_buffer_size {RELAY_BUFFER // 1024}k;
      proxy_buffers 4 {RELAY_BUFFER // 1024}k;
      proxy_busy_buffers_size {RELAY_BUFFER // 1024}k;
      client_max_body_size 0;
      proxy_read_timeout 3600s;
    """
    servers = ""
    for index, (listen, app) in enumerate(zip(front, ports, strict=True)):
        hop = work / f"nginx-hop-{index}.sock"
        with contextlib.suppress(FileNotFoundError):
            hop.unlink()
        servers += f"""
  upstream hop{index} {{ server unix:{hop}; keepalive 256; }}
  upstream app{index} {{ server 127.0.0.1:{app}; keepalive 256; }}
  server {{ listen 127.0.0.1:{listen} backlog=4096;
           location / {{ proxy_pass http://hop{index}; {common} }} }}
  server {{ listen unix:{hop}; location / {{ proxy_pass http://app{index}; {common} }} }}
"""
    conf = work / "nginx-relay.conf"
    conf.write_text(
        f"""
worker_processes auto;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  {nginx_temp_paths(tmp)}
  map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}
  {servers}
}}
"""
    )
    process = _spawn(["nginx", "-c", str(conf)])
    http, stream = (f"http://127.0.0.1:{port}" for port in front)
    wait_until_serving(http + "/1k")
    return RelayPath("nginx", http, stream, [process], [process.pid, *children(process.pid)])


def socat_two_hop(work: Path, ports: tuple[int, int]) -> RelayPath:
    """socat as the same two hops, a raw byte relay: the byte-copy lower bound."""
    processes, front = [], [free_port(), free_port()]
    for index, (listen, app) in enumerate(zip(front, ports, strict=True)):
        hop = work / f"socat-hop-{index}.sock"
        with contextlib.suppress(FileNotFoundError):
            hop.unlink()
        processes.append(
            _spawn(
                ["socat", f"-b{RELAY_BUFFER}", f"UNIX-LISTEN:{hop},fork", f"TCP:127.0.0.1:{app}"]
            )
        )
        processes.append(
            _spawn(
                [
                    "socat",
                    f"-b{RELAY_BUFFER}",
                    f"TCP-LISTEN:{listen},bind=127.0.0.1,reuseaddr,fork,backlog=4096",
                    f"UNIX-CONNECT:{hop}",
                ]
            )
        )
    http, stream = (f"http://127.0.0.1:{port}" for port in front)
    wait_until_serving(http + "/1k")
    return RelayPath("socat", http, stream, processes, [p.pid for p in processes], forks=True)


def jupyter_server_proxy(work: Path, ports: tuple[int, int]) -> RelayPath:
    """jupyter-server-proxy from PyPI: the Python peer, one hop."""
    port = free_port()
    config = work / "jupyter_config.json"
    config.write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_server_proxy": True}}})
    )
    process = _spawn(
        [
            PYTHON,
            "-m",
            "jupyter_server",
            f"--ServerApp.port={port}",
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.token=",
            "--ServerApp.password=",
            "--ServerApp.open_browser=False",
            "--ServerApp.disable_check_xsrf=True",
            f"--ServerApp.root_dir={work}",
            f"--config={config}",
            "--ServerApp.log_level=ERROR",
            *(["--allow-root"] if os.getuid() == 0 else []),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(work / "jupyter"),
            "JUPYTER_DATA_DIR": str(work / "jupyter"),
            "JUPYTER_RUNTIME_DIR": str(work / "jupyter"),
        },
    )
    http, stream = (f"http://127.0.0.1:{port}/proxy/{app}" for app in ports)
    wait_until_serving(http + "/1k", timeout=60)
    return RelayPath("jupyter-server-proxy", http, stream, [process], [process.pid])


PATHS = {
    "direct": direct,
    "sandbridge": sandbridge,
    "sandbridge-v1": sandbridge_v1,
    "nginx": nginx_two_hop,
    "socat": socat_two_hop,
    "jupyter-server-proxy": jupyter_server_proxy,
}

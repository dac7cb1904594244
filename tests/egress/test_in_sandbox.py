"""Network modes end to end: real sandboxes (both backends) in a test-made "internet".

Each session runs inside a network namespace the test creates (``unshare --net``) with
:mod:`tests.apps.net_world`: HTTP servers on public-looking addresses (8.8.0.1 for
``public.test``, 8.8.0.2 for ``other.test``), host services on that namespace's loopback
(5432 allowed, 5433 its neighbour), a server on loopback that ``loopy.test`` resolves to,
and a DNS server the policy names as its ``resolver``. Inside the sandbox,
:mod:`tests.apps.egress_probes` tries the allowed paths and every bypass; the world
prints a ``HIT`` line for every request a server received, so a refusal is proven by the
absence of a hit as well as by the answer.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    BACKENDS,
    PYTHON,
    REPO,
    SANDBRIDGE,
    Nobody,
    Process,
    host_port_of,
    request,
    run_argv,
)
from tests.support.command_in_process import sandbridge

NET_WORLD = str(REPO / "tests" / "apps" / "net_world.py")
PROBES = str(REPO / "tests" / "apps" / "egress_probes.py")
SECRET = "s3cret-value-never-printed"


@dataclass
class Outcome:
    """What one sandbox session in the world produced."""

    probes: dict[str, str]
    hits: list[str]
    stderr: str
    status: str
    status_json: list[dict[str, Any]]

    def hit(self, server: str, path: str = "") -> bool:
        return any(line.startswith(f"HIT {server} ") and path in line for line in self.hits)


def write_policy(workdir: Path) -> None:
    (workdir / ".sandbridge").mkdir()
    (workdir / ".sandbridge" / "allow").write_text(
        "# reviewed test policy\npublic.test\n*.wild.test\nloopy.test\nselfpub.test\n"
    )
    (workdir / ".sandbridge" / "config").write_text(
        f"resolver = 127.0.0.1:5353\nenv = API_TOKEN={SECRET}\n"
    )


def in_world(argv: list[str], env: dict[str, str]) -> Process:
    assert os.getuid() == 0, "these tests make network namespaces (unshare --net): run as root"
    return Process(["unshare", "--net", "--", PYTHON, NET_WORLD, "--", *argv], env=env)


def collect(process: Process) -> dict[str, str]:
    process.wait_line("PROBES DONE", timeout=90)
    return {
        line.split()[1]: line.split(" ", 2)[2]
        for line in process.lines["stdout"]
        if line.startswith("PROBE ")
    }


def _wait_for_the_idle_connections_record(env: dict[str, str]) -> None:
    """The idle probe's connect returns once the kernel took the connection; the host's
    gate accepts and records it on its own time: wait (bounded) until the log counts it,
    the second host-service connection after the curl's."""
    deadline = time.monotonic() + 30
    while True:
        [report] = json.loads(sandbridge("status", "--json", env=env).stdout)
        counts = [
            t["count"]
            for t in report["egress"]
            if (t["decision"], t["kind"], t["destination"])
            == ("allowed", "host-service", "100.64.0.1:5432")
        ]
        if counts == [2]:
            return
        assert time.monotonic() < deadline, f"the idle connection was not recorded: {counts}"
        time.sleep(0.05)  # (a poll of the log, not a wait for time to pass)


def session(
    backend: str, tmp_path: Path, options: tuple[str, ...], probes: tuple[str, ...] = ()
) -> Outcome:
    work = tmp_path / "work"
    work.mkdir()
    write_policy(work)
    go = work / "go"
    os.mkfifo(go)
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg)}
    script = f"{PYTHON} {PROBES} {' '.join(probes)}; read done < {go}"
    argv = run_argv(work, "sh", "-c", script, options=("--backend", backend, *options))
    process = in_world(argv, env)
    try:
        probes_seen = collect(process)
        if not probes or "idle_connection" in probes:
            _wait_for_the_idle_connections_record(env)
        # The owner's `sandbridge status`, in this process (tests/support/command_in_process.py).
        status = sandbridge("status", env=env)
        status_json = sandbridge("status", "--json", env=env)
        assert status.returncode == 0 and status_json.returncode == 0, (
            status.stderr + status_json.stderr
        )
        go.write_text("done\n")
        assert process.popen.wait(30) == 0
    finally:
        if process.popen.poll() is None:
            process.stop()
    stderr = process.drain("stderr")
    lines = process.lines["stderr"] + stderr.splitlines()
    hits = [line for line in lines if line.startswith("HIT ")]
    return Outcome(probes_seen, hits, stderr, status.stdout, json.loads(status_json.stdout))


@pytest.fixture(scope="module", params=BACKENDS)
def allow(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """One ``allow``-mode session per backend running every probe."""
    return session(
        str(request.param),
        tmp_path_factory.mktemp(f"allow-{request.param}"),
        ("--allow", "gate:5432"),
    )


# --- host services at the gate address -----------------------------------------------


def test_the_session_says_what_network_it_has(allow: Outcome) -> None:
    assert (
        "sandbridge: net allow: host services 100.64.0.1:5432; egress proxy "
        "http://100.64.0.1:18081 for 4 destination entries (--print-policy lists them)"
    ) in allow.stderr.splitlines()


def test_allowed_host_port_is_reached_at_the_gate_address(allow: Outcome) -> None:
    assert allow.probes["host_service"].startswith("status=200")
    assert "hello from service5432" in allow.probes["host_service"]


def test_neighbouring_host_port_is_refused(allow: Outcome) -> None:
    assert allow.probes["host_neighbour"].startswith("status=000 rc=7")
    assert not allow.hit("service5433")


def test_other_gate_ports_refuse_connections(allow: Outcome) -> None:
    assert allow.probes["raw_gate_other_port"] == "error=ECONNREFUSED"


# --- the egress proxy ------------------------------------------------------------------


def test_allowed_domain_through_the_http_proxy(allow: Outcome) -> None:
    assert allow.probes["allowed_http"].startswith("status=200")
    assert "hello from public80" in allow.probes["allowed_http"]


def test_allowed_domain_through_connect(allow: Outcome) -> None:
    assert allow.probes["allowed_connect"].startswith("status=200")
    assert "hello from public443" in allow.probes["allowed_connect"]


def test_wildcard_entry_allows_a_subdomain(allow: Outcome) -> None:
    assert "hello from public80" in allow.probes["wildcard"]
    assert allow.hit("public80", "sub.wild.test")


def test_refused_domain_is_403_naming_destination_and_line(allow: Outcome) -> None:
    result = allow.probes["refused_domain"]
    assert result.startswith("status=403")
    body = ast.literal_eval(result.split(" body=", 1)[1])
    assert "egress to other.test:80 refused" in body
    assert "add the line 'other.test' to .sandbridge/allow" in body
    assert 'or ask the owner from inside: sandbridge-allow other.test:80 --reason "..."' in body
    assert not allow.hit("other80")


def test_a_refused_connect_says_why_in_python_clients_too(allow: Outcome) -> None:
    """http.client (under pip and requests) shows a refused tunnel's reason phrase only."""
    result = allow.probes["refused_https_python"]
    assert "Tunnel connection failed: 403 egress to other.test:443 refused" in result
    assert "add the line 'other.test' to .sandbridge/allow" in result
    assert "sandbridge-allow other.test:443 --reason" in result


# --- bypass attempts -------------------------------------------------------------------


def test_connect_to_an_ip_literal_is_refused(allow: Outcome) -> None:
    result = allow.probes["connect_ip_literal"]
    assert "HTTP/1.1 403 egress to " in result and "IP-literal destinations are refused" in result
    assert not allow.hit("public443", "8.8.0.1")


def test_connect_to_a_name_resolving_to_host_loopback_is_refused(allow: Outcome) -> None:
    result = allow.probes["connect_loopback_name"]
    assert "HTTP/1.1 403 egress to " in result
    assert "loopy.test resolves to 127.0.0.1 (loopback)" in result
    # The entry that decided is named: a line added below it would never be reached.
    assert "edit .sandbridge/allow:4 to read 'loopy.test private'" in result
    assert not allow.hit("loopback80")


def test_connect_to_a_name_resolving_to_the_hosts_own_public_address_is_refused(
    allow: Outcome,
) -> None:
    result = allow.probes["connect_self_name"]
    assert "HTTP/1.1 403 egress to " in result
    assert "selfpub.test resolves to 8.8.1.1 (this host)" in result
    assert not allow.hit("selfpub80")


def test_connect_to_a_disallowed_port_is_refused(allow: Outcome) -> None:
    result = allow.probes["connect_bad_port"]
    assert (
        "HTTP/1.1 403 egress to " in result and "port 8080 is not allowed for public.test" in result
    )
    assert not allow.hit("public8080")


def test_absolute_form_with_a_mismatched_host_is_refused(allow: Outcome) -> None:
    result = allow.probes["host_mismatch"]
    assert "HTTP/1.1 400 Host header " in result
    assert "Host header 'other.test' does not match" in result
    assert not allow.hit("other80")


def test_a_pipelined_second_request_is_never_forwarded(allow: Outcome) -> None:
    assert "hello from public80" in allow.probes["pipelined_second_host"]
    assert allow.hit("public80", "/one")
    assert not any("/two" in line for line in allow.hits)


def test_the_gate_address_is_not_a_proxy_destination(allow: Outcome) -> None:
    assert "HTTP/1.1 403 egress to " in allow.probes["gate_as_proxy_destination"]


def test_the_host_rechecks_what_bypasses_the_gate_listener(allow: Outcome) -> None:
    port = allow.probes["direct_gate_port"]
    assert '"ok":false' in port and "port 5433 of the gate address is not a host service" in port
    assert not allow.hit("service5433")
    tunnel = allow.probes["direct_gate_connect"]
    assert "HTTP/1.1 403 egress to " in tunnel and "other.test is not in the allowlist" in tunnel
    assert not allow.hit("other80")


def test_raw_tcp_reaches_no_address(allow: Outcome) -> None:
    assert allow.probes["raw_public"] == "error=ENETUNREACH"
    assert allow.probes["raw_other"] == "error=ENETUNREACH"
    # The host's loopback services are not the sandbox's loopback.
    assert allow.probes["raw_loopback_service"] == "error=ECONNREFUSED"


def test_a_second_proxy_inside_the_sandbox_has_no_route_out(allow: Outcome) -> None:
    assert allow.probes["second_proxy"].startswith("status=502")
    assert "ENETUNREACH" in allow.probes["second_proxy"]


def test_the_command_cannot_change_the_sandbox_network(allow: Outcome) -> None:
    assert allow.probes["add_address"] == "error=EPERM"


# --- the log ---------------------------------------------------------------------------


def test_status_summarises_every_decision(allow: Outcome) -> None:
    status = allow.status
    assert re.search(r"egress: \d+ allowed, \d+ refused", status), status
    assert re.search(r"refused\s+proxy\s+other\.test:80\s+x1", status), status
    assert re.search(r"refused\s+proxy\s+8\.8\.0\.1:443", status), status
    assert re.search(r"refused\s+proxy\s+loopy\.test:80 .*\(loopback\)", status), status
    assert re.search(r"allowed\s+host-service\s+100\.64\.0\.1:5432\s+x2", status), status
    assert re.search(r"allowed\s+proxy\s+public\.test:443", status), status


def test_status_json_lists_each_destination(allow: Outcome) -> None:
    [report] = allow.status_json
    refused = {t["destination"]: t["count"] for t in report["egress"] if t["decision"] == "refused"}
    assert refused["other.test:80"] == 1
    assert {"decision", "kind", "destination", "count", "first", "last", "reason"} == set(
        report["egress"][0]
    )


def test_the_session_ends_cleanly_with_a_connection_left_open(allow: Outcome) -> None:
    """An idle bridged connection is ended with the session, not abandoned to asyncio."""
    assert allow.probes["idle_connection"] == "open"
    assert "Traceback" not in allow.stderr
    assert "Exception in callback" not in allow.stderr


def test_no_secret_reaches_the_logs(allow: Outcome) -> None:
    assert SECRET not in allow.status
    assert SECRET not in allow.stderr


# --- other modes -----------------------------------------------------------------------


def test_none_mode_reaches_nothing(backend: str, tmp_path: Path) -> None:
    outcome = session(
        backend,
        tmp_path,
        ("--net", "none", "--allow", "gate:5432"),
        ("host_service", "allowed_http", "raw_public", "raw_loopback_service"),
    )
    assert outcome.probes["host_service"].startswith("status=000")
    assert outcome.probes["allowed_http"].startswith("status=000")
    assert outcome.probes["raw_public"] == "error=ENETUNREACH"
    assert outcome.probes["raw_loopback_service"] == "error=ECONNREFUSED"
    assert outcome.hits == []


def test_full_mode_warns_and_uses_the_host_network(backend: str, tmp_path: Path) -> None:
    outcome = session(backend, tmp_path, ("--net", "full"), ("raw_other",))
    assert outcome.probes["raw_other"] == "connected"
    assert "WARNING: net = full (--net)" in outcome.stderr


# --- publish, inspection ---------------------------------------------------------------


def test_publish_shows_the_app_on_the_host(backend: str, tmp_path: Path, xdg: Path) -> None:
    app = str(REPO / "tests" / "apps" / "echo_app.py")
    process = Process(
        run_argv(
            tmp_path,
            PYTHON,
            app,
            "--listen",
            "8000",
            options=("--backend", backend, "--publish", "8000:/app"),
        )
    )
    try:
        line = process.wait_line("sandbridge: sandbox port 8000 -> ", "stderr")
        url = line.rsplit(" ", 1)[1]
        assert url.endswith("/app")
        status, _, body = request(host_port_of(url), path="/app/x")
        assert status == 200
        assert json.loads(body)["path"] == "/app/x"
    finally:
        process.stop()


def inspect(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``sandbridge run`` with a runtime base of its own, which must stay empty."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700, exist_ok=True)
    result = subprocess.run(
        [*SANDBRIDGE, "run", "--workdir", str(tmp_path), *options],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HOST_TOKEN": SECRET, "XDG_RUNTIME_DIR": str(xdg)},
    )
    assert list(xdg.iterdir()) == [], "inspection must start nothing"
    return result


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_print_policy_and_dry_run_show_no_secret(tmp_path: Path, backend_name: str) -> None:
    write_policy(tmp_path)
    result = inspect(
        tmp_path,
        "--backend",
        backend_name,
        "--print-policy",
        "--dry-run",
        "--env",
        "HOST_TOKEN",
        "--env",
        f"OTHER={SECRET}",
        "--",
        "curl",
        f"https://user:{SECRET}@public.test/",
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert SECRET not in out
    assert "env API_TOKEN = (value hidden)" in out
    assert "public.test  ports 80,443,8443" in out and "(.sandbridge/allow:2)" in out
    assert "https://***@public.test/" in out
    assert "HOST_TOKEN" in out and "OTHER" in out  # names are shown, values are not
    assert "sandbridge.sandbox.net_init 100.64.0.1" in out


def test_print_policy_warns_of_an_entry_that_is_never_reached(tmp_path: Path) -> None:
    write_policy(tmp_path)
    with (tmp_path / ".sandbridge" / "allow").open("a") as allow_file:
        allow_file.write("loopy.test private\n")
    result = inspect(tmp_path, "--print-policy")
    assert result.returncode == 0, result.stderr
    assert (
        "warning: .sandbridge/allow:6: 'loopy.test private' is never reached: its 'private' "
        "takes no effect: 'loopy.test' (.sandbridge/allow:4) comes first"
    ) in result.stdout


def test_dry_run_in_none_mode_unshares_the_network(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    result = inspect(
        tmp_path, "--backend", "bwrap", "--net", "none", "--dry-run", "--", "touch", str(marker)
    )
    assert "--unshare-net" in result.stdout
    assert "net_init" not in result.stdout
    assert result.stdout.rstrip().endswith(f"-- touch {marker}")
    assert not marker.exists()


def test_malformed_policy_line_stops_the_run(tmp_path: Path) -> None:
    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "allow").write_text("pkgs.example.com\nexample.com:http\n")
    result = inspect(tmp_path, "--", "true")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "sandbridge: .sandbridge/allow:2: port must be 1..65535, got 'http'"
    )


def test_policy_directory_is_read_only_and_the_command_holds_no_capability(
    backend: str, tmp_path: Path, xdg: Path
) -> None:
    write_policy(tmp_path)
    result = subprocess.run(
        run_argv(
            tmp_path,
            "sh",
            "-c",
            "umount .sandbridge 2>/dev/null || echo kept;"
            "echo evil.example >> .sandbridge/allow || echo refused; touch ok && echo rw;"
            "grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status | cut -f2 | sort -u",
            options=("--backend", backend, "--net", "none"),
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # No capability at all: nothing can unmount the read-only policy directory.
    assert result.stdout.split() == ["kept", "refused", "rw", "0000000000000000"], result.stderr
    assert "evil" not in (tmp_path / ".sandbridge" / "allow").read_text()


def test_unprivileged_user_gets_the_gate_and_the_proxy(backend: str, nobody: Nobody) -> None:
    """The namespace set-up needs no privilege."""
    write_policy(nobody.work)
    probes = ("host_service", "allowed_http", "refused_domain", "add_address")
    argv = [*nobody.run_argv(backend, "--allow", "gate:5432"), "--", "/usr/bin/python3", PROBES]
    process = in_world([*argv, *probes], nobody.env)
    try:
        results = collect(process)
        assert process.popen.wait(30) == 0
    finally:
        if process.popen.poll() is None:
            process.stop()
    assert "hello from service5432" in results["host_service"]
    assert "hello from public80" in results["allowed_http"]
    assert results["refused_domain"].startswith("status=403")
    assert results["add_address"] == "error=EPERM"

"""The container bridge on its real socket, before a stand-in engine (stand_in_engine.py):
what a Docker client does goes through; every hostile request is refused naming its field
and rule, and never reaches the engine."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from sandbridge.containers.create_policy import SESSION_LABEL
from sandbridge.containers.decision_log import LOG_NAME, read_counts
from sandbridge.containers.server import MAX_BODY_BYTES, MAX_CONTAINER_CONNECTIONS
from sandbridge.containers.settings import NetworkMode
from tests.containers.bridge_thread import IMAGE, BridgeThread, connect_to


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[BridgeThread]:
    served = BridgeThread(tmp_path)
    yield served
    served.stop()
    assert not served.errors


def _refused(bridge: BridgeThread, reply_status: int, message: str, field: str, rule: str) -> None:
    assert reply_status == 403, message
    assert message.startswith("sandbridge: "), message
    assert f"(field {field}, rule {rule})" in message, message


def _creates(bridge: BridgeThread) -> list[str]:
    return [p for p in bridge.engine.paths() if p == "POST /containers/create"]


# --- what a client does --------------------------------------------------------------------


def test_ping_and_version_are_passed_on(bridge: BridgeThread) -> None:
    assert bridge.call("GET", "/_ping").body == b"OK"
    assert bridge.call("HEAD", "/_ping").status == 200
    assert bridge.call("GET", "/v1.41/version").json()["ApiVersion"] == "1.41"


def test_info_keeps_only_what_says_nothing_of_the_host(bridge: BridgeThread) -> None:
    info = bridge.call("GET", "/v1.41/info").json()
    assert info == {
        "ServerVersion": "28.2.2",
        "OSType": "linux",
        "Architecture": "x86_64",
        "NCPU": 2,
    }


def test_the_engines_own_answer_fields_are_not_passed_on(bridge: BridgeThread) -> None:
    reply = bridge.call("GET", "/v1.41/version")
    assert "X-Engine-Secret" not in reply.headers
    assert reply.headers["Content-Type"] == "application/json"


def test_a_listed_image_runs_create_start_wait_logs(bridge: BridgeThread) -> None:
    cid = bridge.create({"Cmd": ["echo", "hi"]}, name="web")
    assert bridge.call("POST", f"/v1.41/containers/{cid}/start").status == 204
    assert bridge.call("POST", f"/v1.41/containers/{cid}/wait?condition=next-exit").json() == {
        "StatusCode": 0
    }
    logs = bridge.call("GET", f"/v1.41/containers/{cid}/logs?stdout=1&tail=all")
    assert logs.body == b"first line\nsecond line\n"
    assert logs.headers["Transfer-Encoding"] == "chunked"


def test_the_created_container_carries_the_session_label_and_no_network(
    bridge: BridgeThread,
) -> None:
    bridge.create({"Labels": {"app": "web"}})
    sent = next(r for r in bridge.engine.requests if r.path == "/containers/create").json()
    assert isinstance(sent, dict)
    assert sent["Labels"] == {"app": "web", SESSION_LABEL: "s-test"}
    assert sent["HostConfig"]["NetworkMode"] == "none"


def test_a_container_is_named_by_its_name_or_a_prefix_and_sent_on_by_its_full_id(
    bridge: BridgeThread,
) -> None:
    cid = bridge.create(name="web")
    assert bridge.call("POST", "/containers/web/start").status == 204
    assert bridge.call("POST", f"/containers/{cid[:12]}/stop").status == 204
    assert bridge.engine.paths()[-2:] == [
        f"POST /containers/{cid}/start",
        f"POST /containers/{cid}/stop",
    ]


def test_a_list_is_narrowed_to_the_sessions_own(bridge: BridgeThread) -> None:
    filters = quote(json.dumps({"label": ["app=web"]}))
    assert bridge.call("GET", f"/v1.41/containers/json?all=1&filters={filters}").status == 200
    sent = bridge.engine.requests[-1].target
    query = parse_qs(urlsplit(sent).query)
    assert json.loads(query["filters"][0]) == {"label": ["app=web", f"{SESSION_LABEL}=s-test"]}


def test_attach_is_handed_over_and_spliced_both_ways_with_the_half_close(
    bridge: BridgeThread,
) -> None:
    cid = bridge.create()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(bridge.path))
        sock.sendall(
            f"POST /v1.41/containers/{cid}/attach?stream=1&stdin=1&stdout=1 HTTP/1.1\r\n"
            "Host: docker\r\nContent-Length: 0\r\nConnection: Upgrade\r\n"
            "Upgrade: tcp\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1)
        assert head.startswith(b"HTTP/1.1 101 ")
        assert b"Upgrade: tcp" in head
        sock.sendall(b"hello")
        assert sock.recv(5) == b"HELLO"
        sock.shutdown(socket.SHUT_WR)
        rest = b""
        while chunk := sock.recv(100):
            rest += chunk
        assert rest == b"[stdin closed]"


def test_exec_create_and_start_on_the_sessions_own_container(bridge: BridgeThread) -> None:
    cid = bridge.create()
    reply = bridge.call(
        "POST", f"/v1.41/containers/{cid}/exec", {"Cmd": ["ls"], "AttachStdout": True}
    )
    assert reply.status == 201
    exec_id = reply.json()["Id"]
    body = b'{"Detach":false,"Tty":false}'
    answer = bridge.raw(
        f"POST /v1.41/exec/{exec_id}/start HTTP/1.1\r\nHost: docker\r\nContent-Type: "
        f"application/json\r\nContent-Length: {len(body)}\r\nConnection: Upgrade\r\n"
        "Upgrade: tcp\r\n\r\n".encode()
        + body
        + b"in"
    )
    assert answer.startswith(b"HTTP/1.1 101 ")
    assert answer.endswith(b"IN[stdin closed]")  # the bytes after the body are the stream's
    assert bridge.engine.requests[-1].json() == {"Detach": False, "Tty": False}


def test_a_deleted_container_is_no_longer_the_sessions(bridge: BridgeThread) -> None:
    cid = bridge.create()
    assert bridge.call("DELETE", f"/v1.41/containers/{cid}?force=1").status == 204
    reply = bridge.call("POST", f"/v1.41/containers/{cid}/start")
    _refused(bridge, reply.status, reply.message, "path.container", "own-objects-only")


def test_the_sessions_containers_are_killed_and_removed_when_it_ends(tmp_path: Path) -> None:
    served = BridgeThread(tmp_path)
    cid = served.create()
    served.stop()
    assert served.engine.paths()[-2:] == [
        f"POST /containers/{cid}/kill",
        f"DELETE /containers/{cid}",
    ]
    assert "force=1" in served.engine.requests[-1].target
    assert not served.path.exists()  # the socket goes with the session


def test_a_client_that_leaves_a_followed_log_is_let_go(bridge: BridgeThread) -> None:
    cid = bridge.create()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(bridge.path))
        sock.sendall(
            f"GET /containers/{cid}/logs?follow=1&stdout=1 HTTP/1.1\r\nHost: d\r\n\r\n".encode()
        )
        first = b""
        while b"tick" not in first:
            first += sock.recv(100)
    # The client is gone: the bridge ends its engine connection, not at the log's end.
    assert bridge.engine.follow_closed.wait(10)
    assert bridge.call("GET", "/_ping").status == 200


def test_the_bridge_ends_open_streams_when_it_closes(tmp_path: Path) -> None:
    served = BridgeThread(tmp_path)
    cid = served.create()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(served.path))
        sock.sendall(f"GET /containers/{cid}/logs?follow=1 HTTP/1.1\r\nHost: d\r\n\r\n".encode())
        assert b"tick" in sock.recv(1000) or b"tick" in sock.recv(1000)
        served.stop()
        assert served.engine.follow_closed.is_set()


def test_with_keep_the_sessions_containers_stay(tmp_path: Path) -> None:
    served = BridgeThread(tmp_path, keep=True)
    served.create()
    served.stop()
    assert not any(p.startswith("DELETE") for p in served.engine.paths())


def test_each_decision_is_logged_and_counted(bridge: BridgeThread) -> None:
    bridge.create()
    bridge.call("POST", "/containers/create", {"Image": IMAGE, "HostConfig": {"Privileged": True}})
    lines = [json.loads(line) for line in (bridge.log_dir / LOG_NAME).read_text().splitlines()]
    assert [(line["decision"], line["endpoint"]) for line in lines] == [
        ("allowed", "container-create"),
        ("refused", "container-create"),
    ]
    assert lines[1]["field"] == "HostConfig.Privileged"
    assert lines[1]["rule"] == "no-privileged"
    counts = read_counts(bridge.log_dir)
    assert counts is not None
    assert (counts.allowed, counts.refused, counts.created) == (1, 1, 1)
    assert (bridge.log_dir / LOG_NAME).stat().st_mode & 0o777 == 0o600


# --- hostile requests: refused naming field and rule, never reaching the engine -------------


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({"HostConfig": {"Privileged": True}}, "HostConfig.Privileged", "no-privileged"),
        ({"HostConfig": {"Binds": ["/:/host"]}}, "HostConfig.Binds[0]", "binds-inside-workdir"),
        ({"HostConfig": {"PidMode": "host"}}, "HostConfig.PidMode", "no-host-namespaces"),
        ({"HostConfig": {"IpcMode": "container:abc"}}, "HostConfig.IpcMode", "no-host-namespaces"),
        ({"HostConfig": {"NetworkMode": "host"}}, "HostConfig.NetworkMode", "network-none"),
        ({"HostConfig": {"Binds": ["/var/run/docker.sock:/var/run/docker.sock"]}},
         "HostConfig.Binds[0]", "binds-inside-workdir"),
        ({"Image": "alpine:3"}, "Image", "image-not-listed"),
        ({"HostConfig": {"Devices": [{"PathOnHost": "/dev/kvm", "PathInContainer": "/dev/kvm"}]}},
         "HostConfig.Devices", "no-devices"),
        ({"HostConfig": {"CapAdd": ["SYS_ADMIN"]}}, "HostConfig.CapAdd", "no-capabilities"),
        ({"HostConfig": {"SecurityOpt": ["seccomp=unconfined"]}}, "HostConfig.SecurityOpt",
         "no-unconfined"),
        ({"HostConfig": {"Mounts": [{"Type": "bind", "Source": "/etc", "Target": "/x"}]}},
         "HostConfig.Mounts[0].Source", "binds-inside-workdir"),
        ({"HostConfig": {"Mounts": [{"Type": "volume", "Source": "other", "Target": "/x"}]}},
         "HostConfig.Mounts[0].Source", "own-volumes-only"),
        ({"HostConfig": {"PortBindings": {"80/tcp": [{"HostPort": "80"}]}}},
         "HostConfig.PortBindings", "no-published-ports"),
        ({"HostConfig": {"CgroupParent": "/"}}, "HostConfig.CgroupParent", "field-not-reviewed"),
        # Go decodes keys ignoring case, the last one winning: each of these, passed on,
        # set the checked field again to what the check refuses.
        ({"HostConfig": {"maskedPaths": []}}, "HostConfig.maskedPaths", "field-case"),
        ({"HostConfig": {"Mounts": None, "mounts": None}}, "HostConfig.mounts", "field-case"),
        ({"HostConfig": {"NetworkMode": "", "networkMode": ""}}, "HostConfig.networkMode",
         "field-case"),
        ({"Labels": {}, "labels": None}, "labels", "field-case"),
        # podman's k8s-file log driver writes the container's output where "path" says, on
        # the host (a run against the real podman wrote it outside the workdir).
        ({"HostConfig": {"LogConfig": {"Type": "k8s-file", "Config": {"path": "/tmp/x.log"}}}},
         "HostConfig.LogConfig.Config.path", "log-options"),
        ({"HostConfig": {"LogConfig": {"Type": "", "type": "syslog"}}},
         "HostConfig.LogConfig.type", "field-case"),
        ({"Labels": {SESSION_LABEL: "s-other"}}, f"Labels.{SESSION_LABEL}", "session-label"),
    ],
)  # fmt: skip
def test_a_hostile_create_is_refused_and_never_reaches_the_engine(
    bridge: BridgeThread, body: dict[str, object], field: str, rule: str
) -> None:
    reply = bridge.call("POST", "/v1.41/containers/create", {"Image": IMAGE, **body})
    _refused(bridge, reply.status, reply.message, field, rule)
    assert reply.headers["Content-Type"] == "application/json"
    assert _creates(bridge) == []


def test_a_link_in_the_workdir_that_leads_out_is_refused_by_where_it_leads(
    bridge: BridgeThread,
) -> None:
    (bridge.workdir / "escape").symlink_to("/etc")
    reply = bridge.call(
        "POST", "/containers/create",
        {"Image": IMAGE, "HostConfig": {"Binds": [f"{bridge.workdir}/escape:/x"]}},
    )  # fmt: skip
    _refused(bridge, reply.status, reply.message, "HostConfig.Binds[0]", "binds-inside-workdir")
    assert "a link leads to /etc" in reply.message
    assert _creates(bridge) == []


def test_a_bind_inside_the_workdir_is_sent_by_its_resolved_path(bridge: BridgeThread) -> None:
    (bridge.workdir / "src").mkdir()
    (bridge.workdir / "here").symlink_to(bridge.workdir / "src")
    bridge.create({"HostConfig": {"Binds": [f"{bridge.workdir}/here:/src:ro"]}})
    sent = bridge.engine.requests[-1].json()
    assert isinstance(sent, dict)
    assert sent["HostConfig"]["Binds"] == [f"{bridge.workdir}/src:/src:ro"]


@pytest.mark.parametrize(
    ("host", "field"),
    [
        # podman joins a mount's fields with commas (type=bind,source=S,destination=T) and
        # the last source wins: against the real podman 4.3, this bound /etc read-write.
        ({"Mounts": [{"Type": "bind", "Source": "{w}/src", "Target": "/x,source=/etc"}]},
         "HostConfig.Mounts[0].Target"),
        ({"Mounts": [{"Type": "bind", "Source": "{w}/src", "Target": "/x,bind-propagation=1"}]},
         "HostConfig.Mounts[0].Target"),
        ({"Mounts": [{"Type": "tmpfs", "Target": "/x,type=bind,source=/etc"}]},
         "HostConfig.Mounts[0].Target"),
        # the shields' targets are the bind's target and a fixed tail
        ({"Binds": ["{w}/src:/x,source=/home/owner:ro"]}, "HostConfig.Binds[0]"),
        # a directory of the workdir whose name carries the option
        ({"Binds": ["{w}/a,source=:/x"]}, "HostConfig.Binds[0]"),
        ({"Mounts": [{"Type": "bind", "Source": "{w}/a,source=", "Target": "/x"}]},
         "HostConfig.Mounts[0].Source"),
        ({"Tmpfs": {"/t,x": ""}}, "HostConfig.Tmpfs./t,x"),
    ],
)  # fmt: skip
def test_a_comma_in_a_mounts_path_is_refused_and_never_reaches_the_engine(
    bridge: BridgeThread, host: dict[str, object], field: str
) -> None:
    (bridge.workdir / "src").mkdir()
    (bridge.workdir / "a,source=").mkdir()
    text = json.dumps(host).replace("{w}", str(bridge.workdir))
    reply = bridge.call(
        "POST", "/containers/create", {"Image": IMAGE, "HostConfig": json.loads(text)}
    )
    _refused(bridge, reply.status, reply.message, field, "mount-paths")
    assert _creates(bridge) == []


def test_a_bind_source_swapped_for_a_link_after_the_create_is_refused_at_start(
    bridge: BridgeThread,
) -> None:
    # The engine mounts a bind when the container starts, not when it is created: against
    # the real podman, a directory swapped for a link to elsewhere between the two was
    # mounted as the link's target.
    (bridge.workdir / "src").mkdir()
    container = bridge.create({"HostConfig": {"Binds": [f"{bridge.workdir}/src:/x"]}})
    (bridge.workdir / "src").rename(bridge.workdir / "moved")
    (bridge.workdir / "src").symlink_to("/etc")
    for action in ("start", "restart"):
        reply = bridge.call("POST", f"/containers/{container[:12]}/{action}")
        _refused(bridge, reply.status, reply.message, "path.container", "binds-inside-workdir")
        assert "a link to /etc" in reply.message
        assert not any(p.endswith(f"/{action}") for p in bridge.engine.paths())
    (bridge.workdir / "src").unlink()
    (bridge.workdir / "moved").rename(bridge.workdir / "src")
    assert bridge.call("POST", f"/containers/{container}/start").status == 204
    # and the engine never starts it again by itself, past the bridge's check
    reply = bridge.call(
        "POST", "/containers/create",
        {"Image": IMAGE, "HostConfig": {"Binds": [f"{bridge.workdir}/src:/x"],
                                        "RestartPolicy": {"Name": "on-failure"}}},
    )  # fmt: skip
    _refused(bridge, reply.status, reply.message, "HostConfig.RestartPolicy.Name", "no-restart")


def test_the_engine_socket_in_the_workdir_is_never_bound(tmp_path: Path) -> None:
    served = BridgeThread(tmp_path, engine_dir=tmp_path / "work" / "engine")
    try:
        for source in (served.engine.socket, served.workdir):
            reply = served.call(
                "POST", "/containers/create",
                {"Image": IMAGE, "HostConfig": {"Binds": [f"{source}:/x"]}},
            )  # fmt: skip
            _refused(served, reply.status, reply.message, "HostConfig.Binds[0]", "no-engine-socket")
        assert _creates(served) == []
    finally:
        served.stop()


def test_network_host_is_refused_in_engine_mode_too(tmp_path: Path) -> None:
    served = BridgeThread(tmp_path, network=NetworkMode.ENGINE)
    try:
        reply = served.call(
            "POST", "/containers/create", {"Image": IMAGE, "HostConfig": {"NetworkMode": "host"}}
        )
        _refused(
            served, reply.status, reply.message, "HostConfig.NetworkMode", "no-host-namespaces"
        )
        served.create({"HostConfig": {"NetworkMode": "bridge"}})
        assert _creates(served) == ["POST /containers/create"]
    finally:
        served.stop()


@pytest.mark.parametrize(
    ("method", "template"),
    [
        ("GET", "/v1.41/containers/{}/json"),
        ("POST", "/v1.41/containers/{}/start"),
        ("DELETE", "/v1.41/containers/{}?force=1"),
        ("POST", "/v1.41/containers/{}/exec"),
        ("GET", "/v1.41/containers/{}/logs?stdout=1"),
    ],
)
def test_another_sessions_container_is_refused_by_id_and_never_reaches_the_engine(
    bridge: BridgeThread, method: str, template: str
) -> None:
    other = bridge.direct("POST", "/containers/create", {"Image": IMAGE}).json()["Id"]
    bridge.create()  # the session has one of its own
    before = len(bridge.engine.requests)
    body = {"Cmd": ["sh"]} if template.endswith("/exec") else None
    for ref in (other, other[:12]):
        reply = bridge.call(method, template.format(ref), body)
        _refused(bridge, reply.status, reply.message, "path.container", "own-objects-only")
    assert len(bridge.engine.requests) == before


def test_another_sessions_exec_is_refused(bridge: BridgeThread) -> None:
    reply = bridge.call("POST", f"/exec/{'ab' * 32}/start", {"Detach": True})
    _refused(bridge, reply.status, reply.message, "path.exec", "own-objects-only")


def test_a_privileged_exec_is_refused(bridge: BridgeThread) -> None:
    cid = bridge.create()
    reply = bridge.call("POST", f"/containers/{cid}/exec", {"Cmd": ["sh"], "Privileged": True})
    _refused(bridge, reply.status, reply.message, "Privileged", "no-privileged")
    assert not any(p.endswith("/exec") for p in bridge.engine.paths())


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("POST", "/v1.41/build"),
        ("POST", "/images/load"),
        ("PUT", "/containers/abc/archive?path=/"),
        ("POST", "/v1.41/containers/prune"),
        ("GET", "/v1.41/containers/../info"),
        ("POST", "/session"),
        ("POST", "/plugins/pull"),
    ],
)
def test_an_endpoint_outside_the_table_is_refused(
    bridge: BridgeThread, method: str, target: str
) -> None:
    reply = bridge.call(method, target, raw=b"")
    _refused(bridge, reply.status, reply.message, "path", "endpoint-not-allowed")
    assert bridge.engine.requests == []


def test_a_query_parameter_outside_the_rows_is_refused(bridge: BridgeThread) -> None:
    reply = bridge.call("POST", "/images/create?fromSrc=-&repo=x")
    _refused(bridge, reply.status, reply.message, "query.fromSrc", "parameter-not-allowed")
    assert bridge.engine.requests == []


def test_a_pull_of_an_image_not_listed_is_refused(bridge: BridgeThread) -> None:
    reply = bridge.call("POST", "/images/create?fromImage=alpine&tag=3")
    _refused(bridge, reply.status, reply.message, "query.fromImage", "image-not-listed")


def test_a_body_over_the_cap_is_refused_with_413(bridge: BridgeThread) -> None:
    body = json.dumps({"Image": IMAGE, "Env": ["X=" + "a" * MAX_BODY_BYTES]}).encode()
    reply = bridge.call("POST", "/containers/create", raw=body)
    assert reply.status == 413
    assert "(field body, rule body-size)" in reply.message
    assert bridge.engine.requests == []


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'{"Image": 5}', b"\xff\xfe"])
def test_a_malformed_body_is_refused_with_400(bridge: BridgeThread, body: bytes) -> None:
    reply = bridge.call("POST", "/containers/create", raw=body)
    assert reply.status == 400, reply.body
    assert "rule malformed-request" in reply.message or "rule image-not-listed" in reply.message
    assert bridge.engine.requests == []


@pytest.mark.parametrize(
    "data",
    [
        b"GET /_ping HTTP/1.1\r\nHost: docker\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"GET /_ping HTTP/1.1\nHost: x\n\n",
        b"\x16\x03\x01\x00\xa5\x01\x00\x00",
        b"GET /_ping HTTP/9.9\r\n\r\n",
    ],
)
def test_malformed_http_is_refused_with_400(bridge: BridgeThread, data: bytes) -> None:
    answer = bridge.raw(data)
    assert answer.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 505 ")) or b" 400 " in answer[:20]
    assert b'"message": "sandbridge: ' in answer
    assert bridge.engine.requests == []


def test_past_the_request_rate_requests_are_refused_with_429(tmp_path: Path) -> None:
    served = BridgeThread(tmp_path, max_requests=3)
    try:
        statuses = [served.call("GET", "/_ping").status for _ in range(5)]
        assert statuses == [200, 200, 200, 429, 429]
        reply = served.call("GET", "/_ping")
        assert "(field connection, rule request-rate)" in reply.message
        assert len(served.engine.requests) == 3
    finally:
        served.stop()


def test_the_socket_is_the_owners_alone(bridge: BridgeThread) -> None:
    assert os.stat(bridge.path).st_mode & 0o777 == 0o600


# --- more of what a client does, and the engine failing ------------------------------------


def test_requests_follow_one_another_on_a_kept_alive_connection(bridge: BridgeThread) -> None:
    connection = connect_to(bridge.path)
    try:
        for _ in range(3):
            connection.request("GET", "/v1.41/version")
            answer = connection.getresponse()
            assert answer.status == 200
            answer.read()
    finally:
        connection.close()
    assert bridge.engine.paths() == ["GET /version"] * 3


def test_the_sessions_volumes_and_networks(tmp_path: Path) -> None:
    served = BridgeThread(tmp_path, network=NetworkMode.ENGINE)
    try:
        assert served.call("POST", "/volumes/create", {"Name": "data"}).status == 201
        assert served.call("POST", "/networks/create", {"Name": "net"}).json()["Id"]
        cid = served.create({"HostConfig": {"Binds": ["data:/data"], "NetworkMode": "net"}})
        assert served.call("DELETE", f"/containers/{cid}").status == 204
        assert served.call("DELETE", "/volumes/data").status == 204
        reply = served.call("DELETE", "/volumes/other")
        _refused(served, reply.status, reply.message, "path.volume", "own-objects-only")
        reply = served.call("GET", "/networks/bridge")
        _refused(served, reply.status, reply.message, "path.network", "own-objects-only")
    finally:
        served.stop()
    assert served.engine.paths()[-1].startswith("DELETE /networks/")  # the rest, at the end


def test_a_volume_that_exists_already_is_not_made_the_sessions(tmp_path: Path) -> None:
    served = BridgeThread(tmp_path)
    try:
        served.direct("POST", "/volumes/create", {"Name": "owners-db"})  # the owner's own
        reply = served.call("POST", "/volumes/create", {"Name": "owners-db"})
        _refused(served, reply.status, reply.message, "Name", "own-volumes-only")
        reply = served.call(
            "POST", "/containers/create",
            {"Image": IMAGE, "HostConfig": {"Binds": ["owners-db:/data"]}},
        )  # fmt: skip
        _refused(served, reply.status, reply.message, "HostConfig.Binds[0]", "own-volumes-only")
        assert served.call("POST", "/volumes/create", {"Name": "mine"}).status == 201
        assert served.call("POST", "/volumes/create", {"Name": "mine"}).status == 201  # again
    finally:
        served.stop()
    assert "DELETE /volumes/owners-db" not in served.engine.paths()


def test_a_listed_image_may_be_inspected_and_pulled_and_no_other(bridge: BridgeThread) -> None:
    assert bridge.call("GET", f"/images/{IMAGE}/json").status == 404  # the stand-in's answer
    reply = bridge.call("GET", "/images/alpine:3/json")
    _refused(bridge, reply.status, reply.message, "path.image", "image-not-listed")
    name, _, tag = IMAGE.rpartition(":")
    bridge.call("POST", f"/images/create?fromImage={name}&tag={tag}")
    assert bridge.engine.paths() == [f"GET /images/{IMAGE}/json", "POST /images/create"]


def test_connections_past_the_limit_are_refused_and_the_others_still_served(
    bridge: BridgeThread,
) -> None:
    held = []
    try:
        for _ in range(MAX_CONTAINER_CONNECTIONS):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)
            sock.connect(str(bridge.path))
            sock.sendall(b"GET /_ping HTTP/1.1\r\nHost: d\r\n\r\n")  # kept alive after
            assert sock.recv(100).startswith(b"HTTP/1.1 200 ")
            held.append(sock)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as extra:
            extra.settimeout(10)
            extra.connect(str(bridge.path))  # told before it sends anything
            refused = b""
            while chunk := extra.recv(1000):
                refused += chunk
        assert refused.startswith(b"HTTP/1.1 429 ")
        assert b"too many engine connections at once" in refused
        held.pop().close()
        for _ in range(100):  # the freed slot is taken again once the bridge saw it close
            if bridge.call("GET", "/_ping").status == 200:
                break
        else:
            raise AssertionError("the freed slot was not served again")
    finally:
        for sock in held:
            sock.close()


def test_an_engine_that_fails_is_a_502_for_that_request_alone(bridge: BridgeThread) -> None:
    bridge.engine.socket.rename(bridge.engine.socket.with_name("moved.sock"))
    reply = bridge.call("GET", "/_ping")
    assert reply.status == 502
    assert reply.message.startswith("sandbridge: the engine failed: ")
    bridge.engine.socket.with_name("moved.sock").rename(bridge.engine.socket)
    assert bridge.call("GET", "/_ping").status == 200

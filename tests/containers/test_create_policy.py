"""The create bodies' field checks: what a client sends for a plain run passes (labelled,
without a network), every widening field is refused naming itself and its rule, and no
field outside the reviewed lists passes unless empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbridge.containers import create_policy
from sandbridge.containers.binds import BindRules, Protected
from sandbridge.containers.create_policy import SESSION_LABEL, CreateRules
from sandbridge.containers.settings import NetworkMode
from sandbridge.exceptions import ContainerRefused

IMAGE = "localhost/sbtest/busybox:1"


def _rules(workdir: Path, network: NetworkMode = NetworkMode.NONE, **binds: Any) -> CreateRules:
    return CreateRules(
        "s-one",
        frozenset({IMAGE, "busybox:latest"}),
        network,
        BindRules(workdir.resolve(), Path("/run/cover"), **binds),
        lambda: {"mynet"},
        lambda: {"myvol"},
    )


def _refused(body: object, rules: CreateRules) -> tuple[str, str]:
    with pytest.raises(ContainerRefused) as refused:
        create_policy.check_container(body, rules)
    return refused.value.field, refused.value.rule


# What `docker run --rm -v $PWD:/src busybox echo hi` sends (Docker CLI 28, trimmed of
# nothing: every field empty or default as the CLI sets it).
DOCKER_CLI_RUN: dict[str, Any] = {
    "Hostname": "", "Domainname": "", "User": "", "AttachStdin": False, "AttachStdout": True,
    "AttachStderr": True, "Tty": False, "OpenStdin": False, "StdinOnce": False, "Env": None,
    "Cmd": ["echo", "hi"], "Image": "busybox", "Volumes": {}, "WorkingDir": "",
    "Entrypoint": None, "OnBuild": None, "Labels": {},
    "HostConfig": {
        "Binds": None, "ContainerIDFile": "", "LogConfig": {"Type": "", "Config": {}},
        "NetworkMode": "default", "PortBindings": {}, "RestartPolicy": {"Name": "no",
        "MaximumRetryCount": 0}, "AutoRemove": True, "VolumeDriver": "", "VolumesFrom": None,
        "ConsoleSize": [24, 80], "CapAdd": None, "CapDrop": None, "CgroupnsMode": "",
        "Dns": [], "DnsOptions": [], "DnsSearch": [], "ExtraHosts": None, "GroupAdd": None,
        "IpcMode": "", "Cgroup": "", "Links": None, "OomScoreAdj": 0, "PidMode": "",
        "Privileged": False, "PublishAllPorts": False, "ReadonlyRootfs": False,
        "SecurityOpt": None, "UTSMode": "", "UsernsMode": "", "ShmSize": 0, "Isolation": "",
        "CpuShares": 0, "Memory": 0, "NanoCpus": 0, "CgroupParent": "", "BlkioWeight": 0,
        "BlkioWeightDevice": [], "BlkioDeviceReadBps": [], "Devices": [],
        "DeviceCgroupRules": None, "DeviceRequests": None, "MemoryReservation": 0,
        "MemorySwap": 0, "MemorySwappiness": None, "OomKillDisable": None, "PidsLimit": None,
        "Ulimits": [], "MaskedPaths": None, "ReadonlyPaths": None, "Mounts": None,
    },
    "NetworkingConfig": {"EndpointsConfig": {"default": {}}},
}  # fmt: skip


def test_the_docker_clis_plain_run_passes_labelled_and_without_a_network(tmp_path: Path) -> None:
    checked = create_policy.check_container(DOCKER_CLI_RUN, _rules(tmp_path))
    assert checked["Labels"] == {SESSION_LABEL: "s-one"}
    assert checked["HostConfig"]["NetworkMode"] == "none"
    assert checked["Cmd"] == ["echo", "hi"]
    assert checked["NetworkingConfig"] == {}


def test_engine_network_mode_keeps_the_default_network(tmp_path: Path) -> None:
    rules = _rules(tmp_path, NetworkMode.ENGINE)
    assert create_policy.check_container(DOCKER_CLI_RUN, rules)["HostConfig"]["NetworkMode"] == (
        "default"
    )
    body = {"Image": IMAGE, "HostConfig": {"NetworkMode": "mynet"}}
    assert create_policy.check_container(body, rules)["HostConfig"]["NetworkMode"] == "mynet"
    body = {"Image": IMAGE, "HostConfig": {"NetworkMode": "othernet"}}
    assert _refused(body, rules) == ("HostConfig.NetworkMode", "own-networks-only")


def _host(**fields: object) -> dict[str, Any]:
    return {"Image": IMAGE, "HostConfig": fields}


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        (_host(Privileged=True), "HostConfig.Privileged", "no-privileged"),
        (_host(Privileged=1), "HostConfig.Privileged", "no-privileged"),
        (_host(PidMode="host"), "HostConfig.PidMode", "no-host-namespaces"),
        (_host(PidMode="container:abc"), "HostConfig.PidMode", "no-host-namespaces"),
        (_host(IpcMode="host"), "HostConfig.IpcMode", "no-host-namespaces"),
        (_host(UTSMode="host"), "HostConfig.UTSMode", "no-host-namespaces"),
        (_host(UsernsMode="host"), "HostConfig.UsernsMode", "no-host-namespaces"),
        (_host(CgroupnsMode="host"), "HostConfig.CgroupnsMode", "no-host-namespaces"),
        (_host(NetworkMode="host"), "HostConfig.NetworkMode", "network-none"),
        (_host(NetworkMode="container:abc"), "HostConfig.NetworkMode", "network-none"),
        (_host(Devices=[{"PathOnHost": "/dev/sda"}]), "HostConfig.Devices", "no-devices"),
        (_host(DeviceRequests=[{"Count": -1}]), "HostConfig.DeviceRequests", "no-devices"),
        (_host(DeviceCgroupRules=["c *:* rwm"]), "HostConfig.DeviceCgroupRules", "no-devices"),
        (_host(CapAdd=["NET_ADMIN"]), "HostConfig.CapAdd", "no-capabilities"),
        (_host(CapAdd=["ALL"]), "HostConfig.CapAdd", "no-capabilities"),
        (_host(SecurityOpt=["apparmor=unconfined"]), "HostConfig.SecurityOpt", "no-unconfined"),
        (_host(SecurityOpt=["label=disable"]), "HostConfig.SecurityOpt", "no-unconfined"),
        (_host(SecurityOpt=["systempaths=unconfined"]), "HostConfig.SecurityOpt", "no-unconfined"),
        (_host(SecurityOpt=["seccomp=/tmp/x.json"]), "HostConfig.SecurityOpt", "security-opt"),
        (_host(MaskedPaths=[]), "HostConfig.MaskedPaths", "no-unconfined"),
        (_host(ReadonlyPaths=[]), "HostConfig.ReadonlyPaths", "no-unconfined"),
        (_host(PortBindings={"80/tcp": [{}]}), "HostConfig.PortBindings", "no-published-ports"),
        (_host(PublishAllPorts=True), "HostConfig.PublishAllPorts", "no-published-ports"),
        (_host(OomScoreAdj=-1000), "HostConfig.OomScoreAdj", "no-host-priority"),
        (_host(LogConfig={"Type": "syslog"}), "HostConfig.LogConfig.Type", "local-logs-only"),
        (_host(RestartPolicy={"Name": "always"}), "HostConfig.RestartPolicy.Name", "no-restart"),
        (_host(LogConfig={"Type": "k8s-file", "Config": {"path": "/home/o/.profile"}}),
         "HostConfig.LogConfig.Config.path", "log-options"),
        (_host(LogConfig={"Type": "json-file", "Config": {"max-size": 1}}),
         "HostConfig.LogConfig.Config.max-size", "malformed-request"),
        (_host(RestartPolicy={"Name": "no", "Other": 1}), "HostConfig.RestartPolicy.Other",
         "field-not-reviewed"),
        (_host(Mounts=[{"Type": "tmpfs", "Target": "/t", "TmpfsOptions": {"X": 1}}]),
         "HostConfig.Mounts[0].TmpfsOptions.X", "field-not-reviewed"),
        (_host(VolumesFrom=["other"]), "HostConfig.VolumesFrom", "field-not-reviewed"),
        (_host(Links=["other:db"]), "HostConfig.Links", "field-not-reviewed"),
        (_host(Runtime="runc-debug"), "HostConfig.Runtime", "field-not-reviewed"),
        (_host(Sysctls={"kernel.x": "1"}), "HostConfig.Sysctls", "field-not-reviewed"),
        (_host(Annotations={"a": "b"}), "HostConfig.Annotations", "field-not-reviewed"),
        (_host(Binds=["/:/host"]), "HostConfig.Binds[0]", "binds-inside-workdir"),
        (_host(Binds=["othervol:/data"]), "HostConfig.Binds[0]", "own-volumes-only"),
        (_host(Binds=["/x"]), "HostConfig.Binds[0]", "malformed-request"),
        (_host(Mounts=[{"Type": "npipe", "Target": "/x"}]), "HostConfig.Mounts[0].Type",
         "mount-types"),
        (_host(Mounts=[{"Type": "volume", "Target": "/x"}]), "HostConfig.Mounts[0].Source",
         "own-volumes-only"),
        (_host(Mounts=[{"Type": "volume", "Source": "myvol", "Target": "/x",
                        "VolumeOptions": {"DriverConfig": {"Name": "local", "Options":
                                                           {"device": "/"}}}}]),
         "HostConfig.Mounts[0].VolumeOptions.DriverConfig", "field-not-reviewed"),
        ({"Image": "alpine"}, "Image", "image-not-listed"),
        ({"Image": "busybox:1.36"}, "Image", "image-not-listed"),
        ({"Image": "sha256:" + "a" * 64}, "Image", "image-not-listed"),
        ({}, "Image", "image-not-listed"),
        ({"Image": IMAGE, "Volumes": {"/data": {}}}, "Volumes", "own-volumes-only"),
        ({"Image": IMAGE, "Labels": {"sandbridge.session": "x"}}, "Labels.sandbridge.session",
         "session-label"),
        ({"Image": IMAGE, "NetworkingConfig": {"EndpointsConfig": {"bridge": {}}}},
         "NetworkingConfig.EndpointsConfig.bridge", "network-none"),
        ({"Image": IMAGE, "NetworkingConfig": {"EndpointsConfig": {"default": {"X": 1}}}},
         "NetworkingConfig.EndpointsConfig.default.X", "field-not-reviewed"),
        ({"Image": IMAGE, "SomethingNew": {"x": 1}}, "SomethingNew", "field-not-reviewed"),
        (_host(SomethingNew=True), "HostConfig.SomethingNew", "field-not-reviewed"),
    ],
)  # fmt: skip
def test_a_widening_field_is_refused_naming_field_and_rule(
    tmp_path: Path, body: dict[str, Any], field: str, rule: str
) -> None:
    assert _refused(body, _rules(tmp_path)) == (field, rule)


# Go's JSON decoder (Docker's, podman's) matches a key to a field ignoring case, folding
# U+017F (long s) to "s" and U+212A (Kelvin) to "k", and a later key overwrites an earlier
# one: a case variant with an "empty" value is the checked field set again, unchecked.
@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_host(maskedPaths=[]), "HostConfig.maskedPaths"),
        (_host(**{"Ma\u017fkedPaths": []}), "HostConfig.Ma\u017fkedPaths"),
        (_host(readonlypaths=[]), "HostConfig.readonlypaths"),
        (_host(Mounts=None, mounts=None), "HostConfig.mounts"),
        (_host(NetworkMode="", networkmode=""), "HostConfig.networkmode"),
        ({"Image": IMAGE, "Labels": {}, "labels": None}, "labels"),
        ({"Image": IMAGE, "HostConfig": {}, "hostConfig": None}, "hostConfig"),
        ({"Image": IMAGE, "NetworkingConfig": None, "networkingconfig": None},
         "networkingconfig"),
        (_host(LogConfig={"Type": "json-file", "type": "syslog"}), "HostConfig.LogConfig.type"),
        (_host(RestartPolicy={"Name": "no", "name": "always"}), "HostConfig.RestartPolicy.name"),
        (_host(Mounts=[{"Type": "tmpfs", "Target": "/t", "type": "bind"}]),
         "HostConfig.Mounts[0].type"),
        (_host(**{"NetworkMode": "", "Networ\u212aMode": ""}), "HostConfig.Networ\u212aMode"),
    ],
)  # fmt: skip
def test_a_case_variant_of_a_reviewed_field_is_refused(
    tmp_path: Path, body: dict[str, Any], field: str
) -> None:
    assert _refused(body, _rules(tmp_path)) == (field, "field-case")


def test_a_case_variant_is_refused_in_exec_network_and_volume_bodies(tmp_path: Path) -> None:
    engine = _rules(tmp_path, NetworkMode.ENGINE)
    with pytest.raises(ContainerRefused) as refused:
        create_policy.check_exec({"Cmd": ["sh"], "privileged": False})
    assert (refused.value.field, refused.value.rule) == ("privileged", "field-case")
    for check, body, field in [
        (create_policy.check_network, {"Name": "n", "labels": None}, "labels"),
        (create_policy.check_network, {"Name": "n", "IPAM": {"driver": ""}}, "IPAM.driver"),
        (create_policy.check_volume, {"Name": "v", "driverOpts": None}, "driverOpts"),
    ]:  # fmt: skip
        with pytest.raises(ContainerRefused) as refused:
            check(body, engine)
        assert (refused.value.field, refused.value.rule) == (field, "field-case")


def test_an_endpoint_on_an_own_network_is_reviewed_field_by_field(tmp_path: Path) -> None:
    rules = _rules(tmp_path, NetworkMode.ENGINE)
    body = {"Image": IMAGE, "NetworkingConfig": {"EndpointsConfig": {"mynet": {"Aliases": ["db"]}}}}
    assert create_policy.check_container(body, rules)["NetworkingConfig"] == {
        "EndpointsConfig": {"mynet": {"Aliases": ["db"]}}
    }
    for endpoint, field, rule in [
        ({"links": ["owners-db:db"]}, "links", "field-case"),
        ({"DriverOpts": {"com.docker.network.endpoint.sysctls": "x"}}, "DriverOpts",
         "field-not-reviewed"),
    ]:  # fmt: skip
        body = {"Image": IMAGE, "NetworkingConfig": {"EndpointsConfig": {"mynet": endpoint}}}
        assert _refused(body, rules) == (f"NetworkingConfig.EndpointsConfig.mynet.{field}", rule)


def test_the_docker_hub_names_of_a_listed_image_pass(tmp_path: Path) -> None:
    for name in ("busybox", "busybox:latest", "docker.io/library/busybox", "library/busybox"):
        create_policy.check_container({"Image": name}, _rules(tmp_path))


def test_own_volumes_bind_and_mount(tmp_path: Path) -> None:
    body = _host(Binds=["myvol:/data:ro"], Mounts=[{"Type": "volume", "Source": "myvol",
                                                      "Target": "/more"}])  # fmt: skip
    checked = create_policy.check_container(body, _rules(tmp_path))
    assert checked["HostConfig"]["Binds"] == ["myvol:/data:ro"]


def test_a_bind_inside_a_protected_path_must_be_read_only(tmp_path: Path) -> None:
    hooks = tmp_path / ".git" / "hooks"
    hooks.mkdir(parents=True)
    rules = _rules(tmp_path, protected=(Protected(hooks.resolve()),))
    body = _host(Binds=[f"{hooks}:/hooks"])
    assert _refused(body, rules) == ("HostConfig.Binds[0]", "protected-paths")
    create_policy.check_container(_host(Binds=[f"{hooks}:/hooks:ro"]), rules)


def test_a_bind_of_the_workdir_shields_what_the_sandbox_sees_read_only(tmp_path: Path) -> None:
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".sandbridge").mkdir()
    workdir = tmp_path.resolve()
    rules = _rules(
        tmp_path,
        protected=(
            Protected(workdir / ".git", writable=True),
            Protected(workdir / ".git/hooks", writable=True),
            Protected(workdir / ".git/hooks"),
            Protected(workdir / ".sandbridge"),  # under the cover: not bound twice
        ),
        hidden=(workdir / ".sandbridge", workdir / ".sandbridge"),  # own and remembered
    )
    checked = create_policy.check_container(_host(Binds=[f"{tmp_path}:/src"]), rules)
    assert checked["HostConfig"]["Binds"] == [f"{workdir}:/src"]
    assert checked["HostConfig"]["Mounts"] == [
        {"Type": "bind", "Source": f"{workdir}/.git", "Target": "/src/.git", "ReadOnly": False},
        {"Type": "bind", "Source": f"{workdir}/.git/hooks", "Target": "/src/.git/hooks",
         "ReadOnly": True},
        {"Type": "bind", "Source": "/run/cover", "Target": "/src/.sandbridge", "ReadOnly": True},
    ]  # fmt: skip
    body = _host(Binds=[f"{tmp_path}/.sandbridge:/p:ro"])
    assert _refused(body, rules) == ("HostConfig.Binds[0]", "protected-paths")


def test_exec_create_is_checked_like_create() -> None:
    assert create_policy.check_exec({"Cmd": ["ls"], "User": "0"}) == {"Cmd": ["ls"], "User": "0"}
    for body, field, rule in [
        ({"Cmd": ["sh"], "Privileged": True}, "Privileged", "no-privileged"),
        ({"Cmd": ["sh"], "Something": 1}, "Something", "field-not-reviewed"),
    ]:
        with pytest.raises(ContainerRefused) as refused:
            create_policy.check_exec(body)
        assert (refused.value.field, refused.value.rule) == (field, rule)


def test_network_and_volume_creates(tmp_path: Path) -> None:
    engine = _rules(tmp_path, NetworkMode.ENGINE)
    network = create_policy.check_network({"Name": "n", "Driver": "bridge"}, engine)
    assert network["Labels"] == {SESSION_LABEL: "s-one"}
    volume = create_policy.check_volume({"Name": "v"}, engine)
    assert volume["Labels"] == {SESSION_LABEL: "s-one"}
    for check, body, field, rule in [
        (create_policy.check_network, {"Name": "n", "Driver": "host"}, "Driver", "network-driver"),
        (create_policy.check_network, {"Name": "n", "Driver": "macvlan"}, "Driver",
         "network-driver"),
        (create_policy.check_network, {"Name": "n", "Options":
                                       {"com.docker.network.bridge.name": "docker0"}},
         "Options", "network-driver"),
        (create_policy.check_volume, {"Name": "v", "DriverOpts": {"type": "none", "o": "bind",
                                                                  "device": "/"}},
         "DriverOpts", "volume-driver"),
        (create_policy.check_volume, {"Name": "v", "Driver": "sshfs"}, "Driver", "volume-driver"),
    ]:  # fmt: skip
        with pytest.raises(ContainerRefused) as refused:
            check(body, engine)
        assert (refused.value.field, refused.value.rule) == (field, rule)
    with pytest.raises(ContainerRefused) as refused:
        create_policy.check_network({"Name": "n"}, _rules(tmp_path))
    assert refused.value.rule == "network-none"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                 max_size=4),
    max_leaves=20,
)  # fmt: skip


_CHECKED = ["Privileged", "PidMode", "Binds", "Mounts", "CapAdd", "SecurityOpt", "NetworkMode",
            "Devices", "MaskedPaths", "LogConfig", "Sysctls", "VolumesFrom"]  # fmt: skip


@given(st.dictionaries(st.sampled_from([*sorted(create_policy.FREE_HOST_CONFIG), *_CHECKED]),
                       _JSON, max_size=6))  # fmt: skip
def test_whatever_passes_keeps_the_label_no_network_and_no_privilege(host: dict[str, Any]) -> None:
    rules = _rules(Path("/nonexistent-workdir"))
    try:
        checked = create_policy.check_container({"Image": IMAGE, "HostConfig": host}, rules)
    except ContainerRefused as refused:
        assert refused.status in (400, 403)
        return
    sent = checked["HostConfig"]
    assert checked["Labels"][SESSION_LABEL] == "s-one"
    assert sent["NetworkMode"] == "none"
    assert sent.get("Privileged") in (None, False)
    assert not sent.get("Binds")  # nothing exists in a workdir that does not
    assert all(m.get("Type") == "tmpfs" for m in sent.get("Mounts") or [])
    assert sent.get("PidMode") in (None, "")

"""The bodies the bridge checks field by field: container, exec, network and volume create.

Deny by default at every level: a field this module has no rule for is allowed only empty
(absent, null, false, 0, "", [] or {}: what a client sends for "not set"), else refused as
``field-not-reviewed``, so a field a later API version adds is refused until reviewed. A
field with a rule is checked by it; every refusal names the field (``HostConfig.PidMode``)
and the rule (``no-host-namespaces``). What passes is sent on with the session's label
(:data:`SESSION_LABEL`) and, for a container, the network the owner chose, and the binds'
resolved sources with their shields (binds.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Set
from dataclasses import dataclass
from typing import Any

from sandbridge.containers.binds import BindRules, check_source, check_writable, shields
from sandbridge.containers.settings import NetworkMode, is_reference, normalise_image
from sandbridge.exceptions import ContainerRefused

# Every object the bridge creates carries this label, with the session's id.
SESSION_LABEL = "sandbridge.session"
LABEL_PREFIX = "sandbridge."
# Capabilities a container may add beyond the engine's default set: none. A test suite's
# containers run with the engine's defaults; each added capability is a review's work.
ALLOWED_CAPABILITIES: frozenset[str] = frozenset()
# The only SecurityOpt the bridge passes: one that narrows, never one that widens.
ALLOWED_SECURITY_OPTS = frozenset(
    {"no-new-privileges", "no-new-privileges:true", "no-new-privileges=true"}
)
# Namespace modes that keep the container in namespaces of its own.
PRIVATE_MODES = {
    "PidMode": frozenset({""}),
    "UTSMode": frozenset({""}),
    "UsernsMode": frozenset({""}),
    "IpcMode": frozenset({"", "private", "none", "shareable"}),
    "CgroupnsMode": frozenset({"", "private"}),
}
# Log drivers that write on the engine's machine; others (syslog, fluentd, gelf...) send
# the container's output over the engine's own network.
LOCAL_LOG_DRIVERS = frozenset({"", "json-file", "local", "k8s-file", "journald", "none"})
# A local log driver's options that size, name and rotate its file; never "path" (podman's
# k8s-file writes the output where it says, on the host) nor anything unreviewed.
LOG_OPTIONS = frozenset(
    {"max-size", "max-file", "compress", "tag", "labels", "labels-regex", "env", "env-regex"}
    | {"mode", "max-buffer-size"}
)
# An endpoint's settings on a network the container may join: its names and addresses
# there (Links, checked, and DriverOpts, unreviewed, aside).
ENDPOINT_FIELDS = frozenset(
    {"IPAMConfig", "Aliases", "DNSNames", "MacAddress", "NetworkID", "EndpointID", "Gateway"}
    | {"IPAddress", "IPPrefixLen", "IPv6Gateway", "GlobalIPv6Address", "GlobalIPv6PrefixLen"}
    | {"GwPriority", "Links"}
)
RESTART_POLICIES = frozenset({"", "no", "on-failure"})
BIND_OPTIONS = frozenset(
    {"ro", "rw", "z", "Z", "private", "rprivate", "nocopy", "consistent", "cached", "delegated"}
)
_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")
# Fields that carry no reach beyond the container itself: resources, its own files,
# names it resolves, its process's settings.
FREE_HOST_CONFIG = frozenset(
    {
        "CpuShares",
        "Memory",
        "NanoCpus",
        "CpuPeriod",
        "CpuQuota",
        "CpuRealtimePeriod",
        "CpuRealtimeRuntime",
        "CpusetCpus",
        "CpusetMems",
        "MemoryReservation",
        "MemorySwap",
        "MemorySwappiness",
        "KernelMemory",
        "KernelMemoryTCP",
        "PidsLimit",
        "OomKillDisable",
        "CpuCount",
        "CpuPercent",
        "BlkioWeight",
        "AutoRemove",
        "ConsoleSize",
        "Init",
        "ReadonlyRootfs",
        "ShmSize",
        "Dns",
        "DnsOptions",
        "DnsSearch",
        "ExtraHosts",
        "GroupAdd",
        "CapDrop",
        "Ulimits",
        "Tmpfs",
        "ContainerIDFile",
        "Isolation",
    }
)
FREE_CONFIG = frozenset(
    {
        "Hostname",
        "Domainname",
        "User",
        "AttachStdin",
        "AttachStdout",
        "AttachStderr",
        "ExposedPorts",
        "Tty",
        "OpenStdin",
        "StdinOnce",
        "Env",
        "Cmd",
        "Healthcheck",
        "ArgsEscaped",
        "WorkingDir",
        "Entrypoint",
        "NetworkDisabled",
        "MacAddress",
        "OnBuild",
        "StopSignal",
        "StopTimeout",
        "Shell",
    }
)
FREE_EXEC = frozenset(
    {
        "AttachStdin",
        "AttachStdout",
        "AttachStderr",
        "DetachKeys",
        "ConsoleSize",
        "Tty",
        "Env",
        "Cmd",
        "User",
        "WorkingDir",
    }
)


@dataclass(frozen=True, slots=True)
class CreateRules:
    """What a session's create requests are checked against."""

    session: str
    images: frozenset[str]
    network: NetworkMode
    binds: BindRules
    # The names and ids of the session's own networks and volumes (owned.py), asked
    # when a body names one.
    own_networks: Callable[[], set[str]]
    own_volumes: Callable[[], set[str]]


def _empty(value: object) -> bool:
    return value is None or value is False or value == 0 or value in ("", [], {})


def _refuse(field: str, rule: str, detail: str) -> ContainerRefused:
    return ContainerRefused(field, rule, detail)


def _object(value: object, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ContainerRefused(field, "malformed-request", "not a JSON object", 400)
    return value


def _strings(value: object, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ContainerRefused(field, "malformed-request", "not a list of strings", 400)
    return value


def _text(value: object, field: str) -> str:
    """A string field's value (absent or null: ``""``)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ContainerRefused(field, "malformed-request", "not a string", 400)
    return value


def _folds(key: str) -> set[str]:
    """The forms under which Go's JSON decoder (the engine's) takes ``key`` for a field: it
    ignores case, each character lowered then raised (so U+017F, the long s, is "S" and
    U+212A, the Kelvin sign, "K"); Python's casefold besides, which folds more, never less."""
    return {"".join(c.lower().upper() for c in key), key.casefold()}


def _one_spelling(body: dict[str, Any], known: Set[str], prefix: str) -> None:
    """Each field of a struct ``body`` spelled once, as the API spells it. Go matches a key
    to a field ignoring case and the last one wins: ``"maskedPaths": []`` after the checked
    ``MaskedPaths``, or ``"mounts": null`` after the shields the bridge set, would be the
    field set again, unchecked, where the engine reads it."""
    canonical = {fold: name for name in known for fold in _folds(name)}
    seen: dict[str, str] = {}
    for key in body:
        folds = _folds(key)
        names = [canonical[f] for f in folds if f in canonical and canonical[f] != key]
        twice = [seen[f] for f in folds if f in seen]
        if names or twice:
            raise _refuse(
                f"{prefix}{key[:100]}",
                "field-case",
                f"the engine reads it as {(names or twice)[0][:100]}; "
                "each field is sent once, spelled as the API spells it",
            )
        seen.update(dict.fromkeys(folds, key))


def _unreviewed(body: dict[str, Any], allowed: Set[str], prefix: str) -> None:
    _one_spelling(body, allowed, prefix)
    for key, value in body.items():
        if key not in allowed and not _empty(value):
            raise _refuse(
                f"{prefix}{key[:100]}",
                "field-not-reviewed",
                "not a field the bridge has a rule for; only its empty value passes",
            )


def check_image(reference: object, field: str, images: frozenset[str]) -> str:
    """``reference`` when it is one of the owner's listed ``images``."""
    if not isinstance(reference, str) or not is_reference(reference):
        raise ContainerRefused(field, "image-not-listed", "not an image reference", 400)
    if normalise_image(reference) not in images:
        raise _refuse(
            field,
            "image-not-listed",
            f"{reference} is not an image the owner listed (--containers-image)",
        )
    return reference


def _labels(value: object, field: str, session: str) -> dict[str, str]:
    labels = _object(value, field)
    for key, text in labels.items():
        if not isinstance(text, str):
            raise ContainerRefused(f"{field}.{key[:100]}", "malformed-request", "not a string", 400)
        if key.startswith(LABEL_PREFIX):
            raise _refuse(
                f"{field}.{key[:100]}", "session-label", "sandbridge's labels are its own to set"
            )
    return {**labels, SESSION_LABEL: session}


def check_container(body: object, rules: CreateRules) -> dict[str, Any]:
    """A container create's body, checked and labelled; refused naming field and rule."""
    config = dict(_object(body, "body"))
    host = dict(_object(config.get("HostConfig"), "HostConfig"))
    _unreviewed(
        config, FREE_CONFIG | {"Image", "Labels", "Volumes", "HostConfig", "NetworkingConfig"}, ""
    )
    check_image(config.get("Image"), "Image", rules.images)
    if not _empty(config.get("Volumes")):
        raise _refuse(
            "Volumes",
            "own-volumes-only",
            "anonymous volumes are the engine's, not the session's; create one",
        )
    config["Labels"] = _labels(config.get("Labels"), "Labels", rules.session)
    _check_host_config(host, rules)
    config["NetworkingConfig"] = _check_networking(config.get("NetworkingConfig"), rules)
    host["NetworkMode"] = _network_mode(host.get("NetworkMode"), rules)
    config["HostConfig"] = host
    return config


def _check_host_config(host: dict[str, Any], rules: CreateRules) -> None:  # noqa: PLR0912  (one pass, one rule a field)
    checked = {
        "Privileged",
        "NetworkMode",
        *PRIVATE_MODES,
        "Devices",
        "DeviceRequests",
        "DeviceCgroupRules",
        "CapAdd",
        "SecurityOpt",
        "Binds",
        "Mounts",
        "LogConfig",
        "RestartPolicy",
        "MaskedPaths",
        "ReadonlyPaths",
        "OomScoreAdj",
    }
    score = host.get("OomScoreAdj")
    if score is not None and (type(score) is not int or score < 0):
        # Below 0 the host's kernel kills the owner's own processes before the container's.
        raise _refuse("HostConfig.OomScoreAdj", "no-host-priority", f"{score!r}: 0 or above")
    for key in ("PortBindings", "PublishAllPorts"):  # the engine listens on every address
        if not _empty(host.get(key)):
            raise _refuse(f"HostConfig.{key}", "no-published-ports", "host ports are refused")
    _unreviewed(host, FREE_HOST_CONFIG | checked, "HostConfig.")
    if host.get("Privileged") not in (None, False):
        raise _refuse("HostConfig.Privileged", "no-privileged", "privileged containers are refused")
    for key, allowed in PRIVATE_MODES.items():
        mode = _text(host.get(key), f"HostConfig.{key}")
        if mode not in allowed:
            raise _refuse(
                f"HostConfig.{key}",
                "no-host-namespaces",
                f"{str(mode)[:100]!r}: the container keeps namespaces of its own",
            )
    for key in ("Devices", "DeviceRequests", "DeviceCgroupRules"):
        if not _empty(host.get(key)):
            raise _refuse(f"HostConfig.{key}", "no-devices", "host devices are refused")
    for cap in _strings(host.get("CapAdd"), "HostConfig.CapAdd"):
        if cap.upper().removeprefix("CAP_") not in ALLOWED_CAPABILITIES:
            raise _refuse("HostConfig.CapAdd", "no-capabilities", f"{cap[:100]!r} is not added")
    for opt in _strings(host.get("SecurityOpt"), "HostConfig.SecurityOpt"):
        if opt not in ALLOWED_SECURITY_OPTS:
            rule = "no-unconfined" if "unconfined" in opt or "disable" in opt else "security-opt"
            raise _refuse("HostConfig.SecurityOpt", rule, f"{opt[:100]!r} is refused")
    for key in ("MaskedPaths", "ReadonlyPaths"):  # [] unmasks /proc: only null keeps them
        if host.get(key) is not None:
            raise _refuse(f"HostConfig.{key}", "no-unconfined", "the engine's masked paths stay")
    log = _object(host.get("LogConfig"), "HostConfig.LogConfig")
    _unreviewed(log, frozenset({"Type", "Config"}), "HostConfig.LogConfig.")
    for key, value in _object(log.get("Config"), "HostConfig.LogConfig.Config").items():
        field = f"HostConfig.LogConfig.Config.{key[:100]}"
        if not isinstance(value, str):
            raise ContainerRefused(field, "malformed-request", "not a string", 400)
        if key not in LOG_OPTIONS:
            raise _refuse(
                field, "log-options", f"{key[:100]!r}: only {', '.join(sorted(LOG_OPTIONS))}"
            )
    if _text(log.get("Type"), "HostConfig.LogConfig.Type") not in LOCAL_LOG_DRIVERS:
        raise _refuse(
            "HostConfig.LogConfig.Type",
            "local-logs-only",
            f"{str(log.get('Type'))[:100]!r} sends the logs off the machine",
        )
    restart = _object(host.get("RestartPolicy"), "HostConfig.RestartPolicy")
    _unreviewed(restart, frozenset({"Name", "MaximumRetryCount"}), "HostConfig.RestartPolicy.")
    if _text(restart.get("Name"), "HostConfig.RestartPolicy.Name") not in RESTART_POLICIES:
        raise _refuse(
            "HostConfig.RestartPolicy.Name",
            "no-restart",
            "a container the session ends is not started again",
        )
    for target in _object(host.get("Tmpfs"), "HostConfig.Tmpfs"):
        _mount_path(target, f"HostConfig.Tmpfs.{target[:100]}")
    mounts = _check_mounts(host.get("Mounts"), rules)
    binds, more = _check_binds(host.get("Binds"), rules)
    if binds_host_paths(binds, mounts) and restart.get("Name") == "on-failure":
        raise _refuse(
            "HostConfig.RestartPolicy.Name",
            "no-restart",
            "a container that binds host paths is started by the session alone (the engine "
            "would mount them again when it restarts it, past the bridge's check)",
        )
    host["Binds"] = binds or None
    host["Mounts"] = (mounts + more) or None


def binds_host_paths(binds: list[str], mounts: list[dict[str, object]]) -> bool:
    """Whether checked ``binds`` and ``mounts`` bind a host path (not a volume, a tmpfs)."""
    return any(b.startswith("/") for b in binds) or any(m.get("Type") == "bind" for m in mounts)


def _check_binds(value: object, rules: CreateRules) -> tuple[list[str], list[dict[str, object]]]:
    binds: list[str] = []
    shielding: list[dict[str, object]] = []
    for index, bind in enumerate(_strings(value, "HostConfig.Binds")):
        field = f"HostConfig.Binds[{index}]"
        parts = bind.split(":")
        if len(parts) not in (2, 3) or not parts[1].startswith("/"):
            raise ContainerRefused(
                field, "malformed-request", f"{bind[:200]!r} is not SRC:DEST", 400
            )
        source, target = parts[0], parts[1]
        options = parts[2].split(",") if len(parts) == 3 else []
        if any(option not in BIND_OPTIONS for option in options):
            raise _refuse(field, "bind-options", f"{parts[2][:100]!r}: only ro, rw and labels")
        _mount_path(target, field)  # the shields' targets begin with it
        if not source.startswith("/"):
            _own_volume(source, field, rules)
            binds.append(bind)
            continue
        resolved = check_source(source, field, rules.binds)
        _mount_path(str(resolved), field)
        check_writable(resolved, "ro" in options, field, rules.binds)
        binds.append(":".join([str(resolved), *parts[1:]]))
        shielding += shields(resolved, target, rules.binds)
    return binds, shielding


def _check_mounts(value: object, rules: CreateRules) -> list[dict[str, object]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ContainerRefused("HostConfig.Mounts", "malformed-request", "not a list", 400)
    checked: list[dict[str, object]] = []
    for index, raw in enumerate(value):
        field = f"HostConfig.Mounts[{index}]"
        mount = dict(_object(raw, field))
        kind = mount.get("Type")
        target = mount.get("Target")
        if not isinstance(target, str) or not target.startswith("/"):
            raise ContainerRefused(f"{field}.Target", "malformed-request", "not a path", 400)
        _mount_path(target, f"{field}.Target")
        free = {"Type", "Target", "ReadOnly", "Consistency"}
        if kind == "bind":
            _unreviewed(mount, free | {"Source", "BindOptions"}, f"{field}.")
            options = _object(mount.get("BindOptions"), f"{field}.BindOptions")
            _unreviewed(options, frozenset({"NonRecursive"}), f"{field}.BindOptions.")
            source = mount.get("Source")
            resolved = check_source(
                source if isinstance(source, str) else "", f"{field}.Source", rules.binds
            )
            _mount_path(str(resolved), f"{field}.Source")
            check_writable(resolved, mount.get("ReadOnly") is True, f"{field}.Source", rules.binds)
            mount["Source"] = str(resolved)
            checked += [mount, *shields(resolved, target, rules.binds)]
        elif kind == "volume":
            _unreviewed(mount, free | {"Source", "VolumeOptions"}, f"{field}.")
            options = _object(mount.get("VolumeOptions"), f"{field}.VolumeOptions")
            _unreviewed(
                options, frozenset({"NoCopy", "Labels", "Subpath"}), f"{field}.VolumeOptions."
            )
            _own_volume(mount.get("Source"), f"{field}.Source", rules)
            checked.append(mount)
        elif kind == "tmpfs":
            _unreviewed(mount, free | {"TmpfsOptions"}, f"{field}.")
            tmpfs = _object(mount.get("TmpfsOptions"), f"{field}.TmpfsOptions")
            _unreviewed(tmpfs, frozenset({"SizeBytes", "Mode"}), f"{field}.TmpfsOptions.")
            checked.append(mount)
        else:
            raise _refuse(
                f"{field}.Type", "mount-types", f"{str(kind)[:50]!r}: bind, volume or tmpfs"
            )
    return checked


def _mount_path(path: str, field: str) -> None:
    """Refuse a mount's path (source or target) that the engine would read as more than a
    path: podman's Docker API joins a mount's fields into one option string
    (``type=bind,source=S,destination=T``, the last ``source`` winning) and a bind is
    ``SRC:DEST:OPTIONS``, so a ``,`` or ``:`` in a path starts another option there."""
    if "," in path or ":" in path:
        raise _refuse(
            field,
            "mount-paths",
            f"{path[:200]!r}: a ',' or ':' in a mount's path is read by the engine as "
            "another option (',source=/etc' would bind /etc)",
        )


def _own_volume(name: object, field: str, rules: CreateRules) -> None:
    if not isinstance(name, str) or not _VOLUME_NAME.fullmatch(name):
        raise _refuse(field, "own-volumes-only", "a volume is named: anonymous ones are refused")
    if name not in rules.own_volumes():
        raise _refuse(field, "own-volumes-only", f"{name!r} is not a volume this session created")


def _network_mode(value: object, rules: CreateRules) -> str:
    mode = _text(value, "HostConfig.NetworkMode")
    if rules.network is NetworkMode.NONE:
        if mode not in ("", "default", "none"):  # "default": the client named none
            raise _refuse(
                "HostConfig.NetworkMode",
                "network-none",
                f"{mode[:100]!r}: the session's containers have no network "
                "(the owner's --containers-network engine gives them the engine's)",
            )
        return "none"
    if mode in ("", "default", "bridge") or mode in rules.own_networks():
        return mode or "bridge"
    raise _refuse(
        "HostConfig.NetworkMode",
        "no-host-namespaces" if mode == "host" or ":" in mode else "own-networks-only",
        f"{mode[:100]!r}: the engine's default network or one the session created",
    )


def _check_networking(value: object, rules: CreateRules) -> dict[str, Any]:
    networking = _object(value, "NetworkingConfig")
    _unreviewed(networking, frozenset({"EndpointsConfig"}), "NetworkingConfig.")
    endpoints = _object(networking.get("EndpointsConfig"), "NetworkingConfig.EndpointsConfig")
    kept: dict[str, Any] = {}
    for name, raw in endpoints.items():
        field = f"NetworkingConfig.EndpointsConfig.{name[:100]}"
        endpoint = _object(raw, field)
        _unreviewed(endpoint, ENDPOINT_FIELDS, f"{field}.")
        if not _empty(endpoint.get("Links")):
            raise _refuse(f"{field}.Links", "own-objects-only", "links to containers are refused")
        if rules.network is NetworkMode.NONE:
            # The Docker CLI names the default network's endpoint for a plain run: with
            # no network, it is dropped; any network named is refused.
            if name not in ("default", "none"):
                raise _refuse(field, "network-none", "the session's containers have no network")
            continue
        if name not in {"bridge", "default", *rules.own_networks()}:
            raise _refuse(field, "own-networks-only", "not a network this session created")
        kept[name] = endpoint
    return {"EndpointsConfig": kept} if kept else {}


def check_exec(body: object) -> dict[str, Any]:
    """An exec create's body: never privileged, no field without a rule."""
    config = dict(_object(body, "body"))
    _unreviewed(config, FREE_EXEC | {"Privileged"}, "")
    if config.get("Privileged") not in (None, False):
        raise _refuse("Privileged", "no-privileged", "privileged execs are refused")
    return config


def check_exec_start(body: object) -> dict[str, Any]:
    """An exec start's body (detach, tty, console size)."""
    config = dict(_object(body, "body"))
    _unreviewed(config, frozenset({"Detach", "Tty", "ConsoleSize"}), "")
    return config


def check_network(body: object, rules: CreateRules) -> dict[str, Any]:
    """A network create's body: a plain bridge of the session's, labelled."""
    if rules.network is NetworkMode.NONE:
        raise _refuse(
            "body",
            "network-none",
            "the session's containers have no network (--containers-network none)",
        )
    config = dict(_object(body, "body"))
    if not _empty(config.get("Options")):  # a bridge's name could be the host's own
        raise _refuse("Options", "network-driver", "driver options are refused")
    _unreviewed(
        config,
        frozenset(
            {
                "Name",
                "Options",
                "CheckDuplicate",
                "Driver",
                "Internal",
                "Attachable",
                "IPAM",
                "EnableIPv6",
                "EnableIPv4",
                "Labels",
            }
        ),
        "",
    )
    name = config.get("Name")
    if not isinstance(name, str) or not _VOLUME_NAME.fullmatch(name):
        raise ContainerRefused("Name", "malformed-request", "a network needs a name", 400)
    if _text(config.get("Driver"), "Driver") not in ("", "bridge"):
        raise _refuse("Driver", "network-driver", "only bridge networks (host, macvlan reach out)")
    ipam = _object(config.get("IPAM"), "IPAM")
    _unreviewed(ipam, frozenset({"Driver", "Config"}), "IPAM.")
    if _text(ipam.get("Driver"), "IPAM.Driver") not in ("", "default"):
        raise _refuse("IPAM.Driver", "network-driver", "only the engine's default IPAM")
    config["Labels"] = _labels(config.get("Labels"), "Labels", rules.session)
    return config


def check_volume(body: object, rules: CreateRules) -> dict[str, Any]:
    """A volume create's body: a local volume of the engine's own storage, labelled (a
    driver option could make it a bind of any host path)."""
    config = dict(_object(body, "body"))
    if not _empty(config.get("DriverOpts")):  # type=none,o=bind,device=/ is a bind of /
        raise _refuse("DriverOpts", "volume-driver", "driver options could bind a host path")
    _unreviewed(config, frozenset({"Name", "Driver", "DriverOpts", "Labels"}), "")
    name = config.get("Name")
    if name not in (None, "") and not (isinstance(name, str) and _VOLUME_NAME.fullmatch(name)):
        raise ContainerRefused("Name", "malformed-request", "not a volume name", 400)
    if _text(config.get("Driver"), "Driver") not in ("", "local"):
        raise _refuse("Driver", "volume-driver", "only the engine's local volumes")
    config["Labels"] = _labels(config.get("Labels"), "Labels", rules.session)
    return config

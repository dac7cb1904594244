"""The container bridge in front of the recorded stand-in (tests/support/docker_replay.py):
every recorded exchange (tests/containers/recorded/) sent through the bridge's socket by a
real HTTP client. A hostile one is refused with 403 naming its field and rule, and the
stand-in shows it never reached the engine; an ordinary one is forwarded and answered as
the real engine answered it.

The cases are the recordings' file names: a new recording is a new case, and one that
neither :data:`HOSTILE` nor :data:`ORDINARY` classifies fails, naming itself.

The recorder stood in for the bridge, so the bodies it sent carry the session's label
(``sandbridge.session=recorded``); a client of the bridge never sends it (a label of
sandbridge's own is refused: its own case below), so each body is sent without it, and
the label the bridge adds is what is asserted on the body that reached the engine.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from sandbridge.containers.binds import BindRules
from sandbridge.containers.create_policy import SESSION_LABEL
from sandbridge.containers.decision_log import LOG_NAME, DecisionLog
from sandbridge.containers.server import ContainerBridge
from sandbridge.containers.settings import ContainerSettings, NetworkMode, normalise_image
from tests.containers.bridge_thread import IMAGE, Reply, connect_to
from tests.support.docker_recorder import ENGINE_PLACEHOLDER
from tests.support.docker_replay import (
    RECORDED,
    Recording,
    ReplayedRequest,
    ReplayEngine,
    load_recording,
)
from tests.support.loop_thread import LoopThread

# The session the recordings were made for: the bridge serves it under this name, so the
# label it adds is the one the recorded answers carry (a volume's, say).
SESSION = "recorded"


@dataclass(frozen=True)
class Refusal:
    """What a hostile recording is refused as: its field and rule (``rule_no_network``:
    the rule under ``--containers-network none`` where it differs)."""

    field: str
    rule: str
    rule_no_network: str = ""

    def rule_for(self, network: NetworkMode) -> str:
        return (
            self.rule_no_network
            if network is NetworkMode.NONE and self.rule_no_network
            else self.rule
        )


_OWN_CONTAINER = ("container_create",)
# Each hostile recording, and what the bridge refuses it as. The other session's
# container is named by its Id while the session holds a container of its own (made
# first), so the refusal is not merely that it holds none.
HOSTILE: dict[str, tuple[Refusal, tuple[str, ...]]] = {
    "create_privileged": (Refusal("HostConfig.Privileged", "no-privileged"), ()),
    "create_bind_root": (Refusal("HostConfig.Binds[0]", "binds-inside-workdir"), ()),
    "create_mount_root": (Refusal("HostConfig.Mounts[0].Source", "binds-inside-workdir"), ()),
    "create_pid_host": (Refusal("HostConfig.PidMode", "no-host-namespaces"), ()),
    # The engine's socket never lies where the sandbox sees (the bridge's start refuses
    # that): its bind is outside the workdir. (Inside it: no-engine-socket, test_server.py.)
    "create_bind_engine_socket": (Refusal("HostConfig.Binds[0]", "binds-inside-workdir"), ()),
    "create_network_host": (
        Refusal("HostConfig.NetworkMode", "no-host-namespaces", "network-none"),
        (),
    ),
    "create_devices": (Refusal("HostConfig.Devices", "no-devices"), ()),
    "create_cap_add": (Refusal("HostConfig.CapAdd", "no-capabilities"), ()),
    "create_image_not_listed": (Refusal("Image", "image-not-listed"), ()),
    "other_session_create": (Refusal(f"Labels.{SESSION_LABEL}", "session-label"), ()),
    "other_session_inspect": (Refusal("path.container", "own-objects-only"), _OWN_CONTAINER),
    "other_session_start": (Refusal("path.container", "own-objects-only"), _OWN_CONTAINER),
    "other_session_delete": (Refusal("path.container", "own-objects-only"), _OWN_CONTAINER),
}
# Each ordinary recording, and the recordings sent before it (what makes the object it
# names the session's own).
ORDINARY: dict[str, tuple[str, ...]] = {
    "ping": (),
    "version": (),
    "images_list": (),
    "container_create": (),
    "container_start": _OWN_CONTAINER,
    "container_wait": _OWN_CONTAINER,
    "container_logs": _OWN_CONTAINER,
    "container_inspect": _OWN_CONTAINER,
    "container_list_label": _OWN_CONTAINER,
    "container_delete": _OWN_CONTAINER,
    "network_create": (),
    "network_delete": ("network_create",),
    "volume_create": (),
    "volume_delete": ("volume_create",),
}
ALL_RECORDINGS = sorted(path.stem for path in RECORDED.glob("*.json"))


class ReplayBridge(LoopThread):
    """The bridge for session :data:`SESSION` at ``tmp/run/containers.sock`` before the
    recorded stand-in, on an event loop in a thread of its own (as a session serves it);
    the workdir ``tmp/work`` is what the sandbox sees."""

    def __init__(self, tmp: Path, engine: ReplayEngine, network: NetworkMode) -> None:
        run = tmp / "run"
        run.mkdir()
        self.path = run / "containers.sock"
        self.engine = engine
        self.workdir = (tmp / "work").resolve()
        self.workdir.mkdir()
        (tmp / "cover").mkdir()
        self.log_dir = tmp / "state"
        self.log_dir.mkdir()
        settings = ContainerSettings(engine.socket, frozenset({normalise_image(IMAGE)}), network)
        binds = BindRules(
            self.workdir, tmp / "cover", (engine.socket, run), visible=(self.workdir,)
        )
        self.bridge = ContainerBridge(
            self.path, settings, SESSION, binds, DecisionLog(self.log_dir)
        )
        super().__init__()

    async def start_servers(self) -> None:
        await self.bridge.start()
        self.engine.requests.clear()  # the start's own ping: each case sees its requests alone

    async def close_servers(self) -> None:
        await self.bridge.close()

    def send(self, recording: Recording) -> Reply:
        """The recording's request as a client of the bridge sends it (see the module's
        docstring for its body)."""
        return self.request(recording, _client_body(recording, self.engine))

    def request(self, recording: Recording, body: bytes | None) -> Reply:
        """The recording's method and target with ``body``, on a connection of its own."""
        connection = connect_to(self.path)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            connection.request(
                recording.request["method"], recording.request["target"], body, headers
            )
            answer = connection.getresponse()
            return Reply(answer.status, dict(answer.getheaders()), answer.read())
        finally:
            connection.close()


def _client_body(recording: Recording, engine: ReplayEngine) -> bytes | None:
    """The body a client sends for ``recording``: without the label the recorder set in
    the bridge's place, the engine's directory where the recorder wrote its placeholder."""
    body = recording.request_json()
    if body is None:
        return recording.request_body or None
    labels = body.get("Labels")
    if isinstance(labels, dict) and labels.get(SESSION_LABEL) == SESSION:
        body = {**body, "Labels": {k: v for k, v in labels.items() if k != SESSION_LABEL}}
    text = json.dumps(body).replace(f"{ENGINE_PLACEHOLDER}/engine.sock", str(engine.socket))
    return text.encode()


@pytest.fixture(params=[NetworkMode.ENGINE, NetworkMode.NONE], ids=lambda m: f"network-{m.value}")
def network(request: pytest.FixtureRequest) -> NetworkMode:
    """Both of the owner's network modes: a refusal holds in each."""
    mode: NetworkMode = request.param
    return mode


def _serve(tmp_path: Path, engine: ReplayEngine, network: NetworkMode) -> Iterator[ReplayBridge]:
    served = ReplayBridge(tmp_path, engine, network)
    yield served
    served.stop()
    assert not served.errors


@pytest.fixture
def bridge(tmp_path: Path, replay_engine: ReplayEngine) -> Iterator[ReplayBridge]:
    """The bridge with the engine's network (the recordings make a network of the
    session's, which ``none`` refuses)."""
    yield from _serve(tmp_path, replay_engine, NetworkMode.ENGINE)


@pytest.fixture
def bridge_in(
    tmp_path: Path, replay_engine: ReplayEngine, network: NetworkMode
) -> Iterator[ReplayBridge]:
    """The bridge in each network mode."""
    yield from _serve(tmp_path, replay_engine, network)


def _send_first(bridge: ReplayBridge, names: tuple[str, ...]) -> int:
    """Send the recordings a case needs first, each answered as recorded; how many
    requests reached the engine by then."""
    for name in names:
        recording = load_recording(name)
        assert bridge.send(recording).status == recording.response["status"], name
    return len(bridge.engine.requests)


# --- every recording is classified ---------------------------------------------------------


@pytest.mark.parametrize("name", ALL_RECORDINGS)
def test_every_recording_is_classified_as_hostile_or_ordinary_as_the_file_says(name: str) -> None:
    recording = load_recording(name)
    assert name in HOSTILE or name in ORDINARY, (
        f"recording {name!r} is neither in HOSTILE nor in ORDINARY of {Path(__file__).name}: "
        "classify it (its refusal's field and rule, or what it needs sent first)"
    )
    assert recording.hostile is (name in HOSTILE), (
        f"{name}: the file says hostile={recording.hostile}"
    )


def test_every_classified_name_is_a_recording() -> None:
    assert sorted({*HOSTILE, *ORDINARY}) == ALL_RECORDINGS


# --- the hostile ones ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_recording_is_refused_naming_its_field_and_rule_and_never_reaches_the_engine(
    bridge_in: ReplayBridge, network: NetworkMode, name: str
) -> None:
    refusal, first = HOSTILE[name]
    before = _send_first(bridge_in, first)
    reply = bridge_in.send(load_recording(name))
    assert reply.status == 403, reply.body
    assert reply.headers["Content-Type"] == "application/json"
    message = reply.message
    assert message.startswith("sandbridge: "), message
    assert f"(field {refusal.field}, rule {refusal.rule_for(network)})" in message, message
    assert bridge_in.engine.requests[before:] == []
    logged = json.loads((bridge_in.log_dir / LOG_NAME).read_text().splitlines()[-1])
    assert (logged["decision"], logged["field"], logged["rule"]) == (
        "refused",
        refusal.field,
        refusal.rule_for(network),
    )


def test_a_body_with_sandbridges_own_label_is_refused_even_naming_the_session(
    bridge: ReplayBridge,
) -> None:
    recording = load_recording("container_create")
    reply = bridge.request(recording, recording.request_body)
    assert reply.status == 403
    assert f"(field Labels.{SESSION_LABEL}, rule session-label)" in reply.message
    assert bridge.engine.requests == []


def test_the_bind_of_the_engine_socket_names_the_bridges_own_engine(bridge: ReplayBridge) -> None:
    reply = bridge.send(load_recording("create_bind_engine_socket"))
    assert reply.status == 403
    assert reply.message.startswith(f"sandbridge: {bridge.engine.socket} is outside the workdir")
    assert bridge.engine.requests == []


# --- the ordinary ones ---------------------------------------------------------------------


def _reached(bridge: ReplayBridge, before: int, recording: Recording) -> ReplayedRequest:
    """The one request the case sent, as it reached the engine."""
    arrived = bridge.engine.requests[before:]
    assert [r.route for r in arrived] == [recording.route]
    return arrived[0]


def _response_bytes(response: dict[str, Any]) -> bytes:
    """A recorded answer's body that is not JSON (the logs' stream, the ping's ``OK``)."""
    return base64.b64decode(response["base64"]) if "base64" in response else b""


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_an_ordinary_recording_is_forwarded_and_answered_as_recorded(
    bridge: ReplayBridge, name: str
) -> None:
    recording = load_recording(name)
    before = _send_first(bridge, ORDINARY[name])
    reply = bridge.send(recording)
    assert reply.status == recording.response["status"], reply.body
    response = recording.response
    if "json" in response:
        assert reply.json() == response["json"]
    else:
        assert reply.body == _response_bytes(response)
    sent = _reached(bridge, before, recording)
    assert sent.method == recording.request["method"]


@pytest.mark.parametrize("name", ["container_create", "network_create", "volume_create"])
def test_a_create_reaches_the_engine_with_the_session_label_the_bridge_adds(
    bridge: ReplayBridge, name: str
) -> None:
    recording = load_recording(name)
    assert SESSION_LABEL not in json.loads(_client_body(recording, bridge.engine) or b"{}").get(
        "Labels", {}
    )
    assert bridge.send(recording).status == recording.response["status"]
    sent = _reached(bridge, 0, recording).json()
    assert sent["Labels"] == recording.request_json()["Labels"] == {SESSION_LABEL: SESSION}
    for key, value in recording.request_json().items():
        if key != "HostConfig":
            assert sent[key] == value, key


@pytest.mark.parametrize(
    ("name", "added"),
    [
        ("container_list_label", {"label": [f"{SESSION_LABEL}={SESSION}"]}),
        ("images_list", {"reference": [normalise_image(IMAGE)]}),
    ],
)
def test_a_recorded_list_reaches_the_engine_narrowed_to_the_sessions_own(
    bridge: ReplayBridge, name: str, added: dict[str, list[str]]
) -> None:
    recording = load_recording(name)
    assert bridge.send(recording).status == 200
    query = parse_qs(urlsplit(_reached(bridge, 0, recording).target).query)
    filters = json.loads(query["filters"][0])
    for key, values in added.items():
        assert set(values) <= set(filters[key]), filters


def _respelled(value: Any, spell: Callable[[str], str]) -> Any:
    """``value`` with every object key respelled by ``spell``, at every depth."""
    if isinstance(value, dict):
        return {spell(key): _respelled(item, spell) for key, item in value.items()}
    if isinstance(value, list):
        return [_respelled(item, spell) for item in value]
    return value


# An engine's Go decoder matches a body's keys to its fields without regard to case, and
# with Unicode's simple folds (U+017F, the long s, is "s"; U+212A, the Kelvin sign, is
# "k"): the same hostile body in those spellings.
RESPELLINGS: dict[str, Callable[[str], str]] = {
    "lower-case": str.lower,
    "unicode-folds": lambda key: key.replace("s", "\u017f").replace("k", "\u212a"),
}


@pytest.mark.parametrize("spelling", sorted(RESPELLINGS))
@pytest.mark.parametrize("name", sorted(n for n in HOSTILE if load_recording(n).request_json()))
def test_a_hostile_body_respelled_as_the_engine_would_still_read_it_is_refused(
    bridge: ReplayBridge, name: str, spelling: str
) -> None:
    recording = load_recording(name)
    body = json.loads(_client_body(recording, bridge.engine) or b"")
    respelled = _respelled(body, RESPELLINGS[spelling])
    assert respelled != body
    reply = bridge.request(recording, json.dumps(respelled).encode())
    assert reply.status == 403, reply.body
    assert "(field " in reply.message
    assert bridge.engine.requests == []

"""The sandbox's ``DOCKER_HOST``: ``containers.sock`` in the runtime dir, served here.

Each request is read with the project's HTTP reader (llhttp, protocol/http/parser.py),
matched to its row of the endpoint table (endpoints.py: deny by default), its body checked
field by field (create_policy.py), and sent to the owner's engine with a head the bridge
writes (engine_link.py); objects the session did not create are refused by name
(owned.py), lists are narrowed to its own (narrowing.py). A refusal is the engine API's
own error shape, ``{"message": "sandbridge: ... (field F, rule R)"}``, with 403 (400 for
a malformed request, 413 past a size, 429 past a rate), and the request never reaches the
engine. Every decision is logged and counted (decision_log.py). When the session ends,
its containers, networks and volumes are removed, unless the owner keeps them.

A hostile client costs little: at most :data:`MAX_CONTAINER_CONNECTIONS` connections are
open, accepted at a paced rate; a head must arrive within :data:`HEAD_TIMEOUT`, a body
of at most :data:`MAX_BODY_BYTES` within :data:`BODY_TIMEOUT`; at most
:data:`MAX_REQUESTS` requests a minute reach the engine.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path

from sandbridge import log
from sandbridge.aio.bridge_service import BridgeLimits, BridgeService
from sandbridge.aio.tasks import first_done, running
from sandbridge.containers import create_policy, engine_link, narrowing
from sandbridge.containers.binds import BindRules, sources, unchanged
from sandbridge.containers.create_policy import SESSION_LABEL
from sandbridge.containers.decision_log import DecisionLog
from sandbridge.containers.endpoints import Answer, Body, Owned, Route, route
from sandbridge.containers.owned import OwnedObjects
from sandbridge.containers.request_reader import ClientRequest, RequestStream
from sandbridge.containers.settings import ContainerSettings
from sandbridge.exceptions import ContainerRefused, HttpError, PolicyError
from sandbridge.protocol.jsonline import decode_json
from sandbridge.protocol.limits import WindowLimit

# A test suite's containers each hold an attach, a wait and a logs stream at once, beside
# the client's own calls: 32 is a few such containers; a flood holds no more.
MAX_CONTAINER_CONNECTIONS = 32
# New connections accepted per second; past it they wait in the kernel's backlog.
CONTAINER_CONNECTION_RATE = 50
# Requests sent to the engine per REQUEST_WINDOW seconds: a `docker run` is about six, a
# test suite's hundred containers a few hundred; a loop is refused (429) past it.
MAX_REQUESTS = 1200
REQUEST_WINDOW = 60.0
# A create's body: a container's config with a long environment is a few KiB; 1 MiB is
# far past any and bounds what one request holds.
MAX_BODY_BYTES = 1024 * 1024
# A client has this long to send a request's head (from its first byte, or from the
# connection's start), and its body.
HEAD_TIMEOUT = 30.0
BODY_TIMEOUT = 30.0
# A created object's answer ({"Id": ..., "Warnings": [...]}) and the engine's info.
MAX_ANSWER_BYTES = 1024 * 1024
# How long the engine has to remove the session's objects when it ends (and to answer
# one request of the bridge's own): a few containers killed and removed take a second.
CLEANUP_TIMEOUT = 30.0
# Fields of a created object's answer that hold its id, by kind.
_ID_FIELD = {Owned.VOLUME: "Name"}
# The requests on which the engine mounts a container's binds (so checks them again).
_MOUNTS_BINDS = frozenset({"container-start", "container-restart"})
_CREATES = {
    Body.CREATE_CONTAINER: Owned.CONTAINER,
    Body.CREATE_EXEC: Owned.EXEC,
    Body.CREATE_NETWORK: Owned.NETWORK,
    Body.CREATE_VOLUME: Owned.VOLUME,
}


@dataclass(frozen=True, slots=True)
class Client:
    """The sandbox's connection: its two streams, and its requests read from them."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    requests: RequestStream


@dataclass(frozen=True, slots=True)
class Forward:
    """A checked request, ready for the engine."""

    route: Route
    method: str
    target: str
    body: bytes
    # The object the path names, as the session's own id (``""``: none).
    ref: str
    # The name the client gave a created object (``?name=`` or the body's ``Name``).
    name: str


def refusal(status: int, message: str) -> bytes:
    """The engine API's error answer, ``{"message": ...}``, closing the connection."""
    body = json.dumps({"message": f"sandbridge: {message}"}).encode()
    return (
        engine_link.answer_head(
            status,
            [(b"Content-Type", b"application/json")],
            b"Content-Length: %d\r\nConnection: close" % len(body),
        )
        + body
    )


class ContainerBridge:
    """Serves ``path`` for one session (``session``: the label its objects carry) as
    ``settings`` say, checking binds against ``binds``."""

    def __init__(  # noqa: PLR0913  (one session's parts)
        self,
        path: Path,
        settings: ContainerSettings,
        session: str,
        binds: BindRules,
        decisions: DecisionLog,
        max_requests: int = MAX_REQUESTS,
    ) -> None:
        self.path = path
        self.settings = settings
        self.session = session
        self.log = decisions
        self.binds = binds
        self.owned = OwnedObjects()
        # Each of the session's containers' bind sources, checked again at each start.
        self._sources: dict[str, tuple[str, ...]] = {}
        self.rules = create_policy.CreateRules(
            session,
            settings.images,
            settings.network,
            binds,
            lambda: self.owned.names(Owned.NETWORK),
            lambda: self.owned.names(Owned.VOLUME),
        )
        self._requests = WindowLimit(max_requests, REQUEST_WINDOW)
        self._service = BridgeService(
            path,
            self._serve,
            BridgeLimits(CONTAINER_CONNECTION_RATE, MAX_CONTAINER_CONNECTIONS),
            lambda writer: writer.write(refusal(429, "too many engine connections at once")),
            "containers",
        )

    async def start(self) -> None:
        """Check that the owner's engine answers (:class:`PolicyError` if not), then
        listen on :attr:`path` (0600)."""
        engine = self.settings.engine
        for place in self.binds.visible:
            if Path(os.path.realpath(engine)).is_relative_to(os.path.realpath(place)):
                raise PolicyError(
                    f"{self.settings.source}: the engine's socket {engine} lies in {place}, "
                    "which the sandbox sees: it would reach the engine around the bridge; "
                    "run the engine's socket elsewhere, or the sandbox in another workdir"
                )
        try:
            status, _ = await self.call("GET", "/_ping")
        except (OSError, HttpError, TimeoutError) as exc:
            raise PolicyError(
                f"--containers: the engine at {engine} does not answer ({exc or 'timed out'}); "
                "start its API service or name another with --containers-engine"
            ) from None
        if status != 200:
            raise PolicyError(f"--containers: the engine at {engine} answers _ping with {status}")
        self._service.start()

    async def close(self) -> None:
        """Stop accepting, end every open connection, and remove the session's objects
        (unless the owner keeps them)."""
        await self._service.close()
        if not self.settings.keep:
            await self.remove_own()

    async def remove_own(self) -> None:
        """Remove the session's containers (killed first: an engine's forced removal may
        wait out a stop timeout; with their anonymous volumes), then its networks and
        volumes, all within :data:`CLEANUP_TIMEOUT`; a failure is logged, the rest go on."""
        steps = [
            (Owned.CONTAINER, "POST", "/containers/{}/kill?signal=KILL"),
            (Owned.CONTAINER, "DELETE", "/containers/{}?force=1&v=1"),
            (Owned.NETWORK, "DELETE", "/networks/{}"),
            (Owned.VOLUME, "DELETE", "/volumes/{}?force=1"),
        ]
        try:
            async with asyncio.timeout(CLEANUP_TIMEOUT):
                for kind, method, template in steps:
                    for object_id in self.owned.ids(kind):
                        await self._remove(kind, method, template.format(object_id), object_id)
        except TimeoutError:
            left = [
                i[:12] for kind in Owned if kind is not Owned.IMAGE for i in self.owned.ids(kind)
            ]
            log.info("containers.not_removed", ids=" ".join(left), error="timed out")

    async def _remove(self, kind: Owned, method: str, target: str, object_id: str) -> None:
        try:
            status, _ = await self.call(method, target)
        except (OSError, HttpError) as exc:
            status, why = 0, str(exc)
        else:
            why = ""
        if method == "DELETE":
            log.info("containers.removed", kind=kind.value, id=object_id[:12], status=status,
                     error=why)  # fmt: skip
            self.owned.forget(kind, object_id)

    async def call(self, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
        """One request of the bridge's own to the engine; its status and body."""
        async with asyncio.timeout(CLEANUP_TIMEOUT):
            reader, writer = await engine_link.open_request(
                self.settings.engine, method, target, body
            )
            try:
                answer = engine_link.AnswerStream(reader, method)
                head, _, _ = await answer.head()
                return head.status, await answer.whole(head, MAX_ANSWER_BYTES)
            finally:
                await engine_link.close(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests = RequestStream(reader, HEAD_TIMEOUT, BODY_TIMEOUT, MAX_BODY_BYTES)
        client = Client(reader, writer, requests)
        while True:
            try:
                request = await requests.next()
            except ContainerRefused as exc:
                self.log.record(allowed=False, endpoint="", method="", field=exc.field,
                                rule=exc.rule, reason=exc.detail)  # fmt: skip
                writer.write(refusal(exc.status, str(exc)))
                return
            if request is None:
                return
            if not await self._answer(request, client) or request.upgrade:
                return

    async def _answer(self, request: ClientRequest, client: Client) -> bool:
        """Answer one request; whether the connection may carry another."""
        method, writer = request.method, client.writer
        try:
            forward = self._check(request)
        except ContainerRefused as exc:
            self.log.record(allowed=False, endpoint=_endpoint(method, request.target),
                            method=method, field=exc.field, rule=exc.rule,
                            reason=exc.detail)  # fmt: skip
            writer.write(refusal(exc.status, str(exc)))
            return False
        if not self._requests.admit(asyncio.get_running_loop().time()):
            why = f"over {self._requests.limit} engine requests in {REQUEST_WINDOW:g} s"
            self.log.record(allowed=False, endpoint=forward.route.endpoint.rule, method=method,
                            field="connection", rule="request-rate", reason=why)  # fmt: skip
            writer.write(refusal(429, f"{why} (field connection, rule request-rate)"))
            return False
        try:
            return await self._forward(forward, request, client)
        except (OSError, HttpError, TimeoutError) as exc:
            log.debug("containers.engine_failed", error=str(exc) or "timed out")
            if not writer.is_closing():
                writer.write(refusal(502, f"the engine failed: {exc or 'timed out'}"))
            return False

    def _check(self, request: ClientRequest) -> Forward:
        found = route(request.method, request.target)
        endpoint = found.endpoint
        ref = ""
        if endpoint.owned is Owned.IMAGE:
            create_policy.check_image(found.ref, "path.image", self.settings.images)
            ref = found.ref
        elif endpoint.owned is not None:
            ref = self.owned.resolve(endpoint.owned, found.ref)
        if endpoint.rule in _MOUNTS_BINDS:
            unchanged(self._sources.get(ref, ()), "path.container")
        query = list(found.query)
        if endpoint.labelled_list:
            query = narrowing.session_list(query, self.session)
        elif endpoint.rule == "images-list":
            query = narrowing.listed_images(query, self.settings.images)
        elif endpoint.rule == "image-pull":
            params = dict(query)
            image = params.get("fromImage", "")
            tag = params.get("tag", "")
            reference = f"{image}:{tag}" if tag and "@" not in image else image
            create_policy.check_image(reference, "query.fromImage", self.settings.images)
        body, name = self._checked_body(endpoint.body, request.body)
        name = name or dict(found.query).get("name", "")
        target = found.target(ref if endpoint.owned not in (None, Owned.IMAGE) else None, query)
        return Forward(found, request.method, target, body, ref, name)

    def _checked_body(self, kind: Body, raw: bytes) -> tuple[bytes, str]:
        """The body to send, checked, and the name it gives a created object."""
        if kind is Body.NONE:
            if raw.strip() not in (b"", b"{}", b"null"):
                raise ContainerRefused("body", "no-body", "this endpoint takes no body", 400)
            return b"", ""
        try:
            parsed = decode_json(raw or b"{}", max_bytes=MAX_BODY_BYTES)
        except ValueError as exc:
            raise ContainerRefused("body", "malformed-request", str(exc), 400) from None
        rules = self.rules
        checked = {
            Body.CREATE_CONTAINER: lambda: create_policy.check_container(parsed, rules),
            Body.CREATE_EXEC: lambda: create_policy.check_exec(parsed),
            Body.START_EXEC: lambda: create_policy.check_exec_start(parsed),
            Body.CREATE_NETWORK: lambda: create_policy.check_network(parsed, rules),
            Body.CREATE_VOLUME: lambda: create_policy.check_volume(parsed, rules),
        }[kind]()
        name = checked.get("Name") if kind in (Body.CREATE_NETWORK, Body.CREATE_VOLUME) else ""
        return json.dumps(checked).encode(), name if isinstance(name, str) else ""

    async def _forward(self, forward: Forward, request: ClientRequest, client: Client) -> bool:
        """Send a checked request to the engine and carry its answer back; whether the
        connection may carry another."""
        endpoint = forward.route.endpoint
        hijack = endpoint.answer is Answer.HIJACK
        extra = tuple(request.registry_auth) if endpoint.rule == "image-pull" else ()
        engine_reader, engine_writer = await engine_link.open_request(
            self.settings.engine, forward.method, forward.target, forward.body,
            hijack=hijack and request.upgrade, extra=extra,
        )  # fmt: skip
        try:
            with self._service.track(engine_writer):
                return await self._carry(forward, request, client, (engine_reader, engine_writer))
        finally:
            await engine_link.close(engine_writer)

    async def _carry(
        self,
        forward: Forward,
        request: ClientRequest,
        client: Client,
        engine: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> bool:
        """Carry the engine's answer back; whether the connection may carry another."""
        endpoint = forward.route.endpoint
        writer = client.writer
        answer = engine_link.AnswerStream(engine[0], forward.method)
        head, rest, handed_over = await answer.head(endpoint.answer is Answer.HIJACK)
        if handed_over:
            self._logged(forward, head.status)
            upgrade = b"Connection: Upgrade\r\nUpgrade: tcp" if head.status == 101 else b""
            writer.write(engine_link.answer_head(head.status, head.headers, upgrade))
            await writer.drain()
            await engine_link.splice((client.reader, writer), engine, request.rest, rest)
            return False
        if endpoint.answer in (Answer.RECORD, Answer.INFO):
            body = await answer.whole(head, MAX_ANSWER_BYTES)
            created = False
            if endpoint.answer is Answer.INFO and head.status == 200:
                body = narrowing.engine_info(body)
            elif 200 <= head.status < 300:
                try:
                    created = self._record(endpoint.body, body, forward)
                except ContainerRefused as exc:
                    self.log.record(allowed=False, endpoint=endpoint.rule, method=forward.method,
                                    field=exc.field, rule=exc.rule, reason=exc.detail)  # fmt: skip
                    writer.write(refusal(exc.status, str(exc)))
                    return False
            self._logged(forward, head.status, created)
            framing = b"Content-Length: %d" % len(body)
            writer.write(engine_link.answer_head(head.status, head.headers, framing) + body)
            await writer.drain()
            return request.keep_alive
        self._logged(forward, head.status)
        async with running(answer.relay(head, writer), client.requests.closed()) as tasks:
            relayed = tasks[0]
            if relayed not in await first_done(*tasks):
                return False  # the client left (a followed log, a wait): let it go
            relayed.result()
        if endpoint.answer is Answer.FORGET and 200 <= head.status < 300:
            assert endpoint.owned is not None
            self.owned.forget(endpoint.owned, forward.ref)
            self._sources.pop(forward.ref, None)
        return request.keep_alive

    def _record(self, kind: Body, body: bytes, forward: Forward) -> bool:
        """Keep a created object's id as the session's own (a container's with the bind
        sources it was sent with); whether it was a container."""
        name = forward.name
        owned = _CREATES[kind]
        try:
            answer = decode_json(body, max_bytes=MAX_ANSWER_BYTES)
        except ValueError:
            return False
        object_id = answer.get(_ID_FIELD.get(owned, "Id")) if isinstance(answer, dict) else None
        if not isinstance(object_id, str) or not object_id:
            return False
        if owned is Owned.VOLUME and object_id not in self.owned.names(Owned.VOLUME):
            # A volume create of a name that exists answers with that volume (Docker's is
            # idempotent): another session's, the owner's own. Only the session's label
            # says the engine made it now, for this session.
            labels = answer.get("Labels") if isinstance(answer, dict) else None
            if not isinstance(labels, dict) or labels.get(SESSION_LABEL) != self.session:
                raise ContainerRefused(
                    "Name", "own-volumes-only",
                    f"a volume named {object_id[:100]!r} exists already and is not this session's",
                )  # fmt: skip
        self.owned.add(owned, object_id, name)
        if owned is Owned.CONTAINER:
            sent = json.loads(forward.body)
            self._sources[object_id] = sources(sent.get("HostConfig"))
        return owned is Owned.CONTAINER

    def _logged(self, forward: Forward, status: int, created: bool = False) -> None:
        self.log.record(
            allowed=True, endpoint=forward.route.endpoint.rule, method=forward.method,
            name=forward.ref[:12] or forward.name, reason=f"engine answered {status}",
            created=created,
        )  # fmt: skip


def _endpoint(method: str, target: str) -> str:
    """The row a refused request matched, for its log line (``""``: none)."""
    try:
        return route(method, target).endpoint.rule
    except ContainerRefused:
        return ""

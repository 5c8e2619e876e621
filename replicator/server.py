"""The replicator's HTTP application: the replication protocol other members speak to this
one, and the status, topology, mirror list, redirect and metrics people and Prometheus read.

::

    signed (replicator/auth.py), from members of the group only:
    POST /replication/{group}/membership   a membership message (replicator/messages.py)
    POST /replication/{group}/notify       a change list: "I have these changes"
    GET  /replication/{group}/changes?after=SEQ&limit=N   this member's change list
    POST /replication/{group}/entries      {"oids": [...]} -> a transfer of those objects
    POST /replication/{group}/tree         Merkle node ids -> their hashes
    GET  /replication/{group}/buckets?b=N,...   (oid, version) of those buckets
    POST /replication/{group}/costs        a member's link measurements
    POST /replication/{group}/topology     a topology a coordinator computed
    GET  /replication/probe[?size=N]       N bytes, for measuring a link

    public:
    GET  /                   status page: members, links and each group's topology drawn
    GET  /api/status         the same as JSON
    GET  /topology/{group}   the agreed topology (JSON), /topology/{group}.svg its picture
    GET  /mirrors/{group}    the members' mirrors with their health, nearest first
    GET  /redirect/{group}[?q=...]   302 to a healthy mirror near this one (the query kept)
    GET  /metrics            Prometheus text format

Every answer to a signed request is signed; a request that is not correctly signed by a
member (or whose signed sender is not the sender it names), or that was received before (a
replay), is refused with 401; one that comes when the ids of too many requests within the
time window are remembered already (``replicator.replay_memory``) with 503 and Retry-After.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from html import escape
from typing import TYPE_CHECKING, Any, Final, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from harvest_common.errors import ReplicatorError
from harvest_common.replication.merkle import decode_ask
from harvest_common.replication.wire import ChangeList
from replicator import auth, messages, svg
from replicator.client import TRANSFER_TYPE, BrokerClient
from replicator.config import Config
from replicator.errors import AuthError, PeerError, ReplayMemoryFull
from replicator.messages import Agreed, CostRow
from replicator.metrics import REQUEST_KINDS, ReplicatorMetrics

if TYPE_CHECKING:
    from replicator.group import Group

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# What the signature check hands the handlers: the signed sender, and the body it read.
MEMBER: Final = web.RequestKey("member", str)
BODY: Final = web.RequestKey("body", bytes)

MAX_PROBE: Final = 16 * 1024 * 1024
MAX_REQUEST: Final = 32 * 1024 * 1024
# Mirrors within this factor of the nearest one's cost are equally near (chosen at random,
# as Harvest's Query.cgi chose among all).
NEAR: Final = 1.5
# Probe bodies repeat one random block (incompressible on the way), not 16 MB made at start.
_PROBE_BLOCK: Final = os.urandom(64 * 1024)


class Host(Protocol):
    """The running member, as its HTTP application sees it (``Node`` is one). Read at each
    request: its groups and the address it listens at are filled in after the application
    is made."""

    @property
    def config(self) -> Config: ...

    @property
    def secret(self) -> bytes: ...

    @property
    def metrics(self) -> ReplicatorMetrics: ...

    @property
    def broker(self) -> BrokerClient: ...

    @property
    def groups(self) -> Mapping[str, Group]: ...

    @property
    def address(self) -> tuple[str, int]: ...

    @property
    def started(self) -> float: ...


class BadRequest(web.HTTPBadRequest):
    def __init__(self, reason: str) -> None:
        super().__init__(text=json.dumps({"error": reason}), content_type="application/json")


def _empty() -> web.Response:
    return web.Response(body=b"", content_type="application/json")


class Service:
    def __init__(self, node: Host) -> None:
        self._node = node

    def _group(self, request: web.Request) -> Group:
        name = request.match_info["group"]
        group = self._node.groups.get(name)
        if group is None:
            raise web.HTTPNotFound(
                text=json.dumps({"error": f"no group {name!r} here"}),
                content_type="application/json",
            )
        return group

    # -- the protocol -----------------------------------------------------------------------

    async def membership(self, request: web.Request) -> web.Response:
        group = self._group(request)
        message = messages.from_json(_json(request))
        if message.sender != request[MEMBER]:
            raise BadRequest(f"signed by {request[MEMBER]!r}, sent as {message.sender!r}")
        group.receive(message)
        return _empty()

    async def notify(self, request: web.Request) -> web.Response:
        group = self._group(request)
        group.notified(request[MEMBER], ChangeList.from_json(_json(request)))
        return _empty()

    async def changes(self, request: web.Request) -> web.Response:
        group = self._group(request)
        after = _integer(request.query.get("after", "0"), "after")
        limit = _integer(request.query.get("limit", "1000"), "limit")
        listed = await self._node.broker.changes(group.name, after, limit)
        return self._sent(group, "changes", web.json_response(listed.to_json()))

    async def entries(self, request: web.Request) -> web.Response:
        group = self._group(request)
        body = _json(request)
        oids = body.get("oids") if isinstance(body, dict) else None
        if not isinstance(oids, list) or not all(isinstance(o, str) for o in oids):
            raise BadRequest("oids: a list of strings")
        packed = await self._node.broker.entries(group.name, oids)
        return self._sent(group, "entries", web.Response(body=packed, content_type=TRANSFER_TYPE))

    async def tree(self, request: web.Request) -> web.Response:
        group = self._group(request)
        tree = await group.local_tree()
        asked = decode_ask(request[BODY], tree.bits)
        answer = web.Response(body=tree.to_wire(asked), content_type="application/octet-stream")
        return self._sent(group, "tree", answer)

    async def buckets(self, request: web.Request) -> web.Response:
        group = self._group(request)
        try:
            asked = [int(b) for b in request.query.get("b", "").split(",") if b]
        except ValueError:
            raise BadRequest("b: comma-separated bucket numbers") from None
        found = await self._node.broker.buckets(group.name, asked)
        rows = [[oid, version.to_json()] for oid, version in found]
        return self._sent(group, "buckets", web.json_response({"entries": rows}))

    async def costs(self, request: web.Request) -> web.Response:
        group = self._group(request)
        row = CostRow.from_json(_json(request))
        if row.member != request[MEMBER]:
            raise BadRequest(f"signed by {request[MEMBER]!r}, measured by {row.member!r}")
        group.offer_row(row)
        return _empty()

    async def topology(self, request: web.Request) -> web.Response:
        group = self._group(request)
        adopted = group.offer_topology(Agreed.from_json(_json(request)))
        held = group.coordination.agreed
        return web.json_response({"adopted": adopted, "epoch": held.epoch if held else 0})

    async def probe(self, request: web.Request) -> web.Response:
        size = _integer(request.query.get("size", "0"), "size")
        if size > MAX_PROBE:
            raise BadRequest(f"size: at most {MAX_PROBE}")
        body = (_PROBE_BLOCK * -(-size // len(_PROBE_BLOCK)))[:size]
        return web.Response(body=body, content_type="application/octet-stream")

    def _sent(self, group: Group, kind: str, response: web.Response) -> web.Response:
        body = response.body
        if isinstance(body, bytes):
            self._node.metrics.bytes_sent.labels(group.name, kind).inc(len(body))
        return response

    # -- people and Prometheus --------------------------------------------------------------

    def _status(self) -> dict[str, Any]:
        node = self._node
        return {
            "member": node.config.member,
            "address": f"{node.address[0]}:{node.address[1]}",
            "uptime": time.time() - node.started,
            "groups": [group.status() for group in node.groups.values()],
        }

    async def api_status(self, request: web.Request) -> web.Response:
        return web.json_response(self._status())

    async def status_page(self, request: web.Request) -> web.Response:
        node = self._node
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>Harvest replicator {escape(node.config.member)}</title></head><body>",
            f"<h1>Harvest replicator {escape(node.config.member)}</h1>",
        ]
        for group in node.groups.values():
            status = group.status()
            parts.append(f"<h2>Group {escape(group.name)}</h2><table border='1'>")
            parts.append("<tr><th>member</th><th>state</th><th>link cost</th><th>mirror</th></tr>")
            for m in status["members"]:
                cost = "" if m["cost"] is None else f"{m['cost'] * 1000:.1f} ms"
                url = m["public_url"] or ""
                parts.append(
                    f"<tr><td>{escape(m['id'])}</td><td>{escape(m['state'])}</td>"
                    f"<td>{cost}</td><td><a href='{escape(url)}'>{escape(url)}</a></td></tr>"
                )
            parts.append("</table>")
            picture = self._picture(group)
            parts.append(picture if picture else "<p>No topology agreed yet.</p>")
        parts.append("</body></html>")
        return web.Response(text="\n".join(parts), content_type="text/html")

    def _picture(self, group: Group) -> str | None:
        agreed = group.coordination.agreed
        if agreed is None:
            return None
        states = {m.id: m.state.value for m in group.membership.members()}
        return svg.picture(agreed.topology, states, group.me)

    async def topology_json(self, request: web.Request) -> web.Response:
        agreed = self._group(request).coordination.agreed
        return web.json_response(None if agreed is None else agreed.to_json())

    async def topology_svg(self, request: web.Request) -> web.Response:
        picture = self._picture(self._group(request))
        if picture is None:
            raise web.HTTPNotFound(text="no topology agreed yet")
        return web.Response(text=picture, content_type="image/svg+xml")

    def _mirrors(self, group: Group) -> list[dict[str, Any]]:
        status = group.status()
        usable = set(group.usable())
        found = [{**m, "healthy": m["id"] in usable} for m in status["members"] if m["public_url"]]
        return sorted(
            found,
            key=lambda m: (not m["healthy"], m["cost"] is None, m["cost"] or 0.0, m["id"]),
        )

    async def mirrors(self, request: web.Request) -> web.Response:
        return web.json_response({"mirrors": self._mirrors(self._group(request))})

    async def redirect(self, request: web.Request) -> web.Response:
        healthy = [m for m in self._mirrors(self._group(request)) if m["healthy"]]
        if not healthy:
            raise web.HTTPServiceUnavailable(text="no healthy mirror known")
        costs = [m["cost"] for m in healthy if m["cost"] is not None]
        nearest = min(costs, default=0.0)
        near = [m for m in healthy if m["cost"] is not None and m["cost"] <= nearest * NEAR]
        chosen = random.choice(near or healthy)
        target = chosen["public_url"].rstrip("/") + "/"
        query = request.rel_url.raw_query_string  # as sent: still percent-encoded
        if query:
            target += f"?{query}"
        raise web.HTTPFound(target)

    async def metrics(self, request: web.Request) -> web.Response:
        body = self._node.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _json(request: web.Request) -> Any:
    try:
        return json.loads(request[BODY])
    except (ValueError, RecursionError) as error:  # also too deep, or an integer too long
        raise BadRequest(f"the body is not JSON: {error}") from None


def _integer(text: str, name: str) -> int:
    # ASCII digits only: "²" is a digit to isdigit, not to int.
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise BadRequest(f"{name}: a non-negative integer, not {text!r}")
    return int(text)


def make_app(node: Host) -> web.Application:
    service = Service(node)
    secret = node.secret
    metrics = node.metrics
    seen = auth.SeenRequests(node.config.replicator.replay_memory)

    @web.middleware
    async def signed(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/replication/"):
            return await handler(request)
        body = await request.read()
        try:
            member = auth.check_request(
                secret, request.headers, request.method, request.raw_path, body, time.time(), seen
            )
        except AuthError as error:
            metrics.refused.inc()
            return web.json_response({"error": str(error)}, status=401)
        except ReplayMemoryFull as error:
            metrics.refused.inc()
            retry = {"Retry-After": str(max(1, math.ceil(error.retry)))}
            return web.json_response({"error": str(error)}, status=503, headers=retry)
        request[MEMBER] = member
        request[BODY] = body
        kind = request.path.rsplit("/", 1)[-1]
        if kind in REQUEST_KINDS:  # a bounded label set: never a path from the request
            metrics.request_bytes.labels(kind).inc(len(body) + len(request.raw_path))
        response = await handler(request)
        if isinstance(response, web.Response):
            payload = response.body if isinstance(response.body, bytes) else b""
            signature = auth.sign_answer(secret, request.headers[auth.SIGNATURE], payload)
            response.headers[auth.SIGNATURE] = signature
        return response

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except PeerError as error:
            if error.status == 400:
                # The broker refused what the member asked for (a bucket out of range, a
                # limit over its own): the member's error, not an outage.
                return web.json_response({"error": f"refused: {error}"}, status=400)
            return web.json_response({"error": f"cannot answer now: {error}"}, status=503)
        except ReplicatorError as error:
            return web.json_response({"error": str(error)}, status=400)

    app = web.Application(middlewares=[errors, signed], client_max_size=MAX_REQUEST)
    routes: Mapping[str, Handler] = {
        "POST /replication/{group}/membership": service.membership,
        "POST /replication/{group}/notify": service.notify,
        "GET /replication/{group}/changes": service.changes,
        "POST /replication/{group}/entries": service.entries,
        "POST /replication/{group}/tree": service.tree,
        "GET /replication/{group}/buckets": service.buckets,
        "POST /replication/{group}/costs": service.costs,
        "POST /replication/{group}/topology": service.topology,
        "GET /replication/probe": service.probe,
        "GET /": service.status_page,
        "GET /api/status": service.api_status,
        "GET /topology/{group}.svg": service.topology_svg,
        "GET /topology/{group}": service.topology_json,
        "GET /mirrors/{group}": service.mirrors,
        "GET /redirect/{group}": service.redirect,
        "GET /metrics": service.metrics,
    }
    for route, handler in routes.items():
        method, path = route.split(" ", 1)
        app.router.add_route(method, path, handler)
    return app

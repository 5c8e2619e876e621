"""One replication group at one member: the driver that does the I/O for the pure cores
(membership, links, coordination, Merkle comparison) and moves the collection's changes.

Changes flow like this. The member long-polls its local broker for the collection's changes;
when some come, it announces them (a change list: oids and versions) to its neighbours in the
agreed topology. A neighbour asks its own broker which of those it lacks at that version,
fetches just those objects from the announcer, applies them, and so changes its own registry,
which it then announces in turn: every member gets every change, each object crossing a link
at most once. Each member remembers, per other member, the last change number it pulled
(replicator/state.py), so one that was away pulls exactly what it missed when it hears from
its neighbours again. Anti-entropy repairs whatever that misses: now and then a member
compares its collection's Merkle tree with a neighbour's and pulls the objects of the buckets
that differ, again only those newer there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from harvest_common.errors import MerkleError, ReplicatorError
from harvest_common.replication.merkle import Comparison, MerkleTree, encode_ask
from harvest_common.replication.version import Version
from harvest_common.replication.wire import Change, ChangeList
from harvest_common.tasks import TaskSet
from replicator.client import BrokerClient, PeerClient, parse_bucket_entries
from replicator.config import Config, GroupConfig
from replicator.coordination import Coordination
from replicator.errors import PeerError
from replicator.links import Links
from replicator.membership import Membership, MembershipParams, Send
from replicator.messages import Agreed, CostRow, Message, State
from replicator.metrics import ReplicatorMetrics
from replicator.state import State as SavedState
from replicator.topology import TopologyParams

log = logging.getLogger("replicator")

# Buckets asked for in one request of an anti-entropy round, and (oid, version) pairs asked
# about in one request to the local broker (its limit).
BUCKETS_PER_REQUEST = 1024
WANTED_PER_REQUEST = 10_000
# Objects remembered with the member they came from (those not announced since are forgotten
# oldest first).
CAME_FROM_LIMIT = 100_000
# A member that has heard from nobody asks its seeds again this often.
JOIN_RETRY = 2.0
# Longest wait before retrying a pull from a member that failed.
MAX_BACKOFF = 30.0


@dataclass(slots=True)
class _Behind:
    """What a member announced that this one has not pulled yet."""

    last_seq: int = 0
    since: float | None = None  # monotonic time this member fell behind it


class Group:
    def __init__(
        self,
        config: Config,
        group: GroupConfig,
        *,
        peers: PeerClient,
        broker: BrokerClient,
        links: Links,
        metrics: ReplicatorMetrics,
        tasks: TaskSet,
        saved: SavedState,
        advertised: str,
    ) -> None:
        self.name = group.collection
        self.me = config.member
        self._config = config
        self._group = group
        self._timing = config.timing
        self._peers = peers
        self._broker = broker
        self._links = links
        self._metrics = metrics
        self._tasks = tasks
        self._saved = saved
        self._routes = {member: str(address) for member, address in config.replicator.routes}
        self._public_url = config.replicator.public_url or config.replicator.broker
        timing = config.timing
        self.membership = Membership(
            self.me,
            advertised,
            time.monotonic(),
            MembershipParams(
                probe_interval=timing.probe_interval,
                probe_timeout=timing.probe_timeout,
                suspicion_timeout=timing.suspicion_timeout,
                reconnect_interval=timing.reconnect_interval,
            ),
            seed=random.randrange(2**31),
        )
        settings = config.topology
        self.coordination = Coordination(
            self.me,
            TopologyParams(
                k=settings.k,
                min_degree=settings.min_degree,
                max_degree=settings.max_degree,
                diameter_weight=settings.diameter_weight,
                iterations=settings.iterations,
                seed=settings.seed,
            ),
            settings.change_threshold,
        )
        self.cursors = saved.group(self.name)
        self.local_seq = 0
        self._row_version = time.time_ns()  # above any row this member sent before a restart
        self._pending: dict[str, ChangeList] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._behind: dict[str, _Behind] = {}
        self._reschedule = asyncio.Event()
        self._tree: tuple[int, MerkleTree] | None = None
        # Objects being fetched now, each with what completes when its transfer ends.
        self._inflight: dict[str, asyncio.Future[None]] = {}
        # Objects applied from a member, by oid: (their version, that member). Announcing
        # them back to the member they came from would only cost bytes.
        self._came_from: OrderedDict[str, tuple[Version, str]] = OrderedDict()
        # Per member, the change number its lists are accounted for up to (the list being
        # pulled included): a list announced later that starts there needs no extra request.
        self._horizon: dict[str, int] = {}
        # Announcements waiting to be sent, and the members one is being sent to.
        self._outbox: dict[str, ChangeList] = {}
        self._telling: set[str] = set()
        self._rotation = 0
        self.offer_own_row()

    def __repr__(self) -> str:
        return f"Group({self.name!r} at {self.me!r}, {len(self.membership.alive())} usable)"

    # -- addressing and sending -------------------------------------------------------------

    def address_of(self, member: str) -> str | None:
        if member in self._routes:
            return self._routes[member]
        found = self.membership.get(member)
        return None if found is None else found.address

    def usable(self) -> tuple[str, ...]:
        return self.membership.alive()

    def others(self) -> tuple[str, ...]:
        return tuple(m for m in self.usable() if m != self.me)

    def path(self, what: str) -> str:
        return f"/replication/{quote(self.name, safe='')}/{what}"

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.spawn(coro, name=f"{self.name}: {name}")

    def _error(self, error: PeerError) -> None:
        self._metrics.peer_errors.labels(error.kind).inc()

    def _broadcast(self, what: str, value: Any, to: Sequence[str]) -> None:
        for member in to:
            self._spawn(self._post(member, what, value), f"{what} to {member}")

    async def _post(self, member: str, what: str, value: Any) -> Any:
        """Post ``value`` to ``member``; its answer, or None if it could not be had."""
        address = self.address_of(member)
        if address is None:
            return None
        try:
            return await self._peers.post_json(address, self.path(what), value)
        except PeerError as error:
            self._error(error)
            log.debug("%s: %s to %s failed: %s", self.name, what, member, error)
            return None

    async def _send_topology(self, member: str, agreed: Agreed) -> None:
        answer = await self._post(member, "topology", agreed.to_json())
        if isinstance(answer, dict) and answer.get("adopted") is False:
            epoch = answer.get("epoch")
            if isinstance(epoch, int) and not isinstance(epoch, bool):
                self.coordination.refused(epoch)
                self._coordinate()

    # -- membership -------------------------------------------------------------------------

    async def run_membership(self) -> None:
        seeds = [str(address) for address in self._group.seeds]
        last_join = -JOIN_RETRY
        while True:
            now = time.monotonic()
            if seeds and not self.others() and now - last_join >= JOIN_RETRY:
                self._dispatch(self.membership.join(seeds, now))
                last_join = now
            self._dispatch(self.membership.tick(now))
            self._membership_changed()
            deadline = self.membership.next_deadline()
            delay = JOIN_RETRY if deadline is None else max(0.0, deadline - time.monotonic())
            self._reschedule.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(delay, JOIN_RETRY)):
                    await self._reschedule.wait()

    def receive(self, message: Message) -> None:
        """A membership message from another member (the server calls this)."""
        self._dispatch(self.membership.receive(message, time.monotonic()))
        self._membership_changed()
        self._reschedule.set()

    def _dispatch(self, sends: Sequence[Send]) -> None:
        for send in sends:
            self._spawn(self._send(send), f"membership to {send.to or send.address}")

    async def _send(self, send: Send) -> None:
        address = self._routes.get(send.to, send.address) if send.to else send.address
        try:
            await self._peers.post_json(address, self.path("membership"), send.message.to_json())
        except PeerError as error:
            self._error(error)
            if send.to:
                self.membership.probe_failed(send.to, time.monotonic())
                self._reschedule.set()

    def _membership_changed(self) -> None:
        events = self.membership.events()
        if not events:
            return
        for event in events:
            log.info("%s: member %s is %s", self.name, event.id, event.new.value)
            if event.new is State.ALIVE and event.id != self.me:
                self.wake(event.id)
        counts = dict.fromkeys(State, 0)
        for member in self.membership.members():
            counts[member.state] += 1
        for state, count in counts.items():
            self._metrics.members.labels(self.name, state.value).set(count)
        self._coordinate()

    # -- measurement and topology -----------------------------------------------------------

    async def run_measurements(self) -> None:
        await asyncio.sleep(random.uniform(0.05, 0.3))
        while True:
            others = self.others()
            await asyncio.gather(*(self._measure(member) for member in others))
            self.offer_own_row()
            self._broadcast("costs", self.coordination.rows[self.me].to_json(), others)
            self._coordinate()
            interval = self._timing.measure_interval
            await asyncio.sleep(random.uniform(0.8 * interval, 1.2 * interval))

    async def _measure(self, member: str) -> None:
        address = self.address_of(member)
        if address is None:
            return
        link = self._links.link(member)
        size = self._timing.measure_bytes
        try:
            started = time.monotonic()
            await self._peers.request(address, "GET", "/replication/probe")
            link.observe_rtt(time.monotonic() - started, time.monotonic())
            started = time.monotonic()
            data = await self._peers.request(address, "GET", f"/replication/probe?size={size}")
            link.observe_transfer(len(data), time.monotonic() - started, time.monotonic())
        except PeerError as error:
            self._error(error)
            link.observe_failure(time.monotonic())
        if link.rtt is not None:
            self._metrics.link_rtt.labels(self.name, member).set(link.rtt)
        if link.throughput is not None:
            self._metrics.link_throughput.labels(self.name, member).set(link.throughput)

    def offer_own_row(self) -> None:
        self._row_version += 1
        costs = self._links.costs(self._config.topology.typical_bytes)
        row = CostRow(self.me, self._row_version, self._public_url, costs)
        self.coordination.offer_row(row)

    def offer_row(self, row: CostRow) -> None:
        """A member's measurements (the server calls this)."""
        if self.coordination.offer_row(row):
            self._coordinate()

    def _coordinate(self) -> None:
        usable = self.usable()
        made = self.coordination.decide(usable)
        if made is not None:
            log.info("%s: computed %r", self.name, made)
            for member in usable:
                if member != self.me:
                    self._spawn(self._send_topology(member, made), f"topology to {member}")
            self._topology_changed()

    def offer_topology(self, agreed: Agreed) -> bool:
        """A topology a coordinator computed (the server calls this); whether it was kept."""
        if not self.coordination.adopt(agreed):
            return False
        log.info("%s: adopted %r", self.name, agreed)
        self._topology_changed()
        return True

    def _topology_changed(self) -> None:
        agreed = self.coordination.agreed
        if agreed is not None:
            topology = agreed.topology
            self._metrics.topology_edges.labels(self.name).set(len(topology.edges))
            self._metrics.topology_cost.labels(self.name).set(topology.total_cost)
            self._metrics.topology_epoch.labels(self.name).set(agreed.epoch)
        # New neighbours may hold changes this member has not pulled: ask them.
        for member in self.coordination.neighbours(self.usable()):
            self.wake(member)

    # -- announcing local changes -----------------------------------------------------------

    async def run_local_changes(self) -> None:
        """Announce the local broker's changes of the collection to the neighbours."""
        failures = 0
        while True:
            try:
                listed = await self._broker.changes(
                    self.name, self.local_seq, self._timing.batch, wait=self._timing.long_poll
                )
            except PeerError as error:
                self._error(error)
                failures += 1
                log.warning("%s: the local broker: %s", self.name, error)
                await asyncio.sleep(min(MAX_BACKOFF, 0.5 * 2**failures))
                continue
            failures = 0
            if listed.last_seq < self.local_seq:  # the broker's registry was replaced
                self.local_seq = 0
                continue
            if listed.changes:
                self._announce(listed)
            self.local_seq = listed.upto

    def _announce(self, listed: ChangeList) -> None:
        came_from = self._came_from
        for member in self.coordination.neighbours(self.usable()):

            def its_own(change: Change, member: str = member) -> bool:
                return came_from.get(change.oid) == (change.version, member)

            self._tell(member, listed.without(its_own))
        for change in listed.changes:
            if change.oid in came_from and came_from[change.oid][0] == change.version:
                del came_from[change.oid]

    def _tell(self, member: str, listed: ChangeList) -> None:
        """Announce ``listed`` to ``member``: one announcement in flight to a member at a
        time, in order, and those made meanwhile joined into the next."""
        waiting = self._outbox.get(member)
        joined = None if waiting is None else waiting.followed_by(listed)
        self._outbox[member] = listed if joined is None else joined
        if member not in self._telling:
            self._telling.add(member)
            self._spawn(self._teller(member), f"announcements to {member}")

    async def _teller(self, member: str) -> None:
        try:
            while (listed := self._outbox.pop(member, None)) is not None:
                await self._post(member, "notify", listed.to_json())
        finally:
            self._telling.discard(member)

    def notified(self, member: str, listed: ChangeList) -> None:
        """``member`` announced changes (the server calls this)."""
        behind = self._behind.setdefault(member, _Behind())
        if listed.last_seq > behind.last_seq:
            behind.last_seq = listed.last_seq
        if behind.since is None and listed.last_seq > self.cursors.get(member, 0):
            behind.since = time.monotonic()
        pending = self._pending.get(member)
        joined = None if pending is None else pending.followed_by(listed)
        if joined is not None:
            self._pending[member] = joined
        elif listed.after <= max(self.cursors.get(member, 0), self._horizon.get(member, 0)):
            self._pending[member] = listed
        self._report_lag(member)
        self.wake(member)

    def _report_lag(self, member: str) -> None:
        behind = self._behind.get(member)
        if behind is None:
            return
        seqs = max(0, behind.last_seq - self.cursors.get(member, 0))
        if seqs == 0:
            behind.since = None
        self._metrics.lag_seqs.labels(self.name, member).set(seqs)
        since = behind.since
        self._metrics.lag_seconds.labels(self.name, member).set(
            0.0 if since is None else time.monotonic() - since
        )

    # -- pulling ----------------------------------------------------------------------------

    def wake(self, member: str) -> None:
        """Pull what ``member`` has that this member lacks, soon (one worker per member)."""
        if member == self.me:
            return
        event = self._wake.get(member)
        if event is None:
            event = self._wake[member] = asyncio.Event()
            self._spawn(self._puller(member, event), f"pulls from {member}")
        event.set()

    async def _puller(self, member: str, wake: asyncio.Event) -> None:
        failures = 0
        while True:
            await wake.wait()
            wake.clear()
            if member not in self.usable():
                continue
            started = time.monotonic()
            try:
                await self._pull(member)
            except PeerError as error:
                self._error(error)
                failures += 1
                log.info("%s: pulling from %s failed: %s", self.name, member, error)
                await asyncio.sleep(min(MAX_BACKOFF, 0.2 * 2**failures))
                wake.set()
                continue
            failures = 0
            self._metrics.propagation.labels(self.name).observe(time.monotonic() - started)

    async def _pull(self, member: str) -> None:
        address = self.address_of(member)
        if address is None:
            return
        while True:
            cursor = self.cursors.get(member, 0)
            listed = self._pending.pop(member, None)
            if listed is None or listed.after > cursor:
                listed = await self._peers.changes(address, self.name, cursor, self._timing.batch)
            self._horizon[member] = listed.upto
            if listed.last_seq < cursor:  # its registry was replaced: start again
                self.cursors[member] = 0
                continue
            offered = [(c.oid, c.version) for c in listed.changes if c.seq > cursor]
            if offered:
                await self._pull_newer(member, address, offered, "push")
            self.cursors[member] = max(cursor, listed.upto)
            behind = self._behind.setdefault(member, _Behind())
            behind.last_seq = max(behind.last_seq, listed.last_seq)
            self._report_lag(member)
            await self._save()
            if listed.complete:
                return

    async def _fetch(self, member: str, address: str, oids: Sequence[str], kind: str) -> None:
        """Move ``oids`` from ``member`` to the local broker, a batch per request; the next
        batch downloads while the last one is applied."""
        batch = self._timing.batch
        applying: asyncio.Task[None] | None = None
        arrived: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for oid in oids:
            self._inflight[oid] = arrived
        try:
            for start in range(0, len(oids), batch):
                packed = await self._peers.request(
                    address,
                    "POST",
                    self.path("entries"),
                    body=_json_bytes({"oids": list(oids[start : start + batch])}),
                )
                self._metrics.bytes_received.labels(self.name, kind).inc(len(packed))
                if applying is not None:
                    await applying
                applying = asyncio.ensure_future(self._apply(packed, kind))
            if applying is not None:
                await applying
        finally:
            if applying is not None and not applying.done():
                applying.cancel()
                await asyncio.gather(applying, return_exceptions=True)
            for oid in oids:
                if self._inflight.get(oid) is arrived:
                    del self._inflight[oid]
            arrived.set_result(None)

    async def _apply(self, packed: bytes, kind: str) -> None:
        applied = await self._broker.apply(self.name, packed)
        moved = applied.get("upserted", 0) + applied.get("removed", 0)
        self._metrics.objects_applied.labels(self.name, kind).inc(moved)

    async def _save(self) -> None:
        try:
            await self._saved.save()
        except ReplicatorError as error:
            log.error("%s: %s", self.name, error)

    # -- anti-entropy -----------------------------------------------------------------------

    async def local_tree(self) -> MerkleTree:
        """The Merkle tree of the local broker's collection (rebuilt when it changed)."""
        bits, seq, data = await self._broker.leaves(self.name)
        cached = self._tree
        if cached is not None and cached[0] == seq and cached[1].bits == bits:
            return cached[1]
        size = 32
        leaves = [data[i : i + size] for i in range(0, len(data), size)]
        try:
            tree = MerkleTree.from_leaves(leaves, bits)
        except MerkleError as error:
            raise PeerError("broker", "protocol", f"leaves: {error}") from None
        self._tree = (seq, tree)
        return tree

    async def run_anti_entropy(self) -> None:
        interval = self._timing.anti_entropy_interval
        # A member that starts (or comes back) compares as soon as it has a neighbour: what
        # it missed while away is repaired now, not an interval later.
        waited = 0.0
        while not self.coordination.neighbours(self.usable()) and waited < interval:
            await asyncio.sleep(JOIN_RETRY / 4)
            waited += JOIN_RETRY / 4
        while True:
            neighbours = self.coordination.neighbours(self.usable())
            if neighbours:
                member = neighbours[self._rotation % len(neighbours)]
                self._rotation += 1
                await self.anti_entropy(member)
            await asyncio.sleep(random.uniform(0.8 * interval, 1.2 * interval))

    async def anti_entropy(self, member: str) -> int:
        """Compare trees with ``member`` and pull the objects it holds newer; returns how many
        buckets differed (-1 if the round failed)."""
        address = self.address_of(member)
        if address is None:
            return -1
        started = time.monotonic()
        try:
            differing = await self._compare(address)
            if differing:
                log.info("%s: %d buckets differ from %s's", self.name, len(differing), member)
            for start in range(0, len(differing), BUCKETS_PER_REQUEST):
                chunk = differing[start : start + BUCKETS_PER_REQUEST]
                query = ",".join(str(b) for b in chunk)
                answer = await self._peers.get_json(address, self.path(f"buckets?b={query}"))
                entries = parse_bucket_entries(answer, address)
                await self._pull_newer(member, address, entries, "anti_entropy")
        except PeerError as error:
            self._error(error)
            self._metrics.anti_entropy_rounds.labels(self.name, "failed").inc()
            log.info("%s: anti-entropy with %s failed: %s", self.name, member, error)
            return -1
        if differing:
            took = time.monotonic() - started
            log.info("%s: anti-entropy with %s done in %.2f s", self.name, member, took)
        outcome = "repaired" if differing else "equal"
        self._metrics.anti_entropy_rounds.labels(self.name, outcome).inc()
        self._metrics.anti_entropy_buckets.labels(self.name).inc(len(differing))
        return len(differing)

    async def _compare(self, address: str) -> list[int]:
        tree = await self.local_tree()
        comparison = Comparison(tree, remote_bits=tree.bits)
        try:
            ask = comparison.start()
            while ask:
                data = await self._peers.request(
                    address,
                    "POST",
                    self.path("tree"),
                    body=encode_ask(ask, tree.bits),
                    content_type="application/octet-stream",
                )
                ask = comparison.receive(MerkleTree.from_wire(data, tree.bits))
        except MerkleError as error:
            raise PeerError(address, "protocol", f"Merkle comparison: {error}") from None
        return comparison.differing_buckets

    async def _pull_newer(
        self, member: str, address: str, entries: Sequence[tuple[str, Version]], kind: str
    ) -> None:
        """Fetch from ``member`` those of ``entries`` that it holds newer than this one."""
        wanted: list[str] = []
        for start in range(0, len(entries), WANTED_PER_REQUEST):
            offered = entries[start : start + WANTED_PER_REQUEST]
            wanted += await self._broker.wanted(self.name, offered)
        versions = dict(entries)
        for oid in wanted:
            self._came_from[oid] = (versions[oid], member)
            self._came_from.move_to_end(oid)
        while len(self._came_from) > CAME_FROM_LIMIT:
            self._came_from.popitem(last=False)
        # An object another neighbour is sending already is not asked for twice: wait for
        # that transfer, then ask again for what it did not bring.
        busy = {oid: self._inflight[oid] for oid in wanted if oid in self._inflight}
        await self._fetch(member, address, [oid for oid in wanted if oid not in busy], kind)
        if busy:
            await asyncio.gather(*set(busy.values()), return_exceptions=True)
            again = await self._broker.wanted(self.name, [(o, versions[o]) for o in busy])
            await self._fetch(member, address, again, kind)

    # -- status -----------------------------------------------------------------------------

    def cost_to(self, member: str) -> float | None:
        """The measured cost of the link to ``member`` (0 to this member itself)."""
        if member == self.me:
            return 0.0
        link = self._links.snapshot().get(member)
        return None if link is None else link.cost(self._config.topology.typical_bytes)

    def status(self) -> dict[str, Any]:
        agreed = self.coordination.agreed
        urls = self.coordination.public_urls()
        return {
            "collection": self.name,
            "members": [
                {
                    "id": m.id,
                    "address": m.address,
                    "state": m.state.value,
                    "incarnation": m.incarnation,
                    "public_url": urls.get(m.id),
                    "cost": self.cost_to(m.id),
                }
                for m in self.membership.members()
            ],
            "neighbours": list(self.coordination.neighbours(self.usable())),
            "topology": None if agreed is None else agreed.to_json(),
            "local_seq": self.local_seq,
            "cursors": dict(self.cursors),
        }


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()

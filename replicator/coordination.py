"""How the members of a group agree on one update topology. Pure: values in, decisions out.

Each member measures its links (replicator/links.py) and shares them as a ``CostRow``
(versioned: a newer row from a member replaces the older; both messages and their wire form
are replicator/messages.py). The coordinator, the usable member
with the smallest id, computes the topology (replicator/topology.py) from the rows of the
usable members when it has none, when membership changed, or when some link's cost changed
enough, and sends it to every member as an ``Agreed`` numbered one above the last it knew.
Every member keeps the agreed topology with the highest (epoch, coordinator), so when two
coordinators briefly coexist (a partition, or a coordinator dying while its topology
travels) all members still settle on the same one, and the next computation supersedes it.

Until a topology is agreed, a member floods to every usable member: slower, never lost.
"""

from __future__ import annotations

import json
from collections.abc import Collection

from replicator.messages import Agreed, CostRow
from replicator.topology import TopologyParams, changed_enough, compute, objective, recosted

# Link costs that move by less than this (seconds) have not changed: loopback and LAN
# measurements jitter by a millisecond or two from one probe to the next.
NOISE = 0.005
# A topology computed from new costs replaces the agreed one only when it is this much better
# (its objective this fraction of the agreed one's under the same costs, or less): links that
# jitter around equal costs would otherwise make the group switch topologies all the time.
GAIN = 0.9


def _canonical(agreed: Agreed) -> str:
    return json.dumps(agreed.topology.to_json(), sort_keys=True)


class Coordination:
    """One member's view of its group's link costs and agreed topology."""

    def __init__(self, me: str, params: TopologyParams, threshold: float) -> None:
        self.me = me
        self.params = params
        self.threshold = threshold
        self.rows: dict[str, CostRow] = {}
        self.agreed: Agreed | None = None
        # The costs the coordinator last computed from (when it is this member).
        self._basis: dict[tuple[str, str], float] | None = None
        # The highest epoch another member said it holds (its next topology goes above it).
        self._floor = 0

    def __repr__(self) -> str:
        return f"Coordination({self.me!r}, {len(self.rows)} rows, {self.agreed!r})"

    def offer_row(self, row: CostRow) -> bool:
        """Keep ``row`` if it is newer than the one held from its member."""
        held = self.rows.get(row.member)
        if held is not None and held.version >= row.version:
            return False
        self.rows[row.member] = row
        return True

    def costs(self, usable: Collection[str]) -> dict[tuple[str, str], float]:
        """Directed link costs among ``usable`` members, as measured by the first of each pair."""
        return {
            (row.member, peer): cost
            for row in self.rows.values()
            if row.member in usable
            for peer, cost in row.costs.items()
            if peer in usable and peer != row.member
        }

    @staticmethod
    def coordinator(usable: Collection[str]) -> str | None:
        return min(usable, default=None)

    def decide(self, usable: Collection[str]) -> Agreed | None:
        """A new topology to adopt and send to every member, if this member coordinates and
        the one agreed no longer fits (members changed, links were measured for the first
        time or went unmeasured, or one computed from costs that moved is clearly better);
        else None."""
        if self.coordinator(usable) != self.me:
            return None
        costs = self.costs(usable)
        agreed = self.agreed
        fits = (
            agreed is not None
            and set(agreed.topology.members) == set(usable)
            and agreed.epoch > self._floor
        )
        basis = self._basis
        if fits and basis is not None and not changed_enough(basis, costs, self.threshold, NOISE):
            return None
        topology = compute(usable, costs, self.params)
        self._basis = costs
        same_links = basis is None or basis.keys() == costs.keys()
        if fits and same_links:
            assert agreed is not None
            now = objective(recosted(agreed.topology, costs, self.params), self.params)
            if objective(topology, self.params) > GAIN * now:
                # Not enough better to be worth every member switching: keep the agreed one.
                return None
        made = Agreed(max(agreed.epoch if agreed else 0, self._floor) + 1, self.me, topology)
        self.agreed = made
        return made

    def adopt(self, offered: Agreed) -> bool:
        """Keep ``offered`` if it outranks the topology held. Two of equal rank (a coordinator
        that restarted and numbered a new topology like one it made before) are ordered by
        their JSON form, so every member keeps the same one whatever order they arrive in."""
        held = self.agreed
        if held is not None and (
            offered.rank < held.rank
            or (offered.rank == held.rank and _canonical(offered) <= _canonical(held))
        ):
            return False
        self.agreed = offered
        # Not computed here from _basis (decide sets its own): recompute when coordinating.
        self._basis = None
        return True

    def refused(self, epoch: int) -> None:
        """A member kept its own topology of ``epoch`` over the one this member sent (this
        member restarted and numbered from 1 again): compute the next one above it."""
        if epoch >= self._floor:
            self._floor = epoch
            self._basis = None

    def neighbours(self, usable: Collection[str]) -> tuple[str, ...]:
        """Whom this member floods to: its neighbours in the agreed topology that are usable,
        or every usable member while none is agreed or this member is not in it."""
        agreed = self.agreed
        if agreed is None or self.me not in agreed.topology.members:
            return tuple(sorted(m for m in usable if m != self.me))
        return tuple(m for m in agreed.topology.neighbours(self.me) if m in usable)

    def public_urls(self) -> dict[str, str]:
        return {member: row.public_url for member, row in self.rows.items()}

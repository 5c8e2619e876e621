"""What the members of a replication group say to each other, besides the change lists and
transfers of the replication protocol (harvest_common/replication/wire.py). Pure: JSON-ready
values in and out, no I/O; the server reads them (replicator/server.py) and the group's
driver sends them (replicator/group.py).

* Membership's messages (replicator/membership.py): Ping, PingReq and Ack, which carry gossip
  (each an ``Update``, a claim about a member), and Join, answered with a Sync. They share one
  route and say which they are in "type": ``from_json`` reads any of them. A malformed one is
  a ``MembershipError``.
* Coordination's (replicator/coordination.py): a member's link costs (``CostRow``) and a
  topology its coordinator computed (``Agreed``). Each has a route of its own and is read by
  its class; a malformed one is a ``WireError``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeAlias

from harvest_common.errors import WireError
from replicator.errors import MembershipError, TopologyError
from replicator.topology import Topology

__all__ = [
    "Ack",
    "Agreed",
    "CostRow",
    "Join",
    "Message",
    "Ping",
    "PingReq",
    "State",
    "Sync",
    "Update",
    "from_json",
]


# -- membership ----------------------------------------------------------------------------


class State(enum.Enum):
    """A member's state as one member sees it."""

    ALIVE = "alive"
    SUSPECT = "suspect"
    DEAD = "dead"
    LEFT = "left"


@dataclass(frozen=True, slots=True)
class Update:
    """A gossiped claim about a member; `source` is who made it (it tells independent
    suspicions apart, which is what shortens a suspicion)."""

    id: str
    address: str
    state: State
    incarnation: int
    source: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "address": self.address,
            "state": self.state.value,
            "incarnation": self.incarnation,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: object) -> Update:
        fields = _object(data, "update")
        return cls(
            id=_string(fields, "id", "update", nonempty=True),
            address=_string(fields, "address", "update"),
            state=_state(fields, "state", "update"),
            incarnation=_count(fields, "incarnation", "update"),
            source=_string(fields, "source", "update"),
        )


# Wire form. Every message is a JSON object with a "type"; unknown extra keys are ignored so a
# newer member can add fields, but every known key must be present with the right type.


def _object(data: object, kind: str) -> dict[str, object]:
    if not isinstance(data, dict):
        raise MembershipError(f"{kind}: expected an object, got {type(data).__name__}")
    return data


def _field(fields: dict[str, object], key: str, kind: str) -> object:
    if key not in fields:
        raise MembershipError(f"{kind}: missing {key!r}")
    return fields[key]


def _string(fields: dict[str, object], key: str, kind: str, *, nonempty: bool = False) -> str:
    value = _field(fields, key, kind)
    if not isinstance(value, str):
        raise MembershipError(f"{kind}.{key}: expected a string, got {type(value).__name__}")
    if nonempty and not value:
        raise MembershipError(f"{kind}.{key}: must not be empty")
    return value


def _count(fields: dict[str, object], key: str, kind: str) -> int:
    value = _field(fields, key, kind)
    # bool is an int subclass; true is not a sequence number.
    if isinstance(value, bool) or not isinstance(value, int):
        raise MembershipError(f"{kind}.{key}: expected an integer, got {type(value).__name__}")
    if value < 0:
        raise MembershipError(f"{kind}.{key}: must not be negative, got {value}")
    return value


def _state(fields: dict[str, object], key: str, kind: str) -> State:
    value = _string(fields, key, kind)
    try:
        return State(value)
    except ValueError:
        raise MembershipError(f"{kind}.{key}: unknown state {value!r}") from None


def _updates(fields: dict[str, object], key: str, kind: str) -> tuple[Update, ...]:
    value = _field(fields, key, kind)
    if not isinstance(value, list | tuple):
        raise MembershipError(f"{kind}.{key}: expected a list, got {type(value).__name__}")
    return tuple(Update.from_json(item) for item in value)


def _typed(data: object, kind: str) -> dict[str, object]:
    fields = _object(data, kind)
    if fields.get("type") != kind:
        raise MembershipError(f"{kind}: 'type' is {fields.get('type')!r}, expected {kind!r}")
    return fields


@dataclass(frozen=True, slots=True)
class _Beat:
    """What a Ping and an Ack both are: a sequence number and a sender, carrying gossip."""

    TYPE: ClassVar[str]
    seq: int
    sender: str
    updates: tuple[Update, ...]
    sender_address: str

    def to_json(self) -> dict[str, object]:
        return {
            "type": self.TYPE,
            "seq": self.seq,
            "sender": self.sender,
            "sender_address": self.sender_address,
            "updates": [u.to_json() for u in self.updates],
        }

    @classmethod
    def from_json(cls, data: object) -> Self:
        fields = _typed(data, cls.TYPE)
        return cls(
            seq=_count(fields, "seq", cls.TYPE),
            sender=_string(fields, "sender", cls.TYPE, nonempty=True),
            updates=_updates(fields, "updates", cls.TYPE),
            sender_address=_string(fields, "sender_address", cls.TYPE),
        )


@dataclass(frozen=True, slots=True)
class Ping(_Beat):
    """A direct probe; answered with an Ack of the same `seq`."""

    TYPE: ClassVar[str] = "ping"


@dataclass(frozen=True, slots=True)
class PingReq:
    """ "Probe `target` for me": the receiver pings it and relays its Ack with this `seq`."""

    TYPE: ClassVar[str] = "ping_req"
    seq: int
    sender: str
    target: str
    target_address: str
    updates: tuple[Update, ...]
    sender_address: str

    def to_json(self) -> dict[str, object]:
        return {
            "type": self.TYPE,
            "seq": self.seq,
            "sender": self.sender,
            "sender_address": self.sender_address,
            "target": self.target,
            "target_address": self.target_address,
            "updates": [u.to_json() for u in self.updates],
        }

    @classmethod
    def from_json(cls, data: object) -> PingReq:
        fields = _typed(data, cls.TYPE)
        return cls(
            seq=_count(fields, "seq", cls.TYPE),
            sender=_string(fields, "sender", cls.TYPE, nonempty=True),
            target=_string(fields, "target", cls.TYPE, nonempty=True),
            target_address=_string(fields, "target_address", cls.TYPE),
            updates=_updates(fields, "updates", cls.TYPE),
            sender_address=_string(fields, "sender_address", cls.TYPE),
        )


@dataclass(frozen=True, slots=True)
class Ack(_Beat):
    """The answer to a Ping, or an intermediary's relay of one for a PingReq."""

    TYPE: ClassVar[str] = "ack"


@dataclass(frozen=True, slots=True)
class Join:
    """A member (new or restarted) asks for the full member list; answered with a Sync."""

    TYPE: ClassVar[str] = "join"
    sender: str
    address: str
    incarnation: int

    def to_json(self) -> dict[str, object]:
        return {
            "type": self.TYPE,
            "sender": self.sender,
            "address": self.address,
            "incarnation": self.incarnation,
        }

    @classmethod
    def from_json(cls, data: object) -> Join:
        fields = _typed(data, cls.TYPE)
        return cls(
            sender=_string(fields, "sender", cls.TYPE, nonempty=True),
            address=_string(fields, "address", cls.TYPE),
            incarnation=_count(fields, "incarnation", cls.TYPE),
        )


@dataclass(frozen=True, slots=True)
class Sync:
    """The sender's whole view, every member including tombstones, merged by the receiver."""

    TYPE: ClassVar[str] = "sync"
    sender: str
    members: tuple[Update, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "type": self.TYPE,
            "sender": self.sender,
            "members": [u.to_json() for u in self.members],
        }

    @classmethod
    def from_json(cls, data: object) -> Sync:
        fields = _typed(data, cls.TYPE)
        return cls(
            sender=_string(fields, "sender", cls.TYPE, nonempty=True),
            members=_updates(fields, "members", cls.TYPE),
        )


Message: TypeAlias = Ping | PingReq | Ack | Join | Sync

_PARSERS: dict[str, Callable[[object], Message]] = {
    cls.TYPE: cls.from_json for cls in (Ping, PingReq, Ack, Join, Sync)
}


def from_json(data: object) -> Message:
    """Parse any message from its dict form; MembershipError if it is malformed."""
    kind = _object(data, "message").get("type")
    if not isinstance(kind, str) or kind not in _PARSERS:
        raise MembershipError(f"message: unknown 'type' {kind!r}")
    return _PARSERS[kind](data)


# -- coordination --------------------------------------------------------------------------

_ROW_KEYS = frozenset({"member", "version", "public_url", "costs"})


@dataclass(frozen=True, slots=True)
class CostRow:
    """What ``member`` measured: ``costs`` of its links by member at the other end, and
    ``public_url``, where its mirror is searched. ``version`` increases with each row."""

    member: str
    version: int
    public_url: str
    costs: Mapping[str, float]

    def __repr__(self) -> str:
        return f"CostRow({self.member!r} v{self.version}, {len(self.costs)} links)"

    def to_json(self) -> dict[str, Any]:
        return {
            "member": self.member,
            "version": self.version,
            "public_url": self.public_url,
            "costs": dict(self.costs),
        }

    @classmethod
    def from_json(cls, value: object) -> CostRow:
        if not isinstance(value, dict) or set(value) != _ROW_KEYS:
            raise WireError("a cost row has member, version, public_url and costs")
        member, version, url, costs = (
            value["member"],
            value["version"],
            value["public_url"],
            value["costs"],
        )
        if not (isinstance(member, str) and isinstance(url, str) and isinstance(costs, dict)):
            raise WireError("a cost row's member and public_url are strings, costs a table")
        if isinstance(version, bool) or not isinstance(version, int):
            raise WireError("a cost row's version is an integer")
        checked: dict[str, float] = {}
        for peer, cost in costs.items():
            if isinstance(cost, bool) or not isinstance(cost, int | float):
                raise WireError(f"the cost of {peer!r} is not a number")
            if not (math.isfinite(cost) and cost >= 0):
                raise WireError(f"the cost of {peer!r} is not a finite, non-negative number")
            checked[peer] = float(cost)
        return cls(member, version, url, checked)


@dataclass(frozen=True, slots=True)
class Agreed:
    """A topology computed by ``coordinator`` as its ``epoch``-th."""

    epoch: int
    coordinator: str
    topology: Topology

    def __repr__(self) -> str:
        return f"Agreed(epoch {self.epoch} by {self.coordinator!r}: {self.topology!r})"

    @property
    def rank(self) -> tuple[int, str]:
        return (self.epoch, self.coordinator)

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "coordinator": self.coordinator,
            "topology": self.topology.to_json(),
        }

    @classmethod
    def from_json(cls, value: object) -> Agreed:
        if not isinstance(value, dict) or set(value) != {"epoch", "coordinator", "topology"}:
            raise WireError("an agreed topology has epoch, coordinator and topology")
        epoch, coordinator = value["epoch"], value["coordinator"]
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
            raise WireError("an agreed topology's epoch is a positive integer")
        if not isinstance(coordinator, str):
            raise WireError("an agreed topology's coordinator is a string")
        try:
            topology = Topology.from_json(value["topology"])
        except TopologyError as error:
            raise WireError(f"bad topology: {error}") from None
        return cls(epoch, coordinator, topology)

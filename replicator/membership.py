"""Group membership and failure detection for the replicator: SWIM with Lifeguard's suspicion.

This module owns one member's view of the mirror group: who is in it, at which address, and
whether each member is ALIVE, SUSPECT, DEAD or LEFT. It is a pure state machine: a driver
delivers the messages it receives (`Membership.receive`; the messages and their wire form are
replicator/messages.py), calls `Membership.tick` at `Membership.next_deadline`, and sends the
returned `Send`s. Time is an argument and randomness comes from a seeded `random.Random`, so a
run is a function of its inputs.

The protocol is SWIM (Das, Gupta, Motivala 2002) as HashiCorp memberlist runs it:

* Each probe period pings one member, taken round-robin from a list reshuffled every round, so
  every member is probed within two rounds (SWIM's bounded detection time). Without an Ack
  after `probe_timeout`, `indirect_probes` other members are asked to ping it (PingReq): one
  lossy link cannot get a member declared dead. Without any Ack by the end of the period the
  member is suspected.
* A suspicion turns into DEAD after a timeout that follows Lifeguard (memberlist's
  `remainingSuspicionTime`): it starts at `suspicion_max_mult` times the minimum and falls
  toward the minimum, `suspicion_timeout * max(1, log10(n))`, as other members independently
  suspect the same member (`suspicion_confirmations` of them reach the minimum). A lone
  accuser with a bad link waits longest; a member everyone fails to reach goes quickly.
* Every state is an `(incarnation, state)` claim and the local view keeps the greatest claim
  under the order incarnation first, then ALIVE < SUSPECT < DEAD < LEFT. That is SWIM's merge
  rule stated as a maximum, so merging is commutative and idempotent: members converge whatever
  order gossip arrives in. Only a member raises its own incarnation, which it does to refute
  any claim that it is not alive.
* Changes spread by piggybacking on probe traffic. The queue holds one update per member (a
  newer one replaces the older), so it is bounded by the group size; each update is sent about
  `retransmit_mult * ceil(log10(n + 1))` times, least-sent first.
* Two additions beyond memberlist's core, both for a small, statically configured group:
  a message to a member this node holds SUSPECT, DEAD or LEFT carries that claim first, so the
  member learns of it from the first message it exchanges and refutes without waiting for
  gossip to reach it; and every `reconnect_interval` one DEAD member is pinged, so two sides of
  a healed partition that each declared the other dead find each other again. A member told
  of a claim against it older than its own incarnation (it refuted while the holder could not
  hear) gossips its current claim again, since the refutation itself is long out of the queue.

Local health awareness (Lifeguard's slowing of a node that is itself overloaded) and Nacks are
not implemented: the group is small and the drivers are not expected to starve.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from replicator.errors import MembershipError
from replicator.messages import Ack, Join, Message, Ping, PingReq, State, Sync, Update

__all__ = ["Event", "Member", "Membership", "MembershipParams", "Send"]


# The order that breaks ties between claims of equal incarnation (see the module docstring).
_RANK = {State.ALIVE: 0, State.SUSPECT: 1, State.DEAD: 2, State.LEFT: 3}
_USABLE = (State.ALIVE, State.SUSPECT)


@dataclass(frozen=True, slots=True)
class Member:
    """One member as this node sees it; `since` is when it entered `state`, `source` who said so
    (the member itself for a refutation or a leave, the accuser for a suspicion or a death)."""

    id: str
    address: str
    state: State
    incarnation: int
    since: float
    source: str = ""


def _claim(item: Member | Update) -> tuple[int, int]:
    return (item.incarnation, _RANK[item.state])


def _as_update(member: Member) -> Update:
    return Update(member.id, member.address, member.state, member.incarnation, member.source)


@dataclass(frozen=True, slots=True)
class Send:
    """A message for the driver to send; `to` is "" when only the address is known (a Join)."""

    to: str
    address: str
    message: Message


@dataclass(frozen=True, slots=True)
class Event:
    """A member changed state (`old` is None when it first appeared)."""

    id: str
    old: State | None
    new: State


@dataclass(frozen=True, slots=True)
class MembershipParams:
    """Protocol timing and sizes; times are seconds. The probing defaults are memberlist's LAN
    profile (1 s period, 0.5 s direct timeout, 3 indirect probes, retransmit multiplier 4)."""

    probe_interval: float = 1.0
    probe_timeout: float = 0.5  # wait for a direct Ack before the indirect probes
    indirect_probes: int = 3  # members asked to PingReq a silent target
    # The shortest suspect -> dead time, for up to 10 members; it grows with log10(n) beyond.
    suspicion_timeout: float = 5.0
    # A suspicion nobody confirms lasts this many times the shortest (Lifeguard).
    suspicion_max_mult: float = 3.0
    # Independent suspicions that bring the timeout down to the shortest; groups too small to
    # supply them (fewer than this + 2 members) use the shortest outright.
    suspicion_confirmations: int = 2
    dead_reap: float = 3600.0  # forget DEAD and LEFT members after this long
    retransmit_mult: int = 4  # each update is sent ~ retransmit_mult * ceil(log10(n + 1)) times
    max_updates_per_message: int = 16
    reconnect_interval: float = 30.0  # ping one DEAD member this often, to heal partitions

    def __post_init__(self) -> None:
        problems = []
        for name in ("probe_interval", "suspicion_timeout", "dead_reap", "reconnect_interval"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be positive")
        if not 0 < self.probe_timeout < self.probe_interval:
            problems.append("probe_timeout must be positive and below probe_interval")
        if not self.suspicion_max_mult >= 1:
            problems.append("suspicion_max_mult must be at least 1")
        if self.indirect_probes < 0 or self.suspicion_confirmations < 0:
            problems.append("indirect_probes and suspicion_confirmations must not be negative")
        if self.retransmit_mult < 1 or self.max_updates_per_message < 1:
            problems.append("retransmit_mult and max_updates_per_message must be at least 1")
        if problems:
            raise MembershipError("; ".join(problems))


@dataclass(slots=True)
class _Probe:
    target: str
    address: str
    seq: int
    started: float
    indirect_at: float
    indirect_sent: bool = False


@dataclass(slots=True)
class _Relay:
    requester: str
    address: str
    seq: int
    expires: float


@dataclass(slots=True)
class _Suspicion:
    started: float
    shortest: float
    longest: float
    needed: int
    accusers: set[str]

    def deadline(self) -> float:
        if self.needed == 0:
            return self.started + self.shortest
        # memberlist's remainingSuspicionTime: the first accuser does not count as a
        # confirmation, and the timeout falls with the log of the confirmations.
        confirmations = len(self.accusers) - 1
        fraction = math.log(confirmations + 1) / math.log(self.needed + 1)
        timeout = self.longest - fraction * (self.longest - self.shortest)
        return self.started + max(self.shortest, timeout)


@dataclass(slots=True)
class _Queued:
    update: Update
    transmits: int
    order: int


class Membership:
    """One member's SWIM state machine; see the module docstring for the protocol."""

    def __init__(
        self,
        self_id: str,
        address: str,
        now: float,
        params: MembershipParams | None = None,
        seed: int = 0,
        seeds: Iterable[tuple[str, str]] = (),
    ) -> None:
        """`seeds` are configured members (id, address), taken as ALIVE at incarnation 0."""
        if not self_id:
            raise MembershipError("self_id must not be empty")
        self._id = self_id
        self._address = address
        self._params = params if params is not None else MembershipParams()
        self._rng = random.Random(seed)
        self._members: dict[str, Member] = {}
        self._events: list[Event] = []
        self._queue: dict[str, _Queued] = {}
        self._queued = 0
        self._suspicions: dict[str, _Suspicion] = {}
        self._relays: dict[int, _Relay] = {}
        self._probe: _Probe | None = None
        self._order: list[str] = []
        self._order_pos = 0
        self._seq = 0
        self._left = False
        # A random phase keeps members started together from probing in lockstep.
        self._next_probe = now + self._rng.uniform(0, self._params.probe_interval)
        self._next_reconnect = now + self._params.reconnect_interval
        self._install(Update(self_id, address, State.ALIVE, 0, self_id), now)
        for member_id, member_address in seeds:
            if not member_id:
                raise MembershipError("a seed's id must not be empty")
            if member_id != self_id:
                self._merge(Update(member_id, member_address, State.ALIVE, 0, self_id), now)

    def __repr__(self) -> str:
        me = self._members[self._id]
        return (
            f"Membership({self._id!r}, {me.state.value}, incarnation={me.incarnation}, "
            f"usable={len(self.alive())}/{len(self._members)})"
        )

    # -- queries -------------------------------------------------------------------------------

    def members(self) -> tuple[Member, ...]:
        """Every known member, this one and tombstones included, sorted by id."""
        return tuple(self._members[k] for k in sorted(self._members))

    def alive(self) -> tuple[str, ...]:
        """Ids of the usable members (ALIVE or SUSPECT), this one included, sorted."""
        return tuple(sorted(k for k, m in self._members.items() if m.state in _USABLE))

    def get(self, member_id: str) -> Member | None:
        return self._members.get(member_id)

    def events(self) -> list[Event]:
        """The state changes since the last call, oldest first."""
        drained, self._events = self._events, []
        return drained

    def next_deadline(self) -> float | None:
        """When `tick` must next be called; None once this member has left."""
        if self._left:
            return None
        times = [self._next_probe]
        probe = self._probe
        if probe is not None:
            times.append(probe.started + self._params.probe_interval)
            if not probe.indirect_sent:
                times.append(probe.indirect_at)
        times.extend(s.deadline() for s in self._suspicions.values())
        gone = [m.since for m in self._members.values() if m.state not in _USABLE]
        times.extend(since + self._params.dead_reap for since in gone)
        if any(m.state is State.DEAD for m in self._members.values()):
            times.append(self._next_reconnect)
        return min(times)

    # -- driver calls --------------------------------------------------------------------------

    def join(self, addresses: Iterable[str], now: float) -> list[Send]:
        """Ask the members at `addresses` for their member lists (the answers are Syncs).
        Not retried here: the driver repeats the call if no Sync comes back."""
        if self._left:
            return []
        me = self._members[self._id]
        join = Join(self._id, self._address, me.incarnation)
        return [Send("", address, join) for address in addresses if address != self._address]

    def leave(self, now: float) -> list[Send]:
        """Announce LEFT to every usable member directly (a leave is rare and the group small,
        so it is told to all rather than left to gossip); this member then goes quiet."""
        if self._left:
            return []
        me = self._members[self._id]
        farewell = Update(self._id, self._address, State.LEFT, me.incarnation + 1, self._id)
        self._install(farewell, now)
        sends = [
            Send(m.id, m.address, self._ping(m.id, self._next_seq(), first=farewell))
            for m in self.members()
            if m.id != self._id and m.state in _USABLE
        ]
        self._left = True
        self._probe = None
        self._relays.clear()
        return sends

    def probe_failed(self, member_id: str, now: float) -> None:
        """The driver could not deliver to `member_id` (refused, unreachable). If it is being
        probed, its indirect probes go out on the next tick instead of after probe_timeout:
        re-read next_deadline."""
        probe = self._probe
        if probe is not None and probe.target == member_id and not probe.indirect_sent:
            probe.indirect_at = min(probe.indirect_at, now)

    def tick(self, now: float) -> list[Send]:
        """Run the timers that are due: indirect probes, the end of a probe period (suspect),
        suspicion expiry (dead), reaping, a reconnect ping, and the next probe."""
        if self._left:
            return []
        sends: list[Send] = []
        self._relays = {k: r for k, r in self._relays.items() if r.expires > now}
        probe = self._probe
        if probe is not None:
            if now >= probe.started + self._params.probe_interval:
                self._probe = None
                self._suspect(probe.target, now)
            elif not probe.indirect_sent and now >= probe.indirect_at:
                probe.indirect_sent = True
                sends.extend(self._indirect(probe))
        for member_id, suspicion in list(self._suspicions.items()):
            if now >= suspicion.deadline():
                suspect = self._members[member_id]
                dead = Update(
                    suspect.id, suspect.address, State.DEAD, suspect.incarnation, self._id
                )
                self._install(dead, now)
        self._reap(now)
        if now >= self._next_reconnect:
            self._next_reconnect = now + self._params.reconnect_interval
            sends.extend(self._reconnect())
        if now >= self._next_probe:
            sends.extend(self._start_probe(now))
        return sends

    def receive(self, message: Message, now: float) -> list[Send]:
        """Handle one message: merge its updates first, then answer it."""
        if self._left or message.sender == self._id:
            return []
        if isinstance(message, Sync):
            for update in message.members:
                self._merge(update, now)
            return []
        if isinstance(message, Join):
            self._merge(
                Update(
                    message.sender,
                    message.address,
                    State.ALIVE,
                    message.incarnation,
                    message.sender,
                ),
                now,
            )
            snapshot = tuple(_as_update(m) for m in self.members())
            return [Send(message.sender, message.address, Sync(self._id, snapshot))]
        for update in message.updates:
            self._merge(update, now)
        if message.sender not in self._members:
            # Direct contact proves it runs; incarnation 0 is the weakest ALIVE claim, so any
            # real claim about it still wins.
            self._merge(
                Update(message.sender, message.sender_address, State.ALIVE, 0, self._id), now
            )
        if isinstance(message, Ping):
            ack = Ack(message.seq, self._id, self._piggyback(message.sender), self._address)
            return [Send(message.sender, message.sender_address, ack)]
        if isinstance(message, PingReq):
            return self._relay(message, now)
        return self._acked(message)

    # -- probing -------------------------------------------------------------------------------

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _ping(self, to: str, seq: int, first: Update | None = None) -> Ping:
        return Ping(seq, self._id, self._piggyback(to, first), self._address)

    def _start_probe(self, now: float) -> list[Send]:
        interval = self._params.probe_interval
        # Fall back onto the grid unless far behind: a late driver must not cause a burst.
        late = self._next_probe + interval <= now
        self._next_probe = now + interval if late else self._next_probe + interval
        target = self._next_target()
        if target is None:
            return []
        seq = self._next_seq()
        self._probe = _Probe(target.id, target.address, seq, now, now + self._params.probe_timeout)
        return [Send(target.id, target.address, self._ping(target.id, seq))]

    def _next_target(self) -> Member | None:
        for reshuffle in (False, True):
            if reshuffle:
                self._order = [k for k in sorted(self._members) if self._probeable(k)]
                self._rng.shuffle(self._order)
                self._order_pos = 0
            while self._order_pos < len(self._order):
                candidate = self._order[self._order_pos]
                self._order_pos += 1
                if self._probeable(candidate):
                    return self._members[candidate]
        return None

    def _probeable(self, member_id: str) -> bool:
        member = self._members.get(member_id)
        return member is not None and member_id != self._id and member.state in _USABLE

    def _indirect(self, probe: _Probe) -> list[Send]:
        helpers = [
            m
            for m in self.members()
            if m.state is State.ALIVE and m.id not in (self._id, probe.target)
        ]
        chosen = self._rng.sample(helpers, min(self._params.indirect_probes, len(helpers)))
        return [
            Send(
                m.id,
                m.address,
                PingReq(
                    probe.seq,
                    self._id,
                    probe.target,
                    probe.address,
                    self._piggyback(m.id),
                    self._address,
                ),
            )
            for m in chosen
        ]

    def _relay(self, request: PingReq, now: float) -> list[Send]:
        if request.target == self._id:
            ack = Ack(request.seq, self._id, self._piggyback(request.sender), self._address)
            return [Send(request.sender, request.sender_address, ack)]
        seq = self._next_seq()
        # The requester gives up at the end of its probe period; so does the relay.
        expires = now + self._params.probe_interval
        self._relays[seq] = _Relay(request.sender, request.sender_address, request.seq, expires)
        ping = self._ping(request.target, seq)
        return [Send(request.target, request.target_address, ping)]

    def _acked(self, ack: Ack) -> list[Send]:
        if self._probe is not None and self._probe.seq == ack.seq:
            self._probe = None
            return []
        relay = self._relays.pop(ack.seq, None)
        if relay is None:
            return []  # late, or the answer to a reconnect ping: its updates were the point
        answer = Ack(relay.seq, self._id, self._piggyback(relay.requester), self._address)
        return [Send(relay.requester, relay.address, answer)]

    def _reconnect(self) -> list[Send]:
        dead = [m for m in self.members() if m.state is State.DEAD]
        if not dead:
            return []
        member = self._rng.choice(dead)
        # Untracked: if it is running, the DEAD claim this Ping carries makes it refute, and
        # its Ack brings the refutation back.
        return [Send(member.id, member.address, self._ping(member.id, self._next_seq()))]

    # -- the view ------------------------------------------------------------------------------

    def _merge(self, update: Update, now: float) -> None:
        if update.id == self._id:
            self._refute(update, now)
            return
        current = self._members.get(update.id)
        if current is None or _claim(update) > _claim(current):
            self._install(update, now)
        elif update.state is State.SUSPECT and _claim(update) == _claim(current):
            self._confirm(update.id, update.source)

    def _refute(self, update: Update, now: float) -> None:
        me = self._members[self._id]
        if self._left:
            return
        if update.incarnation < me.incarnation:
            if update.state is not State.ALIVE:
                # An accusation older than our last refutation: its holder missed that (a
                # partition healed since), and nobody else gossips it any more. Announce it again.
                self._enqueue(_as_update(me))
            return
        if (update.state, update.incarnation, update.address) == (
            State.ALIVE,
            me.incarnation,
            self._address,
        ):
            return  # our current claim, whoever relays it
        # Any other claim about us at our incarnation or above (suspect, dead, an old life's
        # ALIVE, another address) is overridden by a higher incarnation, which only we issue.
        refutation = Update(self._id, self._address, State.ALIVE, update.incarnation + 1, self._id)
        self._install(refutation, now)

    def _suspect(self, member_id: str, now: float) -> None:
        member = self._members.get(member_id)
        if member is None or member.state not in _USABLE:
            return
        if member.state is State.ALIVE:
            accusation = Update(
                member.id, member.address, State.SUSPECT, member.incarnation, self._id
            )
            self._install(accusation, now)
        else:
            self._confirm(member_id, self._id)

    def _confirm(self, member_id: str, accuser: str) -> None:
        suspicion = self._suspicions.get(member_id)
        if suspicion is None or not accuser or accuser in suspicion.accusers:
            return
        suspicion.accusers.add(accuser)
        # Re-gossip so that the others count this accuser too.
        self._enqueue(dataclasses.replace(_as_update(self._members[member_id]), source=accuser))

    def _install(self, update: Update, now: float) -> None:
        old = self._members.get(update.id)
        old_state = old.state if old is not None else None
        since = old.since if old is not None and old.state is update.state else now
        self._members[update.id] = Member(
            update.id, update.address, update.state, update.incarnation, since, update.source
        )
        if old_state is not update.state:
            self._events.append(Event(update.id, old_state, update.state))
        self._enqueue(update)
        if update.id == self._id:
            return
        self._suspicions.pop(update.id, None)
        if update.state is State.SUSPECT:
            self._suspicions[update.id] = self._new_suspicion(update.source, now)
        # A member that (re)appears mid-round is probed this round, not the next.
        reappeared = update.state in _USABLE and old_state not in _USABLE
        if reappeared and update.id not in self._order[self._order_pos :]:
            at = self._rng.randint(self._order_pos, len(self._order))
            self._order.insert(at, update.id)

    def _new_suspicion(self, accuser: str, now: float) -> _Suspicion:
        n = len(self.alive())
        shortest = self._params.suspicion_timeout * max(1.0, math.log10(n))
        needed = self._params.suspicion_confirmations
        return _Suspicion(
            started=now,
            shortest=shortest,
            longest=shortest * self._params.suspicion_max_mult,
            needed=needed if n - 2 >= needed else 0,
            accusers={accuser},
        )

    def _reap(self, now: float) -> None:
        expired = [
            k
            for k, m in self._members.items()
            if m.state not in _USABLE and now >= m.since + self._params.dead_reap
        ]
        for member_id in expired:
            del self._members[member_id]
            self._queue.pop(member_id, None)

    # -- gossip --------------------------------------------------------------------------------

    def _enqueue(self, update: Update) -> None:
        self._queued += 1
        self._queue[update.id] = _Queued(update, 0, self._queued)

    def _piggyback(self, to: str, first: Update | None = None) -> tuple[Update, ...]:
        """Updates for a message to `to`: `first` or our non-ALIVE claim about `to` (so it can
        refute at once), then the least-sent queued updates, newest first among equals."""
        if first is None:
            recipient = self._members.get(to)
            if recipient is not None and recipient.state is not State.ALIVE:
                first = _as_update(recipient)
        chosen = [first] if first is not None else []
        limit = self._retransmit_limit()
        for queued in sorted(self._queue.values(), key=lambda q: (q.transmits, -q.order)):
            if len(chosen) >= self._params.max_updates_per_message:
                break
            if first is not None and queued.update.id == first.id:
                continue
            chosen.append(queued.update)
            queued.transmits += 1
            if queued.transmits >= limit:
                del self._queue[queued.update.id]
        return tuple(chosen)

    def _retransmit_limit(self) -> int:
        n = len(self.alive())
        return self._params.retransmit_mult * math.ceil(math.log10(n + 1))

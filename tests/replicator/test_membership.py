"""SWIM membership: protocol steps on one member, then whole groups in a simulated network."""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.errors import MembershipError
from replicator.membership import Event, Member, Membership, MembershipParams, Send
from replicator.messages import Ack, Join, Ping, PingReq, State, Sync, Update, from_json

PARAMS = MembershipParams()


def addr(member_id: str) -> str:
    return f"http://{member_id}.test:8080"


def ids(n: int) -> list[str]:
    return [f"m{i:02d}" for i in range(n)]


def seeded(
    member_id: str, others: Iterable[str], params: MembershipParams | None = None
) -> Membership:
    seeds = [(o, addr(o)) for o in others]
    return Membership(member_id, addr(member_id), 0.0, params, seeds=seeds)


def known(node: Membership, member_id: str) -> Member:
    member = node.get(member_id)
    assert member is not None, f"{node!r} does not know {member_id}"
    return member


def longest_suspicion(params: MembershipParams, n: int) -> float:
    return params.suspicion_timeout * max(1.0, math.log10(n)) * params.suspicion_max_mult


# -- the simulator -------------------------------------------------------------------------------


Link = frozenset[str]


class Net:
    """Members on a virtual clock, exchanging messages through a seeded lossy, delaying network.

    Every message crosses as JSON (so every message the protocol produces is round-tripped), and
    every message is checked against max_updates_per_message. A crashed member is not ticked and
    receives nothing; an isolated one runs but every message to or from it is lost.
    """

    def __init__(
        self,
        params: MembershipParams = PARAMS,
        seed: int = 1,
        delay: tuple[float, float] = (0.005, 0.04),
    ) -> None:
        self.params = params
        self.rng = random.Random(seed)
        self.delay = delay
        self.now = 0.0
        self.nodes: dict[str, Membership] = {}
        self.by_address: dict[str, str] = {}
        self.crashed: set[str] = set()
        self.isolated: set[str] = set()
        self.loss: dict[Link, float] = {}
        self.queue: list[tuple[float, int, str, str, str]] = []
        self.counter = 0
        self.trace: list[tuple[float, str, Event]] = []
        self.sent: Counter[str] = Counter()
        self.ping_reqs: list[tuple[str, str, str]] = []  # (requester, helper, target)
        self.steps = 0

    def add(self, member_id: str, seeds: Iterable[str] = (), seed: int | None = None) -> None:
        node = Membership(
            member_id,
            addr(member_id),
            self.now,
            self.params,
            seed=self.rng.randrange(2**32) if seed is None else seed,
            seeds=[(s, addr(s)) for s in seeds],
        )
        self.nodes[member_id] = node
        self.by_address[addr(member_id)] = member_id
        self.crashed.discard(member_id)
        self.collect(member_id)

    def group(self, n: int) -> list[str]:
        members = ids(n)
        for m in members:
            self.add(m, seeds=members)
        return members

    def join(self, member_id: str, via: str) -> None:
        self.send(member_id, self.nodes[member_id].join([addr(via)], self.now))

    def collect(self, member_id: str) -> None:
        for event in self.nodes[member_id].events():
            self.trace.append((self.now, member_id, event))

    def send(self, src: str, sends: Iterable[Send]) -> None:
        for s in sends:
            message = s.message
            if isinstance(message, Ping | PingReq | Ack):
                assert len(message.updates) <= self.params.max_updates_per_message
            if isinstance(message, PingReq):
                self.ping_reqs.append((src, s.to, message.target))
            wire = json.dumps(message.to_json())
            assert from_json(json.loads(wire)) == message
            self.sent[type(message).__name__] += 1
            dst = self.by_address.get(s.address, "")
            if s.to:
                assert dst == s.to, f"{s} goes to {dst}'s address"
            link = frozenset((src, dst))
            lost = src in self.isolated or dst in self.isolated or src in self.crashed
            if lost or self.rng.random() < self.loss.get(link, 0.0):
                continue
            self.counter += 1
            at = self.now + self.rng.uniform(*self.delay)
            heapq.heappush(self.queue, (at, self.counter, src, dst, wire))

    def run(self, until: float, stop: Callable[[], bool] | None = None) -> float:
        """Advance to `until` (or until `stop()` holds); bounded in steps as well as time."""
        while not (stop is not None and stop()):
            self.steps += 1
            assert self.steps < 500_000, "simulation did not settle"
            live = [m for m in sorted(self.nodes) if m not in self.crashed]
            deadlines = [d for m in live if (d := self.nodes[m].next_deadline()) is not None]
            t_tick = min(deadlines, default=math.inf)
            t_msg = self.queue[0][0] if self.queue else math.inf
            t = min(t_tick, t_msg)
            if t > until:
                self.now = until
                break
            self.now = max(self.now, t)
            if t_msg <= t_tick:
                _, _, _, dst, wire = heapq.heappop(self.queue)
                if dst in self.nodes and dst not in self.crashed:
                    message = from_json(json.loads(wire))
                    self.send(dst, self.nodes[dst].receive(message, self.now))
                    self.collect(dst)
                continue
            for m in live:
                deadline = self.nodes[m].next_deadline()
                if deadline is not None and deadline <= self.now:
                    self.send(m, self.nodes[m].tick(self.now))
                    self.collect(m)
        return self.now

    def view(self, observer: str) -> dict[str, State]:
        return {m.id: m.state for m in self.nodes[observer].members()}

    def live(self) -> list[str]:
        return [m for m in sorted(self.nodes) if m not in self.crashed]

    def all_see(self, member_id: str, state: State) -> bool:
        return all(self.view(o).get(member_id) is state for o in self.live() if o != member_id)

    def all_alive(self, members: Iterable[str]) -> bool:
        expected = dict.fromkeys(members, State.ALIVE)
        return all(self.view(o) == expected for o in self.live())

    def transitions(self, observer: str, about: str) -> list[tuple[State | None, State]]:
        return [(e.old, e.new) for _, o, e in self.trace if o == observer and e.id == about]

    def events_to(self, state: State) -> list[tuple[float, str, Event]]:
        return [t for t in self.trace if t[2].new is state]


# -- one member, step by step -------------------------------------------------------------------


def first_probe(node: Membership) -> tuple[float, Send, Ping]:
    """Tick the member to its first probe; the Send and its Ping."""
    t = node.next_deadline()
    assert t is not None
    sends = node.tick(t)
    assert len(sends) == 1
    assert isinstance(sends[0].message, Ping)
    return t, sends[0], sends[0].message


def test_a_new_member_reports_itself_and_its_seeds_alive() -> None:
    node = seeded("a", ["b", "c", "a"])
    assert node.events() == [
        Event("a", None, State.ALIVE),
        Event("b", None, State.ALIVE),
        Event("c", None, State.ALIVE),
    ]
    assert node.events() == []  # drained
    assert node.alive() == ("a", "b", "c")
    assert [(m.id, m.state, m.incarnation) for m in node.members()] == [
        ("a", State.ALIVE, 0),
        ("b", State.ALIVE, 0),
        ("c", State.ALIVE, 0),
    ]
    assert node.get("b") == Member("b", addr("b"), State.ALIVE, 0, 0.0, "a")
    assert node.get("zz") is None
    assert "'a'" in repr(node)
    assert "incarnation=0" in repr(node)


def test_probe_without_ack_asks_k_helpers_then_suspects_at_period_end() -> None:
    others = ["b", "c", "d", "e"]
    node = seeded("a", others)
    t, ping, probe = first_probe(node)
    target = ping.to
    assert ping.address == addr(target)
    assert node.next_deadline() == pytest.approx(t + PARAMS.probe_timeout)

    indirect = node.tick(t + PARAMS.probe_timeout)
    assert len(indirect) == PARAMS.indirect_probes
    assert {s.to for s in indirect} <= set(others) - {target}
    for s in indirect:
        assert isinstance(s.message, PingReq)
        assert (s.message.seq, s.message.target) == (probe.seq, target)
        assert s.message.target_address == addr(target)
    assert node.next_deadline() == pytest.approx(t + PARAMS.probe_interval)

    node.events()
    after = node.tick(t + PARAMS.probe_interval)
    assert node.events() == [Event(target, State.ALIVE, State.SUSPECT)]
    suspect = node.get(target)
    assert suspect is not None
    assert (suspect.state, suspect.source) == (State.SUSPECT, "a")
    assert len(after) == 1  # the next period's probe, to someone else
    assert after[0].to != target
    assert node.alive() == ("a", "b", "c", "d", "e")  # a suspect is still usable


def test_each_round_probes_every_member_once_in_a_reshuffled_order() -> None:
    others = ["b", "c", "d", "e", "f", "g"]
    node = seeded("a", others)
    targets = []
    for _ in range(4 * len(others)):
        t = node.next_deadline()
        assert t is not None
        for s in node.tick(t):
            if isinstance(s.message, Ping):
                targets.append(s.to)
                node.receive(Ack(s.message.seq, s.to, (), s.address), t + 0.01)
    rounds = [tuple(targets[i : i + 6]) for i in range(0, 24, 6)]
    assert all(sorted(r) == others for r in rounds)
    assert len(set(rounds[1:])) > 1  # the first round is the order seeds were inserted in
    assert all(m.state is State.ALIVE for m in node.members())


@pytest.mark.parametrize("relayed", [False, True], ids=["direct", "relayed"])
def test_an_ack_with_the_probe_seq_completes_the_probe(relayed: bool) -> None:
    node = seeded("a", ["b", "c", "d"])
    t, ping, probe = first_probe(node)
    sender = next(o for o in "bcd" if o != ping.to) if relayed else ping.to
    assert node.receive(Ack(probe.seq, sender, (), addr(sender)), t + 0.1) == []
    assert node.next_deadline() == pytest.approx(t + PARAMS.probe_interval)
    sends = node.tick(t + PARAMS.probe_interval)
    assert all(m.state is State.ALIVE for m in node.members())
    assert [type(s.message) for s in sends] == [Ping]


def test_a_stale_ack_does_not_complete_the_probe() -> None:
    node = seeded("a", ["b", "c"])
    t, ping, probe = first_probe(node)
    node.receive(Ack(probe.seq + 100, ping.to, (), addr(ping.to)), t + 0.1)
    assert node.next_deadline() == pytest.approx(t + PARAMS.probe_timeout)


def test_probe_failed_sends_the_indirect_probes_at_once() -> None:
    node = seeded("a", ["b", "c", "d"])
    t, ping, _ = first_probe(node)
    node.probe_failed("c" if ping.to != "c" else "b", t + 0.01)  # not the target: no effect
    assert node.next_deadline() == pytest.approx(t + PARAMS.probe_timeout)
    node.probe_failed(ping.to, t + 0.01)
    assert node.next_deadline() == pytest.approx(t + 0.01)
    sends = node.tick(t + 0.01)
    assert len(sends) == 2
    assert all(isinstance(s.message, PingReq) for s in sends)


def test_a_ping_is_acked_to_its_sender_and_an_unknown_sender_is_learned() -> None:
    node = seeded("a", ["b"])
    node.events()
    sends = node.receive(Ping(41, "z", (), addr("z")), 1.0)
    assert len(sends) == 1
    assert (sends[0].to, sends[0].address) == ("z", addr("z"))
    assert isinstance(sends[0].message, Ack)
    assert (sends[0].message.seq, sends[0].message.sender) == (41, "a")
    assert node.events() == [Event("z", None, State.ALIVE)]


def test_a_ping_req_is_relayed_and_the_ack_returned_with_the_requesters_seq() -> None:
    helper = seeded("h", ["a", "t"])
    (ping,) = helper.receive(PingReq(7, "a", "t", addr("t"), (), addr("a")), 1.0)
    assert (ping.to, ping.address) == ("t", addr("t"))
    assert isinstance(ping.message, Ping)
    relay_seq = ping.message.seq
    (ack,) = helper.receive(Ack(relay_seq, "t", (), addr("t")), 1.1)
    assert (ack.to, ack.address) == ("a", addr("a"))
    assert isinstance(ack.message, Ack)
    assert (ack.message.seq, ack.message.sender) == (7, "h")
    assert helper.receive(Ack(relay_seq, "t", (), addr("t")), 1.2) == []  # relayed once


def test_a_relay_expires_after_one_probe_interval() -> None:
    helper = seeded("h", ["a", "t"])
    (ping,) = helper.receive(PingReq(7, "a", "t", addr("t"), (), addr("a")), 1.0)
    assert isinstance(ping.message, Ping)
    helper.tick(1.0 + PARAMS.probe_interval)
    assert helper.receive(Ack(ping.message.seq, "t", (), addr("t")), 2.1) == []


def test_a_join_is_answered_with_the_full_view_and_the_joiner_added() -> None:
    node = seeded("a", ["b"])
    node.events()
    (sync,) = node.receive(Join("j", addr("j"), 0), 1.0)
    assert (sync.to, sync.address) == ("j", addr("j"))
    assert isinstance(sync.message, Sync)
    assert [u.id for u in sync.message.members] == ["a", "b", "j"]
    assert node.events() == [Event("j", None, State.ALIVE)]

    joiner = Membership("j", addr("j"), 1.0)
    assert joiner.join([addr("a"), addr("j")], 1.0) == [
        Send("", addr("a"), Join("j", addr("j"), 0))
    ]
    assert joiner.receive(sync.message, 1.1) == []
    assert joiner.alive() == ("a", "b", "j")


def test_a_restarted_member_learns_its_old_incarnation_from_sync_and_goes_above_it() -> None:
    old_view = Sync(
        "a",
        (Update("r", addr("r"), State.DEAD, 6, "a"), Update("a", addr("a"), State.ALIVE, 0, "a")),
    )
    restarted = Membership("r", addr("r"), 0.0)
    restarted.receive(old_view, 0.1)
    me = restarted.get("r")
    assert me is not None
    assert (me.state, me.incarnation) == (State.ALIVE, 7)


def test_a_message_to_a_member_held_suspect_carries_that_claim_first() -> None:
    node = seeded("a", ["b"])
    accusation = Update("b", addr("b"), State.SUSPECT, 0, "c")
    node.receive(Sync("c", (accusation,)), 0.0)
    (ack,) = node.receive(Ping(1, "b", (), addr("b")), 0.1)
    assert isinstance(ack.message, Ack)
    assert ack.message.updates[0] == accusation
    assert [u.id for u in ack.message.updates].count("b") == 1


def test_the_suspect_refutes_and_its_refutation_clears_the_suspicion() -> None:
    a = seeded("a", ["b"])
    b = seeded("b", ["a"])
    a.receive(Sync("c", (Update("b", addr("b"), State.SUSPECT, 0, "c"),)), 0.0)
    (ack,) = a.receive(Ping(1, "b", (), addr("b")), 0.1)
    b.receive(ack.message, 0.2)
    b_self = b.get("b")
    assert b_self is not None
    assert (b_self.state, b_self.incarnation) == (State.ALIVE, 1)
    (reply,) = b.receive(Ping(2, "a", (), addr("a")), 0.3)
    a.receive(reply.message, 0.4)
    b_at_a = a.get("b")
    assert b_at_a is not None
    assert (b_at_a.state, b_at_a.incarnation) == (State.ALIVE, 1)
    assert [(e.old, e.new) for e in a.events() if e.id == "b"][-2:] == [
        (State.ALIVE, State.SUSPECT),
        (State.SUSPECT, State.ALIVE),
    ]


@pytest.mark.parametrize(
    ("local", "incoming", "expected"),
    [
        # SWIM's override rules, one row each; (state, incarnation).
        ((State.ALIVE, 1), (State.ALIVE, 2), (State.ALIVE, 2)),
        ((State.ALIVE, 1), (State.ALIVE, 1), (State.ALIVE, 1)),
        ((State.ALIVE, 2), (State.ALIVE, 1), (State.ALIVE, 2)),
        ((State.ALIVE, 1), (State.SUSPECT, 1), (State.SUSPECT, 1)),
        ((State.ALIVE, 2), (State.SUSPECT, 1), (State.ALIVE, 2)),
        ((State.SUSPECT, 1), (State.SUSPECT, 2), (State.SUSPECT, 2)),
        ((State.SUSPECT, 1), (State.ALIVE, 1), (State.SUSPECT, 1)),
        ((State.SUSPECT, 1), (State.ALIVE, 2), (State.ALIVE, 2)),
        ((State.ALIVE, 1), (State.DEAD, 1), (State.DEAD, 1)),
        ((State.SUSPECT, 1), (State.DEAD, 1), (State.DEAD, 1)),
        ((State.ALIVE, 2), (State.DEAD, 1), (State.ALIVE, 2)),
        ((State.DEAD, 1), (State.ALIVE, 1), (State.DEAD, 1)),
        ((State.DEAD, 1), (State.ALIVE, 2), (State.ALIVE, 2)),  # rejoin
        ((State.DEAD, 1), (State.SUSPECT, 1), (State.DEAD, 1)),
        ((State.DEAD, 1), (State.LEFT, 1), (State.LEFT, 1)),
        ((State.LEFT, 1), (State.DEAD, 1), (State.LEFT, 1)),
        ((State.LEFT, 1), (State.ALIVE, 2), (State.ALIVE, 2)),
    ],
)
def test_merge_rules(
    local: tuple[State, int], incoming: tuple[State, int], expected: tuple[State, int]
) -> None:
    node = seeded("a", [])
    node.receive(Sync("c", (Update("b", addr("b"), local[0], local[1], "c"),)), 0.0)
    node.receive(Sync("c", (Update("b", addr("b"), incoming[0], incoming[1], "c"),)), 0.1)
    b = node.get("b")
    assert b is not None
    assert (b.state, b.incarnation) == expected


claims = st.tuples(st.sampled_from(list(State)), st.integers(0, 5))


@settings(max_examples=100, deadline=None)
@given(st.lists(claims, max_size=12), st.randoms(use_true_random=False))
def test_the_view_is_the_greatest_claim_whatever_the_order(
    updates: list[tuple[State, int]], rnd: random.Random
) -> None:
    rank = {State.ALIVE: 0, State.SUSPECT: 1, State.DEAD: 2, State.LEFT: 3}
    shuffled = list(updates)
    rnd.shuffle(shuffled)
    results = []
    for order in (updates, shuffled):
        node = seeded("a", ["b"])
        for i, (state, inc) in enumerate(order):
            node.receive(Sync("c", (Update("b", addr("b"), state, inc, "c"),)), i * 0.01)
        b = node.get("b")
        assert b is not None
        results.append((b.state, b.incarnation))
    greatest = max([(State.ALIVE, 0), *updates], key=lambda c: (c[1], rank[c[0]]))
    assert results == [greatest, greatest]


@settings(max_examples=100, deadline=None)
@given(st.lists(claims, min_size=1, max_size=12))
def test_a_member_refutes_every_claim_that_it_is_not_alive(
    updates: list[tuple[State, int]],
) -> None:
    node = seeded("a", ["b"])
    for i, (state, inc) in enumerate(updates):
        node.receive(Sync("b", (Update("a", addr("a"), state, inc, "b"),)), i * 0.01)
    me = node.get("a")
    assert me is not None
    assert me.state is State.ALIVE
    assert all(me.incarnation >= inc for _, inc in updates)
    assert all(me.incarnation > inc for state, inc in updates if state is not State.ALIVE)
    assert [e for e in node.events() if e.id == "a"] == [Event("a", None, State.ALIVE)]


def test_a_claim_older_than_the_members_refutation_is_answered_with_its_current_claim() -> None:
    node = seeded("a", ["b"])
    node.receive(Sync("b", (Update("a", addr("a"), State.SUSPECT, 0, "b"),)), 0.0)
    assert known(node, "a").incarnation == 1
    # Gossip the refutation to its retransmit limit, so that only the fix can send it again.
    for seq in range(1, 20):
        node.receive(Ping(seq, "b", (), addr("b")), 0.1)
    (quiet,) = node.receive(Ping(20, "b", (), addr("b")), 0.2)
    assert isinstance(quiet.message, Ack)
    assert all(u.id != "a" for u in quiet.message.updates)
    stale = Update("a", addr("a"), State.DEAD, 0, "c")
    (ack,) = node.receive(Ping(21, "c", (stale,), addr("c")), 0.3)
    assert isinstance(ack.message, Ack)
    assert Update("a", addr("a"), State.ALIVE, 1, "a") in ack.message.updates
    assert known(node, "a").incarnation == 1  # nothing to refute: no new incarnation


@pytest.mark.parametrize(
    ("n", "confirmations", "dead_after"),
    [
        # 10 members: shortest 5 s, longest 15 s, 2 confirmations reach the shortest.
        (10, [], 15.0),
        (10, ["d"], 15.0 - math.log(2) / math.log(3) * 10.0),
        (10, ["d", "e"], 5.0),
        (10, ["d", "e", "f"], 5.0),
        (10, ["d", "d", "c"], 15.0 - math.log(2) / math.log(3) * 10.0),  # not independent
        # 20 members: the shortest grows with log10(n).
        (20, ["d", "e"], 5.0 * math.log10(20)),
        # 3 members cannot supply 2 confirmations: the shortest outright.
        (3, [], 5.0),
    ],
)
def test_suspicion_timeout_falls_with_independent_confirmations(
    n: int, confirmations: list[str], dead_after: float
) -> None:
    # A probe period far longer than the test keeps the member's own probes out of the count.
    params = MembershipParams(probe_interval=1000.0, probe_timeout=500.0)
    members = ["a", "b", "c", "d", "e", "f", *ids(n - 6)][:n]
    node = seeded("a", members, params=params)
    node.receive(Ping(1, "c", (Update("b", addr("b"), State.SUSPECT, 0, "c"),), addr("c")), 0.0)
    for i, accuser in enumerate(confirmations):
        update = Update("b", addr("b"), State.SUSPECT, 0, accuser)
        node.receive(Ping(2 + i, accuser, (update,), addr(accuser)), 0.0)
    node.tick(dead_after - 0.01)
    assert known(node, "b").state is State.SUSPECT
    node.tick(dead_after + 0.01)
    assert known(node, "b").state is State.DEAD


def test_dead_members_are_reaped_after_dead_reap() -> None:
    params = MembershipParams(dead_reap=60.0)
    node = seeded("a", ["b", "c"], params=params)
    node.receive(Sync("c", (Update("b", addr("b"), State.DEAD, 0, "c"),)), 10.0)
    deadline = node.next_deadline()
    assert deadline is not None
    assert deadline <= 70.0
    node.tick(69.9)
    assert node.get("b") is not None
    node.tick(70.0)
    assert node.get("b") is None
    assert [m.id for m in node.members()] == ["a", "c"]


def test_leave_tells_every_usable_member_and_goes_quiet() -> None:
    node = seeded("a", ["b", "c", "d"])
    node.receive(Sync("c", (Update("d", addr("d"), State.DEAD, 0, "c"),)), 0.0)
    node.events()
    sends = node.leave(1.0)
    assert sorted(s.to for s in sends) == ["b", "c"]
    for s in sends:
        assert isinstance(s.message, Ping)
        assert s.message.updates[0] == Update("a", addr("a"), State.LEFT, 1, "a")
    assert node.events() == [Event("a", State.ALIVE, State.LEFT)]
    assert node.next_deadline() is None
    assert node.tick(5.0) == []
    assert node.receive(Ping(3, "b", (), addr("b")), 5.0) == []
    assert node.leave(6.0) == []
    assert node.join([addr("b")], 6.0) == []
    assert "a" not in node.alive()


def test_gossip_sends_every_update_before_any_twice_and_stops_at_the_retransmit_limit() -> None:
    params = MembershipParams(max_updates_per_message=3)
    node = seeded("a", [], params=params)
    news = tuple(Update(f"n{i}", addr(f"n{i}"), State.ALIVE, 1, "x") for i in range(7))
    node.receive(Sync("x", news), 0.0)
    seen: Counter[str] = Counter()
    sizes = []
    for seq in range(200):
        (ack,) = node.receive(Ping(seq, "n0", (), addr("n0")), 0.1)
        assert isinstance(ack.message, Ack)
        sizes.append(len(ack.message.updates))
        seen.update(u.id for u in ack.message.updates)
        if seq == 2:  # 9 slots so far: each of the 8 queued updates (7 + "a") went once
            assert set(seen) == {"a"} | {u.id for u in news}
    limit = params.retransmit_mult * math.ceil(math.log10(len(node.alive()) + 1))
    assert max(sizes) == 3
    assert sizes[-1] == 0  # the queue drained
    assert set(seen.values()) == {limit}


def test_a_newer_update_about_a_member_replaces_the_queued_one() -> None:
    node = seeded("a", [], params=MembershipParams(max_updates_per_message=16))
    node.receive(Sync("x", (Update("b", addr("b"), State.ALIVE, 1, "x"),)), 0.0)
    node.receive(Sync("x", (Update("b", addr("b"), State.DEAD, 1, "x"),)), 0.0)
    (ack,) = node.receive(Ping(1, "c", (), addr("c")), 0.1)
    assert isinstance(ack.message, Ack)
    about_b = [u for u in ack.message.updates if u.id == "b"]
    assert about_b == [Update("b", addr("b"), State.DEAD, 1, "x")]


@pytest.mark.parametrize(
    "bad",
    [
        {"probe_interval": 0.0},
        {"probe_timeout": 1.0},
        {"probe_timeout": 0.0},
        {"suspicion_timeout": -1.0},
        {"suspicion_max_mult": 0.5},
        {"indirect_probes": -1},
        {"retransmit_mult": 0},
        {"max_updates_per_message": 0},
        {"dead_reap": 0.0},
        {"reconnect_interval": float("nan")},
    ],
)
def test_invalid_params_are_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(MembershipError):
        MembershipParams(**bad)


def test_an_empty_id_is_rejected() -> None:
    with pytest.raises(MembershipError):
        Membership("", addr("a"), 0.0)
    with pytest.raises(MembershipError):
        seeded("a", [""])


# -- whole groups --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [5, 10])
def test_a_configured_group_stays_all_alive_with_no_false_suspicion(n: int) -> None:
    net = Net(seed=n)
    members = net.group(n)
    net.run(until=40.0)
    assert net.all_alive(members)
    assert net.events_to(State.SUSPECT) == []
    assert all(m.incarnation == 0 for o in members for m in net.nodes[o].members())
    # Every member probed every other member at least once in 40 rounds.
    assert net.sent["Ping"] >= n * 30
    assert net.sent["PingReq"] == 0


@pytest.mark.parametrize(("n", "max_updates"), [(5, 16), (10, 16), (10, 2)])
def test_a_group_formed_by_joins_through_one_member_converges(n: int, max_updates: int) -> None:
    net = Net(MembershipParams(max_updates_per_message=max_updates), seed=n)
    members = ids(n)
    net.add(members[0])
    for m in members[1:]:
        net.add(m)
        net.join(m, via=members[0])
    converged_at = net.run(until=30.0, stop=lambda: net.all_alive(members))
    assert net.all_alive(members)
    assert converged_at < 10.0
    for observer in members:
        for other in members:
            assert net.transitions(observer, other)[0] == (None, State.ALIVE)
    assert net.events_to(State.SUSPECT) == []


@pytest.mark.parametrize("n", [5, 10])
def test_a_killed_member_is_suspected_then_declared_dead_everywhere_in_bounded_time(
    n: int,
) -> None:
    net = Net(seed=100 + n)
    members = net.group(n)
    victim = members[n // 2]
    net.run(until=5.0)
    net.crashed.add(victim)
    killed_at = net.now
    dead_at = net.run(until=120.0, stop=lambda: net.all_see(victim, State.DEAD))
    assert net.all_see(victim, State.DEAD)
    # Guaranteed: within two rounds (2(n-1) periods) everyone has probed the victim, so no
    # suspicion outlives its longest timeout. In practice the others' failed probes confirm
    # the first suspicion within about a round, which brings it down to the shortest: the
    # bound asserted is one round plus the shortest suspicion plus 3 s of slack for gossip.
    assert dead_at - killed_at < 2 * n * PARAMS.probe_interval + longest_suspicion(PARAMS, n)
    assert dead_at - killed_at < n * PARAMS.probe_interval + PARAMS.suspicion_timeout + 3.0
    for observer in members:
        if observer != victim:
            assert net.transitions(observer, victim)[1:] == [
                (State.ALIVE, State.SUSPECT),
                (State.SUSPECT, State.DEAD),
            ]
    # Nobody else was suspected, and the dead member is no longer probed.
    assert {e.id for _, _, e in net.events_to(State.SUSPECT)} == {victim}
    pings = net.sent["Ping"]
    net.run(until=dead_at + 20.0)
    assert net.sent["Ping"] - pings <= (n - 1) * 21  # one probe per live member per period
    assert all(
        o == victim or net.nodes[o].alive() == tuple(sorted(set(members) - {victim}))
        for o in members
    )


@pytest.mark.parametrize(
    ("indirect_probes", "suspected"), [(3, False), (0, True)], ids=["indirect", "control"]
)
def test_a_lossy_direct_link_does_not_get_a_member_suspected_thanks_to_indirect_probes(
    indirect_probes: int, suspected: bool
) -> None:
    net = Net(MembershipParams(indirect_probes=indirect_probes), seed=7)
    members = net.group(5)
    a, b = members[0], members[1]
    net.loss[frozenset((a, b))] = 1.0
    net.run(until=60.0)
    assert (net.events_to(State.SUSPECT) != []) is suspected
    assert net.events_to(State.DEAD) == []
    assert all(net.nodes[o].alive() == tuple(members) for o in members)
    if not suspected:
        assert net.all_alive(members)
        helped = {(r, t) for r, _, t in net.ping_reqs}
        assert helped == {(a, b), (b, a)}


def test_a_falsely_suspected_member_refutes_and_ends_alive_everywhere() -> None:
    net = Net(seed=11)
    members = net.group(5)
    victim = members[2]
    net.run(until=5.0)
    net.isolated.add(victim)
    net.run(until=8.0)
    net.isolated.discard(victim)
    accusers = {o for _, o, e in net.events_to(State.SUSPECT) if e.id == victim}
    assert accusers, "the isolation was long enough for someone to suspect the victim"
    net.run(until=30.0)
    assert net.all_alive(members)
    assert net.events_to(State.DEAD) == []
    for observer in members:
        seen = net.nodes[observer].get(victim)
        assert seen is not None
        assert seen.incarnation >= 1
    for accuser in accusers:
        assert net.transitions(accuser, victim)[-2:] == [
            (State.ALIVE, State.SUSPECT),
            (State.SUSPECT, State.ALIVE),
        ]


@pytest.mark.parametrize("how", ["join", "seeds"])
def test_a_dead_member_that_restarts_rejoins_and_is_alive_everywhere(how: str) -> None:
    net = Net(seed=21)
    members = net.group(5)
    victim = members[4]
    net.run(until=3.0)
    net.crashed.add(victim)
    net.run(until=60.0, stop=lambda: net.all_see(victim, State.DEAD))
    assert net.all_see(victim, State.DEAD)
    dead_incarnation = known(net.nodes[members[0]], victim).incarnation

    if how == "join":
        net.add(victim)
        net.join(victim, via=members[0])
    else:
        net.add(victim, seeds=members)
    restarted_at = net.now
    back_at = net.run(until=restarted_at + 30.0, stop=lambda: net.all_alive(members))
    assert net.all_alive(members)
    assert back_at - restarted_at < 5.0
    for observer in members:
        seen = net.nodes[observer].get(victim)
        assert seen is not None
        assert seen.incarnation > dead_incarnation
        if observer != victim:
            assert net.transitions(observer, victim)[-1] == (State.DEAD, State.ALIVE)


def test_a_healed_partition_reunites_after_both_sides_declared_each_other_dead() -> None:
    net = Net(MembershipParams(reconnect_interval=5.0), seed=31)
    members = net.group(5)
    left, right = members[:3], members[3:]
    for x in left:
        for y in right:
            net.loss[frozenset((x, y))] = 1.0

    def split() -> bool:
        return all(
            net.view(x)[y] is State.DEAD and net.view(y)[x] is State.DEAD
            for x in left
            for y in right
        )

    net.run(until=90.0, stop=split)
    assert split()
    net.loss.clear()
    healed_at = net.now
    reunited_at = net.run(until=healed_at + 60.0, stop=lambda: net.all_alive(members))
    assert net.all_alive(members)
    assert reunited_at - healed_at <= 2 * 5.0 + 5.0


@pytest.mark.parametrize("seed", [31, 32, 33])
def test_a_healed_partition_reunites_though_a_member_refuted_while_it_was_cut(seed: int) -> None:
    # The left side declared the right dead at its incarnation then; a right member that has
    # refuted a suspicion since is above that claim, and its refutation is no longer gossiped.
    net = Net(MembershipParams(reconnect_interval=5.0), seed=seed)
    members = net.group(5)
    left, right = members[:3], members[3:]
    for x in left:
        for y in right:
            net.loss[frozenset((x, y))] = 1.0
    net.run(until=90.0, stop=lambda: all(net.view(x)[y] is State.DEAD for x in left for y in right))
    victim, accuser = right
    declared = known(net.nodes[left[0]], victim).incarnation
    accusation = Update(victim, addr(victim), State.SUSPECT, declared, accuser)
    net.send(
        victim, net.nodes[victim].receive(Ping(1, accuser, (accusation,), addr(accuser)), net.now)
    )
    net.run(until=net.now + 30.0)
    assert known(net.nodes[victim], victim).incarnation > declared
    assert all(net.view(x)[y] is State.DEAD for x in left for y in right)
    net.loss.clear()
    healed_at = net.now
    reunited_at = net.run(until=healed_at + 60.0, stop=lambda: net.all_alive(members))
    assert net.all_alive(members)
    assert reunited_at - healed_at <= 2 * 5.0 + 5.0


@pytest.mark.parametrize("seed", range(40))
def test_after_any_run_of_partitions_lossy_links_and_restarts_a_healed_network_is_all_alive(
    seed: int,
) -> None:
    rng = random.Random(seed)
    net = Net(MembershipParams(reconnect_interval=5.0), seed=seed)
    members = net.group(rng.randint(3, 7))
    for _ in range(rng.randint(1, 6)):
        net.loss.clear()
        kind = rng.random()
        if kind < 0.4:  # a partition, clean or leaky
            side = set(rng.sample(members, rng.randint(1, len(members) - 1)))
            loss = rng.choice([1.0, 0.9, 0.5])
            for x in side:
                for y in set(members) - side:
                    net.loss[frozenset((x, y))] = loss
        elif kind < 0.8:  # some links lossy
            for x, y in itertools.combinations(members, 2):
                if rng.random() < 0.3:
                    net.loss[frozenset((x, y))] = rng.random()
        else:  # a member crashes and restarts, from its seeds or joining through another
            victim = rng.choice(members)
            net.crashed.add(victim)
            net.run(until=net.now + rng.uniform(0.5, 30.0))
            if rng.random() < 0.5:
                net.add(victim, seeds=members)
            else:
                net.add(victim)
                net.join(victim, via=rng.choice([m for m in members if m != victim]))
        net.run(until=net.now + rng.uniform(1.0, 40.0))
    net.loss.clear()
    healed_at = net.now
    reunited_at = net.run(until=healed_at + 120.0, stop=lambda: net.all_alive(members))
    assert net.all_alive(members), {x: net.view(x) for x in members}
    # 1,000 seeds of partitions and lossy links took at most 16 s, 300 with restarts 17 s.
    assert reunited_at - healed_at <= 6 * 5.0


def test_a_member_that_leaves_is_left_everywhere_and_never_suspected() -> None:
    net = Net(seed=41)
    members = net.group(5)
    leaver = members[1]
    net.run(until=3.0)
    net.send(leaver, net.nodes[leaver].leave(net.now))
    net.run(until=30.0)
    for observer in members:
        seen = net.nodes[observer].get(leaver)
        assert seen is not None
        assert (seen.state, seen.incarnation) == (State.LEFT, 1)
        assert net.transitions(observer, leaver)[-1] == (State.ALIVE, State.LEFT)
    assert net.events_to(State.SUSPECT) == []


def test_a_lossy_network_converges_without_declaring_anyone_dead() -> None:
    net = Net(seed=51)
    members = net.group(10)
    for i, x in enumerate(members):
        for y in members[i + 1 :]:
            net.loss[frozenset((x, y))] = 0.05
    net.run(until=60.0)
    assert net.events_to(State.DEAD) == []
    assert all(net.nodes[o].alive() == tuple(members) for o in members)
    # Loss does cause suspicions; each one raised well before the end was refuted.
    suspicions = [(t, o, e.id) for t, o, e in net.events_to(State.SUSPECT)]
    assert suspicions
    for t, observer, member in suspicions:
        if t < 50.0:
            later = [e for u, o, e in net.trace if u > t and o == observer and e.id == member]
            assert later[0] == Event(member, State.SUSPECT, State.ALIVE)


def test_simulations_are_deterministic_for_a_seed() -> None:
    def trace(seed: int) -> list[tuple[float, str, Event]]:
        net = Net(seed=seed)
        members = net.group(5)
        net.run(until=3.0)
        net.crashed.add(members[0])
        net.run(until=30.0)
        return net.trace

    assert trace(3) == trace(3)

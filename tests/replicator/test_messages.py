"""The members' own messages (replicator/messages.py): membership's, with their strict
parsing and forward compatibility, and coordination's cost rows and agreed topologies."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_common.errors import ReplicatorError, WireError
from replicator.errors import MembershipError
from replicator.messages import (
    Ack,
    Agreed,
    CostRow,
    Join,
    Message,
    Ping,
    PingReq,
    State,
    Sync,
    Update,
    from_json,
)
from replicator.topology import TopologyParams, compute


def addr(member_id: str) -> str:
    return f"http://{member_id}.test:8080"


# -- membership ---------------------------------------------------------------------------------


U = Update("b", addr("b"), State.SUSPECT, 3, "c")

MESSAGES: list[Message] = [
    Ping(1, "a", (U,), addr("a")),
    PingReq(2, "a", "b", addr("b"), (), addr("a")),
    Ack(3, "b", (U, Update("c", "", State.LEFT, 0, "c")), addr("b")),
    Join("j", addr("j"), 4),
    Sync("a", (U,)),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_messages_round_trip_through_json(message: Message) -> None:
    data = json.loads(json.dumps(message.to_json()))
    assert from_json(data) == message
    assert type(message).from_json(data) == message


texts = st.text(max_size=8)
nonempty = st.text(min_size=1, max_size=8)
counts = st.integers(0, 2**40)
updates_st = st.builds(Update, nonempty, texts, st.sampled_from(list(State)), counts, texts)
update_lists = st.lists(updates_st, max_size=4).map(tuple)
messages_st = st.one_of(
    st.builds(Ping, counts, nonempty, update_lists, texts),
    st.builds(PingReq, counts, nonempty, nonempty, texts, update_lists, texts),
    st.builds(Ack, counts, nonempty, update_lists, texts),
    st.builds(Join, nonempty, texts, counts),
    st.builds(Sync, nonempty, update_lists),
)


@settings(max_examples=100, deadline=None)
@given(messages_st)
def test_any_message_round_trips_through_json(message: Message) -> None:
    assert from_json(json.loads(json.dumps(message.to_json()))) == message


def ping_dict(**changes: object) -> dict[str, object]:
    data = Ping(1, "a", (U,), addr("a")).to_json()
    data.update(changes)
    return data


def with_update(**changes: object) -> dict[str, object]:
    update = U.to_json()
    update.update(changes)
    return ping_dict(updates=[update])


def without(data: dict[str, object], key: str) -> dict[str, object]:
    return {k: v for k, v in data.items() if k != key}


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        ([1, 2], "expected an object"),
        ("ping", "expected an object"),
        ({"seq": 1}, "unknown 'type'"),
        (ping_dict(type="pong"), "unknown 'type'"),
        (ping_dict(type=7), "unknown 'type'"),
        (without(ping_dict(), "seq"), "missing 'seq'"),
        (without(ping_dict(), "sender_address"), "missing 'sender_address'"),
        (ping_dict(seq="1"), "ping.seq: expected an integer"),
        (ping_dict(seq=True), "ping.seq: expected an integer"),
        (ping_dict(seq=1.0), "ping.seq: expected an integer"),
        (ping_dict(seq=-1), "must not be negative"),
        (ping_dict(sender=""), "ping.sender: must not be empty"),
        (ping_dict(sender=None), "ping.sender: expected a string"),
        (ping_dict(updates={"id": "b"}), "ping.updates: expected a list"),
        (ping_dict(updates=["b"]), "update: expected an object"),
        (with_update(state="zombie"), "unknown state 'zombie'"),
        (with_update(state=1), "update.state: expected a string"),
        (with_update(incarnation="3"), "update.incarnation: expected an integer"),
        (with_update(id=""), "update.id: must not be empty"),
        (without(U.to_json(), "source") | {"type": "ping"}, "missing"),
        ({**PingReq(2, "a", "b", "", (), "").to_json(), "target": 3}, "ping_req.target"),
        (without(Join("j", "", 0).to_json(), "incarnation"), "missing 'incarnation'"),
        ({**Sync("a", ()).to_json(), "members": None}, "sync.members: expected a list"),
    ],
)
def test_malformed_messages_raise_membership_error(data: object, complaint: str) -> None:
    with pytest.raises(MembershipError, match=complaint) as caught:
        from_json(data)
    assert isinstance(caught.value, ReplicatorError)


def test_a_parser_refuses_another_messages_type() -> None:
    with pytest.raises(MembershipError, match="expected 'ack'"):
        Ack.from_json(ping_dict())


def test_unknown_extra_keys_are_ignored_for_forward_compatibility() -> None:
    assert from_json(ping_dict(future="x")) == Ping(1, "a", (U,), addr("a"))


# -- coordination -------------------------------------------------------------------------------


PARAMS = TopologyParams(iterations=200)


def _row(member: str, version: int, costs: dict[str, float]) -> CostRow:
    return CostRow(member, version, f"http://{member}.example/", costs)


def _agreed(epoch: int, coordinator: str, members: Iterable[str] = "abcd") -> Agreed:
    names = list(members)
    costs = {(a, b): 1.0 for a in names for b in names if a != b}
    return Agreed(epoch, coordinator, compute(names, costs, PARAMS))


def test_a_cost_row_round_trips_through_json() -> None:
    row = _row("m1", 42, {"m2": 0.25, "m3": 1.5})
    text = json.dumps(row.to_json())
    again = CostRow.from_json(json.loads(text))
    assert again == row
    assert again.to_json() == row.to_json()
    assert "m1" in repr(row)
    assert "v42" in repr(row)


def test_integer_costs_are_read_as_floats() -> None:
    row = CostRow.from_json(
        {"member": "a", "version": 1, "public_url": "http://a/", "costs": {"b": 2}}
    )
    assert row.costs == {"b": 2.0}
    assert isinstance(row.costs["b"], float)


def test_an_agreed_topology_round_trips_through_json() -> None:
    agreed = _agreed(9, "m1", ["m1", "m2", "m3", "m4", "m5"])
    again = Agreed.from_json(json.loads(json.dumps(agreed.to_json())))
    assert again == agreed
    assert again.rank == (9, "m1")
    assert "epoch 9" in repr(agreed)


_ROW = {"member": "a", "version": 1, "public_url": "http://a/", "costs": {"b": 0.5}}


@pytest.mark.parametrize("missing", sorted(_ROW))
def test_a_cost_row_missing_a_key_is_refused(missing: str) -> None:
    value = {k: v for k, v in _ROW.items() if k != missing}
    with pytest.raises(WireError):
        CostRow.from_json(value)


@pytest.mark.parametrize(
    "change",
    [
        {"extra": 1},
        {"member": 7},
        {"member": None},
        {"public_url": ["http://a/"]},
        {"costs": [["b", 0.5]]},
        {"costs": "b=0.5"},
        {"version": "1"},
        {"version": 1.0},
        {"version": True},
        {"version": None},
        {"costs": {"b": "0.5"}},
        {"costs": {"b": None}},
        {"costs": {"b": True}},
        {"costs": {"b": -0.5}},
        {"costs": {"b": math.nan}},
        {"costs": {"b": math.inf}},
        {"costs": {"b": 0.5, "c": -1}},
    ],
)
def test_a_malformed_cost_row_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(WireError):
        CostRow.from_json({**_ROW, **change})


@pytest.mark.parametrize("value", [None, [], "row", 3])
def test_a_cost_row_that_is_not_an_object_is_refused(value: object) -> None:
    with pytest.raises(WireError):
        CostRow.from_json(value)


def test_nan_sent_as_json_is_refused() -> None:
    # Python's json writes and reads NaN: the check must not rely on the encoder.
    text = json.dumps({**_ROW, "costs": {"b": math.nan}})
    assert "NaN" in text
    with pytest.raises(WireError, match="finite"):
        CostRow.from_json(json.loads(text))


def _agreed_json() -> dict[str, object]:
    return _agreed(2, "a", "abc").to_json()


@pytest.mark.parametrize("missing", ["epoch", "coordinator", "topology"])
def test_an_agreed_topology_missing_a_key_is_refused(missing: str) -> None:
    value = _agreed_json()
    del value[missing]
    with pytest.raises(WireError):
        Agreed.from_json(value)


@pytest.mark.parametrize(
    "change",
    [
        {"extra": None},
        {"epoch": 0},
        {"epoch": -3},
        {"epoch": True},
        {"epoch": "2"},
        {"epoch": 2.0},
        {"epoch": None},
        {"coordinator": 1},
        {"coordinator": None},
        {"topology": None},
        {"topology": []},
        {"topology": {"members": ["a", "b"], "edges": []}},  # not connected
        {"topology": {"members": ["a", "b"], "edges": [{"a": "a", "b": "b", "cost": -1}]}},
        {"topology": {"members": ["a", "b"], "edges": [{"a": "a", "b": "b", "cost": math.nan}]}},
    ],
)
def test_a_malformed_agreed_topology_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(WireError):
        Agreed.from_json({**_agreed_json(), **change})


@pytest.mark.parametrize("value", [None, [], "agreed", 1])
def test_an_agreed_topology_that_is_not_an_object_is_refused(value: object) -> None:
    with pytest.raises(WireError) as raised:
        Agreed.from_json(value)
    assert isinstance(raised.value, ReplicatorError)

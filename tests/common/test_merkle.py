"""harvest_common.replication.merkle: the bucket function and hashes (pinned, since they are
protocol between members), incremental digests, tree shape, the comparison state machine and
its wire encoding."""

from __future__ import annotations

import hashlib
import random
import struct
from collections.abc import Callable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvest_common.errors import MerkleError, ReplicatorError
from harvest_common.replication.merkle import (
    BUCKET_BITS_DEFAULT,
    FANOUT,
    BucketDigests,
    Comparison,
    MerkleTree,
    NodeId,
    bucket_of,
    decode_ask,
    depth_of,
    differing_buckets,
    encode_ask,
    entry_hash,
)

FAST = settings(max_examples=40, deadline=None)

oids = st.text(max_size=24)
versions = st.binary(max_size=12)
collections = st.dictionaries(oids, versions, max_size=60)


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def answer(remote: MerkleTree) -> Callable[[list[NodeId]], dict[NodeId, bytes]]:
    return lambda ask: {node_id: remote.node(*node_id) for node_id in ask}


def run(
    cmp: Comparison, remote_hashes_for: Callable[[list[NodeId]], Mapping[NodeId, bytes]]
) -> list[int]:
    ask = cmp.start()
    while ask:
        ask = cmp.receive(remote_hashes_for(ask))
    return cmp.differing_buckets


# --- the bucket function and hashes: changing any of these breaks anti-entropy across versions


@pytest.mark.parametrize(
    ("oid", "bits", "bucket"),
    [
        # sha256("") = e3b0c442...
        ("", 4, 0xE),
        ("", 12, 0xE3B),
        ("", 20, 0xE3B0C),
        # sha256("https://example.org/") = 8198d1ba...
        ("https://example.org/", 12, 0x819),
        # sha256("é" as UTF-8) = 4a99557e...
        ("é", 8, 0x4A),
    ],
)
def test_bucket_of_is_pinned_to_a_sha256_prefix(oid: str, bits: int, bucket: int) -> None:
    assert bucket_of(oid, bits) == bucket
    by_hand = int(hashlib.sha256(oid.encode("utf-8")).hexdigest()[: bits // 4], 16)
    assert bucket_of(oid, bits) == by_hand


def test_bucket_of_defaults_to_4096_buckets() -> None:
    assert BUCKET_BITS_DEFAULT == 12
    assert bucket_of("https://example.org/") == 0x819


def test_entry_hash_is_pinned() -> None:
    oid, version = "https://example.org/", b"\x01\x02"
    expected = sha(b"\x00" + struct.pack(">I", len(oid)) + oid.encode() + version)
    assert entry_hash(oid, version) == expected
    assert expected.hex().startswith("87b323cb8cfc6a26")


def test_entry_hash_does_not_confuse_oid_and_version_bytes() -> None:
    assert entry_hash("ab", b"c") != entry_hash("a", b"bc")
    assert entry_hash("", b"ab") != entry_hash("a", b"b")


def test_leaf_and_inner_hashes_are_pinned() -> None:
    digests = BucketDigests(4)
    digests.add("x", b"v")
    bucket = bucket_of("x", 4)
    xor = entry_hash("x", b"v")
    assert digests.leaf(bucket) == sha(b"\x01" + (1).to_bytes(8, "big") + xor)
    empty = sha(b"\x01" + bytes(8) + bytes(32))
    tree = digests.tree()
    leaf = sha(b"\x01" + (1).to_bytes(8, "big") + xor)
    assert tree.leaves == tuple(leaf if b == bucket else empty for b in range(16))
    assert tree.root() == sha(b"\x02" + b"".join(tree.leaves))
    assert BucketDigests(4).tree().root().hex().startswith("32c91e4700eb8e71")


# --- bits


@pytest.mark.parametrize(("bits", "depth"), [(4, 2), (8, 3), (12, 4), (16, 5), (20, 6)])
def test_depth_follows_bits(bits: int, depth: int) -> None:
    assert depth_of(bits) == depth


@pytest.mark.parametrize("bits", [-4, 0, 2, 3, 5, 10, 11, 13, 24, 32])
@pytest.mark.parametrize(
    "use",
    [
        lambda bits: BucketDigests(bits),
        lambda bits: bucket_of("x", bits),
        lambda bits: MerkleTree.from_leaves([bytes(32)] * 16, bits),
        lambda bits: encode_ask([(0, 0)], bits),
        lambda bits: MerkleTree.from_wire(b"", bits),
    ],
    ids=["digests", "bucket_of", "from_leaves", "encode_ask", "from_wire"],
)
def test_irregular_or_out_of_range_bits_are_refused(
    bits: int, use: Callable[[int], object]
) -> None:
    with pytest.raises(MerkleError, match="bits must be a multiple of 4"):
        use(bits)


def test_merkle_error_is_a_replicator_error() -> None:
    assert issubclass(MerkleError, ReplicatorError)


# --- digests


@FAST
@given(collections, st.randoms(use_true_random=False))
def test_equal_sets_give_equal_roots_whatever_the_order(
    entries: dict[str, bytes], rnd: random.Random
) -> None:
    items = list(entries.items())
    shuffled = items[:]
    rnd.shuffle(shuffled)
    incremental = BucketDigests()
    for oid, version in shuffled:
        incremental.add(oid, version)
    assert incremental.tree() == BucketDigests.from_entries(items).tree()
    assert len(incremental) == len(entries)


@FAST
@given(collections, oids, versions)
def test_adding_an_entry_changes_the_root(
    entries: dict[str, bytes], oid: str, version: bytes
) -> None:
    digests = BucketDigests.from_entries(entries.items(), bits=8)
    before = digests.tree().root()
    digests.add(oid, version)
    assert digests.tree().root() != before


@FAST
@given(collections)
def test_add_then_remove_returns_to_the_empty_digest(entries: dict[str, bytes]) -> None:
    empty = BucketDigests()
    digests = BucketDigests()
    for oid, version in entries.items():
        digests.add(oid, version)
    digests.tree()  # caches leaves, so the removals must invalidate them
    for oid, version in entries.items():
        digests.remove(oid, version)
    assert len(digests) == 0
    assert digests.tree() == empty.tree()
    assert all(digests.count(b) == 0 for b in range(1 << BUCKET_BITS_DEFAULT))


def test_a_cancelled_pair_is_not_an_empty_bucket() -> None:
    digests = BucketDigests()
    digests.add("x", b"v")
    digests.add("x", b"v")  # the XORs cancel; the count does not
    bucket = bucket_of("x")
    assert digests.count(bucket) == 2
    assert digests.leaf(bucket) != BucketDigests().leaf(bucket)


def test_remove_from_an_empty_bucket_is_refused_and_changes_nothing() -> None:
    digests = BucketDigests()
    digests.add("a", b"1")
    before = digests.tree()
    other = next(f"o{i}" for i in range(1000) if bucket_of(f"o{i}") != bucket_of("a"))
    with pytest.raises(MerkleError, match="is empty"):
        digests.remove(other, b"1")
    with pytest.raises(MerkleError, match="is empty"):
        digests.replace(other, b"1", b"2")
    assert digests.tree() == before
    assert len(digests) == 1


def _digests(*entries: tuple[str, bytes]) -> MerkleTree:
    return BucketDigests.from_entries(entries).tree()


@pytest.mark.parametrize(
    ("start", "old", "new", "expected"),
    [
        pytest.param([("b", b"0")], None, b"1", [("b", b"0"), ("a", b"1")], id="insert"),
        pytest.param(
            [("a", b"1"), ("b", b"0")], b"1", b"2", [("a", b"2"), ("b", b"0")], id="update"
        ),
        pytest.param([("a", b"1"), ("b", b"0")], b"1", None, [("b", b"0")], id="hard-delete"),
        pytest.param([("a", b"1")], b"1", b"1", [("a", b"1")], id="same-version"),
        pytest.param([("b", b"0")], None, None, [("b", b"0")], id="absent-to-absent"),
    ],
)
def test_replace_moves_an_object_between_versions(
    start: list[tuple[str, bytes]],
    old: bytes | None,
    new: bytes | None,
    expected: list[tuple[str, bytes]],
) -> None:
    digests = BucketDigests.from_entries(start)
    digests.replace("a", old, new)
    assert digests.tree() == _digests(*expected)
    assert len(digests) == len(expected)


def test_leaf_reflects_changes_since_the_last_tree() -> None:
    digests = BucketDigests()
    bucket = bucket_of("a")
    empty_leaf = digests.leaf(bucket)
    digests.add("a", b"1")
    assert digests.leaf(bucket) != empty_leaf
    assert digests.tree().leaves[bucket] == digests.leaf(bucket)


@pytest.mark.parametrize("bucket", [-1, 4096, 10**6])
def test_out_of_range_buckets_are_refused(bucket: int) -> None:
    with pytest.raises(MerkleError, match="out of range"):
        BucketDigests().leaf(bucket)
    with pytest.raises(MerkleError, match="out of range"):
        BucketDigests().count(bucket)


@pytest.mark.parametrize(
    "use",
    [
        lambda: bucket_of("\ud800"),
        lambda: entry_hash("\ud800", b""),
        lambda: BucketDigests().add("\ud800", b""),
        lambda: BucketDigests.from_entries([("ok", b""), ("\ud800", b"")]),
    ],
    ids=["bucket_of", "entry_hash", "add", "from_entries"],
)
def test_oids_that_are_not_utf8_raise_merkle_errors(use: Callable[[], object]) -> None:
    with pytest.raises(MerkleError, match="UTF-8"):
        use()


def test_reprs_say_what_they_hold() -> None:
    digests = BucketDigests(8)
    digests.add("a", b"1")
    assert repr(digests) == "BucketDigests(bits=8, entries=1)"
    tree = digests.tree()
    assert repr(tree).startswith(f"MerkleTree(bits=8, depth=3, root={tree.root().hex()[:16]}")
    cmp = Comparison(tree, remote_bits=8)
    assert "state=new" in repr(cmp)


# --- tree shape


def test_tree_shape_and_children() -> None:
    tree = BucketDigests().tree()
    assert tree.depth == 4
    assert [len(level) for level in tree.levels] == [1, 16, 256, 4096]
    assert tree.children(0, 0) == [(1, i) for i in range(16)]
    assert tree.children(2, 3) == [(3, i) for i in range(48, 64)]
    assert tree.children(3, 4095) == []
    assert tree.node(2, 3) == sha(b"\x02" + b"".join(tree.levels[3][48:64]))


@pytest.mark.parametrize(("level", "index"), [(-1, 0), (0, 1), (1, 16), (4, 0), (3, 4096)])
def test_unknown_nodes_are_refused(level: int, index: int) -> None:
    tree = BucketDigests().tree()
    with pytest.raises(MerkleError, match="no node"):
        tree.node(level, index)
    with pytest.raises(MerkleError, match="no node"):
        tree.children(level, index)


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        ((), "has 2 levels"),
        (((bytes(32),),), "has 2 levels"),
        (((bytes(32),), (bytes(32),) * 15), "level 1 has 15 nodes"),
        (((bytes(32),), (bytes(32),) * 15 + (bytes(31),)), "not 32 bytes"),
    ],
)
def test_malformed_tree_shapes_are_refused(
    levels: tuple[tuple[bytes, ...], ...], message: str
) -> None:
    with pytest.raises(MerkleError, match=message):
        MerkleTree(4, levels)


def test_from_leaves_wants_one_leaf_per_bucket() -> None:
    with pytest.raises(MerkleError, match="15 leaves for bits=4"):
        MerkleTree.from_leaves([bytes(32)] * 15, 4)


# --- comparison


@pytest.mark.parametrize("bits", [4, 8, 12])
def test_one_changed_version_descends_one_path_to_its_bucket(bits: int) -> None:
    entries = {f"https://example.org/{i}": b"v1" for i in range(500)}
    local = BucketDigests.from_entries(entries.items(), bits)
    remote = BucketDigests.from_entries(entries.items(), bits)
    remote.replace("https://example.org/7", b"v1", b"v2")
    cmp = Comparison(local.tree(), remote_bits=bits)
    assert run(cmp, answer(remote.tree())) == [bucket_of("https://example.org/7", bits)]
    depth = depth_of(bits)
    assert cmp.round_trips == depth
    assert cmp.nodes_asked == 1 + FANOUT * (depth - 1)
    assert cmp.done


def test_equal_trees_take_one_round_trip_of_one_node() -> None:
    entries = [("a", b"1"), ("b", b"2")]
    cmp = Comparison(_digests(*entries), remote_bits=12)
    assert run(cmp, answer(_digests(*reversed(entries)))) == []
    assert (cmp.round_trips, cmp.nodes_asked) == (1, 1)


@FAST
@given(
    st.dictionaries(st.text(max_size=12), versions, min_size=1, max_size=200),
    st.randoms(use_true_random=False),
    st.integers(min_value=1, max_value=30),
)
def test_k_differences_are_found_exactly(
    entries: dict[str, bytes], rnd: random.Random, k: int
) -> None:
    local = BucketDigests.from_entries(entries.items(), bits=8)
    remote = BucketDigests.from_entries(entries.items(), bits=8)
    changed = rnd.sample(sorted(entries), min(k, len(entries)))
    for i, oid in enumerate(changed):
        # update, hard-delete and insert of a new object, in turn
        if i % 3 == 0:
            remote.replace(oid, entries[oid], entries[oid] + b"'")
        elif i % 3 == 1:
            remote.remove(oid, entries[oid])
        else:
            remote.add(oid + "\x00new", b"n")
    expected = sorted(
        {bucket_of(oid if i % 3 != 2 else oid + "\x00new", 8) for i, oid in enumerate(changed)}
    )
    local_tree, remote_tree = local.tree(), remote.tree()
    assert differing_buckets(local_tree, remote_tree) == expected
    brute_force = [
        b
        for b, (x, y) in enumerate(zip(local_tree.leaves, remote_tree.leaves, strict=True))
        if x != y
    ]
    assert expected == brute_force
    cmp = Comparison(local_tree, remote_bits=8)
    run(cmp, answer(remote_tree))
    # at most every bucket's path, and never more levels than the tree has
    assert cmp.round_trips == depth_of(8)
    assert cmp.nodes_asked <= 1 + FANOUT * (1 + len(expected))


def test_comparison_refuses_a_remote_with_other_bits() -> None:
    with pytest.raises(MerkleError, match="over 8 bits, ours 12"):
        Comparison(BucketDigests().tree(), remote_bits=8)
    with pytest.raises(MerkleError, match="over 8 bits, ours 12"):
        differing_buckets(BucketDigests().tree(), BucketDigests(8).tree())


def _after_root(local: MerkleTree, remote: MerkleTree) -> tuple[Comparison, list[NodeId]]:
    cmp = Comparison(local, remote_bits=local.bits)
    ask = cmp.receive(answer(remote)(cmp.start()))
    return cmp, ask


LOCAL = _digests(("a", b"1"), ("b", b"1"))
REMOTE = _digests(("a", b"2"), ("b", b"1"))


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda hashes: {**hashes, (2, 0): bytes(32)}, "1 nodes not asked"),
        (lambda hashes: dict(list(hashes.items())[1:]), "omitted 1 asked"),
        (lambda hashes: {k: v[:31] for k, v in hashes.items()}, "is 31 bytes"),
        (lambda hashes: {k: bytes(32) for k in hashes}, "tree changed during the round"),
    ],
    ids=["unasked", "omitted", "short-hash", "inconsistent"],
)
def test_bad_answers_fail_the_comparison(
    tamper: Callable[[dict[NodeId, bytes]], dict[NodeId, bytes]], message: str
) -> None:
    cmp, ask = _after_root(LOCAL, REMOTE)
    assert ask == [(1, i) for i in range(16)]
    with pytest.raises(MerkleError, match=message):
        cmp.receive(tamper(answer(REMOTE)(ask)))
    with pytest.raises(MerkleError, match="is failed"):
        cmp.receive(answer(REMOTE)(ask))
    with pytest.raises(MerkleError, match="failed, not done"):
        _ = cmp.differing_buckets


def test_a_remote_tree_rebuilt_mid_round_is_detected() -> None:
    # The root came from REMOTE; the children now come from a tree with one more change.
    cmp, ask = _after_root(LOCAL, REMOTE)
    rebuilt = _digests(("a", b"2"), ("b", b"2"))
    with pytest.raises(MerkleError, match="tree changed during the round"):
        cmp.receive(answer(rebuilt)(ask))


def test_comparison_state_machine_is_strict() -> None:
    cmp = Comparison(LOCAL, remote_bits=12)
    with pytest.raises(MerkleError, match="receive\\(\\) on a comparison that is new"):
        cmp.receive({})
    with pytest.raises(MerkleError, match="new, not done"):
        _ = cmp.differing_buckets
    assert cmp.start() == [(0, 0)]
    with pytest.raises(MerkleError, match="start\\(\\) on a comparison that is asking"):
        cmp.start()
    run_rest = cmp.receive({(0, 0): LOCAL.root()})
    assert run_rest == []
    assert cmp.differing_buckets == []
    with pytest.raises(MerkleError, match="is done"):
        cmp.receive({})


# --- wire


def test_answer_wire_layout_is_pinned() -> None:
    tree = BucketDigests().tree()
    wire = tree.to_wire([(0, 0), (1, 2)])
    assert wire == (
        bytes([1, 2, 12])
        + (2).to_bytes(4, "big")
        + bytes([0])
        + (0).to_bytes(4, "big")
        + tree.root()
        + bytes([1])
        + (2).to_bytes(4, "big")
        + tree.node(1, 2)
    )
    assert encode_ask([(1, 2), (0, 0)], 12) == (
        bytes([1, 1, 12])
        + (2).to_bytes(4, "big")
        + bytes([0])
        + (0).to_bytes(4, "big")
        + bytes([1])
        + (2).to_bytes(4, "big")
    )


node_ids = st.integers(min_value=0, max_value=2).flatmap(
    lambda level: st.tuples(st.just(level), st.integers(0, FANOUT**level - 1))
)


@FAST
@given(collections, st.lists(node_ids, max_size=40))
def test_wire_round_trips(entries: dict[str, bytes], ids: list[NodeId]) -> None:
    tree = BucketDigests.from_entries(entries.items(), bits=8).tree()
    assert MerkleTree.from_wire(tree.to_wire(ids), 8) == {i: tree.node(*i) for i in ids}
    assert decode_ask(encode_ask(ids, 8), 8) == sorted(set(ids))


def test_a_comparison_over_the_wire_finds_the_difference() -> None:
    local = BucketDigests.from_entries([(f"o{i}", b"1") for i in range(300)]).tree()
    remote = BucketDigests.from_entries([(f"o{i}", b"1" if i != 42 else b"2") for i in range(300)])
    remote_tree = remote.tree()

    def over_the_wire(ask: list[NodeId]) -> dict[NodeId, bytes]:
        request = encode_ask(ask, local.bits)
        response = remote_tree.to_wire(decode_ask(request, remote_tree.bits))
        return MerkleTree.from_wire(response, local.bits)

    assert run(Comparison(local, remote_bits=remote.bits), over_the_wire) == [bucket_of("o42")]


GOOD = BucketDigests(8).tree().to_wire([(0, 0), (1, 3)])
GOOD_ASK = encode_ask([(0, 0), (2, 255)], 8)


def _record(level: int, index: int) -> bytes:
    return bytes([level]) + index.to_bytes(4, "big") + bytes(32)


def _answer(bits: int, *records: bytes, count: int | None = None) -> bytes:
    n = len(records) if count is None else count
    return bytes([1, 2, bits]) + n.to_bytes(4, "big") + b"".join(records)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "truncated answer: 0 bytes"),
        (GOOD[:6], "truncated answer: 6 bytes"),
        (GOOD[:-1], "must be 81 bytes, not 80"),
        (GOOD + b"\x00", "must be 81 bytes, not 82"),
        (_answer(8, _record(0, 0), count=2), "must be 81 bytes, not 44"),
        (_answer(12, _record(0, 0)), "tree over 12 bits, ours has 8"),
        (_answer(8, _record(3, 0)), "names node \\(3, 0\\)"),
        (_answer(8, _record(1, 16)), "names node \\(1, 16\\)"),
        (_answer(8, _record(0, 1)), "names node \\(0, 1\\)"),
        (_answer(8, _record(1, 2), _record(1, 2)), "out of order or twice"),
        (_answer(8, _record(1, 2), _record(0, 0)), "out of order or twice"),
        (b"\x02" + GOOD[1:], "unknown wire format version 2"),
        (GOOD_ASK, "expected an answer, got record kind 1"),
    ],
    ids=[
        "empty",
        "short-header",
        "truncated-record",
        "trailing-byte",
        "count-exceeds-data",
        "bits-mismatch",
        "unknown-level",
        "unknown-index",
        "second-root",
        "duplicate",
        "unordered",
        "version",
        "kind",
    ],
)
def test_malformed_answers_are_refused(data: bytes, message: str) -> None:
    assert MerkleTree.from_wire(GOOD, 8).keys() == {(0, 0), (1, 3)}
    with pytest.raises(MerkleError, match=message):
        MerkleTree.from_wire(data, 8)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (GOOD_ASK[:-1], "must be 17 bytes, not 16"),
        (GOOD, "expected an ask, got record kind 2"),
        (encode_ask([(0, 0)], 12), "ask is for a tree over 12 bits"),
        (bytes([1, 1, 8, 0, 0, 0, 1, 3, 0, 0, 0, 0]), "names node \\(3, 0\\)"),
    ],
)
def test_malformed_asks_are_refused(data: bytes, message: str) -> None:
    assert decode_ask(GOOD_ASK, 8) == [(0, 0), (2, 255)]
    with pytest.raises(MerkleError, match=message):
        decode_ask(data, 8)


def test_encoding_unknown_nodes_is_refused() -> None:
    with pytest.raises(MerkleError, match="no node \\(2, 0\\)"):
        encode_ask([(2, 0)], 4)
    with pytest.raises(MerkleError, match="no node \\(1, 16\\)"):
        BucketDigests(4).tree().to_wire([(1, 16)])

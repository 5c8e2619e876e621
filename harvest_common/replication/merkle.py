"""Merkle-tree anti-entropy: the summary of a collection that two replicas compare to find, in one
round trip per tree level, the hash buckets whose objects they disagree on.

This module owns the bucket function, the entry hash, the incremental per-bucket digests, the
immutable tree built over them, the wire encoding of asked node ids and answered node hashes, and
the state machine of one comparison round. It does no I/O: a driver carries the bytes.

Why it is built this way:

- An object's bucket is a prefix of sha256(oid), never of its version, so two replicas holding
  different versions of an object put it in the same bucket. The bucket function and every hash
  encoding below are protocol between members (and between releases): tests pin their values.
- A bucket's digest is the XOR of its entries' hashes plus a count: independent of insertion
  order, and O(1) to update as changes commit, so the database keeps it current instead of
  rescanning. The count goes into the leaf hash so that an empty bucket differs from one whose
  hashes cancel out. An XOR set hash can be forged by someone who chooses entries freely; the
  members of one replication group trust each other, so that is acceptable here.
- ``bits`` must be a multiple of 4 (log2 FANOUT) in 4..20, so the tree is regular: level ``l``
  has FANOUT**l nodes and every inner node has exactly FANOUT children. Irregular top levels
  would buy nothing worth their special cases.
- Entry, leaf and inner hashes are domain-separated by a leading byte, so a value of one kind
  can never stand for another.
- A comparison asks all FANOUT children of each differing node in one round trip and checks
  that they hash to the parent the remote sent before. A remote whose tree changed between round
  trips (answering from live digests instead of one snapshot) is then reported, not trusted to
  yield a complete set of differing buckets.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from harvest_common.errors import MerkleError

BUCKET_BITS_DEFAULT = 12  # 4096 leaf buckets
FANOUT = 16  # children per inner node
FANOUT_BITS = 4  # log2(FANOUT): bits must be a multiple of it
MIN_BITS = 4
MAX_BITS = 20
HASH_SIZE = 32

NodeId = tuple[int, int]  # (level, index); level 0 is the root, level depth-1 the leaves

_ENTRY = b"\x00"
_LEAF = b"\x01"
_INNER = b"\x02"

# Wire: header (format version, kind, bits, record count), then records sorted by node id,
# each a (level, index) and, in an answer, the node's hash.
_WIRE_VERSION = 1
_ASK = 1
_ANSWER = 2
_HEADER = struct.Struct(">BBBI")
_NODE_ID = struct.Struct(">BI")
_KIND_NAMES = {_ASK: "ask", _ANSWER: "answer"}


def check_bits(bits: int) -> int:
    """``bits`` if it makes a regular tree (a multiple of 4 in 4..20), else MerkleError."""
    if not MIN_BITS <= bits <= MAX_BITS or bits % FANOUT_BITS:
        raise MerkleError(
            f"bits must be a multiple of {FANOUT_BITS} in {MIN_BITS}..{MAX_BITS}, not {bits}"
        )
    return bits


def depth_of(bits: int) -> int:
    """The number of levels of a tree over 2**bits buckets, root and leaves included."""
    return check_bits(bits) // FANOUT_BITS + 1


def _encode_oid(oid: str) -> bytes:
    try:
        return oid.encode("utf-8")
    except UnicodeEncodeError as e:
        raise MerkleError(f"object id {oid!r} is not valid UTF-8 text") from e


def bucket_of(oid: str, bits: int = BUCKET_BITS_DEFAULT) -> int:
    """The bucket of ``oid``: the first ``bits`` bits of sha256(oid as UTF-8), big-endian."""
    shift = 32 - check_bits(bits)
    return int.from_bytes(hashlib.sha256(_encode_oid(oid)).digest()[:4], "big") >> shift


def _entry_input(oid: bytes, version: bytes) -> bytes:
    # The oid's length makes the split between oid and version unambiguous.
    return _ENTRY + len(oid).to_bytes(4, "big") + oid + version


def entry_hash(oid: str, version: bytes) -> bytes:
    """The 32-byte hash of one (oid, version) entry."""
    return hashlib.sha256(_entry_input(_encode_oid(oid), version)).digest()


def _leaf_digest(count: int, xor: int) -> bytes:
    return hashlib.sha256(
        _LEAF + count.to_bytes(8, "big") + xor.to_bytes(HASH_SIZE, "big")
    ).digest()


def _inner_digest(children: Iterable[bytes]) -> bytes:
    return hashlib.sha256(_INNER + b"".join(children)).digest()


_EMPTY_LEAF = _leaf_digest(0, 0)


class BucketDigests:
    """The per-bucket set hashes of a collection: mutable and incremental, so a database can keep
    them current as changes commit. Each bucket holds the XOR of its entries' hashes and their
    count; the caller guarantees one entry per object (it adds, removes and replaces versions as
    its rows change), which the digests cannot check."""

    __slots__ = ("_bits", "_counts", "_dirty", "_leaves", "_shift", "_total", "_xors")

    def __init__(self, bits: int = BUCKET_BITS_DEFAULT) -> None:
        self._bits = check_bits(bits)
        self._shift = 32 - bits
        size = 1 << bits
        self._xors = [0] * size
        self._counts = [0] * size
        self._total = 0
        # Leaf digests are cached: tree() rehashes only the buckets that changed since.
        self._leaves = [_EMPTY_LEAF] * size
        self._dirty: set[int] = set()

    @classmethod
    def from_entries(
        cls, entries: Iterable[tuple[str, bytes]], bits: int = BUCKET_BITS_DEFAULT
    ) -> BucketDigests:
        """The digests of ``entries``, one (oid, version) per object."""
        digests = cls(bits)
        xors, counts, shift = digests._xors, digests._counts, digests._shift
        # The loop inlines bucket_of and entry_hash: it runs over whole collections.
        sha256, from_bytes = hashlib.sha256, int.from_bytes
        try:
            for oid, version in entries:
                raw = oid.encode("utf-8")
                bucket = from_bytes(sha256(raw).digest()[:4], "big") >> shift
                entry = sha256(_ENTRY + len(raw).to_bytes(4, "big") + raw + version).digest()
                xors[bucket] ^= from_bytes(entry, "big")
                counts[bucket] += 1
        except UnicodeEncodeError as e:
            raise MerkleError(f"an object id is not valid UTF-8 text: {e}") from e
        digests._total = sum(counts)
        digests._dirty.update(bucket for bucket, count in enumerate(counts) if count)
        return digests

    @property
    def bits(self) -> int:
        return self._bits

    def __len__(self) -> int:
        return self._total

    def __repr__(self) -> str:
        return f"BucketDigests(bits={self._bits}, entries={self._total})"

    def _check_bucket(self, bucket: int) -> None:
        if not 0 <= bucket < len(self._counts):
            raise MerkleError(f"bucket {bucket} out of range for bits={self._bits}")

    def _toggle(self, bucket: int, raw_oid: bytes, version: bytes, delta: int) -> None:
        entry = hashlib.sha256(_entry_input(raw_oid, version)).digest()
        self._xors[bucket] ^= int.from_bytes(entry, "big")
        self._counts[bucket] += delta
        self._total += delta
        self._dirty.add(bucket)

    def _bucket(self, raw_oid: bytes) -> int:
        return int.from_bytes(hashlib.sha256(raw_oid).digest()[:4], "big") >> self._shift

    def _require_entries(self, bucket: int, oid: str) -> None:
        # A removal from an empty bucket is certainly a caller's bookkeeping bug; one from a
        # non-empty bucket cannot be told apart from a correct one.
        if not self._counts[bucket]:
            raise MerkleError(f"cannot remove {oid!r}: its bucket {bucket} is empty")

    def add(self, oid: str, version: bytes) -> None:
        """Count the entry (oid, version) in its bucket."""
        raw = _encode_oid(oid)
        self._toggle(self._bucket(raw), raw, version, 1)

    def remove(self, oid: str, version: bytes) -> None:
        """Take out the entry (oid, version) added before; MerkleError if its bucket is empty."""
        raw = _encode_oid(oid)
        bucket = self._bucket(raw)
        self._require_entries(bucket, oid)
        self._toggle(bucket, raw, version, -1)

    def replace(self, oid: str, old: bytes | None, new: bytes | None) -> None:
        """Move ``oid`` from version ``old`` to ``new``; None on one side means absent, so this
        also inserts (old None) and hard-deletes (new None). Equal sides change nothing."""
        if old == new:
            return
        raw = _encode_oid(oid)
        bucket = self._bucket(raw)
        if old is not None:
            self._require_entries(bucket, oid)
            self._toggle(bucket, raw, old, -1)
        if new is not None:
            self._toggle(bucket, raw, new, 1)

    def count(self, bucket: int) -> int:
        """The number of entries in ``bucket``."""
        self._check_bucket(bucket)
        return self._counts[bucket]

    def leaf(self, bucket: int) -> bytes:
        """The 32-byte leaf digest of ``bucket``: its XOR and count, hashed together."""
        self._check_bucket(bucket)
        if bucket in self._dirty:
            self._leaves[bucket] = _leaf_digest(self._counts[bucket], self._xors[bucket])
            self._dirty.discard(bucket)
        return self._leaves[bucket]

    def tree(self) -> MerkleTree:
        """An immutable snapshot of the tree over the current digests."""
        leaves, counts, xors = self._leaves, self._counts, self._xors
        for bucket in self._dirty:
            leaves[bucket] = _leaf_digest(counts[bucket], xors[bucket])
        self._dirty.clear()
        return MerkleTree.from_leaves(leaves, self._bits)


@dataclass(frozen=True, slots=True, repr=False)
class MerkleTree:
    """Immutable snapshot: levels[0] = (root,), levels[-1] = the leaves, level ``l`` holds
    FANOUT**l nodes. Node ids are (level, index). An inner node is the hash of its children's
    hashes concatenated. Construction checks the shape, not the hashes: from_leaves computes
    them."""

    bits: int
    levels: tuple[tuple[bytes, ...], ...]

    def __post_init__(self) -> None:
        depth = depth_of(self.bits)
        if len(self.levels) != depth:
            raise MerkleError(
                f"a tree over {self.bits} bits has {depth} levels, not {len(self.levels)}"
            )
        for level, nodes in enumerate(self.levels):
            if len(nodes) != FANOUT**level:
                raise MerkleError(f"level {level} has {len(nodes)} nodes, not {FANOUT**level}")
            if any(len(node) != HASH_SIZE for node in nodes):
                raise MerkleError(f"level {level} has a hash that is not {HASH_SIZE} bytes")

    @classmethod
    def from_leaves(cls, leaves: Sequence[bytes], bits: int) -> MerkleTree:
        """The tree over ``leaves`` (2**bits leaf digests, in bucket order)."""
        if len(leaves) != 1 << check_bits(bits):
            raise MerkleError(f"{len(leaves)} leaves for bits={bits}, not {1 << bits}")
        levels = [tuple(leaves)]
        while len(levels[-1]) > 1:
            below = levels[-1]
            levels.append(
                tuple(_inner_digest(below[i : i + FANOUT]) for i in range(0, len(below), FANOUT))
            )
        return cls(bits, tuple(reversed(levels)))

    @property
    def depth(self) -> int:
        """The number of levels, root and leaves included."""
        return len(self.levels)

    @property
    def leaves(self) -> tuple[bytes, ...]:
        return self.levels[-1]

    def __repr__(self) -> str:
        return f"MerkleTree(bits={self.bits}, depth={self.depth}, root={self.root().hex()[:16]}…)"

    def root(self) -> bytes:
        return self.levels[0][0]

    def _check_node(self, level: int, index: int) -> None:
        if not (0 <= level < len(self.levels) and 0 <= index < len(self.levels[level])):
            raise MerkleError(f"no node ({level}, {index}) in a tree over {self.bits} bits")

    def node(self, level: int, index: int) -> bytes:
        """The hash of node (level, index); MerkleError if the tree has no such node."""
        self._check_node(level, index)
        return self.levels[level][index]

    def children(self, level: int, index: int) -> list[NodeId]:
        """The ids of the children of (level, index), in order; none for a leaf."""
        self._check_node(level, index)
        if level == len(self.levels) - 1:
            return []
        first = index * FANOUT
        return [(level + 1, child) for child in range(first, first + FANOUT)]

    def to_wire(self, ids: Iterable[NodeId]) -> bytes:
        """The answer to an ask: the hashes of the nodes ``ids``, encoded for the wire."""
        records = [(node_id, self.node(*node_id)) for node_id in sorted(set(ids))]
        return _encode(_ANSWER, self.bits, records)

    @staticmethod
    def from_wire(data: bytes, bits: int) -> dict[NodeId, bytes]:
        """The node hashes of an answer encoded by to_wire for a tree over ``bits``;
        MerkleError if ``data`` is malformed or describes another shape of tree."""
        return dict(_decode(data, _ANSWER, bits))


def encode_ask(ids: Iterable[NodeId], bits: int) -> bytes:
    """The node ids to ask a remote tree over ``bits`` for, encoded for the wire."""
    depth = depth_of(bits)
    records = sorted(set(ids))
    for level, index in records:
        if not (0 <= level < depth and 0 <= index < FANOUT**level):
            raise MerkleError(f"no node ({level}, {index}) in a tree over {bits} bits")
    return _encode(_ASK, bits, [(node_id, b"") for node_id in records])


def decode_ask(data: bytes, bits: int) -> list[NodeId]:
    """The node ids of an ask encoded by encode_ask for a tree over ``bits``, sorted;
    MerkleError if ``data`` is malformed or describes another shape of tree."""
    return [node_id for node_id, _ in _decode(data, _ASK, bits)]


def _encode(kind: int, bits: int, records: Sequence[tuple[NodeId, bytes]]) -> bytes:
    parts = [_HEADER.pack(_WIRE_VERSION, kind, bits, len(records))]
    for (level, index), digest in records:
        parts.append(_NODE_ID.pack(level, index))
        parts.append(digest)
    return b"".join(parts)


def _decode(data: bytes, kind: int, bits: int) -> list[tuple[NodeId, bytes]]:
    depth = depth_of(bits)
    name = _KIND_NAMES[kind]
    if len(data) < _HEADER.size:
        raise MerkleError(
            f"truncated {name}: {len(data)} bytes, the header alone is {_HEADER.size}"
        )
    version, got_kind, got_bits, count = _HEADER.unpack_from(data)
    if version != _WIRE_VERSION:
        raise MerkleError(f"unknown wire format version {version} in {name}")
    if got_kind != kind:
        raise MerkleError(f"expected an {name}, got record kind {got_kind}")
    if got_bits != bits:
        raise MerkleError(f"{name} is for a tree over {got_bits} bits, ours has {bits}")
    size = _NODE_ID.size + (HASH_SIZE if kind == _ANSWER else 0)
    if len(data) != _HEADER.size + count * size:
        raise MerkleError(
            f"{name} of {count} records must be {_HEADER.size + count * size} bytes, "
            f"not {len(data)}"
        )
    records: list[tuple[NodeId, bytes]] = []
    previous: NodeId = (-1, -1)
    for offset in range(_HEADER.size, len(data), size):
        node_id = level, index = _NODE_ID.unpack_from(data, offset)
        if not (level < depth and index < FANOUT**level):
            raise MerkleError(
                f"{name} names node ({level}, {index}), not in a tree over {bits} bits"
            )
        # Strictly ascending: one canonical encoding per set, and no duplicates.
        if node_id <= previous:
            raise MerkleError(f"{name} lists node {node_id} out of order or twice")
        previous = node_id
        start = offset + _NODE_ID.size
        records.append((node_id, bytes(data[start : offset + size])))
    return records


class _State(Enum):
    NEW = "new"
    ASKING = "asking"
    DONE = "done"
    FAILED = "failed"


class Comparison:
    """Pure state machine of one anti-entropy round against a remote tree that can only be asked
    node by node, each ask a network round trip::

        cmp = Comparison(local_tree, remote_bits=remote_header_bits)
        ask = cmp.start()                                 # [(0, 0)]
        while ask:
            ask = cmp.receive(remote_hashes_for(ask))     # {(level, index): hash}
        cmp.differing_buckets                             # sorted leaf buckets that differ

    It descends level by level (one round trip each) into the children of differing nodes only.
    MerkleError if the remote has another ``bits``, answers nodes it was not asked or omits asked
    ones, sends a hash that is not 32 bytes, or sends children that do not hash to the parent it
    sent (its tree changed mid-round). After an error the comparison is spent."""

    __slots__ = (
        "_asked",
        "_differing",
        "_local",
        "_nodes_asked",
        "_parents",
        "_round_trips",
        "_state",
    )

    def __init__(self, local: MerkleTree, *, remote_bits: int) -> None:
        if remote_bits != local.bits:
            raise MerkleError(
                f"cannot compare: the remote tree is over {remote_bits} bits, ours {local.bits}"
            )
        self._local = local
        self._state = _State.NEW
        self._asked: list[NodeId] = []
        # The remote's hash of each differing node whose children are being asked.
        self._parents: dict[NodeId, bytes] = {}
        self._differing: list[int] = []
        self._nodes_asked = 0
        self._round_trips = 0

    def __repr__(self) -> str:
        return (
            f"Comparison(bits={self._local.bits}, state={self._state.value}, "
            f"round_trips={self._round_trips}, nodes_asked={self._nodes_asked}, "
            f"differing={len(self._differing)})"
        )

    @property
    def done(self) -> bool:
        return self._state is _State.DONE

    @property
    def nodes_asked(self) -> int:
        """How many node hashes were asked of the remote so far."""
        return self._nodes_asked

    @property
    def round_trips(self) -> int:
        """How many answers were received so far."""
        return self._round_trips

    @property
    def differing_buckets(self) -> list[int]:
        """The leaf buckets whose digests differ, sorted; MerkleError before the round is done."""
        if self._state is not _State.DONE:
            raise MerkleError(f"the comparison is {self._state.value}, not done")
        return list(self._differing)

    def start(self) -> list[NodeId]:
        """The first ask: the remote's root."""
        if self._state is not _State.NEW:
            raise MerkleError(f"start() on a comparison that is {self._state.value}")
        self._state = _State.ASKING
        self._asked = [(0, 0)]
        self._nodes_asked = 1
        return list(self._asked)

    def receive(self, answers: Mapping[NodeId, bytes]) -> list[NodeId]:
        """Take the remote's hashes of the last ask; return the next ask, empty when done."""
        if self._state is not _State.ASKING:
            raise MerkleError(f"receive() on a comparison that is {self._state.value}")
        try:
            self._check(answers)
            self._descend(answers)
        except MerkleError:
            self._state = _State.FAILED
            raise
        self._round_trips += 1
        self._nodes_asked += len(self._asked)
        if not self._asked:
            self._state = _State.DONE
        return list(self._asked)

    def _check(self, answers: Mapping[NodeId, bytes]) -> None:
        asked = set(self._asked)
        if answers.keys() != asked:
            unasked = sorted(answers.keys() - asked)
            omitted = sorted(asked - answers.keys())
            raise MerkleError(
                f"the remote answered {len(unasked)} nodes not asked {unasked[:4]} and omitted "
                f"{len(omitted)} asked {omitted[:4]}"
            )
        for node_id, digest in answers.items():
            if len(digest) != HASH_SIZE:
                raise MerkleError(f"the remote's hash of {node_id} is {len(digest)} bytes")
        for (level, index), remote in self._parents.items():
            children = self._local.children(level, index)
            if _inner_digest(answers[child] for child in children) != remote:
                raise MerkleError(
                    f"the remote's children of ({level}, {index}) do not hash to the parent it "
                    "sent: its tree changed during the round"
                )

    def _descend(self, answers: Mapping[NodeId, bytes]) -> None:
        local = self._local
        leaf_level = local.depth - 1
        parents: dict[NodeId, bytes] = {}
        for node_id in self._asked:
            remote = answers[node_id]
            if remote == local.node(*node_id):
                continue
            if node_id[0] == leaf_level:
                self._differing.append(node_id[1])
            else:
                parents[node_id] = remote
        self._parents = parents
        # Asked ids are sorted and children of sorted parents are contiguous, so this stays sorted.
        self._asked = [child for parent in parents for child in local.children(*parent)]


def differing_buckets(local: MerkleTree, remote: MerkleTree) -> list[int]:
    """The sorted buckets whose leaves differ between two trees at hand, found the way a
    Comparison finds them over the network."""
    comparison = Comparison(local, remote_bits=remote.bits)
    ask = comparison.start()
    while ask:
        ask = comparison.receive({node_id: remote.node(*node_id) for node_id in ask})
    return comparison.differing_buckets

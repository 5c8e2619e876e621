"""Every metric the replicator exports, in one registry per member, fed by the drivers'
events. Label sets are bounded: a group's name, a member id of that group (a group has tens
of members), and small fixed sets of kinds; never a URL or an object id."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

MEMBER_STATES = ("alive", "suspect", "dead", "left")
TRANSFER_KINDS = ("push", "anti_entropy")  # why objects moved
PEER_ERRORS = ("connect", "timeout", "status", "auth", "protocol")
# Signed requests, by the last segment of their path.
REQUEST_KINDS = frozenset(
    {"membership", "notify", "changes", "entries", "tree", "buckets", "costs", "topology", "probe"}
)


class ReplicatorMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.members = Gauge(
            "harvest_replicator_members",
            "Members of the group by state, as this member sees them.",
            ["group", "state"],
            registry=r,
        )
        self.lag_seqs = Gauge(
            "harvest_replicator_lag_sequence_numbers",
            "Changes a member has announced that this member has not yet pulled from it.",
            ["group", "member"],
            registry=r,
        )
        self.lag_seconds = Gauge(
            "harvest_replicator_lag_seconds",
            "How long this member has been behind what a member announced (0: caught up).",
            ["group", "member"],
            registry=r,
        )
        self.bytes_sent = Counter(
            "harvest_replicator_sent_bytes_total",
            "Bytes of answers sent to other members, by request kind.",
            ["group", "kind"],
            registry=r,
        )
        self.bytes_received = Counter(
            "harvest_replicator_received_bytes_total",
            "Bytes of objects received from other members, by why they moved.",
            ["group", "kind"],
            registry=r,
        )
        self.request_bytes = Counter(
            "harvest_replicator_request_bytes_total",
            "Bytes of signed requests received from other members, by request kind.",
            ["kind"],
            registry=r,
        )
        self.objects_applied = Counter(
            "harvest_replicator_applied_objects_total",
            "Objects (and removals) applied to the local broker, by why they moved.",
            ["group", "kind"],
            registry=r,
        )
        self.anti_entropy_rounds = Counter(
            "harvest_replicator_anti_entropy_rounds_total",
            "Merkle comparisons with a neighbour, by outcome (equal, repaired, failed).",
            ["group", "outcome"],
            registry=r,
        )
        self.anti_entropy_buckets = Counter(
            "harvest_replicator_anti_entropy_differing_buckets_total",
            "Hash buckets found different by Merkle comparisons.",
            ["group"],
            registry=r,
        )
        self.topology_edges = Gauge(
            "harvest_replicator_topology_edges",
            "Edges of the agreed update topology.",
            ["group"],
            registry=r,
        )
        self.topology_cost = Gauge(
            "harvest_replicator_topology_cost_seconds",
            "Total measured cost of the agreed topology's edges.",
            ["group"],
            registry=r,
        )
        self.topology_epoch = Gauge(
            "harvest_replicator_topology_epoch",
            "Epoch of the agreed topology (it rises with each recomputation).",
            ["group"],
            registry=r,
        )
        self.link_rtt = Gauge(
            "harvest_replicator_link_rtt_seconds",
            "Smoothed round-trip time to a member.",
            ["group", "member"],
            registry=r,
        )
        self.link_throughput = Gauge(
            "harvest_replicator_link_throughput_bytes_per_second",
            "Smoothed throughput of probe transfers from a member.",
            ["group", "member"],
            registry=r,
        )
        self.peer_errors = Counter(
            "harvest_replicator_peer_errors_total",
            "Failed requests to other members and the local broker, by kind.",
            ["kind"],
            registry=r,
        )
        self.refused = Counter(
            "harvest_replicator_refused_requests_total",
            "Requests refused for a missing or bad signature, a replay, or no room to remember"
            " their ids (replay protection).",
            registry=r,
        )
        self.propagation = Histogram(
            "harvest_replicator_pull_seconds",
            "Time to pull and apply the changes a member announced.",
            ["group"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        for kind in PEER_ERRORS:
            self.peer_errors.labels(kind)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

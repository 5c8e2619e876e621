"""What the cache's components report, as plain values made when asked (a scrape, the cache
manager): ``metrics`` and the admin listener read these, never the components themselves."""

from __future__ import annotations

from typing import NamedTuple

from harvest_cache.traffic import Traffic


class StoreStats(NamedTuple):
    memory_objects: int  # objects and Vary markers
    memory_bytes: int
    memory_capacity: int
    disk_capacity: int
    memory_evictions: int
    read_failures: int  # disk reads that failed (each served as a miss)
    write_failures: int
    disk_skips: int  # small objects not stored on disk: its writer was too far behind
    promotions: int  # objects read from disk and put into the memory tier
    kept_on_disk: int  # objects read from disk and not promoted (store.admission)


class PartialStats(NamedTuple):
    parts_stored: int  # 206s kept as parts of partial content
    completed: int  # representations put together from their parts, stored whole
    lost: int  # indexes dropped because a part they named was gone


class PoolStats(NamedTuple):
    opened: int  # connections opened
    reused: int  # requests sent on an idle kept-alive connection


class TlsStats(NamedTuple):
    handshakes: int  # TLS connections made to origins and peers
    resumed: int  # of them, with a session resumed


class BumpStats(NamedTuple):
    """What interception of CONNECT tunnels did (bump.enabled)."""

    bumped: int  # tunnels intercepted
    spliced: dict[str, int]  # tunnels relayed, by reason
    minted: int  # server certificates made
    refused: int  # handshakes a client refused (its server then spliced for a while)
    failed: int  # other failed client handshakes
    certificates: int  # server certificates held in memory
    pinned: int  # servers spliced because their clients refused the certificate


class DnsStats(NamedTuple):
    hits: int  # answered from the hosts file or the cache
    misses: int  # waited for a query
    failures: int


class IcpStats(NamedTuple):
    answered: dict[str, int]  # replies sent, by opcode name
    dropped: int  # malformed datagrams, or replies to no query of ours
    own_sockets: int  # busy queriers answered on a socket of their own
    unsent: int  # datagrams the socket refused to send


class PeerStats(NamedTuple):
    config: str  # the peer's configuration line
    state: str  # alive, dead (ICP silent) or down (TCP refused)
    rtt: float | None  # smoothed ICP round trip, seconds (None: never heard from)
    queries: int
    replies: int
    hits: int
    timeouts: int
    uses: int  # requests sent to it
    connect_failures: int
    digest_hits: int
    digest_false_hits: int
    response_time: float | None  # smoothed seconds to an answer's head (None: never asked)


class HtcpStats(NamedTuple):
    """The HTCP socket's numbers (RFC 2756)."""

    received: int  # datagrams
    malformed: int  # datagrams that could not be read (dropped)
    denied: int  # TSTs and CLRs from addresses not allowed
    tst_answered: int
    tst_hits: int
    clr_received: int
    clr_purged: int  # CLRs that made us forget something
    queries_sent: int  # our TSTs
    clr_sent: int  # our CLRs
    replies: int  # answers to our TSTs
    unexpected_replies: int  # answers to no TST of ours


class ArrayMemberStats(NamedTuple):
    """One member of the cache array, as this cache routes to it."""

    load_factor: float  # its configured share (its weight over the array's)
    homes: int  # requests whose home it was (this cache's own, in front mode, included)


class DigestStats(NamedTuple):
    own_entries: int  # objects listed in the digest this cache publishes
    fetch_failures: int  # peers' digests that could not be had


class CacheStats(NamedTuple):
    """Everything the cache reports at one moment."""

    traffic: Traffic
    store: StoreStats
    partial: PartialStats
    origin_pool: PoolStats
    peer_pool: PoolStats
    tls: TlsStats
    bump: BumpStats | None  # None: tunnels are not intercepted
    dns: DnsStats
    access_log_dropped: int
    client_connections: int
    page_copy_bytes: int  # hot bodies also held in memory files
    disk_heads: int  # answers kept for objects read from the disk tier and left there
    collapsed_waiters: int  # clients reading fetches in progress
    fetching: list[str]  # keys of the fetches in progress
    icp: IcpStats | None
    peers: dict[str, PeerStats] | None  # None: no hierarchy
    array: dict[str, ArrayMemberStats] | None  # None: no cache array
    htcp: HtcpStats | None  # None: HTCP off
    unexpected_icp_replies: int
    digests: DigestStats | None

"""The driver of cache digests: ours rebuilt from the store, our peers' fetched over HTTP.

Every ``digest_rebuild_period`` seconds the cache makes the digest of what it holds
(``digest.build``) and serves it at ``DIGEST_PATH``, where Squid serves its own; every
``digest_fetch_period`` seconds it fetches each peer's (peers marked ``no_digest`` are left
out). A peer whose digest cannot be had keeps the last one it gave until that is two
periods old, then it has none, and ICP is used for it again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from harvest_cache.config import HierarchyConfig
from harvest_cache.errors import DigestError, UpstreamError
from harvest_cache.hierarchy.digest import Digest, build, decode, key
from harvest_cache.hierarchy.peers import Peer
from harvest_cache.http.freshness import Heuristic
from harvest_cache.stats import DigestStats
from harvest_cache.store.interface import ObjectStore

log = logging.getLogger("harvest_cache")

DIGEST_PATH = "/squid-internal-periodic/store_digest"
CONTENT_TYPE = "application/cache-digest"
# Largest digest taken from a peer: 64 MiB holds a hundred million objects at 5 bits each.
MAX_DIGEST = 64 << 20

# Fetches a peer's digest: the response body, or an error.
Fetch = Callable[[Peer, str, int], Awaitable[bytes]]


@dataclass(slots=True)
class PeerDigest:
    digest: Digest
    fetched: float  # loop time


class Digests:
    """Ours (``own``: the encoded bytes, None until first built) and the peers'."""

    def __init__(
        self,
        config: HierarchyConfig,
        store: ObjectStore,
        heuristic_for: Callable[[str], Heuristic],
        fetch: Fetch,
    ) -> None:
        self._config = config
        self._store = store
        self._heuristic_for = heuristic_for
        self._fetch = fetch
        # (an array's members are chosen by the URL's hash, not by what they hold)
        self._peers = tuple(p for p in config.peers if not p.no_digest and not p.carp)
        self._theirs: dict[str, PeerDigest] = {}
        self.own: bytes | None = None
        self.own_built = 0.0  # wall-clock time of the last build
        self.own_entries = 0
        self.fetch_failures = 0

    def lookup(self, url: str) -> dict[str, bool]:
        """For each peer with a current digest: whether it says the peer holds ``url``."""
        if not self._theirs:
            return {}
        now = asyncio.get_running_loop().time()
        limit = 2 * self._config.digest_fetch_period
        digest_key = key(url)
        return {
            name: digest_key in held.digest
            for name, held in self._theirs.items()
            if now - held.fetched < limit
        }

    async def run(self) -> None:
        """Rebuild ours and fetch theirs, each on its period, until cancelled."""
        loop = asyncio.get_running_loop()
        next_build = next_fetch = loop.time()
        while True:
            now = loop.time()
            if now >= next_build:
                await self.rebuild()
                next_build = now + self._config.digest_rebuild_period
            if now >= next_fetch:
                await asyncio.gather(*(self.refresh(p) for p in self._peers))
                next_fetch = now + self._config.digest_fetch_period
            await asyncio.sleep(max(0.0, min(next_build, next_fetch) - loop.time()))

    async def rebuild(self) -> None:
        heads = await self._store.heads()
        now = time.time()
        # A full store holds hundreds of thousands of heads: judged off the event loop.
        digest = await asyncio.get_running_loop().run_in_executor(
            None, build, heads, now, self._heuristic_for, self._config.digest_rebuild_period
        )
        self.own = digest.encode()
        self.own_built = now
        self.own_entries = digest.count

    async def refresh(self, peer: Peer) -> None:
        """Fetch ``peer``'s digest; on failure keep the last one (it ages out in ``lookup``)."""
        try:
            body = await self._fetch(peer, DIGEST_PATH, MAX_DIGEST)
            digest = decode(body)
        except (UpstreamError, DigestError) as e:
            self.fetch_failures += 1
            log.info("no cache digest from peer %s: %s", peer.name, e)
            return
        self._theirs[peer.name] = PeerDigest(digest, asyncio.get_running_loop().time())

    def stats(self) -> DigestStats:
        return DigestStats(self.own_entries, self.fetch_failures)

    def held(self, peer: Peer) -> Digest | None:
        """The digest ``peer`` last gave, if any (for the cache manager and tests)."""
        entry = self._theirs.get(peer.name)
        return entry.digest if entry is not None else None

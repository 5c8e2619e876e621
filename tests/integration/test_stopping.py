"""A cache with nothing to finish stops at once, however long its grace: the tasks it runs
for as long as it serves (sweeps, digests) are cancelled, not waited for."""

from __future__ import annotations

import time
from pathlib import Path

from harvest_cache.server.app import CacheServer
from tests.support import cache_config


async def test_an_idle_cache_stops_well_within_its_grace(tmp_path: Path) -> None:
    server = await CacheServer.start(cache_config(tmp_path, cache={"dir": str(tmp_path / "c")}))
    began = time.monotonic()
    await server.stop(grace=10.0)
    assert time.monotonic() - began < 2.0
    assert len(server.tasks) == 0

"""Every integration test fails if the cache makes a blocking call on its event loop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from blockbuster import blockbuster_ctx

from tests.tls_support import Trust, make_trust


@pytest.fixture(autouse=True)
def no_blocking_calls() -> Iterator[None]:
    # Only calls made from harvest_cache's own modules (and the shared ones it runs) count:
    # the tests may block freely.
    with blockbuster_ctx(["harvest_cache", "harvest_common"]) as bb:
        # Page copies of hot bodies live in memory files: writing one never waits on a
        # device; nor does sendfile to a non-blocking socket from one, or from a disk-tier
        # segment whose bytes were just read from the page cache (without waiting) or that
        # the page cache holds (cachestat).
        bb.functions["os.write"].can_block_in("harvest_cache/server/pages.py", "copy")
        connection = "harvest_cache/server/connection.py"
        bb.functions["os.sendfile"].can_block_in(connection, "_send_from")
        yield


@pytest.fixture
def trust(tmp_path: Path) -> Trust:
    """An origin CA the cache under test is told to trust (tests.tls_support)."""
    return make_trust(tmp_path)

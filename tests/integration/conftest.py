"""Every integration test fails if the cache makes a blocking call on its event loop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from blockbuster import blockbuster_ctx


@pytest.fixture(autouse=True)
def no_blocking_calls() -> Iterator[None]:
    # Only calls made from harvest_cache's own modules count: the tests may block freely.
    with blockbuster_ctx("harvest_cache"):
        yield

"""Gatherer tests fail if gatherer code makes a blocking call on a running event loop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from blockbuster import blockbuster_ctx


@pytest.fixture(autouse=True)
def no_blocking_calls() -> Iterator[None]:
    # Only calls made from the gatherer's own modules (and the shared ones it runs) count: the
    # tests may block freely.
    with blockbuster_ctx(["gatherer", "harvest_common"]):
        yield

"""Broker tests fail if broker code makes a blocking call on a running event loop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from blockbuster import blockbuster_ctx


@pytest.fixture(autouse=True)
def no_blocking_calls() -> Iterator[None]:
    # Only calls made from the broker's own modules count: the tests may block freely.
    with blockbuster_ctx("broker"):
        yield

"""Tests of the shared modules fail if that code makes a blocking call on a running event loop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from blockbuster import blockbuster_ctx


@pytest.fixture(autouse=True)
def no_blocking_calls() -> Iterator[None]:
    # Only calls made from the shared modules count: the tests may block freely.
    with blockbuster_ctx("harvest_common"):
        yield

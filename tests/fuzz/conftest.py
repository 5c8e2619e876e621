"""Fixtures for the end-to-end fuzz tests: a scripted raw origin and the blockbuster guard.

``make_cache`` (and uvloop as the loop) come from tests/conftest.py. Nothing is imported from
tests/support.py, so that ``mypy tests/fuzz`` checks only this package.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from blockbuster import blockbuster_ctx

from tests.fuzz.origin import FuzzOrigin


@pytest.fixture
def no_blocking_calls() -> Iterator[None]:
    """As tests/integration's autouse fixture: fail a blocking call made by harvest_cache (or
    the shared modules it runs) on the event loop. (Not autouse here: the pure fuzz tests run
    no loop.)"""
    with blockbuster_ctx(["harvest_cache", "harvest_common"]):
        yield


@pytest.fixture
async def fuzz_origin() -> AsyncIterator[FuzzOrigin]:
    origin = FuzzOrigin()
    await origin.start()
    yield origin
    await origin.stop()

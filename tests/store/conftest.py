"""Fixtures of the store's tests: a configuration with a disk tier, and a store opened on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from harvest_cache.config import CacheConfig
from harvest_cache.store.tiered import TieredStore, open_store
from tests.store.test_store_tiered import config


@pytest.fixture
def cfg(tmp_path: Path) -> CacheConfig:
    return config(tmp_path)


@pytest.fixture
async def store(cfg: CacheConfig) -> AsyncIterator[TieredStore]:
    s = await open_store(cfg)
    yield s
    await s.close()

"""The registry's tests open one registry each, in a temporary directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.registry import Registry


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "registry.db"


@pytest.fixture
async def registry(path: Path) -> AsyncIterator[Registry]:
    async with await Registry.open(path) as opened:
        yield opened

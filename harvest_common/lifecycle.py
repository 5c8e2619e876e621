"""A Harvest server whose resources are owned by one exit stack (the broker, a replicator
member): opened by ``start`` (what was opened is closed again if opening fails), closed in
reverse order by ``stop`` or by leaving ``async with``."""

from __future__ import annotations

from contextlib import AsyncExitStack
from types import TracebackType
from typing import Self


class Owned:
    def __init__(self) -> None:
        self._stack = AsyncExitStack()

    async def _open(self) -> None:
        """Open everything, each resource entered into ``self._stack``."""
        raise NotImplementedError

    async def _opened(self) -> Self:
        try:
            await self._open()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def stop(self) -> None:
        await self._stack.aclose()

"""What a member keeps across restarts: for each group, the last change number it pulled from
each other member (so that it comes back and catches up with exactly what it missed). One
small JSON file, replaced atomically; read and written on a worker thread."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from replicator.errors import StateError

FILE = "state.json"


def _read(path: Path) -> dict[str, dict[str, int]]:
    try:
        raw: Any = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StateError(f"cannot read {path}: {error}") from None
    groups = raw.get("cursors") if isinstance(raw, dict) else None
    if not isinstance(groups, dict):
        raise StateError(f"{path}: no cursors table")
    out: dict[str, dict[str, int]] = {}
    for group, cursors in groups.items():
        if not isinstance(cursors, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in cursors.values()
        ):
            raise StateError(f"{path}: cursors of {group!r} are not change numbers")
        out[str(group)] = {str(k): int(v) for k, v in cursors.items()}
    return out


def _write(path: Path, cursors: dict[str, dict[str, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # A file of its own: a write whose caller was cancelled may still be running.
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=".state-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump({"cursors": cursors}, out, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


class State:
    """The cursors of every group, saved one write at a time (the last one wins)."""

    def __init__(self, directory: Path, cursors: dict[str, dict[str, int]]) -> None:
        self.path = directory / FILE
        self.cursors = cursors
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"State({str(self.path)!r})"

    @classmethod
    async def load(cls, directory: Path) -> State:
        return cls(directory, await asyncio.to_thread(_read, directory / FILE))

    def group(self, name: str) -> dict[str, int]:
        return self.cursors.setdefault(name, {})

    async def save(self) -> None:
        snapshot = {group: dict(cursors) for group, cursors in self.cursors.items()}
        async with self._lock:
            try:
                await asyncio.to_thread(_write, self.path, snapshot)
            except OSError as error:
                raise StateError(f"cannot write {self.path}: {error}") from error

"""The items of a SOIF update stream: objects as they arrive, bare or inside a wrapper.

A broker stream groups objects in wrappers: ``@UPDATE { @FILE {...} ... }`` (add or replace),
``@REFRESH { ... }`` (still there, keep it) and ``@DELETE { ... }`` (gone). The decoder hands
out each wrapped object as soon as it is complete, tagged with its wrapper, so a stream of any
length is read in bounded memory; an object outside any wrapper comes out as a bare ``Record``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from harvest_common.soif.record import Record


@dataclass(frozen=True, slots=True)
class Wrapped:
    """An object read from inside a wrapper; ``keyword`` is the wrapper's template name."""

    keyword: ClassVar[str]
    record: Record


@dataclass(frozen=True, slots=True)
class Update(Wrapped):
    """An object from an ``@UPDATE`` wrapper: add it, or replace the one with its URL."""

    keyword: ClassVar[str] = "UPDATE"


@dataclass(frozen=True, slots=True)
class Refresh(Wrapped):
    """An object from a ``@REFRESH`` wrapper: it is unchanged and still there."""

    keyword: ClassVar[str] = "REFRESH"


@dataclass(frozen=True, slots=True)
class Delete(Wrapped):
    """An object from a ``@DELETE`` wrapper: the object with its URL is gone."""

    keyword: ClassVar[str] = "DELETE"


Item: TypeAlias = Record | Update | Refresh | Delete
Wrapper: TypeAlias = type[Update] | type[Refresh] | type[Delete]

# Wrapper template name -> item type; the names are record.WRAPPER_TEMPLATES.
WRAPPERS: dict[str, Wrapper] = {kind.keyword: kind for kind in (Update, Refresh, Delete)}

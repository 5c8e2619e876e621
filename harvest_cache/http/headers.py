"""Header fields: multi-valued, case-insensitive, kept in wire order.

Values are ``str`` decoded as Latin-1, so any byte a peer sends survives a round trip.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, KeysView
from functools import lru_cache

# Fields as a parser read them: raw names and values, in order.
RawFields = tuple[tuple[bytes, bytes], ...]


def split_list(value: str) -> list[str]:
    """Split a comma-separated field value into its members, respecting quoted strings."""
    if '"' not in value:  # nearly always: no quoted commas to step over
        return [m for m in map(str.strip, value.split(",")) if m]
    out: list[str] = []
    start = 0
    quoted = escaped = False
    for i, ch in enumerate(value):
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            member = value[start:i].strip()
            if member:
                out.append(member)
            start = i + 1
    member = value[start:].strip()
    if member:
        out.append(member)
    return out


class Headers:
    """An ordered list of (name, value) fields with case-insensitive lookup."""

    __slots__ = ("_index", "_items")

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items: list[tuple[str, str]] = list(items)
        # Lowercased name -> values, built on the first lookup and dropped on any change:
        # a message's fields are looked up many times for each time they change.
        self._index: dict[str, list[str]] | None = None

    @classmethod
    def indexed(cls, items: list[tuple[str, str]], index: dict[str, list[str]]) -> Headers:
        """Headers over ``items`` (taken, not copied) whose lookup index the caller built
        in the same pass: lowercased name -> values in order."""
        headers = cls.__new__(cls)
        headers._items = items
        headers._index = index
        return headers

    @classmethod
    def from_raw(cls, raw: Iterable[tuple[bytes, bytes]]) -> Headers:
        headers = cls.__new__(cls)  # the list is built here, so __init__'s copy is skipped
        headers._items = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in raw]
        headers._index = None
        return headers

    def _lookup(self) -> dict[str, list[str]]:
        index = self._index
        if index is None:
            index = {}
            for n, v in self._items:
                index.setdefault(n.lower(), []).append(v)
            self._index = index
        return index

    def get(self, name: str) -> str | None:
        """All values of ``name`` joined with ", " (RFC 9110 5.3), or None if absent."""
        values = self._lookup().get(name.lower())
        return ", ".join(values) if values else None

    def get_all(self, name: str) -> list[str]:
        return list(self._lookup().get(name.lower(), ()))

    def get_list(self, name: str) -> list[str]:
        """The members of a list-valued field across all its lines."""
        out: list[str] = []
        for v in self._lookup().get(name.lower(), ()):
            out.extend(split_list(v))
        return out

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._lookup()

    def add(self, name: str, value: str) -> None:
        self._items.append((name, value))
        if self._index is not None:
            self._index.setdefault(name.lower(), []).append(value)

    def set(self, name: str, value: str) -> None:
        """Replace every line of ``name`` with one line holding ``value``."""
        self.remove(name)
        self.add(name, value)

    def names(self) -> KeysView[str]:
        """The lowercased names present."""
        return self._lookup().keys()

    def remove(self, *names: str) -> None:
        if not names:
            return  # (callers pass lists that are usually empty)
        drop = {n.lower() for n in names}
        index = self._index
        if index is not None:
            present = drop.intersection(index)
            if not present:
                return
            for n in present:
                del index[n]  # the index stays valid: later lookups need no rebuild
        self._items = [(n, v) for n, v in self._items if n.lower() not in drop]

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def copy(self) -> Headers:
        return Headers(self._items)

    def encode(self) -> bytes:
        """The fields as wire lines, each ending in CRLF (no blank line after)."""
        return "".join(f"{n}: {v}\r\n" for n, v in self._items).encode("latin-1")

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Headers) and self._items == other._items

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


@lru_cache(maxsize=4096)
def stored_fields(items: tuple[tuple[str, str], ...]) -> Headers:
    """One Headers, index built, shared by every caller with these stored fields: for
    lookups only, never to be changed. A stored head is read by the policy several times per
    request (freshness, validators, a 304's match) and never changes, so this saves building
    and indexing a copy each time."""
    return Headers(items)

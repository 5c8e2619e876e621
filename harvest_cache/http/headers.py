"""Header fields: multi-valued, case-insensitive, kept in wire order.

Values are ``str`` decoded as Latin-1, so any byte a peer sends survives a round trip.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def split_list(value: str) -> list[str]:
    """Split a comma-separated field value into its members, respecting quoted strings."""
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

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items: list[tuple[str, str]] = list(items)

    @classmethod
    def from_raw(cls, raw: Iterable[tuple[bytes, bytes]]) -> Headers:
        return cls((n.decode("latin-1"), v.decode("latin-1")) for n, v in raw)

    def get(self, name: str) -> str | None:
        """All values of ``name`` joined with ", " (RFC 9110 5.3), or None if absent."""
        values = self.get_all(name)
        return ", ".join(values) if values else None

    def get_all(self, name: str) -> list[str]:
        lname = name.lower()
        return [v for n, v in self._items if n.lower() == lname]

    def get_list(self, name: str) -> list[str]:
        """The members of a list-valued field across all its lines."""
        out: list[str] = []
        for v in self.get_all(name):
            out.extend(split_list(v))
        return out

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        lname = name.lower()
        return any(n.lower() == lname for n, _ in self._items)

    def add(self, name: str, value: str) -> None:
        self._items.append((name, value))

    def set(self, name: str, value: str) -> None:
        """Replace every line of ``name`` with one line holding ``value``."""
        self.remove(name)
        self._items.append((name, value))

    def remove(self, *names: str) -> None:
        lnames = {n.lower() for n in names}
        self._items = [(n, v) for n, v in self._items if n.lower() not in lnames]

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

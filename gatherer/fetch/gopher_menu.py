"""Gopher responses without I/O: RFC 1436 menus parsed into items, RFC 4266 URLs for the
items, and text documents freed of their "." terminator and dot-stuffing.

A menu line is ``<type><display>TAB<selector>TAB<host>TAB<port>`` (a fifth field, "+", marks
Gopher+ and is ignored); a line of a single "." ends the menu. Malformed lines are skipped,
except that info ("i") and error ("3") lines, which servers often send with fields missing,
are kept with what they have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

DEFAULT_PORT = 70
# Item types worth fetching: text, menu, archives and binaries, images, sound, HTML. Not
# info (i), error (3), CSO (2), search (7: needs a query), telnet (8, T), duplicates (+).
LINKED_TYPES = frozenset("014569gIsh")
_LENIENT_TYPES = frozenset("i3")
_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")
# RFC 3986 path characters besides the unreserved; TAB, space, "?" and "#" are escaped.
_SELECTOR_SAFE = "/!$&'()*+,;=:@"


@dataclass(frozen=True, slots=True)
class MenuItem:
    """One menu line."""

    type: str
    display: str
    selector: str
    host: str
    port: int

    @property
    def url(self) -> str | None:
        """The RFC 4266 URL of the item, if it is of a type worth fetching and names a
        plausible host; an "h" item whose selector is "URL:<url>" gives that URL."""
        if self.type not in LINKED_TYPES:
            return None
        if self.type == "h" and self.selector.startswith("URL:"):
            return self.selector[4:].strip() or None
        if not _HOST.fullmatch(self.host) or not 0 < self.port <= 65535:
            return None
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if self.port == DEFAULT_PORT else f":{self.port}"
        selector = quote(self.selector, safe=_SELECTOR_SAFE, errors="surrogateescape")
        return f"gopher://{host}{port}/{self.type}{selector}"


def parse(text: str) -> tuple[MenuItem, ...]:
    """The items of a menu, in order, up to the "." line."""
    items: list[MenuItem] = []
    # (not str.splitlines: it would also split at form feeds and the like in display text)
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        if line == ".":
            break
        item = _item(line)
        if item is not None:
            items.append(item)
    return tuple(items)


def _item(line: str) -> MenuItem | None:
    if not line:
        return None
    kind, fields = line[0], line[1:].split("\t")
    lenient = kind in _LENIENT_TYPES
    if len(fields) < 4:
        if not lenient:
            return None
        fields += [""] * (4 - len(fields))
    display, selector, host, port_text = fields[:4]
    port_text = port_text.strip()
    if port_text.isascii() and port_text.isdigit() and int(port_text) <= 65535:
        port = int(port_text)
    elif lenient:
        port = 0
    else:
        return None
    return MenuItem(kind, display, selector, host.strip(), port)


def text_body(raw: bytes) -> bytes:
    """A text document (type 0) as sent less its "." terminator line and what follows, with
    the leading dot of dot-stuffed lines ("..x") removed."""
    lines: list[bytes] = []
    for line in raw.splitlines(keepends=True):
        if line.rstrip(b"\r\n") == b".":
            break
        lines.append(line[1:] if line.startswith(b"..") else line)
    return b"".join(lines)

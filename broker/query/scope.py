"""Which attributes a term searches when it names none, and which objects a query sees.

A word, phrase or regular expression without an attribute searches what an object is about:
its content. Not where it is or what it points to: ``URL``, and ``URL-References``, the links
a page holds (an index page lists the addresses of every page below it, so that each word of
those addresses would find it: 61 of the 69 objects ``asyncio`` found on the Python
documentation were such pages). Nor the bookkeeping every record carries (``Type``, ``MD5``,
``Gatherer-Name``, times and sizes): a gatherer's name would find every object it gathered.
Named, each is searched as any other attribute: ``URL-References: asyncio``, ``Type: HTML``.

Server records (the HSR's registrations of gatherers, brokers, caches and replicators, which
every broker that is an HSR holds beside its collections) carry ``Server-Type``; only a query
that names ``Server-Type`` (``Server-Type: broker physics``, as the HSR's own listing asks)
finds them.

Pure: names in, decisions out.
"""

from __future__ import annotations

from typing import Final

from broker.query.ast import And, Compare, Node, Not, Or, Pattern, Phrase, Word

# What the gatherer writes on every record (gatherer/records.py) besides its summary.
BOOKKEEPING: Final = (
    "type",
    "file-size",
    "md5",
    "update-time",
    "last-modification-time",
    "time-to-live",
    "refresh-rate",
    "gatherer-name",
    "gatherer-host",
    "gatherer-port",
    "gatherer-version",
)
NAMED_ONLY: Final = frozenset({"url", "url-references", *BOOKKEEPING})

# The attribute the HSR stamps on every server record (broker/hsr.py).
SERVER_ATTRIBUTE: Final = "server-type"


def searched_unnamed(attribute: str) -> bool:
    """Whether a term without an attribute searches ``attribute`` (any case)."""
    return attribute.lower() not in NAMED_ONLY


def finds_servers(node: Node) -> bool:
    """Whether ``node`` may find server records: it names ``Server-Type`` outside a NOT."""
    match node:
        case Word() | Phrase() | Pattern() | Compare():
            return node.attribute is not None and node.attribute.lower() == SERVER_ATTRIBUTE
        case And() | Or():
            return any(finds_servers(item) for item in node.items)
        case Not():
            return False

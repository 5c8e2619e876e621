"""Cache arrays: the Cache Array Routing Protocol as Squid implements it (``cache_peer ...
carp``), so that each URL has one home among an array's members, a child and Squid agree on
it, and a member going away moves its own URLs alone.

Each member has a 32-bit hash of its name and a load multiplier made from its share of the
array's weights (the CARP draft's formula); a URL's score at a member is the member's
multiplier times a hash combining the URL's with the member's, and the highest score wins.
Two details of Squid's code (src/carp.cc, 5.7 and since) are kept, so that the same URL
goes to the same member: members are taken in order of weight (a stable sort of the
configured order), and the URL's hash is not begun again for each member: it goes on from
the previous member's, over the same key. A member that is down is skipped but still
hashed, so the others' scores do not change.

Sans-IO: names, weights and keys in, a member out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

_MASK = 0xFFFFFFFF


def _rotate_left(x: int, n: int) -> int:
    return ((x << n) | (x >> (32 - n))) & _MASK


def member_hash(name: str) -> int:
    """A member's hash of its name (bytes taken as Squid's ``unsigned`` cast of a char)."""
    h = 0
    for c in name.encode("latin-1", "replace"):
        h = (h + _rotate_left(h, 19) + c) & _MASK
    h = (h + h * 0x62531965) & _MASK
    return _rotate_left(h, 21)


def _signed(byte: int) -> int:
    """A byte as C's (signed, on the platforms Squid runs on) ``char`` adds it."""
    return byte - 256 if byte > 127 else byte


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    weight: int
    hash: int
    multiplier: float
    key_parts: tuple[str, ...] = ()  # empty: the whole URL


class Array:
    """The members of one array, ready to choose among: ``members`` are (name, weight,
    key parts) in the configured order; weight 0 takes a member out, as Squid does."""

    def __init__(self, members: Sequence[tuple[str, int, tuple[str, ...]]]) -> None:
        kept = [(n, w, k) for n, w, k in members if w > 0]
        total = sum(w for _, w, _ in kept)
        factors = []
        for name, weight, parts in kept:
            factor = weight / total
            if int(factor * 1000.0) == 0:
                factor = 0.0
            factors.append((name, weight, parts, factor))
        factors.sort(key=lambda m: m[1])  # (stable: equal weights keep their order)
        count = len(factors)
        last_factor, last_x, product = 0.0, 0.0, 1.0
        built = []
        for k, (name, weight, parts, factor) in enumerate(factors, 1):
            rest = float(count - k + 1)
            x = (rest * (factor - last_factor)) / product
            x += last_x**rest
            x = x ** (1.0 / rest)
            product *= x
            last_x, last_factor = x, factor
            built.append(Member(name, weight, member_hash(name), x, parts))
        self.members: tuple[Member, ...] = tuple(built)

    def __len__(self) -> int:
        return len(self.members)

    def scores(self, url: str) -> list[tuple[float, Member]]:
        """Each member's score for ``url``, in the members' order."""
        out = []
        user = 0
        for member in self.members:
            key = url_key(url, member.key_parts) if member.key_parts else url
            for byte in key.encode("latin-1", "replace"):
                user = (user + _rotate_left(user, 19) + _signed(byte)) & _MASK
            combined = user ^ member.hash
            combined = (combined + combined * 0x62531965) & _MASK
            combined = _rotate_left(combined, 21)
            out.append((combined * member.multiplier, member))
        return out

    def choose(self, url: str, up: Callable[[str], bool] = lambda _: True) -> Member | None:
        """The home of ``url`` among the members ``up`` says are up (None: none is)."""
        best: Member | None = None
        high = 0.0
        for score, member in self.scores(url):
            if score > high and up(member.name):
                best, high = member, score
        return best

    def ranked(self, url: str, up: Callable[[str], bool] = lambda _: True) -> list[Member]:
        """The members up, best first: the home, then where its URLs go if it is not."""
        scored = [(s, i, m) for i, (s, m) in enumerate(self.scores(url)) if up(m.name)]
        scored.sort(key=lambda t: (-t[0], t[1]))
        return [m for _, _, m in scored]


def url_key(url: str, parts: tuple[str, ...]) -> str:
    """The parts of ``url`` a member hashes (Squid's ``carp-key``); the whole URL if they
    are all empty."""
    split = urlsplit(url)
    key = ""
    if "scheme" in parts and split.scheme:
        key += split.scheme + "://"
    if "host" in parts:
        key += split.hostname or ""
    if "port" in parts:
        port = split.port or {"http": 80, "https": 443}.get(split.scheme, 0)
        key += f":{port}"
    if "path" in parts:
        key += split.path
    if "params" in parts and split.query:
        key += "?" + split.query
    return key or url

"""The version of a replicated object: which of two states of one object every member keeps.

Pure. Replicas change concurrently (two members collect the same gatherer; one refreshes an
object while another deletes it), so each state carries a ``Version``, and every member keeps
the greatest: the last change made anywhere wins. Versions compare field by field:

1. ``stamp``: when the member that made the change made it (epoch seconds). A member stamps
   a change of an object it holds above that object's stamp (and above its tombstone's), so
   a member never replaces a state with one that loses to it, however its clock is set.
2. ``origin``: the id of that member, so that equal stamps order the same everywhere.
3. ``deleted``: a removal wins over an object equal in everything else.

The order is total and every member applies only what is greater than what it holds, so all
members end with the same state whatever order the changes reach them in.

A removal made by expiry is stamped with the object's expiry time and its origin, so that the
tombstones all members make on their own for one expired object are equal and none travels.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Final

from harvest_common.errors import WireError

# How far above the stamp it replaces a member stamps a change (so that it orders after it).
STEP: Final = 0.001


@dataclass(frozen=True, slots=True, order=True)
class Version:
    stamp: float
    origin: str
    deleted: bool = False

    def __post_init__(self) -> None:
        # One value, one form: an integer stamp or -0.0 is kept as the float it equals, so
        # that equal versions encode to equal bytes (2 and 2.0, -0.0 and 0.0 compare equal).
        stamp = math.nan
        if isinstance(self.stamp, int | float):
            with contextlib.suppress(OverflowError):  # an integer no float can hold
                stamp = float(self.stamp) + 0.0
        if not math.isfinite(stamp):
            raise WireError(f"a version's stamp must be a finite number, not {self.stamp!r}")
        object.__setattr__(self, "stamp", stamp)

    def __repr__(self) -> str:
        kind = "deleted" if self.deleted else "live"
        return f"Version({kind} by {self.origin!r} at {self.stamp:.3f})"

    def encode(self) -> bytes:
        """A canonical byte form (what Merkle digests hash): equal versions, equal bytes."""
        return f"{self.stamp!r}\x00{self.origin}\x00{int(self.deleted)}".encode()

    def to_json(self) -> list[Any]:
        return [self.stamp, self.origin, self.deleted]

    @classmethod
    def from_json(cls, value: object) -> Version:
        """The inverse of ``to_json``; WireError for anything else."""
        if not (isinstance(value, list) and len(value) == 3):
            raise WireError(f"a version is [stamp, origin, deleted], not {value!r}")
        stamp, origin, deleted = value
        if not isinstance(stamp, int | float) or isinstance(stamp, bool):
            raise WireError(f"a version's stamp is a number, not {stamp!r}")
        if not isinstance(origin, str) or not isinstance(deleted, bool):
            raise WireError(f"a version's origin is a string and deleted a boolean: {value!r}")
        return cls(stamp, origin, deleted)  # an integer no float can hold: WireError

"""The replicator's errors. ReplicatorError (harvest_common.errors: the replication
protocol's, which the broker's replica API raises and catches too) is the root; every error
the package raises is one. Malformed replication data is the protocol's WireError, a bad
anti-entropy exchange its MerkleError.
"""

from __future__ import annotations

from harvest_common.errors import ReplicatorError


class TopologyError(ReplicatorError):
    """Invalid topology parameters or link costs (negative, NaN, infinite), or a malformed
    topology received from another member."""


class MembershipError(ReplicatorError):
    """A malformed membership message (missing key, wrong type, unknown state or message type)
    or an invalid membership configuration."""


class AuthError(ReplicatorError):
    """A request or answer that is not signed with the group's secret, or too old."""


class ReplayError(AuthError):
    """A correctly signed request whose id was received before, within its time window."""


class ReplayMemoryFull(ReplicatorError):
    """A correctly signed request refused because the ids of requests within the time window
    fill the memory kept of them; ``retry``: seconds until the oldest expires."""

    def __init__(self, reason: str, retry: float) -> None:
        self.retry = retry
        super().__init__(reason)


class ConfigError(ReplicatorError):
    """The configuration is invalid; ``problems`` lists each bad key with the reason."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class PeerError(ReplicatorError):
    """A request to another member (or the local broker) failed; ``kind`` is one of a small
    fixed set (it labels metrics): ``connect``, ``timeout``, ``status``, ``auth``,
    ``protocol``; ``status``: the error answer's status, for kind ``status``."""

    def __init__(self, target: str, kind: str, reason: str, status: int | None = None) -> None:
        self.target = target
        self.kind = kind
        self.reason = reason
        self.status = status
        super().__init__(f"{target}: {kind}: {reason}")


class StateError(ReplicatorError):
    """The member's saved state cannot be read or written."""

"""The broker's registry: every summary object it holds, which collection brought it, until
when it is valid, and the numbered changes that the index and replicas follow.

``Registry`` (database) is its interface; each concept has a module of its own: the objects
and their lifetimes (objects), pulls staged and applied in one transaction (pulls), the change
sequence and its tombstones (changes), the replicas' versions and transfers (replica), the
SQLite connections and their threads (store), and the schema with every statement (schema).
"""

from broker.registry.changes import Change
from broker.registry.database import DAY, Registry, RegistryStats
from broker.registry.objects import CollectionState, Stored
from broker.registry.pulls import Applied, Pull, PullContext
from broker.registry.replica import ReplicaApplied, ReplicaChange

__all__ = [
    "DAY",
    "Applied",
    "Change",
    "CollectionState",
    "Pull",
    "PullContext",
    "Registry",
    "RegistryStats",
    "ReplicaApplied",
    "ReplicaChange",
    "Stored",
]

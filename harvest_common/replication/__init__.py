"""The replication protocol's types, shared by the broker's replica API and the replicator:
object versions (``version``), change lists and transfers (``wire``) and the Merkle trees that
anti-entropy compares (``merkle``). Pure: bytes and values in, values out."""

__all__: list[str] = []

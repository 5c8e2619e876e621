"""Harvest's Replicator: keeps broker collections and the server registry equal across mirrors.

Not built yet: see the open issues."""

__all__: list[str] = []

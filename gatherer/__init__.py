"""Harvest's Gatherer: crawls providers through the cache and summarizes documents into SOIF.

Not built yet: see the open issues."""

__all__: list[str] = []
